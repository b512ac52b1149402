//! The supervisor's decisions, in-process: a scripted coordinator (nodes that die, a
//! recovery that moves their ranks, the job's lease) and scripted attempts (ranks that exit,
//! are killed, or run until a node dies under them).

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use eckpt_cluster::launch::UpOptions;
use eckpt_cluster_api::dirs::{ClusterDir, ClusterFile, Deadlines};
use eckpt_cluster_api::msg::{
    FlushReport, FlushStatus, JobClaim, JobGrant, JobStart, JobStatus, LeaseHolder, NodeInfo, NodeStatus,
    RecoveryReport, Relocation, StatusReport,
};
use eckpt_cluster_api::net::host_identity;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::CodingConfig;
use eckpt_proto::Endpoint;

use super::{Event, Handle, Supervisor};
use crate::cluster::{Coordinator, EpochWatch};
use crate::launcher::{Attempt, Ending, Launch, LaunchSpec};
use crate::output::{Sink, Sinks};
use crate::session::ClusterChoice;
use crate::{RunError, RunOptions};

/// A node as the scripted coordinator sees it.
#[derive(Debug, Clone)]
struct Node {
    alive: bool,
    /// Down, but not heard from since a coordinator restart that is still young.
    awaited: bool,
    removed: bool,
    ranks: Vec<u32>,
}

/// The scripted coordinator's state, which tests and scripted attempts change.
#[derive(Default)]
struct World {
    nodes: BTreeMap<String, Node>,
    committed: u64,
    generation: u64,
    recoveries: u32,
    /// Recoveries answer that more is lost than the code tolerates.
    unrecoverable: bool,
    /// After this many recoveries answered so, the dead nodes come back with their stores.
    back_after: Option<u32>,
    /// `ClaimJob` is refused until this holder's lease expires (then claimable).
    holder: Option<(LeaseHolder, Instant, f64)>,
    released: Option<bool>,
    /// The coordinator's term (one more each time it is replaced).
    term: u64,
    /// How long the coordinator says it has not heard each node (`silent_seconds`).
    silent: BTreeMap<String, f64>,
}

/// A coordinator whose answers come from a [`World`].
struct Scripted {
    world: Arc<Mutex<World>>,
    _epochs: Mutex<Option<std::sync::mpsc::Sender<eckpt_cluster_api::msg::EpochOutcome>>>,
}

fn node_info(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        spare: false,
        tcp: Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port: 1,
        },
        unix: Endpoint::Unix(PathBuf::from("/nonexistent")),
        host: host_identity(),
        cores: 2,
        store: PathBuf::from("/nonexistent"),
        pid: std::process::id(),
    }
}

impl Coordinator for Scripted {
    fn status(&self) -> Result<StatusReport, RunError> {
        let w = self.world.lock().unwrap();
        let nodes = w
            .nodes
            .iter()
            .map(|(name, n)| NodeStatus {
                name: name.clone(),
                alive: n.alive,
                addr: "127.0.0.1:1".into(),
                ranks: n.ranks.clone(),
                spare: false,
                group: (!n.removed).then_some((1, 0)),
                removed: n.removed,
                hosts_ranks: !n.removed,
                damaged: None,
                domain: None,
                awaited: n.awaited,
                silent_seconds: w.silent.get(name).copied(),
            })
            .collect();
        let job = w.holder.as_ref().map(|(holder, renewed, lease)| JobStatus {
            id: "job".into(),
            generation: w.generation,
            holder: Some(holder.clone()),
            renewed_seconds_ago: Some(renewed.elapsed().as_secs_f64()),
            lease_left_seconds: Some((lease - renewed.elapsed().as_secs_f64()).max(0.0)),
            finished_unix: None,
        });
        Ok(StatusReport {
            coding: CodingConfig::default(),
            committed_epoch: w.committed,
            open_epoch: w.committed + 1,
            ranks_ready: Vec::new(),
            world: None,
            nodes,
            groups: Vec::new(),
            flush: None,
            job,
            isolated_seconds: None,
            coordinator_term: w.term,
            journal_bytes_written: 0,
        })
    }

