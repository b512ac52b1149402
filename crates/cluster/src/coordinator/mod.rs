//! `eckpt coordinator`: one per cluster. Tracks which agents are alive (their sessions and
//! heartbeats), places ranks, runs each epoch's encode across every group and commits it by
//! two-phase commit (the journal write is the commit point), and runs recovery. Its state
//! is a journal rewritten atomically on every decision, so a restarted coordinator resumes.

mod blame;
mod encode_plan;
mod epoch;
mod journal_file;
mod protection;
mod recovery;
mod recovery_plan;
mod state;

pub use state::{form_groups, natural_key, Journal, NodeEntry};

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eckpt_proto::{listen, ClusterSecret, Connection, Endpoint};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{
    AgentRequest, AgentResponse, CoordRequest, CoordResponse, EpochOutcome, GroupStatus, Hello, NodeInfo,
    NodeStatus, StatusReport,
};
use eckpt_cluster_api::net::{accept_loop, call, host_identity, next_request, node_error, open_node};
use eckpt_cluster_api::{ClusterError, WireError};

/// An agent silent for this long is considered dead.
pub const DEAD_AFTER: Duration = Duration::from_secs(3);

/// How the coordinator is started.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// The cluster directory.
    pub dir: PathBuf,
    /// Address for the TCP listener agents in other namespaces use.
    pub bind: String,
}

struct Live {
    info: NodeInfo,
    last_seen: Instant,
    session: u64,
}

/// How long `OpenEpoch` waits for a rank's previous epoch to be decided before it gives up
/// with an error: long enough for the other ranks to reach their checkpoint and for the
/// encode, bounded so that a rank whose peers never come does not hang without a word.
pub const OPEN_WAIT: Duration = Duration::from_secs(600);

/// Ranks' progress through the open epoch.
struct EpochState {
    open: u64,
    ready: BTreeMap<u32, String>,
    running: bool,
    outcomes: BTreeMap<u64, EpochOutcome>,
}

impl EpochState {
    /// Whether `rank` has written the open epoch (it is ready, or the epoch is being
    /// committed, which needs every rank).
    fn wrote(&self, rank: u32) -> bool {
        self.ready.contains_key(&rank) || self.running
    }

    /// The epoch an `OpenEpoch` of `rank` is for: the open one, or the next one when the
    /// rank already wrote the open one (the call then waits for the decision). An explicit
    /// `expected` epoch never waits: it must be open and not yet written by the rank.
    fn target(&self, rank: u32, expected: Option<u64>) -> Result<u64, ClusterError> {
        let wrote = self.wrote(rank);
        match expected {
            Some(e) if e == self.open && wrote => Err(ClusterError::Invalid(format!(
                "rank {rank} already wrote epoch {e}{}: its next checkpoint is epoch {}",
                if self.running {
                    " (being committed)"
                } else {
                    " (waiting for the other ranks)"
                },
                e + 1
            ))),
            Some(e) if e != self.open => Err(ClusterError::Invalid(format!(
                "epoch {e} is not open (ranks write epoch {}{})",
                self.open,
                if wrote {
                    format!("; rank {rank} already wrote it")
                } else {
                    String::new()
                }
            ))),
            Some(e) => Ok(e),
            None => Ok(self.open + u64::from(wrote)),
        }
    }
}

/// The coordinator's shared state.
pub struct Coordinator {
    dir: ClusterDir,
    secret: ClusterSecret,
    host: String,
    journal: std::sync::Mutex<Journal>,
    live: std::sync::Mutex<HashMap<String, Live>>,
    epochs: std::sync::Mutex<EpochState>,
    changed: Notify,
    /// Held by an epoch's encode and commit, and by recovery: one at a time.
    op: tokio::sync::Mutex<()>,
    next_session: std::sync::atomic::AtomicU64,
}

impl Coordinator {
    fn save(&self, journal: &Journal) -> Result<(), ClusterError> {
        journal.save(&self.dir.journal())
    }

    /// Applies `change` to the journal and saves it; if the save fails the journal in
    /// memory stays as it was on disk, so later decisions never build on an unsaved one.
    fn update<T>(&self, change: impl FnOnce(&mut Journal) -> T) -> Result<T, ClusterError> {
        let mut journal = self.journal.lock().expect("journal lock");
        let mut next = journal.clone();
        let out = change(&mut next);
        self.save(&next)?;
        *journal = next;
        Ok(out)
    }

