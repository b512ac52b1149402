//! Where a job's ranks start: a pure decision over the nodes that can host ranks (alive
//! members at a data position), so it is property-tested. Ranks the cluster already placed
//! (a checkpointed job resuming) stay where their data is; only new ranks are placed.
//!
//! A node may have **slots**: the most ranks it may run, as the job was granted them — a
//! host file's `host slots=N` (Open MPI) or `host:N` (MPICH), and inside a Slurm allocation
//! the job's tasks on the node (`SLURM_TASKS_PER_NODE`: the slots Open MPI's and MPICH's
//! launchers count there too; srun refuses a step with more tasks on a node than the job
//! holds CPUs there). No node is given more ranks than its slots: [`place`] says why it
//! cannot place them instead, and [`check_fit`] says it of a new cluster before it is made,
//! naming the layout or the rank count that would fit.

use std::collections::BTreeMap;

use eckpt_coding::geometry::Geometry;
use eckpt_coding::policy::form_groups;
use eckpt_coding::{CodingConfig, Layout};

/// The most ranks each node may run, by node name; a node without an entry has no limit.
pub type Slots = BTreeMap<String, u32>;

/// The smaller limit of `a` and `b` for each node (a node limited in one only keeps that one).
pub fn tighter(mut a: Slots, b: &Slots) -> Slots {
    for (node, &slots) in b {
        a.entry(node.clone())
            .and_modify(|s| *s = (*s).min(slots))
            .or_insert(slots);
    }
    a
}

/// A node that can host ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Node name.
    pub name: String,
    /// Cores it offers ranks.
    pub cores: u32,
    /// The most ranks it may run (`None`: no limit).
    pub slots: Option<u32>,
}

impl Host {
    /// What ranks are balanced by: its slots where it has some, else its cores.
    fn weight(&self) -> u32 {
        self.slots.unwrap_or(self.cores).max(1)
    }

    /// Whether one more rank fits beside `load`.
    fn has_room(&self, load: u32) -> bool {
        self.slots.is_none_or(|s| load < s)
    }
}

/// Why [`place`] placed no rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplaced {
    /// No node can host ranks.
    NoHost,
    /// The job has more ranks than the hosts have slots.
    Full {
        /// The job's ranks.
        ranks: u32,
        /// The hosts' slots in all.
        slots: u64,
    },
    /// The cluster placed more ranks on a node (a recovery moving a lost node's ranks) than
    /// it has slots.
    Over {
        /// The node.
        node: String,
        /// Its ranks.
        ranks: u32,
        /// Its slots.
        slots: u32,
    },
}

/// How new ranks are spread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    /// Ranks per slot (per core where a node has no slots) as even as possible: with equal
    /// slots, ranks per node differ by at most one (each rank to the least loaded node, ties
    /// in name order).
    #[default]
    Balanced,
    /// Fill each node up to its slots (else its cores) before the next (fewer nodes talk over
    /// the network); beyond every node's, balanced.
    Pack,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        match s {
            "balanced" => Ok(Policy::Balanced),
            "pack" => Ok(Policy::Pack),
            _ => Err(format!("placement {s:?}: expected balanced or pack")),
        }
    }
}

pub use eckpt_coding::policy::natural_key;

