//! `eckpt bench flush`: the last checkpoint level measured on a real cluster (agents as
//! processes, node stores on tmpfs) holding a job of rank threads that checkpoint through
//! the rank library, as an application does. Each repetition, in turn:
//!
//! 1. the flush directory's write speed: the bytes a flush writes, written by as many
//!    writers as nodes host ranks (each its node's share, 1 MiB writes with early writeback,
//!    fsync) — the reference, measured in the same run;
//! 2. a flush of the committed epoch (`eckpt flush`): its throughput over the reference's;
//! 3. the ranks' checkpoint latency (MAT-like changes) with no flush running, then while
//!    flushes run one after another: the slowdown a flush causes the application — the
//!    `checkpoint()` call it waits for, and the commit (the encode in its background).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use eckpt_cluster::launch::{self, UpOptions};
use eckpt_cluster_api::commands::coordinator_call;
use eckpt_cluster_api::dirs::{ClusterDir, FlushConfig};
use eckpt_cluster_api::msg::{FlushEpoch, FlushReport, Status, StatusReport};
use eckpt_coding::CodingConfig;
use eckpt_flush::WriteBehind;
use serde::Serialize;

use super::ranks::{Change, RankJob, Step};
use super::stats::{median, median_ratio};
use super::workload::Pattern;
use crate::commands::cluster::{block_on, this_exe, CodingArgs};
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 6)]
    nodes: usize,
    #[command(flatten)]
    coding: CodingArgs,
    /// Ranks of the job (default: one per data position).
    #[arg(long)]
    ranks: Option<u32>,
    /// Bytes of memory each rank protects.
    #[arg(long, default_value = "128MiB", value_parser = parse_size)]
    size_per_rank: u64,
    /// Where to flush (storage standing for the shared file system); default: a new
    /// directory under the system's temporary directory, removed at the end.
    #[arg(long)]
    flush_dir: Option<PathBuf>,
    /// Bytes per second each node writes to the flush at most (default: unbounded).
    #[arg(long, value_parser = parse_size)]
    flush_rate: Option<u64>,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Checkpoints timed with no flush running, and at least within flushes, per
    /// repetition.
    #[arg(long, default_value_t = 5)]
    checkpoints: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    nodes: usize,
    coding: CodingConfig,
    ranks: u32,
    size_per_rank: u64,
    flush_dir: PathBuf,
    flush_rate: Option<u64>,
    /// Bytes each flush wrote (every rank's image).
    flush_bytes: u64,
    /// Writers of the reference (nodes hosting ranks).
    writers: usize,
    /// The flush directory's write speed per repetition (GB/s, 10^9 bytes).
    write_gbps: Vec<f64>,
    /// Flush throughput per repetition (GB/s).
    flush_gbps: Vec<f64>,
    /// Median over repetitions of flush throughput / write speed.
    flush_vs_write: f64,
    /// Seconds of the slowest node's copy, per flush.
    slowest_node_seconds: Vec<f64>,
    /// Median `checkpoint()` latency of the slowest rank with no flush running (ms): what
    /// the application waits for.
    checkpoint_ms: f64,
    /// The same while a flush runs (ms).
    checkpoint_ms_flushing: f64,
    /// `checkpoint_ms_flushing / checkpoint_ms`, median over repetitions.
    slowdown: f64,
    /// Median time from the first rank's `checkpoint()` to the epoch's commit with no flush
    /// running (ms): the encode, in the background of the application.
    commit_ms: f64,
    /// The same for checkpoints taken while a flush runs (ms).
    commit_ms_flushing: f64,
    /// `commit_ms_flushing / commit_ms`, median over repetitions.
    commit_slowdown: f64,
    /// Checkpoints taken within a flush (every rank's call began and returned while it
    /// ran), per repetition.
    checkpoints_during_flush: Vec<usize>,
    /// Flushes run while checkpointing, per repetition.
    flushes_during: Vec<usize>,
    /// `checkpoint()` latency samples (ms): `[rep][checkpoint]`, without and with a flush
    /// running.
    samples_ms: Vec<Vec<f64>>,
    samples_ms_flushing: Vec<Vec<f64>>,
    /// Commit latency samples (ms), likewise.
    commit_samples_ms: Vec<Vec<f64>>,
    commit_samples_ms_flushing: Vec<Vec<f64>>,
}

fn status(dir: &ClusterDir) -> Result<StatusReport> {
    Ok(*block_on(coordinator_call(dir, Status, |_| {}))??)
}

fn flush(dir: &ClusterDir) -> Result<FlushReport> {
    Ok(block_on(coordinator_call(
        dir,
        FlushEpoch { epoch: None },
        |_| {},
    ))??)
}

