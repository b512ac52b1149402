//! `eckpt bench cluster`: a real cluster (agents as processes, optionally in network
//! namespaces on shaped links) encodes one rank per data node — a thread of this process
//! that checkpoints its memory through the rank library, as an application does — first in
//! full, then after changes of the MAT or LU pattern in the chosen incremental mode.
//! Reported next to the link bandwidth measured between two agents in the same run, with
//! the CPU the agents spent per GB of rank data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use eckpt_cluster::launch::{self, UpOptions};
use eckpt_cluster::netns::parse_rate;
use eckpt_cluster_api::call::ToCoordinator;
use eckpt_cluster_api::commands;
use eckpt_cluster_api::dirs::{AgentPlacement, ClusterDir};
use eckpt_cluster_api::msg::{EpochOutcome, NodeInfo, Nodes, Status, StatusReport, WaitEpoch};
use eckpt_coding::geometry::Geometry;
use eckpt_coding::CodingConfig;
use serde::Serialize;

use super::cgroup::{is_tmpfs, MemoryCgroup};
use super::ranks::{Change, RankJob};
use super::recover::{confine, recover, Recovery};
use super::stats::median;
use super::workload::Pattern;
use crate::commands::calibrate::link_test;
use crate::commands::cluster::{this_exe, CodingArgs};
use crate::commands::process_cpu::{agent_pid, cpu_seconds_of_all};
use crate::output::print_json;
use crate::size::parse_size;
use eckpt_capture::page_size;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes in the cluster (one group when k + m = nodes).
    #[arg(long, default_value_t = 6)]
    nodes: usize,
    #[command(flatten)]
    coding: CodingArgs,
    /// Bytes of rank image per data node.
    #[arg(long, default_value = "64MiB", value_parser = parse_size)]
    size_per_node: u64,
    /// How images change between epochs: mat (0.1 % of pages, scattered) or lu (60 %, in
    /// runs).
    #[arg(long, default_value = "mat")]
    pattern: Pattern,
    /// Fraction of the pages the pattern changes instead of its own (0 to 1).
    #[arg(long, value_parser = parse_fraction)]
    dirty_fraction: Option<f64>,
    /// Incremental epochs after the first (full) one; the median is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Threads each agent codes every chunk on (`eckpt up --agent-threads`; default: one
    /// per core).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    agent_threads: Option<u16>,
    /// Run each agent in its own network namespace.
    #[arg(long)]
    netns: bool,
    /// TLS around every TCP connection (`eckpt up --tls`): what it costs.
    #[arg(long)]
    tls: bool,
    /// Shape the namespaces' links (e.g. 1gbit, 100mbit).
    #[arg(long)]
    link_rate: Option<String>,
    /// Spare nodes (with `--recover`, the lost nodes' data is decoded onto them; without
    /// spares, onto the survivors).
    #[arg(long, default_value_t = 0)]
    spares: usize,
    /// After the epochs, kill m data-holding nodes of the first group (and wipe their
    /// disks), recover, and report the decode against the link.
    #[arg(long)]
    recover: bool,
    /// With `--recover`: every agent recovers in a memory cgroup of its own with this
    /// limit (needs `--dir` off tmpfs, whose pages would count as the agents' memory).
    #[arg(long, value_parser = parse_size)]
    memory_limit: Option<u64>,
    /// Directory the cluster lives in (default: a temporary directory on tmpfs).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The agents' threads (`--agent-threads`); the benchmark sets no nice value or CPUs.
    fn agent_placement(&self) -> AgentPlacement {
        AgentPlacement {
            threads: self.agent_threads.map(usize::from),
            ..AgentPlacement::default()
        }
    }
}

/// A fraction between 0 and 1.
fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{text:?} is not a fraction between 0 and 1")),
    }
}

