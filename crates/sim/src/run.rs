//! One seeded run: a cluster of simulated hosts, a job whose light ranks checkpoint epoch
//! after epoch and recover as `eckpt run` would, faults drawn from the seed, invariants
//! checked after every step of the simulation, and at the end every rank's newest
//! committed image read back and compared byte for byte.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use eckpt_cluster_api::commands::coordinator_call;
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines};
use eckpt_cluster_api::msg::{Recover, Relocation, Status};
use eckpt_coding::config::{CodingConfig, Layout, Mode, Topology};

use crate::cluster::{Shape, SimCluster, COORDINATOR};
use crate::faults::{self, Fault, FaultPlan};
use crate::invariants::Invariants;
use crate::ranks::Rank;
use crate::trace::{Lines, Trace};

/// The host the job's ranks run on.
pub const JOB: &str = "job";

/// What a run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The seed: the network's delays, the faults, the images.
    pub seed: u64,
    /// The cluster.
    pub shape: Shape,
    /// Ranks of the job.
    pub ranks: u32,
    /// Bytes of each rank's image.
    pub image_bytes: usize,
    /// Epochs the job commits at least; it goes on checkpointing while faults may come.
    pub epochs: u64,
    /// The job's compute between two checkpoints.
    pub interval: Duration,
    /// The faults drawn.
    pub faults: FaultPlan,
    /// How long after the last fault healed the job may take to finish.
    pub finish_within: Duration,
}

impl Plan {
    /// The run of `seed` as the seeded suites draw it: the code (`k`, `m`), one or two
    /// groups, spares or none, the mode, layout and topology, the images' size, and faults
    /// of every kind over twenty seconds.
    pub fn drawn(seed: u64) -> Plan {
        use rand::{Rng, SeedableRng};
        // Another stream than the faults' (same seed), so that either can change alone.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x005E_ED0F_5A4E);
        let (k, m) = [(2, 1), (3, 1), (2, 2), (4, 2)][rng.random_range(0..4)];
        let layout = [Layout::Dedicated, Layout::Rotated][rng.random_range(0..2)];
        let coding = CodingConfig {
            k,
            m,
            mode: [Mode::Full, Mode::Stripe, Mode::Update][rng.random_range(0..3)],
            layout,
            topology: [
                Topology::Pipeline,
                Topology::Fanin,
                Topology::Broadcast,
                Topology::Ring,
            ][rng.random_range(0..4)],
            chunk: 4096,
            ..CodingConfig::default()
        };
        let groups = rng.random_range(1..=2);
        let holders = match layout {
            Layout::Dedicated => k,
            Layout::Rotated => k + m,
        };
        Plan {
            seed,
            shape: Shape {
                nodes: groups * (k + m),
                spares: rng.random_range(0..=2),
                coding,
                deadlines: Deadlines {
                    liveness_ms: 1_000,
                    lease_ms: 2_000,
                    partition_grace_ms: 4_000,
                    peer_wait_ms: 2_000,
                    open_wait_ms: 10_000,
                    start_wait_ms: 5_000,
                    connect_ms: 1_000,
                    handshake_ms: 1_000,
                    idle_ms: 0,
                },
            },
            ranks: (groups * holders) as u32,
            image_bytes: rng.random_range(2..=12) * 4096 + rng.random_range(0..4096),
            epochs: 6,
            interval: Duration::from_millis(300),
            faults: FaultPlan {
                from: Duration::from_secs(1),
                window: Duration::from_secs(20),
                count: rng.random_range(4..=12),
                losses: m,
                longest: Duration::from_secs(5),
            },
            finish_within: Duration::from_secs(120),
        }
    }
}

/// What a run came to.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// Every line of its trace.
    pub trace: Vec<String>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Invariant checks made.
    pub checks: u64,
    /// Virtual time the run took.
    pub simulated: Duration,
    /// Why it failed, if it did.
    pub failure: Option<String>,
}