/// Places ranks `0..world` not in `placed` on `hosts`; ranks in `placed` keep their node (and
/// count towards its load). No host is given more ranks than its slots: when they cannot
/// hold the job (or already hold more than they may), why. A node listed twice (the hosts
/// come from the coordinator's status) counts once, as first listed.
pub fn place(
    world: u32,
    hosts: &[Host],
    placed: &BTreeMap<u32, String>,
    policy: Policy,
) -> Result<BTreeMap<u32, String>, Unplaced> {
    if hosts.is_empty() {
        return Err(Unplaced::NoHost);
    }
    let mut hosts = hosts.to_vec();
    let mut seen = std::collections::BTreeSet::new();
    hosts.retain(|h| seen.insert(h.name.clone()));
    hosts.sort_by_key(|h| natural_key(&h.name));
    let mut load: BTreeMap<&str, u32> = hosts.iter().map(|h| (h.name.as_str(), 0)).collect();
    for node in placed.values() {
        if let Some(l) = load.get_mut(node.as_str()) {
            *l += 1;
        }
    }
    let slots: Option<Vec<u32>> = hosts.iter().map(|h| h.slots).collect();
    let capacity: Option<u64> = slots.map(|s| s.iter().map(|&s| u64::from(s)).sum());
    let full = Unplaced::Full {
        ranks: world,
        slots: capacity.unwrap_or_default(),
    };
    if capacity.is_some_and(|c| u64::from(world) > c) {
        return Err(full);
    }
    if let Some(over) = hosts
        .iter()
        .find(|h| h.slots.is_some_and(|s| load[h.name.as_str()] > s))
    {
        return Err(Unplaced::Over {
            node: over.name.clone(),
            ranks: load[over.name.as_str()],
            slots: over.slots.unwrap_or_default(),
        });
    }
    let new = (0..world).filter(|r| !placed.contains_key(r)).count() as u64;
    let free: u64 = hosts
        .iter()
        .map(|h| h.slots.map_or(u64::MAX, |s| u64::from(s - load[h.name.as_str()])))
        .fold(0, u64::saturating_add);
    if new > free {
        // Not reached after the checks above; the loop below relies on it.
        return Err(full);
    }
    let mut out = placed.clone();
    for rank in (0..world).filter(|r| !placed.contains_key(r)) {
        let fill = hosts
            .iter()
            .find(|h| load[h.name.as_str()] < h.slots.unwrap_or(h.cores.max(1)));
        let roomy = || {
            hosts
                .iter()
                .filter(|h| h.has_room(load[h.name.as_str()]))
                .min_by(|a, b| {
                    let la = f64::from(load[a.name.as_str()]) / f64::from(a.weight());
                    let lb = f64::from(load[b.name.as_str()]) / f64::from(b.weight());
                    la.total_cmp(&lb)
                })
        };
        let host = match (policy, fill) {
            (Policy::Pack, Some(h)) => h,
            // Some host has room while `free` above (slots of distinct hosts) is not spent;
            // should the count be wrong, the job does not fit rather than the run panicking.
            _ => match roomy() {
                Some(h) => h,
                None => return Err(full),
            },
        };
        // `load` has an entry for every host, made from `hosts` above.
        *load.get_mut(host.name.as_str()).expect("every host has a load") += 1;
        out.insert(rank, host.name.clone());
    }
    Ok(out)
}

/// The nodes of a new cluster of `members` (spares apart) that will host ranks: those at a
/// data position of their group, the groups formed as the coordinator forms them
/// ([`form_groups`], across `domain_of`'s failure domains). In the dedicated layout the `m`
/// parity members of each group hold no ranks; in the rotated one every member does.
pub fn rank_hosts(
    members: &[String],
    coding: &CodingConfig,
    domain_of: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    form_groups(members, coding.k, coding.m, domain_of)
        .into_iter()
        .flat_map(|(data, group)| {
            let geometry = Geometry::new(coding.layout, data, group.len() - data, 1);
            group
                .into_iter()
                .enumerate()
                .filter(move |(x, _)| geometry.holds_data(*x))
                .map(|(_, name)| name)
        })
        .collect()
}