    fn nodes(&self) -> Result<BTreeMap<String, NodeInfo>, RunError> {
        let w = self.world.lock().unwrap();
        Ok(w.nodes
            .iter()
            .filter(|(_, n)| n.alive && !n.removed)
            .map(|(name, _)| (name.clone(), node_info(name)))
            .collect())
    }

    fn wait_flush(&self) -> Result<Option<FlushStatus>, RunError> {
        Ok(None)
    }

    fn flush_now(&self) -> Result<FlushReport, RunError> {
        Err(RunError::Cluster(ClusterError::Invalid(
            "this cluster does not flush".into(),
        )))
    }

    /// Moves the ranks of every dead node to the survivors, round robin, and removes it.
    fn recover(&self, _: Relocation) -> Result<RecoveryReport, RunError> {
        let mut w = self.world.lock().unwrap();
        w.recoveries += 1;
        if w.back_after.is_some_and(|n| w.recoveries > n) {
            w.unrecoverable = false;
            for node in w.nodes.values_mut() {
                node.alive |= !node.removed;
            }
        }
        if w.unrecoverable {
            return Err(RunError::Cluster(ClusterError::Unrecoverable(
                "group 1 lost 3 of 6 members, more than m=2".into(),
            )));
        }
        let dead: Vec<String> = w
            .nodes
            .iter()
            .filter(|(_, n)| !n.alive && !n.removed)
            .map(|(k, _)| k.clone())
            .collect();
        let survivors: Vec<String> = w
            .nodes
            .iter()
            .filter(|(_, n)| n.alive && !n.removed)
            .map(|(k, _)| k.clone())
            .collect();
        let mut report = RecoveryReport {
            epoch: w.committed,
            ..RecoveryReport::default()
        };
        for (i, name) in dead.iter().enumerate() {
            let ranks = std::mem::take(&mut w.nodes.get_mut(name).unwrap().ranks);
            let mut moved = BTreeMap::new();
            for (j, rank) in ranks.into_iter().enumerate() {
                let to = survivors[(i + j) % survivors.len()].clone();
                w.nodes.get_mut(&to).unwrap().ranks.push(rank);
                moved.insert(rank, to);
            }
            w.nodes.get_mut(name).unwrap().removed = true;
            report.rebuilt.push((name.clone(), moved));
        }
        Ok(report)
    }

    fn leave(&self, node: &str) -> Result<(), RunError> {
        self.world.lock().unwrap().nodes.get_mut(node).unwrap().alive = false;
        Ok(())
    }

    fn claim_job(&self, _: JobClaim) -> Result<JobGrant, RunError> {
        let mut w = self.world.lock().unwrap();
        if let Some((holder, renewed, lease)) = &w.holder {
            if renewed.elapsed().as_secs_f64() < *lease {
                return Err(RunError::Cluster(ClusterError::Fenced(format!(
                    "job job is running: {holder} holds its lease"
                ))));
            }
        }
        w.holder = None;
        w.generation += 1;
        Ok(JobGrant {
            job: "job".into(),
            generation: w.generation,
            committed: w.committed,
            discarded: None,
            superseded: None,
        })
    }

    fn renew_lease(&self, _: u64) -> Result<(), RunError> {
        Ok(())
    }

    fn next_attempt(&self, _: u64) -> Result<u64, RunError> {
        let mut w = self.world.lock().unwrap();
        w.generation += 1;
        Ok(w.generation)
    }

    fn release_job(&self, _: u64, finished: bool) -> Result<(), RunError> {
        self.world.lock().unwrap().released = Some(finished);
        Ok(())
    }

    fn watch_epochs(&self, _: u64) -> Result<EpochWatch, RunError> {
        let (send, outcomes) = std::sync::mpsc::channel();
        *self._epochs.lock().unwrap() = Some(send);
        Ok(EpochWatch::fed_by(outcomes))
    }
}

