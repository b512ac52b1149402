//! When each node was out of the coordinator's reach on its own side: its host down or
//! frozen, or its link to the coordinator cut or stalled. A node the coordinator has rebuilt
//! elsewhere must have been out of reach so lately (or hold data a bit flip or a torn write
//! damaged): one that was out of reach only because the coordinator itself was frozen or
//! cut off from everyone was not lost, and a coordinator's own silence must cost no node
//! (`sessions.rs` in the coordinator: `end_silence`, `awaited`).

use std::collections::BTreeMap;
use std::time::Duration;

/// Each node's own outages, from and until (virtual time).
#[derive(Default)]
pub struct Outages {
    by_node: BTreeMap<String, Vec<(Duration, Duration)>>,
}

impl Outages {
    /// Notes `node` out of reach on its own side from `from` for `lasting` (`Duration::MAX`:
    /// for good).
    pub fn note(&mut self, node: &str, from: Duration, lasting: Duration) {
        let until = from.saturating_add(lasting);
        self.by_node
            .entry(node.to_string())
            .or_default()
            .push((from, until));
    }

    /// Whether `node` was out of reach on its own side at some time in the `within` before
    /// `now`, or is now.
    pub fn lately(&self, node: &str, now: Duration, within: Duration) -> bool {
        self.by_node.get(node).is_some_and(|outages| {
            outages
                .iter()
                .any(|&(from, until)| from <= now && until.saturating_add(within) >= now)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_was_out_of_reach_lately_only_within_the_while_after_its_outage() {
        let s = Duration::from_secs;
        let mut outages = Outages::default();
        outages.note("n0", s(10), s(2));
        outages.note("n1", s(5), Duration::MAX);
        assert!(!outages.lately("n0", s(9), s(5)), "not before it began");
        assert!(outages.lately("n0", s(11), s(0)), "while it lasts");
        assert!(outages.lately("n0", s(17), s(5)), "within the while after it");
        assert!(!outages.lately("n0", s(18), s(5)), "not past it");
        assert!(outages.lately("n1", s(1_000_000), s(1)), "a node lost for good");
        assert!(!outages.lately("n2", s(11), s(100)), "a node never out of reach");
    }
}