#[derive(Serialize)]
struct Report {
    nodes: usize,
    coding: CodingConfig,
    size_per_node: u64,
    pattern: Pattern,
    /// The share of pages changed per epoch, when not the pattern's own.
    dirty_fraction: Option<f64>,
    /// Threads each agent coded every chunk on.
    agent_threads: usize,
    netns: bool,
    tls: bool,
    link_rate: Option<String>,
    /// Link bandwidth between two agents measured in this run (Gbit/s).
    link_gbps: f64,
    /// Padded data-shard bytes per member (D).
    shard_bytes: u64,
    /// Seconds of the first epoch's full encode (median over all epochs in `full` mode).
    full_encode_seconds: f64,
    /// m·D over the measured link rate, divided by `full_encode_seconds`: the pipeline moves
    /// m·D over each data node's link.
    efficiency: f64,
    /// The same against the nominal `link_rate`.
    efficiency_nominal: Option<f64>,
    /// CPU seconds all agents spent from the ranks' checkpoint calls to the first (full)
    /// epoch's commit, per GB (10⁹ bytes) of rank data: the encode and the commit (the
    /// ranks store their epochs themselves, as an application's do) — what protection takes
    /// from the cores a job runs on.
    agent_cpu_seconds_per_gb: f64,
    /// The same for the incremental epochs (median), still per GB of rank data (not of
    /// changed data).
    agent_cpu_seconds_per_gb_incremental: f64,
    /// Median seconds of the incremental epochs' encodes.
    encode_seconds: f64,
    /// Each incremental epoch's encode seconds.
    encode_seconds_samples: Vec<f64>,
    /// What each incremental epoch was (`full`, `stripe`, `update`).
    kinds: Vec<String>,
    /// Median over epochs of the most payload any data node sent in an incremental epoch.
    bytes_sent_per_node: u64,
    /// The same over every node (parity relays included).
    bytes_sent_max: u64,
    /// Bytes of the 4 KiB pages each rank changed per epoch.
    changed_bytes_per_node: u64,
    /// `bytes_sent_per_node / changed_bytes_per_node`.
    sent_per_changed: f64,
    /// Per-node payload bytes of the last incremental epoch.
    bytes_sent: BTreeMap<String, u64>,
    /// With `--recover`: what losing m nodes cost.
    recovery: Option<Recovery>,
}

/// The directory the benchmark's cluster lives in, made in `dir` (its `--dir`), else on
/// tmpfs when there is one (a node-local RAM disk, as ranks would use).
pub(super) fn scratch(dir: Option<&Path>) -> Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let within = match dir {
        Some(dir) => dir.to_path_buf(),
        None if shm.is_dir() => shm.to_path_buf(),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new()
        .prefix("eckpt-bench-")
        .tempdir_in(&within)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot make the benchmark's directory in {}: {e}",
                within.display()
            )
        })
}

/// Every group's members that hold data, group by group: the benchmarks' ranks, one per
/// data node.
pub(super) fn data_holders(status: &StatusReport, coding: CodingConfig) -> Vec<String> {
    let mut holders = Vec::new();
    for g in &status.groups {
        let probe = Geometry::new(coding.layout, g.k, g.m, 1);
        holders.extend(
            g.members
                .iter()
                .enumerate()
                .filter(|(p, _)| probe.holds_data(*p))
                .map(|(_, n)| n.clone()),
        );
    }
    holders
}

/// Asks the coordinator of the benchmark's cluster.
pub(super) async fn coordinator<C: ToCoordinator>(dir: &ClusterDir, request: C) -> Result<C::Answer> {
    Ok(commands::coordinator_call(dir, request, |_| {}).await?)
}

/// Sends `bytes` from `from` to `to` and returns Gbit/s (best of three).
async fn link_gbps(dir: &ClusterDir, from: &NodeInfo, to: &NodeInfo, bytes: u64) -> Result<f64> {
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        let seconds = link_test(dir, from, to, bytes).await?;
        best = best.max(bytes as f64 * 8.0 / seconds / 1e9);
    }
    Ok(best)
}

/// Checkpoints every rank's file concurrently and waits for the epoch's decision.
/// The coordinator's outcome of `epoch`, which must have committed.
async fn outcome(dir: &ClusterDir, epoch: u64) -> Result<EpochOutcome> {
    let o = coordinator(
        dir,
        WaitEpoch {
            epoch,
            decision_only: false,
        },
    )
    .await?;
    if !o.committed {
        bail!("epoch {epoch} aborted: {}", o.reason.unwrap_or_default());
    }
    Ok(o)
}

