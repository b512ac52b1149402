//! What a recovery will do, decided from the journal, the set of alive agents and the
//! scrub's findings alone — no I/O — so that every decision (which members are lost, where
//! each rank goes, how groups are re-formed and who holds data or parity) is unit- and
//! property-tested. `recovery.rs` executes the plan: decode, move, re-encode, then one
//! journal write.
//!
//! The invariant every plan keeps (checked by [`super::protection::check_protection`] before
//! the journal switches): every rank sits on a node that holds a **data** position of
//! exactly one group. A rank on a parity-only member would be in no data shard and its next
//! loss would be final.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{natural_key, Journal};
use eckpt_cluster_api::msg::{GroupRecord, Relocation};
use eckpt_cluster_api::ClusterError;
use eckpt_coding::geometry::Geometry;

/// One member of a group to rebuild by decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuild {
    /// Position of the member in its group.
    pub member: usize,
    /// The node that receives the decoded shard and cuts it into rank images.
    pub target: String,
    /// Where each of the member's ranks is installed (rank → node).
    pub placement: BTreeMap<u32, String>,
}

/// A damaged group that can be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRepair {
    /// Index of the group in the current journal.
    pub group: usize,
    /// Positions whose shards must not be read (lost or damaged).
    pub unavailable: Vec<usize>,
    /// Members whose ranks must be rebuilt (members without ranks need no decode).
    pub rebuild: Vec<Rebuild>,
}

/// A rank whose committed image is copied from one living node to another, because its
/// node takes a parity-only position in the re-formed groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The rank.
    pub rank: u32,
    /// Node holding its committed image now.
    pub from: String,
    /// Node that hosts it from now on.
    pub to: String,
}

/// Everything a recovery does, in the order the executor does it.
#[derive(Debug, Clone)]
pub struct RecoveryPlan {
    /// Decodes, per damaged group that can be recovered.
    pub repairs: Vec<GroupRepair>,
    /// Copies of committed images between living nodes (after the decodes).
    pub moves: Vec<Move>,
    /// The journal to write once every decode, move and re-encode succeeded.
    pub next: Journal,
    /// Indexes into `next.groups` whose parity must be encoded anew.
    pub reencode: Vec<usize>,
    /// Alive members whose damaged data is repaired in place.
    pub repaired: Vec<String>,
    /// Lost members rebuilt, and where each of their ranks now lives.
    pub rebuilt: Vec<(String, BTreeMap<u32, String>)>,
    /// Groups that lost more than `m` members: one line each, naming the ranks.
    pub unrecoverable: Vec<String>,
    /// Indexes into `next.groups` of those groups, kept as they were to name what is lost.
    pub lost_groups: Vec<usize>,
    /// What the user should know (groups that shrank and their new storage overhead).
    pub warnings: Vec<String>,
}

impl RecoveryPlan {
    /// Whether there is nothing to recover.
    pub fn is_empty(&self) -> bool {
        self.repairs.is_empty() && self.unrecoverable.is_empty() && self.reencode.is_empty()
    }
}

/// A group's losses.
struct Damage {
    /// Positions whose shards cannot be used.
    unavailable: Vec<usize>,
    /// Positions lost for good (agent down), a subset of `unavailable`.
    lost: Vec<usize>,
}

