//! Managing a local cluster: `up`, `down`, `status`, `join`, `leave`, `kill-node`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use eckpt_cluster::launch::{self, UpOptions};
use eckpt_cluster_api::commands;
use eckpt_cluster_api::dirs::{AgentPlacement, ClusterDir, Deadlines, FlushConfig};
use eckpt_cluster_api::msg::{Leave, Status, StatusReport};
use eckpt_codec::CodeKind;
use eckpt_coding::{CodingConfig, Layout, Mode, Topology};

use crate::output::print_json;
use crate::size::parse_size;

/// Runs an async cluster call to completion.
pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> Result<T> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(future))
}

/// The running `eckpt` executable (agents and the coordinator are started from it).
pub fn this_exe() -> Result<PathBuf> {
    std::env::current_exe().context("locating the eckpt executable")
}

/// How a cluster codes its checkpoints (shared by `up` and `bench cluster`).
#[derive(clap::Args, Clone)]
pub struct CodingArgs {
    /// Data shards per group.
    #[arg(long, default_value_t = 4)]
    k: usize,
    /// Parity shards per group: any m lost members of a group are survivable.
    #[arg(long, default_value_t = 2)]
    m: usize,
    /// Generator matrix.
    #[arg(long, default_value = "cauchy", value_parser = ["cauchy", "rs"])]
    code: String,
    /// Incremental mode: full (whole images), stripe (each epoch's deltas coded as a stripe of
    /// their own) or update (parity updated in place).
    #[arg(long, default_value = "full")]
    pub mode: Mode,
    /// Parity layout: dedicated parity nodes, or rotated (every node holds data and parity)
    /// [default: dedicated; rotated for `eckpt run --launcher srun`].
    #[arg(long)]
    layout: Option<Layout>,
    /// Encode/decode topology: pipeline, fanin, broadcast or ring.
    #[arg(long, default_value = "pipeline")]
    topology: Topology,
    /// Transfer unit (chunk) of the coding pipeline.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block_size: u64,
    /// Stripe mode: delta stripes before a full stripe replaces the chain.
    #[arg(long, default_value_t = 8)]
    max_stripes: u32,
}

impl CodingArgs {
    /// The validated configuration.
    pub fn coding(&self) -> Result<CodingConfig> {
        let coding = CodingConfig {
            k: self.k,
            m: self.m,
            code: CodeKind::from_name(&self.code).context("unknown code")?,
            mode: self.mode,
            layout: self.layout.unwrap_or(Layout::Dedicated),
            topology: self.topology,
            chunk: u32::try_from(self.block_size).context("block size too large")?,
            max_stripes: self.max_stripes,
        };
        coding.validate()?;
        Ok(coding)
    }
}

/// The last checkpoint level (shared by `up` and `run`): committed epochs copied to shared
/// storage, from which a job restarts after losing more than m nodes of a group or the
/// whole cluster, on any number of nodes.
#[derive(clap::Args, Clone)]
pub struct FlushArgs {
    /// Flush committed epochs to this directory on storage every node sees (a parallel
    /// file system): new, empty, or eckpt's (a non-empty directory without eckpt's mark is
    /// refused). A new cluster whose flush directory holds its job's flushed epochs resumes
    /// the newest (new clusters only).
    #[arg(long)]
    flush_dir: Option<PathBuf>,
    /// Flush when at least N epochs committed since the last flush (1: every epoch; 0: only
    /// `eckpt flush`).
    #[arg(long, default_value_t = 10, requires = "flush_dir")]
    flush_every: u64,
    /// Bytes per second each node writes to the flush directory at most (e.g. 200MiB), so
    /// that flushing does not starve the encode of later epochs; default: unbounded.
    #[arg(long, value_parser = parse_size, requires = "flush_dir")]
    flush_rate: Option<u64>,
    /// Flushed epochs kept (older ones are deleted once a newer one is published).
    #[arg(long, default_value_t = 2, requires = "flush_dir")]
    flush_keep: usize,
    /// Let the job restore, and continue, the flushed state of job JOB (new clusters only):
    /// without it a flush directory whose newest epoch is another job's is refused. `-`: an
    /// epoch that records no job id (ranks started outside `eckpt run`, or an older eckpt's).
    #[arg(long, value_name = "JOB", requires = "flush_dir")]
    restore_from_job: Option<String>,
}