/// What an attempt does at its `n`th look (from 0), with the world to change.
type Script = Box<dyn FnMut(u32, &mut World) -> Option<Ending> + Send>;

/// Attempts that follow scripts, one per launch; each launch's placement is kept.
struct ScriptedLaunches {
    world: Arc<Mutex<World>>,
    scripts: Mutex<VecDeque<Script>>,
    placements: Arc<Mutex<Vec<BTreeMap<u32, String>>>>,
}

struct ScriptedAttempt {
    world: Arc<Mutex<World>>,
    script: Script,
    looks: u32,
}

impl Attempt for ScriptedAttempt {
    fn poll(&mut self) -> Option<Ending> {
        let look = self.looks;
        self.looks += 1;
        (self.script)(look, &mut self.world.lock().unwrap())
    }

    fn exited(&mut self) -> std::collections::BTreeSet<u32> {
        Default::default()
    }

    fn stop(&mut self) {}
}

impl Launch for ScriptedLaunches {
    fn start(&self, spec: &LaunchSpec<'_>) -> Result<Box<dyn Attempt>, RunError> {
        self.placements.lock().unwrap().push(spec.placement.clone());
        let script = self
            .scripts
            .lock()
            .unwrap()
            .pop_front()
            .expect("a script for every attempt");
        Ok(Box::new(ScriptedAttempt {
            world: self.world.clone(),
            script,
            looks: 0,
        }))
    }
}

/// Ends with `ending` at the attempt's `at`th look.
fn end_at(at: u32, ending: Ending) -> Script {
    Box::new(move |look, _| (look >= at).then(|| ending.clone()))
}

/// The coordinator is replaced at the attempt's `at`th look: every node is down and
/// awaited until the `back`th look, when all have registered with the new one; the
/// attempt ends well at the look after.
fn coordinator_replaced(at: u32, back: u32) -> Script {
    Box::new(move |look, world| {
        for node in world.nodes.values_mut() {
            node.alive = !(at..back).contains(&look);
            node.awaited = !node.alive;
        }
        (look > back).then_some(Ending::Done)
    })
}

/// `node` dies at the attempt's `at`th look; the attempt then ends as `then` says (`None`:
/// runs on, until the supervisor stops it).
fn node_dies(node: &'static str, at: u32, then: Option<Ending>) -> Script {
    Box::new(move |look, world| {
        if look == at {
            world.nodes.get_mut(node).unwrap().alive = false;
        }
        if look >= at {
            return then.clone();
        }
        None
    })
}

const WORLD: u32 = 8;

/// The supervisor's options for a job of [`WORLD`] ranks.
fn options(dir: &std::path::Path) -> RunOptions {
    RunOptions {
        cluster: ClusterChoice {
            dir: Some(dir.to_path_buf()),
            up: UpOptions {
                dir: dir.to_path_buf(),
                nodes: None,
                spares: 0,
                names: Vec::new(),
                coding: CodingConfig::default(),
                netns: false,
                tls: false,
                link_rate: None,
                exe: PathBuf::from("eckpt"),
                agents: true,
                bind: None,
                flush: None,
                job: None,
                deadlines: Deadlines::default(),
                domains: Default::default(),
                agent_placement: Default::default(),
            },
            nodes_given: false,
            hosts: None,
        },
        ranks: WORLD,
        launcher: crate::Launcher::Local,
        launcher_args: Vec::new(),
        min_nodes: 1,
        placement: Default::default(),
        relocation: Relocation::default(),
        max_restarts: 3,
        #[cfg(feature = "fault-injection")]
        kill_at: Default::default(),
        #[cfg(feature = "fault-injection")]
        seed: 0,
        interval: None,
        mtbf: None,
        keep: true,
        job: None,
        start: JobStart::Default,
        command: vec!["program".into()],
        exe: PathBuf::from("eckpt"),
        sinks: Sinks {
            out: Sink::Stderr,
            err: Sink::Stderr,
        },
        record: None,
    }
}

