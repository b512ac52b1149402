//! Many agents in one process: the real agent code, one thread and runtime per agent, so
//! that a machine can stand in for thousands of nodes (`eckpt bench control`).
//!
//! A process per agent costs a few MiB of memory, a dozen threads and a scheduler slot each:
//! 4,096 of them do not fit on a small machine, and their start alone takes minutes. A
//! hosted agent is the same code as the daemon (`agent::run_hosted`), with its session on
//! its own runtime instead of a second thread. Killing one drops its runtime, which ends
//! every task and closes every socket of that agent and nothing else — what the cluster
//! sees of a node that crashed.

use std::collections::BTreeMap;
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::agent::{self, AgentOptions};
use eckpt_cluster_api::ClusterError;

/// Stack of an agent's thread: its runtime polls the agent's futures on it.
const AGENT_STACK: usize = 1 << 20;

/// One hosted agent.
struct Hosted {
    /// Resolves the agent's `killed` future.
    kill: oneshot::Sender<()>,
    /// The agent's thread: what `run_hosted` returned, or why the runtime did not start.
    thread: JoinHandle<Result<(), ClusterError>>,
}

/// Agents running in this process, by node name. Dropping the host kills them all.
#[derive(Default)]
pub struct AgentHost {
    agents: BTreeMap<String, Hosted>,
}

impl AgentHost {
    /// Starts an agent per `options` and returns at once: whether each registered is the
    /// coordinator's to say (its status), and one refused ends ([`AgentHost::ended`]).
    pub fn start(options: Vec<AgentOptions>) -> Result<AgentHost, ClusterError> {
        let mut host = AgentHost::default();
        for options in options {
            host.add(options)?;
        }
        Ok(host)
    }

    /// Starts one more agent.
    pub fn add(&mut self, options: AgentOptions) -> Result<(), ClusterError> {
        let name = options.name.clone();
        if self.agents.contains_key(&name) {
            return Err(ClusterError::Invalid(format!(
                "node {name} is hosted here already"
            )));
        }
        let (kill, killed) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("agent-{name}"))
            .stack_size(AGENT_STACK)
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ClusterError::Internal(format!("starting the agent's runtime: {e}")))?;
                // Either end drops the runtime, and with it every task of this agent.
                rt.block_on(agent::run_hosted(options, async {
                    let _ = killed.await;
                }))
            })
            .map_err(|e| ClusterError::Internal(format!("starting the thread of agent {name}: {e}")))?;
        self.agents.insert(name, Hosted { kill, thread });
        Ok(())
    }

    /// Kills the agent of `node` as a crash would (its store stays as it was) and waits
    /// until every task of it has ended.
    pub fn kill(&mut self, node: &str) -> Result<(), ClusterError> {
        let hosted = self
            .agents
            .remove(node)
            .ok_or_else(|| ClusterError::NotFound(format!("node {node} is not hosted here")))?;
        let _ = hosted.kill.send(());
        join(node, hosted.thread).map(|_| ())
    }

    /// The agents that ended by themselves (refused, or failed to start), with why; they
    /// are no longer hosted.
    pub fn ended(&mut self) -> Vec<(String, String)> {
        let done: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, h)| h.thread.is_finished())
            .map(|(name, _)| name.clone())
            .collect();
        done.into_iter()
            .filter_map(|name| {
                let hosted = self.agents.remove(&name)?;
                let why = match join(&name, hosted.thread) {
                    Ok(Ok(())) => "stopped".to_string(),
                    Ok(Err(e)) | Err(e) => e.to_string(),
                };
                Some((name, why))
            })
            .collect()
    }

    /// Names of the agents hosted.
    pub fn nodes(&self) -> impl Iterator<Item = &String> {
        self.agents.keys()
    }
}

/// Waits for an agent's thread: what the agent returned, or an error if its thread panicked
/// (which crash-only daemons abort on, so only a host without the hook sees it).
fn join(
    node: &str,
    thread: JoinHandle<Result<(), ClusterError>>,
) -> Result<Result<(), ClusterError>, ClusterError> {
    thread
        .join()
        .map_err(|_| ClusterError::Internal(format!("the agent of node {node} panicked")))
}

impl Drop for AgentHost {
    fn drop(&mut self) {
        let agents = std::mem::take(&mut self.agents);
        let threads: Vec<_> = agents
            .into_iter()
            .map(|(name, hosted)| {
                let _ = hosted.kill.send(());
                (name, hosted.thread)
            })
            .collect();
        for (name, thread) in threads {
            let _ = join(&name, thread);
        }
    }
}