impl FlushArgs {
    /// The configuration, when --flush-dir was given.
    pub fn config(&self) -> Option<FlushConfig> {
        self.flush_dir.as_ref().map(|dir| FlushConfig {
            dir: dir.clone(),
            every: self.flush_every,
            rate: self.flush_rate,
            keep: self.flush_keep,
            restore_from_job: self.restore_from_job.clone(),
        })
    }
}

/// What a new cluster looks like (shared by `up` and `run`).
#[derive(clap::Args, Clone)]
pub struct ShapeArgs {
    /// Nodes (agents n0 … n{N-1}), formed into groups of k+m (new clusters only).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Spare nodes (s0 …) that replace lost ones.
    #[arg(long, default_value_t = 0)]
    spares: usize,
    #[command(flatten)]
    coding: CodingArgs,
    /// Run each agent in its own network namespace (needs root and iproute2).
    #[arg(long)]
    netns: bool,
    /// Shape every namespace's link with tc tbf (e.g. 1gbit, 100mbit).
    #[arg(long)]
    link_rate: Option<String>,
    /// TLS 1.3 around every TCP connection (agents, peers, coordinator), for hosts that talk
    /// across a network others share; the cluster's certificate is made with it
    /// (`D/tls.pem`) and pinned.
    #[arg(long)]
    tls: bool,
    /// Start only the coordinator: the agents n0 … (and s0 …) run on their own hosts,
    /// started by another launcher (`eckpt agent --dir D --name n0 --store /local/ssd …`).
    #[arg(long)]
    no_agents: bool,
    /// Address of the coordinator's TCP listener, reachable by agents on other hosts
    /// (default: loopback, or the bridge of --netns).
    #[arg(long)]
    bind: Option<String>,
    /// A failure domain and its nodes, `DOMAIN=NODE,NODE,…` (a rack, a chassis, a switch,
    /// a power supply: nodes that fail together); repeat per domain. Groups are formed so
    /// that none holds more than m nodes of one domain where the nodes allow (new clusters).
    #[arg(long = "domain", value_name = "DOMAIN=NODES")]
    domains: Vec<String>,
    #[command(flatten)]
    flush: FlushArgs,
    #[command(flatten)]
    deadlines: DeadlineArgs,
    /// The agents' nice value (0–19): under contention the ranks get the cores first,
    /// and the encode waits (new clusters; recorded, every agent applies it).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..=19))]
    agent_nice: Option<i32>,
    /// The CPUs the agents may run on, as a list (`0-1`, `14,15`): cores set aside for
    /// them, off the ranks' (new clusters; a CPU an agent's host lacks stops that agent).
    #[arg(long, value_name = "LIST")]
    agent_cpus: Option<String>,
    /// Threads each agent reads, multiplies and writes every chunk of an encode or decode
    /// on (default: one per core the agent may run on; new clusters).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    agent_threads: Option<u16>,
}