/// What the job and the simulation's loop share.
#[derive(Default)]
pub(crate) struct Shared {
    /// The newest epoch a rank was told was committed.
    pub committed_told: u64,
    /// Virtual time from which no fault is in effect.
    pub healed_at: Duration,
    /// The job finished its epochs and read its images back.
    pub done: bool,
}

/// Runs `plan`; `echo` prints the trace as it goes. Runs of one process take turns: the
/// workers' hand-off and the log capture are the process's.
pub fn run(plan: &Plan, echo: bool) -> Outcome {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    crate::install();
    let trace = Lines::new(echo);
    let mut outcome = Outcome {
        seed: plan.seed,
        trace: Vec::new(),
        faults: BTreeMap::new(),
        checks: 0,
        simulated: Duration::ZERO,
        failure: None,
    };
    if let Err(e) = run_traced(plan, &trace, &mut outcome) {
        trace.at(outcome.simulated, "sim", format!("FAILED: {e:#}"));
        outcome.failure = Some(format!("{e:#}"));
    }
    outcome.trace = trace.lines();
    outcome
}

fn run_traced(plan: &Plan, trace: &Trace, outcome: &mut Outcome) -> Result<()> {
    let cluster = SimCluster::create(plan.shape.clone())?;
    trace.set_root(cluster.root().to_path_buf());
    let members = cluster.nodes.clone();
    let mut hosts: Vec<String> = cluster.all_nodes().cloned().collect();
    hosts.push(COORDINATOR.into());
    let mut linked = hosts.clone();
    linked.push(JOB.into());
    let losses = plan.faults.losses.min(plan.shape.coding.m);
    let schedule = faults::draw(
        plan.seed,
        &FaultPlan {
            losses,
            ..plan.faults.clone()
        },
        &linked,
        &members,
    );
    outcome.faults = faults::by_kind(&schedule);
    let mut sim = turmoil::Builder::new()
        .rng_seed(plan.seed)
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(Duration::from_millis(3))
        .simulation_duration(Duration::from_secs(24 * 3600))
        .build();
    cluster.add_hosts(&mut sim, trace);
    let shared = Rc::new(RefCell::new(Shared::default()));
    sim.client(
        JOB,
        job(plan.clone(), cluster.dir().clone(), trace.clone(), shared.clone()),
    );

    let mut pending: Vec<(Duration, Heal)> = Vec::new();
    let mut faults = schedule.into_iter().peekable();
    let mut lost = BTreeSet::new();
    let mut invariants = Invariants::new(cluster.dir(), shared.clone());
    let healed_at = plan.faults.from + plan.faults.window + plan.faults.longest;
    shared.borrow_mut().healed_at = healed_at;
    let limit = healed_at + plan.finish_within;
    loop {
        let now = sim.elapsed();
        while let Some((at, _)) = faults.peek() {
            if *at > now {
                break;
            }
            let (_, fault) = faults.next().expect("peeked");
            inject(&mut sim, &cluster, &fault, now, &mut lost, &mut pending, trace)?;
        }
        pending.sort_by_key(|(at, _)| *at);
        while pending.first().is_some_and(|(at, _)| *at <= now) {
            let (_, heal) = pending.remove(0);
            heal.apply(&mut sim, &lost, now, trace);
        }
        let finished = sim.step().map_err(|e| anyhow!("a host failed: {e}"))?;
        outcome.simulated = sim.elapsed();
        outcome.checks = invariants.checks() + 1;
        invariants.check(outcome.simulated)?;
        if finished {
            break;
        }
        if outcome.simulated > limit {
            bail!(
                "the job did not finish within {:?} of the last fault's end",
                plan.finish_within
            );
        }
    }
    if !shared.borrow().done {
        bail!("the job ended without reading its images back");
    }
    Ok(())
}

/// Undoing a fault.
enum Heal {
    Bounce(String),
    Repair(String, String),
    Release(String, String),
}