/// Whether `world` ranks fit a new cluster of `members` and `spares` spare nodes (which hold
/// no ranks until they replace a lost member) coded as `coding`, no node running more than
/// its `slots`: otherwise the line to say, naming the layout or the rank count that fits
/// (`64 ranks do not fit: the dedicated layout puts ranks on the 6 data nodes of 9 (2 parity
/// nodes and 1 spare hold none), 8 slots each = 48; use --layout rotated (64 slots) or at
/// most 48 ranks`).
pub fn check_fit(
    world: u32,
    members: &[String],
    spares: usize,
    slots: &Slots,
    coding: &CodingConfig,
    domain_of: impl Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let hosting = rank_hosts(members, coding, &domain_of);
    let granted =
        |nodes: &[String]| -> Option<Vec<u32>> { nodes.iter().map(|n| slots.get(n).copied()).collect() };
    let Some(hosting_slots) = granted(&hosting) else {
        return Ok(());
    };
    let capacity: u64 = hosting_slots.iter().map(|&s| u64::from(s)).sum();
    if hosting.is_empty() || u64::from(world) <= capacity {
        return Ok(());
    }
    let idle = members.len() - hosting.len();
    let holding_none = match (idle, spares) {
        (0, 0) => String::new(),
        (0, s) => format!(" ({} {})", count(s, "spare", "spares"), hold(s)),
        (p, 0) => format!(" ({} {})", count(p, "parity node", "parity nodes"), hold(p)),
        (p, s) => format!(
            " ({} and {} hold none)",
            count(p, "parity node", "parity nodes"),
            count(s, "spare", "spares")
        ),
    };
    let which = match coding.layout {
        Layout::Dedicated => format!("the {} data nodes", hosting.len()),
        Layout::Rotated => format!("all {} members", hosting.len()),
    };
    let total = members.len() + spares;
    let mut line = format!(
        "{world} ranks do not fit: the {} layout puts ranks on {which} of {total}{holding_none}, {}",
        coding.layout,
        per_node(&hosting_slots, capacity)
    );
    let rotated = granted(members).map(|s| s.iter().map(|&s| u64::from(s)).sum::<u64>());
    match (coding.layout, rotated) {
        (Layout::Dedicated, Some(rotated)) if rotated >= u64::from(world) => line.push_str(&format!(
            "; use --layout rotated ({rotated} slots) or at most {capacity} ranks"
        )),
        (Layout::Dedicated, Some(rotated)) => line.push_str(&format!(
            "; use at most {capacity} ranks ({rotated} with --layout rotated), or more nodes or slots per node"
        )),
        _ => line.push_str(&format!(
            "; use at most {capacity} ranks, or more nodes or slots per node"
        )),
    }
    Err(line)
}

/// `8 slots each = 48`, or `48 slots in all` when the nodes' slots differ.
pub fn per_node(slots: &[u32], total: u64) -> String {
    match slots.first() {
        Some(&first) if slots.iter().all(|&s| s == first) => {
            format!("{first} slot{} each = {total}", if first == 1 { "" } else { "s" })
        }
        _ => format!("{total} slots in all"),
    }
}

/// `1 spare`, `2 spares`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `holds none` of one, `hold none` of several.
fn hold(n: usize) -> &'static str {
    if n == 1 {
        "holds none"
    } else {
        "hold none"
    }
}

