//! Where a job's ranks start: a pure decision over the nodes that can host ranks (alive
//! members at a data position), so it is property-tested. Ranks the cluster already placed
//! (a checkpointed job resuming) stay where their data is; only new ranks are placed.

use std::collections::BTreeMap;

/// A node that can host ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// Node name.
    pub name: String,
    /// Cores it offers ranks.
    pub cores: u32,
}

/// How new ranks are spread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    /// Ranks per core as even as possible: with equal cores, ranks per node differ by at most
    /// one (each rank to the least loaded node, ties in name order).
    #[default]
    Balanced,
    /// Fill each node up to its cores before the next (fewer nodes talk over the network);
    /// beyond every node's cores, balanced.
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
/// count towards its load). `None` when there is no host.
pub fn place(
    world: u32,
    hosts: &[Host],
    placed: &BTreeMap<u32, String>,
    policy: Policy,
) -> Option<BTreeMap<u32, String>> {
    if hosts.is_empty() {
        return None;
    }
    let mut hosts = hosts.to_vec();
    hosts.sort_by_key(|h| natural_key(&h.name));
    let mut load: BTreeMap<&str, u32> = hosts.iter().map(|h| (h.name.as_str(), 0)).collect();
    for node in placed.values() {
        if let Some(l) = load.get_mut(node.as_str()) {
            *l += 1;
        }
    }
    let mut out = placed.clone();
    for rank in (0..world).filter(|r| !placed.contains_key(r)) {
        let free = hosts.iter().find(|h| load[h.name.as_str()] < h.cores.max(1));
        let host = match (policy, free) {
            (Policy::Pack, Some(h)) => h,
            _ => hosts
                .iter()
                .min_by(|a, b| {
                    let la = f64::from(load[a.name.as_str()]) / f64::from(a.cores.max(1));
                    let lb = f64::from(load[b.name.as_str()]) / f64::from(b.cores.max(1));
                    la.total_cmp(&lb)
                })
                .expect("hosts is not empty"),
        };
        *load.get_mut(host.name.as_str()).expect("every host has a load") += 1;
        out.insert(rank, host.name.clone());
    }
    Some(out)
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
            })
            .collect()
    }

    fn names(h: &[Host]) -> Vec<String> {
        h.iter().map(|h| h.name.clone()).collect()
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
        assert!(place(1, &[], &BTreeMap::new(), Policy::Balanced).is_none());
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
            },
            Host {
                name: "small".into(),
                cores: 1,
            },
        ];
        let p = place(5, &h, &BTreeMap::new(), Policy::Balanced).unwrap();
        assert_eq!(p.values().filter(|n| *n == "big").count(), 4);
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
    }
}
