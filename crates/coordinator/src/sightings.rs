//! When the coordinator last saw each agent with a session, kept in time order as well as
//! by node. Liveness asks two things all the time: when a given node was last seen, and when
//! *any* node was (a coordinator that hears nobody suspects its own link, `sessions.rs`).
//! Every heartbeat asks the second; answered by a scan of the node table, a cluster of N
//! nodes paid O(N) per heartbeat and O(N²) per heartbeat period. Here each is O(log N), and
//! the nodes seen within a window come out of one range.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::time::Duration;

use tokio::time::Instant;

/// Each node's last sighting, by node and by time.
#[derive(Debug, Default)]
pub(super) struct Sightings {
    by_node: BTreeMap<String, Instant>,
    by_time: BTreeSet<(Instant, String)>,
}

impl Sightings {
    /// Records that `node` was last seen `at` (which may be later than now: set ahead to
    /// give it its reconnection time).
    pub fn set(&mut self, node: &str, at: Instant) {
        if let Some(before) = self.by_node.insert(node.to_string(), at) {
            self.by_time.remove(&(before, node.to_string()));
        }
        self.by_time.insert((at, node.to_string()));
    }

    /// Forgets `node`.
    pub fn remove(&mut self, node: &str) {
        if let Some(before) = self.by_node.remove(node) {
            self.by_time.remove(&(before, node.to_string()));
        }
    }

    /// When `node` was last seen.
    pub fn get(&self, node: &str) -> Option<Instant> {
        self.by_node.get(node).copied()
    }

    /// The latest sighting of any node.
    pub fn latest(&self) -> Option<Instant> {
        self.by_time.last().map(|(at, _)| *at)
    }

    /// The nodes last seen less than `window` before `of`, in time order.
    pub fn seen_within(&self, window: Duration, of: Instant) -> impl Iterator<Item = &String> {
        let after = of.checked_sub(window);
        let from = match after {
            Some(after) => Bound::Excluded((after, String::new())),
            None => Bound::Unbounded,
        };
        self.by_time
            .range((from, Bound::Unbounded))
            .filter(move |(at, _)| after.is_none_or(|after| *at > after))
            .map(|(_, node)| node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_and_each_nodes_sighting_follow_every_change() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut seen = Sightings::default();
        assert_eq!(seen.latest(), None);
        seen.set("n0", at(10));
        seen.set("n1", at(30));
        seen.set("n2", at(20));
        assert_eq!(seen.latest(), Some(at(30)));
        seen.set("n1", at(5));
        assert_eq!(
            seen.latest(),
            Some(at(20)),
            "a node seen earlier than before moves back"
        );
        assert_eq!(seen.get("n1"), Some(at(5)));
        seen.remove("n2");
        assert_eq!(seen.latest(), Some(at(10)));
        assert_eq!(seen.get("n2"), None);
        seen.set("n3", at(10));
        let within: Vec<_> = seen.seen_within(Duration::from_millis(5), at(10)).collect();
        assert_eq!(
            within,
            ["n0", "n3"],
            "seen less than 5 ms before 10 ms, not at 5 ms"
        );
        assert_eq!(seen.seen_within(Duration::from_secs(1 << 40), at(10)).count(), 3);
        assert_eq!(seen.by_time.len(), seen.by_node.len(), "one entry per node");
    }
}
