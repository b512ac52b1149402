//! One rank under a whole-job launcher, and what it leaves behind. `mpirun`, Hydra's
//! `mpiexec` and Slurm's `srun` count a rank as ended only once its output pipes close, so a rank that leaves
//! a process holding them — a shell's background job, a daemon it started, even one in a
//! session of its own — holds the launcher, and with it `eckpt run`, for as long as that
//! process lives. So `eckpt run` starts each rank as `eckpt run-rank -- COMMAND…`: a child
//! subreaper (`PR_SET_CHILD_SUBREAPER`) that runs the command as its child, passes it the
//! signals the launcher sends, and once the command exits ends every process it left (each
//! orphan is reparented to the subreaper, whichever session it is in) before exiting as the
//! command did — by its exit code, or by the same signal — so the launcher sees the rank
//! end as it ended.

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use crate::torch_env;
use crate::RunError;

/// How long what a rank left behind gets to end on SIGTERM before it is SIGKILLed.
const TERM_GRACE: Duration = Duration::from_secs(2);

/// How long the reaper goes on ending and reaping leftovers (each pass takes
/// milliseconds; a process in uninterruptible sleep may not die at once).
const REAP_WITHIN: Duration = Duration::from_secs(10);

/// How often the reaper looks at its child and the signals it was sent.
const POLL: Duration = Duration::from_millis(10);

/// The signals a launcher sends a rank to stop it, which the reaper passes on.
const PASSED_ON: [i32; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// The last signal received and not yet passed on (0: none).
static PENDING: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_signal(signal: i32) {
    PENDING.store(signal, Ordering::SeqCst);
}

/// How the rank's command ended.
enum Ended {
    Code(i32),
    Signal(i32),
}

/// Runs `command` as the rank, ends what it left running, and exits as it did.
pub fn run(command: &[String]) -> Result<std::convert::Infallible, RunError> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| RunError::Launch("eckpt run-rank: no command to run".into()))?;
    // SAFETY: prctl(2) on this process; the handler only stores to an atomic.
    unsafe {
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
            return Err(RunError::Launch(format!(
                "eckpt run-rank: becoming a subreaper: {}",
                std::io::Error::last_os_error()
            )));
        }
        for signal in PASSED_ON {
            libc::signal(signal, note_signal as *const () as libc::sighandler_t);
        }
    }
    // torch.distributed's variables of this rank, as the local launcher sets them.
    let torch_vars = torch_env::rank_vars_from_env(|name| std::env::var(name).ok()).unwrap_or_default();
    let child = Command::new(program)
        .args(args)
        .envs(torch_vars)
        .spawn()
        .map_err(|e| RunError::Launch(format!("eckpt run-rank: starting {program}: {e}")))?;
    let ended = wait_passing_signals(child.id() as i32);
    let left = end_leftovers();
    if !left.is_empty() {
        // The launcher tags the line with the rank, as it does the rank's own output.
        let line = format!(
            "eckpt run-rank: the rank left {} running after it exited: ended {}\n",
            left.join(", "),
            if left.len() == 1 { "it" } else { "them" }
        );
        // One write: a launcher tags each write it reads with the rank.
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    exit_as(ended)
}

/// Waits for the rank's command, passing on each signal the launcher sends.
fn wait_passing_signals(child: i32) -> Ended {
    loop {
        let signal = PENDING.swap(0, Ordering::SeqCst);
        if signal != 0 {
            // SAFETY: kill(2) of our own child, not yet reaped.
            unsafe { libc::kill(child, signal) };
        }
        let mut status = 0;
        // SAFETY: waitpid(2) of our own child.
        let reaped = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if reaped == child {
            return if libc::WIFSIGNALED(status) {
                Ended::Signal(libc::WTERMSIG(status))
            } else {
                Ended::Code(libc::WEXITSTATUS(status))
            };
        }
        if reaped < 0 {
            // Not ours to wait for any more (cannot happen: nobody else reaps it).
            return Ended::Code(1);
        }
        std::thread::sleep(POLL);
    }
}

/// Ends the processes the rank left (SIGTERM, then SIGKILL after [`TERM_GRACE`]) and reaps
/// them, until none is left or [`REAP_WITHIN`]; `pid (command)` of each, for the one line
/// that says so.
fn end_leftovers() -> Vec<String> {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        reap();
        let children = children();
        if children.is_empty() || start.elapsed() > REAP_WITHIN {
            return seen;
        }
        let signal = if start.elapsed() < TERM_GRACE {
            libc::SIGTERM
        } else {
            libc::SIGKILL
        };
        for (pid, name) in children {
            let who = format!("{pid} ({name})");
            if !seen.contains(&who) {
                seen.push(who);
            }
            // SAFETY: kill(2) of our own child (reparented to this subreaper), not reaped.
            unsafe { libc::kill(pid, signal) };
        }
        std::thread::sleep(POLL);
    }
}

/// Reaps every child that has exited.
fn reap() {
    let mut status = 0;
    // SAFETY: waitpid(2) of any of our own children, without blocking.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}

/// This process's live children, with their command names (from `/proc`).
fn children() -> Vec<(i32, String)> {
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses.
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            let mut fields = rest.split(' ');
            let state = fields.next()?;
            let parent: i32 = fields.next()?.parse().ok()?;
            (parent == me && state != "Z").then(|| (pid, name.to_string()))
        })
        .collect()
}

/// Exits as the rank's command did: its code, or killed by its signal (the default action
/// restored first, so the launcher sees the signal, not an exit code).
fn exit_as(ended: Ended) -> ! {
    match ended {
        Ended::Code(code) => std::process::exit(code),
        Ended::Signal(signal) => {
            // SAFETY: restoring the default action and signalling this process.
            unsafe {
                libc::signal(signal, libc::SIG_DFL);
                libc::kill(libc::getpid(), signal);
            }
            // A signal whose default is not to end the process (none the rank died of).
            std::process::exit(128 + signal)
        }
    }
}
