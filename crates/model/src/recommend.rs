//! Which configuration to run: every topology, layout, transfer unit, incremental mode
//! and group size that meets the constraints is predicted, and the one that leaves the job
//! the most useful time at its best interval wins (ties: the cheaper epoch).

use eckpt_coding::{CodingConfig, Layout, Mode, Topology};
use serde::{Deserialize, Serialize};

use crate::interval::{interval, Interval};
use crate::machine::Machine;
use crate::predict::predict;
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
}

/// One candidate configuration and what it is predicted to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The configuration.
    pub coding: CodingConfig,
    /// A later epoch's encode (seconds) and what it is.
    pub encode_seconds: f64,
    /// `full`, `update` or `stripe`.
    pub epoch_kind: String,
    /// Recovery from `m` losses in a group (seconds).
    pub recovery_seconds: f64,
    /// Parity bytes per byte of data, a stripe chain included.
    pub overhead: f64,
    /// The interval and the efficiency it gives.
    pub interval: Interval,
}

/// Every configuration meeting `constraints` for the nodes, sizes and dirty pages of
/// `base`, best first.
pub fn recommend(
    base: &Scenario,
    machine: &Machine,
    constraints: &Constraints,
) -> Result<Vec<Choice>, ModelError> {
    let m = constraints.m;
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
    for k in group_sizes(smallest_k, largest_k) {
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
                            p.next.encode_seconds,
                            p.recovery.seconds,
                            job_mtbf,
                        );
                        choices.push(Choice {
                            coding,
                            encode_seconds: p.next.encode_seconds,
                            epoch_kind: p.next.kind,
                            recovery_seconds: p.recovery.seconds,
                            overhead: p.storage.parity_per_data_chain,
                            interval: advice,
                        });
                    }
                }
            }
        }
    }
    choices.retain(|c| c.overhead <= constraints.max_overhead * (1.0 + 1e-9));
    choices.sort_by(|a, b| {
        b.interval
            .efficiency
            .total_cmp(&a.interval.efficiency)
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
        };
        let err = recommend(&base(8, 0.01), &Machine::reference(1e9), &tight).unwrap_err();
        assert!(err.to_string().contains("needs k ≥ 40"), "{err}");
    }

    #[test]
    fn group_sizes_span_the_range() {
        assert_eq!(group_sizes(3, 30), vec![3, 4, 8, 16, 30]);
        assert_eq!(group_sizes(4, 4), vec![4]);
    }
}
