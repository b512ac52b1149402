//! The decisions the coordinator takes and `eckpt model` predicts, in one place: how nodes
//! form groups (across failure domains when they are known), the chunk of a full encode,
//! and whether an epoch is coded as an update.
//! Both call these functions, so a prediction cannot drift from what a cluster does.

use std::collections::BTreeMap;

use crate::config::Layout;
use crate::geometry::Geometry;

/// A small object's chunk is a multiple of this (a page).
pub const CHUNK_ROUND: u64 = 4096;

/// The order of node names, in which groups are formed and spares and hosts are taken:
/// `n2` before `n10` (the leading text, then the first number, then the rest).
pub fn natural_key(name: &str) -> (String, u64, String) {
    let digits_at = name.find(|c: char| c.is_ascii_digit()).unwrap_or(name.len());
    let (prefix, rest) = name.split_at(digits_at);
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    let number = rest[..end].parse().unwrap_or(0);
    (prefix.to_string(), number, rest[end..].to_string())
}

/// The sizes of the groups `n` nodes form for a code of `k` data and `m` parity members,
/// as `(data members, members)`: as many groups of `k + m` as fit, the remainder spread
/// over them as extra data members. Fewer than `m + 1` nodes cannot be protected: none.
pub fn group_sizes(n: usize, k: usize, m: usize) -> Vec<(usize, usize)> {
    if n <= m {
        return Vec::new();
    }
    let groups = (n / (k + m)).max(1);
    let (base, extra) = (n / groups, n % groups);
    (0..groups)
        .map(|g| {
            let size = base + usize::from(g < extra);
            (size - m, size)
        })
        .collect()
}

/// Splits `nodes` into groups of the sizes [`group_sizes`] gives, as `(data members,
/// members)` per group, members in natural order.
///
/// Without failure domains (`domain_of` answers `None` for every node) a group takes the
/// next nodes in natural order. With them — a rack, a chassis, a switch or a power supply
/// that takes all its nodes down at once — each domain's nodes are dealt over the groups in
/// turn, the largest domain first, each node to the group with the fewest of its domain that
/// has room: a group then holds at most ⌈d / groups⌉ nodes of a domain of `d` nodes where
/// the sizes allow, and losing the domain costs each group that many members rather than a
/// whole group (SCR's redundancy sets are formed across failure groups the same way). A node
/// without a domain is a domain of its own.
pub fn form_groups(
    nodes: &[String],
    k: usize,
    m: usize,
    domain_of: impl Fn(&str) -> Option<String>,
) -> Vec<(usize, Vec<String>)> {
    let mut sorted = nodes.to_vec();
    sorted.sort_by_key(|n| natural_key(n));
    let sizes = group_sizes(sorted.len(), k, m);
    if sizes.is_empty() {
        return Vec::new();
    }
    if sorted.iter().all(|n| domain_of(n).is_none()) {
        let mut at = 0;
        return sizes
            .into_iter()
            .map(|(data, size)| {
                at += size;
                (data, sorted[at - size..at].to_vec())
            })
            .collect();
    }
    let mut domains: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for node in sorted {
        domains
            .entry(domain_of(&node).unwrap_or_else(|| node.clone()))
            .or_default()
            .push(node);
    }
    let mut order: Vec<Vec<String>> = domains.into_values().collect();
    // Largest first; among equals, the order of their first node.
    order.sort_by(|a, b| {
        b.len()
            .cmp(&a.len())
            .then_with(|| natural_key(&a[0]).cmp(&natural_key(&b[0])))
    });
    let mut groups: Vec<Vec<String>> = sizes.iter().map(|&(_, size)| Vec::with_capacity(size)).collect();
    for domain in order {
        let mut here = vec![0usize; groups.len()];
        for node in domain {
            let g = (0..groups.len())
                .filter(|&g| groups[g].len() < sizes[g].1)
                .min_by_key(|&g| (here[g], groups[g].len(), g))
                .expect("the sizes hold every node");
            here[g] += 1;
            groups[g].push(node);
        }
    }
    sizes
        .into_iter()
        .zip(groups)
        .map(|((data, _), mut members)| {
            members.sort_by_key(|n| natural_key(n));
            (data, members)
        })
        .collect()
}