/// The cluster's time bounds (shared by `up` and `run`; recorded in `cluster.json`).
#[derive(clap::Args, Clone)]
pub struct DeadlineArgs {
    /// An agent silent this long is dead (heartbeats go six times per period).
    #[arg(long, default_value = "3s", value_parser = parse_deadline)]
    liveness: Duration,
    /// A job's lease lasts this long after its `eckpt run` last renewed it: when that run
    /// dies, a new run of the job may take over only then, and the dead run's ranks are
    /// refused from then on.
    #[arg(long, default_value = "10s", value_parser = parse_deadline)]
    lease: Duration,
    /// How long a coordinator that hears from no agent at all suspects its own link (a
    /// partition) rather than every node, declaring nobody dead; and how long `eckpt run`
    /// awaits members of a group lost beyond m (rebooting, cut off) before it ends the job.
    #[arg(long, default_value = "60s", value_parser = parse_deadline)]
    partition_grace: Duration,
    /// Stop the cluster (as `eckpt down`, checkpoints kept) once no job has run on it for
    /// this long (e.g. 2h); default: it runs until `eckpt down`.
    #[arg(long, value_name = "DURATION", value_parser = parse_deadline)]
    idle_lease: Option<Duration>,
    /// How long a node in a coding task waits for a peer's stream to arrive (a peer that
    /// is alive but slow to start; one declared dead cancels the task at once).
    #[arg(long, default_value = "120s", value_parser = parse_deadline)]
    peer_wait: Duration,
    /// How long a rank waits for the other ranks of its job (the previous epoch to be
    /// decided, every rank at a pace point) before it fails with an error naming them.
    #[arg(long, default_value = "10m", value_parser = parse_deadline)]
    open_wait: Duration,
    /// How long a process waits for another to start: `up` for the coordinator and the
    /// agents, a new node's agent for the coordinator to accept it (a known node's keeps
    /// trying: its store holds committed checkpoints), `eckpt run` for agents that other
    /// launchers start.
    #[arg(long, default_value = "60s", value_parser = parse_deadline)]
    start_wait: Duration,
    /// How long a command or a rank waits to reach the coordinator.
    #[arg(long, default_value = "5s", value_parser = parse_deadline)]
    connect_wait: Duration,
    /// How long a daemon gives a connected peer to prove it holds the cluster's secret.
    #[arg(long, default_value = "10s", value_parser = parse_deadline)]
    handshake_wait: Duration,
}

/// The longest time bound a cluster takes: longer ones are refused rather than cut (in
/// milliseconds a `u64` wraps past 584 million years, and deadlines are added to clocks).
const LONGEST_DEADLINE: Duration = Duration::from_secs(366 * 24 * 3600);

/// A time bound, as `humantime` reads it (`3s`, `10m`, `2h`), at most [`LONGEST_DEADLINE`].
fn parse_deadline(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if duration > LONGEST_DEADLINE {
        return Err(format!(
            "{text} is longer than a cluster waits for anything (at most {})",
            humantime::format_duration(LONGEST_DEADLINE)
        ));
    }
    Ok(duration)
}

impl DeadlineArgs {
    pub(crate) fn deadlines(&self) -> Deadlines {
        Deadlines {
            liveness_ms: self.liveness.as_millis() as u64,
            lease_ms: self.lease.as_millis() as u64,
            partition_grace_ms: self.partition_grace.as_millis() as u64,
            idle_ms: self.idle_lease.map_or(0, |d| d.as_millis() as u64),
            peer_wait_ms: self.peer_wait.as_millis() as u64,
            open_wait_ms: self.open_wait.as_millis() as u64,
            start_wait_ms: self.start_wait.as_millis() as u64,
            connect_ms: self.connect_wait.as_millis() as u64,
            handshake_ms: self.handshake_wait.as_millis() as u64,
        }
    }
}

/// `--domain DOMAIN=NODE,NODE,…` options as each node's domain; a node in two domains, or
/// a domain without a name or nodes, is refused.
fn domains_by_node(options: &[String]) -> Result<BTreeMap<String, String>> {
    let mut by_node = BTreeMap::new();
    for option in options {
        let (domain, nodes) = option
            .split_once('=')
            .filter(|(d, n)| !d.trim().is_empty() && !n.trim().is_empty())
            .ok_or_else(|| anyhow::anyhow!("--domain {option:?}: expected DOMAIN=NODE,NODE,…"))?;
        for node in nodes.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if let Some(other) = by_node.insert(node.to_string(), domain.trim().to_string()) {
                bail!(
                    "--domain: node {node} is in two domains ({other} and {})",
                    domain.trim()
                );
            }
        }
    }
    Ok(by_node)
}

