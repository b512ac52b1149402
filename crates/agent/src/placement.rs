//! Where an agent runs on its host's cores, so that protecting a job takes as little as
//! possible from the ranks computing beside it: a nice value (under contention the ranks
//! get the cores first) and a set of cores (`--agent-cpus`: cores set aside for the agent,
//! or kept off the ranks' cores). Recorded in `cluster.json` ([`AgentPlacement`]), so every
//! agent of the cluster — started by `eckpt up`, `eckpt run`, srun or by hand — applies the
//! same, before its runtime starts the threads that inherit it — and how many threads an
//! agent codes each chunk on (`--agent-threads`, [`coding_threads`]).

use eckpt_cluster_api::dirs::AgentPlacement;
use eckpt_cluster_api::ClusterError;

/// The CPUs of a list such as `0-3,8,10-11`, in order, each once; an empty, reversed or
/// malformed range is refused in one line.
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, ClusterError> {
    let bad = |why: &str| ClusterError::Invalid(format!("CPU list {text:?}: {why} (expected e.g. 0-3,8)"));
    let number = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| bad(&format!("{:?} is not a CPU number", s.trim())))
    };
    let mut cpus = Vec::new();
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => (number(part)?, number(part)?),
        };
        if last < first {
            return Err(bad(&format!("range {first}-{last} runs backwards")));
        }
        if last >= libc::CPU_SETSIZE as usize {
            return Err(bad(&format!(
                "CPU {last} is beyond the {} a set can hold",
                libc::CPU_SETSIZE
            )));
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPUs of `list`, each checked to be one this process may run on (on this host): the
/// kernel would take a set with some CPUs missing without a word and run the agent on the
/// others.
pub fn usable_cpus(list: &str) -> Result<Vec<usize>, ClusterError> {
    let cpus = parse_cpu_list(list)?;
    // SAFETY: sched_getaffinity fills the zeroed set we own; CPU_ISSET reads it at indices
    // below CPU_SETSIZE (checked by the parser).
    let allowed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(ClusterError::Internal(format!(
                "reading this process's CPUs: {}",
                std::io::Error::last_os_error()
            )));
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect::<Vec<usize>>()
    };
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(missing) => Err(ClusterError::Invalid(format!(
            "agent CPUs {list:?}: CPU {missing} is not one this host lets it use ({})",
            describe(&allowed)
        ))),
        None => Ok(cpus),
    }
}

/// `0-3,8` for CPUs 0, 1, 2, 3 and 8.
fn describe(cpus: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &c in cpus {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == c => *last = c,
            _ => runs.push((c, c)),
        }
    }
    runs.iter()
        .map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
        .collect::<Vec<_>>()
        .join(",")
}

/// The threads an agent codes each chunk on: `placement`'s, else one per core this process
/// may run on (after [`apply`], the cores set aside for it).
pub fn coding_threads(placement: &AgentPlacement) -> usize {
    placement
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// Applies `placement` to the calling thread — call it before any other thread starts, so
/// that they all inherit it. A CPU this host lacks, or a nice value the process may not
/// take, is an error: an agent that silently ran on the ranks' cores would be worse.
pub fn apply(placement: &AgentPlacement) -> Result<(), ClusterError> {
    if let Some(list) = &placement.cpus {
        let cpus = usable_cpus(list)?;
        // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET is given indices below
        // CPU_SETSIZE (checked by the parser); sched_setaffinity reads the set we pass.
        let result = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in &cpus {
                libc::CPU_SET(cpu, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if result != 0 {
            return Err(ClusterError::Refused(format!(
                "agent CPUs {list:?}: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    if let Some(nice) = placement.nice {
        // SAFETY: setpriority on the calling thread (who 0) only.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0 {
            return Err(ClusterError::Refused(format!(
                "agent nice {nice}: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges_parse_and_nonsense_is_refused() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("3,0-2, 2").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpu_list("8-10").unwrap(), vec![8, 9, 10]);
        for bad in ["", "a", "1-", "3-1", "0,,1", "-1", "99999"] {
            let e = parse_cpu_list(bad).unwrap_err().to_string();
            assert!(e.contains("CPU list") && !e.contains('\n'), "{bad:?}: {e}");
        }
        assert_eq!(describe(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
    }

    #[test]
    fn a_cpu_this_process_may_not_use_is_named() {
        let e = usable_cpus("1000").unwrap_err().to_string();
        assert!(e.contains("CPU 1000 is not one this host lets it use"), "{e}");
        assert_eq!(usable_cpus("0").unwrap(), vec![0]);
    }
}
