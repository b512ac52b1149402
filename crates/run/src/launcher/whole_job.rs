//! An attempt started by one launcher process for the whole job (`mpirun`, srun): its
//! exit ends the attempt; its pipes carry every rank's tagged output; stopping it kills its
//! process group, whatever the launcher's own way of ending its ranks elsewhere is
//! ([`WholeJob::cancel`]), and the processes carrying the launch id on this host.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{end_output, ending, kill_group, kill_launch, own_process_group, Attempt, Ending};
use crate::output::{forward_tagged, Forwarder, Sink, Sinks, Tags};
use crate::procs;
use crate::RunError;

/// How the launcher's ranks on other hosts are ended when the attempt stops (srun's step
/// is cancelled through Slurm; `mpirun`'s daemons die with it).
pub type Cancel = Box<dyn FnMut() + Send>;

/// The running launcher.
pub struct WholeJob {
    launch: String,
    child: Child,
    crashed: Arc<AtomicBool>,
    forwarders: Vec<Forwarder>,
    /// How long its output is read once it exited.
    output_drain: Duration,
    ended: bool,
    /// Ranks seen running on this host (`exited` compares with what runs now).
    seen: BTreeSet<u32>,
    cancel: Option<Cancel>,
}

impl WholeJob {
    /// Spawns `command` in a process group of its own, its output forwarded by `tags` and
    /// read for at most `output_drain` after it exited; `install` says how to get the
    /// launcher when it cannot be started.
    pub fn spawn(
        mut command: Command,
        launch: &str,
        output_drain: Duration,
        sinks: Sinks,
        tags: [Tags; 2],
        install: &str,
        cancel: Option<Cancel>,
    ) -> Result<WholeJob, RunError> {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        own_process_group(&mut command);
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .spawn()
            .map_err(|e| RunError::Launch(format!("starting {program}: {e} ({install})")))?;
        let crashed = Arc::new(AtomicBool::new(false));
        // Both were set to `Stdio::piped()` above, so the child has both pipes.
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let forwarders = vec![
            forward_tagged(out.expect("piped"), tags[0], sinks, Sink::Stderr, crashed.clone()),
            forward_tagged(err.expect("piped"), tags[1], sinks, Sink::Stderr, crashed.clone()),
        ];
        Ok(WholeJob {
            launch: launch.to_string(),
            child,
            crashed,
            forwarders,
            output_drain,
            ended: false,
            seen: BTreeSet::new(),
            cancel,
        })
    }

    fn join_output(&mut self) {
        end_output(&mut self.forwarders, self.output_drain);
    }
}

impl Attempt for WholeJob {
    fn poll(&mut self) -> Option<Ending> {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            Err(_) => {
                return Some(Ending::Killed {
                    rank: None,
                    signal: None,
                })
            }
        };
        self.ended = true;
        // Its last lines say whether a rank died of a signal.
        self.join_output();
        match ending(None, status) {
            Ending::Failed { .. } if self.crashed.load(Ordering::SeqCst) => Some(Ending::Killed {
                rank: None,
                signal: None,
            }),
            other => Some(other),
        }
    }

    fn exited(&mut self) -> BTreeSet<u32> {
        let running = procs::running_ranks(&self.launch);
        self.seen.extend(running.iter().copied());
        self.seen.difference(&running).copied().collect()
    }

    fn stop(&mut self) {
        if let Some(cancel) = self.cancel.as_mut() {
            cancel();
        }
        if !self.ended {
            kill_group(self.child.id());
        }
        // The launcher's daemons and the ranks they started carry the launch id.
        kill_launch(&self.launch);
        let _ = self.child.wait();
        self.ended = true;
        self.join_output();
    }
}

impl Drop for WholeJob {
    fn drop(&mut self) {
        self.stop();
    }
}
