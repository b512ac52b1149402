//! A coordinator over agents in memory, for the executors' unit tests: the real
//! coordinator (its state owner, journal, epoch, recovery and export code) with
//! [`MemoryAgents`] answering as agents do, recording what each was asked, and failing or
//! hanging where a test says. Liveness is real: agents heartbeat until a test stops one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::agents::{Agents, Answer};
use super::{Coordinator, Journal};
use eckpt_cluster_api::call::Call;
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines};
use eckpt_cluster_api::msg::{
    Abort, AgentRequest, AgentResponse, CancelTask, CodingTask, Commit, Damage, DescribeRequest, Discard,
    EpochOutcome, ExportItems, FlushPart, FlushRanks, ImportFlushed, Install, Inventory, MoveRank, NodeInfo,
    Opened, PurgeNode, RankReport, Registered, Registration, Scrub, ShardInfo, StopAgent, TaskReport,
    UpdateTask,
};
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::{ClusterError, ErrorKind, WireError};
use eckpt_coding::config::CodingConfig;
use eckpt_coding::geometry::Geometry;
use eckpt_proto::Endpoint;

/// Bytes of every rank's image.
pub const RANK_BYTES: u64 = 3 << 20;

/// The kinds of request a test can fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Describe,
    Encode,
    Decode,
    Install,
    MoveRank,
    Commit,
    Abort,
    Scrub,
    CancelTask,
    Other,
}

/// What kind of request `request` is.
pub fn kind(request: &AgentRequest) -> Kind {
    match request {
        AgentRequest::Describe(_) => Kind::Describe,
        AgentRequest::Code(t) if t.decode.is_some() => Kind::Decode,
        AgentRequest::Code(_) | AgentRequest::Update(_) => Kind::Encode,
        AgentRequest::Install { .. } => Kind::Install,
        AgentRequest::MoveRank { .. } => Kind::MoveRank,
        AgentRequest::Commit { .. } => Kind::Commit,
        AgentRequest::Abort { .. } => Kind::Abort,
        AgentRequest::Scrub { .. } => Kind::Scrub,
        AgentRequest::CancelTask { .. } => Kind::CancelTask,
        _ => Kind::Other,
    }
}

