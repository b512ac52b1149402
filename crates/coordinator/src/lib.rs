//! `eckpt coordinator`: one per cluster. Tracks which agents are alive (their sessions and
//! heartbeats), places ranks, runs each epoch's encode across every group and commits it by
//! two-phase commit (the journal write is the commit point), and runs recovery. Its state
//! is a journal, a snapshot and a log of the changes appended and fsynced at every decision,
//! so a restarted coordinator resumes.
//!
//! Here: the shared state, the listeners and the request dispatch. `sessions` tracks the
//! agents' liveness; `epoch_state` is the epoch state machine and `epoch` runs an epoch's
//! encode and commit, planned by `encode_plan`; `recovery` executes what `recovery_plan`
//! decides, and `repair` re-encodes by itself the parity a node is found without.

#![warn(missing_docs)]

mod agents;
mod blame;
mod encode_plan;
mod epoch;
mod epoch_state;
mod export;
mod flush;
mod flush_plan;
mod flush_restore;
mod job;
mod journal_file;
mod journal_log;
mod owner;
mod pace;
mod protection;
mod recovery;
mod recovery_plan;
mod repair;
mod run_clock;
#[cfg(test)]
mod scale_tests;
mod sessions;
mod sightings;
mod state;
#[cfg(test)]
mod test_cluster;

pub use job::JobRecord;
pub use state::{natural_key, Journal, NodeEntry, NodeIndex};

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use eckpt_proto::{Connection, Endpoint};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

use agents::{Agents, IdleConnections, SocketAgents};
use eckpt_cluster_api::call::{agent_answer, Call, ToAgent};
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines, FlushConfig};
use eckpt_cluster_api::msg::{
    CheckCopy, ExportRank, FlushEpoch, JobClaim, Leave, Locate, NextAttempt, Nodes, OpenEpoch, Pace,
    PurgeCluster, RankReady, Recover, ReleaseJob, RenewLease, Status, StopCluster, WaitEpoch, WaitFlush,
};
use eckpt_cluster_api::msg::{
    CoordRequest, CoordResponse, GroupRecord, GroupStatus, Hello, NodeInfo, NodePurge, NodeStatus, PurgeNode,
    StatusReport, StopAgent,
};
use eckpt_cluster_api::net::{accept_loop, host_identity, listen_for_cluster, next_request};
use eckpt_cluster_api::{ClusterError, WireError};
use owner::{Draft, Owner, State};
use sessions::session;

/// How the coordinator is started.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// The cluster directory.
    pub dir: PathBuf,
    /// Address for the TCP listener agents in other namespaces use.
    pub bind: String,
    /// The machine this coordinator says it runs on (`None`: this one, [`host_identity`]).
    /// Hosts of a simulation share one process, and each says which it is.
    pub host: Option<String>,
}

/// The coordinator: its state's owner, and what never changes while it runs.
pub struct Coordinator {
    dir: ClusterDir,
    /// How requests reach the agents.
    agents: Arc<dyn Agents>,
    /// The journal, liveness, epochs, pace points, flushes and the lease ([`owner`]).
    state: Owner,
    /// Signalled after a change others may wait for (an epoch decided, a rank ready, an
    /// agent checked, a pace point answered).
    changed: Notify,
    /// Held by an epoch's encode and commit, and by recovery: one at a time.
    op: tokio::sync::Mutex<()>,
    /// A repair of missing parity is waiting for its turn (`repair.rs`).
    repair_queued: std::sync::atomic::AtomicBool,
    next_session: std::sync::atomic::AtomicU64,
    /// Where and how often committed epochs are flushed (`None`: never).
    flush_config: Option<FlushConfig>,
    /// The flushes' turn (one at a time) and their end.
    flushing: flush::Flushing,
    /// The newest committed epoch whose commit every alive agent was told of (the journal
    /// records a commit before the agents hear it: a flush of that epoch must wait for
    /// them, or it asks a store for an epoch it has not committed yet).
    delivered: tokio::sync::watch::Sender<u64>,
    /// The cluster's time bounds (`cluster.json`).
    deadlines: Deadlines,
    /// Claims and stops, one at a time ([`job::StopGate`]).
    stop_gate: tokio::sync::Mutex<job::StopGate>,
}

