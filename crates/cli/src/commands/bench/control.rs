//! `eckpt bench control`: what the control plane costs as the cluster grows. The real
//! coordinator runs as its own process; N real agents run in a few `eckpt agents` processes
//! (`eckpt_agent::host`: a thread and runtime each, their stores on tmpfs, their own TCP
//! connections), with one rank per data-holding node as a thread checkpointing a small image
//! through the rank library, in a few `eckpt bench control-ranks` processes. A process holds
//! a thousand or so agents or ranks: each takes about ten descriptors, and the hard limit of
//! descriptors per process may be out of reach (a container's).
//! Images are tiny, so what an epoch takes is the control plane's: the coordinator's CPU,
//! the calls and bytes it handles, its journal writes, the commit latency; then K nodes die,
//! and detection, recovery and the restart of every rank (checked byte-exact) are timed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use eckpt_cluster::launch::{self, UpOptions};
use eckpt_cluster_api::dirs::{read_pid_file, AgentPlacement, ClusterDir, Deadlines};
use eckpt_cluster_api::msg::{Recover, Relocation, Status, StatusReport};
use eckpt_coding::CodingConfig;
use serde::Serialize;

use super::cluster::{coordinator, data_holders, scratch};
use super::ranks::{restart_all, Change, RankJob};
use super::stats::median;
use super::workload::Pattern;
use crate::commands::cluster::{this_exe, CodingArgs, DeadlineArgs};
use crate::commands::process_cpu::{cpu_seconds, cpu_seconds_of_all};
use crate::output::print_json;
use crate::size::parse_size;
use serde::Deserialize;

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
    /// Epochs checkpointed; per-epoch figures are medians over all but the first (a journal
    /// snapshot, written when the log outgrows the last one, falls on one epoch in many).
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    /// Seconds the cluster rests after the epochs, for the heartbeats' cost (0: none).
    #[arg(long, default_value_t = 3.0)]
    rest: f64,
    /// Data-holding nodes of the first group killed after the epochs (at most m), their
    /// stores wiped; then the cluster recovers and every rank restarts.
    #[arg(long, default_value_t = 0)]
    kill: usize,
    /// Threads restarting the ranks after the epochs (each rank checked byte-exact).
    #[arg(long, default_value_t = 8)]
    restart_threads: usize,
    /// Agents per `eckpt agents` process, and ranks per rank process (each takes about ten
    /// descriptors).
    #[arg(long, default_value_t = 1024)]
    per_process: usize,
    /// The cluster's time bounds, as `eckpt up` takes them: thousands of agents on a few
    /// cores heartbeat late, and a node heard late is counted dead (`--liveness`).
    #[command(flatten)]
    deadlines: DeadlineArgs,
    /// Directory the cluster lives in (default: a temporary directory on tmpfs).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What one run of the benchmark does: `bench control` takes it from its arguments,
/// `eckpt model --calibrate` sets it to measure the control plane's costs.
pub(crate) struct Options {
    pub nodes: usize,
    pub coding: CodingConfig,
    pub size_per_node: u64,
    pub epochs: usize,
    pub rest: f64,
    pub kill: usize,
    pub restart_threads: usize,
    pub per_process: usize,
    pub deadlines: Deadlines,
    /// Directory the cluster's temporary directory is made in (default: tmpfs).
    pub dir: Option<PathBuf>,
}

impl Args {
    fn options(&self) -> Result<Options> {
        Ok(Options {
            nodes: self.nodes,
            coding: self.coding.coding()?,
            size_per_node: self.size_per_node,
            epochs: self.epochs,
            rest: self.rest,
            kill: self.kill,
            restart_threads: self.restart_threads,
            per_process: self.per_process,
            deadlines: self.deadlines.deadlines(),
            dir: self.dir.clone(),
        })
    }
}

/// One epoch as the coordinator saw it.
#[derive(Serialize)]
struct Epoch {
    /// From the first rank's `checkpoint()` to the commit the last rank waited for.
    commit_seconds: f64,
    /// CPU the coordinator process spent over the epoch.
    coordinator_cpu_seconds: f64,
    /// CPU the agents' and the ranks' processes spent over the epoch together: the nodes'
    /// side of the control plane (their calls, connections and tiny encodes), which agents
    /// on hosts of their own spend in parallel and agents sharing a host add up.
    nodes_cpu_seconds: f64,
    /// read/write-family calls the coordinator made over the epoch: its messages (each read
    /// or written with one or a few calls) and its journal files.
    coordinator_io_calls: u64,
    /// Bytes those calls moved.
    coordinator_io_bytes: u64,
    /// Bytes the coordinator wrote to its journal's files over the epoch.
    journal_bytes: u64,
}

