//! One seeded run: a cluster of simulated hosts, a job whose light ranks checkpoint epoch
//! after epoch and recover as `eckpt run` would (holding its lease, in one seed of two),
//! faults drawn from the seed, invariants
//! checked after every step of the simulation, and at the end every rank's newest
//! committed image read back and compared byte for byte.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use eckpt_cluster_api::commands::coordinator_call;
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines};
use eckpt_cluster_api::msg::{FlushRestore, Recover, Relocation, Status, StatusReport};
use eckpt_cluster_api::ErrorKind;
use eckpt_coding::config::{CodingConfig, Layout, Mode, Topology};

use crate::cluster::{Shape, SimCluster, COORDINATOR};
use crate::faults::{self, Fault, FaultPlan};
use crate::invariants::Invariants;
use crate::lease::{CutOff, Generation};
use crate::outages::Outages;
use crate::ranks::{Rank, Restarts};
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
    /// The job holds a lease as `eckpt run` does, and its ranks carry its generation;
    /// otherwise they run as ranks started by hand, outside `eckpt run`, carrying none.
    pub supervised: bool,
    /// The most virtual time the daemons' blocking work (their disks) takes to answer
    /// (`disk::latency`); `None`: it takes none.
    pub disk_latency: Option<Duration>,
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
                // A stream of its own, as leases: flushes in one seed of three, every one to
                // three epochs.
                flush_every: {
                    let mut flushes = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x0F10_54E5);
                    (flushes.random_range(0..3) == 0).then(|| flushes.random_range(1..=3))
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
                recovery_freezes: 2,
                blips: 0,
                blip_longest: Duration::from_millis(500),
                // Past the liveness period and the partition grace: what was left of the
                // grace when the coordinator heard its agents again once cost their nodes.
                isolations: 4,
                isolation: (Duration::from_secs(5), Duration::from_secs(9)),
                // Up to past the liveness period and the partition grace, as isolations: a
                // stop of seconds made every agent register again mid-recovery, and one past
                // a lease once cost a live job its lease.
                stops: 4,
                stop: (Duration::from_millis(100), Duration::from_secs(9)),
            },
            finish_within: Duration::from_secs(120),
            // A stream of its own: leases in a run changed none of the other draws.
            supervised: rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x0001_EA5E).random_range(0..2) == 1,
            // A stream of its own: in one seed of four the disks take up to 1 to 20 ms.
            disk_latency: {
                let mut disks = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xD15C_7A4E);
                (disks.random_range(0..4) == 0).then(|| Duration::from_millis(disks.random_range(1..=20)))
            },
        }
    }

    /// [`Plan::drawn`] in a storm: 40 to 200 blips besides (`faults::blips`: restarts,
    /// cuts, stalls and freezes of up to half a second), what `eckpt-sim --storm` runs.
    pub fn stormy(seed: u64) -> Plan {
        use rand::{Rng, SeedableRng};
        let mut plan = Plan::drawn(seed);
        plan.faults.blips = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5702_3B11).random_range(40..=200);
        plan
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
    /// Whether the final loss ran (`status` said the cluster was healthy) and every rank
    /// read back after it.
    pub final_loss_survived: bool,
    /// Flushed epochs whose every rank read back byte for byte from shared storage.
    pub flushes_checked: u64,
    /// Whether the job was restarted from its flush after a loss beyond m, every rank read
    /// back byte for byte.
    pub restarted_from_flush: bool,
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
    /// The job's ranks have stopped: flips that strike at rest strike now.
    pub stopped: bool,
    /// Nodes the job's last check asks the simulation to lose with their disks.
    pub final_loss: Vec<String>,
    /// Every rank read back after the final loss.
    pub final_loss_survived: bool,
    /// Nodes whose stored checkpoints a bit flip or a torn write damaged: a final loss
    /// takes them first, so that it leaves each group no more than `m` members it cannot
    /// trust.
    pub damaged: BTreeSet<String>,
    /// When the job's supervisor could not reach the coordinator through a fault of its
    /// own side: its host frozen, its link to the coordinator cut or stalled.
    pub supervisor_cut_off: Vec<CutOff>,
    /// When the coordinator was frozen or stopped: cut off from everyone.
    pub coordinator_frozen: Vec<CutOff>,
    /// When each node was out of the coordinator's reach on its own side.
    pub outages: Outages,
    /// A node rebuilt elsewhere, or a group given up for lost, that nothing had made
    /// unreachable lately nor damaged, if there was one.
    pub lost_without_cause: Option<String>,
    /// Flushed epochs whose every rank read back byte for byte from shared storage.
    pub flushes_checked: u64,
    /// The job was restarted from its flush after losing more than m members of a group,
    /// and every rank read back byte for byte.
    pub restarted_from_flush: bool,
    /// Why a live holder lost the job's lease, if it did.
    pub lease_lost: Option<String>,
    /// When a superseded run's stop of the cluster was let through under its successor.
    pub stopped_under_successor: Option<String>,
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
        final_loss_survived: false,
        flushes_checked: 0,
        restarted_from_flush: false,
    };
    let (shape, coding) = (&plan.shape, &plan.shape.coding);
    trace.at(
        Duration::ZERO,
        "sim",
        format!(
            "seed {}: {} nodes and {} spares, k={} m={} {:?} {:?} {:?}; {} ranks of {} bytes; {}; flushes {}; disks answer {}",
            plan.seed,
            shape.nodes,
            shape.spares,
            coding.k,
            coding.m,
            coding.mode,
            coding.layout,
            coding.topology,
            plan.ranks,
            plan.image_bytes,
            if plan.supervised { "a lease" } else { "no lease" },
            shape
                .flush_every
                .map_or("none".into(), |n| format!("every {n} epochs")),
            plan.disk_latency
                .map_or("at once".into(), |most| format!("within {most:?}")),
        ),
    );
    eckpt_daemon::worker::simulate_latency(
        plan.disk_latency
            .map(|most| crate::disk::latency(plan.seed, most)),
    );
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
    let fault_plan = FaultPlan {
        losses,
        ..plan.faults.clone()
    };
    let mut schedule = faults::draw(plan.seed, &fault_plan, &linked, &members);
    schedule.extend(faults::blips(plan.seed, &fault_plan, &linked));
    schedule.extend(faults::isolations(plan.seed, &fault_plan));
    let stops = faults::stops(plan.seed, &fault_plan, COORDINATOR, &linked);
    schedule.extend(stops.scheduled);
    let mut at_rest = Vec::new();
    for (at, flip) in faults::disk_flips(plan.seed, &fault_plan, &schedule, &members) {
        match at {
            Some(at) => schedule.push((at, flip)),
            None => at_rest.push(flip),
        }
    }
    let struck: Vec<(Duration, Fault)> = (schedule.iter().cloned())
        .chain(at_rest.iter().map(|f| (Duration::ZERO, f.clone())))
        .collect();
    schedule.extend(faults::disk_tears(plan.seed, &fault_plan, &struck, &members));
    // After the crashes they strike with: the sort below keeps their order.
    schedule.extend(faults::log_tears(plan.seed, &schedule, COORDINATOR));
    schedule.sort_by_key(|(at, _)| *at);
    let mut sim = turmoil::Builder::new()
        .rng_seed(plan.seed)
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(Duration::from_millis(3))
        .simulation_duration(Duration::from_secs(24 * 3600))
        // turmoil panics when a listener's backlog is full (a kernel drops the SYN and the
        // client sends it again), and its default of 64 is reached when a coordinator frozen
        // for seconds thaws with every connection attempt made meanwhile. 1,024 is the
        // backlog the daemons' listeners ask the kernel for (tokio's).
        .tcp_capacity(1024)
        .build();
    cluster.add_hosts(&mut sim, trace);
    let shared = Rc::new(RefCell::new(Shared::default()));
    sim.client(
        JOB,
        job(plan.clone(), cluster.dir().clone(), trace.clone(), shared.clone()),
    );

    let mut harm = Harm::default();
    // Faults by when they strike, first last: the schedule, and freezes added as the
    // coordinator plans recoveries.
    let mut faults: Vec<(Duration, Fault)> = schedule.into_iter().rev().collect();
    let mut recovery_freezes = faults::recovery_freezes(plan.seed, &plan.faults).into_iter();
    let mut recovery_stops = stops.in_recoveries.into_iter();
    let (mut read, fault_window_end) = (0, plan.faults.from + plan.faults.window);
    let mut invariants = Invariants::new(cluster.dir(), &cluster.locals(), shared.clone())?;
    let healed_at = plan.faults.from + plan.faults.window + plan.faults.longest;
    shared.borrow_mut().healed_at = healed_at;
    let limit = healed_at + plan.finish_within;
    loop {
        let now = sim.elapsed();
        let (lines, recoveries) = trace.count_since(read, "recovery planned");
        read = lines;
        for _ in 0..recoveries {
            if let Some(freeze) = recovery_freezes.next().filter(|_| now < fault_window_end) {
                let host = COORDINATOR.to_string();
                faults.push((
                    now + freeze.after,
                    Fault::Freeze {
                        host,
                        lasting: freeze.lasting,
                    },
                ));
            }
            // Over by the time the other faults have healed, as the scheduled stops are.
            let stop = recovery_stops.next();
            if let Some(stop) = stop.filter(|s| now + s.after + s.lasting <= healed_at) {
                let host = COORDINATOR.to_string();
                faults.push((
                    now + stop.after,
                    Fault::Stop {
                        host,
                        lasting: stop.lasting,
                    },
                ));
            }
            faults.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        }
        while faults.last().is_some_and(|(at, _)| *at <= now) {
            let (_, fault) = faults.pop().expect("looked at");
            if inject(&mut sim, &cluster, &fault, now, &mut harm, &shared, trace)? {
                *outcome.faults.entry(fault.kind()).or_default() += 1;
            }
        }
        harm.pending.sort_by_key(|(at, _)| *at);
        while harm.pending.first().is_some_and(|(at, _)| *at <= now) {
            let (_, heal) = harm.pending.remove(0);
            heal.apply(&mut sim, &mut harm, now, trace);
        }
        if shared.borrow().stopped {
            for flip in std::mem::take(&mut at_rest) {
                if inject(&mut sim, &cluster, &flip, now, &mut harm, &shared, trace)? {
                    *outcome.faults.entry(flip.kind()).or_default() += 1;
                }
            }
        }
        let final_loss = std::mem::take(&mut shared.borrow_mut().final_loss);
        for node in final_loss {
            inject(
                &mut sim,
                &cluster,
                &Fault::Lose { node },
                now,
                &mut harm,
                &shared,
                trace,
            )?;
        }
        let finished = sim.step().map_err(|e| anyhow!("a host failed: {e}"))?;
        outcome.simulated = sim.elapsed();
        outcome.checks = invariants.checks() + 1;
        invariants.check(outcome.simulated, &harm.lost)?;
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
    outcome.final_loss_survived = shared.borrow().final_loss_survived;
    outcome.flushes_checked = shared.borrow().flushes_checked;
    outcome.restarted_from_flush = shared.borrow().restarted_from_flush;
    Ok(())
}