impl Coordinator {
    /// A coordinator resuming `journal` with the cluster's `deadlines` and flushes: no agent
    /// alive yet, its next epoch open; `flushed` are the epochs the flush directory holds.
    fn new(
        dir: ClusterDir,
        journal: Journal,
        deadlines: Deadlines,
        flush_config: Option<FlushConfig>,
        flushed: Vec<u64>,
        agents: Arc<dyn Agents>,
    ) -> Coordinator {
        // Agents that missed a commit before a restart resolve it as they register.
        let delivered = tokio::sync::watch::Sender::new(journal.committed);
        let state = State::new(journal, deadlines, flushed);
        Coordinator {
            state: Owner::start(state, dir.journal()),
            dir,
            agents,
            changed: Notify::new(),
            op: tokio::sync::Mutex::new(()),
            repair_queued: false.into(),
            next_session: 1.into(),
            flush_config,
            flushing: flush::Flushing::new(),
            delivered,
            stop_gate: tokio::sync::Mutex::new(job::StopGate::new(deadlines.idle().is_some())),
            deadlines,
        }
    }

    /// Runs `read` on the state (the journal as written).
    async fn read<T: Send + 'static>(&self, read: impl FnOnce(&mut State) -> T + Send + 'static) -> T {
        self.state.visit(read).await
    }

    /// Applies `change` to the journal in the next commit; answers once it is written. A
    /// failed write leaves the journal as it is on disk, so later decisions never build on
    /// an unwritten one.
    async fn update<T: Send + 'static>(
        &self,
        change: impl FnOnce(&mut Draft) -> T + Send + 'static,
    ) -> Result<T, ClusterError> {
        self.state.change(move |_, draft| change(draft)).await
    }

    /// The journal as written.
    async fn snapshot(&self) -> Journal {
        self.read(|s| s.journal().clone()).await
    }

    async fn task_id(&self) -> u64 {
        self.read(State::next_task_id).await
    }

    /// Alive agents by name ([`State::alive`]).
    async fn alive(&self) -> BTreeMap<String, NodeInfo> {
        self.read(|s| s.alive()).await
    }

    /// Forgets the damage of `nodes`: a recovery rebuilt what they were missing.
    async fn clear_damage(&self, nodes: std::collections::BTreeSet<String>) {
        self.read(move |s| s.clear_damage(&nodes)).await
    }

    /// Those of `nodes` that are not alive, with why.
    async fn absent(&self, nodes: Vec<String>) -> BTreeMap<String, String> {
        self.read(move |s| {
            nodes
                .into_iter()
                .filter_map(|n| Some((s.not_alive(&n)?, n)))
                .map(|(why, n)| (n, why))
                .collect()
        })
        .await
    }

    /// Sends one request to each `(node, request)` concurrently; results in order. A node
    /// that is not alive when asked (the caller's list may be older than the last liveness
    /// period) is not asked; one that stops being alive while asked (gone, or silent for the
    /// liveness period: a hung host never answers, and its listener would hold a connection
    /// for the whole handshake timeout) gets an error instead of an answer — so that no
    /// decision waits on a node that will not answer.
    async fn ask_all<C: ToAgent>(
        &self,
        requests: Vec<(NodeInfo, C)>,
    ) -> Vec<Result<C::Answer, ClusterError>> {
        self.ask_each(requests, |_, _| {}).await
    }

    /// [`Coordinator::ask_all`], telling `answered` each node's result as it comes in (a
    /// task reacts to its first failure while the others still run).
    async fn ask_each<C: ToAgent>(
        &self,
        requests: Vec<(NodeInfo, C)>,
        mut answered: impl FnMut(&str, &Result<C::Answer, ClusterError>),
    ) -> Vec<Result<C::Answer, ClusterError>> {
        let mut set = JoinSet::new();
        let mut out: Vec<Option<Result<C::Answer, ClusterError>>> =
            (0..requests.len()).map(|_| None).collect();
        let names: Vec<String> = requests.iter().map(|(n, _)| n.name.clone()).collect();
        let mut absent_when_asked = self.absent(names).await;
        let mut pending = BTreeMap::new();
        for (i, (node, request)) in requests.into_iter().enumerate() {
            if let Some(reason) = absent_when_asked.remove(&node.name) {
                out[i] = Some(Err(ClusterError::Node {
                    node: node.name,
                    reason,
                }));
                continue;
            }
            let name = node.name.clone();
            let answer = self.agents.ask(node, request.request());
            let call = set.spawn(async move { (i, answer.await) });
            pending.insert(i, (name, call));
        }
        let mut watch = tokio::time::interval(blame::WATCH_EVERY);
        loop {
            tokio::select! {
                joined = set.join_next() => match joined {
                    None => break,
                    Some(Ok((i, r))) => {
                        let Some((name, _)) = pending.remove(&i) else {
                            continue;
                        };
                        let r = r.and_then(|answer| agent_answer::<C>(&name, answer));
                        answered(&name, &r);
                        out[i] = Some(r);
                    }
                    Some(Err(e)) if e.is_cancelled() => {}
                    Some(Err(e)) => tracing::error!(error = %e, "request task failed"),
                },
                _ = watch.tick() => {
                    let mut absent = self.absent(pending.values().map(|(name, _)| name.clone()).collect()).await;
                    pending.retain(|&i, (name, call)| {
                        let Some(reason) = absent.remove(name) else {
                            return true;
                        };
                        call.abort();
                        out[i] = Some(Err(ClusterError::Node { node: name.clone(), reason }));
                        false
                    });
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ClusterError::Internal("request task failed".into()))))
            .collect()
    }

    async fn status(&self) -> StatusReport {
        let flush_config = self.flush_config.clone();
        self.read(move |s| {
            let journal = s.journal();
            let alive = s.alive();
            let damaged = s.damaged();
            let awaited = s.awaited();
            let index = journal.node_index();
            let nodes = journal
                .nodes
                .iter()
                .map(|(name, entry)| {
                    let mut status = node_status(journal, &index, &alive, &damaged, &awaited, name, entry);
                    status.silent_seconds = s.silent_for(name).map(|d| d.as_secs_f64());
                    status
                })
                .collect();
            let groups = journal
                .groups
                .iter()
                .map(|g| group_status(journal, g, &alive, &damaged))
                .collect();
            StatusReport {
                coding: journal.coding,
                committed_epoch: journal.committed,
                open_epoch: s.epochs.open,
                ranks_ready: s.epochs.ready.keys().copied().collect(),
                world: journal.world,
                nodes,
                groups,
                flush: s.flush.status(flush_config),
                job: s.job_status(),
                isolated_seconds: s.isolation().map(|d| d.as_secs_f64()),
                coordinator_term: journal.term,
                journal_bytes_written: s.journal_bytes_written,
            }
        })
        .await
    }

    /// `Locate`: the node holding the rank's committed epoch; an error, never "none", when
    /// there is one it cannot read now or the job's size changed.
    async fn locate(
        &self,
        rank: u32,
        world: u32,
        generation: Option<u64>,
    ) -> Result<Option<(NodeInfo, u64)>, ClusterError> {
        self.read(move |s| {
            s.fence(generation, &format!("rank {rank}"))?;
            let journal = s.journal();
            journal.check_rank(rank, world, |w| {
                format!("the job was checkpointed with {w} ranks but restarts with {world}")
            })?;
            let Some(name) = journal.placement.get(&rank).filter(|_| journal.committed > 0) else {
                return Ok(None);
            };
            let info = s.alive_node(name).ok_or_else(|| {
                ClusterError::Refused(format!("rank {rank}'s node {name} is down: run `eckpt recover`"))
            })?;
            if let Some(what) = s.damage_of(name) {
                return Err(ClusterError::Refused(format!(
                    "rank {rank}'s node {name} lacks committed data ({what}): run `eckpt recover`"
                )));
            }
            Ok(Some((info, journal.committed)))
        })
        .await
    }
}

