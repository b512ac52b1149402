//! Where a job restarted from a flushed epoch goes, decided from the journal and the alive
//! agents alone (no I/O, unit-tested): the cluster may have lost more than `m` members of a
//! group, or be a new cluster of another size with other `k`/`m` (elastic restart). Every
//! alive node that is not a spare is grouped anew, spares stepping in for lost members,
//! and the job's ranks are placed balanced per core over the data positions — its old
//! placement means nothing once its node stores cannot serve.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{natural_key, Journal};
use eckpt_cluster_api::ClusterError;

/// The journal of a cluster restarted from a flush of a `world`-rank job as committed
/// epoch `epoch`: lost members removed, groups formed over the nodes left (no parity yet:
/// the restore encodes it), every rank placed.
pub fn plan_flush_restore(
    journal: &Journal,
    alive: &BTreeSet<String>,
    world: u32,
    epoch: u64,
) -> Result<Journal, ClusterError> {
    let mut next = journal.clone();
    let members = journal.members();
    let lost = members.iter().filter(|n| !alive.contains(*n)).count();
    let usable = |spare: bool| {
        let mut names: Vec<String> = journal
            .nodes
            .iter()
            .filter(|(name, e)| !e.removed && e.spare == spare && alive.contains(*name))
            .map(|(name, _)| name.clone())
            .collect();
        names.sort_by_key(|n| natural_key(n));
        names
    };
    let mut nodes = usable(false);
    let spares = usable(true);
    let m = journal.coding.m;
    // Spares replace lost members, and fill in as long as no group can be formed.
    let wanted = lost.max((m + 1).saturating_sub(nodes.len()));
    let promoted: Vec<String> = spares.into_iter().take(wanted).collect();
    nodes.extend(promoted.iter().cloned());
    if nodes.len() <= m {
        return Err(ClusterError::Unrecoverable(format!(
            "only {} node(s) alive, fewer than m+1={}: the flushed ranks cannot be protected; add \
             spares (`eckpt join --spare`) and run `eckpt recover` again",
            nodes.len(),
            m + 1
        )));
    }
    for name in members.iter().filter(|n| !alive.contains(*n)) {
        if let Some(e) = next.nodes.get_mut(name) {
            e.removed = true;
        }
    }
    for name in &promoted {
        if let Some(e) = next.nodes.get_mut(name) {
            e.spare = false;
        }
    }
    next.groups = next.regroup(&nodes);
    let hosts: Vec<String> = nodes.iter().filter(|n| next.holds_data(n)).cloned().collect();
    next.placement = BTreeMap::new();
    for rank in 0..world {
        let host = next
            .least_loaded(&hosts, &BTreeMap::new())
            .ok_or_else(|| ClusterError::Unrecoverable("no alive node can host ranks".into()))?;
        next.placement.insert(rank, host);
    }
    next.world = Some(world);
    next.committed = epoch;
    next.next_epoch = epoch + 1;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::CodingConfig;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn coding(k: usize, m: usize) -> CodingConfig {
        CodingConfig {
            k,
            m,
            ..CodingConfig::default()
        }
    }

    fn per_node(j: &Journal) -> BTreeMap<String, usize> {
        let mut count = BTreeMap::new();
        for node in j.placement.values() {
            *count.entry(node.clone()).or_default() += 1;
        }
        count
    }

    #[test]
    fn a_new_cluster_of_another_size_takes_every_rank_balanced() {
        let j = Journal::new(coding(2, 1), &names("n", 4), &[]);
        let alive: BTreeSet<String> = names("n", 4).into_iter().collect();
        let next = plan_flush_restore(&j, &alive, 7, 5).unwrap();
        assert_eq!((next.committed, next.next_epoch, next.world), (5, 6, Some(7)));
        assert_eq!(next.placement.len(), 7);
        let counts = per_node(&next);
        assert_eq!(counts.len(), 3, "the parity-only member hosts none: {counts:?}");
        let (min, max) = (counts.values().min().unwrap(), counts.values().max().unwrap());
        assert!(max - min <= 1, "{counts:?}");
        for node in counts.keys() {
            assert!(next.holds_data(node));
        }
        super::super::protection::check_protection(
            &Journal {
                committed: 0,
                ..next.clone()
            },
            &[],
        )
        .unwrap();
    }

    #[test]
    fn more_than_m_lost_regroups_the_survivors_with_spares_first() {
        let mut j = Journal::new(coding(4, 2), &names("n", 8), &names("s", 2));
        j.world = Some(6);
        j.committed = 9;
        j.next_epoch = 11;
        let alive: BTreeSet<String> = ["n0", "n1", "n2", "n3", "n4", "s0", "s1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let next = plan_flush_restore(&j, &alive, 6, 11).unwrap();
        for lost in ["n5", "n6", "n7"] {
            assert!(next.nodes[lost].removed, "{lost}");
            assert!(!next.members().contains(lost));
        }
        assert!(
            !next.nodes["s0"].spare && !next.nodes["s1"].spare,
            "spares replace lost members"
        );
        assert_eq!(next.members().len(), 7);
        assert_eq!(next.placement.len(), 6);
        assert!(next.groups.iter().all(|g| g.objects.is_empty()));
        assert!(
            next.groups.iter().all(|g| g.group.id >= j.next_group),
            "fresh group ids"
        );
    }

    #[test]
    fn too_few_nodes_is_unrecoverable() {
        let j = Journal::new(coding(2, 2), &names("n", 4), &[]);
        let alive: BTreeSet<String> = ["n0", "n1"].iter().map(|s| s.to_string()).collect();
        let e = plan_flush_restore(&j, &alive, 2, 3).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Unrecoverable);
        assert!(e.to_string().contains("fewer than m+1=3"), "{e}");
    }
}
