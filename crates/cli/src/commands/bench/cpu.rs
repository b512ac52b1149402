//! The CPU time a local cluster's agents spend, read from /proc: what protection costs the
//! cores a job runs on, beside the wall time of an epoch.

use std::path::Path;

use anyhow::{bail, Context, Result};
use eckpt_cluster_api::dirs::{read_pid_file, ClusterDir};

/// The agent processes of some nodes of a cluster on this host.
pub struct AgentCpu {
    pids: Vec<u32>,
}

impl AgentCpu {
    /// The agents of `nodes`, found by their pid files.
    pub fn of(dir: &ClusterDir, nodes: &[String]) -> Result<AgentCpu> {
        nodes
            .iter()
            .map(|n| {
                read_pid_file(&dir.node(n)).with_context(|| format!("node {n}: no agent pid on this host"))
            })
            .collect::<Result<_>>()
            .map(|pids| AgentCpu { pids })
    }

    /// User plus system CPU seconds the agents have used since they started, all threads
    /// (those that ended included).
    pub fn seconds(&self) -> Result<f64> {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        if ticks <= 0 {
            bail!("sysconf(_SC_CLK_TCK) failed");
        }
        let mut total = 0u64;
        for pid in &self.pids {
            let path = Path::new("/proc").join(pid.to_string()).join("stat");
            let stat = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
            total +=
                process_ticks(&stat).with_context(|| format!("{}: unexpected content", path.display()))?;
        }
        Ok(total as f64 / ticks as f64)
    }
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
    use super::{process_ticks, AgentCpu};

    #[test]
    fn a_busy_process_is_seen_spending_cpu() {
        let me = AgentCpu {
            pids: vec![std::process::id()],
        };
        let before = me.seconds().unwrap();
        let start = std::time::Instant::now();
        let mut x = 1u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let spent = me.seconds().unwrap() - before;
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