/// Decides a recovery of `journal`'s committed state, given which agents are `alive` and
/// which alive members the scrub found `damaged`. Lost members are replaced by spares when
/// there are enough (the spare takes the member's position, so data stays data); otherwise
/// their ranks are spread over the nodes left — per process (each to the least loaded per
/// core), or with [`Relocation::Node`] all of a lost node's ranks to one node — and the
/// groups are formed anew with every rank-hosting node at a data position.
pub fn plan_recovery(
    journal: &Journal,
    alive: &BTreeSet<String>,
    damaged: &BTreeSet<String>,
    relocation: Relocation,
) -> Result<RecoveryPlan, ClusterError> {
    let epoch = journal.committed;
    let mut plan = RecoveryPlan {
        repairs: Vec::new(),
        moves: Vec::new(),
        next: journal.clone(),
        reencode: Vec::new(),
        repaired: Vec::new(),
        rebuilt: Vec::new(),
        unrecoverable: Vec::new(),
        lost_groups: Vec::new(),
        warnings: Vec::new(),
    };
    let damage = find_damage(journal, alive, damaged);
    if damage.is_empty() {
        return Ok(plan);
    }

    let members = journal.members();
    let mut spares: Vec<String> = journal
        .nodes
        .iter()
        .filter(|(name, e)| !e.removed && !members.contains(*name) && alive.contains(*name))
        .map(|(name, _)| name.clone())
        .collect();
    let lost_names: BTreeSet<String> = damage
        .iter()
        .flat_map(|(gi, d)| {
            d.lost
                .iter()
                .map(|&x| journal.groups[*gi].group.members[x].clone())
        })
        .collect();
    let hopeless: BTreeSet<usize> = damage
        .iter()
        .filter(|(gi, d)| {
            let rec = &journal.groups[**gi];
            d.unavailable.len() > rec.group.m || (epoch > 0 && rec.objects.is_empty() && !d.lost.is_empty())
        })
        .map(|(gi, _)| *gi)
        .collect();
    // Spares first: each takes a lost member's position and its ranks whole. One at a data
    // position can host more, so the ranks spread below count it with its new load.
    let mut replaced: BTreeMap<String, String> = BTreeMap::new();
    let mut added: BTreeMap<String, usize> = BTreeMap::new();
    for (gi, d) in damage.iter().filter(|(gi, _)| !hopeless.contains(gi)) {
        let group = &journal.groups[*gi].group.members;
        let mut staying: Vec<String> = (0..group.len())
            .filter(|x| !d.lost.contains(x))
            .map(|x| group[x].clone())
            .collect();
        for &x in &d.lost {
            let Some(spare) = journal.take_spare(&mut spares, &staying) else {
                break;
            };
            staying.push(spare.clone());
            let name = &group[x];
            if journal.holds_data(name) {
                added.insert(spare.clone(), journal.ranks_on(name).len());
            }
            replaced.insert(name.clone(), spare);
        }
    }
    // Groups with a loss no spare replaced are formed anew, each with the groups it needs
    // to stay large enough ([`regroup_sets`]); every other group keeps its members.
    let left = |gi: usize| {
        journal.groups[gi]
            .group
            .members
            .iter()
            .filter(|n| !lost_names.contains(*n) || replaced.contains_key(*n))
            .count()
    };
    let short: Vec<usize> = damage
        .iter()
        .filter(|(gi, d)| {
            !hopeless.contains(gi)
                && d.lost
                    .iter()
                    .any(|&x| !replaced.contains_key(&journal.groups[**gi].group.members[x]))
        })
        .map(|(gi, _)| *gi)
        .collect();
    let sets = regroup_sets(journal, &short, &hopeless, left);
    let set_of: BTreeMap<usize, usize> = sets
        .iter()
        .enumerate()
        .flat_map(|(s, set)| set.iter().map(move |&gi| (gi, s)))
        .collect();
    // The nodes each set is formed from: its groups' survivors and the spares that took
    // lost members' places.
    let set_nodes: Vec<Vec<String>> = sets
        .iter()
        .map(|set| {
            let mut nodes: Vec<String> = set
                .iter()
                .flat_map(|&gi| &journal.groups[gi].group.members)
                .filter_map(|n| match replaced.get(n) {
                    Some(spare) => Some(spare.clone()),
                    None => (!lost_names.contains(n)).then(|| n.clone()),
                })
                .collect();
            nodes.sort_by_key(|n| natural_key(n));
            nodes
        })
        .collect();
    // The ranks of a lost member no spare replaced go to the data members of its set (or,
    // when none is left, to any node of the set: the new groups give hosting nodes data
    // positions), so that they change no other group.
    let index = journal.node_index();
    let hosts: Vec<Vec<String>> = set_nodes
        .iter()
        .map(|nodes| {
            let data: Vec<String> = nodes
                .iter()
                .filter(|n| index.holds_data(n) || added.contains_key(*n))
                .cloned()
                .collect();
            if data.is_empty() {
                nodes.clone()
            } else {
                data
            }
        })
        .collect();
    let placement = &mut plan.next.placement;
    for (&gi, d) in &damage {
        let rec = &journal.groups[gi];
        if hopeless.contains(&gi) {
            plan.unrecoverable.push(unrecoverable_line(journal, gi, d));
            plan.lost_groups.push(gi);
            continue;
        }
        let mut rebuild = Vec::new();
        for &x in &d.unavailable {
            let name = &rec.group.members[x];
            let ranks = journal.ranks_on(name);
            if !d.lost.contains(&x) {
                // Damaged but alive: repaired in place.
                if !ranks.is_empty() {
                    rebuild.push(Rebuild {
                        member: x,
                        target: name.clone(),
                        placement: ranks.iter().map(|&r| (r, name.clone())).collect(),
                    });
                }
                plan.repaired.push(name.clone());
                continue;
            }
            let to: BTreeMap<u32, String> = if let Some(spare) = replaced.get(name) {
                ranks.iter().map(|&r| (r, spare.clone())).collect()
            } else {
                let mut to: BTreeMap<u32, String> = BTreeMap::new();
                for &r in &ranks {
                    let together = to.values().next().filter(|_| relocation == Relocation::Node);
                    let host = match together {
                        Some(host) => host.clone(),
                        None => journal.least_loaded(&hosts[set_of[&gi]], &added).ok_or_else(|| {
                            ClusterError::Unrecoverable("no node is left to host ranks".into())
                        })?,
                    };
                    *added.entry(host.clone()).or_default() += 1;
                    to.insert(r, host);
                }
                to
            };
            placement.extend(to.clone());
            if let Some(target) = to.values().next() {
                rebuild.push(Rebuild {
                    member: x,
                    target: target.clone(),
                    placement: to.clone(),
                });
            }
            if !ranks.is_empty() || replaced.contains_key(name) {
                plan.rebuilt.push((name.clone(), to));
            }
        }
        plan.repairs.push(GroupRepair {
            group: gi,
            unavailable: d.unavailable.clone(),
            rebuild,
        });
    }

    // Groups whose every loss found a spare keep their shape, the spares in the lost
    // members' places; the sets are formed anew.
    let recovered: BTreeSet<usize> = plan.repairs.iter().map(|r| r.group).collect();
    for &gi in recovered.iter().filter(|gi| !set_of.contains_key(gi)) {
        for member in plan.next.groups[gi].group.members.iter_mut() {
            if let Some(spare) = replaced.get(member) {
                *member = spare.clone();
            }
        }
        reencode(&mut plan, gi);
    }
    regroup_around_ranks(&mut plan, journal, &sets, &set_nodes)?;
    if relocation == Relocation::Process && plan.unrecoverable.is_empty() {
        balance(&mut plan, alive);
    }
    // A rank that changes nodes (moved, or rebuilt somewhere) changes the shards of the
    // groups it leaves and joins.
    let group_of = plan.next.group_index();
    let touched: BTreeSet<usize> = plan
        .next
        .placement
        .iter()
        .filter_map(|(rank, to)| Some((journal.placement.get(rank)?, to)))
        .filter(|(from, to)| from != to)
        .flat_map(|(from, to)| [from, to])
        .filter_map(|n| group_of.get(n.as_str()).copied())
        .filter(|gi| !plan.reencode.contains(gi) && !plan.lost_groups.contains(gi))
        .collect();
    for gi in touched {
        reencode(&mut plan, gi);
    }
    for name in &lost_names {
        if let Some(e) = plan.next.nodes.get_mut(name) {
            e.removed = e.removed
                || recovered
                    .iter()
                    .any(|gi| journal.groups[*gi].group.members.contains(name));
        }
    }
    for spare in replaced.values() {
        if let Some(e) = plan.next.nodes.get_mut(spare) {
            e.spare = false;
        }
    }
    Ok(plan)
}

