//! `eckpt agent`: one per node. Keeps the node-local store of the ranks placed on the node,
//! takes part in its group's encodes and decodes, commits or aborts as the coordinator
//! decides, and heartbeats to the coordinator over a session it re-establishes if the
//! coordinator restarts.

#![warn(missing_docs)]

mod chunk_crc;
mod chunk_io;
mod coding;
pub mod created;
mod flush;
mod frames;
pub mod host;
pub mod identity;
mod install;
mod links;
pub mod parity_store;
pub mod placement;
mod ranks;
pub mod shard;
pub mod stripe_blob;
mod update;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use eckpt_proto::{ClusterSecret, Connection, Endpoint};
use eckpt_store::{Options, Store};

use crate::parity_store::ParityStore;
use eckpt_cluster_api::call::{agent_answer, coordinator_answer, Call, ToCoordinator};
use eckpt_cluster_api::commands::ask_coordinator;
use eckpt_cluster_api::dirs::{check_node_name, ClusterDir, ClusterFile};
use eckpt_cluster_api::msg::DATA_FRAME;
use eckpt_cluster_api::msg::{
    Abort, AgentRequest, AgentResponse, CancelTask, CodingTask, Commit, CoordResponse, DescribeRequest,
    Discard, ExportItems, FlushRanks, Heartbeat, Hello, ImportFlushed, ImportRank, Install, LinkSink,
    LinkTest, MoveRank, NodeInfo, PurgeNode, PutRank, RankReady, RankReport, Registered, Registration, Scrub,
    StopAgent, UpdateTask,
};
use eckpt_cluster_api::net::{
    accept_loop, call, host_identity, listen_for_cluster, next_request, open, Inbox,
};
use eckpt_cluster_api::{ClusterError, WireError};
use eckpt_daemon::debug::{pause_point_async, Phase};
use eckpt_daemon::{background, blocking};

/// How an agent is started.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The cluster directory.
    pub dir: PathBuf,
    /// Node name.
    pub name: String,
    /// Join as a spare.
    pub spare: bool,
    /// Address to bind the TCP listener to.
    pub bind: String,
    /// Cores offered to ranks (default: the machine's).
    pub cores: Option<u32>,
    /// Node-local directory for the store and parity (default: the node's directory in
    /// the cluster directory, which on a shared file system is not node-local).
    pub local: Option<PathBuf>,
    /// The failure domain this node is in (a rack, a switch), sent with each registration.
    pub domain: Option<String>,
    /// The machine this agent says it runs on (`None`: this one, [`host_identity`]). Hosts
    /// of a simulation share one process, and each says which it is.
    pub host: Option<String>,
}

/// A running agent's shared state.
pub struct Agent {
    dir: ClusterDir,
    info: NodeInfo,
    host: String,
    secret: ClusterSecret,
    store: Store,
    coded: ParityStore,
    inbox: Inbox,
    cluster: ClusterFile,
    /// The node this agent is, proven by its store (and the store's lock, held).
    identity: identity::Identity,
    /// The failure domain it says it is in.
    domain: Option<String>,
    /// The newest coordinator term this agent has heard of (`Registered::term`).
    coordinator_term: std::sync::atomic::AtomicU64,
    /// Threads each chunk of a coding task is read, multiplied and written on
    /// (`eckpt up --agent-threads`).
    coding_threads: usize,
    /// Set from the moment the agent registers until it has resolved its store against the
    /// coordinator's answer. The resolve drops what is prepared and not committed, so work
    /// that would prepare something meanwhile waits: a rank's checkpoint the coordinator
    /// sent once the registration was accepted, but stored before the resolve, was dropped
    /// by it, and its epoch committed without it (found by the link-cut test).
    resolving: tokio::sync::watch::Sender<bool>,
}

impl Agent {
    fn coded_dir(&self) -> PathBuf {
        ClusterDir::coded_beside(self.store.root())
    }

