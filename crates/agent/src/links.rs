//! [`Links`] over authenticated connections: one writer task per peer the participant sends
//! to and one reader task per peer it receives from, joined to the (blocking) executor by
//! bounded channels — transfer overlaps compute, and a slow link pushes back.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use eckpt_daemon::worker;
use eckpt_proto::{ClusterSecret, Endpoint};
use tokio::task::JoinHandle;

use eckpt_cluster_api::msg::{Hello, NodeInfo};
use eckpt_cluster_api::net::{node_error, open, Inbox};
use eckpt_cluster_api::{ClusterError, ErrorKind};
use eckpt_coding::exec::Links;

use super::Agent;

/// Messages in flight per link in each direction (double buffering and a little more).
const DEPTH: usize = 3;

/// What broke a link, for the error the executor reports.
pub type Failure = Arc<Mutex<Option<String>>>;

/// The message buffers of one participant's links, passed around rather than freed: a
/// writer gives back what it has sent, a reader receives into one, the executor takes them
/// for its rows and gives back what it has consumed. A buffer allocated per message cost
/// the zeroing and page faults of fresh memory, as much CPU as moving the bytes.
#[derive(Clone)]
struct Buffers {
    idle: Arc<Mutex<Vec<Vec<u8>>>>,
    /// The most idle buffers kept (the others are freed): what is in flight is already
    /// bounded by the links' channels.
    most: usize,
}

impl Buffers {
    fn new(most: usize) -> Buffers {
        Buffers {
            idle: Arc::default(),
            most,
        }
    }

    fn take(&self) -> Option<Vec<u8>> {
        eckpt_daemon::crash_only::lock(&self.idle).pop()
    }

    fn give(&self, buffer: Vec<u8>) {
        let mut idle = eckpt_daemon::crash_only::lock(&self.idle);
        if idle.len() < self.most {
            idle.push(buffer);
        }
    }
}

/// The links of one participant of one task.
pub struct TaskLinks {
    out: BTreeMap<usize, (worker::Sender<Vec<u8>>, Failure)>,
    inp: BTreeMap<usize, (worker::Receiver<Vec<u8>>, Failure)>,
    names: BTreeMap<usize, String>,
    writers: Vec<(String, JoinHandle<Result<(), ClusterError>>)>,
    readers: Vec<JoinHandle<()>>,
    buffers: Buffers,
}

/// The error for a link that ended: what broke it, else that `what` ended early.
pub fn failure_of(f: &Failure, name: &str, what: &str) -> ClusterError {
    let reason = eckpt_daemon::crash_only::lock(f).clone();
    let reason = reason.unwrap_or_else(|| format!("{what} ended early"));
    ClusterError::Link(format!("node {name}: {reason}"))
}

/// The links participant `me` of `task` opens in `phase`: to `send_to` and from
/// `recv_from` (participant indices into `nodes`).
pub struct LinkPlan<'a> {
    /// Task id.
    pub task: u64,
    /// Phase of the task (an update has one per parity index; a coding task only 0).
    pub phase: u32,
    /// This participant.
    pub me: usize,
    /// Participants' nodes (`None`: takes no part).
    pub nodes: &'a [Option<NodeInfo>],
    /// Participants this one sends to.
    pub send_to: &'a BTreeSet<usize>,
    /// Participants this one receives from.
    pub recv_from: &'a BTreeSet<usize>,
}

impl TaskLinks {
    /// Opens `agent`'s writers and readers of `plan`; a protocol error, before anything is
    /// opened, when a participant it links to is not one of the task's (see [`peers_of`]).
    pub fn open(agent: &Agent, plan: &LinkPlan<'_>) -> Result<TaskLinks, ClusterError> {
        let receivers = peers_of(plan)?;
        let peers = plan.send_to.len() + plan.recv_from.len();
        let mut links = TaskLinks::unopened(plan.nodes, Buffers::new(2 * DEPTH * peers + 4));
        for (to, node) in receivers {
            links.open_writer(agent, plan, to, node);
        }
        for &from in plan.recv_from {
            links.open_reader(&agent.inbox, plan, from);
        }
        Ok(links)
    }

    fn unopened(nodes: &[Option<NodeInfo>], buffers: Buffers) -> TaskLinks {
        let name = |p: usize| {
            nodes[p]
                .as_ref()
                .map_or_else(|| format!("participant {p}"), |n| n.name.clone())
        };
        TaskLinks {
            out: BTreeMap::new(),
            inp: BTreeMap::new(),
            names: (0..nodes.len()).map(|p| (p, name(p))).collect(),
            writers: Vec::new(),
            readers: Vec::new(),
            buffers,
        }
    }