#[derive(Serialize)]
pub(crate) struct Report {
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
    pub commit_seconds: f64,
    coordinator_cpu_seconds_per_epoch: f64,
    coordinator_cpu_microseconds_per_node_per_epoch: f64,
    /// The agents' and ranks' CPU per node and epoch (see [`Epoch::nodes_cpu_seconds`]).
    nodes_cpu_microseconds_per_node_per_epoch: f64,
    coordinator_io_calls_per_node_per_epoch: f64,
    coordinator_io_bytes_per_node_per_epoch: f64,
    journal_bytes_per_epoch: u64,
    /// The coordinator's CPU per second of rest (heartbeats only); none without a rest.
    heartbeat_cpu_seconds_per_second: Option<f64>,
    /// The liveness period the cluster judges nodes by.
    liveness_seconds: f64,
    /// Nodes killed (`--kill`).
    killed: Vec<String>,
    /// From the kill until the coordinator counted every killed node dead.
    pub detect_seconds: Option<f64>,
    /// `eckpt recover` from its call to its answer (planning, decode, install, re-encode).
    recover_seconds: Option<f64>,
    /// What of it was neither the decode nor the re-encode: planning and journal commits.
    pub recover_plan_and_commit_seconds: Option<f64>,
    /// Of the recovery, from its start to its plan (the coordinator's `plan_seconds`):
    /// verifying what every survivor holds, and planning.
    plan_seconds: Option<f64>,
    /// Of `plan_seconds`, verifying the survivors.
    verify_seconds: Option<f64>,
    /// From the end of the recovery (or of the epochs) until every rank restarted, each
    /// with exactly the bytes it checkpointed.
    restart_seconds: f64,
    /// The coordinator's peak resident memory.
    coordinator_rss_bytes: u64,
    /// Processes the agents ran in.
    agent_processes: usize,
    /// The agent processes' peak resident memory together, per node.
    agent_rss_bytes_per_node: u64,
}

impl Report {
    /// The coordinator's and the nodes' CPU seconds per epoch, means over the epochs after
    /// the first: CPU times are clock ticks (10 ms), which one epoch of a small cluster spends
    /// a few of, so a median over epochs moves by whole ticks where a mean resolves them.
    pub(crate) fn mean_cpu_seconds_per_epoch(&self) -> (f64, f64) {
        let later = &self.epochs[1..];
        let mean = |f: fn(&Epoch) -> f64| later.iter().map(f).sum::<f64>() / later.len() as f64;
        (mean(|e| e.coordinator_cpu_seconds), mean(|e| e.nodes_cpu_seconds))
    }
}

/// One `eckpt agents` process and the nodes it hosts.
struct AgentProcess {
    child: Child,
    requests: ChildStdin,
    answers: BufReader<ChildStdout>,
    nodes: Vec<String>,
    log: PathBuf,
}

/// The benchmark's agents, in processes of at most `per_process` each.
struct Agents {
    processes: Vec<AgentProcess>,
}

impl Agents {
    fn start(dir: &Path, logs: &Path, names: &[String], per_process: usize) -> Result<Agents> {
        let exe = this_exe()?;
        let mut processes = Vec::new();
        for (i, nodes) in names.chunks(per_process.max(1)).enumerate() {
            let log = logs.join(format!("agents-{i}.log"));
            let mut child = Command::new(&exe)
                .arg("agents")
                .arg("--dir")
                .arg(dir)
                .arg("--nodes")
                .arg(nodes.join(","))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).with_context(|| log.display().to_string())?)
                .spawn()
                .context("starting eckpt agents")?;
            let (requests, answers) = (
                child.stdin.take().context("the agents' stdin")?,
                BufReader::new(child.stdout.take().context("the agents' stdout")?),
            );
            processes.push(AgentProcess {
                child,
                requests,
                answers,
                nodes: nodes.to_vec(),
                log,
            });
        }
        Ok(Agents { processes })
    }

    /// Kills the agent of `node` as a crash would, once every task of it has ended.
    fn kill(&mut self, node: &str) -> Result<()> {
        let p = self
            .processes
            .iter_mut()
            .find(|p| p.nodes.iter().any(|n| n == node))
            .with_context(|| format!("no agent process hosts {node}"))?;
        writeln!(p.requests, "kill {node}")?;
        p.requests.flush()?;
        let mut answer = String::new();
        p.answers.read_line(&mut answer)?;
        if answer.trim() != format!("killed {node}") {
            bail!("killing {node}: {}", answer.trim());
        }
        Ok(())
    }

    /// Why an agent process ended early, if one did: its log's last line.
    fn failure(&mut self) -> Option<String> {
        self.processes.iter_mut().find_map(|p| {
            let status = p.child.try_wait().ok().flatten()?;
            let log = std::fs::read_to_string(&p.log).unwrap_or_default();
            let last = log.lines().last().unwrap_or_default().to_string();
            Some(format!("an agent process exited ({status}): {last}"))
        })
    }

    /// The agent processes' ids.
    fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.processes.iter().map(|p| p.child.id())
    }

    /// The agent processes' peak resident memory together.
    fn peak_rss(&self) -> Result<u64> {
        self.processes
            .iter()
            .map(|p| peak_rss(&p.child.id().to_string()))
            .sum()
    }

    /// Stops every agent (the end of their stdin) and waits for the processes.
    fn stop(self) {
        for mut p in self.processes {
            drop(p.requests);
            let _ = p.child.wait();
        }
    }
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
    let report = bench(&args.options()?)?;
    if args.json {
        print_json(&report);
    } else {
        print_text(&report);
    }
    Ok(0)
}

