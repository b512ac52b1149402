//! A scenario's predicted epochs, checkpoints, recovery and storage on a machine.
//!
//! The first epoch encodes every image in full; later epochs do what the configured mode
//! does: `full` encodes again, `stripe` encodes the epoch's padded deltas as an object of
//! their own, `update` sends the changed pages to the parity holders — unless they exceed
//! what a full encode moves, when the coordinator encodes in full (the same rule as its
//! `update_is_cheaper`: changed bytes of the group below `m ×` the longest shard).
//!
//! Every epoch and every recovery also pays the control plane ([`crate::control`]): an
//! epoch's commit, a loss's detection beyond the liveness period and the recovery's
//! planning, each a fixed part plus a part per node, kept apart in the prediction so that
//! what the coordinator costs at thousands of nodes shows.

use eckpt_coding::geometry::Geometry;
use eckpt_coding::{Layout, Mode};
use serde::{Deserialize, Serialize};

use crate::control::Linear;
use crate::machine::Machine;
use crate::scenario::{GroupShape, Scenario, BLOCK};
use crate::time::{busiest_agent_cpu, cpu_seconds, task_seconds, Estimate};
use crate::work::{self, NodeWork, TaskWork};
use crate::ModelError;

/// Times a data member opens each rank's epoch during a full encode (`describe` listing the
/// items, the image shard the coding task reads).
const OPENS_ENCODE: f64 = 2.0;
/// The same during an update (`describe`: items, parent check, changed bytes; the update:
/// new and old epoch for `old ⊕ new`, the image shard for the CRCs of touched chunks).
const OPENS_UPDATE: f64 = 6.0;

/// Rounds of a full encode (or stripe) per member: describe (data members) and the coding
/// task.
const ROUNDS_ENCODE: f64 = 2.0;
/// Rounds of an update per member: describe, and the update with its `m` phases of links.
const ROUNDS_UPDATE: f64 = 4.0;

/// Charges every data member of `task` for opening its ranks' epochs `opens` times, and
/// every member for `rounds` rounds of the task.
fn fixed_work(task: &mut TaskWork, layout: Layout, g: GroupShape, d: u64, opens: f64, rounds: f64) {
    let probe = Geometry::new(layout, g.k, g.m, 1);
    for (x, w) in task.before.iter_mut().enumerate().take(g.members()) {
        w.rounds += rounds;
        if probe.holds_data(x) {
            w.opened_blocks += opens * (d / BLOCK) as f64;
        }
    }
}

/// Bytes a serialized delta adds per stored page (its block index).
const DELTA_PER_BLOCK: f64 = 8.0;
/// Bytes of a stripe blob's fixed headers (delta header, item, trailer, blob header).
const BLOB_FIXED: f64 = 256.0;

/// The control plane's part of an epoch or a recovery at the scenario's node count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ControlPart {
    /// Seconds whatever the node count.
    pub fixed_s: f64,
    /// Seconds per node.
    pub per_node_s: f64,
    /// The scenario's nodes.
    pub nodes: usize,
    /// `fixed_s + per_node_s × nodes`.
    pub seconds: f64,
}

impl ControlPart {
    fn at(cost: Linear, nodes: usize) -> ControlPart {
        ControlPart {
            fixed_s: cost.fixed_s,
            per_node_s: cost.per_node_s,
            nodes,
            seconds: cost.at(nodes),
        }
    }
}

/// One epoch: its encode and its commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochPrediction {
    /// What the coordinator does: `full`, `update`, `stripe` or `stripe-full`.
    pub kind: String,
    /// Seconds from the start of encoding to the last member's report (as `eckpt bench
    /// cluster` and the coordinator measure `encode_seconds`).
    pub encode_seconds: f64,
    /// The control plane's part of the epoch beyond the encode: the ranks' calls, the
    /// coordinator's handling of every node's and its commit.
    pub commit: ControlPart,
    /// From the ranks' checkpoint calls to the commit: `encode_seconds + commit.seconds`,
    /// how far the newest committed epoch lags behind the newest checkpoint.
    pub seconds: f64,
    /// Transfer unit the encode runs with (smaller than configured for small objects).
    pub chunk: u64,
    /// Payload bytes on the busiest link.
    pub busiest_link_bytes: f64,
    /// Payload bytes the busiest data-holding node sends.
    pub sent_per_data_node: f64,
    /// CPU seconds the busiest node's agent spends on the epoch (all its threads; `eckpt
    /// bench cluster` measures the same per GB of rank data): taken from the ranks on its
    /// cores unless the agent has cores of its own.
    pub agent_cpu_seconds: f64,
    /// Where the time goes.
    pub estimate: Estimate,
}

