//! Which configuration to run: every topology, layout, transfer unit, incremental mode
//! and group size that meets the constraints — parity overhead, and the risk of a group
//! losing more than `m` members before redundancy is restored ([`crate::risk`]) — is
//! predicted, and the one that leaves the job the most useful time at its best interval
//! wins (ties: the smaller risk, then the cheaper epoch).

use eckpt_coding::{CodingConfig, Layout, Mode, Topology};
use serde::{Deserialize, Serialize};

use crate::interval::{interval, Interval};
use crate::machine::Machine;
use crate::predict::predict;
use crate::risk::{loss_risk, LossRisk};
use crate::scenario::Scenario;
use crate::ModelError;

/// Transfer units tried (SCore's lesson: not too small; the pipeline's fill: not too big).
pub const CHUNKS: [u32; 6] = [16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20];

/// What the configuration must satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Constraints {
    /// Losses per group that must be survivable (`m`).
    pub m: usize,
    /// Most parity bytes per byte of rank data (`m / k`).
    pub max_overhead: f64,
    /// A node's mean time between failures (seconds).
    pub node_mtbf_s: f64,
    /// Cores of a node its ranks keep busy and its agent shares (0: the agent has cores of
    /// its own): see [`crate::predict::Prediction::job_checkpoint_seconds`].
    pub rank_cores: f64,
    /// Highest acceptable probability that some group loses more than `m` members within
    /// the window after a loss, over `period_s` ([`crate::risk`];
    /// [`crate::risk::DEFAULT_MAX_LOSS_RISK`] per day by default: why, there).
    pub max_loss_risk: f64,
    /// The period that probability is over (seconds): the job's length, or a day.
    pub period_s: f64,
}

/// One candidate configuration and what it is predicted to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The configuration.
    pub coding: CodingConfig,
    /// A later epoch's encode (seconds) and what it is.
    pub encode_seconds: f64,
    /// A later epoch from the ranks' checkpoint calls to its commit: the encode and the
    /// control plane's part (seconds).
    pub epoch_seconds: f64,
    /// `full`, `update` or `stripe`.
    pub epoch_kind: String,
    /// Recovery from `m` losses in a group (seconds).
    pub recovery_seconds: f64,
    /// Parity bytes per byte of data, a stripe chain included.
    pub overhead: f64,
    /// The interval and the efficiency it gives.
    pub interval: Interval,
    /// The risk of losing more than `m` members of a group within the recovery window.
    pub loss_risk: LossRisk,
}

/// Every configuration meeting `constraints` for the nodes, sizes and dirty pages of
/// `base`, best first.
pub fn recommend(
    base: &Scenario,
    machine: &Machine,
    constraints: &Constraints,
) -> Result<Vec<Choice>, ModelError> {
    recommend_with_progress(base, machine, constraints, |_, _| {})
}