/// Starts a cluster of `o.nodes` on this host, measures it as `o` says, and stops it.
pub(crate) fn bench(o: &Options) -> Result<Report> {
    let coding = o.coding;
    if o.kill > coding.m {
        bail!(
            "--kill {}: more than m = {} nodes of a group cannot be recovered",
            o.kill,
            coding.m
        );
    }
    let tmp = scratch(o.dir.as_deref())?;
    let dir_path = tmp.path().join("cluster");
    launch::up(&UpOptions {
        dir: dir_path.clone(),
        nodes: Some(o.nodes),
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
        deadlines: o.deadlines,
        domains: Default::default(),
        agent_placement: AgentPlacement {
            threads: Some(1),
            ..AgentPlacement::default()
        },
    })?;
    let result = measure(o, &dir_path, tmp.path());
    let down = launch::down(&dir_path, true);
    let report = result?;
    down?;
    Ok(report)
}

fn print_text(r: &Report) {
    println!(
        "{} nodes (k={} m={}, {} ranks of {} B): registered in {:.2} s; per epoch: commit {:.3} s, \
         coordinator CPU {:.4} s ({:.1} µs/node), agents' and ranks' CPU {:.1} µs/node, \
         {:.1} I/O calls/node, {:.0} B/node, journal {} B{}",
        r.nodes,
        r.coding.k,
        r.coding.m,
        r.ranks,
        r.size_per_node,
        r.register_seconds,
        r.commit_seconds,
        r.coordinator_cpu_seconds_per_epoch,
        r.coordinator_cpu_microseconds_per_node_per_epoch,
        r.nodes_cpu_microseconds_per_node_per_epoch,
        r.coordinator_io_calls_per_node_per_epoch,
        r.coordinator_io_bytes_per_node_per_epoch,
        r.journal_bytes_per_epoch,
        r.heartbeat_cpu_seconds_per_second
            .map(|s| format!("; at rest {s:.4} CPU s/s"))
            .unwrap_or_default()
    );
    if let (Some(detect), Some(recover)) = (r.detect_seconds, r.recover_seconds) {
        println!(
            "killed {}: detected in {detect:.2} s (liveness {:.1} s), recovered in {recover:.2} s \
             ({:.2} s planning and commits; planned in {:.2} s, {:.2} s of it verifying the survivors)",
            r.killed.join(" "),
            r.liveness_seconds,
            r.recover_plan_and_commit_seconds.unwrap_or_default(),
            r.plan_seconds.unwrap_or_default(),
            r.verify_seconds.unwrap_or_default()
        );
    }
    println!(
        "every rank restarted byte-exact in {:.2} s; coordinator RSS {} MiB, agents {} KiB per node ({} processes)",
        r.restart_seconds,
        r.coordinator_rss_bytes >> 20,
        r.agent_rss_bytes_per_node >> 10,
        r.agent_processes
    );
}

/// `eckpt bench control-ranks`: some ranks of `eckpt bench control`'s job, as threads.
#[derive(clap::Args)]
pub struct RanksArgs {
    /// The cluster directory.
    #[arg(long)]
    dir: PathBuf,
    /// Each rank's node, by rank, comma-separated (the job's size is their number).
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// The first rank run here.
    #[arg(long)]
    first: u32,
    /// Ranks run here.
    #[arg(long)]
    count: u32,
    /// Bytes of image per rank.
    #[arg(long, value_parser = parse_size)]
    size: u64,
}