    /// A writer task connecting to participant `to`, on `node`, and sending what its channel
    /// carries.
    fn open_writer(&mut self, agent: &Agent, plan: &LinkPlan<'_>, to: usize, node: NodeInfo) {
        let (tx, rx) = worker::channel::<Vec<u8>>(DEPTH);
        let failure: Failure = Arc::default();
        let endpoint = node.endpoint_from(&agent.host).clone();
        let hello = Hello::Peer {
            task: plan.task,
            from: plan.me,
            phase: plan.phase,
        };
        let (secret, fail, buffers) = (agent.secret.clone(), failure.clone(), self.buffers.clone());
        let peer_wait = agent.inbox.peer_wait();
        let writer = tokio::spawn(async move {
            let result = write_stream(endpoint, secret, hello, rx, buffers, peer_wait).await;
            if let Err(e) = &result {
                *eckpt_daemon::crash_only::lock(&fail) = Some(e.to_string());
            }
            result
        });
        self.out.insert(to, (tx, failure));
        self.writers.push((node.name.clone(), writer));
    }

    /// A reader task taking participant `from`'s connection from the inbox and passing its
    /// messages into a channel.
    fn open_reader(&mut self, inbox: &Inbox, plan: &LinkPlan<'_>, from: usize) {
        let (tx, rx) = worker::channel::<Vec<u8>>(DEPTH);
        let failure: Failure = Arc::default();
        let (fail, inbox, task, phase) = (failure.clone(), inbox.clone(), plan.task, plan.phase);
        let buffers = self.buffers.clone();
        self.readers.push(tokio::spawn(async move {
            if let Err(e) = read_stream(inbox, task, phase, from, tx, buffers).await {
                *eckpt_daemon::crash_only::lock(&fail) = Some(e.to_string());
            }
        }));
        self.inp.insert(from, (rx, failure));
    }

    /// Closes the writers and waits until everything sent has been handed to the kernel;
    /// the first writer error, if any.
    pub async fn finish(mut self) -> Result<(), ClusterError> {
        self.out.clear();
        let mut first = None;
        for (name, writer) in self.writers.drain(..) {
            let result = writer
                .await
                .map_err(|e| ClusterError::Internal(format!("writer to {name}: {e}")))
                .and_then(|r| r);
            if let Err(e) = result {
                first.get_or_insert(match e.kind() {
                    ErrorKind::Link => ClusterError::Link(format!("node {name}: {e}")),
                    ErrorKind::Internal => e,
                    _ => node_error(&name, e),
                });
            }
        }
        for reader in self.readers.drain(..) {
            reader.abort();
        }
        first.map_or(Ok(()), Err)
    }

    /// Links of a participant that talks to no one (for tests of their users).
    #[cfg(test)]
    pub(super) fn none() -> TaskLinks {
        TaskLinks::unopened(&[], Buffers::new(0))
    }

    /// Takes the receiving half of the link from `from` (for concurrent readers).
    pub fn take_receiver(&mut self, from: usize) -> Option<(worker::Receiver<Vec<u8>>, Failure)> {
        self.inp.remove(&from)
    }

    /// A sender to `to` that can be cloned into concurrent tasks.
    pub fn sender(&self, to: usize) -> Option<worker::Sender<Vec<u8>>> {
        self.out.get(&to).map(|(tx, _)| tx.clone())
    }
}

impl Links<ClusterError> for TaskLinks {
    fn send(&mut self, to: usize, message: Vec<u8>) -> Result<(), ClusterError> {
        let (tx, failure) = self
            .out
            .get(&to)
            .ok_or_else(|| ClusterError::Protocol(format!("no link to participant {to}")))?;
        tx.blocking_send(message)
            .map_err(|_| failure_of(failure, &self.names[&to], "connection"))
    }

    fn recv(&mut self, from: usize) -> Result<Vec<u8>, ClusterError> {
        let (rx, failure) = self
            .inp
            .get_mut(&from)
            .ok_or_else(|| ClusterError::Protocol(format!("no link from participant {from}")))?;
        rx.blocking_recv()
            .ok_or_else(|| failure_of(failure, &self.names[&from], "stream"))
    }

    /// The sender's channel and the receiver's, whatever the connection between them holds.
    fn capacity(&self) -> usize {
        2 * DEPTH
    }

    fn take_buffer(&mut self) -> Option<Vec<u8>> {
        self.buffers.take()
    }

    fn give_buffer(&mut self, buffer: Vec<u8>) {
        self.buffers.give(buffer);
    }
}

/// The node of each participant `plan` sends to. The participants and who talks to whom
/// come from a task the coordinator sent: one sent to or received from that is outside the
/// task, or sent to without a node, is a protocol error (not a panic of the agent). Checking
/// the senders too keeps every link's participant within the task's (names, by index).
fn peers_of(plan: &LinkPlan<'_>) -> Result<Vec<(usize, NodeInfo)>, ClusterError> {
    let n = plan.nodes.len();
    if let Some(from) = plan.recv_from.iter().find(|&&from| from >= n) {
        return Err(ClusterError::Protocol(format!(
            "task {} phase {}: participant {} receives from participant {from}, outside the task's {n}",
            plan.task, plan.phase, plan.me
        )));
    }
    plan.send_to
        .iter()
        .map(|&to| match plan.nodes.get(to) {
            Some(Some(node)) => Ok((to, node.clone())),
            Some(None) => Err(ClusterError::Protocol(format!(
                "task {} phase {}: participant {} sends to participant {to}, which has no node",
                plan.task, plan.phase, plan.me
            ))),
            None => Err(ClusterError::Protocol(format!(
                "task {} phase {}: participant {} sends to participant {to}, outside the task's {n}",
                plan.task, plan.phase, plan.me
            ))),
        })
        .collect()
}

