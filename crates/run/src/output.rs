//! Every rank's output, line by line, prefixed `[R] `: a reader thread per pipe writes each
//! whole line with one locked write, so lines of different ranks never interleave. Under
//! `mpirun` the ranks' lines arrive on its pipes tagged `[1,R]<stdout>:` (`--tag-output`)
//! and are re-tagged the same way.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where a program's lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// Our stdout.
    Stdout,
    /// Our stderr.
    Stderr,
}

impl Sink {
    fn write_line(self, prefix: &str, line: &[u8]) {
        let mut text = Vec::with_capacity(prefix.len() + line.len() + 1);
        text.extend_from_slice(prefix.as_bytes());
        text.extend_from_slice(line);
        if !text.ends_with(b"\n") {
            text.push(b'\n');
        }
        // A closed stdout (`eckpt run … | head`) must not stop the job.
        let _ = match self {
            Sink::Stdout => std::io::stdout().lock().write_all(&text),
            Sink::Stderr => std::io::stderr().lock().write_all(&text),
        };
    }
}

/// Where the program's stdout and stderr go: stderr stays stderr; stdout is ours unless
/// our stdout is reserved for JSON (`--json`), then it joins stderr.
#[derive(Debug, Clone, Copy)]
pub struct Sinks {
    /// For the program's stdout.
    pub out: Sink,
    /// For the program's stderr.
    pub err: Sink,
}

/// Forwards `from` line by line to `sink`, each line prefixed with `prefix`.
pub fn forward(from: impl Read + Send + 'static, prefix: String, sink: Sink) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            sink.write_line(&prefix, &line);
            line.clear();
        }
    })
}

/// What Open MPI says when a rank dies of a signal (its exit status alone does not tell).
const SIGNAL_DEATH: &str = "exited on signal";

/// Forwards `mpirun`'s output, re-tagging `[1,R]<stdout>:line` as `[R] line` to the sink
/// for its stream, and other lines (mpirun's own) to `own`. Sets `crashed` when mpirun
/// reports a rank killed by a signal.
pub fn forward_tagged(
    from: impl Read + Send + 'static,
    sinks: Sinks,
    own: Sink,
    crashed: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let text = String::from_utf8_lossy(&line);
            match untag(&text) {
                Some((rank, is_err, rest)) => {
                    let sink = if is_err { sinks.err } else { sinks.out };
                    sink.write_line(&format!("[{rank}] "), rest.as_bytes());
                }
                None => {
                    if text.contains(SIGNAL_DEATH) {
                        crashed.store(true, Ordering::SeqCst);
                    }
                    own.write_line("", &line);
                }
            }
            line.clear();
        }
    })
}

/// `[1,R]<stdout>:rest` → `(R, false, rest)`, `<stderr>` → `(R, true, rest)`.
fn untag(line: &str) -> Option<(u32, bool, &str)> {
    let inner = line.strip_prefix('[')?;
    let (ids, rest) = inner.split_once(']')?;
    let rank = ids.split_once(',')?.1.parse().ok()?;
    let (stream, rest) = rest.strip_prefix('<')?.split_once(">:")?;
    match stream {
        "stdout" => Some((rank, false, rest)),
        "stderr" => Some((rank, true, rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_mpi_tags_become_rank_prefixes() {
        assert_eq!(
            untag("[1,12]<stdout>:checksum: 7f\n"),
            Some((12, false, "checksum: 7f\n"))
        );
        assert_eq!(untag("[1,0]<stderr>:oops"), Some((0, true, "oops")));
        assert_eq!(untag("[1,0]<stddiag>:x"), None);
        assert_eq!(untag("mpirun noticed that process rank 2"), None);
        assert_eq!(untag("[vm:1234] *** Process received signal ***"), None);
    }
}
