//! Every rank's output, line by line, prefixed `[R] `: a reader thread per pipe writes each
//! whole line with one locked write, so lines of different ranks never interleave. Under
//! `mpirun` or srun the ranks' lines arrive on its pipes tagged (`--tag-output`,
//! `--label`) and are re-tagged the same way.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where a program's lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// Our stdout.
    Stdout,
    /// Our stderr.
    Stderr,
}

impl Sink {
    pub(crate) fn write_line(self, prefix: &str, line: &[u8]) {
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

/// A thread forwarding a child's pipe, and the pipe's inode, by which the processes still
/// holding it open are found ([`drain`]).
pub struct Forwarder {
    thread: JoinHandle<()>,
    pipe: Option<u64>,
}

impl Forwarder {
    fn start(
        from: impl Read + AsFd + Send + 'static,
        forward: impl FnOnce(BufReader<Box<dyn Read + Send>>) + Send + 'static,
    ) -> Forwarder {
        let pipe = from
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .and_then(|fd| std::fs::File::from(fd).metadata().ok())
            .map(|m| m.ino());
        let from: Box<dyn Read + Send> = Box::new(from);
        Forwarder {
            thread: std::thread::spawn(move || forward(BufReader::new(from))),
            pipe,
        }
    }
}

/// Joins the forwarders of processes that exited, as each reaches the end of its pipe, for
/// at most `within`: a process they left behind holding a pipe open (an `mpirun` or srun
/// helper, a daemon a rank started) would otherwise hold the run for as long as it lives.
/// Past `within`, the forwarders still reading are left to end with their pipes, and the
/// line returned names who holds them.
pub fn drain(forwarders: &mut Vec<Forwarder>, within: Duration) -> Option<String> {
    let deadline = Instant::now() + within;
    while forwarders.iter().any(|f| !f.thread.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (ended, held): (Vec<Forwarder>, Vec<Forwarder>) =
        forwarders.drain(..).partition(|f| f.thread.is_finished());
    for forwarder in ended {
        let _ = forwarder.thread.join();
    }
    if held.is_empty() {
        return None;
    }
    let holders: BTreeSet<String> = held
        .iter()
        .filter_map(|f| f.pipe)
        .flat_map(pipe_holders)
        .collect();
    let who = if holders.is_empty() {
        "a process".to_string()
    } else {
        holders.into_iter().collect::<Vec<_>>().join(", ")
    };
    Some(format!(
        "the ranks' output is still held open {:.1} s after they ended, by {who}: not waiting for it",
        within.as_secs_f64()
    ))
}

/// The processes (`pid (command)`) other than this one holding pipe `inode` open.
fn pipe_holders(inode: u64) -> Vec<String> {
    let me = std::process::id().to_string();
    let target = format!("pipe:[{inode}]");
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    processes
        .flatten()
        .map(|p| p.file_name().to_string_lossy().into_owned())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && *pid != me)
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten()
                    .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()))
            })
        })
        .map(|pid| {
            let command = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} ({})", command.trim())
        })
        .collect()
}

/// Forwards `from` line by line to `sink`, each line prefixed with `prefix`.
pub fn forward(from: impl Read + AsFd + Send + 'static, prefix: String, sink: Sink) -> Forwarder {
    Forwarder::start(from, move |mut reader| {
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            sink.write_line(&prefix, &line);
            line.clear();
        }
    })
}

/// How a launcher of the whole job marks its ranks' lines on its pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tags {
    /// Open MPI's `--tag-output`: `[1,R]<stdout>:line`, `[1,R]<stderr>:line`, on either pipe.
    OpenMpi,
    /// srun's `--label`: `R: line`, the ranks' stdout on srun's stdout and their stderr on
    /// its stderr (`from_stderr`: which pipe this is).
    Srun {
        /// Whether the pipe is srun's stderr.
        from_stderr: bool,
    },
    /// Hydra's `-prepend-rank`: `[R] line`, the ranks' stdout on mpiexec's stdout and their
    /// stderr on its stderr.
    Hydra {
        /// Whether the pipe is mpiexec's stderr.
        from_stderr: bool,
    },
}

impl Tags {
    /// `(rank, is the rank's stderr, the line)` of a rank's line; `None` for the
    /// launcher's own.
    fn untag(self, line: &str) -> Option<(u32, bool, &str)> {
        match self {
            Tags::OpenMpi => untag_open_mpi(line),
            Tags::Srun { from_stderr } => {
                let (rank, rest) = line.trim_start().split_once(": ")?;
                Some((rank.parse().ok()?, from_stderr, rest))
            }
            Tags::Hydra { from_stderr } => {
                let (rank, rest) = line.strip_prefix('[')?.split_once("] ")?;
                Some((rank.parse().ok()?, from_stderr, rest))
            }
        }
    }

