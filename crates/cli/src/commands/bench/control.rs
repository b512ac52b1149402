//! `eckpt bench control`: what the control plane costs as the cluster grows. The real
//! coordinator runs as its own process; N real agents run in this one (`agent_host`: a
//! thread and runtime each, their stores on tmpfs, their own TCP connections), with one rank
//! per data-holding node as a thread checkpointing a small image through the rank library.
//! Images are tiny, so what an epoch takes is the control plane's: the coordinator's CPU,
//! the calls and bytes it handles, its journal writes, the commit latency; then K nodes die,
//! and detection, recovery and the restart of every rank (checked byte-exact) are timed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use eckpt_cluster::agent::AgentOptions;
use eckpt_cluster::agent_host::AgentHost;
use eckpt_cluster::launch::{self, UpOptions};
use eckpt_cluster_api::dirs::{read_pid_file, AgentPlacement, ClusterDir};
use eckpt_cluster_api::msg::{Recover, Relocation, Status, StatusReport};
use eckpt_coding::geometry::Geometry;
use eckpt_coding::CodingConfig;
use serde::Serialize;

use super::cluster::{coordinator, scratch};
use super::ranks::{restart_all, Change, RankJob};
use super::stats::median;
use super::workload::Pattern;
use crate::commands::cluster::{this_exe, CodingArgs};
use crate::commands::process_cpu::cpu_seconds;
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes in the cluster, all agents of this process.
    #[arg(long, default_value_t = 64)]
    nodes: usize,
    #[command(flatten)]
    coding: CodingArgs,
    /// Bytes of rank image per data node (small: the benchmark measures the control plane).
    #[arg(long, default_value = "16KiB", value_parser = parse_size)]
    size_per_node: u64,
    /// Epochs checkpointed; per-epoch figures are medians over all but the first.
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    /// Seconds the cluster rests after the epochs, for the heartbeats' cost.
    #[arg(long, default_value_t = 3.0)]
    rest: f64,
    /// Data-holding nodes of the first group killed after the epochs (at most m), their
    /// stores wiped; then the cluster recovers and every rank restarts.
    #[arg(long, default_value_t = 0)]
    kill: usize,
    /// Threads restarting the ranks after the epochs (each rank checked byte-exact).
    #[arg(long, default_value_t = 8)]
    restart_threads: usize,
    /// Directory the cluster lives in (default: a temporary directory on tmpfs).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One epoch as the coordinator saw it.
#[derive(Serialize)]
struct Epoch {
    /// From the first rank's `checkpoint()` to the commit the last rank waited for.
    commit_seconds: f64,
    /// CPU the coordinator process spent over the epoch.
    coordinator_cpu_seconds: f64,
    /// read/write-family calls the coordinator made over the epoch: its messages (each read
    /// or written with one or a few calls) and its journal files.
    coordinator_io_calls: u64,
    /// Bytes those calls moved.
    coordinator_io_bytes: u64,
    /// Bytes the coordinator wrote to its journal's files over the epoch.
    journal_bytes: u64,
}

#[derive(Serialize)]
struct Report {
    nodes: usize,
    coding: CodingConfig,
    /// Ranks (one per data-holding node).
    ranks: usize,
    size_per_node: u64,
    /// From the agents' start to the coordinator counting every one alive.
    register_seconds: f64,
    /// Every epoch, the first (full) one included.
    epochs: Vec<Epoch>,
    /// Medians over the epochs after the first.
    commit_seconds: f64,
    coordinator_cpu_seconds_per_epoch: f64,
    coordinator_cpu_microseconds_per_node_per_epoch: f64,
    coordinator_io_calls_per_node_per_epoch: f64,
    coordinator_io_bytes_per_node_per_epoch: f64,
    journal_bytes_per_epoch: u64,
    /// The coordinator's CPU per second of rest (heartbeats only).
    heartbeat_cpu_seconds_per_second: f64,
    /// The liveness period the cluster judges nodes by.
    liveness_seconds: f64,
    /// Nodes killed (`--kill`).
    killed: Vec<String>,
    /// From the kill until the coordinator counted every killed node dead.
    detect_seconds: Option<f64>,
    /// `eckpt recover` from its call to its answer (planning, decode, install, re-encode).
    recover_seconds: Option<f64>,
    /// What of it was neither the decode nor the re-encode: planning and journal commits.
    recover_plan_and_commit_seconds: Option<f64>,
    /// From the end of the recovery (or of the epochs) until every rank restarted, each
    /// with exactly the bytes it checkpointed.
    restart_seconds: f64,
    /// The coordinator's peak resident memory.
    coordinator_rss_bytes: u64,
    /// This process's peak resident memory (agents, their runtimes and the rank threads)
    /// per node.
    host_rss_bytes_per_node: u64,
}

/// What /proc says a process has done with read and write calls.
#[derive(Clone, Copy, Default)]
struct Io {
    calls: u64,
    bytes: u64,
}