impl Heal {
    fn apply(self, sim: &mut turmoil::Sim<'_>, lost: &BTreeSet<String>, now: Duration, trace: &Trace) {
        match self {
            Heal::Bounce(host) if !lost.contains(&host) => {
                sim.bounce(host.as_str());
                trace.at(now, "sim", format!("{host} starts again"));
            }
            Heal::Bounce(_) => {}
            Heal::Repair(a, b) => {
                sim.repair(a.as_str(), b.as_str());
                trace.at(now, "sim", format!("link {a}-{b} repaired"));
            }
            Heal::Release(a, b) => {
                sim.release(a.as_str(), b.as_str());
                trace.at(now, "sim", format!("link {a}-{b} released"));
            }
        }
    }
}

fn inject(
    sim: &mut turmoil::Sim<'_>,
    cluster: &SimCluster,
    fault: &Fault,
    now: Duration,
    lost: &mut BTreeSet<String>,
    pending: &mut Vec<(Duration, Heal)>,
    trace: &Trace,
) -> Result<()> {
    match fault {
        Fault::Restart { host, .. } | Fault::Lose { node: host } if lost.contains(host) => {}
        Fault::Restart { host, .. } if host == JOB => {}
        Fault::Restart { host, down } => {
            sim.crash(host.as_str());
            trace.at(now, "sim", format!("{host} crashes for {down:?}"));
            pending.push((now + *down, Heal::Bounce(host.clone())));
        }
        Fault::Lose { node } => {
            sim.crash(node.as_str());
            std::fs::remove_dir_all(cluster.local(node))?;
            lost.insert(node.clone());
            trace.at(now, "sim", format!("{node} is lost with its disk"));
        }
        Fault::Cut { a, b, lasting } => {
            sim.partition(a.as_str(), b.as_str());
            trace.at(now, "sim", format!("link {a}-{b} cut for {lasting:?}"));
            pending.push((now + *lasting, Heal::Repair(a.clone(), b.clone())));
        }
        Fault::Stall { a, b, lasting } => {
            sim.hold(a.as_str(), b.as_str());
            trace.at(now, "sim", format!("link {a}-{b} stalled for {lasting:?}"));
            pending.push((now + *lasting, Heal::Release(a.clone(), b.clone())));
        }
    }
    Ok(())
}

