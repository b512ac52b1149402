//! Seconds of counted work on a machine. A task's transfers and arithmetic overlap (the
//! agents pipeline rows through bounded queues), so its middle stretch takes as long as
//! the slower of the busiest link and the CPU; what comes before and after adds, and so
//! do the fixed costs of starting a task and of filling the pipeline:
//!
//! `T = task + before + overlap(busiest link / rate, CPU) + after + depth · hop`, where a hop of
//! the pipeline's fill moves its message (beyond a shaper's burst, at the link's rate) and
//! does its work on it before passing it on.
//!
//! Two resources that feed each other through short queues do not overlap perfectly: when
//! both are nearly saturated, each waits on the other now and then. `overlap(a, b) =
//! (a³ + b³)^⅓` lies between `max(a, b)` (perfect overlap, reached when one side is small)
//! and `a + b`; the exponent 3 fits the measurements of docs/REPRODUCTION.md, where 16
//! namespaced nodes on 1 Gbit/s links need about as much CPU as link time.
//!
//! SCore's model (Hayashida et al., n.d., cited in full in docs/REPRODUCTION.md's References:
//! `T = D/Bn + N/(N−1)·D/Bdw + …`) adds network, disk and parity times because its
//! implementation does them one after the other; eckpt overlaps them, and charges the store
//! and the arithmetic to the CPU, where on a host shared by many emulated nodes they compete
//! with the network stack.

use serde::{Deserialize, Serialize};

use crate::machine::{Cpu, Hosts, Machine};
use crate::work::{NodeWork, TaskWork};

/// Where a prediction's time goes: `seconds = fixed_s + serial_s + overlap_s + fill_s`,
/// with `overlap_s = overlap(network_s, cpu_s)` and `fill_s = hops · hop_s`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Total seconds: the sum of the four terms below.
    pub seconds: f64,
    /// The busiest link's bytes over its rate (one side of `overlap_s`).
    pub network_s: f64,
    /// CPU seconds of the overlapped stretch, as the hosts' cores spread them (the other
    /// side of `overlap_s`).
    pub cpu_s: f64,
    /// The overlapped stretch: `overlap(network_s, cpu_s)`, between the larger of the two
    /// and their sum.
    #[serde(default)]
    pub overlap_s: f64,
    /// Work before and after the transfers.
    pub serial_s: f64,
    /// Filling the pipeline: the first row's hops, `hops · hop_s`.
    pub fill_s: f64,
    /// Hops of the first row before the pipeline is full (the deepest group's).
    #[serde(default)]
    pub hops: usize,
    /// Seconds of one of those hops: its message beyond a shaper's burst over the link,
    /// the work done on it, and the latency.
    #[serde(default)]
    pub hop_s: f64,
    /// Size-independent cost of the task.
    pub fixed_s: f64,
}

impl Estimate {
    /// The term that takes most of the time: `network` or `cpu` when the overlapped
    /// transfers and arithmetic do (whichever of the two is larger), `fill` (the pipeline's
    /// first row crossing its hops), `serial` (work before and after the transfers) or
    /// `overhead` (the task's fixed cost).
    pub fn bound(&self) -> &'static str {
        let overlapped = if self.network_s >= self.cpu_s {
            "network"
        } else {
            "cpu"
        };
        [
            (self.overlap_s, overlapped),
            (self.fill_s, "fill"),
            (self.serial_s, "serial"),
            (self.fixed_s, "overhead"),
        ]
        .into_iter()
        .fold((f64::NEG_INFINITY, overlapped), |best, term| {
            if term.0 > best.0 {
                term
            } else {
                best
            }
        })
        .1
    }
}

/// Exponent of [`overlap`].
pub const OVERLAP: f64 = 3.0;

/// Seconds of two overlapped activities taking `a` and `b` seconds alone.
pub fn overlap(a: f64, b: f64) -> f64 {
    let m = a.max(b);
    if m <= 0.0 {
        return 0.0;
    }
    m * ((a / m).powf(OVERLAP) + (b / m).powf(OVERLAP)).powf(1.0 / OVERLAP)
}

