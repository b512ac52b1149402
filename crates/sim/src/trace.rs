//! What happened in a simulated run, line by line, with the virtual time of each: faults
//! injected, the workload's steps, invariants broken, and the daemons' own log lines
//! (their `tracing` events, with the host each came from). Two runs of one seed write the
//! same lines; a failing seed prints them.

use std::fmt::Display;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

/// A run's trace, shared by its hosts, their workers and the simulation's loop.
pub type Trace = Arc<Lines>;

/// The lines of a trace.
#[derive(Default)]
pub struct Lines {
    lines: Mutex<Vec<String>>,
    /// Also print each line as it is written (to follow a run that hangs or aborts).
    echo: bool,
    /// The run's scratch directory, written `<root>` in lines (it differs from run to run).
    root: Mutex<Option<String>>,
}

/// The trace the daemons' log lines go to: the run in progress in this process.
static CURRENT: Mutex<Option<Trace>> = Mutex::new(None);

impl Lines {
    /// An empty trace; `echo`: print lines as they come too. It takes the daemons' log
    /// lines from now until the next trace is made.
    pub fn new(echo: bool) -> Trace {
        let trace = Arc::new(Lines {
            lines: Mutex::default(),
            echo,
            root: Mutex::default(),
        });
        capture_logs();
        *lock(&CURRENT) = Some(trace.clone());
        trace
    }

    /// Writes `root` as `<root>` from now on.
    pub fn set_root(&self, root: PathBuf) {
        *lock(&self.root) = Some(root.display().to_string());
    }

    /// Notes `what` happened on host `who`, now (from inside a host of the simulation).
    pub fn event(&self, who: &str, what: impl Display) {
        self.at(turmoil::sim_elapsed().unwrap_or_default(), who, what);
    }

    /// Notes `what` happened on `who` at virtual time `at`.
    pub fn at(&self, at: Duration, who: &str, what: impl Display) {
        self.push(format!("{:>10.3}s {who}: {what}", at.as_secs_f64()));
    }

    fn push(&self, line: String) {
        let line = match lock(&self.root).as_deref() {
            Some(root) => line.replace(root, "<root>"),
            None => line,
        };
        if self.echo {
            eprintln!("{line}");
        }
        lock(&self.lines).push(line);
    }

    /// How many lines there are so far, and how many of those from the `from`th on hold
    /// `needle`.
    pub fn count_since(&self, from: usize, needle: &str) -> (usize, usize) {
        let lines = lock(&self.lines);
        let found = lines.iter().skip(from).filter(|l| l.contains(needle)).count();
        (lines.len(), found)
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.lines).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends this process's log lines at `info` and above (`RUST_LOG` to choose others) to the
/// current trace, stamped with virtual time, from the first trace on.
fn capture_logs() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_timer(VirtualTime)
            .with_ansi(false)
            .with_target(false)
            .with_writer(|| ToTrace(Vec::new()))
            .finish();
        // A process whose subscriber was set already keeps it (its lines are not traced).
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// The simulation's clock in log lines (the thread's host's, or the last one polled).
struct VirtualTime;

impl FormatTime for VirtualTime {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(
            w,
            "{:>10.3}s",
            turmoil::sim_elapsed().unwrap_or_default().as_secs_f64()
        )
    }
}

/// One log line on its way to the current trace.
struct ToTrace(Vec<u8>);

impl Write for ToTrace {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for ToTrace {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        if let Some(trace) = lock(&CURRENT).as_ref() {
            trace.push(line.trim_end().to_string());
        }
    }
}