/// What the faults did that lasts: nodes lost for good, hosts frozen (by how many freezes
/// not yet thawed) or stopped (likewise), and what undoes the others, by when.
#[derive(Default)]
struct Harm {
    lost: BTreeSet<String>,
    frozen: BTreeMap<String, u32>,
    /// Hosts stopped, by how many stops have not ended yet.
    stopped: BTreeMap<String, u32>,
    pending: Vec<(Duration, Heal)>,
}

/// Undoing a fault.
enum Heal {
    Bounce(String),
    Repair(String, String),
    Release(String, String),
    /// A frozen host's links, every one released.
    Thaw(String, Vec<String>),
    /// A stopped host runs again, once its last stop has ended.
    Resume(String),
}

impl Heal {
    /// Undoes the fault. A link healed between hosts one of which is still frozen stays
    /// held: the heal of another fault must not let a frozen host's packets through.
    fn apply(self, sim: &mut turmoil::Sim<'_>, harm: &mut Harm, now: Duration, trace: &Trace) {
        let frozen =
            |harm: &Harm, a: &str, b: &str| harm.frozen.contains_key(a) || harm.frozen.contains_key(b);
        match self {
            Heal::Bounce(host) if !harm.lost.contains(&host) => {
                sim.bounce(host.as_str());
                trace.at(now, "sim", format!("{host} starts again"));
            }
            Heal::Bounce(_) => {}
            Heal::Repair(a, b) => {
                sim.repair(a.as_str(), b.as_str());
                if frozen(harm, &a, &b) {
                    sim.hold(a.as_str(), b.as_str());
                }
                trace.at(now, "sim", format!("link {a}-{b} repaired"));
            }
            Heal::Release(a, b) => {
                if !frozen(harm, &a, &b) {
                    sim.release(a.as_str(), b.as_str());
                }
                trace.at(now, "sim", format!("link {a}-{b} released"));
            }
            Heal::Thaw(host, others) => {
                let freezes = harm.frozen.get_mut(&host).expect("a thaw follows its freeze");
                *freezes -= 1;
                if *freezes == 0 {
                    harm.frozen.remove(&host);
                    for other in others.iter().filter(|o| !harm.frozen.contains_key(*o)) {
                        sim.release(host.as_str(), other.as_str());
                    }
                }
                trace.at(now, "sim", format!("{host} thaws"));
            }
            Heal::Resume(host) => {
                let stops = harm.stopped.get_mut(&host).expect("a resume follows its stop");
                *stops -= 1;
                if *stops == 0 {
                    harm.stopped.remove(&host);
                    sim.resume(host.as_str());
                    trace.at(now, "sim", format!("{host} runs again"));
                }
            }
        }
    }
}