/// How an agent misbehaves.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answers requests of this kind with this error (its own failure, not a broken link).
    Fail(Kind, &'static str),
    /// As `Fail`, once the agent was asked a request of the first kind.
    FailAfter(Kind, Kind, &'static str),
    /// Its parts of this kind wait for a peer's stream that never comes: each ends only
    /// when its task is cancelled (`CancelTask`), with the link error a real part gives.
    AwaitPeers(Kind),
    /// Its parts of this kind take this long and cannot be cancelled (a flush's copy), then
    /// answer as a healthy agent does.
    Slow(Kind, Duration),
    /// Answers requests of this kind as an agent whose own stored data fails its checksums
    /// does (an error of kind `Corrupt`).
    Rotten(Kind, &'static str),
    /// Stopped (SIGSTOP, a hung host): answers nothing any more.
    Stopped,
}

#[derive(Default)]
struct MemoryAgent {
    asked: Vec<AgentRequest>,
    faults: Vec<Fault>,
    /// Parts waiting for their task to be cancelled, by task.
    waiting: Vec<(u64, tokio::sync::oneshot::Sender<String>)>,
}

/// Agents in memory: each answers as a healthy agent does unless a fault is set.
#[derive(Default)]
pub struct MemoryAgents {
    agents: Mutex<BTreeMap<String, MemoryAgent>>,
}

impl MemoryAgents {
    /// Adds a way `node` misbehaves from now on.
    pub fn fault(&self, node: &str, fault: Fault) {
        self.agents
            .lock()
            .unwrap()
            .entry(node.into())
            .or_default()
            .faults
            .push(fault);
    }

    /// The kinds of request `node` was asked, in order.
    pub fn asked(&self, node: &str) -> Vec<Kind> {
        self.agents
            .lock()
            .unwrap()
            .get(node)
            .map(|a| a.asked.iter().map(kind).collect())
            .unwrap_or_default()
    }

    /// The requests `node` was asked, in order.
    pub fn requests(&self, node: &str) -> Vec<AgentRequest> {
        self.agents
            .lock()
            .unwrap()
            .get(node)
            .map(|a| a.asked.clone())
            .unwrap_or_default()
    }

    /// Forgets what every agent was asked.
    pub fn clear(&self) {
        for agent in self.agents.lock().unwrap().values_mut() {
            agent.asked.clear();
        }
    }
}

impl Agents for MemoryAgents {
    fn ask(&self, node: NodeInfo, request: AgentRequest) -> Answer {
        let mut agents = self.agents.lock().unwrap();
        let agent = agents.entry(node.name.clone()).or_default();
        agent.asked.push(request.clone());
        if let AgentRequest::CancelTask(CancelTask { task, reason }) = &request {
            for (_, part) in agent.waiting.extract_if(.., |(t, _)| t == task) {
                let _ = part.send(reason.clone());
            }
        }
        let fault = agent.faults.iter().find(|f| match f {
            Fault::Stopped => true,
            Fault::AwaitPeers(k) | Fault::Fail(k, _) | Fault::Rotten(k, _) | Fault::Slow(k, _) => {
                *k == kind(&request)
            }
            Fault::FailAfter(after, k, _) => {
                *k == kind(&request) && agent.asked.iter().any(|r| kind(r) == *after)
            }
        });
        match fault.cloned() {
            Some(Fault::Stopped) => Box::pin(std::future::pending()),
            Some(Fault::AwaitPeers(_)) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                agent.waiting.push((task_of(&request), tx));
                let name = node.name.clone();
                Box::pin(async move {
                    let reason = rx.await.unwrap_or_default();
                    Err(ClusterError::Node {
                        node: name,
                        reason: format!("stream ended early (task cancelled: {reason})"),
                    })
                })
            }
            Some(Fault::Slow(_, takes)) => {
                let answer = healthy_answer(&node.name, request);
                Box::pin(async move {
                    tokio::time::sleep(takes).await;
                    Ok(answer)
                })
            }
            Some(
                fault @ (Fault::Fail(_, message)
                | Fault::FailAfter(_, _, message)
                | Fault::Rotten(_, message)),
            ) => {
                let e = WireError {
                    kind: match fault {
                        Fault::Rotten(..) => ErrorKind::Corrupt,
                        _ => ErrorKind::Io,
                    },
                    message: message.into(),
                };
                let name = node.name.clone();
                Box::pin(async move { Err(ClusterError::remote(&name, e)) })
            }
            None => {
                let answer = healthy_answer(&node.name, request);
                Box::pin(async move { Ok(answer) })
            }
        }
    }
}

/// The task a coding request belongs to (0 for others).
fn task_of(request: &AgentRequest) -> u64 {
    match request {
        AgentRequest::Code(t) => t.task,
        AgentRequest::Update(t) => t.task,
        _ => 0,
    }
}

/// What a healthy agent answers, each request with its own answer type ([`Call::reply`]):
/// its shard for a `Describe` (every rank [`RANK_BYTES`]), a chunk CRC per data chunk for an
/// encode, nothing damaged for a scrub, done for the rest. No wildcard: a new request makes
/// this answer it.
fn healthy_answer(node: &str, request: AgentRequest) -> AgentResponse {
    match request {
        AgentRequest::Describe(d) => {
            let items = d
                .ranks
                .iter()
                .map(|&r| (r, "state".to_string(), RANK_BYTES))
                .collect();
            let layout = ShardLayout::pack(&items);
            DescribeRequest::reply(ShardInfo {
                len: layout.len(),
                layout,
                updatable: false,
                changed: 0,
            })
        }
        AgentRequest::Code(task) => {
            let x = task
                .participants
                .iter()
                .position(|p| p.as_ref().is_some_and(|p| p.name == node))
                .expect("a participant of its task");
            let g = &task.group;
            let geometry = Geometry::new(task.coding.layout, g.k, g.m, task.object.data_chunks);
            let crcs = if task.decode.is_none() && x < g.k + g.m && geometry.holds_data(x) {
                (0..geometry.data_chunks(x)).map(|q| (q, q as u32)).collect()
            } else {
                Vec::new()
            };
            CodingTask::reply(TaskReport {
                crcs,
                ..TaskReport::default()
            })
        }
        AgentRequest::Update(_) => UpdateTask::reply(TaskReport::default()),
        AgentRequest::Scrub(_) => Scrub::reply(Damage::default()),
        AgentRequest::Install(_) => Install::reply(()),
        AgentRequest::MoveRank(_) => MoveRank::reply(()),
        AgentRequest::Commit(_) => Commit::reply(()),
        AgentRequest::Abort(_) => Abort::reply(()),
        AgentRequest::CancelTask(_) => CancelTask::reply(()),
        AgentRequest::Export(_) => ExportItems::reply(Vec::new()),
        AgentRequest::Flush(_) => FlushRanks::reply(FlushPart {
            ranks: Vec::new(),
            bytes: 0,
            seconds: 0.0,
        }),
        AgentRequest::ImportFlushed(_) => ImportFlushed::reply(()),
        AgentRequest::Purge(_) => PurgeNode::reply(Vec::new()),
        AgentRequest::Discard(_) => Discard::reply(()),
        AgentRequest::Shutdown(_) => StopAgent::reply(()),
        // Ranks and agents send these, never the coordinator.
        AgentRequest::PutRank(_)
        | AgentRequest::ImportRank(_)
        | AgentRequest::LinkTest(_)
        | AgentRequest::LinkSink(_) => panic!("the coordinator sent {request:?}"),
    }
}

/// A coordinator with `nodes` agents in memory, all registered and heartbeating.
pub struct TestCluster {
    pub coord: Arc<Coordinator>,
    pub agents: Arc<MemoryAgents>,
    /// Nodes whose heartbeats stopped.
    stopped: Arc<Mutex<Vec<String>>>,
    sessions: Arc<Mutex<BTreeMap<String, u64>>>,
    _root: tempfile::TempDir,
}

/// The liveness period of test clusters: short, so that a stopped agent is noticed soon.
pub const LIVENESS: Duration = Duration::from_millis(600);

impl TestCluster {
    /// `nodes` agents (`n0`, `n1`, …) in groups of `coding`, registered and alive.
    pub async fn start(nodes: usize, coding: CodingConfig) -> TestCluster {
        Self::with_grace(nodes, coding, Deadlines::default().partition_grace()).await
    }

    /// [`TestCluster::start`] with a partition grace of `grace`.
    pub async fn with_grace(nodes: usize, coding: CodingConfig, grace: Duration) -> TestCluster {
        let deadlines = Deadlines {
            partition_grace_ms: grace.as_millis() as u64,
            ..Self::deadlines()
        };
        Self::with_deadlines(nodes, coding, deadlines).await
    }

    /// The deadlines of a test cluster: the defaults, with a short liveness period.
    pub fn deadlines() -> Deadlines {
        Deadlines {
            liveness_ms: LIVENESS.as_millis() as u64,
            ..Deadlines::default()
        }
    }

    /// [`TestCluster::start`] with `deadlines`.
    pub async fn with_deadlines(nodes: usize, coding: CodingConfig, deadlines: Deadlines) -> TestCluster {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(root.path()).unwrap();
        std::fs::create_dir_all(dir.coordinator()).unwrap();
        let names: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
        let journal = Journal::new(coding, &names, &[]);
        let agents = Arc::new(MemoryAgents::default());
        let coord = Arc::new(Coordinator::new(
            dir,
            journal,
            deadlines,
            None,
            Vec::new(),
            agents.clone(),
        ));
        let cluster = TestCluster {
            coord,
            agents,
            stopped: Arc::default(),
            sessions: Arc::default(),
            _root: root,
        };
        cluster.join_all(&names).await;
        cluster.beat();
        cluster
    }

    /// How agent `name` of a test cluster is reached (never dialled: its agent is in memory).
    pub fn info(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            spare: false,
            tcp: Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: 1,
            },
            unix: Endpoint::Unix(PathBuf::from(format!("/nonexistent/{name}.sock"))),
            host: "memory".into(),
            cores: 4,
            store: PathBuf::from(format!("/nonexistent/{name}")),
            pid: 1,
        }
    }

    /// Registers `reg` as a new session; the coordinator's answer and the session.
    pub async fn register(&self, reg: Registration) -> (Result<Registered, ClusterError>, u64) {
        register_with(&self.coord, reg).await
    }

    /// Registers `name`'s agent holding everything the journal says it should.
    pub async fn join(&self, name: &str) {
        join_as(&self.coord, &self.sessions, name).await;
    }

    /// Registers the agents of `names` at once, as agents starting together do: their
    /// registrations share journal writes.
    async fn join_all(&self, names: &[String]) {
        let mut joining = tokio::task::JoinSet::new();
        for name in names {
            let (coord, sessions, name) = (self.coord.clone(), self.sessions.clone(), name.clone());
            joining.spawn(async move { join_as(&coord, &sessions, &name).await });
        }
        while let Some(joined) = joining.join_next().await {
            joined.unwrap();
        }
    }

    /// The session `name`'s agent registered last.
    pub fn session_of(&self, name: &str) -> u64 {
        self.sessions.lock().unwrap()[name]
    }

    /// Heartbeats of every agent not stopped, six per liveness period.
    fn beat(&self) {
        let (coord, stopped, sessions) = (self.coord.clone(), self.stopped.clone(), self.sessions.clone());
        tokio::spawn(async move {
            loop {
                let sessions = sessions.lock().unwrap().clone();
                for (name, &session) in &sessions {
                    if !stopped.lock().unwrap().contains(name) {
                        let name = name.clone();
                        // A beat that comes too late ends the session, as for an agent.
                        let _ = coord.read(move |s| s.heard_from(&name, session)).await;
                    }
                }
                tokio::time::sleep(LIVENESS / 6).await;
            }
        });
    }

    /// `name`'s agent stops (SIGSTOP): no more heartbeats, no more answers.
    pub fn stop(&self, name: &str) {
        self.stopped.lock().unwrap().push(name.into());
        self.agents.fault(name, Fault::Stopped);
    }

    /// A coordinator resuming this one's journal with `deadlines`, as one restarted while
    /// every agent is cut off: none has registered with it.
    pub async fn restarted(&self, deadlines: Deadlines) -> Coordinator {
        let dir = ClusterDir::new(self._root.path()).unwrap();
        let journal = self.coord.snapshot().await;
        Coordinator::new(dir, journal, deadlines, None, Vec::new(), self.agents.clone())
    }

    /// `name`'s agent, stopped, heartbeats again (SIGCONT); requests it was sent while
    /// stopped stay unanswered.
    pub fn resume(&self, name: &str) {
        self.stopped.lock().unwrap().retain(|n| n != name);
    }

    /// `name`'s agent is gone (killed): its session ends.
    pub async fn kill(&self, name: &str) {
        self.stopped.lock().unwrap().push(name.into());
        let session = self.sessions.lock().unwrap()[name];
        let node = name.to_string();
        self.coord.read(move |s| s.end_session(&node, session)).await;
    }

    /// Every one of `world` ranks checkpoints the next epoch at once, as the ranks of a job
    /// do; its outcome.
    pub async fn checkpoint_together(&self, world: u32) -> EpochOutcome {
        let mut ranks = tokio::task::JoinSet::new();
        for rank in 0..world {
            let coord = self.coord.clone();
            ranks.spawn(async move { checkpoint_rank(&coord, rank, world).await });
        }
        let mut epoch = 0;
        while let Some(written) = ranks.join_next().await {
            epoch = written.unwrap();
        }
        self.coord.wait_epoch(epoch, false).await
    }

    /// Every one of `world` ranks checkpoints the next epoch, one after the other; its
    /// outcome.
    pub async fn checkpoint(&self, world: u32) -> EpochOutcome {
        let mut epoch = 0;
        for rank in 0..world {
            epoch = checkpoint_rank(&self.coord, rank, world).await;
        }
        self.coord.wait_epoch(epoch, false).await
    }
}

