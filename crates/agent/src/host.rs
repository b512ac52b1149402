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

use crate::AgentOptions;
use eckpt_cluster_api::ClusterError;

/// Stack of an agent's thread: its runtime polls the agent's futures on it.
const AGENT_STACK: usize = 1 << 20;

/// One hosted agent.
struct Hosted {
    /// Resolves the agent's `killed` future.
    kill: oneshot::Sender<()>,
    /// The agent's thread, which logs why the agent ended if it failed.
    thread: JoinHandle<()>,
}

/// Agents running in this process, by node name. Dropping the host kills them all.
#[derive(Default)]
pub struct AgentHost {
    agents: BTreeMap<String, Hosted>,
}

impl AgentHost {
    /// Starts an agent per `options` and returns at once: whether each registered is the
    /// coordinator's to say (its status); one refused ends, with the reason in the log.
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
        let node = name.clone();
        let thread = std::thread::Builder::new()
            .name(format!("agent-{name}"))
            .stack_size(AGENT_STACK)
            .spawn(move || {
                let ran = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| ClusterError::Internal(format!("starting the agent's runtime: {e}")))
                    // Either end drops the runtime, and with it every task of this agent.
                    .and_then(|rt| {
                        rt.block_on(crate::run_hosted(options, async {
                            let _ = killed.await;
                        }))
                    });
                if let Err(e) = ran {
                    tracing::error!(node = %node, error = %e, "agent ended");
                }
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
        // A panic aborts a crash-only host; one without the hook sees it here.
        hosted
            .thread
            .join()
            .map_err(|_| ClusterError::Internal(format!("the agent of node {node} panicked")))
    }
}

impl Drop for AgentHost {
    fn drop(&mut self) {
        let threads: Vec<_> = std::mem::take(&mut self.agents)
            .into_values()
            .map(|hosted| {
                let _ = hosted.kill.send(());
                hosted.thread
            })
            .collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}
