//! The run's guard: ranks die with their supervisor. `eckpt run` starts `eckpt run-guard`
//! — a small process in a session of its own, so that a terminal's signals and a kill of
//! the supervisor's process group do not reach it — and keeps the write end of a pipe to
//! its standard input. However the supervisor ends, even by SIGKILL, the kernel closes that
//! pipe; unless the supervisor said `done` first (it stopped its ranks itself), the guard
//! SIGKILLs every process of the run on this host (found by the launch id in their
//! environment: ranks, what they started, `mpirun` and its daemons) and exits. Ranks on
//! other hosts die with `mpirun`, and any straggler is refused by the coordinator once the
//! dead supervisor's lease expires (and then ends itself).

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{procs, RunError};

/// What the supervisor writes before closing the pipe when it stopped its ranks itself.
const DONE: &[u8] = b"done\n";

/// How long the guard goes on finding and killing the run's processes (it knows no
/// cluster's deadlines: it reads only its pipe). Each pass takes a few milliseconds.
const KILL_WITHIN: Duration = Duration::from_secs(1);

/// A running guard, from the supervisor's side.
pub struct Guard {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl Guard {
    /// Starts `exe run-guard --run RUN` for the run whose launch ids are `RUN-<attempt>`.
    pub fn start(exe: &Path, run_id: &str) -> Result<Guard, RunError> {
        let mut command = Command::new(exe);
        command
            .args(["run-guard", "--run", run_id])
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        // SAFETY: setsid(2) is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| RunError::Launch(format!("starting the run's guard: {e}")))?;
        let pipe = child.stdin.take();
        Ok(Guard { child, pipe })
    }

    /// The supervisor stopped every rank itself: the guard exits without killing.
    pub fn release(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(DONE);
        }
        let _ = self.child.wait();
    }
}

/// The guard's side: waits until the supervisor's end of the pipe on standard input
/// closes; unless it said `done`, kills every process of run `run_id` on this host. Returns
/// how many processes it killed.
pub fn watch(run_id: &str) -> usize {
    let mut said = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut said);
    if said == DONE {
        return 0;
    }
    procs::end_run(run_id, Instant::now() + KILL_WITHIN)
}
