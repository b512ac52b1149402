//! Host lists in Slurm's compressed syntax (`node[0001-4096]`): what `eckpt run` passes to
//! `srun --nodelist`. Spelled out, 4,096 node names make a command line of tens of
//! kilobytes that Slurm then parses name by name; compressed, a regular allocation is one
//! short range. Slurm expands them itself (`scontrol show hostnames`), so only compression
//! is eckpt's.

use std::collections::BTreeMap;

/// `names` as a Slurm host list: names that differ only in a trailing number of the same
/// width are written as ranges (`n[1-3,7]`, `node[0001-4096]`), others as they are. A host
/// list is a set: the order is Slurm's (by name), not `names`'.
pub fn compress(names: &[String]) -> String {
    // By prefix and width of the number: `node09` and `node10` (width 2) share a range,
    // `node9` and `node10` do not, so that each keeps its own spelling.
    let mut numbered: BTreeMap<(&str, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<&str> = Vec::new();
    for name in names {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = name.split_at(name.len() - digits);
        match number.parse::<u64>() {
            Ok(n) if digits > 0 => numbered.entry((prefix, digits)).or_default().push(n),
            _ => plain.push(name),
        }
    }
    let mut parts: Vec<String> = plain.iter().map(|n| n.to_string()).collect();
    for ((prefix, width), mut numbers) in numbered {
        numbers.sort_unstable();
        numbers.dedup();
        if let [only] = numbers[..] {
            parts.push(format!("{prefix}{only:0width$}"));
            continue;
        }
        let ranges: Vec<String> = runs(&numbers)
            .into_iter()
            .map(|(first, last)| {
                if first == last {
                    format!("{first:0width$}")
                } else {
                    format!("{first:0width$}-{last:0width$}")
                }
            })
            .collect();
        parts.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    parts.join(",")
}

/// `numbers` (sorted, distinct) as runs of consecutive numbers, first and last of each.
fn runs(numbers: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == n => *last = n,
            _ => runs.push((n, n)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    /// Expands the host lists [`compress`] writes (a reference for the tests; Slurm expands
    /// them in the product).
    fn expand(list: &str) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        let mut rest = list;
        while !rest.is_empty() {
            let (part, after) = match (rest.find('['), rest.find(',')) {
                (Some(open), comma) if comma.is_none_or(|c| open < c) => {
                    let close = rest.find(']').unwrap() + 1;
                    (&rest[..close], rest[close..].trim_start_matches(','))
                }
                (_, Some(comma)) => (&rest[..comma], &rest[comma + 1..]),
                (_, None) => (rest, ""),
            };
            match part.split_once('[') {
                Some((prefix, ranges)) => {
                    for range in ranges.trim_end_matches(']').split(',') {
                        let (first, last) = range.split_once('-').unwrap_or((range, range));
                        let width = first.len();
                        for n in first.parse::<u64>().unwrap()..=last.parse::<u64>().unwrap() {
                            names.insert(format!("{prefix}{n:0width$}"));
                        }
                    }
                }
                None => {
                    names.insert(part.to_string());
                }
            }
            rest = after;
        }
        names
    }

    fn names(spelled: impl IntoIterator<Item = String>) -> Vec<String> {
        spelled.into_iter().collect()
    }

    #[test]
    fn an_allocation_of_4096_nodes_is_one_range() {
        let padded = names((1..=4096).map(|i| format!("node{i:04}")));
        assert_eq!(compress(&padded), "node[0001-4096]");
        let natural = names((1..=4096).map(|i| format!("node{i}")));
        assert_eq!(
            compress(&natural),
            "node[1-9],node[10-99],node[100-999],node[1000-4096]"
        );
        assert_eq!(expand(&compress(&natural)).len(), 4096);
    }

    #[test]
    fn gaps_other_prefixes_and_names_without_a_number_are_kept() {
        let list =
            names(["n3", "n1", "n2", "n7", "rack2-n01", "rack2-n02", "login", "gpu5"].map(String::from));
        assert_eq!(compress(&list), "login,gpu5,n[1-3,7],rack2-n[01-02]");
        assert_eq!(compress(&names(["node1".to_string()])), "node1");
    }

    proptest! {
        /// Whatever the names, Slurm's expansion of the list is exactly the names.
        #[test]
        fn a_compressed_list_expands_to_its_names(
            spelled in proptest::collection::vec(("[a-z]{1,3}", 0u64..300, 1usize..5), 1..60)
        ) {
            let list: Vec<String> = spelled
                .iter()
                .map(|(prefix, n, width)| format!("{prefix}{n:0width$}"))
                .collect();
            let expected: BTreeSet<String> = list.iter().cloned().collect();
            prop_assert_eq!(expand(&compress(&list)), expected);
        }
    }
}
