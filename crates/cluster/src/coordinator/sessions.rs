//! Which agents are alive: each agent holds a session (registration, then heartbeats until
//! its connection drops), and one silent for [`DEAD_AFTER`] is considered dead.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eckpt_proto::Connection;

use super::{Coordinator, NodeEntry};
use eckpt_cluster_api::msg::{CoordRequest, CoordResponse, NodeInfo};
use eckpt_cluster_api::{ClusterError, WireError};

/// An agent silent for this long is considered dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(3);

/// An agent's session as the coordinator sees it.
pub(super) struct Live {
    info: NodeInfo,
    last_seen: Instant,
    session: u64,
}

impl Coordinator {
    /// Alive agents by name.
    pub(super) fn alive(&self) -> BTreeMap<String, NodeInfo> {
        self.live
            .lock()
            .expect("live lock")
            .iter()
            .filter(|(_, l)| l.last_seen.elapsed() < DEAD_AFTER)
            .map(|(n, l)| (n.clone(), l.info.clone()))
            .collect()
    }

    /// Names of the agents holding a session, heartbeating or not.
    pub(super) fn in_session(&self) -> Vec<String> {
        self.live.lock().expect("live lock").keys().cloned().collect()
    }

    /// Why `node` is not alive, or `None` if it is.
    pub(super) fn not_alive(&self, node: &str) -> Option<String> {
        let live = self.live.lock().expect("live lock");
        match live.get(node) {
            None => Some("down: its agent is gone".into()),
            Some(l) if l.last_seen.elapsed() >= DEAD_AFTER => Some(format!(
                "stopped responding (no heartbeat for {} s)",
                DEAD_AFTER.as_secs()
            )),
            Some(_) => None,
        }
    }

    /// Records the agent in the journal (a new node is a spare) and says what it keeps.
    fn register(&self, info: &NodeInfo) -> Result<CoordResponse, ClusterError> {
        self.update(|j| {
            let entry = j.nodes.entry(info.name.clone()).or_insert(NodeEntry {
                info: None,
                spare: true,
                removed: false,
            });
            entry.info = Some(info.clone());
            CoordResponse::Registered {
                committed: j.committed,
                keep: j.keep_of(&info.name),
                versions: j.versions_of(&info.name),
            }
        })
    }

    /// The pid of another agent of the same name that is still alive.
    fn duplicate_of(&self, info: &NodeInfo) -> Option<u32> {
        self.live
            .lock()
            .expect("live lock")
            .get(&info.name)
            .filter(|other| other.info.pid != info.pid && other.last_seen.elapsed() < DEAD_AFTER)
            .map(|other| other.info.pid)
    }

    fn start_session(&self, info: &NodeInfo, session: u64) {
        let mut live = self.live.lock().expect("live lock");
        live.insert(
            info.name.clone(),
            Live {
                info: info.clone(),
                last_seen: Instant::now(),
                session,
            },
        );
    }

    fn heard_from(&self, node: &str) {
        if let Some(l) = self.live.lock().expect("live lock").get_mut(node) {
            l.last_seen = Instant::now();
        }
    }

    /// Forgets the agent, unless a newer session of it replaced this one.
    fn end_session(&self, node: &str, session: u64) {
        let mut live = self.live.lock().expect("live lock");
        if live.get(node).is_some_and(|l| l.session == session) {
            live.remove(node);
            tracing::warn!(node = %node, "agent session ended");
        }
    }
}

/// An agent's session: registration, then heartbeats until the connection drops.
pub(super) async fn session(
    coord: Arc<Coordinator>,
    mut conn: Connection,
    info: NodeInfo,
) -> Result<(), ClusterError> {
    let id = coord.next_session.fetch_add(1, Ordering::Relaxed);
    let registered = coord.register(&info)?;
    if let Some(pid) = coord.duplicate_of(&info) {
        conn.send_control(&CoordResponse::Error(WireError::from(&ClusterError::Invalid(
            format!("node {} is already running (pid {pid})", info.name),
        ))))
        .await?;
        return Ok(());
    }
    coord.start_session(&info, id);
    tracing::info!(node = %info.name, "agent registered");
    conn.send_control(&registered).await?;
    let result = heartbeats(&coord, &mut conn, &info.name).await;
    coord.end_session(&info.name, id);
    result
}

/// Answers the agent's heartbeats until the connection drops or it sends anything else.
async fn heartbeats(coord: &Coordinator, conn: &mut Connection, node: &str) -> Result<(), ClusterError> {
    loop {
        match conn.recv_control::<CoordRequest>().await? {
            CoordRequest::Heartbeat => {
                coord.heard_from(node);
                conn.send_control(&CoordResponse::Alive).await?;
            }
            other => {
                return Err(ClusterError::Protocol(format!(
                    "unexpected {other:?} on a session"
                )));
            }
        }
    }
}