fn inject(
    sim: &mut turmoil::Sim<'_>,
    cluster: &SimCluster,
    fault: &Fault,
    now: Duration,
    harm: &mut Harm,
    shared: &RefCell<Shared>,
    trace: &Trace,
) -> Result<bool> {
    match fault {
        Fault::Restart { host, .. }
        | Fault::Lose { node: host }
        | Fault::Flip { node: host, .. }
        | Fault::Tear { node: host, .. }
        | Fault::Stop { host, .. }
            if harm.lost.contains(host) =>
        {
            return Ok(false)
        }
        Fault::Restart { host, .. } if host == JOB => return Ok(false),
        Fault::Restart { host, down } => {
            note_outage(shared, host, now, *down);
            sim.crash(host.as_str());
            trace.at(now, "sim", format!("{host} crashes for {down:?}"));
            harm.pending.push((now + *down, Heal::Bounce(host.clone())));
        }
        Fault::Lose { node } => {
            note_outage(shared, node, now, Duration::MAX);
            sim.crash(node.as_str());
            std::fs::remove_dir_all(cluster.local(node))?;
            harm.lost.insert(node.clone());
            trace.at(now, "sim", format!("{node} is lost with its disk"));
        }
        Fault::Cut { a, b, lasting } => {
            note_cut_off(shared, [a, b], now, *lasting);
            note_link_outage(shared, [a, b], now, *lasting);
            sim.partition(a.as_str(), b.as_str());
            trace.at(now, "sim", format!("link {a}-{b} cut for {lasting:?}"));
            harm.pending
                .push((now + *lasting, Heal::Repair(a.clone(), b.clone())));
        }
        Fault::Stall { a, b, lasting } => {
            note_cut_off(shared, [a, b], now, *lasting);
            note_link_outage(shared, [a, b], now, *lasting);
            sim.hold(a.as_str(), b.as_str());
            trace.at(now, "sim", format!("link {a}-{b} stalled for {lasting:?}"));
            harm.pending
                .push((now + *lasting, Heal::Release(a.clone(), b.clone())));
        }
        Fault::Isolate { lasting } => {
            trace.at(now, "sim", format!("{COORDINATOR} is cut off from everyone"));
            let freeze = Fault::Freeze {
                host: COORDINATOR.into(),
                lasting: *lasting,
            };
            return inject(sim, cluster, &freeze, now, harm, shared, trace);
        }
        Fault::Freeze { host, lasting } => {
            note_silence(shared, host, now, *lasting);
            let others: Vec<String> = cluster
                .all_nodes()
                .chain([&COORDINATOR.to_string(), &JOB.to_string()])
                .filter(|h| *h != host)
                .cloned()
                .collect();
            for other in &others {
                sim.hold(host.as_str(), other.as_str());
            }
            *harm.frozen.entry(host.clone()).or_default() += 1;
            trace.at(now, "sim", format!("{host} freezes for {lasting:?}"));
            harm.pending
                .push((now + *lasting, Heal::Thaw(host.clone(), others)));
        }
        Fault::Stop { host, lasting } => {
            note_silence(shared, host, now, *lasting);
            *harm.stopped.entry(host.clone()).or_default() += 1;
            sim.stop(host.as_str());
            trace.at(now, "sim", format!("{host} stops (SIGSTOP) for {lasting:?}"));
            harm.pending.push((now + *lasting, Heal::Resume(host.clone())));
        }
        Fault::Flip { node, pick } => {
            let local = cluster.local(node);
            let Some((path, at)) = crate::disk::flip(&local, *pick)? else {
                trace.at(
                    now,
                    "sim",
                    format!("{node} stores no bulk data yet: no bit flips"),
                );
                return Ok(false);
            };
            let file = path.strip_prefix(&local).unwrap_or(&path).display();
            trace.at(now, "sim", format!("{node}: a bit flips in {file} at byte {at}"));
            shared.borrow_mut().damaged.insert(node.clone());
        }
        Fault::Tear { node, pick, down } => {
            let local = cluster.local(node);
            // Its host does not run between the cut and the crash, in this same step.
            let Some((path, kept)) = crate::disk::tear(&local, *pick)? else {
                trace.at(
                    now,
                    "sim",
                    format!("{node} stores no checkpoint yet: no torn write"),
                );
                return Ok(false);
            };
            note_outage(shared, node, now, *down);
            sim.crash(node.as_str());
            let file = path.strip_prefix(&local).unwrap_or(&path).display();
            trace.at(
                now,
                "sim",
                format!("{node} crashes for {down:?}, and {file} keeps only its first {kept} bytes"),
            );
            shared.borrow_mut().damaged.insert(node.clone());
            harm.pending.push((now + *down, Heal::Bounce(node.clone())));
        }
        Fault::TearLog { pick } => {
            if sim.is_host_running(COORDINATOR) {
                return Ok(false);
            }
            let Some(done) = crate::disk::tear_log(&cluster.dir().journal(), *pick)? else {
                return Ok(false);
            };
            trace.at(now, "sim", format!("{COORDINATOR}'s journal: {done}"));
        }
    }
    Ok(true)
}