    /// Marks a registration and its resolve under way until the guard is dropped.
    fn resolving(&self) -> Resolving<'_> {
        self.resolving.send_replace(true);
        Resolving(&self.resolving)
    }

    /// Waits (at most the peer wait) until no registration's resolve is under way.
    async fn until_resolved(&self) -> Result<(), ClusterError> {
        let mut resolving = self.resolving.subscribe();
        if *resolving.borrow() {
            tracing::info!(
                "a request waits until this node's store is resolved against the coordinator's answer"
            );
        }
        let wait = self.cluster.deadlines.peer_wait();
        let resolved = tokio::time::timeout(wait, resolving.wait_for(|under_way| !under_way))
            .await
            .is_ok();
        if resolved {
            Ok(())
        } else {
            Err(ClusterError::Refused(format!(
                "node {} is still resolving its store against the coordinator after {:.0} s",
                self.info.name,
                wait.as_secs_f64()
            )))
        }
    }

    /// The coordinator as it was last announced (it rewrites `cluster.json` when it starts
    /// again, with new ports).
    fn coordinator(&self) -> Endpoint {
        let file = self.dir.load().unwrap_or_else(|_| self.cluster.clone());
        file.coordinator_from(&self.host).clone()
    }

    /// Follows the coordinator of `term` unless a newer one was heard of: then why not.
    /// After a failover, the coordinator replaced (cut off, not dead) may still send
    /// decisions; they are refused once this agent has heard of its successor.
    fn follow_coordinator(&self, term: u64) -> Result<(), String> {
        let newest = self
            .coordinator_term
            .fetch_max(term, std::sync::atomic::Ordering::SeqCst);
        if term < newest {
            return Err(format!(
                "the coordinator of term {term} is refused: {} follows the coordinator of term {newest}",
                self.info.name
            ));
        }
        Ok(())
    }
}

/// Runs an agent until it is told to shut down: the daemon `eckpt agent`, one per process.
pub async fn run(options: AgentOptions) -> Result<(), ClusterError> {
    eckpt_daemon::crash_only::install();
    let mut started = start(options, SessionOn::OwnThread).await?;
    eckpt_cluster_api::dirs::write_pid_file(&started.agent.dir.node(&started.agent.info.name))?;
    tracing::info!(node = %started.agent.info.name, tcp = %started.agent.info.tcp, "agent started");
    tokio::select! {
        _ = started.stop.recv() => tracing::info!("shutting down on request"),
        _ = tokio::signal::ctrl_c() => tracing::info!("shutting down on signal"),
        Some(e) = started.refusal.recv() => return Err(e),
    }
    Ok(())
}

/// Runs an agent, one of many in this process ([`host`]), until it is told to shut down
/// or `killed` resolves. It runs on the caller's runtime, which it shares with nothing else:
/// dropping that runtime ends every task of this agent, as a crash of its node would. It
/// writes no pid file (the process is not this node's alone) and leaves signals to its host.
pub async fn run_hosted(
    options: AgentOptions,
    killed: impl std::future::Future<Output = ()>,
) -> Result<(), ClusterError> {
    let mut started = start(options, SessionOn::SameRuntime).await?;
    tokio::select! {
        _ = started.stop.recv() => {}
        _ = killed => {}
        Some(e) = started.refusal.recv() => return Err(e),
    }
    Ok(())
}

/// Where an agent's session with the coordinator runs.
#[derive(Clone, Copy)]
enum SessionOn {
    /// A thread and runtime of its own: heartbeats flow however busy the node's runtime is.
    OwnThread,
    /// The agent's runtime: a hosted agent's runtime is its own already, and thousands of
    /// agents in one process cannot have two threads each.
    SameRuntime,
}

/// An agent accepted by the coordinator.
struct Started {
    agent: Arc<Agent>,
    /// A request to stop (`StopAgent`).
    stop: tokio::sync::mpsc::Receiver<()>,
    /// The coordinator refused this node after it had started.
    refusal: tokio::sync::mpsc::Receiver<ClusterError>,
}