/// Lost and damaged members per group index.
fn find_damage(
    journal: &Journal,
    alive: &BTreeSet<String>,
    damaged: &BTreeSet<String>,
) -> BTreeMap<usize, Damage> {
    let mut damage = BTreeMap::new();
    for (gi, rec) in journal.groups.iter().enumerate() {
        let members = &rec.group.members;
        let lost: Vec<usize> = (0..members.len())
            .filter(|&x| !alive.contains(&members[x]))
            .collect();
        let mut unavailable = lost.clone();
        unavailable.extend((0..members.len()).filter(|&x| damaged.contains(&members[x])));
        if !unavailable.is_empty() {
            damage.insert(gi, Damage { unavailable, lost });
        }
    }
    damage
}

/// The one-line reason a group cannot be recovered.
fn unrecoverable_line(journal: &Journal, gi: usize, d: &Damage) -> String {
    let rec = &journal.groups[gi];
    let ranks: Vec<String> = d
        .unavailable
        .iter()
        .flat_map(|&x| journal.ranks_on(&rec.group.members[x]))
        .map(|r| r.to_string())
        .collect();
    let names: Vec<&str> = d
        .unavailable
        .iter()
        .map(|&x| rec.group.members[x].as_str())
        .collect();
    format!(
        "group {} lost {} of {} members ({}), more than m={}: ranks {} at epoch {} cannot be rebuilt",
        rec.group.id,
        d.unavailable.len(),
        rec.group.members.len(),
        names.join(", "),
        rec.group.m,
        if ranks.is_empty() {
            "none".to_string()
        } else {
            ranks.join(", ")
        },
        journal.committed,
    )
}

/// Marks group `gi` of the next journal for a new encode: a new id, no objects yet.
fn reencode(plan: &mut RecoveryPlan, gi: usize) {
    let id = plan.next.next_group;
    plan.next.next_group += 1;
    let rec = &mut plan.next.groups[gi];
    rec.group.id = id;
    rec.objects.clear();
    plan.reencode.push(gi);
}

/// Sends `rank` to node `to` in the plan. A rank on its way somewhere (rebuilt there, or
/// moved there by an earlier step) goes straight to `to` instead; any other is copied from
/// where it lives (a [`Move`]).
fn relocate(plan: &mut RecoveryPlan, rank: u32, to: &str) {
    // Both callers (`balance`, `regroup_around_ranks`) take `rank` from `ranks_on` of
    // `plan.next.placement` just before: it is placed.
    let from = plan
        .next
        .placement
        .insert(rank, to.to_string())
        .expect("only placed ranks are relocated");
    let rebuilt_here = plan
        .repairs
        .iter_mut()
        .flat_map(|r| &mut r.rebuild)
        .find_map(|b| b.placement.get_mut(&rank));
    if let Some(node) = rebuilt_here {
        *node = to.to_string();
    } else if let Some(at) = plan.moves.iter().position(|m| m.rank == rank) {
        if plan.moves[at].from == to {
            plan.moves.remove(at);
        } else {
            plan.moves[at].to = to.to_string();
        }
    } else {
        plan.moves.push(Move {
            rank,
            from,
            to: to.to_string(),
        });
    }
    for (_, placed) in plan.rebuilt.iter_mut() {
        if let Some(node) = placed.get_mut(&rank) {
            *node = to.to_string();
        }
    }
}