/// Notes a fault between `ends` from `now` for `lasting` as the supervisor's own cut-off
/// from the coordinator when those are its ends.
fn note_cut_off(shared: &RefCell<Shared>, ends: [&String; 2], now: Duration, lasting: Duration) {
    if ends.iter().any(|e| *e == JOB) && ends.iter().any(|e| *e == COORDINATOR) {
        shared.borrow_mut().supervisor_cut_off.push((now, now + lasting));
    }
}

/// Notes `host` silent from `now` for `lasting`, frozen or stopped, as the others see it:
/// a node out of the coordinator's reach, the supervisor cut off from it, or the
/// coordinator cut off from everyone.
fn note_silence(shared: &RefCell<Shared>, host: &String, now: Duration, lasting: Duration) {
    note_outage(shared, host, now, lasting);
    if host == JOB {
        note_cut_off(shared, [host, &COORDINATOR.to_string()], now, lasting);
    }
    if host == COORDINATOR {
        shared.borrow_mut().coordinator_frozen.push((now, now + lasting));
    }
}

/// Notes `host`, if it is a node, out of the coordinator's reach on its own side from `now`
/// for `lasting`.
fn note_outage(shared: &RefCell<Shared>, host: &str, now: Duration, lasting: Duration) {
    if host != COORDINATOR && host != JOB {
        shared.borrow_mut().outages.note(host, now, lasting);
    }
}