/// A supervised run on six nodes (ranks placed on n0–n3, two each, epoch 3 committed) with
/// one script per attempt.
struct Run {
    result: Result<i32, RunError>,
    record: crate::record::RunRecord,
    events: Vec<String>,
    world: Arc<Mutex<World>>,
    placements: Vec<BTreeMap<u32, String>>,
}

fn supervise(scripts: Vec<Script>, change: impl FnOnce(&mut World)) -> Run {
    supervise_with_slots(crate::placement::Slots::new(), scripts, change)
}

/// The scripted clusters' partition grace: how long a run awaits members lost beyond m.
const PARTITION_GRACE_MS: u64 = 2_000;

/// [`supervise`] with each node running at most `slots` ranks.
fn supervise_with_slots(
    slots: crate::placement::Slots,
    scripts: Vec<Script>,
    change: impl FnOnce(&mut World),
) -> Run {
    let root = tempfile::tempdir().unwrap();
    let mut world = World {
        committed: 3,
        term: 1,
        ..World::default()
    };
    for i in 0..6u32 {
        let ranks = if i < 4 { vec![2 * i, 2 * i + 1] } else { Vec::new() };
        world.nodes.insert(
            format!("n{i}"),
            Node {
                alive: true,
                awaited: false,
                removed: false,
                ranks,
            },
        );
    }
    change(&mut world);
    let world = Arc::new(Mutex::new(world));
    let placements = Arc::new(Mutex::new(Vec::new()));
    let deadlines = Deadlines {
        liveness_ms: 600,
        lease_ms: 1_000,
        partition_grace_ms: PARTITION_GRACE_MS,
        ..Deadlines::default()
    };
    let file = ClusterFile {
        format: 1,
        coding: CodingConfig::default(),
        coordinator_unix: Endpoint::Unix(root.path().join("coordinator.sock")),
        coordinator_tcp: None,
        coordinator_host: None,
        netns: None,
        flush: None,
        deadlines,
        agent_placement: Default::default(),
    };
    let handle = Handle {
        dir: ClusterDir::new(root.path()).unwrap(),
        file,
        coordinator: Arc::new(Scripted {
            world: world.clone(),
            _epochs: Mutex::new(None),
        }),
        launcher: Box::new(ScriptedLaunches {
            world: world.clone(),
            scripts: Mutex::new(scripts.into()),
            placements: placements.clone(),
        }),
        allocation: None,
        slots,
    };
    let options = options(root.path());
    let mut supervisor = Supervisor::new(
        &options,
        handle,
        None,
        Arc::new(AtomicBool::new(false)),
        Instant::now(),
    )
    .unwrap();
    let mut events = Vec::new();
    let result = supervisor.run(&mut |e: Event| events.push(e.to_string()));
    if let Some(lease) = supervisor.lease.take() {
        lease
            .release(&*supervisor.cluster, matches!(result, Ok(0)))
            .unwrap();
    }
    let placements = placements.lock().unwrap().clone();
    Run {
        result,
        record: supervisor.record,
        events,
        world,
        placements,
    }
}

#[test]
fn a_rank_exiting_non_zero_with_every_node_alive_ends_the_run_with_its_status() {
    let run = supervise(
        vec![end_at(
            2,
            Ending::Failed {
                rank: Some(5),
                code: 3,
            },
        )],
        |_| {},
    );
    assert_eq!(run.result.unwrap(), 3, "the program's own answer");
    let w = run.world.lock().unwrap();
    assert_eq!(w.recoveries, 0, "nothing to recover");
    assert_eq!(w.released, Some(false), "the lease goes, the job not finished");
    assert_eq!(run.record.attempts.len(), 1);
    assert!(
        run.events
            .iter()
            .any(|e| e.contains("resuming the checkpointed job from epoch 3")),
        "{:?}",
        run.events
    );
}