/// Writes `shares[i]` bytes to `dir/reference-<i>` from one thread each, removes the files,
/// and returns the wall seconds. Written as fast as a flush knows how: 1 MiB writes with
/// early writeback ([`WriteBehind`]), then fsync.
fn write_reference(dir: &Path, shares: &[u64]) -> Result<f64> {
    let block = vec![0xA5u8; 1 << 20];
    let started = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let writers: Vec<_> = shares
            .iter()
            .enumerate()
            .map(|(i, &bytes)| {
                let (path, block) = (dir.join(format!("reference-{i}")), &block);
                s.spawn(move || -> std::io::Result<()> {
                    let mut file = WriteBehind::new(std::fs::File::create(&path)?);
                    while file.written() < bytes {
                        let n = (bytes - file.written()).min(block.len() as u64) as usize;
                        file.write_all(&block[..n])?;
                    }
                    file.sync()
                })
            })
            .collect();
        for w in writers {
            w.join()
                .expect("writer thread")
                .context("writing the reference")?;
        }
        Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    for i in 0..shares.len() {
        std::fs::remove_file(dir.join(format!("reference-{i}")))?;
    }
    Ok(seconds)
}

pub fn run(args: Args) -> Result<i32> {
    let coding = args.coding.coding()?;
    let scratch = super::cluster::scratch(None)?;
    let own_flush = match &args.flush_dir {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("eckpt-bench-flush-").tempdir()?),
    };
    let flush_root = match (&args.flush_dir, &own_flush) {
        (Some(d), _) => d.clone(),
        (None, Some(t)) => t.path().to_path_buf(),
        (None, None) => unreachable!("one of them is set"),
    };
    std::fs::create_dir_all(&flush_root)?;
    let dir_path = scratch.path().join("cluster");
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
        agents: true,
        bind: None,
        flush: Some(FlushConfig {
            dir: flush_root.join("flush"),
            every: 0,
            rate: args.flush_rate,
            keep: 1,
            restore_from_job: None,
        }),
        job: None,
        deadlines: Default::default(),
        domains: Default::default(),
        agent_placement: Default::default(),
    })?;
    let result = measure(&args, coding, &dir_path, &flush_root);
    let down = launch::down(&dir_path, true);
    let report = result?;
    down?;
    if args.json {
        print_json(&report);
    } else {
        println!(
            "{} ranks x {} MiB on {} nodes (k={} m={} {}), {} B per flush to {}{}",
            report.ranks,
            report.size_per_rank >> 20,
            report.nodes,
            coding.k,
            coding.m,
            coding.mode,
            report.flush_bytes,
            report.flush_dir.display(),
            match report.flush_rate {
                Some(rate) => format!(", at most {rate} B/s per node"),
                None => String::new(),
            }
        );
        println!(
            "{:<34} {:>12} {:>12} {:>8}",
            "median over repetitions", "reference", "flushing", "ratio"
        );
        println!(
            "{:<34} {:>12.3} {:>12.3} {:>8.2}",
            format!("write GB/s ({} writers) vs flush", report.writers),
            median(&report.write_gbps),
            median(&report.flush_gbps),
            report.flush_vs_write
        );
        println!(
            "{:<34} {:>12.1} {:>12.1} {:>8.2}",
            "checkpoint() ms, idle vs flushing",
            report.checkpoint_ms,
            report.checkpoint_ms_flushing,
            report.slowdown
        );
        println!(
            "{:<34} {:>12.1} {:>12.1} {:>8.2}",
            "commit ms, idle vs flushing",
            report.commit_ms,
            report.commit_ms_flushing,
            report.commit_slowdown
        );
        println!(
            "{} checkpoints taken during {} flushes",
            report.checkpoints_during_flush.iter().sum::<usize>(),
            report.flushes_during.iter().sum::<usize>()
        );
    }
    Ok(0)
}