/// [`recommend`], calling `progress(done, total)` after each configuration predicted.
pub fn recommend_with_progress(
    base: &Scenario,
    machine: &Machine,
    constraints: &Constraints,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<Choice>, ModelError> {
    let m = constraints.m;
    let risk_ok = |r: f64| r.is_finite() && r > 0.0;
    if !(risk_ok(constraints.max_loss_risk)
        && risk_ok(constraints.period_s)
        && risk_ok(constraints.node_mtbf_s))
    {
        return Err(ModelError::Invalid(format!(
            "the loss-risk bound {}, its period {} s and the node MTBF {} s must be positive",
            constraints.max_loss_risk, constraints.period_s, constraints.node_mtbf_s
        )));
    }
    if m == 0 || m >= base.nodes {
        return Err(ModelError::Invalid(format!(
            "surviving {m} losses per group needs m ≥ 1 and more than m nodes ({} given)",
            base.nodes
        )));
    }
    let smallest_k = (m as f64 / constraints.max_overhead).ceil().max(1.0) as usize;
    let largest_k = (base.nodes - m).min(eckpt_codec::MAX_SHARDS.saturating_sub(m));
    if smallest_k > largest_k {
        return Err(ModelError::Invalid(format!(
            "parity overhead ≤ {} with m={m} needs k ≥ {smallest_k}, but {} nodes allow k ≤ {largest_k}",
            constraints.max_overhead, base.nodes
        )));
    }
    let mut choices = Vec::new();
    let sizes = group_sizes(smallest_k, largest_k);
    let total = sizes.len() * Mode::ALL.len() * Layout::ALL.len() * Topology::ALL.len() * CHUNKS.len();
    let mut done = 0;
    for k in sizes {
        for mode in Mode::ALL.iter().copied() {
            for layout in Layout::ALL.iter().copied() {
                for topology in Topology::ALL.iter().copied() {
                    for chunk in CHUNKS {
                        let coding = CodingConfig {
                            k,
                            m,
                            mode,
                            layout,
                            topology,
                            chunk,
                            ..base.coding
                        };
                        let scenario = Scenario { coding, ..*base };
                        let p = predict(&scenario, machine)?;
                        let job_mtbf = constraints.node_mtbf_s / base.nodes as f64;
                        let advice = interval(
                            p.job_checkpoint_seconds(constraints.rank_cores),
                            p.next.seconds,
                            p.recovery.seconds,
                            job_mtbf,
                        );
                        let risk = loss_risk(
                            &p.groups,
                            constraints.node_mtbf_s,
                            p.recovery.seconds,
                            constraints.period_s,
                        );
                        choices.push(Choice {
                            coding,
                            encode_seconds: p.next.encode_seconds,
                            epoch_seconds: p.next.seconds,
                            epoch_kind: p.next.kind,
                            recovery_seconds: p.recovery.seconds,
                            overhead: p.storage.parity_per_data_chain,
                            interval: advice,
                            loss_risk: risk,
                        });
                        done += 1;
                        progress(done, total);
                    }
                }
            }
        }
    }
    choices.retain(|c| c.overhead <= constraints.max_overhead * (1.0 + 1e-9));
    let safest = choices
        .iter()
        .min_by(|a, b| a.loss_risk.probability.total_cmp(&b.loss_risk.probability))
        .map(|c| (c.coding.k, c.loss_risk));
    choices.retain(|c| c.loss_risk.probability <= constraints.max_loss_risk);
    if let (true, Some((k, risk))) = (choices.is_empty(), safest) {
        return Err(ModelError::Invalid(format!(
            "no configuration keeps the risk of losing more than m={m} nodes of a group below {:e} \
             {} (the least is {:.2e}, k={k}, exposed {:.0} s after each loss): \
             raise --m, or accept more risk with --max-loss-risk",
            constraints.max_loss_risk,
            match constraints.period_s / crate::risk::DAY_S {
                d if (d - 1.0).abs() < 1e-9 => "per job-day".to_string(),
                d => format!("over {d:.1} days"),
            },
            risk.probability,
            risk.window_s
        )));
    }
    choices.sort_by(|a, b| {
        b.interval
            .efficiency
            .total_cmp(&a.interval.efficiency)
            .then(a.loss_risk.probability.total_cmp(&b.loss_risk.probability))
            .then(a.encode_seconds.total_cmp(&b.encode_seconds))
    });
    Ok(choices)
}

/// Group sizes worth trying between `lo` and `hi`: the smallest (fastest recovery), powers
/// of two, and the largest (least overhead).
fn group_sizes(lo: usize, hi: usize) -> Vec<usize> {
    let mut ks: Vec<usize> = std::iter::successors(Some(1usize), |k| k.checked_mul(2))
        .take_while(|&k| k <= hi)
        .filter(|&k| k >= lo)
        .chain([lo, hi])
        .collect();
    ks.sort_unstable();
    ks.dedup();
    ks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::risk::{DAY_S, DEFAULT_MAX_LOSS_RISK};

    fn base(nodes: usize, dirty: f64) -> Scenario {
        Scenario {
            nodes,
            coding: CodingConfig::default(),
            size_per_node: 1 << 30,
            dirty_fraction: dirty,
        }
    }

    const YEAR: f64 = 365.0 * 86_400.0;

    #[test]
    fn choices_meet_the_constraints_and_come_best_first() {
        let c = Constraints {
            m: 2,
            max_overhead: 0.5,
            node_mtbf_s: 5.0 * YEAR,
            rank_cores: 16.0,
            max_loss_risk: DEFAULT_MAX_LOSS_RISK,
            period_s: DAY_S,
        };
        let choices = recommend(&base(16, 0.01), &Machine::reference(10e9), &c).unwrap();
        assert!(!choices.is_empty());
        for w in choices.windows(2) {
            assert!(w[0].interval.efficiency >= w[1].interval.efficiency);
        }
        for ch in &choices {
            assert_eq!(ch.coding.m, 2);
            assert!(ch.coding.k >= 4 && ch.coding.k <= 14, "{}", ch.coding.k);
            assert!(ch.overhead <= 0.5 + 1e-9);
        }
        let best = &choices[0];
        assert_ne!(
            best.coding.mode,
            Mode::Full,
            "few dirty pages: an incremental mode wins"
        );
        assert!(
            best.coding.chunk >= 64 << 10,
            "tiny transfer units waste the link"
        );
    }

    #[test]
    fn impossible_constraints_say_why() {
        let tight = Constraints {
            m: 2,
            max_overhead: 0.05,
            node_mtbf_s: YEAR,
            rank_cores: 0.0,
            max_loss_risk: DEFAULT_MAX_LOSS_RISK,
            period_s: DAY_S,
        };
        let err = recommend(&base(8, 0.01), &Machine::reference(1e9), &tight).unwrap_err();
        assert!(err.to_string().contains("needs k ≥ 40"), "{err}");
    }

    /// 4,096 nodes of 16 GiB on 100 Gbit/s links whose nodes fail once a year: groups of
    /// 256 (k = 254, the least parity) stay exposed 1.5 minutes after each loss, long enough
    /// for two more of their members to fail about 3 times in a million days — and without
    /// the bound they rank among the best, since the binomial risk costs no efficiency.
    #[test]
    fn the_largest_groups_lose_to_the_risk_of_losing_more_than_m() {
        let scenario = Scenario {
            nodes: 4096,
            coding: CodingConfig::default(),
            size_per_node: 16 << 30,
            dirty_fraction: 0.01,
        };
        let machine = Machine::reference(100e9);
        let c = Constraints {
            m: 2,
            max_overhead: 0.5,
            node_mtbf_s: YEAR,
            rank_cores: 32.0,
            max_loss_risk: DEFAULT_MAX_LOSS_RISK,
            period_s: DAY_S,
        };
        let (mut calls, mut last) = (0, (0, 0));
        let choices = recommend_with_progress(&scenario, &machine, &c, |done, total| {
            calls += 1;
            last = (done, total);
        })
        .unwrap();
        assert_eq!(last.0, last.1, "progress ends at its total");
        assert_eq!(calls, last.1, "once per configuration");
        assert!(!choices.is_empty());
        for ch in &choices {
            assert!(ch.loss_risk.probability <= DEFAULT_MAX_LOSS_RISK, "{ch:?}");
            assert!(ch.coding.k < 254, "{ch:?}");
            assert_eq!(
                ch.loss_risk.window_s, ch.recovery_seconds,
                "exposed for the recovery"
            );
        }
        let unbounded = recommend(
            &scenario,
            &machine,
            &Constraints {
                max_loss_risk: 1.0,
                ..c
            },
        )
        .unwrap();
        let k254 = unbounded
            .iter()
            .find(|ch| ch.coding.k == 254)
            .expect("k = 254 is tried");
        assert!(
            k254.loss_risk.probability > DEFAULT_MAX_LOSS_RISK,
            "{:?}",
            k254.loss_risk
        );
        assert!(
            unbounded.iter().take(10).any(|ch| ch.coding.k == 254),
            "without the bound k = 254 is among the best: the bound is what removes it"
        );
        // Nodes that fail every month: no group of m = 2 is safe enough; the refusal says
        // what the least risk was and what to change.
        let err = recommend(
            &scenario,
            &machine,
            &Constraints {
                node_mtbf_s: 30.0 * DAY_S,
                ..c
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("raise --m"), "{err}");
    }

    #[test]
    fn group_sizes_span_the_range() {
        assert_eq!(group_sizes(3, 30), vec![3, 4, 8, 16, 30]);
        assert_eq!(group_sizes(4, 4), vec![4]);
    }
}