    fn snapshot(&self) -> Journal {
        self.journal.lock().expect("journal lock").clone()
    }

    /// Alive agents by name.
    fn alive(&self) -> BTreeMap<String, NodeInfo> {
        self.live
            .lock()
            .expect("live lock")
            .iter()
            .filter(|(_, l)| l.last_seen.elapsed() < DEAD_AFTER)
            .map(|(n, l)| (n.clone(), l.info.clone()))
            .collect()
    }

    fn task_id(&self) -> u64 {
        self.journal.lock().expect("journal lock").task_id()
    }

    /// Sends one request to each `(node, request)` concurrently; results in order.
    async fn ask_all(
        &self,
        requests: Vec<(NodeInfo, AgentRequest)>,
    ) -> Vec<Result<AgentResponse, ClusterError>> {
        let mut set = JoinSet::new();
        let count = requests.len();
        for (i, (node, request)) in requests.into_iter().enumerate() {
            let (host, secret) = (self.host.clone(), self.secret.clone());
            set.spawn(async move {
                let result = async {
                    let mut conn = open_node(&node, &host, &secret).await?;
                    match call(&mut conn, &request)
                        .await
                        .map_err(|e| node_error(&node.name, e))?
                    {
                        AgentResponse::Error(e) => Err(ClusterError::remote(&node.name, e)),
                        other => Ok(other),
                    }
                }
                .await;
                (i, result)
            });
        }
        let mut out: Vec<Option<Result<AgentResponse, ClusterError>>> = (0..count).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((i, r)) => out[i] = Some(r),
                Err(e) => tracing::error!(error = %e, "request task failed"),
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ClusterError::Internal("request task failed".into()))))
            .collect()
    }

    fn status(&self) -> StatusReport {
        let journal = self.snapshot();
        let alive = self.alive();
        let epochs = self.epochs.lock().expect("epoch lock");
        let nodes = journal
            .nodes
            .iter()
            .map(|(name, entry)| NodeStatus {
                name: name.clone(),
                alive: alive.contains_key(name),
                addr: entry
                    .info
                    .as_ref()
                    .map(|i| match &i.tcp {
                        Endpoint::Tcp { host, port } => format!("{host}:{port}"),
                        other => other.to_string(),
                    })
                    .unwrap_or_default(),
                ranks: journal.ranks_on(name),
                spare: entry.spare,
                group: journal
                    .group_of(name)
                    .map(|(g, pos)| (journal.groups[g].group.id, pos)),
                removed: entry.removed,
            })
            .collect();
        let groups = journal
            .groups
            .iter()
            .map(|g| GroupStatus {
                id: g.group.id,
                k: g.group.k,
                m: g.group.m,
                members: g.group.members.clone(),
                lost: g
                    .group
                    .members
                    .iter()
                    .filter(|m| !alive.contains_key(*m))
                    .cloned()
                    .collect(),
                protected_epoch: g.objects.last().map_or(0, |o| o.version),
                objects: g.objects.len(),
            })
            .collect();
        StatusReport {
            coding: journal.coding,
            committed_epoch: journal.committed,
            open_epoch: epochs.open,
            ranks_ready: epochs.ready.keys().copied().collect(),
            world: journal.world,
            nodes,
            groups,
        }
    }

    /// `OpenEpoch`: places the rank if new; the rank's next epoch, once its previous one is
    /// decided (waiting at most `OPEN_WAIT`). It never hands out a later epoch than the one
    /// the call was for: two checkpoints of one rank racing, or an epoch aborted by
    /// recovery while the call waited, give an error rather than a silently skipped epoch.
    async fn open_epoch(
        self: &Arc<Self>,
        rank: u32,
        world: u32,
        node: Option<String>,
        expected: Option<u64>,
    ) -> Result<CoordResponse, ClusterError> {
        let alive = self.alive();
        let target = {
            let epochs = self.epochs.lock().expect("epoch lock");
            epochs.target(rank, expected)?
        };
        let name = {
            let mut journal = self.journal.lock().expect("journal lock");
            match journal.world {
                Some(w) if w != world => {
                    return Err(ClusterError::Invalid(format!(
                        "the job has {w} ranks; this checkpoint says {world}"
                    )))
                }
                _ => {}
            }
            if rank >= world {
                return Err(ClusterError::Invalid(format!(
                    "rank {rank} outside a job of {world} ranks"
                )));
            }
            let candidates: Vec<String> = journal
                .members()
                .into_iter()
                .filter(|n| journal.holds_data(n) && alive.contains_key(n))
                .collect();
            let name = match (journal.placement.get(&rank), node) {
                (Some(placed), Some(wanted)) if *placed != wanted => {
                    return Err(ClusterError::Invalid(format!(
                        "rank {rank} lives on {placed}, not {wanted}"
                    )))
                }
                (Some(placed), _) => placed.clone(),
                (None, Some(wanted)) => {
                    if !candidates.contains(&wanted) {
                        return Err(ClusterError::Invalid(format!(
                            "node {wanted} cannot host ranks (not an alive data member of a group)"
                        )));
                    }
                    wanted
                }
                (None, None) => journal
                    .least_loaded(&candidates, &BTreeMap::new())
                    .ok_or_else(|| ClusterError::Invalid("no alive node can host ranks".into()))?,
            };
            if journal.world != Some(world) || journal.placement.get(&rank) != Some(&name) {
                journal.world = Some(world);
                journal.placement.insert(rank, name.clone());
                self.save(&journal)?;
            }
            name
        };
        let info = alive.get(&name).cloned().ok_or_else(|| {
            ClusterError::Invalid(format!(
                "rank {rank} lives on {name}, which is down: run `eckpt recover`"
            ))
        })?;
        let deadline = tokio::time::Instant::now() + OPEN_WAIT;
        loop {
            let notified = self.changed.notified();
            {
                let epochs = self.epochs.lock().expect("epoch lock");
                if epochs.open == target && !epochs.wrote(rank) {
                    return Ok(CoordResponse::Opened {
                        epoch: target,
                        node: info,
                    });
                }
                if epochs.open >= target {
                    return Err(ClusterError::Invalid(if epochs.open > target {
                        format!(
                            "rank {rank} waited to write epoch {target}, but epoch {} opened meanwhile: not writing a later epoch than the one asked for",
                            epochs.open
                        )
                    } else {
                        format!("rank {rank} waited to write epoch {target}, but another checkpoint of rank {rank} wrote it meanwhile")
                    }));
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(ClusterError::Invalid(format!(
                    "rank {rank} already wrote epoch {}, still undecided after {} s: every rank must checkpoint it before rank {rank} can write epoch {target} (see `eckpt status`)",
                    target - 1,
                    OPEN_WAIT.as_secs()
                )));
            }
        }
    }

    /// `Locate`: the node holding the rank's committed epoch; an error, never "none", when
    /// there is one it cannot read now or the job's size changed.
    fn locate(&self, rank: u32, world: u32) -> Result<CoordResponse, ClusterError> {
        let journal = self.snapshot();
        if let Some(w) = journal.world.filter(|&w| w != world) {
            return Err(ClusterError::Invalid(format!(
                "the job was checkpointed with {w} ranks but restarts with {world}"
            )));
        }
        if rank >= world {
            return Err(ClusterError::Invalid(format!(
                "rank {rank} outside a job of {world} ranks"
            )));
        }
        let Some(name) = journal.placement.get(&rank).filter(|_| journal.committed > 0) else {
            return Ok(CoordResponse::Located(None));
        };
        let info = self.alive().remove(name).ok_or_else(|| {
            ClusterError::Invalid(format!("rank {rank}'s node {name} is down: run `eckpt recover`"))
        })?;
        Ok(CoordResponse::Located(Some((info, journal.committed))))
    }

    /// `RankReady`: records the rank; the last one starts the epoch's encode.
    fn rank_ready(self: &Arc<Self>, rank: u32, epoch: u64, node: String) -> Result<(), ClusterError> {
        let journal = self.snapshot();
        if journal.placement.get(&rank) != Some(&node) {
            return Err(ClusterError::Invalid(format!(
                "rank {rank} does not live on {node}"
            )));
        }
        let world = journal.world.unwrap_or(0);
        let mut epochs = self.epochs.lock().expect("epoch lock");
        if epoch != epochs.open || epochs.running {
            return Err(ClusterError::Invalid(format!(
                "epoch {epoch} is not open for checkpoints (open: {}{})",
                epochs.open,
                if epochs.running { ", being committed" } else { "" }
            )));
        }
        epochs.ready.insert(rank, node);
        if epochs.ready.len() as u32 == world {
            epochs.running = true;
            let coord = self.clone();
            tokio::spawn(async move { coord.run_epoch(epoch).await });
        }
        drop(epochs);
        self.changed.notify_waiters();
        Ok(())
    }

    /// Records an epoch's outcome and opens the next one.
    fn finish_epoch(&self, outcome: EpochOutcome) {
        let mut epochs = self.epochs.lock().expect("epoch lock");
        epochs.open = outcome.epoch + 1;
        epochs.ready.clear();
        epochs.running = false;
        epochs.outcomes.insert(outcome.epoch, outcome);
        drop(epochs);
        self.changed.notify_waiters();
    }

    async fn wait_epoch(&self, epoch: u64) -> EpochOutcome {
        loop {
            let notified = self.changed.notified();
            {
                let epochs = self.epochs.lock().expect("epoch lock");
                if let Some(o) = epochs.outcomes.get(&epoch) {
                    return o.clone();
                }
                if epoch < epochs.open {
                    let committed = self.journal.lock().expect("journal lock").committed >= epoch;
                    return EpochOutcome {
                        epoch,
                        committed,
                        reason: (!committed).then(|| "decided before the coordinator restarted".into()),
                        encode_seconds: 0.0,
                        kinds: Vec::new(),
                        bytes_sent: BTreeMap::new(),
                        shard_bytes: 0,
                    };
                }
            }
            notified.await;
        }
    }

    /// Decides `epoch` aborted: the next epoch gets a new number, and every alive agent drops
    /// what it prepared (an agent that misses this resolves it when it registers again).
    async fn abort_everywhere(&self, epoch: u64) {
        let _ = self.update(|j| j.next_epoch = epoch + 1);
        let requests = self
            .alive()
            .into_values()
            .map(|n| (n, AgentRequest::Abort { epoch }))
            .collect();
        self.ask_all(requests).await;
    }

    /// Sends `Abort` for the open epoch if ranks had started it (recovery moves ranks).
    async fn abort_open_epoch(&self) {
        let epoch = {
            let mut epochs = self.epochs.lock().expect("epoch lock");
            if epochs.ready.is_empty() {
                return;
            }
            epochs.ready.clear();
            epochs.open
        };
        self.abort_everywhere(epoch).await;
        self.finish_epoch(EpochOutcome {
            epoch,
            committed: false,
            reason: Some("aborted by recovery: re-checkpoint on the ranks' new nodes".into()),
            encode_seconds: 0.0,
            kinds: Vec::new(),
            bytes_sent: BTreeMap::new(),
            shard_bytes: 0,
        });
    }
}

