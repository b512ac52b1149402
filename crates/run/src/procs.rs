//! The processes of a job on this machine, found in `/proc`: by the launch id `eckpt run`
//! puts in every rank's environment (`ECKPT_LAUNCH`), which also reaches what the ranks
//! and `mpirun`'s daemons start, and by network namespace (everything in a node's
//! namespace dies with the node).

use std::collections::BTreeMap;

/// Pids of live processes, this one excepted.
fn pids() -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .filter(|&p| p != me)
                .collect()
        })
        .unwrap_or_default()
}

/// A process's environment (empty if it is gone or not ours to read).
pub fn environ(pid: i32) -> BTreeMap<String, String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .filter_map(|kv| {
                    let kv = std::str::from_utf8(kv).ok()?;
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A process's network namespace (`net:[4026532…]`).
pub fn netns(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|p| p.display().to_string())
}

/// The rank a process of launch `launch` runs as (`ECKPT_RANK`, else Open MPI's), or
/// `None` for a process of the launch that is no rank (`mpirun`'s daemon).
fn rank_of(env: &BTreeMap<String, String>) -> Option<u32> {
    ["ECKPT_RANK", "OMPI_COMM_WORLD_RANK"]
        .iter()
        .find_map(|v| env.get(*v)?.parse().ok())
}

/// Processes of launch `launch`, with their rank if they are one.
pub fn of_launch(launch: &str) -> Vec<(i32, Option<u32>)> {
    pids()
        .into_iter()
        .filter_map(|pid| {
            let env = environ(pid);
            (env.get("ECKPT_LAUNCH").map(String::as_str) == Some(launch)).then(|| (pid, rank_of(&env)))
        })
        .collect()
}

/// Processes of every launch of run `run_id` (launch ids `<run_id>-<attempt>`).
pub fn of_run(run_id: &str) -> Vec<(i32, Option<u32>)> {
    let prefix = format!("{run_id}-");
    pids()
        .into_iter()
        .filter_map(|pid| {
            let env = environ(pid);
            env.get("ECKPT_LAUNCH")
                .is_some_and(|l| l.starts_with(&prefix))
                .then(|| (pid, rank_of(&env)))
        })
        .collect()
}

/// SIGKILLs every process of run `run_id` on this host (ranks, what they started, `mpirun`
/// and its daemons), pass after pass — a process may fork while one runs — until none is
/// left or `until`; how many it killed. A killed process whose parent has not reaped it
/// shows no environment, so is not found again.
pub fn end_run(run_id: &str, until: std::time::Instant) -> usize {
    let mut killed = 0;
    loop {
        let found = of_run(run_id);
        if found.is_empty() || std::time::Instant::now() > until {
            return killed;
        }
        for (pid, _) in found {
            kill(pid);
            killed += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Ranks of launch `launch` that have a process on this host now.
pub fn running_ranks(launch: &str) -> std::collections::BTreeSet<u32> {
    of_launch(launch)
        .into_iter()
        .filter_map(|(_, rank)| rank)
        .collect()
}

/// Processes in network namespace `ns`.
pub fn in_netns(ns: &str) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|&pid| netns(pid as u32).as_deref() == Some(ns))
        .collect()
}

/// SIGKILLs `pid`.
pub fn kill(pid: i32) {
    // SAFETY: kill(2) has no memory effects; a pid that is gone is an ignored error.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}