/// A node's CPU seconds for `w`: its executor thread (GF arithmetic, store reads and
/// writes) and the threads moving its sockets, which run beside it.
fn node_cpu(cpu: &Cpu, w: &NodeWork) -> (f64, f64) {
    let exec = w.gf * cpu.gf_byte_s
        + w.read * cpu.read_byte_s
        + w.written * cpu.write_byte_s
        + w.scanned * cpu.scan_byte_s
        + w.stored * cpu.store_byte_s
        + w.opened_blocks * cpu.chain_block_s
        + w.rounds * cpu.round_s;
    let net = w.messages * cpu.message_s + (w.sent + w.received) * cpu.link_byte_s;
    (exec, net)
}

/// Seconds the hosts' cores need for every node's `work` at once: on hosts of their own
/// the slowest node's slower thread; on one shared host at least all the work over its
/// cores.
pub fn cpu_seconds(machine: &Machine, work: &[&NodeWork]) -> f64 {
    let per_node = work.iter().map(|w| node_cpu(&machine.cpu, w));
    let slowest = per_node.clone().map(|(e, n)| e.max(n)).fold(0.0, f64::max);
    match machine.hosts {
        Hosts::PerNode => slowest,
        Hosts::Shared { cores } => {
            let total: f64 = per_node.map(|(e, n)| e + n).sum();
            slowest.max(total / cores.max(1.0))
        }
    }
}

/// CPU seconds the busiest node's agent spends on `tasks` (one per group), its threads
/// together: what it takes from the ranks that share its host's cores.
pub fn busiest_agent_cpu(machine: &Machine, tasks: &[TaskWork]) -> f64 {
    tasks
        .iter()
        .flat_map(|t| {
            (0..t.during.len()).map(move |p| {
                [&t.before[p], &t.during[p], &t.after[p]]
                    .into_iter()
                    .map(|w| {
                        let (exec, net) = node_cpu(&machine.cpu, w);
                        exec + net
                    })
                    .sum::<f64>()
            })
        })
        .fold(0.0, f64::max)
}