pub fn run(args: Args) -> Result<i32> {
    let coding = args.coding.coding()?;
    let tmp = scratch(args.dir.as_deref())?;
    if args.memory_limit.is_some() && (!args.recover || is_tmpfs(tmp.path())) {
        bail!(
            "--memory-limit needs --recover and a --dir off tmpfs (tmpfs pages count as the agents' memory)"
        );
    }
    let mut cgroups = Vec::new();
    let dir_path = tmp.path().join("cluster");
    launch::up(&UpOptions {
        dir: dir_path.clone(),
        nodes: Some(args.nodes),
        spares: args.spares,
        names: Vec::new(),
        coding,
        netns: args.netns,
        tls: args.tls,
        link_rate: args.link_rate.clone(),
        exe: this_exe()?,
        agents: true,
        bind: None,
        flush: None,
        job: None,
        deadlines: Default::default(),
        domains: Default::default(),
        agent_placement: args.agent_placement(),
    })?;
    let result = measure(&args, coding, &dir_path, &mut cgroups);
    let down = launch::down(&dir_path, true);
    drop(cgroups);
    let report = result?;
    down?;
    if args.json {
        print_json(&report);
    } else {
        println!(
            "{} nodes k={} m={} {} {} {}, {} MiB/node, {}: link {:.3} Gbit/s; full encode {:.3} s \
             (efficiency {:.2}, agents' CPU {:.3} s/GB, {} threads each); {} epochs {:.3} s ({:.3} s/GB), {} B sent/node \
             for {} B changed ({:.2}x)",
            report.nodes,
            coding.k,
            coding.m,
            coding.mode,
            coding.layout,
            coding.topology,
            report.size_per_node >> 20,
            report.pattern,
            report.link_gbps,
            report.full_encode_seconds,
            report.efficiency,
            report.agent_cpu_seconds_per_gb,
            report.agent_threads,
            report.kinds.first().map(String::as_str).unwrap_or("-"),
            report.encode_seconds,
            report.agent_cpu_seconds_per_gb_incremental,
            report.bytes_sent_per_node,
            report.changed_bytes_per_node,
            report.sent_per_changed
        );
        if let Some(r) = &report.recovery {
            println!(
                "recovery of {} onto {}: detected in {:.3} s, decode {:.3} s ({} B over the busiest link, \
                 efficiency {:.2}), install {:.3} s, re-encode {:.3} s; redundancy restored {:.3} s after the kill \
                 (agents' CPU {:.3} s/GB lost)",
                r.lost.join(" "),
                r.onto,
                r.detect_seconds,
                r.decode_seconds,
                r.decode_link_bytes,
                r.recover_efficiency,
                r.install_seconds,
                r.reencode_seconds,
                r.restored_seconds,
                r.agent_cpu_seconds_per_gb
            );
        }
    }
    Ok(0)
}