impl std::ops::Sub for Io {
    type Output = Io;
    fn sub(self, before: Io) -> Io {
        Io {
            calls: self.calls.saturating_sub(before.calls),
            bytes: self.bytes.saturating_sub(before.bytes),
        }
    }
}

/// `/proc/PID/io`: read and write calls (`syscr` + `syscw`) and their bytes (`rchar` +
/// `wchar`, sockets included).
fn io_of(pid: u32) -> Result<Io> {
    let path = format!("/proc/{pid}/io");
    let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    let field = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("{path}: no {name}"))
    };
    Ok(Io {
        calls: field("syscr")? + field("syscw")?,
        bytes: field("rchar")? + field("wchar")?,
    })
}

/// A process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss(pid: &str) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| path.clone())?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .with_context(|| format!("{path}: no VmHWM"))
}

/// Asks the coordinator until `done` holds of its status, at most `limit`.
fn until_status(
    rt: &tokio::runtime::Runtime,
    dir: &ClusterDir,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&StatusReport) -> bool,
) -> Result<()> {
    let began = Instant::now();
    loop {
        if done(&*rt.block_on(coordinator(dir, Status))?) {
            return Ok(());
        }
        if began.elapsed() > limit {
            bail!("{what}: not within {:.0} s", limit.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run(args: Args) -> Result<i32> {
    let coding = args.coding.coding()?;
    if args.kill > coding.m {
        bail!(
            "--kill {}: more than m = {} nodes of a group cannot be recovered",
            args.kill,
            coding.m
        );
    }
    let tmp = match &args.dir {
        Some(dir) => tempfile::Builder::new().prefix("eckpt-bench-").tempdir_in(dir)?,
        None => scratch()?,
    };
    let dir_path = tmp.path().join("cluster");
    launch::up(&UpOptions {
        dir: dir_path.clone(),
        nodes: Some(args.nodes),
        spares: 0,
        names: Vec::new(),
        coding,
        netns: false,
        tls: false,
        link_rate: None,
        exe: this_exe()?,
        agents: false,
        bind: None,
        flush: None,
        job: None,
        deadlines: Default::default(),
        domains: Default::default(),
        agent_placement: AgentPlacement {
            threads: Some(1),
            ..AgentPlacement::default()
        },
    })?;
    let result = measure(&args, coding, &dir_path);
    let down = launch::down(&dir_path, true);
    let report = result?;
    down?;
    if args.json {
        print_json(&report);
    } else {
        print_text(&report);
    }
    Ok(0)
}

fn print_text(r: &Report) {
    println!(
        "{} nodes (k={} m={}, {} ranks of {} B): registered in {:.2} s; per epoch: commit {:.3} s, \
         coordinator CPU {:.4} s ({:.1} µs/node), {:.1} I/O calls/node, {:.0} B/node, journal {} B; \
         at rest {:.4} CPU s/s",
        r.nodes,
        r.coding.k,
        r.coding.m,
        r.ranks,
        r.size_per_node,
        r.register_seconds,
        r.commit_seconds,
        r.coordinator_cpu_seconds_per_epoch,
        r.coordinator_cpu_microseconds_per_node_per_epoch,
        r.coordinator_io_calls_per_node_per_epoch,
        r.coordinator_io_bytes_per_node_per_epoch,
        r.journal_bytes_per_epoch,
        r.heartbeat_cpu_seconds_per_second
    );
    if let (Some(detect), Some(recover)) = (r.detect_seconds, r.recover_seconds) {
        println!(
            "killed {}: detected in {detect:.2} s (liveness {:.1} s), recovered in {recover:.2} s \
             ({:.2} s planning and commits)",
            r.killed.join(" "),
            r.liveness_seconds,
            r.recover_plan_and_commit_seconds.unwrap_or_default()
        );
    }
    println!(
        "every rank restarted byte-exact in {:.2} s; coordinator RSS {} MiB, this process {} KiB per node",
        r.restart_seconds,
        r.coordinator_rss_bytes >> 20,
        r.host_rss_bytes_per_node >> 10
    );
}

fn measure(args: &Args, coding: CodingConfig, dir_path: &Path) -> Result<Report> {
    let dir = ClusterDir::new(dir_path)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let deadlines = dir.load()?.deadlines;
    let coordinator_pid = read_pid_file(&dir.coordinator()).context("the coordinator's pid")?;
    let names: Vec<String> = rt
        .block_on(coordinator(&dir, Status))?
        .nodes
        .into_iter()
        .map(|n| n.name)
        .collect();
    let started = Instant::now();
    let mut host = AgentHost::start(
        names
            .iter()
            .map(|name| AgentOptions {
                dir: dir_path.to_path_buf(),
                name: name.clone(),
                spare: false,
                bind: "127.0.0.1".into(),
                cores: Some(1),
                local: None,
                domain: None,
            })
            .collect(),
    )?;
    let register_wait = deadlines.start_wait() + Duration::from_secs(args.nodes as u64 / 16);
    until_status(&rt, &dir, register_wait, "every agent registered", |s| {
        s.nodes.iter().all(|n| n.alive)
    })
    .map_err(|e| match host.ended().first() {
        Some((node, why)) => anyhow::anyhow!("{e}: agent {node} ended: {why}"),
        None => e,
    })?;
    let register_seconds = started.elapsed().as_secs_f64();

    let status = rt.block_on(coordinator(&dir, Status))?;
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
    let size = args.size_per_node as usize;
    let change = Change {
        pattern: Pattern::Mat,
        fraction: None,
    };
    let ranks = RankJob::start(dir_path, holders.len() as u32, size, Some(&holders), change);
    let journal_bytes =
        || -> Result<u64> { Ok(rt.block_on(coordinator(&dir, Status))?.journal_bytes_written) };
    let mut epochs = Vec::new();
    let mut digests = Vec::new();
    for seed in 0..args.epochs.max(2) as u64 {
        let journal_before = journal_bytes()?;
        let (cpu_before, io_before) = (cpu_seconds(coordinator_pid)?, io_of(coordinator_pid)?);
        let step = ranks.checkpoint_all(seed)?;
        let (cpu_after, io_after) = (cpu_seconds(coordinator_pid)?, io_of(coordinator_pid)?);
        let io = io_after - io_before;
        epochs.push(Epoch {
            commit_seconds: step.commit,
            coordinator_cpu_seconds: cpu_after - cpu_before,
            coordinator_io_calls: io.calls,
            coordinator_io_bytes: io.bytes,
            journal_bytes: journal_bytes()? - journal_before,
        });
        digests = step.digests;
    }
    let cpu_before = cpu_seconds(coordinator_pid)?;
    std::thread::sleep(Duration::from_secs_f64(args.rest));
    let heartbeat_cpu_seconds_per_second = (cpu_seconds(coordinator_pid)? - cpu_before) / args.rest;
    ranks.finish();

    let killed: Vec<String> = status.groups[0]
        .members
        .iter()
        .filter(|n| holders.contains(n))
        .take(args.kill)
        .cloned()
        .collect();
    let (mut detect_seconds, mut recover_seconds, mut recover_plan_and_commit_seconds) = (None, None, None);
    if !killed.is_empty() {
        let began = Instant::now();
        for node in &killed {
            host.kill(node)?;
            launch::kill_node(dir_path, node, true)?;
        }
        let limit = deadlines.liveness() * 4;
        until_status(&rt, &dir, limit, "the killed nodes counted dead", |s| {
            s.nodes
                .iter()
                .filter(|n| killed.contains(&n.name))
                .all(|n| !n.alive)
        })?;
        detect_seconds = Some(began.elapsed().as_secs_f64());
        let began = Instant::now();
        let report = rt.block_on(coordinator(
            &dir,
            Recover {
                relocation: Relocation::Process,
            },
        ))?;
        if !report.unrecoverable.is_empty() {
            bail!(
                "the recovery left {} unrecoverable",
                report.unrecoverable.join(", ")
            );
        }
        let seconds = began.elapsed().as_secs_f64();
        recover_seconds = Some(seconds);
        recover_plan_and_commit_seconds =
            Some((seconds - report.decode_seconds - report.encode_seconds).max(0.0));
    }
    let restart_seconds = restart_all(dir_path, size, &digests, args.restart_threads)?;

    let later: Vec<f64> = epochs.iter().skip(1).map(|e| e.coordinator_cpu_seconds).collect();
    let cpu_per_epoch = median(&later);
    let per_node = |f: &dyn Fn(&Epoch) -> f64| {
        median(&epochs.iter().skip(1).map(f).collect::<Vec<_>>()) / args.nodes as f64
    };
    Ok(Report {
        nodes: args.nodes,
        coding,
        ranks: holders.len(),
        size_per_node: args.size_per_node,
        register_seconds,
        commit_seconds: median(
            &epochs
                .iter()
                .skip(1)
                .map(|e| e.commit_seconds)
                .collect::<Vec<_>>(),
        ),
        coordinator_cpu_seconds_per_epoch: cpu_per_epoch,
        coordinator_cpu_microseconds_per_node_per_epoch: cpu_per_epoch * 1e6 / args.nodes as f64,
        coordinator_io_calls_per_node_per_epoch: per_node(&|e| e.coordinator_io_calls as f64),
        coordinator_io_bytes_per_node_per_epoch: per_node(&|e| e.coordinator_io_bytes as f64),
        journal_bytes_per_epoch: median(
            &epochs
                .iter()
                .skip(1)
                .map(|e| e.journal_bytes as f64)
                .collect::<Vec<_>>(),
        ) as u64,
        epochs,
        heartbeat_cpu_seconds_per_second,
        liveness_seconds: deadlines.liveness().as_secs_f64(),
        killed,
        detect_seconds,
        recover_seconds,
        recover_plan_and_commit_seconds,
        restart_seconds,
        coordinator_rss_bytes: peak_rss(&coordinator_pid.to_string())?,
        host_rss_bytes_per_node: peak_rss("self")? / args.nodes as u64,
    })
}