/// A stream whose peer `did` for the peer wait: a link error, which the task reports with
/// the peer's name.
fn stalled(did: &str, peer_wait: Duration) -> ClusterError {
    ClusterError::Link(format!("the peer {did} for {:.1} s", peer_wait.as_secs_f64()))
}

/// Connects with `hello` and sends every message of `rx` until it closes, giving each
/// buffer sent back to `buffers`. A peer that takes nothing for `peer_wait` (stopped, its
/// host hung: its kernel may still acknowledge, so TCP does not end the connection) fails
/// the stream, whether or not the coordinator is there to cancel the task.
async fn write_stream(
    endpoint: Endpoint,
    secret: ClusterSecret,
    hello: Hello,
    mut rx: worker::Receiver<Vec<u8>>,
    buffers: Buffers,
    peer_wait: Duration,
) -> Result<(), ClusterError> {
    let mut conn = open(&endpoint, &secret, &hello).await?;
    while let Some(message) = rx.recv().await {
        tokio::time::timeout(peer_wait, conn.send_data(&message))
            .await
            .map_err(|_| stalled("took nothing of the stream", peer_wait))??;
        buffers.give(message);
    }
    conn.shutdown().await?;
    Ok(())
}

/// Takes the connection of participant `from` for `task` and `phase` from the inbox and
/// passes its messages to `tx` until either side closes, each received into a buffer from
/// `buffers` when there is one.
async fn read_stream(
    inbox: Inbox,
    task: u64,
    phase: u32,
    from: usize,
    tx: worker::Sender<Vec<u8>>,
    buffers: Buffers,
) -> Result<(), ClusterError> {
    let mut reader = inbox.take(task, phase, from).await?;
    let peer_wait = inbox.peer_wait();
    loop {
        let mut buf = buffers.take().unwrap_or_default();
        let received = tokio::time::timeout(peer_wait, reader.recv_data(&mut buf))
            .await
            .map_err(|_| stalled("sent nothing more on its stream", peer_wait))?;
        match received {
            Ok(()) => {
                if tx.send(buf).await.is_err() {
                    return Ok(());
                }
            }
            Err(eckpt_proto::ProtoError::Closed) => return Ok(()),
            Err(e) => return Err(ClusterError::from(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn node(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            spare: false,
            tcp: Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: 1,
            },
            unix: Endpoint::Unix(PathBuf::from(format!("/nonexistent/{name}.sock"))),
            host: "memory".into(),
            cores: 1,
            store: PathBuf::from(format!("/nonexistent/{name}")),
            pid: 1,
        }
    }

    /// The peers of participant 0 of a task over `nodes`, sending to `send_to` and receiving
    /// from `recv_from`.
    fn peers(
        nodes: &[Option<NodeInfo>],
        send_to: &[usize],
        recv_from: &[usize],
    ) -> Result<Vec<(usize, NodeInfo)>, ClusterError> {
        let (send_to, recv_from): (BTreeSet<usize>, BTreeSet<usize>) = (
            send_to.iter().copied().collect(),
            recv_from.iter().copied().collect(),
        );
        peers_of(&LinkPlan {
            task: 7,
            phase: 0,
            me: 0,
            nodes,
            send_to: &send_to,
            recv_from: &recv_from,
        })
    }

    #[test]
    fn the_receivers_of_a_task_are_its_participants_nodes() {
        let nodes = [Some(node("n0")), None, Some(node("n2"))];
        let got = peers(&nodes, &[2], &[1, 2]).unwrap();
        assert_eq!(got, vec![(2, node("n2"))]);
    }

    #[test]
    fn a_receiver_without_a_node_is_a_protocol_error_not_a_panic() {
        let nodes = [Some(node("n0")), None, Some(node("n2"))];
        let e = peers(&nodes, &[1, 2], &[]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("participant 1, which has no node"), "{e}");
    }

    #[test]
    fn a_peer_outside_the_task_is_a_protocol_error_not_a_panic() {
        let nodes = [Some(node("n0")), Some(node("n1"))];
        let e = peers(&nodes, &[5], &[]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(
            e.to_string()
                .contains("sends to participant 5, outside the task's 2"),
            "{e}"
        );
        let e = peers(&nodes, &[1], &[9]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("receives from participant 9"), "{e}");
    }
}
