//! The control plane's costs as the cluster grows: what the coordinator and the nodes' calls
//! to it add to every epoch (from the ranks' checkpoint calls to the commit) and to every
//! recovery (noticing the loss, planning the rebuild and committing it).
//!
//! Each is a fixed part plus a part per node. Linear, because the coordinator is one task
//! that handles every node's calls of an epoch — a rank's open and report, an agent's task
//! report, the commit — one after another, at a cost per node that grows little with the
//! node count (`eckpt bench control`: 0.27–0.31 ms of its CPU per node and epoch at 64 and
//! 256 nodes, 0.48 ms at 1,024, on 2 cores every agent shares; docs/PERFORMANCE.md), while
//! what does not depend on it — round trips, the journal's writes — is the fixed part. A cost
//! that grew faster would be a bug in the coordinator to fix (that document lists the
//! quadratic ones fixed), not a shape for the model to follow.
//!
//! The coordinator's per-node work is serial wherever the nodes run. The nodes' own part —
//! each agent's and rank's calls, connections and hand-offs, beyond the rounds an encode
//! already counts ([`crate::work::NodeWork::rounds`]) — runs in parallel on hosts of their
//! own, and adds up over the cores of one shared host, as the encode's CPU work does
//! ([`crate::time::cpu_seconds`]). The coordinator's turns and the nodes' alternate within an
//! epoch (the ranks report, the coordinator plans, the agents code and report, the
//! coordinator commits), so on a shared host the two add rather than overlap.
//!
//! [`fit`] makes these costs of `eckpt bench control`'s measurements (clusters of tiny images
//! at two or more sizes): `eckpt model --calibrate` runs them on the calibrated cluster's host.

use serde::{Deserialize, Serialize};

use crate::machine::{Hosts, Machine};
use crate::predict::predict;
use crate::scenario::Scenario;
use crate::ModelError;

/// Seconds that grow with the cluster: `fixed_s + per_node_s × nodes`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Linear {
    /// Seconds whatever the node count.
    pub fixed_s: f64,
    /// Seconds per node.
    pub per_node_s: f64,
}

impl Linear {
    /// Seconds at `nodes` nodes.
    pub fn at(&self, nodes: usize) -> f64 {
        self.fixed_s + self.per_node_s * nodes as f64
    }

    /// The least-squares line through `(nodes, seconds)` points of at least two node counts,
    /// kept non-negative: a slope below 0 (noise: nothing gets cheaper with more nodes) gives
    /// the flat mean, an intercept below 0 the line through the origin.
    fn through(points: &[(f64, f64)]) -> Linear {
        let n = points.len() as f64;
        let (mx, my) = (
            points.iter().map(|p| p.0).sum::<f64>() / n,
            points.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let slope = sxy / sxx;
        if slope <= 0.0 {
            return Linear {
                fixed_s: my.max(0.0),
                per_node_s: 0.0,
            };
        }
        if my - slope * mx < 0.0 {
            let through_origin =
                points.iter().map(|p| p.0 * p.1).sum::<f64>() / points.iter().map(|p| p.0 * p.0).sum::<f64>();
            return Linear {
                fixed_s: 0.0,
                per_node_s: through_origin,
            };
        }
        Linear {
            fixed_s: my - slope * mx,
            per_node_s: slope,
        }
    }
}

/// What the control plane costs on a machine.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Control {
    /// Seconds of an epoch's commit that do not grow with the nodes, beyond its encode: the
    /// round trips of the ranks' calls and the coordinator's journal writes.
    pub commit_fixed_s: f64,
    /// The coordinator's CPU seconds per node and epoch: serial wherever the nodes run.
    pub coordinator_node_s: f64,
    /// CPU seconds per node and epoch of the node's own calls to the coordinator (its agent's
    /// and its ranks'), beyond the rounds the encode counts: in parallel on hosts of their
    /// own, added over the cores of a shared host.
    pub node_s: f64,
    /// Seconds from a lost node's last sign of life reaching the liveness period until the
    /// coordinator counts it dead and can act (measured on nodes killed whole, whose closed
    /// sockets it notices at once).
    pub detect: Linear,
    /// Seconds of a recovery outside its decode and re-encode: the coordinator's planning and
    /// the journal commits of the rebuilt placement.
    pub plan: Linear,
}