fn measure(args: &Args, coding: CodingConfig, dir_path: &Path, flush_root: &Path) -> Result<Report> {
    let dir = ClusterDir::new(dir_path)?;
    let data_positions: u32 = status(&dir)?
        .groups
        .iter()
        .map(|g| (g.members.len() - g.m) as u32)
        .sum();
    let world = args.ranks.unwrap_or(data_positions);
    let size = args.size_per_rank as usize;
    let change = Change {
        pattern: Pattern::Mat,
        fraction: None,
    };
    let ranks = RankJob::start(dir.root(), world, size, None, change);
    ranks.checkpoint_all(0)?;
    let placed = status(&dir)?;
    let shares: Vec<u64> = placed
        .nodes
        .iter()
        .filter(|n| !n.ranks.is_empty())
        .map(|n| n.ranks.len() as u64 * args.size_per_rank)
        .collect();
    let mut report = Report {
        nodes: args.nodes,
        coding,
        ranks: world,
        size_per_rank: args.size_per_rank,
        flush_dir: flush_root.to_path_buf(),
        flush_rate: args.flush_rate,
        flush_bytes: 0,
        writers: shares.len(),
        write_gbps: Vec::new(),
        flush_gbps: Vec::new(),
        flush_vs_write: 0.0,
        slowest_node_seconds: Vec::new(),
        checkpoint_ms: 0.0,
        checkpoint_ms_flushing: 0.0,
        slowdown: 0.0,
        commit_ms: 0.0,
        commit_ms_flushing: 0.0,
        commit_slowdown: 0.0,
        checkpoints_during_flush: Vec::new(),
        flushes_during: Vec::new(),
        samples_ms: Vec::new(),
        samples_ms_flushing: Vec::new(),
        commit_samples_ms: Vec::new(),
        commit_samples_ms_flushing: Vec::new(),
    };
    let mut seed = 1;
    let (mut write_s, mut flush_s) = (Vec::new(), Vec::new());
    for _ in 0..args.reps.max(1) {
        let reference = write_reference(flush_root, &shares)?;
        let flushed = flush(&dir)?;
        report.flush_bytes = flushed.bytes;
        write_s.push(reference);
        flush_s.push(flushed.seconds);
        report.write_gbps.push(flushed.bytes as f64 / reference / 1e9);
        report
            .flush_gbps
            .push(flushed.bytes as f64 / flushed.seconds / 1e9);
        report.slowest_node_seconds.push(flushed.slowest_node_seconds);

        let mut idle = Vec::new();
        for _ in 0..args.checkpoints {
            seed += 1;
            idle.push(ranks.checkpoint_all(seed)?);
        }
        // Flushes of the epoch last committed, one after another, with the ranks
        // checkpointing meanwhile, until `checkpoints` checkpoints were taken within a flush
        // — every rank's `checkpoint()` call began and returned while it ran — (at most four
        // times as many flushes). At least one checkpoint commits during each flush, so the
        // next one has a new epoch to copy.
        let mut during = Vec::new();
        let mut flushes = 0;
        while during.len() < args.checkpoints && flushes < 4 * args.checkpoints {
            flushes += 1;
            let flushing = {
                let dir = dir.clone();
                std::thread::spawn(move || {
                    let began = Instant::now();
                    flush(&dir).map(|_| (began, Instant::now()))
                })
            };
            let mut steps = Vec::new();
            loop {
                seed += 1;
                steps.push(ranks.checkpoint_all(seed)?);
                if flushing.is_finished() {
                    break;
                }
            }
            let (began, ended) = flushing.join().expect("flush thread")?;
            during.extend(
                steps
                    .into_iter()
                    .filter(|s| s.began >= began && s.returned <= ended),
            );
        }
        report.checkpoints_during_flush.push(during.len());
        report.flushes_during.push(flushes);
        let ms = |steps: &[Step], f: fn(&Step) -> f64| steps.iter().map(|s| f(s) * 1e3).collect::<Vec<f64>>();
        report.samples_ms.push(ms(&idle, |s| s.checkpoint));
        report.samples_ms_flushing.push(ms(&during, |s| s.checkpoint));
        report.commit_samples_ms.push(ms(&idle, |s| s.commit));
        report.commit_samples_ms_flushing.push(ms(&during, |s| s.commit));
    }
    report.flush_vs_write = median_ratio(&write_s, &flush_s);
    if report.samples_ms_flushing.iter().all(Vec::is_empty) {
        bail!("no checkpoint was taken within a flush: use a larger --size-per-rank or a --flush-rate");
    }
    (
        report.checkpoint_ms,
        report.checkpoint_ms_flushing,
        report.slowdown,
    ) = compare(&report.samples_ms, &report.samples_ms_flushing);
    (
        report.commit_ms,
        report.commit_ms_flushing,
        report.commit_slowdown,
    ) = compare(&report.commit_samples_ms, &report.commit_samples_ms_flushing);
    Ok(report)
}

/// Latency samples `[rep][checkpoint]` without and with a flush running: the median of each
/// over all repetitions, and the median over repetitions (those with samples during a flush)
/// of the ratio of their medians.
fn compare(idle: &[Vec<f64>], busy: &[Vec<f64>]) -> (f64, f64, f64) {
    let all = |s: &[Vec<f64>]| s.iter().flatten().copied().collect::<Vec<f64>>();
    let (busy_med, idle_med): (Vec<f64>, Vec<f64>) = idle
        .iter()
        .zip(busy)
        .filter(|(i, b)| !i.is_empty() && !b.is_empty())
        .map(|(i, b)| (median(b), median(i)))
        .unzip();
    (
        median(&all(idle)),
        median(&all(busy)),
        median_ratio(&busy_med, &idle_med),
    )
}