/// Notes the node at one end of a fault of the link `ends`, if the other is the
/// coordinator, out of its reach on its own side from `now` for `lasting`.
fn note_link_outage(shared: &RefCell<Shared>, ends: [&String; 2], now: Duration, lasting: Duration) {
    match ends {
        [node, other] | [other, node] if other == COORDINATOR => note_outage(shared, node, now, lasting),
        _ => {}
    }
}

/// The job: each rank checkpoints every `plan.interval`, as an application calling the
/// rank library in a loop does, and a failure has the lost nodes recovered as `eckpt run`
/// does. Once the faults are over and every rank has had a checkpoint committed since, the
/// ranks stop and read their newest committed images back.
async fn job(plan: Plan, dir: ClusterDir, trace: Trace, shared: Rc<RefCell<Shared>>) -> turmoil::Result {
    crate::cluster::until_registered(&dir).await?;
    trace.event(JOB, "every node registered");
    let generation = Generation::default();
    if plan.supervised {
        let deadlines = dir.load()?.deadlines;
        generation.set(Some(
            crate::lease::claim(&dir, plan.ranks, &deadlines, &trace).await,
        ));
        let renewing = crate::lease::renew(
            dir.clone(),
            plan.ranks,
            generation.clone(),
            trace.clone(),
            shared.clone(),
        );
        tokio::task::spawn_local(renewing);
    }
    let job = Rc::new(JobState {
        plan: plan.clone(),
        dir: dir.clone(),
        trace: trace.clone(),
        shared: shared.clone(),
        recovering: tokio::sync::Mutex::new(()),
        progressed: RefCell::new(BTreeSet::new()),
        all_progressed: tokio::sync::Notify::new(),
        out_of_room: std::cell::Cell::new(false),
        unrecoverable_since: std::cell::Cell::new(None),
        restarts: Restarts::default(),
    });
    let mut running = tokio::task::JoinSet::new();
    for r in 0..plan.ranks {
        let rank = Rank::new(&dir, r, plan.ranks, generation.clone(), job.restarts.clone())?;
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
    // A step for the flips that strike while nothing runs.
    shared.borrow_mut().stopped = true;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut ranks = Vec::new();
    for r in 0..plan.ranks {
        ranks.push(Rank::new(
            &dir,
            r,
            plan.ranks,
            generation.clone(),
            job.restarts.clone(),
        )?);
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
    shared.borrow_mut().flushes_checked = check_flushes(&plan, &dir, &trace)?;
    // A copy found damaged on the way was decoded from its group and its node marked
    // damaged: `eckpt run` rebuilds it before the next attempt.
    job.recover().await;
    if !job.out_of_room.get() {
        final_loss(&job, &mut ranks).await?;
    }
    let flushed = shared.borrow().flushes_checked > 0;
    if flushed && shared.borrow().final_loss_survived {
        shared.borrow_mut().restarted_from_flush = restart_from_flush(&job, &mut ranks).await?;
    }
    shared.borrow_mut().done = true;
    Ok(())
}

/// Reads every rank of every epoch published in the cluster's flush directory back as
/// `eckpt restore --from-flush` does (no cluster: each block checked against the flush's
/// manifest) and compares it with the image the rank wrote for that epoch; a flushed epoch
/// newer than the journal's committed one fails too. The flushed epochs checked.
fn check_flushes(plan: &Plan, dir: &ClusterDir, trace: &Trace) -> Result<u64> {
    let Some(flush) = dir.load()?.flush else {
        return Ok(0);
    };
    let committed = eckpt_coordinator::Journal::load(&dir.journal())?.committed;
    let flushed = eckpt_flush::FlushDir::new(&flush.dir);
    let epochs = flushed.epochs()?;
    for &epoch in &epochs {
        if epoch > committed {
            bail!("epoch {epoch} was flushed, but the journal's committed epoch is {committed}");
        }
        let read = flushed.open(epoch)?;
        for rank in 0..plan.ranks {
            let image = read
                .read_item(rank, crate::ranks::ITEM)
                .with_context(|| format!("rank {rank} of flushed epoch {epoch}"))?;
            if image != crate::ranks::image(plan.seed, rank, epoch, plan.image_bytes) {
                bail!("rank {rank} of flushed epoch {epoch} is not the image it wrote");
            }
        }
    }
    trace.event(
        JOB,
        format!("flushed epochs {epochs:?}: every rank read back byte for byte"),
    );
    Ok(epochs.len() as u64)
}

/// How long after the job the cluster has to say it is healthy, and then to count the nodes
/// of the final loss down: a recovery's re-encode and repairs of parity take seconds here.
const SETTLE_WITHIN: Duration = Duration::from_secs(30);

/// The last check of a run: once `status` says every group's parity protects the committed
/// epoch and every member is up and undamaged, `m` members of each group are lost with
/// their disks at once, and every rank must still read back byte for byte, decoded from the
/// survivors without a recovery. A status that calls the cluster healthy while a holder
/// lacks its parity, or holds a stale one, fails here; so does parity that does not decode.
async fn final_loss(job: &JobState, ranks: &mut [Rank]) -> Result<()> {
    let Some(status) = settled(&job.dir, SETTLE_WITHIN, healthy).await else {
        job.trace.event(
            JOB,
            format!("status did not say every group is protected within {SETTLE_WITHIN:?}: no final loss"),
        );
        return Ok(());
    };
    let damaged = job.shared.borrow().damaged.clone();
    let lose: Vec<String> = status
        .groups
        .iter()
        .flat_map(|g| {
            let (rotten, sound): (Vec<&String>, Vec<&String>) =
                g.members.iter().partition(|n| damaged.contains(*n));
            rotten.into_iter().chain(sound).take(g.m).cloned()
        })
        .collect();
    let epoch = status.committed_epoch;
    job.trace.event(
        JOB,
        format!("status says every group protects epoch {epoch}: losing {lose:?} with their disks"),
    );
    job.shared.borrow_mut().final_loss = lose.clone();
    let down = |s: &StatusReport| s.nodes.iter().all(|n| !lose.contains(&n.name) || !n.alive);
    if settled(&job.dir, SETTLE_WITHIN, down).await.is_none() {
        bail!("the coordinator did not count the nodes lost at the end, {lose:?}, down within {SETTLE_WITHIN:?}");
    }
    restore_all(&job.plan, &job.dir, ranks, epoch).await.map_err(|e| {
        anyhow!("status said every group protects epoch {epoch}, yet with {lose:?} lost a rank cannot be read back: {e:#}")
    })?;
    job.trace.event(
        JOB,
        "every rank read back byte for byte, decoded without the nodes lost at the end",
    );
    job.shared.borrow_mut().final_loss_survived = true;
    Ok(())
}

/// After the final loss, in a cluster that flushes: one more member of a group is lost, more
/// than m, and the node level cannot serve. The recovery `eckpt run` asks for must restart
/// the job from its newest flushed epoch — read from shared storage onto the nodes left,
/// encoded, committed as a new epoch — and every rank must read back byte for byte as the
/// image it wrote for that flushed epoch. Whether it did; not when the nodes left cannot
/// hold the job's groups (the recovery says so, and the job cannot go on).
async fn restart_from_flush(job: &JobState, ranks: &mut [Rank]) -> Result<bool> {
    let status = coordinator_call(&job.dir, Status, |_| {}).await?;
    let alive = |name: &String| status.nodes.iter().any(|n| &n.name == name && n.alive);
    let Some(node) = status
        .groups
        .iter()
        .find_map(|g| g.members.iter().find(|n| alive(n)).cloned())
    else {
        bail!("no group has a member left after the final loss");
    };
    let newest = eckpt_flush::FlushDir::new(job.dir.load()?.flush.context("no flush")?.dir)
        .epochs()?
        .last()
        .copied()
        .context("no flushed epoch")?;
    job.trace.event(
        JOB,
        format!("losing {node} too, more than m of its group: the job restarts from flushed epoch {newest}"),
    );
    job.shared.borrow_mut().final_loss = vec![node.clone()];
    let down = |s: &StatusReport| s.nodes.iter().all(|n| n.name != node || !n.alive);
    if settled(&job.dir, SETTLE_WITHIN, down).await.is_none() {
        bail!("the coordinator did not count {node} down within {SETTLE_WITHIN:?}");
    }
    let recover = Recover {
        relocation: Relocation::Process,
    };
    let report = match coordinator_call(&job.dir, recover, |_| {}).await {
        Ok(report) => report,
        Err(e) if e.kind() == ErrorKind::Unrecoverable => {
            job.trace.event(JOB, format!("no restart from the flush: {e}"));
            return Ok(false);
        }
        Err(e) => bail!("the recovery after losing more than m of a group failed: {e}"),
    };
    let Some(restart) = report.from_flush else {
        bail!(
            "more than m of a group were lost, yet the recovery did not restart from the flush: epoch {}, rebuilt {:?}, unrecoverable {:?}",
            report.epoch,
            report.rebuilt,
            report.unrecoverable
        );
    };
    if restart.flushed_epoch != newest {
        bail!(
            "the job restarted from flushed epoch {}, not the newest, {newest} (skipped: {:?})",
            restart.flushed_epoch,
            restart.skipped
        );
    }
    job.restarted(&restart);
    for rank in ranks {
        rank.restore_restarted(&job.dir, job.plan.seed, job.plan.image_bytes, &restart)
            .await?;
    }
    job.trace.event(
        JOB,
        format!(
            "restarted from flushed epoch {newest} as epoch {}: every rank read back byte for byte",
            restart.epoch
        ),
    );
    Ok(true)
}

/// Whether `status` says the cluster is healthy: an epoch committed, every group's parity
/// at it, every member up and undamaged.
fn healthy(status: &StatusReport) -> bool {
    let up = |name: &String| {
        status
            .nodes
            .iter()
            .any(|n| &n.name == name && n.alive && n.damaged.is_none())
    };
    status.committed_epoch > 0
        && status.groups.iter().all(|g| {
            g.lost.is_empty() && g.protected_epoch == status.committed_epoch && g.members.iter().all(up)
        })
}

/// The first status, polled every 100 ms for at most `within`, of which `wanted` holds.
async fn settled(
    dir: &ClusterDir,
    within: Duration,
    wanted: impl Fn(&StatusReport) -> bool,
) -> Option<StatusReport> {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if let Ok(status) = coordinator_call(dir, Status, |_| {}).await {
            if wanted(&status) {
                return Some(*status);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
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
    /// Since when every recovery has said the nodes left cannot serve: `eckpt run` waits
    /// up to the partition grace for members that may be on their way back (rebooting,
    /// cut off for a while) before it ends the job.
    unrecoverable_since: std::cell::Cell<Option<tokio::time::Instant>>,
    /// The job's restarts from its flush: a recovery of more than m members of a group in
    /// a cluster that flushes makes one, whenever it comes.
    restarts: Restarts,
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

    /// Asks the coordinator to recover lost nodes, if it says some are down or damaged; what
    /// came of it is a trace line.
    async fn recover(&self) {
        let _turn = self.recovering.lock().await;
        let trace = &self.trace;
        let status = match coordinator_call(&self.dir, Status, |_| {}).await {
            Ok(status) => status,
            Err(e) => return trace.event(JOB, format!("status: {e}")),
        };
        // As `eckpt run` judges them: nodes down, or up but holding damaged data.
        let down: Vec<&str> = status
            .nodes
            .iter()
            .filter(|n| (!n.alive && !n.removed) || n.damaged.is_some())
            .map(|n| n.name.as_str())
            .collect();
        if down.is_empty() {
            self.unrecoverable_since.set(None);
            return;
        }
        let recover = Recover {
            relocation: Relocation::Process,
        };
        match coordinator_call(&self.dir, recover, |_| {}).await {
            Ok(report) => {
                self.unrecoverable_since.set(None);
                self.judge_rebuilt(&report.rebuilt);
                if let Some(restart) = &report.from_flush {
                    self.restarted(restart);
                }
                trace.event(
                    JOB,
                    format!(
                        "recovered {down:?}: epoch {}, rebuilt {:?}, moved {:?}, unrecoverable {:?}",
                        report.epoch, report.rebuilt, report.moved, report.unrecoverable
                    ),
                )
            }
            Err(e) if e.kind() == ErrorKind::Unrecoverable => {
                let now = tokio::time::Instant::now();
                let since = *self.unrecoverable_since.get().get_or_insert(now);
                self.unrecoverable_since.set(Some(since));
                let grace = self.plan.shape.deadlines.partition_grace();
                if now - since < grace {
                    trace.event(
                        JOB,
                        format!(
                            "recovery of {down:?}: {e}: waiting up to {grace:?} for its members to come back"
                        ),
                    );
                } else if !self.out_of_room.replace(true) {
                    self.judge_out_of_room(&status);
                    trace.event(JOB, format!("recovery of {down:?}: {e}"));
                    self.all_progressed.notify_one();
                }
            }
            Err(e) => trace.event(JOB, format!("recovery of {down:?}: {e}")),
        }
    }

    /// Notes the job restarted from its flush as `restart` says: the epoch it made holds
    /// the images of the flushed one.
    fn restarted(&self, restart: &FlushRestore) {
        self.restarts
            .borrow_mut()
            .insert(restart.epoch, restart.flushed_epoch);
        self.trace.event(
            JOB,
            format!(
                "restarted from flushed epoch {} as epoch {}",
                restart.flushed_epoch, restart.epoch
            ),
        );
    }

    /// Whether `node` had a cause to be lost by `now`: its stored data damaged, or out of the
    /// coordinator's reach on its own side lately — within the longest the coordinator may
    /// take to judge a node after its silence (its liveness period, twice the partition
    /// grace, an agent's reconnection) and the longest fault (a recovery the coordinator was
    /// frozen in finishes that much later than it was planned).
    fn lost_with_cause(&self, node: &str, now: Duration) -> bool {
        let deadlines = &self.plan.shape.deadlines;
        let within = deadlines.liveness()
            + 2 * deadlines.partition_grace()
            + deadlines.reconnection()
            + self.plan.faults.longest;
        let shared = self.shared.borrow();
        shared.damaged.contains(node) || shared.outages.lately(node, now, within)
    }

    /// Notes in `shared.lost_without_cause` a node of `rebuilt` that had no cause to be
    /// lost ([`JobState::lost_with_cause`]).
    fn judge_rebuilt(&self, rebuilt: &[(String, BTreeMap<u32, String>)]) {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        if let Some((node, _)) = rebuilt.iter().find(|(node, _)| !self.lost_with_cause(node, now)) {
            let why = format!(
                "at {now:?}: {node} was rebuilt elsewhere, yet nothing had made it unreachable lately"
            );
            self.shared.borrow_mut().lost_without_cause.get_or_insert(why);
        }
    }

    /// Notes in `shared.lost_without_cause` a group that `status` says lost more than m
    /// members, of which m or fewer had a cause to be lost ([`JobState::lost_with_cause`]),
    /// as the job gives up for want of room.
    fn judge_out_of_room(&self, status: &StatusReport) {
        let now = turmoil::sim_elapsed().unwrap_or_default();
        for g in status.groups.iter().filter(|g| g.lost.len() > g.m) {
            let caused = g.lost.iter().filter(|n| self.lost_with_cause(n, now)).count();
            if caused <= g.m {
                let why = format!(
                    "at {now:?}: the job ends, group {} having lost {:?}, more than m={}, yet only {caused} of them had been unreachable lately",
                    g.id, g.lost, g.m
                );
                self.shared.borrow_mut().lost_without_cause.get_or_insert(why);
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