/// Two slots per node, ranks on n0–n3 two each: the recovery moves n1's ranks to n0 and n2,
/// beyond their slots. Nothing is relaunched; the run stops saying so.
#[test]
fn a_recovery_that_leaves_a_node_more_ranks_than_slots_stops_the_run_before_the_relaunch() {
    let slots = (0..6).map(|i| (format!("n{i}"), 2)).collect();
    let run = supervise_with_slots(slots, vec![node_dies("n1", 1, None)], |_| {});
    let error = run.result.unwrap_err().to_string();
    assert!(
        error.starts_with("the hosts' slots no longer fit 8 ranks as the cluster placed them: n0 holds 3, over its 2 slots; the job stops here"),
        "{error}"
    );
    assert_eq!(run.world.lock().unwrap().recoveries, 1);
    assert_eq!(run.placements.len(), 1, "no relaunch");
}

/// A node the coordinator declares dead after hearing nothing from it for 30 s: the
/// recovery is measured from its last heartbeat, not from the moment the run saw it
/// declared, in the record and in the line the run prints.
#[test]
fn a_recovery_is_measured_from_the_lost_nodes_last_heartbeat() {
    let silent: Script = Box::new(|look, world| {
        if look == 1 {
            world.nodes.get_mut("n1").unwrap().alive = false;
            world.silent.insert("n1".into(), 30.0);
        }
        None
    });
    let run = supervise(vec![silent, end_at(1, Ending::Done)], |_| {});
    assert_eq!(run.result.unwrap(), 0);
    let r = &run.record.recoveries[0];
    assert!(r.silence_seconds >= 30.0, "{r:?}");
    assert!(r.loss_to_running_seconds >= 30.0 + r.detect_seconds, "{r:?}");
    assert!(
        (r.loss_to_running_seconds - r.silence_seconds - r.downtime_seconds).abs() < 1e-6,
        "{r:?}"
    );
    assert!(
        r.downtime_seconds < 30.0,
        "the run saw the loss declared at once: {r:?}"
    );
    let line = run
        .events
        .iter()
        .find(|e| e.starts_with("recovered epoch"))
        .unwrap();
    let from_loss: f64 = line
        .rsplit_once(" s from the loss to every rank running")
        .and_then(|(head, _)| head.rsplit_once('(')?.1.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(from_loss >= 30.0, "{line}");
    let detect: f64 = line
        .split_once("detect ")
        .and_then(|(_, rest)| rest.split_once(' ')?.0.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(detect >= 30.0, "detection includes the silence: {line}");
}

/// Two slots on n0–n3, none on n4 and n5: once n1 is lost, 6 slots are left for 8 ranks.
#[test]
fn a_loss_that_leaves_too_few_slots_stops_the_run_saying_so() {
    let slots = || {
        (0..6)
            .map(|i| (format!("n{i}"), if i < 4 { 2 } else { 0 }))
            .collect()
    };
    let run = supervise_with_slots(slots(), vec![end_at(0, Ending::Done)], |_| {});
    assert_eq!(run.result.unwrap(), 0, "8 ranks fit n0–n3 before the loss");
    let run = supervise_with_slots(slots(), vec![node_dies("n1", 1, None)], |_| {});
    let error = run.result.unwrap_err().to_string();
    assert!(
        error.starts_with(
            "the hosts' slots no longer fit 8 ranks: the 5 node(s) left that host ranks have 6 slots in all, 2 short; the job stops here"
        ),
        "{error}"
    );
    assert_eq!(run.placements.len(), 1, "no relaunch");
}

#[test]
fn a_node_lost_under_a_running_attempt_is_recovered_and_every_rank_relaunched_where_it_now_lives() {
    let run = supervise(vec![node_dies("n1", 1, None), end_at(1, Ending::Done)], |_| {});
    assert_eq!(run.result.unwrap(), 0);
    assert_eq!(run.world.lock().unwrap().recoveries, 1);
    assert_eq!(run.world.lock().unwrap().released, Some(true), "finished");
    assert_eq!(run.placements.len(), 2, "one relaunch");
    assert_eq!(run.placements[0][&2], "n1");
    assert!(
        run.placements[1].values().all(|n| n != "n1"),
        "{:?}",
        run.placements[1]
    );
    assert_eq!(run.placements[1].len(), WORLD as usize, "every rank relaunched");
    assert_eq!(run.record.failures.len(), 1);
    assert_eq!(run.record.failures[0].nodes, ["n1"]);
    assert_eq!(run.record.recoveries.len(), 1);
    assert_eq!(run.record.attempts[0].end, "node n1 lost");
}

/// A rank whose checkpoint was lost with the coordinator (replaced on another host while
/// the epoch was open) exits non-zero with every node alive: a failure to restart from,
/// not the program's answer.
#[test]
fn a_rank_failing_after_the_coordinator_was_replaced_is_relaunched_from_the_last_epoch() {
    let replaced: Script = Box::new(|look, world| {
        (look == 1).then(|| {
            world.term += 1;
            Ending::Failed {
                rank: Some(3),
                code: 1,
            }
        })
    });
    let run = supervise(vec![replaced, end_at(1, Ending::Done)], |_| {});
    assert_eq!(run.result.unwrap(), 0);
    assert_eq!(run.placements.len(), 2, "one relaunch");
    assert_eq!(run.world.lock().unwrap().recoveries, 0, "nothing to recover");
    assert_eq!(run.record.failures.len(), 1);
    assert_eq!(run.record.failures[0].cause, "coordinator replaced");
    assert!(
        run.record.attempts[0]
            .end
            .contains("after the coordinator was replaced (term 1 to 2)"),
        "{}",
        run.record.attempts[0].end
    );
}

/// After a coordinator restart or failover every node is down until its agent registers
/// with the new coordinator: awaited, not lost. The attempt goes on, nothing is recovered.
#[test]
fn nodes_awaited_by_a_replaced_coordinator_are_not_lost() {
    let run = supervise(vec![coordinator_replaced(1, 4)], |_| {});
    assert_eq!(run.result.unwrap(), 0);
    assert_eq!(run.world.lock().unwrap().recoveries, 0, "nothing recovered");
    assert!(run.record.failures.is_empty(), "{:?}", run.record.failures);
    assert_eq!(run.placements.len(), 1, "no relaunch");
}

#[test]
fn a_rank_that_fails_as_its_node_is_declared_lost_is_a_failure_to_recover_not_the_programs_status() {
    // MPI aborts the job when a peer's node dies, often before the coordinator misses the
    // node's heartbeats: the exit comes first, the loss within the liveness period.
    let died = node_dies(
        "n2",
        1,
        Some(Ending::Failed {
            rank: Some(0),
            code: 134,
        }),
    );
    let run = supervise(vec![died, end_at(0, Ending::Done)], |_| {});
    assert_eq!(run.result.unwrap(), 0, "{:?}", run.events);
    assert_eq!(run.world.lock().unwrap().recoveries, 1);
    assert_eq!(run.record.attempts[0].end, "rank 0 exited 134 after a node loss");
    assert!(run.placements[1].values().all(|n| n != "n2"));
}

#[test]
fn a_rank_killed_by_a_signal_is_relaunched_from_the_last_epoch_without_a_recovery() {
    let killed = end_at(
        1,
        Ending::Killed {
            rank: Some(4),
            signal: Some(9),
        },
    );
    let run = supervise(vec![killed, end_at(0, Ending::Done)], |_| {});
    assert_eq!(run.result.unwrap(), 0);
    assert_eq!(run.world.lock().unwrap().recoveries, 0, "no node was lost");
    assert_eq!(run.placements[0], run.placements[1], "every rank where it was");
    assert_eq!(run.record.failures[0].cause, "rank 4 killed by signal 9");
}

#[test]
fn more_losses_than_the_code_tolerates_end_the_run_with_the_coordinators_reason_after_the_grace() {
    let started = Instant::now();
    let run = supervise(vec![node_dies("n0", 1, None)], |w| w.unrecoverable = true);
    match run.result {
        Err(RunError::Unrecoverable(why)) => assert!(why.contains("more than m=2"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(run.placements.len(), 1, "no relaunch on a lost checkpoint");
    assert!(
        started.elapsed() >= Duration::from_millis(PARTITION_GRACE_MS),
        "the lost members were awaited for the partition grace"
    );
    let recoveries = run.world.lock().unwrap().recoveries;
    assert!(
        (2..=6).contains(&recoveries),
        "asked about once per liveness period: {recoveries}"
    );
}

/// Members down past what the code tolerates are often rebooting or cut off for a while,
/// their stores intact: once they are back, the job goes on from its last epoch.
#[test]
fn members_that_come_back_within_the_grace_let_the_run_go_on() {
    let run = supervise(vec![node_dies("n0", 1, None), end_at(0, Ending::Done)], |w| {
        w.unrecoverable = true;
        w.back_after = Some(2);
    });
    assert_eq!(run.result.unwrap(), 0);
    assert_eq!(run.placements.len(), 2, "relaunched once they were back");
    assert!(
        run.placements[1].values().any(|n| n == "n0"),
        "n0 came back with its store and hosts its ranks again: {:?}",
        run.placements[1]
    );
}

#[test]
fn restarts_beyond_the_limit_give_up_keeping_the_last_committed_epoch() {
    let kill = || {
        end_at(
            0,
            Ending::Killed {
                rank: None,
                signal: Some(9),
            },
        )
    };
    let run = supervise(vec![kill(), kill(), kill(), kill()], |_| {});
    match run.result {
        Err(RunError::Restarts(why)) => assert!(why.contains("giving up after 3 restarts"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(run.placements.len(), 4);
}

#[test]
fn a_restarted_supervisor_takes_the_job_over_once_its_dead_predecessors_lease_expires() {
    // The predecessor (on another host) stopped renewing 2 s ago; its lease ends in 0.3 s.
    let predecessor = LeaseHolder {
        host: "elsewhere".into(),
        pid: 1,
        since_unix: 0.0,
        command: "eckpt run".into(),
        run: None,
    };
    let renewed = Instant::now() - std::time::Duration::from_secs(2);
    let started = Instant::now();
    let run = supervise(vec![end_at(0, Ending::Done)], |w| {
        w.holder = Some((predecessor, renewed, 2.3));
    });
    assert_eq!(run.result.unwrap(), 0, "{:?}", run.events);
    assert!(
        started.elapsed().as_secs_f64() >= 0.3,
        "claimed before the lease expired"
    );
    assert!(
        run.events
            .iter()
            .any(|e| e.contains("is gone and has not renewed its lease")),
        "{:?}",
        run.events
    );
}

#[test]
fn a_run_whose_job_a_newer_generation_took_over_ends_naming_it_not_with_its_ranks_status() {
    // Another run took the job while this one was stopped: its ranks, refused by the
    // coordinator, exit 1 — which is not the program's answer.
    let successor = LeaseHolder {
        host: "elsewhere".into(),
        pid: 2,
        since_unix: 0.0,
        command: "eckpt run".into(),
        run: None,
    };
    let taken_over: Script = Box::new(move |look, world| {
        (look == 2).then(|| {
            world.generation += 1;
            world.holder = Some((successor.clone(), Instant::now(), 10.0));
            Ending::Failed {
                rank: Some(0),
                code: 1,
            }
        })
    });
    let run = supervise(vec![taken_over], |_| {});
    let now = run.world.lock().unwrap().generation;
    match run.result {
        Err(RunError::Superseded { generation, ours, .. }) => {
            assert_eq!((generation, ours), (now, now - 1));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(run.placements.len(), 1, "no relaunch under the successor");
}