/// The failure domain of which `members` (one group) hold more than `m` nodes, with how
/// many: losing that domain loses data the group's code cannot rebuild.
pub fn overexposed(
    members: &[String],
    m: usize,
    domain_of: impl Fn(&str) -> Option<String>,
) -> Option<(String, usize)> {
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    for node in members {
        if let Some(domain) = domain_of(node) {
            *count.entry(domain).or_default() += 1;
        }
    }
    // The most exposed; among equals, the first by name.
    count
        .into_iter()
        .filter(|(_, n)| *n > m)
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
}

/// The chunk of a full encode whose longest data shard is `longest` bytes. A small object
/// (a stripe of a few changed pages) gets a smaller chunk, since padding each shard to whole
/// configured chunks would move mostly zeros: a member holds data in `per_cycle` rows of
/// each cycle (1 dedicated, `k` rotated), so its shard is cut in at least that many chunks,
/// each a multiple of [`CHUNK_ROUND`] and at most the configured chunk.
pub fn chunk_size(layout: Layout, k: usize, m: usize, longest: u64, configured: u32) -> u32 {
    let probe = Geometry::new(layout, k, m, 1);
    let per_cycle = (0..k + m).map(|x| probe.data_chunks(x)).max().unwrap_or(1).max(1);
    let rounded = longest.div_ceil(per_cycle).div_ceil(CHUNK_ROUND).max(1) * CHUNK_ROUND;
    rounded.min(u64::from(configured)) as u32
}