/// Rebuilding lost members and protecting the job again.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RecoveryPrediction {
    /// Members lost in one group (data members: the worst case).
    pub lost: usize,
    /// Until the loss is noticed: the liveness period plus `detect_delay`.
    pub detect_s: f64,
    /// The control plane's delay, beyond the liveness period, in counting the node dead.
    pub detect_delay: ControlPart,
    /// The coordinator's planning of the recovery and its journal commits.
    pub plan: ControlPart,
    /// Every survivor re-reads and checks what it holds.
    pub scrub_s: f64,
    /// Parallel decode of the lost data onto spares.
    pub decode_s: f64,
    /// Installing the rebuilt images in the spares' stores.
    pub install_s: f64,
    /// Encoding the group anew.
    pub reencode_s: f64,
    /// The sum: until the job can restart protected.
    pub seconds: f64,
}

/// What the checkpoints occupy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Storage {
    /// Rank image bytes on a data-holding node.
    pub data_per_node: u64,
    /// Parity bytes per byte of rank data (`m / k`).
    pub parity_per_data: f64,
    /// The same with a full stripe chain kept (`stripe` mode; `parity_per_data` otherwise).
    pub parity_per_data_chain: f64,
}

/// Everything predicted for a scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Groups the nodes form.
    pub groups: Vec<GroupShape>,
    /// Data shard bytes of a data-holding node (`D`).
    pub shard_bytes: u64,
    /// Bytes a rank changes per epoch.
    pub changed_per_node: u64,
    /// The first epoch (a full encode; `stripe-full` in stripe mode).
    pub first: EpochPrediction,
    /// A later epoch in the configured mode.
    pub next: EpochPrediction,
    /// Seconds a rank is stopped for its first (full) local checkpoint.
    pub first_checkpoint_seconds: f64,
    /// Seconds a rank is stopped for a later (incremental) local checkpoint.
    pub checkpoint_seconds: f64,
    /// Losing `m` data members of a group.
    pub recovery: RecoveryPrediction,
    /// Space.
    pub storage: Storage,
}

impl Prediction {
    /// What a later epoch costs the job, in seconds of its ranks' time: the local
    /// checkpoint they stop for, plus the agent's CPU they lose when it runs on `rank_cores`
    /// cores they keep busy (one CPU second of the agent delays those ranks by 1/`rank_cores`
    /// of a second, spread evenly; 0: the agent has cores of its own and costs nothing).
    pub fn job_checkpoint_seconds(&self, rank_cores: f64) -> f64 {
        let lost = if rank_cores > 0.0 {
            self.next.agent_cpu_seconds / rank_cores
        } else {
            0.0
        };
        self.checkpoint_seconds + lost
    }
}

/// The transfer unit of a full encode whose longest shard is `longest` bytes: the
/// coordinator's own choice ([`eckpt_coding::policy::chunk_size`]).
fn encode_chunk(layout: Layout, shape: GroupShape, longest: u64, configured: u32) -> u64 {
    u64::from(eckpt_coding::policy::chunk_size(
        layout, shape.k, shape.m, longest, configured,
    ))
}

/// Bytes of a stripe blob holding `pages` stored pages, padded to whole pages.
fn blob_bytes(pages: u64) -> u64 {
    let raw = pages as f64 * (BLOCK as f64 + DELTA_PER_BLOCK) + BLOB_FIXED;
    (raw / BLOCK as f64).ceil() as u64 * BLOCK
}

