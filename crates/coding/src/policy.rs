//! The decisions the coordinator takes and `eckpt model` predicts, in one place: how nodes
//! form groups, the chunk of a full encode, and whether an epoch is coded as an update.
//! Both call these functions, so a prediction cannot drift from what a cluster does.

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
