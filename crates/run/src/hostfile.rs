//! The hosts a job's cluster is made of, as users already write them for their MPI: a host
//! file (Open MPI's `host slots=N`, MPICH's `host:N`, one host per line, `#` comments) or a
//! comma-separated node list. Each host becomes a node of the cluster named after it; a
//! host listed twice is one node.

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

/// The hosts of the host file at `path`.
pub fn read(path: &std::path::Path) -> Result<Vec<String>, RunError> {
    let text = std::fs::read_to_string(path).map_err(|e| RunError::io(path, e))?;
    let hosts = parse(&text);
    if hosts.is_empty() {
        return Err(RunError::Launch(format!(
            "{}: no host in the host file",
            path.display()
        )));
    }
    Ok(hosts)
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
}