/// Ranks per node, spread: the largest count minus the smallest, over `hosts` (empty hosts
/// count as 0).
pub fn spread(placement: &BTreeMap<u32, String>, hosts: &[String]) -> u32 {
    let counts: Vec<u32> = hosts
        .iter()
        .map(|h| placement.values().filter(|n| *n == h).count() as u32)
        .collect();
    counts.iter().max().unwrap_or(&0) - counts.iter().min().unwrap_or(&0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hosts(n: usize, cores: u32) -> Vec<Host> {
        (0..n)
            .map(|i| Host {
                name: format!("n{i}"),
                cores,
                slots: None,
            })
            .collect()
    }

    fn names(h: &[Host]) -> Vec<String> {
        h.iter().map(|h| h.name.clone()).collect()
    }

    /// Ranks on `node`.
    fn on(p: &BTreeMap<u32, String>, node: &str) -> u32 {
        p.values().filter(|n| *n == node).count() as u32
    }

    /// A status listing a node twice (a coordinator's bug) must not double its slots: the
    /// job that does not fit is refused, not placed until the supervisor panics.
    #[test]
    fn a_node_listed_twice_counts_once() {
        let twice = |slots| {
            vec![
                Host {
                    name: "n0".into(),
                    cores: 1,
                    slots,
                },
                Host {
                    name: "n0".into(),
                    cores: 1,
                    slots,
                },
            ]
        };
        for policy in [Policy::Balanced, Policy::Pack] {
            assert_eq!(
                place(2, &twice(Some(1)), &BTreeMap::new(), policy),
                Err(Unplaced::Full { ranks: 2, slots: 1 })
            );
            let p = place(1, &twice(Some(1)), &BTreeMap::new(), policy).unwrap();
            assert_eq!(on(&p, "n0"), 1);
            let p = place(3, &twice(None), &BTreeMap::new(), policy).unwrap();
            assert_eq!(on(&p, "n0"), 3);
        }
    }

    #[test]
    fn balanced_spreads_and_pack_fills() {
        let h = hosts(4, 2);
        let b = place(6, &h, &BTreeMap::new(), Policy::Balanced).unwrap();
        assert_eq!(b[&0], "n0");
        assert_eq!(b[&1], "n1");
        assert_eq!(b[&4], "n0");
        assert_eq!(spread(&b, &names(&h)), 1);
        let p = place(6, &h, &BTreeMap::new(), Policy::Pack).unwrap();
        assert_eq!(
            (p[&0].as_str(), p[&1].as_str(), p[&2].as_str()),
            ("n0", "n0", "n1")
        );
        assert!(!p.values().any(|n| n == "n3"), "three nodes suffice: {p:?}");
        // Beyond every node's cores, pack spreads the rest evenly.
        let p = place(10, &h, &BTreeMap::new(), Policy::Pack).unwrap();
        assert_eq!(spread(&p, &names(&h)), 1);
        assert_eq!(
            place(1, &[], &BTreeMap::new(), Policy::Balanced),
            Err(Unplaced::NoHost)
        );
    }

    #[test]
    fn placed_ranks_stay_and_count() {
        let h = hosts(3, 1);
        let placed: BTreeMap<u32, String> = [(0, "n2".to_string()), (1, "n2".to_string())].into();
        let p = place(4, &h, &placed, Policy::Balanced).unwrap();
        assert_eq!((p[&0].as_str(), p[&1].as_str()), ("n2", "n2"));
        assert_eq!((p[&2].as_str(), p[&3].as_str()), ("n0", "n1"));
    }

    #[test]
    fn more_cores_take_more_ranks() {
        let h = vec![
            Host {
                name: "big".into(),
                cores: 4,
                slots: None,
            },
            Host {
                name: "small".into(),
                cores: 1,
                slots: None,
            },
        ];
        let p = place(5, &h, &BTreeMap::new(), Policy::Balanced).unwrap();
        assert_eq!(p.values().filter(|n| *n == "big").count(), 4);
    }

    /// The README's batch job: `--nodes=9 --ntasks-per-node=8`, `--k 6 --m 2 --spares 1
    /// -n 64`. The dedicated layout leaves ranks 6 data nodes (48 slots: it used to put 11
    /// on some), and says so before a cluster is made; the rotated one puts 8 on each of the
    /// 8 members, and a node the spare replaced leaves it so; a second loss, with no spare
    /// left, leaves 56 slots for 64 ranks.
    #[test]
    fn the_readme_allocation_fits_rotated_and_is_refused_dedicated() {
        let nodes: Vec<String> = (1..=9).map(|i| format!("node{i}")).collect();
        let slots: Slots = nodes.iter().map(|n| (n.clone(), 8)).collect();
        let members = &nodes[..8];
        let dedicated = CodingConfig {
            k: 6,
            m: 2,
            layout: Layout::Dedicated,
            ..CodingConfig::default()
        };
        let rotated = CodingConfig {
            layout: Layout::Rotated,
            ..dedicated
        };
        assert_eq!(rank_hosts(members, &dedicated, |_| None), nodes[..6].to_vec());
        assert_eq!(
            check_fit(64, members, 1, &slots, &dedicated, |_| None),
            Err(
                "64 ranks do not fit: the dedicated layout puts ranks on the 6 data nodes of 9 \
                 (2 parity nodes and 1 spare hold none), 8 slots each = 48; use --layout rotated \
                 (64 slots) or at most 48 ranks"
                    .to_string()
            )
        );
        assert_eq!(check_fit(48, members, 1, &slots, &dedicated, |_| None), Ok(()));
        let data: Vec<Host> = nodes[..6]
            .iter()
            .map(|n| Host {
                name: n.clone(),
                cores: 128,
                slots: Some(8),
            })
            .collect();
        assert_eq!(
            place(64, &data, &BTreeMap::new(), Policy::Balanced),
            Err(Unplaced::Full { ranks: 64, slots: 48 })
        );

        assert_eq!(rank_hosts(members, &rotated, |_| None), members.to_vec());
        assert_eq!(check_fit(64, members, 1, &slots, &rotated, |_| None), Ok(()));
        let host = |n: &String| Host {
            name: n.clone(),
            cores: 128,
            slots: Some(8),
        };
        for policy in [Policy::Balanced, Policy::Pack] {
            let p = place(
                64,
                &members.iter().map(host).collect::<Vec<_>>(),
                &BTreeMap::new(),
                policy,
            )
            .unwrap();
            assert!(members.iter().all(|n| on(&p, n) == 8), "{policy:?}: {p:?}");
        }
        // node3 lost: the spare took its position and its ranks.
        let mut placed = place(
            64,
            &members.iter().map(host).collect::<Vec<_>>(),
            &BTreeMap::new(),
            Policy::Balanced,
        )
        .unwrap();
        for node in placed.values_mut().filter(|n| *n == "node3") {
            *node = "node9".into();
        }
        let left: Vec<Host> = nodes.iter().filter(|n| *n != "node3").map(host).collect();
        assert_eq!(place(64, &left, &placed, Policy::Balanced), Ok(placed.clone()));
        // node5 lost too, no spare left: its 8 ranks cannot go anywhere.
        let left: Vec<Host> = left.into_iter().filter(|h| h.name != "node5").collect();
        let survivors: BTreeMap<u32, String> = placed.into_iter().filter(|(_, n)| n != "node5").collect();
        assert_eq!(
            place(64, &left, &survivors, Policy::Balanced),
            Err(Unplaced::Full { ranks: 64, slots: 56 })
        );
    }

    #[test]
    fn what_fits_is_named_when_nothing_does() {
        let nodes: Vec<String> = (1..=4).map(|i| format!("node{i}")).collect();
        let slots: Slots = nodes.iter().map(|n| (n.clone(), 2)).collect();
        let coding = |layout| CodingConfig {
            k: 2,
            m: 1,
            layout,
            ..CodingConfig::default()
        };
        // The Slurm simulation's 4 nodes × 2 tasks, k=2 m=1, 1 spare, -n 6.
        assert_eq!(
            check_fit(6, &nodes[..3], 1, &slots, &coding(Layout::Dedicated), |_| None),
            Err(
                "6 ranks do not fit: the dedicated layout puts ranks on the 2 data nodes of 4 \
                 (1 parity node and 1 spare hold none), 2 slots each = 4; use --layout rotated \
                 (6 slots) or at most 4 ranks"
                    .to_string()
            )
        );
        assert_eq!(
            check_fit(6, &nodes[..3], 1, &slots, &coding(Layout::Rotated), |_| None),
            Ok(())
        );
        assert_eq!(
            check_fit(7, &nodes[..3], 1, &slots, &coding(Layout::Rotated), |_| None),
            Err(
                "7 ranks do not fit: the rotated layout puts ranks on all 3 members of 4 \
                 (1 spare holds none), 2 slots each = 6; use at most 6 ranks, or more nodes or \
                 slots per node"
                    .to_string()
            )
        );
        let uneven: Slots = [("node1", 3), ("node2", 2), ("node3", 2)]
            .map(|(n, s)| (n.to_string(), s))
            .into();
        assert_eq!(
            check_fit(9, &nodes[..3], 0, &uneven, &coding(Layout::Dedicated), |_| None),
            Err(
                "9 ranks do not fit: the dedicated layout puts ranks on the 2 data nodes of 3 \
                 (1 parity node holds none), 5 slots in all; use at most 5 ranks (7 with \
                 --layout rotated), or more nodes or slots per node"
                    .to_string()
            )
        );
        // A node without slots takes any number.
        let some: Slots = [("node1".to_string(), 1)].into();
        assert_eq!(
            check_fit(100, &nodes[..3], 1, &some, &coding(Layout::Dedicated), |_| None),
            Ok(())
        );
        assert_eq!(
            tighter(uneven.clone(), &some),
            [("node1", 1), ("node2", 2), ("node3", 2)]
                .map(|(n, s)| (n.to_string(), s))
                .into()
        );
    }

    #[test]
    fn ranks_a_recovery_put_beyond_a_nodes_slots_are_named() {
        let mut h = hosts(2, 4);
        h[0].slots = Some(2);
        let placed: BTreeMap<u32, String> = (0..3).map(|r| (r, "n0".to_string())).collect();
        assert_eq!(
            place(4, &h, &placed, Policy::Balanced),
            Err(Unplaced::Over {
                node: "n0".into(),
                ranks: 3,
                slots: 2
            })
        );
    }

    proptest! {
        #[test]
        fn balanced_differs_by_at_most_one_with_equal_cores(
            world in 1u32..200, nodes in 1usize..40, cores in 1u32..8, pack in any::<bool>()
        ) {
            let h = hosts(nodes, cores);
            let policy = if pack { Policy::Pack } else { Policy::Balanced };
            let p = place(world, &h, &BTreeMap::new(), policy).unwrap();
            prop_assert_eq!(p.len() as u32, world);
            if !pack || world >= nodes as u32 * cores {
                prop_assert!(spread(&p, &names(&h)) <= 1, "{:?}", p);
            } else {
                // Pack never puts more ranks on a node than it has cores while any is free.
                for host in &h {
                    prop_assert!(p.values().filter(|n| **n == host.name).count() as u32 <= cores);
                }
            }
        }

        /// With slots, every rank is placed and none beyond its node's slots when they hold
        /// the job; otherwise nothing is placed, and the slots in all are said.
        #[test]
        fn no_node_runs_more_ranks_than_its_slots(
            world in 1u32..120,
            slots in proptest::collection::vec(proptest::option::weighted(0.9, 0u32..9), 1..16),
            cores in 1u32..64,
            pack in any::<bool>(),
            placed_count in 0u32..10,
        ) {
            let h: Vec<Host> = slots
                .iter()
                .enumerate()
                .map(|(i, &s)| Host { name: format!("n{i}"), cores, slots: s })
                .collect();
            // Ranks already placed, within the slots: round robin over the nodes with room.
            let mut placed = BTreeMap::new();
            let mut load = vec![0u32; h.len()];
            for rank in 0..placed_count.min(world) {
                if let Some(i) = (0..h.len()).find(|&i| h[i].slots.is_none_or(|s| load[i] < s)) {
                    load[i] += 1;
                    placed.insert(rank, h[i].name.clone());
                }
            }
            let policy = if pack { Policy::Pack } else { Policy::Balanced };
            let capacity: Option<u64> = slots.iter().map(|s| s.map(u64::from)).sum();
            match place(world, &h, &placed, policy) {
                Ok(p) => {
                    prop_assert_eq!(p.len() as u32, world);
                    for (rank, node) in &placed {
                        prop_assert_eq!(&p[rank], node);
                    }
                    for host in &h {
                        if let Some(s) = host.slots {
                            prop_assert!(on(&p, &host.name) <= s, "{} over {}: {:?}", host.name, s, p);
                        }
                    }
                    prop_assert!(capacity.is_none_or(|c| u64::from(world) <= c));
                }
                Err(Unplaced::Full { ranks, slots }) => {
                    prop_assert_eq!(ranks, world);
                    prop_assert_eq!(Some(slots), capacity);
                    prop_assert!(u64::from(world) > slots);
                }
                Err(other) => prop_assert!(false, "{:?}", other),
            }
        }
    }
}
