//! Connections between cluster processes: picking the transport (Unix socket on the same
//! host, TCP otherwise), request/response over control frames, and the inbox where an
//! agent parks incoming peer streams until the task they belong to takes them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use eckpt_proto::{connect, listen, ClusterSecret, Connection, Endpoint, FrameReader, Listener};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::Notify;

use crate::call::{agent_answer, ToAgent};
use crate::dirs::Deadlines;
use crate::msg::{AgentResponse, Hello, NodeInfo};
use crate::ClusterError;

/// This process's host identity: the host name and the network namespace, since peers in
/// other namespaces cannot share a Unix socket path… they can, but then they bypass the
/// (shaped) network the namespaces exist to model, so they use TCP.
pub fn host_identity() -> String {
    let host = host_name();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{host}/{netns}")
}

/// This host's name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// Listens on `endpoint` for a daemon of the cluster: a peer that connects gets the
/// cluster's handshake wait to prove it holds `secret`.
pub async fn listen_for_cluster(
    endpoint: &Endpoint,
    secret: &ClusterSecret,
    deadlines: &Deadlines,
) -> Result<Listener, ClusterError> {
    let mut listener = listen(endpoint, secret).await?;
    listener.set_handshake_timeout(deadlines.handshake());
    Ok(listener)
}

/// Opens an authenticated connection to `endpoint` and says what it is for.
pub async fn open(
    endpoint: &Endpoint,
    secret: &ClusterSecret,
    hello: &Hello,
) -> Result<Connection, ClusterError> {
    let mut conn = connect(endpoint, secret).await?;
    conn.send_control(hello).await?;
    Ok(conn)
}

/// Opens a control connection to an agent, over the transport its location allows.
pub async fn open_node(
    node: &NodeInfo,
    my_host: &str,
    secret: &ClusterSecret,
) -> Result<Connection, ClusterError> {
    open_node_as(node, my_host, secret, &Hello::Control).await
}

/// [`open_node`], saying `hello` (the coordinator says its term).
pub async fn open_node_as(
    node: &NodeInfo,
    my_host: &str,
    secret: &ClusterSecret,
    hello: &Hello,
) -> Result<Connection, ClusterError> {
    open(node.endpoint_from(my_host), secret, hello)
        .await
        .map_err(|e| node_error(&node.name, e))
}

/// Wraps an error with the node it concerns.
pub fn node_error(node: &str, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Node {
        node: node.to_string(),
        reason: e.to_string(),
    }
}

/// Sends `request` and reads one response.
pub async fn call<Q: Serialize, R: DeserializeOwned>(
    conn: &mut Connection,
    request: &Q,
) -> Result<R, ClusterError> {
    conn.send_control(request).await?;
    Ok(conn.recv_control().await?)
}

/// Sends `request` to the agent of node `node` on `conn` and reads its answer, waiting at
/// most `answer` for it, or for each of its reports of work ([`answer_of_agent`]); the
/// agent's error answer becomes the error.
pub async fn ask_agent<C: ToAgent>(
    conn: &mut Connection,
    node: &str,
    request: C,
    answer: Duration,
) -> Result<C::Answer, ClusterError> {
    conn.send_control(&request.request()).await?;
    agent_answer::<C>(node, answer_of_agent(conn, node, answer).await?)
}

/// The answer of node `node`'s agent to the request just sent on `conn`, its reports of
/// work ([`AgentResponse::Working`]) passed over: each frame must come within `silence` of
/// the one before. For a request of constant work, which has no reports, that bounds the
/// whole exchange.
pub async fn answer_of_agent(
    conn: &mut Connection,
    node: &str,
    silence: Duration,
) -> Result<AgentResponse, ClusterError> {
    loop {
        let frame = async {
            conn.recv_control()
                .await
                .map_err(|e| node_error(node, ClusterError::from(e)))
        };
        match with_agent(node, "the request", silence, frame).await? {
            AgentResponse::Working => continue,
            answer => return Ok(answer),
        }
    }
}

