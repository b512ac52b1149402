//! What is predicted: how many nodes, how they code (the cluster's [`CodingConfig`]), how
//! much state each node checkpoints and how much of it changes between two checkpoints.

use eckpt_coding::geometry::Geometry;
use eckpt_coding::CodingConfig;
use serde::{Deserialize, Serialize};

use crate::ModelError;

/// The unit of dirty detection and of `update` records: a page, as the store keeps it.
pub const BLOCK: u64 = 4096;

/// One group's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupShape {
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
}

impl GroupShape {
    /// Members of the group.
    pub fn members(&self) -> usize {
        self.k + self.m
    }
}

/// A cluster, its coding and its job's checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Nodes that hold ranks or parity (spares excluded).
    pub nodes: usize,
    /// How the cluster codes (k, m, layout, topology, mode, transfer unit).
    pub coding: CodingConfig,
    /// Bytes of rank images on each data-holding node: the data shard `D` an encode codes.
    pub size_per_node: u64,
    /// Fraction of the `BLOCK`-sized pages a rank changes between two checkpoints,
    /// assumed scattered (each page equally likely): what decides how many chunks an
    /// `update` touches.
    pub dirty_fraction: f64,
}

impl Scenario {
    /// Refuses what the model cannot describe, with a one-line reason.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.coding
            .validate()
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        if self.nodes <= self.coding.m {
            return Err(ModelError::Invalid(format!(
                "{} nodes cannot hold a group with m={} parity shards and data",
                self.nodes, self.coding.m
            )));
        }
        if !(0.0..=1.0).contains(&self.dirty_fraction) {
            return Err(ModelError::Invalid(format!(
                "dirty fraction {} outside 0..=1",
                self.dirty_fraction
            )));
        }
        if self.size_per_node == 0 {
            return Err(ModelError::Invalid(
                "size per node must be at least one byte".into(),
            ));
        }
        Ok(())
    }

    /// The groups the coordinator forms from the nodes ([`eckpt_coding::policy::group_sizes`]:
    /// as many groups of `k + m` as fit, the remainder spread as extra data members, so `k`
    /// grows, never `m`).
    pub fn groups(&self) -> Vec<GroupShape> {
        let (k, m) = (self.coding.k, self.coding.m);
        eckpt_coding::policy::group_sizes(self.nodes, k, m)
            .into_iter()
            .map(|(k, _)| GroupShape { k, m })
            .collect()
    }

    /// Nodes holding rank data: every member in the rotated layout, the `k` data members
    /// of each group in the dedicated one.
    pub fn data_nodes(&self) -> usize {
        // Counted once per shape: thousands of nodes form hundreds of groups of one or two.
        let mut counted: Vec<(GroupShape, usize)> = Vec::new();
        self.groups()
            .iter()
            .map(|g| match counted.iter().find(|(shape, _)| shape == g) {
                Some((_, n)) => *n,
                None => {
                    let probe = Geometry::new(self.coding.layout, g.k, g.m, 1);
                    let n = (0..g.members()).filter(|&x| probe.holds_data(x)).count();
                    counted.push((*g, n));
                    n
                }
            })
            .sum()
    }

    /// Bytes a rank changes between two checkpoints, in whole pages.
    pub fn changed_per_node(&self) -> u64 {
        let pages = self.size_per_node.div_ceil(BLOCK) as f64;
        (pages * self.dirty_fraction).round() as u64 * BLOCK
    }

    /// Parity bytes stored per byte of rank data: `m / k` of the largest group (a stripe
    /// chain keeps more; see the prediction's storage figures).
    pub fn parity_per_data(&self) -> f64 {
        self.groups()
            .iter()
            .map(|g| g.m as f64 / g.k as f64)
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::Layout;

    fn scenario(nodes: usize, k: usize, m: usize) -> Scenario {
        Scenario {
            nodes,
            coding: CodingConfig {
                k,
                m,
                ..CodingConfig::default()
            },
            size_per_node: 64 << 20,
            dirty_fraction: 0.001,
        }
    }

    #[test]
    fn data_nodes_follow_the_layout() {
        let mut s = scenario(13, 4, 2);
        assert_eq!(s.groups().len(), 2);
        assert_eq!(s.data_nodes(), 13 - 4, "dedicated: all but the parity members");
        s.coding.layout = Layout::Rotated;
        assert_eq!(s.data_nodes(), 13, "rotated: every member holds data");
    }

    #[test]
    fn bad_scenarios_are_refused() {
        assert!(scenario(6, 4, 2).validate().is_ok());
        assert!(scenario(2, 4, 2).validate().is_err());
        let mut s = scenario(6, 4, 2);
        s.dirty_fraction = 1.5;
        assert!(s.validate().is_err());
        s.dirty_fraction = 0.1;
        s.size_per_node = 0;
        assert!(s.validate().is_err());
    }
}