impl Control {
    /// `eckpt bench control --nodes N --epochs 6 --kill 1 --rest 0 --json` at 64, 256 and
    /// 1,024 nodes (k=4, m=2, full; 16 KiB per rank) on the machine this project is developed
    /// on (2 cores; the coordinator, every agent and every rank on them), fitted by [`fit`]
    /// on [`Machine::reference`] emulated on those 2 cores: the runs are listed in this
    /// module's tests (medians of three runs), which hold these figures to their fit. The
    /// coordinator took 0.27–0.48 ms of CPU per node and epoch, the agents and ranks 1.3–2.7 ms,
    /// and at 1,024 nodes an epoch of tiny images committed in 1.95 s; the detection and
    /// planning slopes are this one host's (its cores shared by every agent): an upper bound
    /// for nodes on hosts of their own. Its stores and journal were on tmpfs, so the fixed
    /// part of a commit fitted to 0: a journal on a disk adds its fsyncs.
    pub fn reference() -> Control {
        Control {
            commit_fixed_s: 0.0,
            coordinator_node_s: 0.43e-3,
            node_s: 1.92e-3,
            detect: Linear {
                fixed_s: 4.3e-3,
                per_node_s: 42e-6,
            },
            plan: Linear {
                fixed_s: 0.0,
                per_node_s: 0.40e-3,
            },
        }
    }

    /// An epoch's commit beyond its encode on `hosts`, as a fixed part and a part per node:
    /// the coordinator's CPU per node, plus the nodes' own calls — one node's worth on hosts
    /// of their own, every node's over the cores of a shared host.
    pub fn commit(&self, hosts: Hosts) -> Linear {
        match hosts {
            Hosts::PerNode => Linear {
                fixed_s: self.commit_fixed_s + self.node_s,
                per_node_s: self.coordinator_node_s,
            },
            Hosts::Shared { cores } => Linear {
                fixed_s: self.commit_fixed_s,
                per_node_s: self.coordinator_node_s + self.node_s / cores,
            },
        }
    }

    /// Every figure as a name and a value, for validation.
    pub(crate) fn figures(&self) -> [(&'static str, f64); 7] {
        [
            ("commit fixed cost", self.commit_fixed_s),
            ("coordinator cost per node", self.coordinator_node_s),
            ("node control cost", self.node_s),
            ("detection delay", self.detect.fixed_s),
            ("detection delay per node", self.detect.per_node_s),
            ("planning time", self.plan.fixed_s),
            ("planning time per node", self.plan.per_node_s),
        ]
    }
}

/// One run of `eckpt bench control`: a cluster of tiny images, its epochs and a loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ControlRun {
    /// The cluster and its ranks' images (their nodes are the run's node count).
    pub scenario: Scenario,
    /// From the ranks' checkpoint calls to the commit they waited for (median epoch).
    pub commit_s: f64,
    /// The coordinator's CPU seconds per epoch.
    pub coordinator_cpu_s: f64,
    /// The agents' and ranks' CPU seconds per epoch, every node's together.
    pub nodes_cpu_s: f64,
    /// From killing a node until the coordinator counted it dead.
    pub detect_s: f64,
    /// A recovery's seconds outside its decode and re-encode.
    pub plan_s: f64,
}