/// What a rank process answers to a checkpoint request.
#[derive(Serialize, Deserialize)]
enum RanksAnswer {
    /// Each rank's memory as checkpointed (xxh3), by rank.
    Digests(Vec<u64>),
    Error(String),
}

/// Reads a seed per line on stdin; every rank changes its image and checkpoints, and the
/// answer is a JSON line ([`RanksAnswer`]). Ends the ranks at the end of stdin.
pub fn run_ranks(args: RanksArgs) -> Result<i32> {
    let world = args.nodes.len() as u32;
    let change = Change {
        pattern: Pattern::Mat,
        fraction: None,
    };
    let ranks = args.first..(args.first + args.count).min(world);
    let job = RankJob::start_some(
        &args.dir,
        ranks,
        world,
        args.size as usize,
        Some(&args.nodes),
        change,
    );
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let seed: u64 = line?.trim().parse().context("a seed")?;
        let answer = match job.checkpoint_all(seed) {
            Ok(step) => RanksAnswer::Digests(step.digests),
            Err(e) => RanksAnswer::Error(format!("{e:#}")),
        };
        writeln!(out, "{}", serde_json::to_string(&answer)?)?;
        out.flush()?;
    }
    job.finish();
    Ok(0)
}

/// The job's ranks in processes of at most `per_process` ranks each.
struct RankProcesses {
    processes: Vec<(Child, ChildStdin, BufReader<ChildStdout>)>,
}

impl RankProcesses {
    fn start(
        dir: &Path,
        logs: &Path,
        nodes: &[String],
        size: usize,
        per_process: usize,
    ) -> Result<RankProcesses> {
        let exe = this_exe()?;
        let per_process = per_process.max(1);
        let mut processes = Vec::new();
        for (i, first) in (0..nodes.len()).step_by(per_process).enumerate() {
            let log = logs.join(format!("ranks-{i}.log"));
            let mut child = Command::new(&exe)
                .args(["bench", "control-ranks", "--dir"])
                .arg(dir)
                .args(["--nodes", &nodes.join(",")])
                .args(["--first", &first.to_string(), "--count", &per_process.to_string()])
                .args(["--size", &size.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(&log).with_context(|| log.display().to_string())?)
                .spawn()
                .context("starting eckpt bench control-ranks")?;
            let requests = child.stdin.take().context("the ranks' stdin")?;
            let answers = BufReader::new(child.stdout.take().context("the ranks' stdout")?);
            processes.push((child, requests, answers));
        }
        Ok(RankProcesses { processes })
    }

    /// The rank processes' ids.
    fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.processes.iter().map(|(child, _, _)| child.id())
    }

    /// Every rank changes its image (from `seed`) and checkpoints once, and the epoch
    /// commits: the seconds from the request to the last answer, and every rank's digest.
    fn checkpoint_all(&mut self, seed: u64) -> Result<(f64, Vec<u64>)> {
        let began = Instant::now();
        for (_, requests, _) in &mut self.processes {
            writeln!(requests, "{seed}")?;
            requests.flush()?;
        }
        let mut digests = Vec::new();
        for (_, _, answers) in &mut self.processes {
            let mut line = String::new();
            answers.read_line(&mut line)?;
            match serde_json::from_str(&line).with_context(|| format!("a rank process answered {line:?}"))? {
                RanksAnswer::Digests(d) => digests.extend(d),
                RanksAnswer::Error(e) => bail!("{e}"),
            }
        }
        Ok((began.elapsed().as_secs_f64(), digests))
    }

    /// Ends every rank (the end of their stdin) and waits for the processes.
    fn stop(self) {
        for (mut child, requests, _) in self.processes {
            drop(requests);
            let _ = child.wait();
        }
    }
}

fn measure(o: &Options, dir_path: &Path, logs: &Path) -> Result<Report> {
    let dir = ClusterDir::new(dir_path)?;
    let names: Vec<String> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(coordinator(&dir, Status))?
        .nodes
        .into_iter()
        .map(|n| n.name)
        .collect();
    let mut agents = Agents::start(dir_path, logs, &names, o.per_process)?;
    let result = measure_with(o, dir_path, logs, &mut agents);
    agents.stop();
    result
}