/// Predicts `scenario` on `machine`.
pub fn predict(scenario: &Scenario, machine: &Machine) -> Result<Prediction, ModelError> {
    scenario.validate()?;
    machine.validate()?;
    let groups = scenario.groups();
    let d = scenario.size_per_node.div_ceil(BLOCK) * BLOCK;
    let changed = scenario.changed_per_node();
    let first = match scenario.coding.mode {
        Mode::Stripe => stripe(scenario, machine, &groups, d / BLOCK, "stripe-full"),
        Mode::Full | Mode::Update => full(scenario, machine, &groups, d),
    };
    let next = match scenario.coding.mode {
        Mode::Full => first.clone(),
        Mode::Stripe => stripe(scenario, machine, &groups, changed / BLOCK, "stripe"),
        Mode::Update => {
            let cheaper = distinct(&groups).iter().all(|g| {
                let group_changed = data_members(scenario.coding.layout, *g) as u64 * changed;
                eckpt_coding::policy::update_is_cheaper(group_changed, g.m, d)
            });
            match cheaper {
                true => update(scenario, machine, &groups, d),
                false => first.clone(),
            }
        }
    };
    let parity_per_data = scenario.parity_per_data();
    let chain = match scenario.coding.mode {
        Mode::Stripe => {
            let deltas = f64::from(scenario.coding.max_stripes.saturating_sub(1));
            parity_per_data * (1.0 + deltas * blob_bytes(changed / BLOCK) as f64 / d as f64)
        }
        _ => parity_per_data,
    };
    Ok(Prediction {
        shard_bytes: d,
        changed_per_node: changed,
        first_checkpoint_seconds: checkpoint(scenario, machine, d),
        checkpoint_seconds: checkpoint(scenario, machine, changed),
        recovery: recovery(scenario, machine, &groups, d, first.encode_seconds),
        storage: Storage {
            data_per_node: d,
            parity_per_data,
            parity_per_data_chain: chain,
        },
        groups,
        first,
        next,
    })
}

fn data_members(layout: Layout, g: GroupShape) -> usize {
    let probe = Geometry::new(layout, g.k, g.m, 1);
    (0..g.members()).filter(|&x| probe.holds_data(x)).count()
}

/// The distinct shapes among `groups` (a scenario's groups come in at most two shapes).
fn distinct(groups: &[GroupShape]) -> Vec<GroupShape> {
    let mut shapes: Vec<GroupShape> = Vec::new();
    for g in groups {
        if !shapes.contains(g) {
            shapes.push(*g);
        }
    }
    shapes
}

/// One task per group, `task` counted once per distinct shape: groups of one shape do the
/// same work (thousands of nodes form hundreds of groups of one or two shapes).
fn per_group(groups: &[GroupShape], mut task: impl FnMut(GroupShape) -> TaskWork) -> Vec<TaskWork> {
    let counted: Vec<(GroupShape, TaskWork)> = distinct(groups).into_iter().map(|g| (g, task(g))).collect();
    groups
        .iter()
        .map(|g| {
            counted
                .iter()
                .find(|(shape, _)| shape == g)
                .map(|(_, t)| t.clone())
                .expect("every shape was counted")
        })
        .collect()
}

/// An epoch from one task per group (`tasks[i]` is `groups[i]`'s).
fn epoch(
    scenario: &Scenario,
    machine: &Machine,
    groups: &[GroupShape],
    kind: &str,
    chunk: u64,
    tasks: Vec<TaskWork>,
) -> EpochPrediction {
    let estimate = task_seconds(machine, &tasks);
    let layout = scenario.coding.layout;
    let sent_per_data_node = distinct(groups)
        .into_iter()
        .filter_map(|g| {
            let t = &tasks[groups.iter().position(|x| *x == g)?];
            let probe = Geometry::new(layout, g.k, g.m, 1);
            Some(
                t.during
                    .iter()
                    .enumerate()
                    .filter(|(x, _)| *x < g.members() && probe.holds_data(*x))
                    .map(|(_, w)| w.sent)
                    .fold(0.0, f64::max),
            )
        })
        .fold(0.0, f64::max);
    let commit = ControlPart::at(machine.control.commit(machine.hosts), scenario.nodes);
    EpochPrediction {
        kind: kind.to_string(),
        encode_seconds: estimate.seconds,
        commit,
        seconds: estimate.seconds + commit.seconds,
        chunk,
        busiest_link_bytes: tasks.iter().map(TaskWork::busiest_link).fold(0.0, f64::max),
        sent_per_data_node,
        agent_cpu_seconds: busiest_agent_cpu(machine, &tasks),
        estimate,
    }
}

fn full(scenario: &Scenario, machine: &Machine, groups: &[GroupShape], d: u64) -> EpochPrediction {
    let c = &scenario.coding;
    let chunk = encode_chunk(c.layout, groups[0], d, c.chunk);
    let tasks = per_group(groups, |g| {
        let mut t = work::encode(c.layout, c.topology, g, d, chunk);
        fixed_work(&mut t, c.layout, g, d, OPENS_ENCODE, ROUNDS_ENCODE);
        t
    });
    epoch(scenario, machine, groups, "full", chunk, tasks)
}