/// Per-process relocation ends balanced: while moving one rank from the most loaded
/// data-holding node (ranks per core) to the least loaded one lowers the highest load,
/// the rank goes — preferably one being rebuilt anyway, whose install target simply
/// changes; otherwise it is copied. Groups whose shards change are encoded anew.
/// Without this, nodes that a regrouping turns from parity into data would stay empty
/// while the others carry the lost nodes' ranks.
fn balance(plan: &mut RecoveryPlan, alive: &BTreeSet<String>) {
    let index = plan.next.node_index();
    let nodes: Vec<String> = plan
        .next
        .members()
        .into_iter()
        .filter(|n| alive.contains(n) && index.holds_data(n))
        .collect();
    let cores = |j: &Journal, n: &str| j.nodes[n].info.as_ref().map_or(1, |i| i.cores.max(1)) as f64;
    let rebuilding: BTreeSet<u32> = plan
        .repairs
        .iter()
        .flat_map(|r| &r.rebuild)
        .flat_map(|b| b.placement.keys().copied())
        .collect();
    // Ranks per node, counted once and kept as ranks move (counting them per node and per
    // move made balancing thousands of nodes quadratic and worse).
    let mut placed: BTreeMap<String, usize> = nodes
        .iter()
        .map(|n| (n.clone(), index.ranks_on(n).len()))
        .collect();
    loop {
        let load = |n: &String| placed[n] as f64 / cores(&plan.next, n);
        let by_load = |a: &&String, b: &&String| {
            load(a)
                .total_cmp(&load(b))
                .then_with(|| natural_key(a).cmp(&natural_key(b)))
        };
        let (Some(most), Some(least)) = (nodes.iter().max_by(by_load), nodes.iter().min_by(by_load)) else {
            return;
        };
        let after = (placed[least] + 1) as f64 / cores(&plan.next, least);
        if after >= load(most) {
            return;
        }
        let ranks = plan.next.ranks_on(most);
        // `after > 0` (cores are at least 1), so `load(most) > 0`: `most` holds a rank.
        let rank = ranks
            .iter()
            .rev()
            .find(|r| rebuilding.contains(r))
            .or(ranks.last())
            .copied()
            .expect("the most loaded node holds a rank");
        let (most, least) = (most.clone(), least.clone());
        relocate(plan, rank, &least);
        *placed.get_mut(&most).expect("counted") -= 1;
        *placed.get_mut(&least).expect("counted") += 1;
    }
}

/// The groups formed anew together, as sets of group indexes: each group that lost a member
/// no spare replaced (`short`), with the groups of fewest nodes left added while its own
/// number fewer than half a configured group (and at least `m + 1`). A recovery then
/// re-encodes the groups its losses touched, not the cluster's; and a group shrinks with
/// its losses only down to half its configured size, so that its parity overhead stays
/// within about twice the configured one, before it takes in another. A group wanted by
/// two sets joins them into one. `left` counts a group's members that stay (spares
/// included).
fn regroup_sets(
    journal: &Journal,
    short: &[usize],
    hopeless: &BTreeSet<usize>,
    left: impl Fn(usize) -> usize,
) -> Vec<BTreeSet<usize>> {
    let (k, m) = (journal.coding.k, journal.coding.m);
    let enough = (k + m).div_ceil(2).max(m + 1);
    let mut sets: Vec<BTreeSet<usize>> = Vec::new();
    for &gi in short {
        if sets.iter().any(|set| set.contains(&gi)) {
            continue;
        }
        let mut set = BTreeSet::from([gi]);
        while set.iter().map(|&g| left(g)).sum::<usize>() < enough {
            let Some(partner) = (0..journal.groups.len())
                .filter(|g| !set.contains(g) && !hopeless.contains(g))
                .min_by_key(|&g| (left(g), g))
            else {
                break;
            };
            match sets.iter().position(|other| other.contains(&partner)) {
                Some(at) => set.extend(sets.remove(at)),
                None => {
                    set.insert(partner);
                }
            }
        }
        sets.push(set);
    }
    sets
}