fn measure_with(o: &Options, dir_path: &Path, logs: &Path, agents: &mut Agents) -> Result<Report> {
    let coding = o.coding;
    let dir = ClusterDir::new(dir_path)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let deadlines = dir.load()?.deadlines;
    let coordinator_pid = read_pid_file(&dir.coordinator()).context("the coordinator's pid")?;
    let started = Instant::now();
    let register_wait = deadlines.start_wait() + Duration::from_secs(o.nodes as u64 / 16);
    until_status(&rt, &dir, register_wait, "every agent registered", |s| {
        s.nodes.iter().all(|n| n.alive)
    })
    .map_err(|e| match agents.failure() {
        Some(why) => anyhow::anyhow!("{e}: {why}"),
        None => e,
    })?;
    let register_seconds = started.elapsed().as_secs_f64();

    let status = rt.block_on(coordinator(&dir, Status))?;
    let holders = data_holders(&status, coding);
    let size = o.size_per_node as usize;
    let mut ranks = RankProcesses::start(dir_path, logs, &holders, size, o.per_process)?;
    let journal_bytes =
        || -> Result<u64> { Ok(rt.block_on(coordinator(&dir, Status))?.journal_bytes_written) };
    let mut epochs = Vec::new();
    let mut digests = Vec::new();
    let node_pids: Vec<u32> = agents.pids().chain(ranks.pids()).collect();
    for seed in 0..o.epochs.max(2) as u64 {
        let journal_before = journal_bytes()?;
        let (cpu_before, io_before) = (cpu_seconds(coordinator_pid)?, io_of(coordinator_pid)?);
        let nodes_before = cpu_seconds_of_all(&node_pids)?;
        let (commit_seconds, step_digests) = ranks.checkpoint_all(seed)?;
        let (cpu_after, io_after) = (cpu_seconds(coordinator_pid)?, io_of(coordinator_pid)?);
        let nodes_after = cpu_seconds_of_all(&node_pids)?;
        let io = io_after - io_before;
        epochs.push(Epoch {
            commit_seconds,
            coordinator_cpu_seconds: cpu_after - cpu_before,
            nodes_cpu_seconds: nodes_after - nodes_before,
            coordinator_io_calls: io.calls,
            coordinator_io_bytes: io.bytes,
            journal_bytes: journal_bytes()? - journal_before,
        });
        digests = step_digests;
    }
    let heartbeat_cpu_seconds_per_second = match o.rest > 0.0 {
        true => {
            let cpu_before = cpu_seconds(coordinator_pid)?;
            std::thread::sleep(Duration::from_secs_f64(o.rest));
            Some((cpu_seconds(coordinator_pid)? - cpu_before) / o.rest)
        }
        false => None,
    };
    ranks.stop();

    let killed: Vec<String> = status.groups[0]
        .members
        .iter()
        .filter(|n| holders.contains(n))
        .take(o.kill)
        .cloned()
        .collect();
    let (mut detect_seconds, mut recover_seconds, mut recover_plan_and_commit_seconds) = (None, None, None);
    let (mut plan_seconds, mut verify_seconds) = (None, None);
    if !killed.is_empty() {
        let began = Instant::now();
        for node in &killed {
            agents.kill(node)?;
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
        (plan_seconds, verify_seconds) = (Some(report.plan_seconds), Some(report.verify_seconds));
    }
    let restart_seconds = restart_all(dir_path, size, &digests, o.restart_threads)?;

    let later: Vec<f64> = epochs.iter().skip(1).map(|e| e.coordinator_cpu_seconds).collect();
    let cpu_per_epoch = median(&later);
    let per_node = |f: &dyn Fn(&Epoch) -> f64| {
        median(&epochs.iter().skip(1).map(f).collect::<Vec<_>>()) / o.nodes as f64
    };
    Ok(Report {
        nodes: o.nodes,
        coding,
        ranks: holders.len(),
        size_per_node: o.size_per_node,
        register_seconds,
        commit_seconds: median(
            &epochs
                .iter()
                .skip(1)
                .map(|e| e.commit_seconds)
                .collect::<Vec<_>>(),
        ),
        coordinator_cpu_seconds_per_epoch: cpu_per_epoch,
        coordinator_cpu_microseconds_per_node_per_epoch: cpu_per_epoch * 1e6 / o.nodes as f64,
        nodes_cpu_microseconds_per_node_per_epoch: per_node(&|e| e.nodes_cpu_seconds) * 1e6,
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
        plan_seconds,
        verify_seconds,
        restart_seconds,
        coordinator_rss_bytes: peak_rss(&coordinator_pid.to_string())?,
        agent_processes: agents.processes.len(),
        agent_rss_bytes_per_node: agents.peak_rss()? / o.nodes as u64,
    })
}