/// Rank `rank` of `world` writes the next epoch and reports it ready; the epoch.
async fn checkpoint_rank(coord: &Arc<Coordinator>, rank: u32, world: u32) -> u64 {
    let Opened { epoch, node, .. } = coord.open_epoch(rank, world, None, None, None).await.unwrap();
    let report = RankReport {
        image_bytes: RANK_BYTES,
        stored_bytes: RANK_BYTES,
        pace: None,
    };
    coord
        .rank_ready(rank, epoch, node.name, report, None)
        .await
        .unwrap();
    epoch
}

/// Registers `reg` with `coord` as a new session; the coordinator's answer and the session.
async fn register_with(coord: &Coordinator, reg: Registration) -> (Result<Registered, ClusterError>, u64) {
    let session = coord.next_session.fetch_add(1, Ordering::Relaxed);
    let answer = coord
        .state
        .change(move |s, j| s.register(j, &reg, session))
        .await
        .and_then(|r| r);
    (answer, session)
}

/// Registers `name`'s agent with `coord`, holding everything the journal says it should;
/// its session goes into `sessions`.
async fn join_as(coord: &Arc<Coordinator>, sessions: &Mutex<BTreeMap<String, u64>>, name: &str) {
    let reg = Registration {
        info: TestCluster::info(name),
        token: format!("token-{name}"),
        fresh: false,
        domain: None,
    };
    let (answer, session) = register_with(coord, reg).await;
    assert!(answer.is_ok(), "{answer:?}");
    let node = name.to_string();
    coord
        .read(move |s| {
            let journal = s.journal();
            let held = Inventory {
                ranks: journal
                    .ranks_on(&node)
                    .into_iter()
                    .map(|r| (r, Some(journal.committed)))
                    .collect(),
                objects: journal.held_objects(&node),
            };
            s.check_holdings(&node, session, &held)
        })
        .await;
    sessions.lock().unwrap().insert(name.into(), session);
}

/// What a recovery reported of its steps.
#[derive(Default)]
pub struct Steps(pub Vec<String>);

impl super::recovery::Progress for Steps {
    async fn step(&mut self, what: &str, done: u64, total: u64) {
        self.0.push(format!("{done}/{total} {what}"));
    }
}