/// A stripe of `pages` stored pages per data member: each serializes them into a blob
/// (opening its ranks' epoch, reading the pages from the store, writing the blob) while
/// describing its shard, then the group encodes the blobs, padded to the largest.
fn stripe(
    scenario: &Scenario,
    machine: &Machine,
    groups: &[GroupShape],
    pages: u64,
    kind: &str,
) -> EpochPrediction {
    let c = &scenario.coding;
    let blob = blob_bytes(pages);
    let chunk = encode_chunk(c.layout, groups[0], blob, c.chunk);
    let tasks = per_group(groups, |g| {
        let mut t = work::encode(c.layout, c.topology, g, blob, chunk);
        let probe = Geometry::new(c.layout, g.k, g.m, 1);
        for (x, w) in t.before.iter_mut().enumerate() {
            if probe.holds_data(x) {
                w.read += (pages * BLOCK) as f64;
                w.written += blob as f64;
            }
        }
        fixed_work(&mut t, c.layout, g, scenario.size_per_node, 1.0, ROUNDS_ENCODE);
        t
    });
    epoch(scenario, machine, groups, kind, chunk, tasks)
}

fn update(scenario: &Scenario, machine: &Machine, groups: &[GroupShape], d: u64) -> EpochPrediction {
    let c = &scenario.coding;
    let chunk = u64::from(c.chunk);
    let tasks = per_group(groups, |g| {
        let mut t = work::update(c.layout, g, d, chunk, scenario.dirty_fraction);
        fixed_work(&mut t, c.layout, g, d, OPENS_UPDATE, ROUNDS_UPDATE);
        t
    });
    epoch(scenario, machine, groups, "update", chunk, tasks)
}

/// A rank's local checkpoint: look at the whole image for changes, write `written` bytes
/// into the node-local store. Every data node's ranks checkpoint at once.
fn checkpoint(scenario: &Scenario, machine: &Machine, written: u64) -> f64 {
    let w = NodeWork {
        stored: written as f64,
        scanned: scenario.size_per_node as f64,
        ..NodeWork::default()
    };
    let all = vec![&w; scenario.data_nodes()];
    cpu_seconds(machine, &all)
}