/// Forms new groups over the nodes of each set ([`regroup_sets`]), in place of the set's
/// groups; every other group keeps its place and its index. Nodes that host ranks take the
/// data positions; when a set has more of them than data positions, the ranks of its least
/// loaded ones move to the others (recorded as [`Move`]s), so no rank ends up on a
/// parity-only member.
fn regroup_around_ranks(
    plan: &mut RecoveryPlan,
    journal: &Journal,
    sets: &[BTreeSet<usize>],
    set_nodes: &[Vec<String>],
) -> Result<(), ClusterError> {
    if sets.is_empty() {
        return Ok(());
    }
    let (k, m) = (journal.coding.k, journal.coding.m);
    // Ranks per node, counted once and kept as ranks move.
    let index = plan.next.node_index();
    let mut placed: BTreeMap<String, usize> = set_nodes
        .iter()
        .flatten()
        .map(|n| (n.clone(), index.ranks_on(n).len()))
        .collect();
    let mut formed = Vec::with_capacity(sets.len());
    for nodes in set_nodes {
        formed.push(regroup_set(plan, journal, nodes, &mut placed)?);
    }
    for rec in formed.iter().flatten() {
        if rec.group.k < k {
            plan.warnings.push(format!(
                "group {} now has k={} m={} (configured k={k}): storage overhead {:.0}% instead of {:.0}%",
                rec.group.id,
                rec.group.k,
                m,
                100.0 * m as f64 / rec.group.k as f64,
                100.0 * m as f64 / k as f64
            ));
        }
    }
    // The new groups take the place of their set's first group; indexes kept by the plan
    // follow the groups that stay.
    let first_of: BTreeMap<usize, usize> = sets
        .iter()
        .enumerate()
        .filter_map(|(s, set)| Some((*set.first()?, s)))
        .collect();
    let in_a_set: BTreeSet<usize> = sets.iter().flatten().copied().collect();
    let mut formed: Vec<Option<Vec<GroupRecord>>> = formed.into_iter().map(Some).collect();
    let mut moved_to: BTreeMap<usize, usize> = BTreeMap::new();
    let mut reencode = Vec::new();
    let mut groups = Vec::with_capacity(plan.next.groups.len());
    for (gi, rec) in std::mem::take(&mut plan.next.groups).into_iter().enumerate() {
        if let Some(&s) = first_of.get(&gi) {
            for new in formed[s].take().into_iter().flatten() {
                reencode.push(groups.len());
                groups.push(new);
            }
        } else if !in_a_set.contains(&gi) {
            moved_to.insert(gi, groups.len());
            groups.push(rec);
        }
    }
    plan.next.groups = groups;
    let follow = |indexes: &[usize]| -> Vec<usize> { indexes.iter().map(|gi| moved_to[gi]).collect() };
    plan.lost_groups = follow(&plan.lost_groups);
    plan.reencode = follow(&plan.reencode);
    plan.reencode.extend(reencode);
    Ok(())
}