    /// Whether the launcher's own line says a rank died of a signal (its exit status alone
    /// does not tell).
    fn says_crashed(self, line: &str) -> bool {
        match self {
            Tags::OpenMpi => line.contains("exited on signal"),
            // `srun: error: node2: task 3: Killed` (or Segmentation fault, Aborted …), but
            // not `task 3: Exited with exit code 2`; and `srun: error: Node failure on
            // node2`: Slurm ended the step because a node of it is down.
            Tags::Srun { .. } => {
                line.starts_with("srun: error: Node failure on ")
                    || (line.starts_with("srun: error: ")
                        && line.contains(": task ")
                        && !line.contains("Exited with exit code"))
            }
            // `=   KILLED BY SIGNAL: 9 (Killed)` in Hydra's "bad termination" box.
            Tags::Hydra { .. } => line.contains("KILLED BY SIGNAL"),
        }
    }
}

/// Forwards a whole-job launcher's output, re-tagging each rank's line as `[R] line` to the
/// sink for its stream, and other lines (the launcher's own) to `own`. Sets `crashed` when
/// the launcher reports a rank killed by a signal.
pub fn forward_tagged(
    from: impl Read + AsFd + Send + 'static,
    tags: Tags,
    sinks: Sinks,
    own: Sink,
    crashed: Arc<AtomicBool>,
) -> Forwarder {
    Forwarder::start(from, move |mut reader| {
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let text = String::from_utf8_lossy(&line);
            match tags.untag(&text) {
                Some((rank, is_err, rest)) => {
                    let sink = if is_err { sinks.err } else { sinks.out };
                    sink.write_line(&format!("[{rank}] "), rest.as_bytes());
                }
                None => {
                    if tags.says_crashed(&text) {
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
fn untag_open_mpi(line: &str) -> Option<(u32, bool, &str)> {
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
        let tags = Tags::OpenMpi;
        assert_eq!(
            tags.untag("[1,12]<stdout>:checksum: 7f\n"),
            Some((12, false, "checksum: 7f\n"))
        );
        assert_eq!(tags.untag("[1,0]<stderr>:oops"), Some((0, true, "oops")));
        assert_eq!(tags.untag("[1,0]<stddiag>:x"), None);
        assert_eq!(tags.untag("mpirun noticed that process rank 2"), None);
        assert_eq!(tags.untag("[vm:1234] *** Process received signal ***"), None);
        assert!(tags.says_crashed(
            "mpirun noticed that process rank 2 with PID 7 on node n1 exited on signal 9 (Killed)."
        ));
    }

    #[test]
    fn srun_labels_become_rank_prefixes() {
        let out = Tags::Srun { from_stderr: false };
        let err = Tags::Srun { from_stderr: true };
        assert_eq!(out.untag("3: checksum: 7f\n"), Some((3, false, "checksum: 7f\n")));
        assert_eq!(out.untag(" 0: step 1"), Some((0, false, "step 1")));
        assert_eq!(err.untag("12: oops"), Some((12, true, "oops")));
        assert_eq!(err.untag("srun: error: node2: task 3: Killed"), None);
        assert!(err.says_crashed("srun: error: node2: task 3: Killed"));
        assert!(err.says_crashed("srun: error: node2: task 0: Segmentation fault (core dumped)"));
        assert!(!err.says_crashed("srun: error: node2: task 3: Exited with exit code 2"));
        assert!(err.says_crashed("srun: error: Node failure on node3"));
        assert!(!err.says_crashed("srun: Job step aborted: Waiting up to 32 seconds for job step to finish."));
    }

    #[test]
    fn hydra_prefixes_become_rank_prefixes() {
        let out = Tags::Hydra { from_stderr: false };
        assert_eq!(
            out.untag("[3] checksum: 7f\n"),
            Some((3, false, "checksum: 7f\n"))
        );
        assert_eq!(out.untag("[mpiexec@node1] HYDU_sock_write"), None);
        assert_eq!(
            Tags::Hydra { from_stderr: true }.untag("[0] oops"),
            Some((0, true, "oops"))
        );
        assert!(out.says_crashed("=   KILLED BY SIGNAL: 9 (Killed)"));
        assert!(!out.says_crashed("=   EXIT CODE: 2"));
    }

    /// A process left behind holding a launcher's pipe (a shell's background job) does not
    /// hold whoever waits for the output: the wait ends after its bound, naming the holder.
    #[test]
    fn output_held_open_by_a_process_left_behind_is_given_up_after_its_bound() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 60 & echo started"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let group = child.id() as i32;
        let mut forwarders = vec![forward(child.stdout.take().unwrap(), "[0] ".into(), Sink::Stderr)];
        child.wait().unwrap();
        let started = Instant::now();
        let said = drain(&mut forwarders, Duration::from_millis(300));
        let waited = started.elapsed();
        // SAFETY: kill(2) of the process group this test started.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        assert!(waited < Duration::from_secs(3), "{waited:?}");
        let said = said.expect("the pipe is still held open");
        assert!(said.contains("(sleep)"), "{said}");
        assert!(forwarders.is_empty());

        // Output whose writers all ended is read to its end.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo done"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut forwarders = vec![forward(child.stdout.take().unwrap(), "[0] ".into(), Sink::Stderr)];
        child.wait().unwrap();
        assert_eq!(drain(&mut forwarders, Duration::from_secs(30)), None);
    }
}
