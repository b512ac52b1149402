//! Fault injection for tests and demos: `--kill-at 30:2,recovery:1` kills nodes (their
//! agent, their store, and every process of the job on them) right after an epoch commits,
//! or in the middle of a recovery. Which nodes is decided here, purely: nodes that host
//! ranks, all from one group while it has enough (so that `20:3` with m=2 loses three
//! members of one group — more than the code tolerates), preferring the group that already
//! lost members (so that a kill during a recovery adds to that group's losses).

use std::collections::BTreeSet;

use crate::placement::natural_key;

/// When a kill happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Right after this epoch of the run (or a later one) commits: the run's own count (its
    /// first epoch is 1), whatever number the cluster gives it.
    AfterEpoch(u64),
    /// In the middle of the next recovery (between its decode and its re-encode).
    DuringRecovery,
}

/// One `--kill-at` item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    /// When.
    pub trigger: Trigger,
    /// How many nodes.
    pub count: usize,
}

/// The kills still to come.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillPlan {
    kills: Vec<Kill>,
}

impl KillPlan {
    /// Parses `EPOCH:COUNT` and `recovery:COUNT` items separated by commas.
    pub fn parse(text: &str) -> Result<KillPlan, String> {
        let mut kills = Vec::new();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad =
                || format!("--kill-at item {item:?}: expected EPOCH:COUNT or recovery:COUNT (e.g. 30:2)");
            let (when, count) = item.split_once(':').ok_or_else(bad)?;
            let count: usize = count.trim().parse().map_err(|_| bad())?;
            if count == 0 {
                return Err(format!("--kill-at item {item:?}: kill at least one node"));
            }
            let trigger = match when.trim() {
                "recovery" => Trigger::DuringRecovery,
                epoch => Trigger::AfterEpoch(epoch.parse().ok().filter(|e| *e > 0).ok_or_else(bad)?),
            };
            kills.push(Kill { trigger, count });
        }
        Ok(KillPlan { kills })
    }

    /// Whether no kill is left.
    pub fn is_empty(&self) -> bool {
        self.kills.is_empty()
    }

    /// Takes the epoch kills due once `committed` is committed: how many nodes to kill now.
    pub fn due(&mut self, committed: u64) -> usize {
        let mut count = 0;
        self.kills.retain(|k| match k.trigger {
            Trigger::AfterEpoch(e) if e <= committed => {
                count += k.count;
                false
            }
            _ => true,
        });
        count
    }

    /// Takes the first kill meant for a recovery: how many nodes to kill in this one.
    pub fn during_recovery(&mut self) -> Option<usize> {
        let at = self
            .kills
            .iter()
            .position(|k| k.trigger == Trigger::DuringRecovery)?;
        Some(self.kills.remove(at).count)
    }
}

/// A group as the victim choice sees it.
#[derive(Debug, Clone)]
pub struct GroupView {
    /// Member names.
    pub members: Vec<String>,
}

/// Chooses `count` victims among `hosting` (alive nodes that host ranks): from the group
/// with the most members in `lost` first (then in group order), all from one group while
/// it has enough, picked pseudo-randomly from `seed`.
pub fn choose_victims(
    groups: &[GroupView],
    hosting: &BTreeSet<String>,
    lost: &BTreeSet<String>,
    count: usize,
    seed: u64,
) -> Vec<String> {
    let mut order: Vec<&GroupView> = groups.iter().collect();
    order.sort_by_key(|g| std::cmp::Reverse(g.members.iter().filter(|m| lost.contains(*m)).count()));
    let mut random = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut victims = Vec::new();
    for group in order {
        let mut candidates: Vec<&String> = group.members.iter().filter(|m| hosting.contains(*m)).collect();
        candidates.sort_by_key(|n| natural_key(n));
        while victims.len() < count && !candidates.is_empty() {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            let pick = candidates.remove((random % candidates.len() as u64) as usize);
            victims.push(pick.clone());
        }
    }
    victims
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn kill_plans_parse() {
        let mut plan = KillPlan::parse("30:2, recovery:1,10:1").unwrap();
        assert_eq!(plan.due(9), 0);
        assert_eq!(plan.due(12), 1);
        assert_eq!(plan.due(12), 0, "taken once");
        assert_eq!(plan.during_recovery(), Some(1));
        assert_eq!(plan.during_recovery(), None);
        assert_eq!(plan.due(40), 2);
        assert!(plan.is_empty());
        for bad in ["30", "x:1", "0:1", "30:0", "30:-1", "recovery"] {
            assert!(KillPlan::parse(bad).is_err(), "{bad}");
        }
        assert!(KillPlan::parse("").unwrap().is_empty());
    }

    #[test]
    fn victims_come_from_one_group_and_the_damaged_one_first() {
        let groups = vec![
            GroupView {
                members: ["n0", "n1", "n2", "n3", "n4", "n5"].map(String::from).to_vec(),
            },
            GroupView {
                members: ["n6", "n7", "n8", "n9", "n10", "n11"].map(String::from).to_vec(),
            },
        ];
        let hosting = set(&["n0", "n1", "n2", "n3", "n6", "n7", "n8", "n9"]);
        for seed in 0..20 {
            let v = choose_victims(&groups, &hosting, &BTreeSet::new(), 3, seed);
            assert_eq!(v.len(), 3);
            assert!(v.iter().all(|n| groups[0].members.contains(n)), "{v:?}");
            assert_eq!(v.iter().collect::<BTreeSet<_>>().len(), 3, "distinct");
            let v = choose_victims(&groups, &hosting, &set(&["n10"]), 1, seed);
            assert!(
                groups[1].members.contains(&v[0]),
                "the group that lost n10: {v:?}"
            );
        }
        // Not enough in one group: the rest from the next.
        let v = choose_victims(&groups, &hosting, &BTreeSet::new(), 6, 1);
        assert_eq!(v.len(), 6);
        assert_eq!(
            choose_victims(&groups, &hosting, &BTreeSet::new(), 20, 1).len(),
            8
        );
    }
}
