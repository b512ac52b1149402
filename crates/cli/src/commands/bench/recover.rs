//! `eckpt bench cluster --recover`: after the cluster bench's epochs, `m` data-holding
//! nodes of the first group die with their disks (SIGKILL + wipe); the benchmark waits until
//! the coordinator sees them gone and runs `eckpt recover`, which decodes their data in
//! parallel from the survivors onto spares (`--spares m`) or, per process, onto the
//! survivors, and restores redundancy.
//!
//! With `--memory-limit`, every agent alive at the recovery is moved (after the epochs,
//! before the kill) into a memory cgroup of its own with that limit, and reports the most it
//! was charged while recovering; an agent over its limit is killed, and the recovery fails.
//!
//! `recover_efficiency` = bytes the decode moved over its busiest link (the most any node
//! sent or received in the decode tasks) ÷ the link rate measured in the same run ÷ the
//! decode tasks' seconds: 1.0 means the decode ran at link speed.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use eckpt_cluster::launch;
use eckpt_cluster_api::dirs::{read_pid_file, ClusterDir};
use eckpt_cluster_api::msg::{Recover, RecoveryReport, Relocation, Status};
use serde::Serialize;

use super::cgroup::MemoryCgroup;
use super::cluster::coordinator;
use crate::commands::process_cpu::{agent_pid, cpu_seconds_of_all};

/// What a recovery cost.
#[derive(Serialize)]
pub struct Recovery {
    /// The nodes that died.
    pub lost: Vec<String>,
    /// Where their data was decoded: `spares` or `survivors`.
    pub onto: &'static str,
    /// From the kill to the coordinator seeing every lost node gone.
    pub detect_seconds: f64,
    /// The parallel decode (its tasks, before anything is installed).
    pub decode_seconds: f64,
    /// Installing the rebuilt images (and moving ranks), after the decode.
    pub install_seconds: f64,
    /// Encoding the new groups.
    pub reencode_seconds: f64,
    /// From the kill to redundancy restored (the recovery's journal write).
    pub restored_seconds: f64,
    /// The most payload any node sent or received in the decode.
    pub decode_link_bytes: u64,
    /// `decode_link_bytes` over the measured link rate, divided by `decode_seconds`.
    pub recover_efficiency: f64,
    /// The same against the nominal `link_rate`.
    pub recover_efficiency_nominal: Option<f64>,
    /// Payload bytes (sent, received) per node in the decode.
    pub decode_traffic: BTreeMap<String, (u64, u64)>,
    /// Where each lost node's ranks live now.
    pub rebuilt: Vec<(String, BTreeMap<u32, String>)>,
    /// CPU seconds every agent left alive spent in the recovery (decode, install,
    /// re-encode), per GB (10⁹ bytes) of the lost nodes' rank data.
    pub agent_cpu_seconds_per_gb: f64,
    /// With `--memory-limit`: the limit each surviving or spare agent recovered under.
    pub memory_limit: Option<u64>,
    /// The most memory (anonymous and page cache) each such agent was charged while
    /// recovering.
    pub memory_peaks: BTreeMap<String, u64>,
    /// Each such agent's peak resident set while recovering (`VmHWM`, reset when it was
    /// confined): its own memory, without the page cache of the files it read and wrote.
    pub rss_peaks: BTreeMap<String, u64>,
}

/// Puts every agent alive at the recovery, but those about to die, in a memory cgroup of
/// its own limited to `limit` bytes; the cgroups go in `cgroups` (removed once the cluster
/// is down).
pub fn confine(
    rt: &tokio::runtime::Runtime,
    dir_path: &Path,
    lost: &[String],
    limit: u64,
    cgroups: &mut Vec<(String, MemoryCgroup, u32)>,
) -> Result<()> {
    let dir = ClusterDir::new(dir_path)?;
    let status = rt.block_on(coordinator(&dir, Status))?;
    for node in status.nodes.iter().filter(|n| n.alive && !lost.contains(&n.name)) {
        let Some(pid) = read_pid_file(&dir.node(&node.name)) else {
            bail!("no pid of agent {} on this host", node.name);
        };
        let cgroup = MemoryCgroup::create(
            &format!("eckpt-bench-{}-{}", std::process::id(), node.name),
            limit,
        )?;
        cgroup.add(pid)?;
        // Start its peak resident set afresh: what came before (its checkpoints) is not
        // the recovery's.
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
        cgroups.push((node.name.clone(), cgroup, pid));
    }
    Ok(())
}

