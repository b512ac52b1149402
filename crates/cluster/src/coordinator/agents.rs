//! How the coordinator reaches its agents: one request, one answer. A trait, so that the
//! executors (epoch, recovery, export, flush) run the same over the cluster's sockets in
//! the daemon and over agents in memory in their unit tests (`memory_agents`).

use std::future::Future;
use std::pin::Pin;

use eckpt_cluster_api::msg::{AgentRequest, AgentResponse, Hello, NodeInfo};
use eckpt_cluster_api::net::{call, node_error, open_node_as};
use eckpt_cluster_api::ClusterError;
use eckpt_proto::ClusterSecret;

/// An agent's answer to come.
pub(super) type Answer = Pin<Box<dyn Future<Output = Result<AgentResponse, ClusterError>> + Send>>;

/// The agents of a cluster, as the coordinator asks them.
pub(super) trait Agents: Send + Sync {
    /// Sends `request` to `node`'s agent; its answer, or an error naming the node (one it
    /// could not reach, or a refusal of its own). The caller bounds the wait: it gives up
    /// on a node that stops heartbeating.
    fn ask(&self, node: NodeInfo, request: AgentRequest) -> Answer;
}

/// Agents over the cluster's authenticated sockets: a connection per request.
pub(super) struct SocketAgents {
    /// This coordinator's host identity (an agent on the same host is reached over its Unix
    /// socket).
    pub host: String,
    pub secret: ClusterSecret,
    /// This coordinator's term, sent with every connection: an agent that follows a newer
    /// coordinator refuses it.
    pub term: u64,
}

impl Agents for SocketAgents {
    fn ask(&self, node: NodeInfo, request: AgentRequest) -> Answer {
        let (host, secret, term) = (self.host.clone(), self.secret.clone(), self.term);
        Box::pin(async move {
            let mut conn = open_node_as(&node, &host, &secret, &Hello::Coordinator { term }).await?;
            match call(&mut conn, &request)
                .await
                .map_err(|e| node_error(&node.name, e))?
            {
                AgentResponse::Error(e) => Err(ClusterError::remote(&node.name, e)),
                other => Ok(other),
            }
        })
    }
}