/// Seconds of `tasks` (one per group) running at once on `machine`.
pub fn task_seconds(machine: &Machine, tasks: &[TaskWork]) -> Estimate {
    let stretch = |pick: fn(&TaskWork) -> &Vec<NodeWork>| {
        let all: Vec<&NodeWork> = tasks.iter().flat_map(|t| pick(t).iter()).collect();
        cpu_seconds(machine, &all)
    };
    let busiest = tasks.iter().map(TaskWork::busiest_link).fold(0.0, f64::max);
    // An idle shaped link (tbf) lets its bucket, `burst_bytes`, through at once.
    let network_s = (busiest - machine.burst_bytes).max(0.0) / machine.link_bps;
    let cpu_s = stretch(|t| &t.during);
    let serial_s = stretch(|t| &t.before) + stretch(|t| &t.after);
    // The deepest fill of the groups: hops, and seconds per hop.
    let (hops, hop_s) = tasks
        .iter()
        .map(|t| {
            let wait = (t.hop_bytes - machine.burst_bytes).max(0.0) / machine.link_bps;
            let work = cpu_seconds(machine, &[&t.hop_work]);
            (t.depth, wait + work + machine.latency_s)
        })
        .fold(
            (0, 0.0),
            |a, b| {
                if b.0 as f64 * b.1 > a.0 as f64 * a.1 {
                    b
                } else {
                    a
                }
            },
        );
    let fill_s = hops as f64 * hop_s;
    let fixed_s = machine.task_s;
    let overlap_s = overlap(network_s, cpu_s);
    Estimate {
        seconds: fixed_s + serial_s + overlap_s + fill_s,
        network_s,
        cpu_s,
        overlap_s,
        serial_s,
        fill_s,
        hops,
        hop_s,
        fixed_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::GroupShape;
    use crate::work::encode;
    use eckpt_coding::{Layout, Topology};

    const MIB: u64 = 1 << 20;

    fn pipeline(k: usize, d: u64, chunk: u64) -> TaskWork {
        encode(
            Layout::Dedicated,
            Topology::Pipeline,
            GroupShape { k, m: 2 },
            d,
            chunk,
        )
    }

    #[test]
    fn a_fast_cpu_leaves_the_link_as_the_limit() {
        let mut machine = Machine::reference(1e9);
        machine.cpu = Cpu {
            message_s: 0.0,
            link_byte_s: 0.0,
            gf_byte_s: 0.0,
            read_byte_s: 0.0,
            write_byte_s: 0.0,
            scan_byte_s: 0.0,
            store_byte_s: 0.0,
            chain_block_s: 0.0,
            round_s: 0.0,
        };
        machine.latency_s = 0.0;
        machine.task_s = 0.0;
        let d = 64 * MIB;
        let e = task_seconds(&machine, &[pipeline(4, d, MIB)]);
        let link = 2.0 * d as f64 / machine.link_bps;
        assert_eq!(e.network_s, link, "m·D over the link");
        assert_eq!(e.bound(), "network");
        let fill = 4.0 * 2.0 * MIB as f64 / machine.link_bps;
        assert!((e.seconds - link - fill).abs() < 1e-9, "plus k hops of m chunks");
    }

    #[test]
    fn the_terms_add_up_to_the_total_and_the_largest_is_the_bound() {
        let machine = Machine::reference(100e9);
        for (k, d, chunk) in [(4, 64 * MIB, MIB), (254, MIB, MIB), (30, 16 * MIB, 64 << 10)] {
            let e = task_seconds(&machine, &[pipeline(k, d, chunk)]);
            let sum = e.fixed_s + e.serial_s + e.overlap_s + e.fill_s;
            assert!((e.seconds - sum).abs() <= 1e-12 * e.seconds, "{e:?}");
            assert_eq!(e.overlap_s, overlap(e.network_s, e.cpu_s));
            assert!((e.fill_s - e.hops as f64 * e.hop_s).abs() <= 1e-15, "{e:?}");
            assert_eq!(e.hops, k, "a pipeline's first row crosses its k sources");
        }
        // 254 hops of a 1 MiB message for 1 MiB of data: filling the pipeline is the time.
        let deep = task_seconds(&machine, &[pipeline(254, MIB, MIB)]);
        assert_eq!(deep.bound(), "fill", "{deep:?}");
        assert!(deep.fill_s > deep.overlap_s);
        let wide = task_seconds(&machine, &[pipeline(4, 64 * MIB, 64 << 10)]);
        assert_eq!(wide.bound(), "cpu", "{wide:?}");
    }

    #[test]
    fn a_shaped_link_lets_its_burst_through_at_once() {
        let mut machine = Machine::reference(1e8);
        let d = 64 << 10;
        let link = |m: &Machine| task_seconds(m, &[pipeline(4, d, 64 << 10)]).network_s;
        assert_eq!(
            link(&machine),
            2.0 * d as f64 / machine.link_bps,
            "m·D, no bucket"
        );
        machine.burst_bytes = (d / 2) as f64;
        let excess = (2 * d - d / 2) as f64 / machine.link_bps;
        assert!(
            (link(&machine) - excess).abs() < 1e-12,
            "only bytes beyond the bucket wait"
        );
        machine.burst_bytes = (4 * d) as f64;
        assert_eq!(link(&machine), 0.0, "an update smaller than the bucket");
    }

    #[test]
    fn overlap_lies_between_the_larger_and_the_sum() {
        assert_eq!(overlap(2.0, 0.0), 2.0);
        assert_eq!(overlap(0.0, 0.0), 0.0);
        for (a, b) in [(1.0, 1.0), (1.0, 0.3), (0.2, 5.0), (1e-9, 1e-9)] {
            let o = overlap(a, b);
            assert!(o >= a.max(b) && o <= a + b, "{a} {b}: {o}");
            assert_eq!(o, overlap(b, a));
        }
        assert!(overlap(1.0, 0.2) < 1.003, "a small side is hidden");
    }

    #[test]
    fn shared_cores_make_more_nodes_slower_and_own_hosts_do_not() {
        let d = 32 * MIB;
        let own = Machine::reference(1e9);
        let shared = own.emulated(1e9, 2.0);
        let t = |m: &Machine, k| task_seconds(m, &[pipeline(k, d, 64 << 10)]).seconds;
        assert!(t(&shared, 30) > 1.5 * t(&shared, 4), "32 nodes on 2 cores");
        assert!(
            t(&own, 30) < 1.1 * t(&own, 4),
            "weak scaling on hosts of their own"
        );
    }
}
