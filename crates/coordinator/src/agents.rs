//! How the coordinator reaches its agents: one request, one answer, on connections kept
//! between requests. A trait, so that the
//! executors (epoch, recovery, export, flush) run the same over the cluster's sockets in
//! the daemon and over agents in memory in their unit tests (`memory_agents`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use eckpt_cluster_api::msg::{AgentRequest, AgentResponse, Hello, NodeInfo};
use eckpt_cluster_api::net::{answer_of_agent, node_error, open_node_as, with_agent};
use eckpt_cluster_api::ClusterError;
use eckpt_proto::{ClusterSecret, Connection, Endpoint};

/// An agent's answer to come.
pub(super) type Answer = Pin<Box<dyn Future<Output = Result<AgentResponse, ClusterError>> + Send>>;

/// The agents of a cluster, as the coordinator asks them.
pub(super) trait Agents: Send + Sync {
    /// Sends `request` to `node`'s agent; its answer, or an error naming the node (one it
    /// could not reach, or a refusal of its own). A request of constant work gets its answer
    /// within the peer wait ([`AgentRequest::is_constant_work`]); one whose agent reports
    /// its work ([`AgentRequest::reports_working`]) hears from it within the liveness
    /// period; the caller bounds the streams: it gives up on a node that stops heartbeating.
    fn ask(&self, node: NodeInfo, request: AgentRequest) -> Answer;
}

/// Agents over the cluster's authenticated sockets. A connection whose request was
/// answered is kept for the node's next request: opening one (connect, handshake, hello)
/// cost the coordinator twice what the request itself did, at every node of every epoch.
pub(super) struct SocketAgents {
    /// This coordinator's host identity (an agent on the same host is reached over its Unix
    /// socket).
    pub host: String,
    pub secret: ClusterSecret,
    /// This coordinator's term, sent with every connection: an agent that follows a newer
    /// coordinator refuses it, on a kept connection too.
    pub term: u64,
    /// How long a request of constant work waits for its answer (the cluster's peer wait).
    pub answer_wait: Duration,
    /// How long a request whose agent reports its work waits between two reports (the
    /// cluster's liveness period: an agent silent that long on it is as good as dead, even
    /// while its heartbeats, on another connection, go on).
    pub report_wait: Duration,
    /// Connections between requests.
    pub idle: IdleConnections,
}

impl Agents for SocketAgents {
    fn ask(&self, node: NodeInfo, request: AgentRequest) -> Answer {
        let (host, secret, term) = (self.host.clone(), self.secret.clone(), self.term);
        let answer_wait = if request.is_constant_work() {
            Some(self.answer_wait)
        } else {
            request.reports_working().then_some(self.report_wait)
        };
        let reusable = request.is_one_exchange();
        let idle = self.idle.clone();
        Box::pin(async move {
            let mut conn = match idle.take(&node) {
                Some(conn) => conn,
                None => open_node_as(&node, &host, &secret, &Hello::Coordinator { term }).await?,
            };
            // The request is bounded as its answer is: an agent stopped with its socket's
            // buffer full would otherwise hold the send.
            let sent = async {
                conn.send_control(&request)
                    .await
                    .map_err(|e| node_error(&node.name, ClusterError::from(e)))
            };
            match answer_wait {
                Some(wait) => with_agent(&node.name, "the request", wait, sent).await?,
                None => sent.await?,
            }
            let answered = match answer_wait {
                Some(wait) => answer_of_agent(&mut conn, &node.name, wait).await?,
                None => conn
                    .recv_control()
                    .await
                    .map_err(|e| node_error(&node.name, ClusterError::from(e)))?,
            };
            // Answered whole: the connection is between requests again. One that failed
            // or timed out is dropped (closed) with its half-read answer.
            if reusable {
                idle.put(&node, conn);
            }
            match answered {
                AgentResponse::Error(e) => Err(ClusterError::remote(&node.name, e)),
                other => Ok(other),
            }
        })
    }
}

/// Connections to agents between requests, by node. A connection is taken by one request
/// at a time (requests to one node at once open more); one kept past the reuse limit, or
/// made to an agent process the node no longer has, or one the agent closed, is closed
/// instead of reused.
#[derive(Clone)]
pub(super) struct IdleConnections {
    kept: Arc<Mutex<BTreeMap<String, Vec<Kept>>>>,
    /// Half the agents' [`Deadlines::control_idle`](eckpt_cluster_api::dirs::Deadlines::control_idle).
    reuse_within: Duration,
}

struct Kept {
    /// The agent process and address the connection was made to.
    pid: u32,
    tcp: Endpoint,
    since: Instant,
    conn: Connection,
}

/// Connections kept per node: requests to one node overlap rarely (a task and its cancel).
const KEPT_PER_NODE: usize = 2;