impl Coordinator {
    /// `Purge`: every alive agent deletes its node-local data and exits; what each did.
    /// Nodes not alive are listed with why their data stays (`eckpt down` deletes what it
    /// can reach of theirs).
    async fn purge(&self) -> Vec<NodePurge> {
        let alive = self.alive().await;
        let names: Vec<String> = alive.keys().cloned().collect();
        let requests = alive.into_values().map(|n| (n, PurgeNode)).collect();
        let mut out: Vec<NodePurge> = names
            .into_iter()
            .zip(self.ask_all(requests).await)
            .map(|(node, answer)| NodePurge {
                node,
                result: answer.map_err(|e| e.to_string()),
            })
            .collect();
        let answered: BTreeSet<String> = out.iter().map(|p| p.node.clone()).collect();
        for name in self.snapshot().await.nodes.keys() {
            if !answered.contains(name) {
                out.push(NodePurge {
                    node: name.clone(),
                    result: Err("its agent is not running".into()),
                });
            }
        }
        out
    }
}

/// One node's line in `eckpt status`.
fn node_status(
    journal: &Journal,
    index: &NodeIndex,
    alive: &BTreeMap<String, NodeInfo>,
    damaged: &BTreeMap<String, String>,
    awaited: &BTreeSet<String>,
    name: &str,
    entry: &NodeEntry,
) -> NodeStatus {
    NodeStatus {
        name: name.to_string(),
        alive: alive.contains_key(name),
        addr: entry
            .info
            .as_ref()
            .map(|i| match &i.tcp {
                Endpoint::Tcp { host, port } => format!("{host}:{port}"),
                other => other.to_string(),
            })
            .unwrap_or_default(),
        ranks: index.ranks_on(name).to_vec(),
        spare: entry.spare,
        group: index
            .group_of(name)
            .map(|(g, pos)| (journal.groups[g].group.id, pos)),
        removed: entry.removed,
        hosts_ranks: index.holds_data(name),
        damaged: damaged.get(name).cloned(),
        domain: entry.domain.clone(),
        awaited: awaited.contains(name),
        silent_seconds: None,
    }
}