impl ShapeArgs {
    /// `--agent-nice`, `--agent-cpus` and `--agent-threads`, the list checked here (its
    /// CPUs on each host).
    fn agent_placement(&self) -> Result<AgentPlacement> {
        if let Some(list) = &self.agent_cpus {
            let checked = if self.no_agents {
                // The agents start on other hosts: only the list's form can be checked here.
                eckpt_agent::placement::parse_cpu_list(list)
            } else {
                eckpt_agent::placement::usable_cpus(list)
            };
            checked.map_err(|e| anyhow::anyhow!("--agent-cpus: {e}"))?;
        }
        Ok(AgentPlacement {
            nice: self.agent_nice,
            cpus: self.agent_cpus.clone(),
            threads: self.agent_threads.map(usize::from),
        })
    }

    /// The parity layout asked for (`--layout`, or a configuration file), if any.
    pub fn layout(&self) -> Option<Layout> {
        self.coding.layout
    }

    /// Nodes of a cluster created without --nodes: one group of k + m.
    pub fn default_nodes(&self) -> Result<usize> {
        let coding = self.coding.coding()?;
        Ok(coding.k + coding.m)
    }

    /// `up`'s options for a cluster in `dir` of `nodes` nodes (when not given).
    pub fn up_options(&self, dir: PathBuf, nodes: Option<usize>) -> Result<UpOptions> {
        Ok(UpOptions {
            dir,
            nodes: self.nodes.or(nodes),
            spares: self.spares,
            names: Vec::new(),
            coding: self.coding.coding()?,
            netns: self.netns,
            tls: self.tls,
            link_rate: self.link_rate.clone(),
            exe: this_exe()?,
            agents: !self.no_agents,
            bind: self.bind.clone(),
            flush: self.flush.config(),
            job: None,
            deadlines: self.deadlines.deadlines(),
            domains: domains_by_node(&self.domains)?,
            agent_placement: self.agent_placement()?,
        })
    }
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// Cluster directory: created, or, when it holds a stopped cluster, that cluster is
    /// started again as it was (its nodes, coding and network are recorded there; the
    /// settings below then do not apply).
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Return once the cluster is up (it keeps running; `eckpt down` stops it). Without it,
    /// `up` waits and brings the cluster down on Ctrl-C.
    #[arg(long)]
    detach: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

pub fn run_up(args: UpArgs) -> Result<i32> {
    let summary = launch::up(&args.shape.up_options(args.dir.clone(), None)?)?;
    if args.json {
        print_json(&summary);
    } else {
        let coding = summary.coding;
        println!(
            "cluster {} in {}: {} nodes{} (k={} m={}, {} mode, {} layout, {} topology{})",
            if summary.restarted { "restarted" } else { "up" },
            summary.dir.display(),
            summary.nodes.len(),
            if summary.spares.is_empty() {
                String::new()
            } else {
                let n = summary.spares.len();
                format!(" + {n} {}", if n == 1 { "spare" } else { "spares" })
            },
            coding.k,
            coding.m,
            coding.mode,
            coding.layout,
            coding.topology,
            summary
                .link_rate
                .as_ref()
                .map(|r| format!(", {r} links"))
                .unwrap_or_default()
        );
        if let Some(flush) = &summary.flush {
            println!(
                "flushes to {} every {}, keeping {}",
                flush.dir.display(),
                match flush.every {
                    0 => "time `eckpt flush` asks".to_string(),
                    1 => "epoch".to_string(),
                    n => format!("{n} epochs"),
                },
                flush.keep
            );
        }
        if let Some(restore) = &summary.from_flush {
            println!("{restore}");
        }
        for exposed in &summary.exposed {
            println!("WARNING: {exposed}");
        }
    }
    if !args.detach {
        eprintln!("running; Ctrl-C brings the cluster down");
        block_on(async { tokio::signal::ctrl_c().await })??;
        launch::down(&args.dir, false)?;
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct DownArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Also delete every checkpoint: the agents' node-local data (on every host whose agent
    /// runs) and what eckpt created in the directory — nothing else, so the directory
    /// stays if it holds other files.
    #[arg(long)]
    purge: bool,
}

pub fn run_down(args: DownArgs) -> Result<i32> {
    let kept = launch::down(&args.dir, args.purge)?;
    let dir = args.dir.display();
    for line in &kept {
        eprintln!("eckpt down: {line}");
    }
    if args.purge {
        println!("cluster in {dir} stopped and its checkpoints deleted");
    } else {
        println!("cluster in {dir} stopped; `eckpt up --dir {dir}` starts it again with its data");
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// List every group and every node, however many (a large cluster's are summarized:
    /// a line per state, with the nodes and groups that need attention listed whole).
    #[arg(long)]
    all: bool,
}

pub fn status(dir: &std::path::Path) -> Result<StatusReport> {
    let dir = ClusterDir::new(dir)?;
    Ok(*block_on(commands::coordinator_call(&dir, Status, |_| {}))??)
}

pub fn run_status(args: StatusArgs) -> Result<i32> {
    let s = status(&args.dir)?;
    if args.json {
        print_json(&s);
        return Ok(0);
    }
    print!("{}", super::status_text::render(&s, args.all));
    Ok(0)
}

/// Which node of which cluster (shared by `join` and `agent`).
#[derive(clap::Args)]
pub struct NodeArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    pub dir: PathBuf,
    /// Node name (letters, digits, '-', '_'); a known one comes back with its data.
    /// Default for a process srun starts: the Slurm node's name.
    #[arg(long, env = "SLURMD_NODENAME")]
    pub name: String,
    /// Join as a spare: holds nothing until it replaces a lost node.
    #[arg(long)]
    pub spare: bool,
    /// The failure domain this node is in (a rack, a switch, a power feed: what one fault
    /// takes down whole); it replaces the one `up --domain` gave. Groups are formed so that
    /// none holds more than m members of one domain where possible.
    #[arg(long, value_name = "DOMAIN")]
    pub domain: Option<String>,
}

pub fn run_join(args: NodeArgs) -> Result<i32> {
    launch::join(
        &args.dir,
        &args.name,
        args.spare,
        args.domain.as_deref(),
        &this_exe()?,
    )?;
    println!("{} joined", args.name);
    Ok(0)
}

#[derive(clap::Args)]
pub struct LeaveArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Node to stop (its ranks are rebuilt elsewhere by the next `eckpt recover`).
    node: String,
}

pub fn run_leave(args: LeaveArgs) -> Result<i32> {
    let dir = ClusterDir::new(&args.dir)?;
    block_on(commands::coordinator_call(
        &dir,
        Leave {
            node: args.node.clone(),
        },
        |_| {},
    ))??;
    println!("{} left", args.node);
    Ok(0)
}

#[derive(clap::Args)]
pub struct KillArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Node whose agent to SIGKILL.
    node: String,
    /// Also delete the node's local data (a permanent loss).
    #[arg(long)]
    wipe: bool,
}

pub fn run_kill(args: KillArgs) -> Result<i32> {
    let pid = launch::kill_node(&args.dir, &args.node, args.wipe)?;
    println!(
        "{}: {}{}",
        args.node,
        pid.map_or("agent was not running".into(), |p| format!("killed pid {p}")),
        if args.wipe { ", local data wiped" } else { "" }
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_too_long_to_count_is_refused_not_wrapped() {
        assert_eq!(parse_deadline("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_deadline("1year"), Ok(Duration::from_secs(31_557_600)));
        // 2^64 ms and a bit: as milliseconds in a u64 it wrapped to 384 ms.
        let e = parse_deadline("18446744073709552s").unwrap_err();
        assert!(e.contains("longer than a cluster waits for anything"), "{e}");
        assert!(parse_deadline("367days").is_err());
        assert!(parse_deadline("soon").is_err());
    }
}