/// The control plane's costs from `runs` (at least two node counts) on `machine`, the
/// machine they ran on: CPU per node over every run's nodes together; from each commit, the
/// model's own encode of the run's epoch on `machine` and its nodes' CPU (so that what the
/// encode counts is not counted twice); detection and planning as lines through the runs.
pub fn fit(machine: &Machine, runs: &[ControlRun]) -> Result<Control, ModelError> {
    let mut sizes: Vec<usize> = runs.iter().map(|r| r.scenario.nodes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.len() < 2 {
        return Err(ModelError::Invalid(format!(
            "fitting the control plane's costs needs runs at two node counts or more, not {sizes:?}"
        )));
    }
    let epochs = runs
        .iter()
        .map(|r| Ok((r, predict(&r.scenario, machine)?.next)))
        .collect::<Result<Vec<_>, ModelError>>()?;
    let nodes: f64 = runs.iter().map(|r| r.scenario.nodes as f64).sum();
    let coordinator_node_s = runs.iter().map(|r| r.coordinator_cpu_s).sum::<f64>() / nodes;
    let node_s = epochs
        .iter()
        .map(|(r, e)| (r.nodes_cpu_s - r.scenario.nodes as f64 * e.agent_cpu_seconds).max(0.0))
        .sum::<f64>()
        / nodes;
    let per_node = Control {
        commit_fixed_s: 0.0,
        coordinator_node_s,
        node_s,
        detect: Linear::default(),
        plan: Linear::default(),
    }
    .commit(machine.hosts);
    let commit_fixed_s = (epochs
        .iter()
        .map(|(r, e)| r.commit_s - e.encode_seconds - per_node.at(r.scenario.nodes))
        .sum::<f64>()
        / runs.len() as f64)
        .max(0.0);
    let points = |f: fn(&ControlRun) -> f64| -> Vec<(f64, f64)> {
        runs.iter().map(|r| (r.scenario.nodes as f64, f(r))).collect()
    };
    let control = Control {
        commit_fixed_s,
        coordinator_node_s,
        node_s,
        detect: Linear::through(&points(|r| r.detect_s)),
        plan: Linear::through(&points(|r| r.plan_s)),
    };
    match control.figures().iter().find(|(_, v)| !v.is_finite()) {
        Some((what, v)) => Err(ModelError::Invalid(format!(
            "the control plane's {what} fitted to {v}: a run measured something impossible"
        ))),
        None => Ok(control),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::{CodingConfig, Mode};

    /// The runs behind [`Control::reference`]: `eckpt bench control --nodes N --epochs 6
    /// --kill 1 --rest 0 --json`, (nodes, commit_seconds, coordinator CPU µs per node and
    /// epoch, agents' and ranks' CPU µs per node and epoch, detect_seconds,
    /// recover_plan_and_commit_seconds).
    const REFERENCE_RUNS: [(usize, f64, f64, f64, f64, f64); 3] = [
        (64, 0.0539, 312.5, 1250.0, 0.00472, 0.01771),
        (256, 0.2761, 273.4, 1484.4, 0.01789, 0.0906),
        (1024, 1.951, 478.5, 2666.0, 0.04692, 0.41807),
    ];

    fn runs(measured: &[(usize, f64, f64, f64, f64, f64)]) -> Vec<ControlRun> {
        measured
            .iter()
            .map(
                |&(nodes, commit_s, coordinator_us, nodes_us, detect_s, plan_s)| ControlRun {
                    scenario: Scenario {
                        nodes,
                        coding: CodingConfig {
                            k: 4,
                            m: 2,
                            mode: Mode::Full,
                            ..CodingConfig::default()
                        },
                        size_per_node: 16 << 10,
                        dirty_fraction: 0.25,
                    },
                    commit_s,
                    coordinator_cpu_s: coordinator_us * 1e-6 * nodes as f64,
                    nodes_cpu_s: nodes_us * 1e-6 * nodes as f64,
                    detect_s,
                    plan_s,
                },
            )
            .collect()
    }

    /// Within 5 % (or a microsecond): the reference's figures are rounded.
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= (0.05 * a.abs().max(b.abs())).max(1e-6)
    }

    #[test]
    fn the_reference_is_the_fit_of_its_measurement() {
        let on = Machine::reference(1e9).emulated(1e9, 2.0);
        let fitted = fit(&on, &runs(&REFERENCE_RUNS)).unwrap();
        let reference = Control::reference();
        for ((what, f), (_, r)) in fitted.figures().iter().zip(reference.figures()) {
            assert!(close(*f, r), "{what}: fitted {f}, reference {r}");
        }
    }

    #[test]
    fn a_line_is_fitted_and_kept_non_negative() {
        let exact = Linear::through(&[(10.0, 2.0), (20.0, 3.0), (40.0, 5.0)]);
        assert!((exact.fixed_s - 1.0).abs() < 1e-12 && (exact.per_node_s - 0.1).abs() < 1e-12);
        assert_eq!(exact.at(100), exact.fixed_s + 100.0 * exact.per_node_s);
        let falling = Linear::through(&[(10.0, 3.0), (20.0, 1.0)]);
        assert_eq!((falling.fixed_s, falling.per_node_s), (2.0, 0.0), "noise: flat");
        let steep = Linear::through(&[(10.0, 0.5), (20.0, 2.0)]);
        assert_eq!(steep.fixed_s, 0.0, "no negative fixed part");
        assert!((steep.at(20) - 2.0).abs() < 0.5, "{steep:?}");
    }

    #[test]
    fn the_nodes_calls_add_up_on_a_shared_host_only() {
        let c = Control::reference();
        let own = c.commit(Hosts::PerNode);
        assert_eq!(own.per_node_s, c.coordinator_node_s);
        assert_eq!(own.fixed_s, c.commit_fixed_s + c.node_s);
        let shared = c.commit(Hosts::Shared { cores: 4.0 });
        assert_eq!(shared.per_node_s, c.coordinator_node_s + c.node_s / 4.0);
        assert!(shared.at(4096) > own.at(4096));
    }

    #[test]
    fn one_node_count_is_not_enough_to_fit() {
        let on = Machine::reference(1e9).emulated(1e9, 2.0);
        let one = runs(&REFERENCE_RUNS[..1]);
        let twice = [one[0], one[0]];
        assert!(fit(&on, &twice).is_err());
    }
}