/// New groups over `nodes` (one set), rank-hosting nodes at data positions; `placed` counts
/// the ranks on each node and follows the moves.
fn regroup_set(
    plan: &mut RecoveryPlan,
    journal: &Journal,
    nodes: &[String],
    placed: &mut BTreeMap<String, usize>,
) -> Result<Vec<GroupRecord>, ClusterError> {
    let (m, layout) = (journal.coding.m, journal.coding.layout);
    let shapes = journal.form_groups(nodes);
    if shapes.is_empty() {
        return Err(ClusterError::Unrecoverable(format!(
            "only {} node(s) left, fewer than m+1={}: the ranks cannot be protected; add spares \
             (`eckpt join --spare`) and run `eckpt recover` again",
            nodes.len(),
            m + 1
        )));
    }
    let data_slots: usize = shapes
        .iter()
        .map(|(gk, members)| {
            let geometry = Geometry::new(layout, *gk, members.len() - gk, 1);
            (0..members.len()).filter(|&x| geometry.holds_data(x)).count()
        })
        .sum();
    let mut hosting: Vec<String> = nodes.iter().filter(|n| placed[*n] > 0).cloned().collect();
    // Too many hosting nodes: the least loaded give their ranks to the others.
    while hosting.len() > data_slots {
        // Not empty: it has more nodes than `data_slots`, which is at least 0.
        let victim = hosting
            .iter()
            .min_by_key(|n| (placed[*n], std::cmp::Reverse(natural_key(n))))
            .cloned()
            .expect("hosting is not empty");
        hosting.retain(|n| *n != victim);
        for rank in plan.next.ranks_on(&victim) {
            // Some node is left as long as the groups have a data position, which the
            // policy's groups (another crate's) are to give each: a bug there is an error.
            let to = plan
                .next
                .least_loaded_by(&hosting, |n| placed.get(n).copied().unwrap_or(0))
                .ok_or_else(|| {
                    ClusterError::Internal(format!(
                        "recovery plan: no node left to host rank {rank} of {victim} ({data_slots} data positions in {} new group(s))",
                        shapes.len()
                    ))
                })?;
            relocate(plan, rank, &to);
            *placed.entry(to).or_default() += 1;
        }
        *placed.entry(victim).or_default() = 0;
    }
    // Hosting nodes at data positions, the groups spread over the failure domains. The
    // loop above left no more of them than data positions, so they have seats unless the
    // groups `seat` forms differ from `shapes`: a bug, answered as one.
    let hosting: BTreeSet<String> = hosting.into_iter().collect();
    let seated = journal.seat(nodes, &hosting).ok_or_else(|| {
        ClusterError::Internal(format!(
            "recovery plan: {} rank-hosting node(s) do not fit the {data_slots} data positions of the new groups",
            hosting.len()
        ))
    })?;
    Ok(plan.next.numbered(seated))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protection::check_protection;
    use eckpt_cluster_api::msg::{ObjectKind, ObjectRecord, ShardRecord};
    use eckpt_coding::config::{CodingConfig, Layout, Mode};
    use eckpt_coding::ObjectId;
    use proptest::prelude::*;

    fn names(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    /// A journal of `nodes` members and `spares`, `world` ranks placed as the coordinator
    /// places new ranks, epoch 1 committed.
    fn cluster(nodes: usize, spares: usize, k: usize, m: usize, layout: Layout, world: u32) -> Journal {
        let coding = CodingConfig {
            k,
            m,
            layout,
            mode: Mode::Full,
            ..CodingConfig::default()
        };
        let mut j = Journal::new(coding, &names("n", nodes), &names("s", spares));
        let data: Vec<String> = j.members().into_iter().filter(|n| j.holds_data(n)).collect();
        for rank in 0..world {
            let node = j.least_loaded(&data, &BTreeMap::new()).unwrap();
            j.placement.insert(rank, node);
        }
        j.world = Some(world);
        let groups: Vec<usize> = (0..j.groups.len()).collect();
        encode(&mut j, &groups, 1);
        j
    }

    /// What an encode of `epoch` records for `groups`: each data member's ranks.
    fn encode(j: &mut Journal, groups: &[usize], epoch: u64) {
        for &gi in groups {
            let g = j.groups[gi].group.clone();
            let geometry = Geometry::new(j.coding.layout, g.k, g.m, 1);
            let shards = (0..g.members.len())
                .map(|x| ShardRecord {
                    ranks: if geometry.holds_data(x) {
                        j.ranks_on(&g.members[x])
                    } else {
                        Vec::new()
                    },
                    ..ShardRecord::default()
                })
                .collect();
            j.groups[gi].objects = vec![ObjectRecord {
                id: ObjectId { group: g.id, epoch },
                kind: ObjectKind::Image,
                version: epoch,
                chunk: 4096,
                data_chunks: 1,
                shards,
            }];
        }
        j.committed = epoch;
    }

    /// The per-process plan of `j` losing `lost`.
    fn plan_losing(j: &Journal, lost: &[&str]) -> Result<RecoveryPlan, ClusterError> {
        plan_recovery(j, &alive_without(j, lost), &BTreeSet::new(), Relocation::Process)
    }

    fn alive_without(j: &Journal, lost: &[&str]) -> BTreeSet<String> {
        j.nodes
            .iter()
            .filter(|(n, e)| !e.removed && !lost.contains(&n.as_str()))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Plans, checks what every plan must satisfy, and returns the journal after the plan's
    /// re-encodes.
    fn recover(j: &Journal, alive: &BTreeSet<String>, damaged: &BTreeSet<String>) -> Journal {
        let plan = plan_recovery(j, alive, damaged, Relocation::Process).expect("recoverable");
        assert!(plan.unrecoverable.is_empty());
        let mut next = plan.next.clone();
        encode(&mut next, &plan.reencode, j.committed);
        check_protection(&next, &plan.lost_groups).expect("every rank in a data shard");
        for (rank, node) in &next.placement {
            assert!(
                alive.contains(node),
                "rank {rank} placed on {node}, which is down"
            );
        }
        assert_eq!(
            next.placement.keys().collect::<Vec<_>>(),
            j.placement.keys().collect::<Vec<_>>(),
            "no rank is dropped or invented"
        );
        let counts: Vec<usize> = next
            .members()
            .iter()
            .filter(|n| alive.contains(*n) && next.holds_data(n))
            .map(|n| next.ranks_on(n).len())
            .collect();
        assert!(
            counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0) <= 1,
            "per-process relocation keeps ranks per node within one: {:?}",
            next.placement
        );
        for (gi, rec) in next.groups.iter().enumerate() {
            if !plan.reencode.contains(&gi) {
                assert!(
                    j.groups.contains(rec),
                    "group {} is neither re-encoded nor as it was",
                    rec.group.id
                );
            }
        }
        for m in &plan.moves {
            assert!(
                alive.contains(&m.from) && alive.contains(&m.to),
                "{m:?} involves a dead node"
            );
            assert_eq!(j.placement[&m.rank], m.from, "a move starts where the rank lives");
        }
        for repair in &plan.repairs {
            for b in &repair.rebuild {
                assert!(alive.contains(&b.target));
                let member = &j.groups[repair.group].group.members[b.member];
                assert_eq!(
                    b.placement.keys().copied().collect::<Vec<_>>(),
                    j.ranks_on(member),
                    "every rank of a rebuilt member is installed somewhere"
                );
                for (rank, node) in &b.placement {
                    assert_eq!(&next.placement[rank], node, "installed where it is placed");
                }
            }
        }
        next
    }

    /// A journal whose code has no data member (`k = 0`: never written by eckpt, but read
    /// from disk as it is) forms new groups without data positions: the plan says so as an
    /// internal error instead of crashing the coordinator.
    #[test]
    fn new_groups_without_data_positions_are_an_error_not_a_panic() {
        let mut j = cluster(3, 0, 2, 1, Layout::Dedicated, 4);
        j.coding.k = 0;
        let e = plan_losing(&j, &["n0"]).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Internal, "{e}");
        assert!(e.to_string().contains("no node left to host rank"), "{e}");
    }

    #[test]
    fn a_spare_takes_the_place_of_a_lost_member() {
        let j = cluster(6, 1, 4, 2, Layout::Dedicated, 4);
        let next = recover(&j, &alive_without(&j, &["n1"]), &BTreeSet::new());
        assert_eq!(next.groups[0].group.members, ["n0", "s0", "n2", "n3", "n4", "n5"]);
        assert_eq!(next.placement[&1], "s0");
        assert!(next.nodes["n1"].removed && !next.nodes["s0"].spare);
    }

    #[test]
    fn without_spares_ranks_spread_over_the_survivors_per_process() {
        let j = cluster(8, 0, 6, 2, Layout::Dedicated, 12);
        let plan = plan_losing(&j, &["n2"]).unwrap();
        let moved_to: BTreeSet<&String> = plan.rebuilt[0].1.values().collect();
        assert_eq!(
            moved_to.len(),
            2,
            "n2's two ranks go to two different nodes: {:?}",
            plan.rebuilt
        );
        recover(&j, &alive_without(&j, &["n2"]), &BTreeSet::new());
    }

    /// A spare that took a lost member's ranks must not become a
    /// parity-only member when the groups are formed anew.
    #[test]
    fn a_rank_never_lands_on_a_parity_member() {
        let j = cluster(6, 1, 4, 2, Layout::Dedicated, 4);
        let next = recover(&j, &alive_without(&j, &["n1", "n2"]), &BTreeSet::new());
        let g = &next.groups[0].group;
        assert_eq!(g.k, 3);
        let s0 = g.members.iter().position(|n| n == "s0").unwrap();
        assert!(s0 < g.k, "s0 hosts rank 1 and must hold data: {:?}", g.members);
        // Then the spare is lost too: rank 1 is still decodable and lands on a data member.
        let after = recover(&next, &alive_without(&next, &["s0"]), &BTreeSet::new());
        let host = &after.placement[&1];
        assert!(after.holds_data(host));
    }

    #[test]
    fn a_lost_parity_member_without_spare_moves_ranks_off_the_new_parity_positions() {
        let j = cluster(6, 0, 4, 2, Layout::Dedicated, 4);
        let plan = plan_losing(&j, &["n5"]).unwrap();
        assert_eq!(plan.moves.len(), 1, "4 hosting nodes, 3 data positions: {plan:?}");
        recover(&j, &alive_without(&j, &["n5"]), &BTreeSet::new());
        // The rotated layout has no parity-only position: nothing moves.
        let j = cluster(6, 0, 4, 2, Layout::Rotated, 6);
        let plan = plan_losing(&j, &["n5"]).unwrap();
        assert!(plan.moves.is_empty());
        recover(&j, &alive_without(&j, &["n5"]), &BTreeSet::new());
    }

    #[test]
    fn per_node_relocation_keeps_a_lost_nodes_ranks_together() {
        let j = cluster(8, 0, 6, 2, Layout::Dedicated, 12);
        let alive = alive_without(&j, &["n2"]);
        let plan = plan_recovery(&j, &alive, &BTreeSet::new(), Relocation::Node).unwrap();
        let moved_to: BTreeSet<&String> = plan.rebuilt[0].1.values().collect();
        assert_eq!(moved_to.len(), 1, "n2's ranks stay together: {:?}", plan.rebuilt);
        let host = moved_to.into_iter().next().unwrap();
        assert_eq!(plan.next.ranks_on(host).len(), 4, "{:?}", plan.next.placement);
    }

    #[test]
    fn a_damaged_member_is_repaired_in_place() {
        let j = cluster(6, 1, 4, 2, Layout::Dedicated, 4);
        let damaged: BTreeSet<String> = ["n3".to_string()].into();
        let plan = plan_recovery(&j, &alive_without(&j, &[]), &damaged, Relocation::Process).unwrap();
        assert_eq!(plan.repaired, ["n3"]);
        assert_eq!(plan.repairs[0].rebuild[0].target, "n3");
        assert_eq!(plan.next.groups[0].group.members, j.groups[0].group.members);
    }

    #[test]
    fn more_than_m_losses_are_unrecoverable_and_named() {
        let j = cluster(6, 1, 4, 2, Layout::Dedicated, 4);
        let plan = plan_losing(&j, &["n0", "n1", "n2"]).unwrap();
        assert_eq!(plan.unrecoverable.len(), 1);
        assert!(
            plan.unrecoverable[0].contains("ranks 0, 1, 2"),
            "{}",
            plan.unrecoverable[0]
        );
        assert_eq!(
            plan.next.groups, j.groups,
            "the lost group is kept to name what is gone"
        );
    }

    #[test]
    fn too_few_nodes_to_protect_is_an_error_not_an_unprotected_commit() {
        let j = cluster(3, 0, 1, 2, Layout::Dedicated, 1);
        let e = plan_losing(&j, &["n2"]).unwrap_err();
        assert!(e.to_string().contains("fewer than m+1=3"), "{e}");
    }

    #[test]
    fn a_shrunk_group_says_its_new_overhead() {
        let j = cluster(6, 0, 4, 2, Layout::Dedicated, 4);
        let plan = plan_losing(&j, &["n0"]).unwrap();
        assert!(
            plan.warnings
                .iter()
                .any(|w| w.contains("k=3 m=2") && w.contains("67%")),
            "{:?}",
            plan.warnings
        );
    }

    /// Without spares, a loss re-forms its own group from the survivors and re-encodes it:
    /// the other groups keep their members, ids and parity (at 4,096 nodes, re-encoding
    /// every group for one lost node cost seconds of the whole cluster's time).
    #[test]
    fn a_loss_without_spares_re_encodes_its_own_group_only() {
        let j = cluster(60, 0, 4, 2, Layout::Dedicated, 40);
        let lost = j.groups[3].group.members[1].clone();
        let plan = plan_losing(&j, &[&lost]).unwrap();
        assert_eq!(plan.reencode, [3], "{:?}", plan.next.groups);
        assert_eq!(plan.next.groups.len(), j.groups.len());
        let survivors: Vec<&String> = j.groups[3].group.members.iter().filter(|n| **n != lost).collect();
        assert_eq!(
            plan.next.groups[3].group.members.iter().collect::<Vec<_>>(),
            survivors
        );
        assert_eq!(plan.next.groups[3].group.k, 3);
        for (_, to) in &plan.rebuilt {
            for node in to.values() {
                assert!(
                    survivors.contains(&node),
                    "{node} is not of the lost node's group"
                );
            }
        }
        recover(&j, &alive_without(&j, &[&lost]), &BTreeSet::new());
    }

    /// A group left with fewer than half its configured members takes in the group of
    /// fewest members, and the two are formed anew as one; the rest stay.
    #[test]
    fn a_group_shrunk_below_half_its_size_merges_with_the_smallest_other() {
        let j = cluster(30, 0, 4, 2, Layout::Dedicated, 20);
        let members = j.groups[2].group.members.clone();
        let j = recover(
            &j,
            &alive_without(&j, &[&members[0], &members[1]]),
            &BTreeSet::new(),
        );
        assert_eq!(j.groups.len(), 5);
        assert_eq!(j.groups[2].group.members.len(), 4, "2 of 6 lost: 4 left, enough");
        let members = j.groups[2].group.members.clone();
        let alive = alive_without(&j, &[&members[0], &members[1]]);
        let plan = plan_recovery(&j, &alive, &BTreeSet::new(), Relocation::Process).unwrap();
        // 2 left of 6 configured: group 2 takes in group 0 (6 members, the first of the
        // smallest), and their 8 nodes form one group.
        assert_eq!(plan.next.groups.len(), 4);
        assert_eq!(plan.next.groups[0].group.members.len(), 8);
        assert!(plan.next.groups[0].group.members.contains(&members[2]));
        assert!(plan.reencode.contains(&0));
        for gi in [1, 2, 3] {
            assert!(j.groups.contains(&plan.next.groups[gi]), "group {gi} changed");
        }
        recover(&j, &alive, &BTreeSet::new());
    }

    /// A random walk over a cluster's life: losses (at most `m` per group, some with silent
    /// damage), recoveries, spares joining. Every plan keeps every rank in a data shard of
    /// exactly one group, on a node that is alive.
    fn random_walk(seed: u64) {
        let mut x = seed | 1;
        let mut next = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        let layout = if next(2) == 0 {
            Layout::Dedicated
        } else {
            Layout::Rotated
        };
        let (k, m) = (1 + next(5), 1 + next(3));
        let nodes = k + m + next(2 * (k + m));
        let spares = next(3);
        let world = 1 + next(3 * nodes) as u32;
        let mut j = cluster(nodes, spares, k, m, layout, world);
        for _round in 0..6 {
            if next(3) == 0 {
                let name = format!("s{}", j.nodes.len());
                j.nodes.insert(
                    name,
                    crate::NodeEntry {
                        info: None,
                        spare: true,
                        removed: false,
                        token: None,
                        domain: None,
                    },
                );
            }
            let mut lost = Vec::new();
            let mut damaged = BTreeSet::new();
            for rec in &j.groups {
                let budget = next(rec.group.m + 1);
                let mut members = rec.group.members.clone();
                for _ in 0..budget {
                    let victim = members.remove(next(members.len()));
                    if next(4) == 0 {
                        damaged.insert(victim);
                    } else {
                        lost.push(victim);
                    }
                }
            }
            let lost: Vec<&str> = lost.iter().map(String::as_str).collect();
            let alive = alive_without(&j, &lost);
            let members_left = j.members().iter().filter(|n| alive.contains(*n)).count();
            let spares_left = j
                .nodes
                .iter()
                .filter(|(n, e)| e.spare && !e.removed && alive.contains(*n))
                .count();
            if members_left + spares_left <= m {
                break;
            }
            match plan_recovery(&j, &alive, &damaged, Relocation::Process) {
                Err(e) => {
                    assert!(e.to_string().contains("fewer than m+1"), "seed {seed}: {e}");
                    break;
                }
                Ok(_) => j = recover(&j, &alive, &damaged),
            }
            let epoch = j.committed + 1;
            let groups: Vec<usize> = (0..j.groups.len()).collect();
            encode(&mut j, &groups, epoch);
            check_protection(&j, &[]).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn every_plan_keeps_every_rank_in_a_data_shard(seed in any::<u64>()) {
            random_walk(seed);
        }
    }
}