/// Runs the coordinator until told to shut down.
pub async fn run(options: CoordinatorOptions) -> Result<(), ClusterError> {
    let dir = ClusterDir::new(&options.dir)?;
    let mut cluster = dir.load()?;
    let secret = dir.load_secret()?;
    let mut journal = Journal::load(&dir.journal())?;
    // Task ids are never reused, even those handed out after the last journal write.
    journal.next_task += 1000;
    journal.save(&dir.journal())?;
    let unix = listen(&Endpoint::Unix(dir.coordinator_socket()), &secret).await?;
    let tcp = listen(
        &Endpoint::Tcp {
            host: options.bind.clone(),
            port: 0,
        },
        &secret,
    )
    .await?;
    cluster.coordinator_tcp = Some(tcp.local_endpoint().clone());
    eckpt_cluster_api::dirs::write_atomic(
        &dir.cluster_file(),
        &serde_json::to_vec_pretty(&cluster).expect("cluster.json serializes"),
    )?;
    let open = journal.next_epoch;
    let coord = Arc::new(Coordinator {
        dir: dir.clone(),
        secret,
        host: host_identity(),
        journal: std::sync::Mutex::new(journal),
        live: std::sync::Mutex::new(HashMap::new()),
        epochs: std::sync::Mutex::new(EpochState {
            open,
            ready: BTreeMap::new(),
            running: false,
            outcomes: BTreeMap::new(),
        }),
        changed: Notify::new(),
        op: tokio::sync::Mutex::new(()),
        next_session: 1.into(),
    });
    eckpt_cluster_api::dirs::write_atomic(
        &ClusterDir::pid_file(&dir.coordinator()),
        std::process::id().to_string().as_bytes(),
    )?;
    let (stop_tx, mut stop_rx) = tokio::sync::mpsc::channel::<()>(1);
    for listener in [unix, tcp] {
        let (coord, stop) = (coord.clone(), stop_tx.clone());
        tokio::spawn(accept_loop(listener, move |conn| {
            serve(coord.clone(), conn, stop.clone())
        }));
    }
    tracing::info!(dir = %dir.root().display(), "coordinator started");
    tokio::select! {
        _ = stop_rx.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    // Stop the agents, then ourselves.
    let requests = coord
        .alive()
        .into_values()
        .map(|n| (n, AgentRequest::Shutdown))
        .collect();
    coord.ask_all(requests).await;
    Ok(())
}

async fn serve(
    coord: Arc<Coordinator>,
    mut conn: Connection,
    stop: tokio::sync::mpsc::Sender<()>,
) -> Result<(), ClusterError> {
    match conn.recv_control::<Hello>().await? {
        Hello::Session(info) => session(coord, conn, info).await,
        Hello::Control => loop {
            let Some(request) = next_request::<CoordRequest>(&mut conn).await? else {
                return Ok(());
            };
            let shutdown = matches!(request, CoordRequest::Shutdown);
            let response = match handle(&coord, &mut conn, request).await {
                Ok(r) => r,
                Err(e) => CoordResponse::Error(WireError::from(&e)),
            };
            conn.send_control(&response).await?;
            if shutdown {
                let _ = stop.send(()).await;
                return Ok(());
            }
        },
        Hello::Peer { .. } => Err(ClusterError::Protocol(
            "the coordinator takes no peer streams".into(),
        )),
    }
}

/// An agent's session: registration, then heartbeats until the connection drops.
async fn session(coord: Arc<Coordinator>, mut conn: Connection, info: NodeInfo) -> Result<(), ClusterError> {
    let id = coord
        .next_session
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let registered = coord.update(|j| {
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
    })?;
    let duplicate = coord
        .live
        .lock()
        .expect("live lock")
        .get(&info.name)
        .filter(|other| other.info.pid != info.pid && other.last_seen.elapsed() < DEAD_AFTER)
        .map(|other| other.info.pid);
    if let Some(pid) = duplicate {
        conn.send_control(&CoordResponse::Error(WireError::from(&ClusterError::Invalid(
            format!("node {} is already running (pid {pid})", info.name),
        ))))
        .await?;
        return Ok(());
    }
    {
        let mut live = coord.live.lock().expect("live lock");
        live.insert(
            info.name.clone(),
            Live {
                info: info.clone(),
                last_seen: Instant::now(),
                session: id,
            },
        );
    }
    tracing::info!(node = %info.name, "agent registered");
    conn.send_control(&registered).await?;
    let result = async {
        loop {
            match conn.recv_control::<CoordRequest>().await? {
                CoordRequest::Heartbeat => {
                    if let Some(l) = coord.live.lock().expect("live lock").get_mut(&info.name) {
                        l.last_seen = Instant::now();
                    }
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
    .await;
    let mut live = coord.live.lock().expect("live lock");
    if live.get(&info.name).is_some_and(|l| l.session == id) {
        live.remove(&info.name);
        tracing::warn!(node = %info.name, "agent session ended");
    }
    result
}

async fn handle(
    coord: &Arc<Coordinator>,
    conn: &mut Connection,
    request: CoordRequest,
) -> Result<CoordResponse, ClusterError> {
    Ok(match request {
        CoordRequest::Heartbeat => CoordResponse::Alive,
        CoordRequest::Status => CoordResponse::Status(Box::new(coord.status())),
        CoordRequest::Nodes => CoordResponse::Nodes(coord.alive().into_values().collect()),
        CoordRequest::OpenEpoch {
            rank,
            world,
            node,
            epoch,
        } => coord.open_epoch(rank, world, node, epoch).await?,
        CoordRequest::RankReady { rank, epoch, node } => {
            coord.rank_ready(rank, epoch, node)?;
            CoordResponse::Ok
        }
        CoordRequest::WaitEpoch { epoch } => CoordResponse::Outcome(coord.wait_epoch(epoch).await),
        CoordRequest::Locate { rank, world } => coord.locate(rank, world)?,
        CoordRequest::Recover => CoordResponse::Recovered(coord.recover(conn).await?),
        CoordRequest::Export { rank, epoch } => coord.export(rank, epoch).await?,
        CoordRequest::Leave { node } => {
            let info = coord
                .alive()
                .remove(&node)
                .ok_or_else(|| ClusterError::Invalid(format!("node {node} is not running")))?;
            for r in coord.ask_all(vec![(info, AgentRequest::Shutdown)]).await {
                r?;
            }
            CoordResponse::Ok
        }
        CoordRequest::Shutdown => CoordResponse::Ok,
    })
}