/// The job: each rank checkpoints every `plan.interval`, as an application calling the
/// rank library in a loop does, and a failure has the lost nodes recovered as `eckpt run`
/// does. Once the faults are over and every rank has had a checkpoint committed since, the
/// ranks stop and read their newest committed images back.
async fn job(plan: Plan, dir: ClusterDir, trace: Trace, shared: Rc<RefCell<Shared>>) -> turmoil::Result {
    crate::cluster::until_registered(&dir).await?;
    trace.event(JOB, "every node registered");
    let job = Rc::new(JobState {
        plan: plan.clone(),
        dir: dir.clone(),
        trace: trace.clone(),
        shared: shared.clone(),
        recovering: tokio::sync::Mutex::new(()),
        progressed: RefCell::new(BTreeSet::new()),
        all_progressed: tokio::sync::Notify::new(),
        out_of_room: std::cell::Cell::new(false),
    });
    let mut running = tokio::task::JoinSet::new();
    for r in 0..plan.ranks {
        let rank = Rank::new(&dir, r, plan.ranks)?;
        running.spawn_local(job.clone().rank_loop(r, rank));
    }
    job.all_progressed.notified().await;
    // The job ends as an application does: its ranks' calls in flight are dropped.
    running.abort_all();
    while running.join_next().await.is_some() {}
    let ended = match job.out_of_room.get() {
        true => "the cluster has no room left for the ranks of its lost nodes: the job ends",
        false => "every rank progressed after the faults",
    };
    trace.event(JOB, format!("{ended}: reading every rank back"));
    let mut ranks = Vec::new();
    for r in 0..plan.ranks {
        ranks.push(Rank::new(&dir, r, plan.ranks)?);
    }
    loop {
        let told = shared.borrow().committed_told;
        match restore_all(&plan, &dir, &mut ranks, told).await {
            Ok(()) => break,
            Err(e) if e.to_string().contains("is not the image") || e.to_string().contains("went back") => {
                return Err(e.into())
            }
            Err(e) => {
                trace.event(JOB, format!("a restore failed: {e:#}"));
                job.recover().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    trace.event(JOB, "every rank read back byte for byte");
    shared.borrow_mut().done = true;
    Ok(())
}

/// What the ranks of the job share.
struct JobState {
    plan: Plan,
    dir: ClusterDir,
    trace: Trace,
    shared: Rc<RefCell<Shared>>,
    /// One recovery at a time.
    recovering: tokio::sync::Mutex<()>,
    /// Ranks that had a checkpoint committed that began after the faults were over.
    progressed: RefCell<BTreeSet<u32>>,
    /// Told when every rank has, or when the job cannot go on.
    all_progressed: tokio::sync::Notify,
    /// Lost nodes left too few for the ranks to be protected (no spare, no survivor with
    /// room): no checkpoint can commit any more, and the job ends as `eckpt run` would.
    out_of_room: std::cell::Cell<bool>,
}

impl JobState {
    /// Rank `r` checkpoints until the job ends it.
    async fn rank_loop(self: Rc<Self>, r: u32, mut rank: Rank) {
        let healed_at = self.shared.borrow().healed_at;
        loop {
            tokio::time::sleep(self.plan.interval).await;
            let began = turmoil::sim_elapsed().unwrap_or_default();
            match rank.checkpoint(self.plan.seed, self.plan.image_bytes).await {
                Ok(c) if c.committed => {
                    let mut shared = self.shared.borrow_mut();
                    if c.epoch > shared.committed_told {
                        shared.committed_told = c.epoch;
                        self.trace.event(JOB, format!("epoch {} committed", c.epoch));
                    }
                    if began >= healed_at {
                        let mut progressed = self.progressed.borrow_mut();
                        progressed.insert(r);
                        if progressed.len() == self.plan.ranks as usize {
                            self.all_progressed.notify_one();
                        }
                    }
                }
                Ok(c) => {
                    self.trace
                        .event(JOB, format!("rank {r}: epoch {} was aborted", c.epoch));
                    self.recover().await;
                }
                Err(e) => {
                    self.trace.event(JOB, format!("rank {r}: {e:#}"));
                    self.recover().await;
                }
            }
        }
    }

    /// Asks the coordinator to recover lost nodes, if it says some are down; what came of
    /// it is a trace line.
    async fn recover(&self) {
        let _turn = self.recovering.lock().await;
        let trace = &self.trace;
        let status = match coordinator_call(&self.dir, Status, |_| {}).await {
            Ok(status) => status,
            Err(e) => return trace.event(JOB, format!("status: {e}")),
        };
        let down: Vec<&str> = status
            .nodes
            .iter()
            .filter(|n| !n.alive && !n.removed)
            .map(|n| n.name.as_str())
            .collect();
        if down.is_empty() {
            return;
        }
        let recover = Recover {
            relocation: Relocation::Process,
        };
        match coordinator_call(&self.dir, recover, |_| {}).await {
            Ok(report) => trace.event(
                JOB,
                format!(
                    "recovered {down:?}: epoch {}, rebuilt {:?}, moved {:?}, unrecoverable {:?}",
                    report.epoch, report.rebuilt, report.moved, report.unrecoverable
                ),
            ),
            Err(e) => {
                trace.event(JOB, format!("recovery of {down:?}: {e}"));
                if e.to_string().contains("cannot be protected") && !self.out_of_room.replace(true) {
                    self.all_progressed.notify_one();
                }
            }
        }
    }
}

/// Every rank reads its newest committed image back; it must be at least the newest epoch
/// a rank was told was committed.
async fn restore_all(plan: &Plan, dir: &ClusterDir, ranks: &mut [Rank], told: u64) -> Result<()> {
    for rank in ranks {
        let epoch = rank.restore(dir, plan.seed, plan.image_bytes).await?;
        if epoch < told {
            bail!("a committed epoch went back: epoch {epoch} read back, epoch {told} was committed");
        }
    }
    Ok(())
}