/// Claims the node's store, listens, and registers with the coordinator: returns once the
/// coordinator has accepted the agent.
async fn start(options: AgentOptions, session_on: SessionOn) -> Result<Started, ClusterError> {
    check_node_name(&options.name)?;
    let dir = ClusterDir::new(&options.dir)?;
    let cluster = dir.load()?;
    let secret = dir.load_secret()?;
    let node_dir = dir.node(&options.name);
    std::fs::create_dir_all(&node_dir).map_err(eckpt_cluster_api::io_at(&node_dir))?;
    let (store_root, created_local) = match &options.local {
        Some(local) => {
            let local = if local.is_absolute() {
                local.clone()
            } else {
                std::env::current_dir()
                    .map_err(eckpt_cluster_api::io_at(local))?
                    .join(local)
            };
            // Node-local storage is often a place others can write (/tmp, /dev/shm). A
            // directory the user gave keeps its mode: it holds only the store and the
            // parity directory, both owner-only.
            let created = eckpt_private_dir::ensure_untouched(&local)?;
            (ClusterDir::local_store(&local), created)
        }
        None => (dir.store(&options.name), false),
    };
    // The store is claimed (its lock taken, its owner checked) before anything in it is
    // touched: opening a store cleans what a crash left.
    let identity = identity::claim(&store_root, &options.name, created_local)?;
    let store = Store::open_with(&store_root, Options::default())?;
    // This agent is the only process that pins epochs (for flushes): any pin left is from a
    // predecessor that died mid-flush, and that flush is over.
    store.clear_pins()?;
    let coded_dir = ClusterDir::coded_beside(&store_root);
    // Parity is the job's memory too: owner-only, like the store.
    eckpt_private_dir::ensure(&coded_dir)?;
    let coded = ParityStore::open(&coded_dir)?;
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
        &Endpoint::Unix(dir.agent_socket(&options.name)),
        &secret,
        &cluster.deadlines,
    )
    .await?;
    let cores = options.cores.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1)
    });
    let info = NodeInfo {
        name: options.name.clone(),
        spare: options.spare,
        tcp: tcp.local_endpoint().clone(),
        unix: unix.local_endpoint().clone(),
        host: options.host.clone().unwrap_or_else(host_identity),
        cores,
        store: store.root().to_path_buf(),
        pid: std::process::id(),
    };
    let coding_threads = crate::placement::coding_threads(&cluster.agent_placement);
    let agent = Arc::new(Agent {
        host: info.host.clone(),
        dir,
        info,
        secret,
        store,
        coded,
        inbox: Inbox::new(cluster.deadlines.peer_wait()),
        cluster,
        identity,
        domain: options.domain,
        coordinator_term: 0.into(),
        coding_threads,
        resolving: tokio::sync::watch::Sender::new(false),
    });
    let (stop_tx, stop_rx) = tokio::sync::mpsc::channel::<()>(1);
    for listener in [tcp, unix] {
        let (agent, stop) = (agent.clone(), stop_tx.clone());
        tokio::spawn(accept_loop(listener, move |conn| {
            serve(agent.clone(), conn, stop.clone())
        }));
    }
    // Liveness must not depend on how busy the node is: the session with the coordinator
    // runs on a thread and runtime of its own, so heartbeats flow even while every worker of
    // the main runtime is busy with a large decode or import (otherwise the coordinator sees
    // a loaded node as dead for a moment, and a recovery or epoch fails on it).
    let session_agent = agent.clone();
    let (registered, first_registration) = tokio::sync::oneshot::channel();
    let (refused, refusal) = tokio::sync::mpsc::channel::<ClusterError>(1);
    match session_on {
        SessionOn::SameRuntime => {
            tokio::spawn(session_loop(session_agent, registered, refused));
        }
        SessionOn::OwnThread => {
            std::thread::Builder::new()
                .name("coordinator-session".into())
                .spawn(move || {
                    // A runtime needs descriptors (epoll, eventfd): out of them, the agent's
                    // start fails with the reason, through the wait for the first
                    // registration below.
                    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = registered.send(Err(ClusterError::Internal(format!(
                                "starting the session thread's runtime: {e}"
                            ))));
                            return;
                        }
                    };
                    rt.block_on(session_loop(session_agent, registered, refused))
                })
                .map_err(|e| ClusterError::Internal(format!("starting the session thread: {e}")))?;
        }
    }
    // The pid file names this node's agent only once the coordinator accepted it: an
    // agent refused as a duplicate or an impostor leaves no trace.
    // The coordinator may start after the agents when another launcher starts them.
    let start_wait = agent.cluster.deadlines.start_wait();
    let not_accepted = || {
        ClusterError::Unreachable(format!(
            "the coordinator of {} did not accept this agent within {:.0} s",
            agent.dir.root().display(),
            start_wait.as_secs_f64()
        ))
    };
    let mut first_registration = first_registration;
    let answer = match tokio::time::timeout(start_wait, &mut first_registration).await {
        Ok(answer) => answer,
        // A node the cluster knows (its store registered before) holds part of the job's
        // committed checkpoints and parity. Its agent giving up on a coordinator that is
        // restarting or failing over would turn a node that rebooted into one lost for
        // good, and a later loss in its group into more than the code rebuilds (found by
        // the simulator). It says so and keeps trying; `eckpt down` or a kill ends it.
        // A new store holds nothing yet: its agent gives up, with the reason.
        Err(_) if !agent.identity.fresh => {
            tracing::warn!(
                node = %agent.info.name,
                "the coordinator of {} has not accepted this agent within {:.0} s; the node holds committed checkpoints, so it keeps trying (`eckpt down --dir {0}` stops it)",
                agent.dir.root().display(),
                start_wait.as_secs_f64()
            );
            first_registration.await
        }
        Err(_) => return Err(not_accepted()),
    };
    // The session ends only by answering its first registration or after it did.
    answer.map_err(|_| not_accepted())??;
    Ok(Started {
        agent,
        stop: stop_rx,
        refusal,
    })
}

