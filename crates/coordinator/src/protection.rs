//! The invariant that makes a committed epoch recoverable: every rank of the job lives on a
//! node holding a **data** position of exactly one group, and that group's newest coded
//! object describes the committed epoch with the rank inside that member's data shard.
//! The coordinator checks it before every journal write that commits an epoch or a
//! recovery, and refuses the write when it does not hold.

use std::collections::BTreeMap;

use super::state::Journal;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::geometry::Geometry;

/// Checks that `journal` protects every rank of its committed epoch (see the module doc).
/// Groups in `lost_groups` (indexes of groups that lost more than `m` members and are kept
/// only to name what is gone) are not held to it.
pub fn check_protection(journal: &Journal, lost_groups: &[usize]) -> Result<(), ClusterError> {
    let refuse = |why: String| {
        Err(ClusterError::Refused(format!(
            "refusing to commit epoch {}: {why}",
            journal.committed
        )))
    };
    let mut member_of: BTreeMap<&str, Vec<(usize, usize)>> = BTreeMap::new();
    for (gi, rec) in journal.groups.iter().enumerate() {
        let g = &rec.group;
        if g.members.len() != g.k + g.m {
            return refuse(format!(
                "group {} has {} members, not k+m={}",
                g.id,
                g.members.len(),
                g.k + g.m
            ));
        }
        for (x, name) in g.members.iter().enumerate() {
            member_of.entry(name).or_default().push((gi, x));
        }
    }
    if let Some((name, _)) = member_of.iter().find(|(_, at)| at.len() > 1) {
        return refuse(format!("node {name} is a member of two groups"));
    }
    if journal.committed > 0 {
        if let Some(world) = journal.world {
            if let Some(missing) = (0..world).find(|r| !journal.placement.contains_key(r)) {
                return refuse(format!("rank {missing} of {world} has no node"));
            }
        }
    }
    for (&rank, node) in &journal.placement {
        let Some(&(gi, x)) = member_of.get(node.as_str()).and_then(|at| at.first()) else {
            return refuse(format!("rank {rank} lives on {node}, which is in no group"));
        };
        if lost_groups.contains(&gi) {
            continue;
        }
        let rec = &journal.groups[gi];
        let g = &rec.group;
        if !Geometry::new(journal.coding.layout, g.k, g.m, 1).holds_data(x) {
            return refuse(format!(
                "rank {rank} lives on {node}, a parity-only member of group {}",
                g.id
            ));
        }
        if journal.committed == 0 {
            continue;
        }
        let Some(object) = rec.objects.last() else {
            return refuse(format!("group {} of rank {rank} has no parity", g.id));
        };
        if object.version != journal.committed {
            return refuse(format!(
                "group {} protects epoch {}, not {}",
                g.id, object.version, journal.committed
            ));
        }
        if !object.shards.get(x).is_some_and(|s| s.ranks.contains(&rank)) {
            return refuse(format!(
                "rank {rank} is not in the data shard of {node} in group {}",
                g.id
            ));
        }
        let elsewhere = journal.groups.iter().enumerate().any(|(other, r)| {
            r.objects.last().is_some_and(|o| {
                o.shards
                    .iter()
                    .enumerate()
                    .any(|(y, s)| (other, y) != (gi, x) && s.ranks.contains(&rank))
            })
        });
        if elsewhere {
            return refuse(format!("rank {rank} is in more than one data shard"));
        }
    }
    Ok(())
}