/// Kills `lost` (wiping their data, `lost_bytes` of rank data), waits for the coordinator
/// to notice, recovers. `link_gbps` is the measured link rate, `nominal_bits` the shaped one.
#[allow(clippy::too_many_arguments)]
pub fn recover(
    rt: &tokio::runtime::Runtime,
    dir_path: &Path,
    lost: &[String],
    lost_bytes: u64,
    onto_spares: bool,
    link_gbps: f64,
    nominal_bits: Option<u64>,
    confined: (Option<u64>, &[(String, MemoryCgroup, u32)]),
) -> Result<Recovery> {
    let dir = ClusterDir::new(dir_path)?;
    let killed = Instant::now();
    for node in lost {
        launch::kill_node(dir_path, node, true)?;
    }
    rt.block_on(wait_gone(&dir, lost))?;
    let detect_seconds = killed.elapsed().as_secs_f64();
    let status = rt.block_on(coordinator(&dir, Status))?;
    let agents: Vec<u32> = status
        .nodes
        .iter()
        .filter(|n| n.alive)
        .map(|n| agent_pid(&dir, &n.name))
        .collect::<Result<_>>()?;
    let cpu_before = cpu_seconds_of_all(&agents)?;
    let report = rt.block_on(coordinator(
        &dir,
        Recover {
            relocation: Relocation::Process,
        },
    ))?;
    let restored_seconds = killed.elapsed().as_secs_f64();
    let cpu = cpu_seconds_of_all(&agents)? - cpu_before;
    let mut recovery = summarize(
        report,
        lost,
        onto_spares,
        detect_seconds,
        restored_seconds,
        link_gbps,
        nominal_bits,
    );
    recovery.agent_cpu_seconds_per_gb = cpu / (lost_bytes as f64 / 1e9);
    recovery.memory_limit = confined.0;
    for (node, cgroup, pid) in confined.1 {
        recovery.memory_peaks.insert(node.clone(), cgroup.peak()?);
        recovery.rss_peaks.insert(node.clone(), peak_rss(*pid)?);
    }
    Ok(recovery)
}

fn summarize(
    report: RecoveryReport,
    lost: &[String],
    onto_spares: bool,
    detect_seconds: f64,
    restored_seconds: f64,
    link_gbps: f64,
    nominal_bits: Option<u64>,
) -> Recovery {
    let decode_link_bytes = report
        .decode_traffic
        .values()
        .map(|&(sent, received)| sent.max(received))
        .max()
        .unwrap_or(0);
    let efficiency =
        |bits_per_second: f64| decode_link_bytes as f64 * 8.0 / bits_per_second / report.decode_task_seconds;
    Recovery {
        lost: lost.to_vec(),
        onto: if onto_spares { "spares" } else { "survivors" },
        detect_seconds,
        decode_seconds: report.decode_task_seconds,
        install_seconds: report.decode_seconds - report.decode_task_seconds,
        reencode_seconds: report.encode_seconds,
        restored_seconds,
        decode_link_bytes,
        recover_efficiency: efficiency(link_gbps * 1e9),
        recover_efficiency_nominal: nominal_bits.map(|bits| efficiency(bits as f64)),
        decode_traffic: report.decode_traffic,
        rebuilt: report.rebuilt,
        agent_cpu_seconds_per_gb: 0.0,
        memory_limit: None,
        memory_peaks: BTreeMap::new(),
        rss_peaks: BTreeMap::new(),
    }
}

/// The peak resident set of process `pid` (`VmHWM` in `/proc/<pid>/status`), in bytes.
fn peak_rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok());
    match kib {
        Some(kib) => Ok(kib * 1024),
        None => bail!("no VmHWM for process {pid}"),
    }
}

/// Waits until the coordinator reports every node of `lost` down.
async fn wait_gone(dir: &ClusterDir, lost: &[String]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = coordinator(dir, Status).await?;
        let gone = lost
            .iter()
            .all(|n| status.nodes.iter().any(|s| &s.name == n && !s.alive));
        if gone {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the coordinator still sees {lost:?} alive after a minute");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_the_busiest_link_over_the_link_rate_and_the_decode_time() {
        let report = RecoveryReport {
            decode_seconds: 5.0,
            decode_task_seconds: 4.0,
            decode_traffic: BTreeMap::from([
                ("n2".to_string(), (400_000_000, 0)),
                ("n3".to_string(), (400_000_000, 400_000_000)),
                ("s0".to_string(), (0, 250_000_000)),
            ]),
            ..RecoveryReport::default()
        };
        let r = summarize(report, &["n0".into()], true, 3.0, 12.0, 1.0, Some(2_000_000_000));
        // 400 MB over a 1 Gbit/s link is 3.2 s; it took 4 s.
        assert_eq!(r.decode_link_bytes, 400_000_000);
        assert!((r.recover_efficiency - 0.8).abs() < 1e-9);
        assert!((r.recover_efficiency_nominal.unwrap() - 0.4).abs() < 1e-9);
        assert!((r.install_seconds - 1.0).abs() < 1e-9);
    }
}