/// Whether updating is cheaper than encoding anew, for a group whose data members changed
/// `changed` bytes in all and whose longest data shard is `longest`: an update sends every
/// changed byte of a row into each of its parity holders, a full pipeline encode sends
/// `m·D` over each data member's link (an epoch that rewrites most pages is not worth
/// updating).
pub fn update_is_cheaper(changed: u64, m: usize, longest: u64) -> bool {
    changed < m as u64 * longest
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    /// Domains of `per` consecutive nodes each: n0, n1 in d0, n2, n3 in d1, …
    fn consecutive_domains(per: usize) -> impl Fn(&str) -> Option<String> {
        move |n: &str| Some(format!("d{}", n[1..].parse::<usize>().unwrap() / per))
    }

    #[test]
    fn without_domains_groups_take_nodes_in_natural_order() {
        let g = form_groups(&names(6), 4, 2, |_| None);
        assert_eq!(g, vec![(4, names(6))]);
        let g = form_groups(&names(13), 4, 2, |_| None);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].1, names(7));
        assert_eq!(g[1].1, names(13)[7..].to_vec());
        assert!(form_groups(&names(2), 4, 2, |_| None).is_empty());
    }

    #[test]
    fn a_domain_of_two_is_spread_over_two_groups_of_m_1() {
        // 4 racks of 2 nodes, k=3 m=1: consecutive groups {n0..n3} {n4..n7} hold 2 nodes of
        // rack d0 — losing it loses group 1. Spread, each group holds one node per rack.
        let domain_of = consecutive_domains(2);
        let consecutive = form_groups(&names(8), 3, 1, |_| None);
        assert_eq!(
            overexposed(&consecutive[0].1, 1, &domain_of),
            Some(("d0".into(), 2))
        );
        let spread = form_groups(&names(8), 3, 1, &domain_of);
        assert_eq!(spread.len(), 2);
        for (k, members) in &spread {
            assert_eq!((*k, members.len()), (3, 4));
            assert_eq!(
                overexposed(members, 1, &domain_of),
                None,
                "one node per rack: {members:?}"
            );
        }
    }

    proptest! {
        /// Every node in exactly one group, the sizes of `group_sizes`, and no group with more
        /// of a domain than an even deal gives.
        #[test]
        fn domains_are_dealt_evenly(n in 1usize..40, k in 1usize..8, m in 1usize..4, per in 1usize..6) {
            let nodes = names(n);
            let domain_of = consecutive_domains(per);
            let groups = form_groups(&nodes, k, m, &domain_of);
            let sizes = group_sizes(n, k, m);
            prop_assert_eq!(groups.len(), sizes.len());
            let mut all: Vec<String> = groups.iter().flat_map(|(_, g)| g.clone()).collect();
            all.sort_by_key(|n| natural_key(n));
            if !sizes.is_empty() {
                prop_assert_eq!(&all, &nodes);
            }
            for ((data, members), (want_data, size)) in groups.iter().zip(&sizes) {
                prop_assert_eq!((*data, members.len()), (*want_data, *size));
                let mut per_domain: BTreeMap<String, usize> = BTreeMap::new();
                for node in members {
                    *per_domain.entry(domain_of(node).unwrap()).or_default() += 1;
                }
                for (domain, count) in per_domain {
                    let d = nodes.iter().filter(|x| domain_of(x).unwrap() == domain).count();
                    prop_assert!(count <= d.div_ceil(sizes.len()), "{} has {} of {}", domain, count, d);
                }
            }
        }
    }

    #[test]
    fn node_names_sort_by_their_number() {
        let mut names = vec!["n10", "n2", "rack1-n3", "n2b", "n1", "node"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, vec!["n1", "n2", "n2b", "n10", "node", "rack1-n3"]);
    }

    #[test]
    fn groups_are_full_codes_with_the_remainder_spread_as_data_members() {
        assert_eq!(group_sizes(6, 4, 2), vec![(4, 6)]);
        assert_eq!(group_sizes(13, 4, 2), vec![(5, 7), (4, 6)]);
        assert_eq!(
            group_sizes(4, 4, 2),
            vec![(2, 4)],
            "fewer than k + m: one smaller group"
        );
        assert!(group_sizes(2, 4, 2).is_empty(), "m nodes protect nothing");
        for n in 3..200 {
            let sizes = group_sizes(n, 4, 2);
            assert_eq!(
                sizes.iter().map(|s| s.1).sum::<usize>(),
                n,
                "every node in a group"
            );
            assert!(sizes.iter().all(|&(k, size)| size - k == 2));
        }
    }

    #[test]
    fn a_small_object_gets_a_small_page_multiple_chunk() {
        let mib = 1 << 20;
        assert_eq!(chunk_size(Layout::Dedicated, 4, 2, 0, mib), 4096);
        assert_eq!(chunk_size(Layout::Dedicated, 4, 2, 100, mib), 4096);
        assert_eq!(chunk_size(Layout::Dedicated, 4, 2, 10_000, mib), 12_288);
        // Rotated: a member holds data in k = 4 rows of a cycle, so its shard is cut in 4.
        assert_eq!(chunk_size(Layout::Rotated, 4, 2, 40_000, mib), 12_288);
        assert_eq!(chunk_size(Layout::Rotated, 4, 2, 70_000, mib), 20_480);
        assert_eq!(chunk_size(Layout::Dedicated, 4, 2, 40_000, mib), 40_960);
        // Large objects use the configured chunk.
        assert_eq!(chunk_size(Layout::Dedicated, 4, 2, 1 << 30, mib), mib);
        assert_eq!(chunk_size(Layout::Rotated, 4, 2, 1 << 30, mib), mib);
        assert_eq!(
            chunk_size(Layout::Dedicated, 4, 2, 100, 1024),
            1024,
            "never above the configured chunk"
        );
    }

    #[test]
    fn an_update_is_chosen_only_below_m_shards_of_change() {
        assert!(update_is_cheaper(0, 2, 1000));
        assert!(update_is_cheaper(1999, 2, 1000));
        assert!(!update_is_cheaper(2000, 2, 1000));
        assert!(!update_is_cheaper(1, 1, 0), "an empty base is never updated");
    }
}
