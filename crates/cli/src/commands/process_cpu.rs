//! The CPU time of processes on this host, read from /proc: what a local cluster's agents
//! spend (the cores protection takes from a job) beside the wall time of what they did.

use anyhow::{bail, Context, Result};
use eckpt_cluster_api::dirs::{read_pid_file, ClusterDir};

/// The process id of node `name`'s agent, from its pid file: it must run on this host (its
/// CPU time is read from /proc).
pub fn agent_pid(dir: &ClusterDir, name: &str) -> Result<u32> {
    read_pid_file(&dir.node(name))
        .with_context(|| format!("agent {name} has no process on this host to measure"))
}

/// User plus system CPU seconds process `pid` has used since it started, all threads (those
/// that ended included).
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    let ticks = process_ticks(&stat).with_context(|| format!("{path}: unexpected content"))?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if per_second <= 0 {
        bail!("sysconf(_SC_CLK_TCK) failed");
    }
    Ok(ticks as f64 / per_second as f64)
}

/// [`cpu_seconds`] of processes `pids`, together.
pub fn cpu_seconds_of_all(pids: &[u32]) -> Result<f64> {
    pids.iter().map(|&p| cpu_seconds(p)).sum()
}

/// utime + stime, in clock ticks, of a `/proc/PID/stat` line. The command name (field 2) is
/// in parentheses and may hold spaces or parentheses itself: fields are counted after the
/// last `)`, where field 3 (the state) comes first and utime and stime are fields 14 and 15.
fn process_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::{cpu_seconds, process_ticks};

    #[test]
    fn a_busy_process_is_seen_spending_cpu() {
        let me = std::process::id();
        let before = cpu_seconds(me).unwrap();
        let start = std::time::Instant::now();
        let mut x = 1u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let spent = cpu_seconds(me).unwrap() - before;
        // At least a share of the 300 ms, even on a loaded machine.
        assert!(spent >= 0.05, "{spent} s");
    }

    #[test]
    fn ticks_are_read_past_a_command_name_with_spaces_and_parentheses() {
        let line = "4242 (eckpt (agent) x) S 1 4242 4242 0 -1 4194560 1200 0 3 0 731 89 0 0 20 0 9 0 5000 \
                    1000000 2000 18446744073709551615 1 1 0 0 0 0 0 4096 17448 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(process_ticks(line), Some(731 + 89));
        assert_eq!(process_ticks("4242 (truncated) S 1 2"), None);
    }
}