/// One group's line in `eckpt status`: a member is lost when it is down or damaged.
fn group_status(
    journal: &Journal,
    g: &GroupRecord,
    alive: &BTreeMap<String, NodeInfo>,
    damaged: &BTreeMap<String, String>,
) -> GroupStatus {
    GroupStatus {
        id: g.group.id,
        k: g.group.k,
        m: g.group.m,
        members: g.group.members.clone(),
        lost: g
            .group
            .members
            .iter()
            .filter(|m| !alive.contains_key(*m) || damaged.contains_key(*m))
            .cloned()
            .collect(),
        protected_epoch: g.objects.last().map_or(0, |o| o.version),
        exposed: journal.overexposed(&g.group),
        objects: g.objects.len(),
    }
}

/// Runs the coordinator until told to shut down (a `StopCluster`, its idle rule, SIGINT).
pub async fn run(options: CoordinatorOptions) -> Result<(), ClusterError> {
    run_until(options, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

/// Runs the coordinator until told to shut down or until `interrupted` resolves (what
/// SIGINT is to [`run`]; a simulation's hosts have no signals).
pub async fn run_until(
    options: CoordinatorOptions,
    interrupted: impl std::future::Future<Output = ()>,
) -> Result<(), ClusterError> {
    eckpt_daemon::crash_only::install();
    let host = options.host.clone().unwrap_or_else(host_identity);
    let dir = ClusterDir::new(&options.dir)?;
    let mut cluster = dir.load()?;
    // One coordinator per cluster directory: a second one would make decisions of its own.
    let _owner = eckpt_daemon::owner_lock::OwnerLock::take(&dir.coordinator().join("lock"), "coordinator")?;
    let secret = dir.load_secret()?;
    let mut journal = Journal::load(&dir.journal())?;
    // Listening first: a coordinator that cannot listen must not take the term, or the one
    // it meant to replace (stopped, or cut off, and still running) is fenced with nobody to
    // take over. TCP first: the Unix socket's path is taken over only from a dead listener,
    // and only once the address is known to be free.
    let tcp = listen_for_cluster(
        &Endpoint::Tcp {
            host: options.bind.clone(),
            port: 0,
        },
        &secret,
        &cluster.deadlines,
    )
    .await?;
    let unix = listen_for_cluster(
        &Endpoint::Unix(dir.coordinator_socket()),
        &secret,
        &cluster.deadlines,
    )
    .await?;
    // Task ids are never reused, even those handed out after the last journal write.
    journal.next_task += 1000;
    // This coordinator's term, above every earlier one: a coordinator of an older term (the
    // one this one replaces, if it still runs somewhere) is fenced from the journal and
    // from the agents from here on.
    journal.term += 1;
    journal.save(&dir.journal())?;
    let term = journal.term;
    cluster.coordinator_tcp = Some(tcp.local_endpoint().clone());
    cluster.coordinator_host = Some(host.clone());
    // Its paths came from cluster.json, so they are UTF-8 and it serializes; a failure would
    // be a bug, answered as one.
    let bytes = serde_json::to_vec_pretty(&cluster)
        .map_err(|e| ClusterError::Internal(format!("cluster.json does not serialize: {e}")))?;
    eckpt_cluster_api::dirs::write_atomic(&dir.cluster_file(), &bytes)?;
    let flushed = match &cluster.flush {
        Some(config) => eckpt_flush::FlushDir::new(&config.dir)
            .epochs()
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot list the flush directory");
                Vec::new()
            }),
        None => Vec::new(),
    };
    let agents = Arc::new(SocketAgents {
        host,
        secret,
        term,
        answer_wait: cluster.deadlines.peer_wait(),
        report_wait: cluster.deadlines.liveness(),
        idle: IdleConnections::new(cluster.deadlines.control_idle()),
    });
    let coord = Arc::new(Coordinator::new(
        dir.clone(),
        journal,
        cluster.deadlines,
        cluster.flush.clone(),
        flushed,
        agents,
    ));
    eckpt_cluster_api::dirs::write_pid_file(&dir.coordinator())?;
    let (stop_tx, mut stop_rx) = tokio::sync::mpsc::channel::<()>(1);
    for listener in [unix, tcp] {
        let (coord, stop) = (coord.clone(), stop_tx.clone());
        tokio::spawn(accept_loop(listener, move |conn| {
            serve(coord.clone(), conn, stop.clone())
        }));
    }
    tracing::info!(dir = %dir.root().display(), term, "coordinator started");
    if let Some(idle) = cluster.deadlines.idle() {
        tokio::spawn(stop_when_idle(coord.clone(), idle, stop_tx.clone()));
    }
    tokio::select! {
        _ = stop_rx.recv() => {}
        _ = interrupted => {}
        // The agents follow the newer coordinator now: they are left running.
        why = coord.state.fenced() => return Err(ClusterError::Fenced(why)),
    }
    // Stop the agents, then ourselves.
    let requests = coord
        .alive()
        .await
        .into_values()
        .map(|n| (n, StopAgent))
        .collect();
    coord.ask_all(requests).await;
    Ok(())
}

