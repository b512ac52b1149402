//! The hosts a job's cluster is made of, as users already write them for their MPI: a host
//! file (Open MPI's `host slots=N`, MPICH's `host:N`, one host per line, `#` comments) or a
//! comma-separated node list. Each host becomes a node of the cluster named after it; a
//! host listed twice is one node. A host's count (`slots=N`, `:N`; summed over its lines, as
//! both MPIs do) is the most ranks it may run; a host listed without one has no limit.

use crate::placement::Slots;
use crate::RunError;

/// The hosts of host-file text `text`, in order, each once.
pub fn parse(text: &str) -> Vec<String> {
    let mut hosts: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let Some(word) = line.split_whitespace().next() else {
            continue;
        };
        let host = word.split(':').next().unwrap_or_default();
        if !host.is_empty() && !hosts.iter().any(|h| h == host) {
            hosts.push(host.to_string());
        }
    }
    hosts
}

/// The slots of host-file text `text`: each host's count, where every line of it gives one.
pub fn slots(text: &str) -> Slots {
    let mut counts: std::collections::BTreeMap<String, Option<u32>> = Default::default();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let Some(word) = words.next() else {
            continue;
        };
        let (host, mpich) = match word.split_once(':') {
            Some((host, count)) => (host, count.parse::<u32>().ok()),
            None => (word, None),
        };
        if host.is_empty() {
            continue;
        }
        let open_mpi = words.find_map(|w| w.strip_prefix("slots=")?.parse::<u32>().ok());
        let count = mpich.or(open_mpi);
        counts
            .entry(host.to_string())
            .and_modify(|sum| *sum = sum.zip(count).map(|(a, b)| a + b))
            .or_insert(count);
    }
    counts
        .into_iter()
        .filter_map(|(host, count)| Some((host, count?)))
        .collect()
}

/// The hosts of the host file at `path`, and their slots.
pub fn read(path: &std::path::Path) -> Result<(Vec<String>, Slots), RunError> {
    let text = std::fs::read_to_string(path).map_err(|e| RunError::io(path, e))?;
    let hosts = parse(&text);
    if hosts.is_empty() {
        return Err(RunError::Launch(format!(
            "{}: no host in the host file",
            path.display()
        )));
    }
    Ok((hosts, slots(&text)))
}

/// The hosts of a node list `a,b,c`.
pub fn from_list(list: &str) -> Vec<String> {
    parse(&list.replace(',', "\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_mpi_and_mpich_host_files_give_their_hosts_once_each() {
        let open_mpi = "# the job's nodes\nnode1 slots=4\nnode2 slots=4 max_slots=8\n\n  node3\n";
        assert_eq!(parse(open_mpi), ["node1", "node2", "node3"]);
        let mpich = "node1:2\nnode2:2\nnode1:1  # again\n";
        assert_eq!(parse(mpich), ["node1", "node2"]);
        assert_eq!(from_list("a,b,,c,a"), ["a", "b", "c"]);
        assert!(parse("# nothing\n\n").is_empty());
    }

    #[test]
    fn a_hosts_count_is_its_slots_summed_over_its_lines() {
        let open_mpi = "node1 slots=4\nnode2 slots=2 max_slots=8\nnode3\nnode1 slots=1\n";
        let want: Slots = [("node1".to_string(), 5), ("node2".to_string(), 2)].into();
        assert_eq!(slots(open_mpi), want, "node3 gives no count: no limit");
        let mpich = "node1:2\nnode2:3 # two cores\nnode1:1\nnode3\nnode3:4\n";
        let want: Slots = [("node1".to_string(), 3), ("node2".to_string(), 3)].into();
        assert_eq!(slots(mpich), want, "node3 once without a count: no limit");
        assert!(slots("a\nb\n").is_empty());
    }
}