fn measure(
    args: &Args,
    coding: CodingConfig,
    dir_path: &Path,
    cgroups: &mut Vec<(String, MemoryCgroup, u32)>,
) -> Result<Report> {
    let dir = ClusterDir::new(dir_path)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let status = rt.block_on(coordinator(&dir, Status))?;
    let infos = rt.block_on(coordinator(&dir, Nodes))?;
    let info = |name: &str| {
        infos
            .iter()
            .find(|n| n.name == name)
            .cloned()
            .context("node not alive")
    };
    let holders = data_holders(&status, coding);
    let size = args.size_per_node as usize;
    let nominal = args.link_rate.as_deref().map(parse_rate).transpose()?;
    // About a second of traffic at the nominal rate (256 MiB on loopback), best of three.
    let test_bytes = nominal.map_or(256 << 20, |bits| (bits / 8).clamp(8 << 20, 128 << 20));
    let link = rt.block_on(link_gbps(
        &dir,
        &info(&holders[0])?,
        &info(&holders[1])?,
        test_bytes,
    ))?;

    let change = Change {
        pattern: args.pattern,
        fraction: args.dirty_fraction,
    };
    let ranks = RankJob::start(dir_path, holders.len() as u32, size, Some(&holders), change);
    let agents: Vec<u32> = infos
        .iter()
        .map(|n| agent_pid(&dir, &n.name))
        .collect::<Result<_>>()?;
    let rank_gb = (size * holders.len()) as f64 / 1e9;
    // The agents' CPU from the ranks' `checkpoint()` calls to the commit: the ranks store
    // their epoch themselves, so this is the encode and the two-phase commit.
    let epoch = |seed: u64| -> Result<(EpochOutcome, f64, u64)> {
        let before = cpu_seconds_of_all(&agents)?;
        let step = ranks.checkpoint_all(seed)?;
        let o = rt.block_on(outcome(&dir, step.epoch))?;
        let cpu = (cpu_seconds_of_all(&agents)? - before) / rank_gb;
        Ok((o, cpu, (step.changed_pages * page_size()) as u64))
    };
    let (first, full_cpu, _) = epoch(0)?;
    let mut incremental_cpu = Vec::new();
    let mut samples = Vec::new();
    let mut sent = Vec::new();
    let mut sent_max = Vec::new();
    let mut kinds = Vec::new();
    let mut changed = 0;
    let mut last = BTreeMap::new();
    for rep in 0..args.reps.max(1) {
        let (o, cpu, changed_bytes) = epoch(rep as u64 * 1000 + 1)?;
        changed = changed_bytes;
        incremental_cpu.push(cpu);
        samples.push(o.encode_seconds);
        sent.push(
            holders
                .iter()
                .map(|h| o.bytes_sent.get(h).copied().unwrap_or(0))
                .max()
                .unwrap_or(0) as f64,
        );
        sent_max.push(o.bytes_sent.values().copied().max().unwrap_or(0) as f64);
        kinds.extend(o.kinds.clone());
        last = o.bytes_sent;
    }
    let full_seconds = if coding.mode == eckpt_coding::Mode::Full {
        let mut all = samples.clone();
        all.push(first.encode_seconds);
        median(&all)
    } else {
        first.encode_seconds
    };
    let ideal = |gbps: f64| coding.m as f64 * first.shard_bytes as f64 * 8.0 / (gbps * 1e9);
    let bytes_sent_per_node = median(&sent) as u64;
    // The first group's first m data holders die.
    let recovery = args
        .recover
        .then(|| {
            let lost: Vec<String> = holders.iter().take(coding.m).cloned().collect();
            if let Some(limit) = args.memory_limit {
                confine(&rt, dir_path, &lost, limit, cgroups)?;
            }
            let confined = (args.memory_limit, cgroups.as_slice());
            let lost_bytes = (lost.len() * size) as u64;
            recover(
                &rt,
                dir_path,
                &lost,
                lost_bytes,
                args.spares > 0,
                link,
                nominal,
                confined,
            )
        })
        .transpose()?;
    Ok(Report {
        nodes: args.nodes,
        coding,
        agent_threads: eckpt_agent::placement::coding_threads(&args.agent_placement()),
        size_per_node: args.size_per_node,
        pattern: args.pattern,
        dirty_fraction: args.dirty_fraction,
        netns: args.netns,
        tls: args.tls,
        link_rate: args.link_rate.clone(),
        link_gbps: link,
        shard_bytes: first.shard_bytes,
        full_encode_seconds: full_seconds,
        efficiency: ideal(link) / full_seconds,
        efficiency_nominal: nominal.map(|bits| ideal(bits as f64 / 1e9) / full_seconds),
        agent_cpu_seconds_per_gb: full_cpu,
        agent_cpu_seconds_per_gb_incremental: median(&incremental_cpu),
        encode_seconds: median(&samples),
        encode_seconds_samples: samples,
        kinds,
        bytes_sent_per_node,
        bytes_sent_max: median(&sent_max) as u64,
        changed_bytes_per_node: changed,
        sent_per_changed: bytes_sent_per_node as f64 / changed.max(1) as f64,
        bytes_sent: last,
        recovery,
    })
}