/// A refused stop of the run that started the cluster (another generation holds the job)
/// leaves the cluster to its idle rule, started now if it does not run yet.
async fn hand_over(coord: &Arc<Coordinator>, stop: &tokio::sync::mpsc::Sender<()>) {
    if let Some(idle) = coord.hand_to_idle_rule().await {
        tracing::info!(
            idle_s = idle.as_secs_f64(),
            "the run that started the cluster was superseded: it stops once no job ran on it for its idle period"
        );
        tokio::spawn(stop_when_idle(coord.clone(), idle, stop.clone()));
    }
}

/// Stops the cluster once no job has run on it for `idle` (its idle lease): busy is a live
/// job lease, a rank's checkpoint in the open epoch, or an epoch committed since the last
/// look (ranks checkpointing without `eckpt run`).
async fn stop_when_idle(coord: Arc<Coordinator>, idle: Duration, stop: tokio::sync::mpsc::Sender<()>) {
    let tick = (idle / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut busy_at = Instant::now();
    let mut committed = coord.status().await.committed_epoch;
    loop {
        tokio::time::sleep(tick).await;
        let status = coord.status().await;
        let leased = coord.read(|s| s.live_lease().is_some()).await;
        if leased || !status.ranks_ready.is_empty() || status.committed_epoch != committed {
            busy_at = Instant::now();
            committed = status.committed_epoch;
        } else if busy_at.elapsed() >= idle && coord.begin_stop(job::Stopper::Idle).await.is_ok() {
            tracing::warn!(
                idle_s = idle.as_secs_f64(),
                "no job ran on the cluster for its idle lease (--idle-lease): stopping it"
            );
            let _ = stop.send(()).await;
            return;
        }
    }
}

async fn serve(
    coord: Arc<Coordinator>,
    mut conn: Connection,
    stop: tokio::sync::mpsc::Sender<()>,
) -> Result<(), ClusterError> {
    match conn.recv_control::<Hello>().await? {
        Hello::Session(info) => session(coord, conn, info).await,
        // Callers keep their connection between requests (`CoordinatorLink`), within half
        // the cluster's control idle: one idle that long is closed.
        Hello::Control => loop {
            let idle = coord.deadlines.control_idle();
            let Ok(next) = tokio::time::timeout(idle, next_request::<CoordRequest>(&mut conn)).await else {
                return Ok(());
            };
            let Some(request) = next? else {
                return Ok(());
            };
            let by_run = match request {
                CoordRequest::Shutdown(StopCluster { by_run })
                | CoordRequest::Purge(PurgeCluster { by_run }) => Some(by_run),
                _ => None,
            };
            let response = answer_keeping_alive(&coord, &mut conn, request).await?;
            conn.send_control(&response).await?;
            if let Some(by_run) = by_run {
                if !matches!(response, CoordResponse::Error(_)) {
                    let _ = stop.send(()).await;
                    return Ok(());
                }
                if by_run.is_some() {
                    hand_over(&coord, &stop).await;
                }
            }
        },
        Hello::Peer { .. } => Err(ClusterError::Protocol(
            "the coordinator takes no peer streams".into(),
        )),
        Hello::Coordinator { term } => Err(ClusterError::Protocol(format!(
            "a coordinator (term {term}) does not send requests to another one"
        ))),
    }
}

/// Where a request's handler reports its progress: `answer_keeping_alive` forwards the
/// reports to the caller. Boxed: the channel's first block of slots is made with it, for
/// every request, and a rank's request waits as long as an epoch takes; 32 slots of a whole
/// `CoordResponse` (312 B) held 10 KB per waiting rank.
type ProgressReports = tokio::sync::mpsc::UnboundedSender<Box<CoordResponse>>;

/// Handles `request`, forwarding its progress to the caller and telling it every keepalive
/// that the request is still being worked on ([`CoordResponse::Working`]), so that a caller
/// bounds its wait for each word rather than for the whole of a long request. A caller gone
/// meanwhile does not stop the handler: it runs to its end, and the error is returned then.
async fn answer_keeping_alive(
    coord: &Arc<Coordinator>,
    conn: &mut Connection,
    request: CoordRequest,
) -> Result<CoordResponse, ClusterError> {
    let (mut progress, mut reports) = tokio::sync::mpsc::unbounded_channel();
    // On the heap, for as long as the request takes: inline, the largest of every request's
    // futures (a recovery's, a flush's) would be part of each connection's task — some 10 KB
    // held by every idle connection of every rank and agent.
    let mut handled = Box::pin(handle(coord, &mut progress, request));
    let mut keepalive = tokio::time::interval(coord.deadlines.keepalive());
    keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    keepalive.tick().await;
    let mut caller: Result<(), eckpt_proto::ProtoError> = Ok(());
    loop {
        tokio::select! {
            biased;
            answer = &mut handled => {
                // Progress reported just before the answer reaches the caller before it.
                while let (Ok(()), Ok(report)) = (&caller, reports.try_recv()) {
                    caller = conn.send_control(&report).await;
                }
                caller?;
                return Ok(answer.unwrap_or_else(|e| CoordResponse::Error(WireError::from(&e))));
            }
            Some(report) = reports.recv(), if caller.is_ok() => caller = conn.send_control(&report).await,
            _ = keepalive.tick(), if caller.is_ok() => caller = conn.send_control(&CoordResponse::Working).await,
        }
    }
}

async fn handle(
    coord: &Arc<Coordinator>,
    progress: &mut ProgressReports,
    request: CoordRequest,
) -> Result<CoordResponse, ClusterError> {
    Ok(match request {
        CoordRequest::Heartbeat(_) | CoordRequest::Holds(_) => {
            return Err(ClusterError::Protocol("heartbeats belong on a session".into()))
        }
        CoordRequest::Status(_) => Status::reply(Box::new(coord.status().await)),
        CoordRequest::Nodes(_) => Nodes::reply(coord.alive().await.into_values().collect()),
        CoordRequest::OpenEpoch(OpenEpoch {
            rank,
            world,
            node,
            epoch,
            generation,
        }) => OpenEpoch::reply(coord.open_epoch(rank, world, node, epoch, generation).await?),
        CoordRequest::RankReady(RankReady {
            rank,
            epoch,
            node,
            report,
            generation,
        }) => RankReady::reply(coord.rank_ready(rank, epoch, node, report, generation).await?),
        CoordRequest::Pace(Pace {
            rank,
            world,
            launch,
            round,
            report,
            generation,
        }) => Pace::reply(coord.pace(rank, world, launch, round, report, generation).await?),
        CoordRequest::WaitEpoch(WaitEpoch { epoch, decision_only }) => {
            WaitEpoch::reply(coord.wait_epoch(epoch, decision_only).await)
        }
        CoordRequest::Locate(Locate {
            rank,
            world,
            generation,
        }) => Locate::reply(coord.locate(rank, world, generation).await?),
        CoordRequest::ClaimJob(claim) => JobClaim::reply(coord.claim_job(claim).await?),
        CoordRequest::RenewLease(RenewLease { generation }) => {
            RenewLease::reply(coord.renew_lease(generation).await?)
        }
        CoordRequest::NextAttempt(NextAttempt { generation }) => {
            NextAttempt::reply(coord.next_attempt(generation).await?)
        }
        CoordRequest::ReleaseJob(ReleaseJob { generation, finished }) => {
            ReleaseJob::reply(coord.release_job(generation, finished).await?)
        }
        CoordRequest::Purge(PurgeCluster { by_run }) => {
            coord.begin_stop(by_run.into()).await?;
            PurgeCluster::reply(coord.purge().await)
        }
        // The three largest futures (a recovery's is 6 KB), on the heap while they run:
        // inline, each rank's request waiting for its epoch would hold their size.
        CoordRequest::Recover(Recover { relocation }) => {
            Recover::reply(Box::pin(coord.recover(progress, relocation)).await?)
        }
        CoordRequest::Export(export) => ExportRank::reply(Box::pin(coord.export(export)).await?),
        CoordRequest::CheckCopy(CheckCopy { rank }) => CheckCopy::reply(coord.check_copy(rank).await?),
        CoordRequest::Flush(FlushEpoch { epoch }) => {
            FlushEpoch::reply(Box::pin(coord.flush_now(epoch)).await?)
        }
        CoordRequest::WaitFlush(_) => WaitFlush::reply(coord.wait_flush().await),
        CoordRequest::Leave(Leave { node }) => {
            let name = node.clone();
            let info = coord
                .read(move |s| s.alive_node(&name))
                .await
                .ok_or_else(|| ClusterError::NotFound(format!("node {node} is not running")))?;
            for r in coord.ask_all(vec![(info, StopAgent)]).await {
                r?;
            }
            Leave::reply(())
        }
        CoordRequest::Shutdown(StopCluster { by_run }) => {
            StopCluster::reply(coord.begin_stop(by_run.into()).await?)
        }
    })
}
