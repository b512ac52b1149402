//! How the coordinator reaches its agents: one request, one answer. A trait, so that the
//! executors (epoch, recovery, export, flush) run the same over the cluster's sockets in
//! the daemon and over agents in memory in their unit tests (`memory_agents`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use eckpt_cluster_api::msg::{AgentRequest, AgentResponse, Hello, NodeInfo};
use eckpt_cluster_api::net::{call, node_error, open_node_as, with_agent};
use eckpt_cluster_api::ClusterError;
use eckpt_proto::ClusterSecret;

/// An agent's answer to come.
pub(super) type Answer = Pin<Box<dyn Future<Output = Result<AgentResponse, ClusterError>> + Send>>;

/// The agents of a cluster, as the coordinator asks them.
pub(super) trait Agents: Send + Sync {
    /// Sends `request` to `node`'s agent; its answer, or an error naming the node (one it
    /// could not reach, or a refusal of its own). A request of constant work gets its answer
    /// within the peer wait ([`AgentRequest::is_constant_work`]); the caller bounds the
    /// others: it gives up on a node that stops heartbeating.
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
    /// How long a request of constant work waits for its answer (the cluster's peer wait).
    pub answer_wait: Duration,
}

impl Agents for SocketAgents {
    fn ask(&self, node: NodeInfo, request: AgentRequest) -> Answer {
        let (host, secret, term) = (self.host.clone(), self.secret.clone(), self.term);
        let answer_wait = request.is_constant_work().then_some(self.answer_wait);
        Box::pin(async move {
            let mut conn = open_node_as(&node, &host, &secret, &Hello::Coordinator { term }).await?;
            let answered = async {
                call(&mut conn, &request)
                    .await
                    .map_err(|e| node_error(&node.name, e))
            };
            let answered = match answer_wait {
                Some(wait) => with_agent(&node.name, "the request", wait, answered).await?,
                None => answered.await?,
            };
            match answered {
                AgentResponse::Error(e) => Err(ClusterError::remote(&node.name, e)),
                other => Ok(other),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use eckpt_cluster_api::call::Call;
    use eckpt_cluster_api::msg::{Abort, ExportItems};
    use eckpt_proto::{listen, Endpoint};

    use super::*;

    /// An agent that takes every request and answers none: a handler that hangs while its
    /// heartbeats go on.
    async fn silent_agent(secret: &ClusterSecret) -> NodeInfo {
        let any_port = Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 0,
        };
        let listener = listen(&any_port, secret).await.unwrap();
        let tcp = listener.local_endpoint().clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok(incoming) = listener.accept().await {
                held.extend(incoming.authenticate().await);
            }
        });
        NodeInfo {
            name: "silent".into(),
            spare: false,
            tcp,
            unix: Endpoint::Unix(PathBuf::from("/nonexistent/silent.sock")),
            host: "another host".into(),
            cores: 1,
            store: PathBuf::from("/nonexistent/silent"),
            pid: 1,
        }
    }

    #[tokio::test]
    async fn a_request_of_constant_work_ends_within_the_answer_wait_one_moving_bytes_waits_on() {
        let secret = ClusterSecret::generate().unwrap();
        let node = silent_agent(&secret).await;
        let agents = SocketAgents {
            host: "this host".into(),
            secret,
            term: 1,
            answer_wait: Duration::from_millis(300),
        };
        let asked = Instant::now();
        let err = agents
            .ask(node.clone(), Abort { epoch: 3 }.request())
            .await
            .unwrap_err();
        assert!(matches!(err, ClusterError::NoAnswer(_)), "{err}");
        assert!(
            err.to_string()
                .contains("node silent took the request and then said nothing for 0.3 s"),
            "{err}"
        );
        assert!(asked.elapsed() < Duration::from_secs(5), "{:?}", asked.elapsed());

        // An export streams a rank's bytes for as long as they take: its caller bounds it
        // by the agent's liveness, not by the answer wait.
        let export = ExportItems {
            rank: 0,
            epoch: 3,
            scratch: None,
        };
        let exporting = agents.ask(node, export.request());
        assert!(
            tokio::time::timeout(Duration::from_secs(1), exporting)
                .await
                .is_err(),
            "an export ended by the answer wait"
        );
    }
}