/// `step`, one exchange with the agent of node `node` (`what`: a request, a stream), given
/// at most `limit`. The bound is what ends the exchange when the agent stops without its
/// host going away (SIGSTOPped, wedged): its kernel still acknowledges, so neither keepalive
/// nor `TCP_USER_TIMEOUT` ever fires, and a Unix socket has neither.
pub async fn with_agent<T, E>(
    node: &str,
    what: &str,
    limit: Duration,
    step: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ClusterError>
where
    ClusterError: From<E>,
{
    match tokio::time::timeout(limit, step).await {
        Ok(done) => Ok(done?),
        Err(_) => Err(ClusterError::NoAnswer(format!(
            "node {node} took {what} and then said nothing for {:.1} s (stopped, or cut off)",
            limit.as_secs_f64()
        ))),
    }
}

/// Accepts connections forever: each is authenticated in a task of its own (a slow or
/// hostile peer holds up nobody) and handed to `serve`; refusals are logged in one line.
pub async fn accept_loop<F, Fut>(listener: Listener, serve: F)
where
    F: Fn(Connection) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), ClusterError>> + Send + 'static,
{
    let serve = Arc::new(serve);
    loop {
        match listener.accept().await {
            Ok(incoming) => {
                let serve = serve.clone();
                tokio::spawn(async move {
                    match incoming.authenticate().await {
                        Ok(conn) => {
                            if let Err(e) = serve(conn).await {
                                tracing::debug!(error = %e, "connection ended");
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "refused a connection"),
                    }
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// The next request on a control connection, or `None` once the peer closed it cleanly.
pub async fn next_request<Q: DeserializeOwned>(conn: &mut Connection) -> Result<Option<Q>, ClusterError> {
    match conn.recv_control().await {
        Ok(r) => Ok(Some(r)),
        Err(eckpt_proto::ProtoError::Closed) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Where incoming peer streams wait for their task.
#[derive(Clone)]
pub struct Inbox {
    inner: Arc<InboxInner>,
}

/// `(task, phase, sending participant)`.
type StreamKey = (u64, u32, usize);

struct InboxInner {
    /// How long a task waits for a peer's stream (the cluster's `peer_wait`).
    peer_wait: Duration,
    streams: Mutex<BTreeMap<StreamKey, (FrameReader, Instant)>>,
    /// Tasks the coordinator cancelled (a participant is gone), with why, and when.
    cancelled: Mutex<BTreeMap<u64, (String, Instant)>>,
    arrived: Notify,
}

impl Inbox {
    /// An empty inbox whose tasks wait `peer_wait` for a peer's stream.
    pub fn new(peer_wait: Duration) -> Inbox {
        Inbox {
            inner: Arc::new(InboxInner {
                peer_wait,
                streams: Mutex::default(),
                cancelled: Mutex::default(),
                arrived: Notify::new(),
            }),
        }
    }

    /// How long a task waits for a peer: for its stream to connect, and on an established
    /// stream for each frame (the cluster's `peer_wait`).
    pub fn peer_wait(&self) -> Duration {
        self.inner.peer_wait
    }

    /// Parks the stream from participant `from` for `task` in `phase`.
    pub fn put(&self, task: u64, phase: u32, from: usize, reader: FrameReader) {
        let mut streams = self.inner.streams.lock().expect("inbox lock");
        // Streams nobody took for long belong to tasks that failed elsewhere.
        streams.retain(|_, (_, at)| at.elapsed() < self.inner.peer_wait * 2);
        streams.insert((task, phase, from), (reader, Instant::now()));
        drop(streams);
        self.inner.arrived.notify_waiters();
    }

    /// Cancels `task`: waits for its streams end at once with `reason` (a participant that
    /// is gone will never connect; waiting the peer wait for it would hold the epoch).
    pub fn cancel(&self, task: u64, reason: String) {
        let mut cancelled = self.inner.cancelled.lock().expect("inbox lock");
        cancelled.retain(|_, (_, at)| at.elapsed() < self.inner.peer_wait * 2);
        cancelled.insert(task, (reason, Instant::now()));
        drop(cancelled);
        self.inner.arrived.notify_waiters();
    }

    /// Resolves, with the reason, once `task` is cancelled: a participant's part of a task
    /// races this, so that a participant blocked on an established stream from a peer that
    /// stopped (a hung host sends nothing and closes nothing) ends too.
    pub async fn cancelled(&self, task: u64) -> String {
        loop {
            let notified = self.inner.arrived.notified();
            if let Some((reason, _)) = self.inner.cancelled.lock().expect("inbox lock").get(&task) {
                return reason.clone();
            }
            notified.await;
        }
    }

    /// Takes the stream from `from` for `task` in `phase`, waiting up to the peer wait or
    /// until the task is cancelled.
    pub async fn take(&self, task: u64, phase: u32, from: usize) -> Result<FrameReader, ClusterError> {
        let deadline = Instant::now() + self.inner.peer_wait;
        loop {
            let notified = self.inner.arrived.notified();
            if let Some((reason, _)) = self.inner.cancelled.lock().expect("inbox lock").get(&task) {
                return Err(ClusterError::Link(format!("task {task} cancelled: {reason}")));
            }
            if let Some((reader, _)) = self
                .inner
                .streams
                .lock()
                .expect("inbox lock")
                .remove(&(task, phase, from))
            {
                return Ok(reader);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, notified).await.is_err() {
                return Err(ClusterError::Link(format!(
                    "task {task}: participant {from} did not connect within {:.1} s",
                    self.inner.peer_wait.as_secs_f64()
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// The wait for a peer's stream is the cluster's configured bound, not a constant: a
    /// peer that never connects fails the task after it, naming the participant.
    #[test]
    fn a_peer_that_never_connects_fails_the_task_after_the_configured_wait() {
        let inbox = Inbox::new(Duration::from_millis(200));
        let started = Instant::now();
        let Err(e) = runtime().block_on(inbox.take(7, 0, 3)) else {
            panic!("no peer connected")
        };
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        assert!(e.is_link_symptom(), "{e}");
        assert!(
            e.to_string()
                .contains("participant 3 did not connect within 0.2 s"),
            "{e}"
        );
    }

    /// A cancelled task's waits end at once with the coordinator's reason, whatever the
    /// configured wait.
    #[test]
    fn a_cancelled_task_stops_waiting_for_its_peers() {
        let inbox = Inbox::new(Duration::from_secs(600));
        let rt = runtime();
        let started = Instant::now();
        let e = rt.block_on(async {
            let waiting = inbox.take(9, 0, 1);
            let canceller = async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                inbox.cancel(9, "participant n2 is down".into());
            };
            let (taken, ()) = tokio::join!(waiting, canceller);
            taken.err().expect("cancelled")
        });
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            e.to_string().contains("task 9 cancelled: participant n2 is down"),
            "{e}"
        );
    }
}