/// What the session thread tells the agent's start about its first registration.
type FirstRegistration = tokio::sync::oneshot::Sender<Result<(), ClusterError>>;

/// Registers with the coordinator, resolves what was left undecided, says what the node
/// holds, and heartbeats; on a broken session, tries again every second. A refusal (another
/// agent is this node, or this store is another node's) ends the agent: at its start
/// through `first`, later through `refused`. A coordinator superseded by a newer term is
/// no refusal: it answers as one that cannot be reached, and the next try goes to the
/// coordinator `cluster.json` names then.
async fn session_loop(
    agent: Arc<Agent>,
    first: FirstRegistration,
    refused: tokio::sync::mpsc::Sender<ClusterError>,
) {
    let mut first = Some(first);
    loop {
        match session(&agent, &mut first).await {
            Ok(()) => {}
            Err(e) if e.kind() == eckpt_cluster_api::ErrorKind::Fenced => {
                tracing::error!(error = %e, "the coordinator refused this agent");
                match first.take() {
                    Some(first) => {
                        let _ = first.send(Err(e));
                        return;
                    }
                    None => {
                        let _ = refused.send(e).await;
                        return;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "coordinator session ended"),
        }
        tokio::time::sleep(agent.cluster.deadlines.heartbeat()).await;
    }
}

/// Bounds `step` of the session by `limit`: a coordinator cut off by a partition must not
/// hold the session forever (the agent then opens a new one, which, unlike a connection
/// waiting out TCP's retransmission backoff, gets through as soon as the link is back).
async fn within<T>(
    limit: Duration,
    what: &str,
    step: impl std::future::Future<Output = Result<T, ClusterError>>,
) -> Result<T, ClusterError> {
    tokio::time::timeout(limit, step).await.unwrap_or_else(|_| {
        Err(ClusterError::Unreachable(format!(
            "the coordinator did not answer {what} within {:.1} s",
            limit.as_secs_f64()
        )))
    })
}

async fn session(agent: &Arc<Agent>, first: &mut Option<FirstRegistration>) -> Result<(), ClusterError> {
    let deadlines = agent.cluster.deadlines;
    // Before the registration is sent: the coordinator may send work once it accepts it.
    let resolving = agent.resolving();
    let registration = Registration {
        info: agent.info.clone(),
        token: agent.identity.token.clone(),
        fresh: agent.identity.fresh,
        domain: agent.domain.clone(),
    };
    // A connection gets one liveness period (after a partition a new one gets through at
    // once, while one waiting out SYN retransmissions would not); registering journals the
    // agent, so its answer gets the time of a connection.
    let mut conn = within(
        deadlines.liveness(),
        "a connection",
        open(&agent.coordinator(), &agent.secret, &Hello::Session(registration)),
    )
    .await?;
    let register_wait = deadlines.registration();
    let registered = within(register_wait, "the registration", async {
        Ok(conn.recv_control::<CoordResponse>().await?)
    })
    .await?;
    let Registered {
        term,
        committed,
        keep,
        versions,
        discard,
    } = coordinator_answer::<Registration>(COORDINATOR, registered)?;
    // An older coordinator's view of what is committed must not be resolved from: the
    // session is tried again, with the coordinator `cluster.json` names then.
    agent
        .follow_coordinator(term)
        .map_err(ClusterError::Unreachable)?;
    pause_point_async(&agent.dir.debug(), Phase::BeforeResolve, &agent.info.name).await;
    let a = agent.clone();
    let held = blocking(move || {
        if discard {
            tracing::warn!("this node was rebuilt elsewhere while it was away: it discards what it held and rejoins as a spare");
            a.discard()?;
        } else {
            a.resolve(committed, &keep, &versions)?;
        }
        a.inventory()
    })
    .await?;
    drop(resolving);
    session_call(&mut conn, register_wait, "what this node holds", held).await?;
    if let Some(first) = first.take() {
        let _ = first.send(Ok(()));
    }
    loop {
        tokio::time::sleep(deadlines.heartbeat()).await;
        session_call(&mut conn, deadlines.liveness(), "a heartbeat", Heartbeat).await?;
    }
}

/// How the coordinator is named in the errors of an agent's calls.
const COORDINATOR: &str = "the coordinator";

/// A registration and its resolve under way ([`Agent::resolving`]); over when dropped,
/// whichever way the session attempt ends.
struct Resolving<'a>(&'a tokio::sync::watch::Sender<bool>);

impl Drop for Resolving<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

/// Sends `request` on the agent's session and reads its answer, within `wait`.
async fn session_call<C: ToCoordinator>(
    conn: &mut Connection,
    wait: Duration,
    what: &str,
    request: C,
) -> Result<C::Answer, ClusterError> {
    let answer = within(wait, what, call(conn, &request.request())).await?;
    coordinator_answer::<C>(COORDINATOR, answer)
}

async fn serve(
    agent: Arc<Agent>,
    mut conn: Connection,
    stop: tokio::sync::mpsc::Sender<()>,
) -> Result<(), ClusterError> {
    match conn.recv_control::<Hello>().await? {
        Hello::Peer { task, from, phase } => {
            // A participant index is a member or an extra rebuild target (at most one per
            // member), a phase a parity index: anything larger belongs to no task.
            if from >= 2 * eckpt_codec::MAX_SHARDS || phase as usize >= eckpt_codec::MAX_SHARDS {
                let why = format!("peer stream of task {task} from participant {from} in phase {phase}");
                conn.send_control(&AgentResponse::Error(WireError::from(&ClusterError::Protocol(
                    format!("refused: {why}"),
                ))))
                .await?;
                return Err(ClusterError::Protocol(why));
            }
            let (reader, _writer) = conn.into_split();
            agent.inbox.put(task, phase, from, reader);
            Ok(())
        }
        Hello::Coordinator { term } => {
            refuse_a_stale_coordinator(&agent, &mut conn, term).await?;
            serve_requests(agent, conn, Some(term), stop).await
        }
        Hello::Control => serve_requests(agent, conn, None, stop).await,
        Hello::Session(_) => Err(ClusterError::Protocol("agents do not take sessions".into())),
    }
}

/// Follows the coordinator of `term`, or tells it it is refused and fails: this agent
/// follows a newer one.
async fn refuse_a_stale_coordinator(
    agent: &Agent,
    conn: &mut Connection,
    term: u64,
) -> Result<(), ClusterError> {
    let Err(why) = agent.follow_coordinator(term) else {
        return Ok(());
    };
    tracing::warn!(term, "{why}");
    let refusal = WireError::from(&ClusterError::Fenced(why.clone()));
    conn.send_control(&AgentResponse::Error(refusal)).await?;
    Err(ClusterError::Fenced(why))
}

/// Answers the requests of a control connection, one at a time, until it closes or stays
/// idle for the cluster's [`control_idle`](eckpt_cluster_api::dirs::Deadlines::control_idle).
/// A coordinator's connection (`term`) outlives requests: each is refused once this agent
/// follows a newer coordinator, as a new connection would be.
async fn serve_requests(
    agent: Arc<Agent>,
    mut conn: Connection,
    term: Option<u64>,
    stop: tokio::sync::mpsc::Sender<()>,
) -> Result<(), ClusterError> {
    let idle = agent.cluster.deadlines.control_idle();
    loop {
        let Ok(next) = tokio::time::timeout(idle, next_request::<AgentRequest>(&mut conn)).await else {
            return Ok(());
        };
        let Some(request) = next? else {
            return Ok(());
        };
        if let Some(term) = term {
            refuse_a_stale_coordinator(&agent, &mut conn, term).await?;
        }
        let shutdown = matches!(request, AgentRequest::Shutdown(_) | AgentRequest::Purge(_));
        // A cancel or a stop goes through at once; anything else waits for the resolve of a
        // registration under way.
        let prompt = shutdown || matches!(request, AgentRequest::CancelTask(_));
        let settled = if prompt {
            Ok(())
        } else {
            agent.until_resolved().await
        };
        let handled = match settled {
            // On the heap while it runs: inline, the largest request's future would be held
            // by every idle connection's task.
            Ok(()) => Box::pin(handle(&agent, &mut conn, request)).await,
            Err(e) => Err(e),
        };
        let response = match handled {
            Ok(r) => r,
            Err(e) => Some(AgentResponse::Error(WireError::from(&e))),
        };
        if let Some(r) = response {
            conn.send_control(&r).await?;
        }
        if shutdown {
            let _ = stop.send(()).await;
            return Ok(());
        }
    }
}

/// Streams rank `rank`'s items at `epoch` (from the decode scratch store `scratch`, if any).
async fn export(
    agent: &Arc<Agent>,
    conn: &mut Connection,
    rank: u32,
    epoch: u64,
    scratch: Option<u64>,
) -> Result<(), ClusterError> {
    let a = agent.clone();
    let (store, items) = blocking(move || {
        let store = a.export_store(scratch)?;
        let view = store.view(rank, epoch)?;
        let items: Vec<(String, u64)> = view
            .manifest()
            .items
            .iter()
            .map(|i| (i.name.clone(), i.len))
            .collect();
        Ok((store, items))
    })
    .await?;
    conn.send_control(&ExportItems::reply(items.clone())).await?;
    for (name, len) in items {
        let mut offset = 0u64;
        while offset < len {
            let n = (len - offset).min(DATA_FRAME as u64) as usize;
            let (s, item) = (store.clone(), name.clone());
            let piece = blocking(move || {
                let mut buf = vec![0u8; n];
                s.read_item_range(rank, epoch, &item, offset, &mut buf)?;
                Ok(buf)
            })
            .await?;
            conn.send_data(&piece).await?;
            if offset == 0 {
                // Fault injection: the restore has its first frame, not the rest.
                pause_point_async(&agent.dir.debug(), Phase::MidExport, &agent.info.name).await;
            }
            offset += n as u64;
        }
    }
    Ok(())
}

/// This node's part of task `task`, ended early when the coordinator cancels the task (a
/// participant is gone): what it prepared is dropped by the epoch's abort.
async fn until_cancelled<T>(
    agent: &Agent,
    task: u64,
    part: impl std::future::Future<Output = Result<T, ClusterError>>,
) -> Result<T, ClusterError> {
    tokio::select! {
        done = part => done,
        reason = agent.inbox.cancelled(task) => Err(ClusterError::Link(format!("task {task} cancelled: {reason}"))),
    }
}

/// Handles one request; `None` when the handler answered itself.
async fn handle(
    agent: &Arc<Agent>,
    conn: &mut Connection,
    request: AgentRequest,
) -> Result<Option<AgentResponse>, ClusterError> {
    let a = agent.clone();
    Ok(Some(match request {
        AgentRequest::PutRank(PutRank {
            rank,
            epoch,
            item,
            len,
            generation,
        }) => {
            let what = format!("rank {rank}'s item {item:?}");
            frames::check_room(agent.store.root(), &what, len)?;
            frames::receive(conn, len, what, agent.inbox.peer_wait(), move |frames| {
                a.put_rank(rank, epoch, &item, len, frames)
            })
            .await?;
            let mut coord = open(&agent.coordinator(), &agent.secret, &Hello::Control).await?;
            let ready = RankReady {
                rank,
                epoch,
                node: agent.info.name.clone(),
                report: RankReport {
                    image_bytes: len,
                    stored_bytes: len,
                    pace: None,
                },
                generation,
            };
            let answer = agent.cluster.deadlines.answer();
            match ask_coordinator(&mut coord, COORDINATOR, ready, answer, |_| {}).await {
                Ok(()) => PutRank::reply(()),
                // The coordinator's refusal, or an answer of another kind, goes to the rank
                // as it is.
                Err(e @ (ClusterError::Remote { .. } | ClusterError::Protocol(_))) => {
                    AgentResponse::Error(WireError::from(&e))
                }
                Err(e) => return Err(e),
            }
        }
        AgentRequest::ImportRank(ImportRank { rank, epoch, items }) => {
            ImportRank::reply(install::receive(agent, conn, rank, epoch, items).await?)
        }
        AgentRequest::Export(ExportItems { rank, epoch, scratch }) => {
            let streamed = export(agent, conn, rank, epoch, scratch).await;
            // A decoded image is kept only for the one restore that asked for it.
            if let Some(task) = scratch {
                let _ = std::fs::remove_dir_all(agent.export_scratch(task));
            }
            streamed?;
            return Ok(None);
        }
        AgentRequest::LinkSink(_) => {
            let mut buf = Vec::new();
            loop {
                conn.recv_data(&mut buf).await?;
                if buf.is_empty() {
                    break;
                }
            }
            LinkSink::reply(())
        }
        other if other.reports_working() => {
            reporting_work(conn, agent.cluster.deadlines.keepalive(), work(agent, other)).await
        }
        other => work(agent, other).await?,
    }))
}

/// `work`'s answer, with [`AgentResponse::Working`] sent on `conn` every `every` until it
/// comes (once per heartbeat: the coordinator bounds the silence by the liveness period).
/// A connection that fails under it, or takes longer than `every` to take a report (a
/// coordinator stopped with the socket's buffer full), takes no more reports; the work goes
/// on, as it would have without them, and its answer meets the same failure — the
/// coordinator gave up on the silence long before.
async fn reporting_work(
    conn: &mut Connection,
    every: Duration,
    work: impl std::future::Future<Output = Result<AgentResponse, ClusterError>>,
) -> AgentResponse {
    tokio::pin!(work);
    let mut reports = tokio::time::interval_at(Instant::now() + every, every);
    reports.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reporting = true;
    let done = loop {
        tokio::select! {
            done = &mut work => break done,
            _ = reports.tick(), if reporting => {
                let report = tokio::time::timeout(every, conn.send_control(&AgentResponse::Working));
                reporting = matches!(report.await, Ok(Ok(())));
            }
        }
    };
    done.unwrap_or_else(|e| AgentResponse::Error(WireError::from(&e)))
}

/// Handles a request the agent answers without using its connection.
async fn work(agent: &Arc<Agent>, request: AgentRequest) -> Result<AgentResponse, ClusterError> {
    let a = agent.clone();
    Ok(match request {
        AgentRequest::CancelTask(CancelTask { task, reason }) => {
            agent.inbox.cancel(task, reason);
            CancelTask::reply(())
        }
        AgentRequest::MoveRank(MoveRank { rank, epoch, to }) => {
            MoveRank::reply(agent.move_rank(rank, epoch, &to).await?)
        }
        AgentRequest::Describe(req) => DescribeRequest::reply(blocking(move || a.describe(&req)).await?),
        AgentRequest::Code(task) => {
            let id = task.task;
            CodingTask::reply(until_cancelled(agent, id, coding::run(a, task)).await?)
        }
        AgentRequest::Update(task) => {
            let id = task.task;
            UpdateTask::reply(until_cancelled(agent, id, update::run(a, task)).await?)
        }
        AgentRequest::Install(Install {
            parts,
            member,
            epoch,
            deliver,
        }) => {
            let rebuilt = blocking(move || install::rebuilt(&a, &parts, member, epoch)).await?;
            Install::reply(agent.deliver(rebuilt, epoch, &deliver).await?)
        }
        AgentRequest::Commit(Commit {
            epoch,
            ranks,
            objects,
            keep,
        }) => Commit::reply(blocking(move || a.commit(epoch, &ranks, &objects, &keep)).await?),
        AgentRequest::Abort(Abort { epoch }) => Abort::reply(blocking(move || a.abort(epoch)).await?),
        AgentRequest::Scrub(Scrub {
            ranks,
            epoch,
            objects,
        }) => Scrub::reply(blocking(move || Ok(a.scrub(&ranks, epoch, &objects))).await?),
        AgentRequest::Flush(FlushRanks {
            epoch,
            ranks,
            staging,
            rate,
        }) => FlushRanks::reply(background(move || a.flush(epoch, &ranks, &staging, rate)).await?),
        AgentRequest::ImportFlushed(ImportFlushed {
            flush,
            epoch,
            as_epoch,
            ranks,
        }) => {
            ImportFlushed::reply(blocking(move || a.import_flushed(&flush, epoch, as_epoch, &ranks)).await?)
        }
        AgentRequest::LinkTest(LinkTest { peer, bytes }) => {
            let mut peer_conn = eckpt_cluster_api::net::open_node(&peer, &agent.host, &agent.secret).await?;
            peer_conn.send_control(&LinkSink.request()).await?;
            let block = vec![0x5Au8; 1 << 20];
            let started = Instant::now();
            let mut sent = 0u64;
            while sent < bytes {
                let n = (bytes - sent).min(block.len() as u64) as usize;
                peer_conn.send_data(&block[..n]).await?;
                sent += n as u64;
            }
            peer_conn.send_data(&[]).await?;
            agent_answer::<LinkSink>(&peer.name, peer_conn.recv_control().await?)?;
            LinkTest::reply(started.elapsed().as_secs_f64())
        }
        AgentRequest::Purge(_) => {
            let created_local = agent.identity.created_local;
            let store = agent.store.root().to_path_buf();
            let purged = blocking(move || identity::purge(&store, created_local)).await?;
            if !purged.foreign.is_empty() {
                let root = agent.store.root().parent().unwrap_or(agent.store.root());
                tracing::warn!(
                    "purge: kept what eckpt did not create: {}",
                    crate::created::listing(root, &purged.foreign)
                );
            }
            PurgeNode::reply(purged.removed)
        }
        AgentRequest::Discard(_) => Discard::reply(blocking(move || a.discard()).await?),
        AgentRequest::Shutdown(_) => StopAgent::reply(()),
        AgentRequest::PutRank(_)
        | AgentRequest::ImportRank(_)
        | AgentRequest::Export(_)
        | AgentRequest::LinkSink(_) => {
            return Err(ClusterError::Internal(
                "a request that streams was handled without its connection".into(),
            ))
        }
    })
}