/// Losing `m` data members of one group with spares at hand: notice it, plan, scrub the
/// survivors, decode onto the spares, install, encode the group anew.
fn recovery(
    scenario: &Scenario,
    machine: &Machine,
    groups: &[GroupShape],
    d: u64,
    reencode_s: f64,
) -> RecoveryPrediction {
    let c = &scenario.coding;
    let g = groups[0];
    let probe = Geometry::new(c.layout, g.k, g.m, 1);
    let lost: Vec<usize> = (0..g.members())
        .filter(|&x| probe.holds_data(x))
        .take(g.m)
        .collect();
    let chunk = encode_chunk(c.layout, g, d, c.chunk);
    let mut decode = work::decode(c.layout, c.topology, g, &lost, d, chunk);
    for w in decode.after.iter_mut().skip(g.members()) {
        w.written += d as f64;
    }
    let install_s = cpu_seconds(machine, &decode.after.iter().collect::<Vec<_>>());
    decode.after.iter_mut().for_each(|w| *w = NodeWork::default());
    let decode_s = task_seconds(machine, &[decode]).seconds;
    let survivor = NodeWork {
        read: d as f64 * (1.0 + scenario.parity_per_data()),
        ..NodeWork::default()
    };
    let survivors = vec![&survivor; scenario.nodes - lost.len()];
    let scrub_s = cpu_seconds(machine, &survivors) + machine.task_s;
    let detect_delay = ControlPart::at(machine.control.detect, scenario.nodes);
    let plan = ControlPart::at(machine.control.plan, scenario.nodes);
    let detect_s = machine.detect_s + detect_delay.seconds;
    RecoveryPrediction {
        lost: lost.len(),
        detect_s,
        detect_delay,
        plan,
        scrub_s,
        decode_s,
        install_s,
        reencode_s,
        seconds: detect_s + plan.seconds + scrub_s + decode_s + install_s + reencode_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Control;
    use eckpt_coding::{CodingConfig, Topology};
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    fn scenario(nodes: usize, k: usize, mode: Mode) -> Scenario {
        Scenario {
            nodes,
            coding: CodingConfig {
                k,
                m: 2,
                mode,
                chunk: 1 << 20,
                ..CodingConfig::default()
            },
            size_per_node: 64 * MIB,
            dirty_fraction: 0.001,
        }
    }

    #[test]
    fn mat_stripes_are_small_and_match_the_bench() {
        // `bench cluster`: a MAT stripe of 16 changed pages sent 139,264 bytes per data node.
        let s = scenario(6, 4, Mode::Stripe);
        let p = predict(&s, &Machine::reference(1e9)).unwrap();
        assert_eq!(p.changed_per_node, 16 * 4096);
        assert_eq!(p.next.kind, "stripe");
        assert_eq!(p.next.sent_per_data_node, 139_264.0);
    }

    #[test]
    fn update_falls_back_to_full_when_most_pages_change() {
        let mut s = scenario(6, 4, Mode::Update);
        let machine = Machine::reference(1e9);
        assert_eq!(predict(&s, &machine).unwrap().next.kind, "update");
        s.dirty_fraction = 0.6;
        let p = predict(&s, &machine).unwrap();
        assert_eq!(p.next.kind, "full", "LU: 60 % of 4 shards exceeds 2 shards");
        assert_eq!(p.next, p.first);
    }

    #[test]
    fn the_agents_cpu_is_the_jobs_cost_unless_it_has_cores_of_its_own() {
        let machine = Machine::reference(1e9);
        let mut s = scenario(6, 4, Mode::Full);
        let p = predict(&s, &machine).unwrap();
        let cpu = p.next.agent_cpu_seconds;
        assert!(cpu > 0.0, "{p:?}");
        assert_eq!(p.job_checkpoint_seconds(0.0), p.checkpoint_seconds);
        assert!((p.job_checkpoint_seconds(4.0) - p.checkpoint_seconds - cpu / 4.0).abs() < 1e-12);
        // A full encode of four times the data costs the agents about four times the CPU.
        s.size_per_node *= 4;
        let ratio = predict(&s, &machine).unwrap().next.agent_cpu_seconds / cpu;
        assert!(ratio > 3.5 && ratio < 4.1, "{ratio}");
        // An update of a few pages costs the agents far less than a full encode.
        s.coding.mode = Mode::Update;
        let update = predict(&s, &machine).unwrap();
        assert!(update.next.agent_cpu_seconds * 10.0 < update.first.agent_cpu_seconds);
    }

    #[test]
    fn update_of_few_pages_beats_a_full_encode_by_far() {
        let p = predict(&scenario(6, 4, Mode::Update), &Machine::reference(1e9)).unwrap();
        assert!(p.next.encode_seconds * 10.0 < p.first.encode_seconds, "{p:?}");
    }

    #[test]
    fn weak_scaling_is_flat_on_own_hosts_but_for_the_pipeline_fill() {
        let machine = Machine::reference(100e6);
        let t = |n: usize, k: usize, chunk: u32| {
            let mut s = scenario(n, k, Mode::Full);
            s.coding.chunk = chunk;
            predict(&s, &machine).unwrap().first.encode_seconds
        };
        assert!(
            t(32, 30, 64 << 10) / t(4, 2, 64 << 10) < 1.1,
            "64 KiB chunks fill 30 hops fast"
        );
        assert!(
            t(32, 30, 1 << 20) / t(4, 2, 1 << 20) > 1.3,
            "1 MiB chunks do not, at 100 Mbit/s"
        );
        assert_eq!(
            t(4096, 30, 1 << 20),
            t(32, 30, 1 << 20),
            "groups run side by side"
        );
    }

    /// 14+2 groups in update mode over `nodes` nodes, predicted on `machine`.
    fn at_scale(nodes: usize, machine: &Machine) -> Prediction {
        predict(&scenario(nodes, 14, Mode::Update), machine).unwrap()
    }

    #[test]
    fn the_control_plane_adds_its_cost_per_node_to_every_epoch() {
        let machine = Machine::reference(100e9);
        let per_node = machine.control.commit(machine.hosts).per_node_s;
        assert!(per_node > 0.0);
        let (small, large) = (at_scale(64, &machine), at_scale(4096, &machine));
        // Groups of one shape encode side by side: the encode is the same at any size, and
        // the epoch grows by the coordinator's cost per node for every node added.
        assert_eq!(small.next.encode_seconds, large.next.encode_seconds);
        let grown = large.next.seconds - small.next.seconds;
        assert!((grown - per_node * 4032.0).abs() < 1e-9, "{grown}");
        for p in [&small, &large] {
            for e in [&p.first, &p.next] {
                assert_eq!(e.seconds, e.encode_seconds + e.commit.seconds);
                let c = &e.commit;
                assert_eq!(c.seconds, c.fixed_s + c.per_node_s * c.nodes as f64);
            }
        }
        assert_eq!(large.next.commit.nodes, 4096);
        // A free control plane leaves the encode alone.
        let free = Machine {
            control: Control {
                commit_fixed_s: 0.0,
                coordinator_node_s: 0.0,
                node_s: 0.0,
                detect: Linear::default(),
                plan: Linear::default(),
            },
            ..machine
        };
        let p = at_scale(4096, &free);
        assert_eq!(p.next.seconds, p.next.encode_seconds);
        assert_eq!(p.recovery.detect_s, machine.detect_s, "the liveness period alone");
    }

    #[test]
    fn on_one_shared_host_the_nodes_own_calls_add_up_too() {
        let own = Machine::reference(1e9);
        let shared = own.emulated(1e9, 2.0);
        let c = own.control;
        let grown = |m: &Machine| at_scale(1024, m).next.commit.seconds - at_scale(64, m).next.commit.seconds;
        assert!((grown(&own) - 960.0 * c.coordinator_node_s).abs() < 1e-9);
        let cores = 2.0 * crate::machine::SHARED_HOST_SHARE;
        let expected = 960.0 * (c.coordinator_node_s + c.node_s / cores);
        assert!((grown(&shared) - expected).abs() < 1e-9, "{}", grown(&shared));
    }

    #[test]
    fn a_recovery_waits_for_the_liveness_period_detection_and_planning() {
        let machine = Machine::reference(100e9);
        let (small, large) = (at_scale(64, &machine), at_scale(4096, &machine));
        let c = machine.control;
        for (p, nodes) in [(&small, 64.0), (&large, 4096.0)] {
            let r = &p.recovery;
            let detect = machine.detect_s + c.detect.fixed_s + c.detect.per_node_s * nodes;
            assert!((r.detect_s - detect).abs() < 1e-12, "{r:?}");
            let plan = c.plan.fixed_s + c.plan.per_node_s * nodes;
            assert!((r.plan.seconds - plan).abs() < 1e-12, "{r:?}");
            let sum = r.detect_s + r.plan.seconds + r.scrub_s + r.decode_s + r.install_s + r.reencode_s;
            assert!((r.seconds - sum).abs() < 1e-9);
        }
        let grown = large.recovery.seconds - small.recovery.seconds;
        let control = (c.detect.per_node_s + c.plan.per_node_s) * 4032.0;
        assert!(
            grown >= control - 1e-9,
            "{grown}: at least the control plane's {control}"
        );
    }

    proptest! {
        /// More data, a slower link or more dirty pages never make an epoch faster; the
        /// storage overhead is m / k whatever the sizes.
        #[test]
        fn monotone_in_size_rate_and_dirt(
            mib in 1u64..256,
            more in 1u64..4,
            dirty in 0.0f64..0.3,
            rate in 1e8f64..1e11,
            mode in prop::sample::select(vec![Mode::Full, Mode::Update, Mode::Stripe]),
            topology in prop::sample::select(Topology::ALL.to_vec()),
            layout in prop::sample::select(vec![Layout::Dedicated, Layout::Rotated]),
        ) {
            let mut s = scenario(8, 6, mode);
            s.coding.topology = topology;
            s.coding.layout = layout;
            s.size_per_node = mib * MIB;
            s.dirty_fraction = dirty;
            let fast = Machine::reference(rate);
            let base = predict(&s, &fast).unwrap();
            let bigger = predict(&Scenario { size_per_node: mib * more * MIB, ..s }, &fast).unwrap();
            prop_assert!(bigger.first.encode_seconds >= base.first.encode_seconds * 0.999);
            let slower = predict(&s, &Machine::reference(rate / 2.0)).unwrap();
            prop_assert!(slower.next.encode_seconds >= base.next.encode_seconds * 0.999);
            let dirtier = predict(&Scenario { dirty_fraction: dirty + 0.1, ..s }, &fast).unwrap();
            prop_assert!(dirtier.checkpoint_seconds >= base.checkpoint_seconds);
            prop_assert!((base.storage.parity_per_data - 2.0 / 6.0).abs() < 1e-12);
        }
    }
}
