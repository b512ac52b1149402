//! The local launcher: every rank a child of `eckpt run`, started in its node's network
//! namespace, in a process group of its own, its output forwarded line by line.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{end_output, ending, kill_group, kill_launch, own_process_group, Attempt, Ending, LaunchSpec};
use crate::output::{forward, Forwarder};
use crate::torch_env;
use crate::RunError;

/// The ranks of one attempt.
pub struct LocalAttempt {
    launch: String,
    ranks: Vec<(u32, Child)>,
    finished: Vec<u32>,
    forwarders: Vec<Forwarder>,
    /// How long the ranks' output is read once they ended.
    output_drain: Duration,
    stopped: bool,
}

/// Starts every rank; if one cannot start, those started are stopped.
pub fn start(spec: &LaunchSpec<'_>) -> Result<LocalAttempt, RunError> {
    let mut attempt = LocalAttempt {
        launch: spec.launch_id.to_string(),
        ranks: Vec::new(),
        finished: Vec::new(),
        forwarders: Vec::new(),
        output_drain: spec.output_drain,
        stopped: false,
    };
    for (&rank, node) in spec.placement {
        if let Err(e) = attempt.spawn(spec, rank, node) {
            attempt.stop();
            return Err(e);
        }
    }
    Ok(attempt)
}

impl LocalAttempt {
    fn spawn(&mut self, spec: &LaunchSpec<'_>, rank: u32, node: &str) -> Result<(), RunError> {
        let host = spec
            .hosts
            .get(node)
            .ok_or_else(|| RunError::Launch(format!("node {node} of rank {rank} is not running")))?;
        let nodes: Vec<&str> = spec.placement.values().map(String::as_str).collect();
        let torch_vars = torch_env::rank_vars(rank, &nodes).unwrap_or_default();
        let mut command = Command::new(&spec.command[0]);
        command
            .args(&spec.command[1..])
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .envs(torch_vars)
            .env("ECKPT_RANK", rank.to_string())
            .env("ECKPT_NODE", node)
            .env("ECKPT_LAUNCH", spec.launch_id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        host.enter(&mut command)?;
        own_process_group(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| RunError::Launch(format!("starting {}: {e}", spec.command[0])))?;
        let prefix = format!("[{rank}] ");
        // Both were set to `Stdio::piped()` above, so the child has both pipes.
        let (out, err) = (child.stdout.take(), child.stderr.take());
        self.forwarders
            .push(forward(out.expect("piped"), prefix.clone(), spec.sinks.out));
        self.forwarders
            .push(forward(err.expect("piped"), prefix, spec.sinks.err));
        self.ranks.push((rank, child));
        Ok(())
    }
}

impl Attempt for LocalAttempt {
    fn poll(&mut self) -> Option<Ending> {
        for (rank, child) in &mut self.ranks {
            if self.finished.contains(rank) {
                continue;
            }
            match child.try_wait() {
                Ok(Some(status)) => match ending(Some(*rank), status) {
                    Ending::Done => self.finished.push(*rank),
                    failure => return Some(failure),
                },
                Ok(None) => {}
                Err(_) => {
                    return Some(Ending::Killed {
                        rank: Some(*rank),
                        signal: None,
                    })
                }
            }
        }
        (self.finished.len() == self.ranks.len()).then_some(Ending::Done)
    }

    fn exited(&mut self) -> BTreeSet<u32> {
        self.finished.iter().copied().collect()
    }

    fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        for (_, child) in &self.ranks {
            kill_group(child.id());
        }
        kill_launch(&self.launch);
        for (_, child) in &mut self.ranks {
            let _ = child.wait();
        }
        end_output(&mut self.forwarders, self.output_drain);
    }
}

impl Drop for LocalAttempt {
    fn drop(&mut self) {
        self.stop();
    }
}