impl IdleConnections {
    /// No connection yet; `control_idle` is how long agents keep an idle one open.
    pub fn new(control_idle: Duration) -> IdleConnections {
        IdleConnections {
            kept: Arc::default(),
            reuse_within: control_idle / 2,
        }
    }

    fn take(&self, node: &NodeInfo) -> Option<Connection> {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let conns = kept.get_mut(&node.name)?;
        let fresh = conns
            .pop()
            .filter(|k| k.pid == node.pid && k.tcp == node.tcp && k.since.elapsed() < self.reuse_within);
        let fresh = fresh.and_then(|mut k| (!k.conn.is_spent()).then_some(k));
        // Older ones, ones the agent closed, or ones made to another agent process, are of
        // no more use.
        if fresh.is_none() {
            conns.clear();
        }
        if conns.is_empty() {
            kept.remove(&node.name);
        }
        fresh.map(|k| k.conn)
    }

    fn put(&self, node: &NodeInfo, conn: Connection) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let conns = kept.entry(node.name.clone()).or_default();
        if conns.len() < KEPT_PER_NODE {
            conns.push(Kept {
                pid: node.pid,
                tcp: node.tcp.clone(),
                since: Instant::now(),
                conn,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Instant;

    use eckpt_cluster_api::call::Call;
    use eckpt_cluster_api::msg::{Abort, ExportItems, Scrub};
    use eckpt_proto::{listen, Endpoint};

    use super::*;

    /// An agent that takes every request and answers none: a handler that hangs while its
    /// heartbeats go on.
    async fn silent_agent(secret: &ClusterSecret) -> NodeInfo {
        scripted_agent(secret, 0, false).await
    }

    /// An agent that reports its work on each request `reports` times, 100 ms apart, and
    /// then answers it, if `answers`, or goes silent.
    async fn scripted_agent(secret: &ClusterSecret, reports: usize, answers: bool) -> NodeInfo {
        let any_port = Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 0,
        };
        let listener = listen(&any_port, secret).await.unwrap();
        let tcp = listener.local_endpoint().clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok(incoming) = listener.accept().await {
                let Ok(mut conn) = incoming.authenticate().await else {
                    continue;
                };
                let _hello: Hello = conn.recv_control().await.unwrap();
                let _request: AgentRequest = conn.recv_control().await.unwrap();
                for _ in 0..reports {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    conn.send_control(&AgentResponse::Working).await.unwrap();
                }
                if answers {
                    conn.send_control(&AgentResponse::Ok).await.unwrap();
                }
                held.push(conn);
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

    fn agents_waiting(secret: ClusterSecret, answer_wait: Duration, report_wait: Duration) -> SocketAgents {
        SocketAgents {
            host: "this host".into(),
            secret,
            term: 1,
            answer_wait,
            report_wait,
            idle: IdleConnections::new(Duration::from_secs(60)),
        }
    }

    fn scrub() -> AgentRequest {
        Scrub {
            ranks: vec![0],
            epoch: 3,
            objects: Vec::new(),
        }
        .request()
    }

    #[tokio::test]
    async fn a_request_whose_agent_reports_its_work_waits_as_long_as_the_reports_come() {
        let secret = ClusterSecret::generate().unwrap();
        // Eight reports, 0.8 s in all, each well within the 0.3 s between them.
        let node = scripted_agent(&secret, 8, true).await;
        let agents = agents_waiting(secret, Duration::from_millis(300), Duration::from_millis(300));
        let asked = Instant::now();
        let answer = agents.ask(node, scrub()).await.unwrap();
        assert!(matches!(answer, AgentResponse::Ok), "{answer:?}");
        assert!(
            asked.elapsed() >= Duration::from_millis(800),
            "{:?}",
            asked.elapsed()
        );
    }

    #[tokio::test]
    async fn a_request_whose_agent_stops_reporting_ends_within_the_report_wait() {
        let secret = ClusterSecret::generate().unwrap();
        // Reports for 0.3 s, then nothing: the answer lost on a connection that stays up.
        let node = scripted_agent(&secret, 3, false).await;
        let agents = agents_waiting(secret, Duration::from_secs(60), Duration::from_millis(400));
        let asked = Instant::now();
        let err = agents.ask(node, scrub()).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("node silent took the request and then said nothing for 0.4 s"),
            "{err}"
        );
        let took = asked.elapsed();
        assert!(
            took >= Duration::from_millis(700) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn a_request_of_constant_work_ends_within_the_answer_wait_one_moving_bytes_waits_on() {
        let secret = ClusterSecret::generate().unwrap();
        let node = silent_agent(&secret).await;
        let agents = agents_waiting(secret, Duration::from_millis(300), Duration::from_secs(60));
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
