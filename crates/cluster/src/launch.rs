//! Starting and stopping a local cluster: `eckpt up` (coordinator and agents as detached
//! processes, optionally each agent in its own network namespace), `down`, `join`, and
//! `kill-node` for fault injection.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use eckpt_proto::{ClusterSecret, Endpoint};

use crate::netns::{parse_rate, Network};
use eckpt_agent::identity;
use eckpt_cluster_api::commands;
use eckpt_cluster_api::dirs::{
    check_domain_name, check_node_name, write_atomic, AgentPlacement, ClusterDir, ClusterFile, Deadlines,
    FlushConfig, NetnsConfig, CLUSTER_FORMAT,
};
use eckpt_cluster_api::msg::{
    FlushRestore, NodePurge, PurgeCluster, Recover, Relocation, Status, StatusReport, StopCluster, UpSummary,
};
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::CodingConfig;
use eckpt_coordinator::Journal;

/// What `eckpt up` starts.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Cluster directory (created).
    pub dir: PathBuf,
    /// Member nodes (`n0`…) of a new cluster; `None` restarts the stopped cluster in `dir`.
    pub nodes: Option<usize>,
    /// Spare nodes (`s0`…).
    pub spares: usize,
    /// The nodes' names, members first, then spares (a batch system's host names, so that
    /// the agent it starts on a host finds its node); empty: `n0`… and `s0`….
    pub names: Vec<String>,
    /// Coding.
    pub coding: CodingConfig,
    /// Run each agent in its own network namespace.
    pub netns: bool,
    /// TLS around every TCP connection of the cluster (its hosts talk across a network
    /// others share).
    pub tls: bool,
    /// Shape each namespace's link to this `tc` rate.
    pub link_rate: Option<String>,
    /// The `eckpt` executable to start processes with.
    pub exe: PathBuf,
    /// Start the agents too; `false`: only the coordinator — the agents are started on
    /// their hosts by another launcher (`mpirun -npernode 1 eckpt agent …`, srun, ssh).
    pub agents: bool,
    /// Address of the coordinator's TCP listener (default: loopback, or the bridge of a
    /// namespaced cluster); agents on other hosts need one they can reach.
    pub bind: Option<String>,
    /// Flushes to shared storage (`--flush-dir`…); a new cluster whose flush directory
    /// holds flushed epochs resumes the newest.
    pub flush: Option<FlushConfig>,
    /// The job a new cluster is made for (`eckpt run`'s): it resumes only that job's flushed
    /// epochs (or `--restore-from-job`'s); `None`: the job of whatever it restores.
    pub job: Option<String>,
    /// The cluster's time bounds (new clusters; a restarted one keeps its own).
    pub deadlines: Deadlines,
    /// Failure domains by node (new clusters): groups are formed across them.
    pub domains: BTreeMap<String, String>,
    /// Where the agents run on their hosts' cores (new clusters).
    pub agent_placement: AgentPlacement,
}

fn spawn_detached(mut command: Command, log: &Path) -> Result<Child, ClusterError> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(eckpt_cluster_api::io_at(log))?;
    let err = out.try_clone().map_err(eckpt_cluster_api::io_at(log))?;
    command.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid is async-signal-safe; the child gets its own session so it outlives
    // the command that started it and no terminal signal reaches it.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    command
        .spawn()
        .map_err(|e| ClusterError::Refused(format!("starting {command:?}: {e}")))
}

/// Whether process `pid` runs: it exists and is not a zombie. A daemon started by this
/// process (`eckpt run` brings its cluster up itself) stays a zombie after it died until it
/// is reaped, which is tried here too.
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: waitpid with WNOHANG only reaps `pid` if it is our child and has exited.
    unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid as i32, 0) == 0 };
    exists
        && !fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
}

/// Whether a process directory's recorded pid is a live process running `eckpt`.
pub(crate) fn running(dir: &Path) -> Option<u32> {
    let pid = eckpt_cluster_api::dirs::read_pid_file(dir)?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let is_eckpt = cmdline.split(|&b| b == 0).any(|arg| arg.ends_with(b"eckpt"))
        || cmdline.windows(5).any(|w| w == b"eckpt");
    (pid_alive(pid) && is_eckpt).then_some(pid)
}

fn agent_command(
    exe: &Path,
    file: &ClusterFile,
    dir: &ClusterDir,
    name: &str,
    spare: bool,
    domain: Option<&str>,
) -> Result<Command, ClusterError> {
    let (mut command, bind) = match &file.netns {
        Some(net) => {
            let index = *net
                .nodes
                .get(name)
                .ok_or_else(|| ClusterError::Internal(format!("node {name} has no namespace")))?;
            let network = Network::for_dir(dir.root());
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &network.namespace(name)]).arg(exe);
            (c, network.node_ip(index))
        }
        None => (Command::new(exe), "127.0.0.1".to_string()),
    };
    command
        .arg("agent")
        .arg("--dir")
        .arg(dir.root())
        .args(["--name", name, "--bind", &bind]);
    if spare {
        command.arg("--spare");
    }
    if let Some(domain) = domain {
        command.args(["--domain", domain]);
    }
    Ok(command)
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) -> Result<(), ClusterError> {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            return Err(ClusterError::Unreachable(format!("timed out waiting for {what}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The coordinator's status, if it answers.
pub(crate) fn status_now(dir: &ClusterDir) -> Option<StatusReport> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let status = rt.block_on(commands::coordinator_call(dir, Status, |_| {}));
    status.ok().map(|s| *s)
}

/// An agent this command started: its node, its process and its log.
struct Started {
    name: String,
    child: Child,
    log: PathBuf,
}

/// Waits, at most the cluster's start wait, until every agent of `names` is registered. An
/// agent of `started` that exits meanwhile (its store refused, its identity unreadable)
/// ends the wait at once with the last line of its log, its error.
fn wait_alive(
    dir: &ClusterDir,
    file: &ClusterFile,
    names: &[String],
    started: &mut [Started],
) -> Result<(), ClusterError> {
    let mut exited = None;
    let waited = wait_until(file.deadlines.start_wait(), "the agents to register", || {
        exited = started.iter_mut().find_map(|a| {
            matches!(a.child.try_wait(), Ok(Some(_))).then(|| (a.name.clone(), last_line(&a.log)))
        });
        exited.is_some()
            || status_now(dir).is_some_and(|s| {
                names
                    .iter()
                    .all(|n| s.nodes.iter().any(|node| &node.name == n && node.alive))
            })
    });
    match exited {
        Some((name, line)) => Err(ClusterError::Refused(format!(
            "the agent of node {name} exited before it registered: {line}"
        ))),
        None => waited,
    }
}

/// The last line of a daemon's log: its error, when it exited on one.
fn last_line(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map_or_else(|| format!("no message (see {})", log.display()), str::to_string)
}

/// `eckpt up`: creates the cluster directory and starts everything, or, when the directory
/// holds a stopped cluster, brings that one back as it was; returns once every agent is
/// registered.
pub fn up(options: &UpOptions) -> Result<UpSummary, ClusterError> {
    let dir = ClusterDir::new(&options.dir)?;
    if dir.cluster_file().exists() {
        return restart(&dir, options);
    }
    let NewCluster { file, nodes, spares } = create(&dir, options)?;
    start(&dir, &file, options, &nodes, &spares)?;
    let mut summary = summary(&dir, &file, nodes, spares, false);
    if options.agents {
        summary.from_flush = resume_flushed_job(&dir, &file)?;
    }
    Ok(summary)
}

/// A cluster directory made, before any daemon of it runs.
pub struct NewCluster {
    /// Its `cluster.json`.
    pub file: ClusterFile,
    /// Its members' names.
    pub nodes: Vec<String>,
    /// Its spares' names.
    pub spares: Vec<String>,
}

/// Makes the cluster directory `options` describe — its secret, `cluster.json` and first
/// journal — and starts nothing: what `up` does before the daemons (and what a simulation
/// does before it starts them as its hosts).
pub fn create(dir: &ClusterDir, options: &UpOptions) -> Result<NewCluster, ClusterError> {
    let node_count = options.nodes.ok_or_else(|| {
        ClusterError::NotFound(format!(
            "{} holds no cluster: --nodes is needed to create one",
            dir.root().display()
        ))
    })?;
    options.coding.validate()?;
    options.deadlines.validate()?;
    if let Some(rate) = &options.link_rate {
        parse_rate(rate)?;
    }
    let (nodes, spares) = new_cluster_shape(options, node_count).map_err(ClusterError::Invalid)?;
    let flush = options
        .flush
        .clone()
        .map(|config| absolute_flush(config, options.job.as_deref()))
        .transpose()?;
    if let Some(config) = flush.as_ref().filter(|c| c.dir.to_str().is_none()) {
        return Err(ClusterError::Invalid(format!(
            "--flush-dir {}: not UTF-8, which cluster.json cannot record",
            config.dir.display()
        )));
    }
    claim_new_dir(dir)?;
    for sub in [dir.coordinator(), dir.debug(), dir.root().join("nodes")] {
        fs::create_dir_all(&sub).map_err(eckpt_cluster_api::io_at(&sub))?;
    }
    ClusterSecret::create_file(&dir.secret())?;
    if options.tls {
        eckpt_proto::ClusterTls::create_file(&dir.tls())?;
    }
    let netns = options.netns.then(|| NetnsConfig {
        rate: options.link_rate.clone(),
        nodes: nodes
            .iter()
            .chain(&spares)
            .cloned()
            .enumerate()
            .map(|(i, n)| (n, i))
            .collect(),
    });
    let file = ClusterFile {
        format: CLUSTER_FORMAT,
        coding: options.coding,
        coordinator_unix: Endpoint::Unix(dir.coordinator_socket()),
        coordinator_tcp: None,
        coordinator_host: None,
        netns,
        flush,
        deadlines: options.deadlines,
        agent_placement: options.agent_placement.clone(),
    };
    write_cluster_file(dir, &file)?;
    let mut journal = Journal::in_domains(options.coding, &nodes, &spares, &options.domains);
    journal.job.id = options.job.clone();
    journal.save(&dir.journal())?;
    Ok(NewCluster { file, nodes, spares })
}

/// The member and spare names of a new cluster of `node_count` members, once its shape is
/// checked — enough members for a group, the names (given: one per node, valid, distinct;
/// else `n0`… and `s0`…), the nodes `--domain` names, `--link-rate` only with `--netns` —
/// or what is wrong with the options.
fn new_cluster_shape(options: &UpOptions, node_count: usize) -> Result<(Vec<String>, Vec<String>), String> {
    if options.link_rate.is_some() && !options.netns {
        return Err("--link-rate needs --netns".into());
    }
    let (k, m) = (options.coding.k, options.coding.m);
    if node_count < k + m {
        return Err(format!(
            "{node_count} nodes cannot form a group of k={k} data + m={m} parity members: need at \
             least {} nodes, or a smaller --k",
            k + m
        ));
    }
    let (nodes, spares) = node_names(options, node_count)?;
    if let Some(unknown) = options
        .domains
        .keys()
        .find(|n| !nodes.contains(n) && !spares.contains(n))
    {
        return Err(format!(
            "--domain names node {unknown}, which is not a node of the cluster ({} … {})",
            nodes.first().map_or("", String::as_str),
            spares.last().or(nodes.last()).map_or("", String::as_str)
        ));
    }
    Ok((nodes, spares))
}

/// The member and spare names of a new cluster of `node_count` members: the given names
/// (checked: one per node, valid, distinct), or `n0`… and `s0`….
fn node_names(options: &UpOptions, node_count: usize) -> Result<(Vec<String>, Vec<String>), String> {
    if options.names.is_empty() {
        return Ok((
            (0..node_count).map(|i| format!("n{i}")).collect(),
            (0..options.spares).map(|i| format!("s{i}")).collect(),
        ));
    }
    if options.names.len() != node_count + options.spares {
        return Err(format!(
            "{} node names for {node_count} nodes and {} spares",
            options.names.len(),
            options.spares
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for name in &options.names {
        check_node_name(name).map_err(|e| e.to_string())?;
        if !seen.insert(name) {
            return Err(format!("node name {name} is given twice"));
        }
    }
    let (nodes, spares) = options.names.split_at(node_count);
    Ok((nodes.to_vec(), spares.to_vec()))
}

/// The directory of a new cluster: new, or empty and this user's alone — never one holding
/// someone's files, which `down --purge` would then take for the cluster's. Created or
/// adopted owner-only (checkpoints and parity are the job's memory).
fn claim_new_dir(dir: &ClusterDir) -> Result<(), ClusterError> {
    let root = dir.root();
    if let Ok(entries) = fs::read_dir(root) {
        let names: Vec<String> = entries
            .flatten()
            .take(4)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        if !names.is_empty() {
            return Err(ClusterError::Refused(format!(
                "{} is not empty and holds no eckpt cluster (it has {}{}): a new cluster needs a new or empty directory",
                root.display(),
                names[..names.len().min(3)].join(", "),
                if names.len() > 3 { ", …" } else { "" }
            )));
        }
    }
    eckpt_private_dir::ensure(root)?;
    Ok(())
}

/// The flush configuration of a new cluster for `job` with its directory made absolute
/// (agents run elsewhere), the directory taken as a flush directory, and refused — before
/// anything starts — when its newest epoch is another job's than the one this cluster may
/// resume.
fn absolute_flush(mut config: FlushConfig, job: Option<&str>) -> Result<FlushConfig, ClusterError> {
    if config.keep == 0 {
        return Err(ClusterError::Invalid(
            "--flush-keep must keep at least 1 flushed epoch".into(),
        ));
    }
    if !config.dir.is_absolute() {
        config.dir = std::env::current_dir()
            .map_err(eckpt_cluster_api::io_at(&config.dir))?
            .join(&config.dir);
    }
    // Shared storage: whoever else can write there must not own or plant the job's flushes.
    eckpt_private_dir::ensure(&config.dir)?;
    let dir = eckpt_flush::FlushDir::new(&config.dir);
    dir.claim()?;
    dir.check_job(&eckpt_flush::JobFilter {
        job,
        restore_from: config.restore_from_job.as_deref(),
    })?;
    Ok(config)
}

/// A new cluster over the flush directory of a job: its node stores are empty, so the job
/// resumes from the newest flushed epoch (`eckpt recover` does it: a cluster with no
/// committed epoch falls back to its flush). `None` when there is nothing flushed.
fn resume_flushed_job(dir: &ClusterDir, file: &ClusterFile) -> Result<Option<FlushRestore>, ClusterError> {
    let Some(flush) = &file.flush else {
        return Ok(None);
    };
    if eckpt_flush::FlushDir::new(&flush.dir).epochs()?.is_empty() {
        return Ok(None);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Internal(format!("starting a runtime: {e}")))?;
    let recover = Recover {
        relocation: Relocation::Process,
    };
    Ok(rt
        .block_on(commands::coordinator_call(dir, recover, |_| {}))?
        .from_flush)
}

/// `up` on a directory that holds a cluster: starts what is not running — the coordinator
/// from its journal (refused here, before anything starts, if the journal is damaged), the
/// agents of every node not removed with their stores and parity, in their network
/// namespaces when the cluster has them — with the configuration recorded in the directory.
fn restart(dir: &ClusterDir, options: &UpOptions) -> Result<UpSummary, ClusterError> {
    eckpt_private_dir::check(dir.root())?;
    let mut file = dir.load()?;
    let root = dir.root().display();
    if let Some(pid) = running(&dir.coordinator()) {
        return Err(ClusterError::Refused(format!(
            "{root} already holds a cluster, running (coordinator pid {pid}): `eckpt status --dir {root}` shows it, `eckpt down --dir {root}` stops it"
        )));
    }
    if options.nodes.is_some() {
        return Err(ClusterError::Refused(format!(
            "{root} holds a stopped cluster: `eckpt up --dir {root}` without --nodes restarts it as it was (its nodes and coding are recorded there); a new cluster needs another directory"
        )));
    }
    let journal = Journal::load(&dir.journal())?;
    let (mut nodes, mut spares) = (Vec::new(), Vec::new());
    for (name, entry) in journal.nodes.iter().filter(|(_, e)| !e.removed) {
        if entry.spare { &mut spares } else { &mut nodes }.push(name.clone());
    }
    file.coordinator_tcp = None;
    file.coordinator_host = None;
    write_cluster_file(dir, &file)?;
    start(dir, &file, options, &nodes, &spares)?;
    Ok(summary(dir, &file, nodes, spares, true))
}

/// What `up` reports about the cluster it started.
fn summary(
    dir: &ClusterDir,
    file: &ClusterFile,
    nodes: Vec<String>,
    spares: Vec<String>,
    restarted: bool,
) -> UpSummary {
    // Said at every start: the domains of a cluster are fixed when it is created.
    let exposed = Journal::load(&dir.journal())
        .map(|journal| {
            journal
                .groups
                .iter()
                .filter_map(|g| {
                    let (domain, count) = journal.overexposed(&g.group)?;
                    Some(format!(
                        "group {} holds {count} members of failure domain {domain}, more than m={}: losing {domain} loses the group's data (more nodes or other domains spread it)",
                        g.group.id, g.group.m
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    UpSummary {
        exposed,
        dir: dir.root().to_path_buf(),
        coding: file.coding,
        nodes,
        spares,
        netns: file.netns.is_some(),
        link_rate: file.netns.as_ref().and_then(|n| n.rate.clone()),
        layout: file.coding.layout,
        topology: file.coding.topology,
        restarted,
        flush: file.flush.clone(),
        from_flush: None,
    }
}

/// Writes `file` as `dir`'s `cluster.json`; refused when JSON cannot hold it (a
/// `--flush-dir` that is not UTF-8).
fn write_cluster_file(dir: &ClusterDir, file: &ClusterFile) -> Result<(), ClusterError> {
    let path = dir.cluster_file();
    let bytes = serde_json::to_vec_pretty(file)
        .map_err(|e| ClusterError::Invalid(format!("{}: cannot record this cluster: {e}", path.display())))?;
    write_atomic(&path, &bytes)
}

/// Creates node `name`'s network namespace (and the bridge) unless they exist: after
/// `down` removed them, or for a node new to the cluster.
fn ensure_namespace(dir: &ClusterDir, net: &NetnsConfig, name: &str) -> Result<(), ClusterError> {
    let network = Network::for_dir(dir.root());
    if !Path::new("/sys/class/net").join(network.bridge()).exists() {
        network.create_bridge()?;
    }
    let index = *net
        .nodes
        .get(name)
        .ok_or_else(|| ClusterError::Internal(format!("node {name} has no namespace")))?;
    if !Path::new("/run/netns").join(network.namespace(name)).exists() {
        network.add_node(name, index, net.rate.as_deref())?;
    }
    Ok(())
}

/// Where a coordinator of the cluster in `dir` listens when not told: on the bridge of a
/// cluster in network namespaces (its agents reach nothing else), on the address the last
/// coordinator used when that one ran on this host (a restart), else on loopback.
pub fn default_coordinator_bind(dir: &ClusterDir, file: &ClusterFile) -> String {
    if file.netns.is_some() {
        return Network::for_dir(dir.root()).bridge_ip();
    }
    match (&file.coordinator_tcp, &file.coordinator_host) {
        (Some(Endpoint::Tcp { host, .. }), Some(last))
            if *last == eckpt_cluster_api::net::host_identity() =>
        {
            host.clone()
        }
        _ => "127.0.0.1".into(),
    }
}

/// Starts the coordinator and, unless `options.agents` is false, every agent of `nodes` and
/// `spares` not already running (with their namespaces when the cluster has them); returns
/// once all are registered.
fn start(
    dir: &ClusterDir,
    file: &ClusterFile,
    options: &UpOptions,
    nodes: &[String],
    spares: &[String],
) -> Result<(), ClusterError> {
    let exe = &options.exe;
    if let Some(net) = &file.netns {
        for name in nodes.iter().chain(spares) {
            ensure_namespace(dir, net, name)?;
        }
    }
    let bind = options
        .bind
        .clone()
        .unwrap_or_else(|| default_coordinator_bind(dir, file));
    let mut command = Command::new(exe);
    command
        .arg("coordinator")
        .arg("--dir")
        .arg(dir.root())
        .args(["--bind", &bind]);
    let log = ClusterDir::log_file(&dir.coordinator());
    let mut coordinator = spawn_detached(command, &log)?;
    let mut exited = false;
    wait_until(file.deadlines.start_wait(), "the coordinator", || {
        exited = matches!(coordinator.try_wait(), Ok(Some(_)));
        exited || (dir.load().is_ok_and(|f| f.coordinator_tcp.is_some()) && status_now(dir).is_some())
    })?;
    if exited {
        return Err(ClusterError::Refused(format!(
            "the coordinator exited: {}",
            last_line(&log)
        )));
    }
    if !options.agents {
        return Ok(());
    }
    let file = dir.load()?;
    let mut started = Vec::new();
    for (list, spare) in [(nodes, false), (spares, true)] {
        for name in list.iter().filter(|n| running(&dir.node(n)).is_none()) {
            let node_dir = dir.node(name);
            fs::create_dir_all(&node_dir).map_err(eckpt_cluster_api::io_at(&node_dir))?;
            let command = agent_command(exe, &file, dir, name, spare, None)?;
            let log = ClusterDir::log_file(&node_dir);
            started.push(Started {
                name: name.clone(),
                child: spawn_detached(command, &log)?,
                log,
            });
        }
    }
    let all: Vec<String> = nodes.iter().chain(spares).cloned().collect();
    wait_alive(dir, &file, &all, &mut started)
}

/// `eckpt join`: starts an agent named `name` (a new spare, or a node coming back). Refused
/// at once when the cluster is stopped; an agent that does not register in time is killed,
/// so a failed join leaves nothing running. `domain`: the failure domain it says it is in.
pub fn join(
    dir: &Path,
    name: &str,
    spare: bool,
    domain: Option<&str>,
    exe: &Path,
) -> Result<(), ClusterError> {
    check_node_name(name)?;
    domain.map(check_domain_name).transpose()?;
    let dir = ClusterDir::new(dir)?;
    let mut file = dir.load()?;
    if status_now(&dir).is_none() {
        let root = dir.root().display();
        return Err(ClusterError::Refused(format!(
            "the cluster in {root} is stopped (its coordinator does not answer): `eckpt up --dir {root}` starts it again"
        )));
    }
    let node_dir = dir.node(name);
    if let Some(pid) = running(&node_dir) {
        return Err(ClusterError::Refused(format!(
            "node {name} is already running (pid {pid})"
        )));
    }
    fs::create_dir_all(&node_dir).map_err(eckpt_cluster_api::io_at(&node_dir))?;
    if let Some(net) = &mut file.netns {
        if !net.nodes.contains_key(name) {
            let index = net.nodes.values().max().map_or(0, |i| i + 1);
            net.nodes.insert(name.to_string(), index);
            write_cluster_file(&dir, &file)?;
        }
    }
    if let Some(net) = &file.netns {
        ensure_namespace(&dir, net, name)?;
    }
    let command = agent_command(exe, &file, &dir, name, spare, domain)?;
    let log = ClusterDir::log_file(&node_dir);
    let mut started = [Started {
        name: name.to_string(),
        child: spawn_detached(command, &log)?,
        log,
    }];
    wait_alive(&dir, &file, &[name.to_string()], &mut started).inspect_err(|_| {
        let _ = started[0].child.kill();
        let _ = started[0].child.wait();
    })
}

/// `eckpt kill-node`: SIGKILLs a node's agent; with `wipe`, deletes its node-local data too
/// (a permanent loss).
pub fn kill_node(dir: &Path, name: &str, wipe: bool) -> Result<Option<u32>, ClusterError> {
    check_node_name(name)?;
    let dir = ClusterDir::new(dir)?;
    dir.load()?;
    let node_dir = dir.node(name);
    if !node_dir.is_dir() {
        return Err(ClusterError::NotFound(format!(
            "no node {name} in {}",
            dir.root().display()
        )));
    }
    let pid = running(&node_dir);
    if let Some(pid) = pid {
        // SAFETY: plain kill(2) of a process we verified runs eckpt.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        wait_until(Duration::from_secs(10), "the agent to die", || !pid_alive(pid))?;
    }
    if wipe {
        // The store the agent registered (`--store` puts it outside the cluster directory),
        // and only if it is that node's.
        let store = Journal::load(&dir.journal())
            .ok()
            .and_then(|j| j.nodes.get(name)?.info.as_ref().map(|i| i.store.clone()))
            .unwrap_or_else(|| dir.store(name));
        if let Some((owner, _)) = identity::owner_of(&store).filter(|(owner, _)| owner != name) {
            return Err(ClusterError::Fenced(format!(
                "the store {} registered for node {name} belongs to node {owner}: not deleting it",
                store.display()
            )));
        }
        for sub in [ClusterDir::coded_beside(&store), store] {
            if sub.exists() {
                fs::remove_dir_all(&sub).map_err(eckpt_cluster_api::io_at(&sub))?;
            }
        }
    }
    Ok(pid)
}

/// What [`stop`] deletes besides stopping the cluster's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purge {
    /// Nothing: `eckpt up --dir D` starts the cluster again with its data.
    Nothing,
    /// The agents' node-local data (stores, parity, tokens), as `down --purge` deletes it;
    /// the cluster directory stays (its logs and run records): the end of a finished job.
    NodeStores,
    /// The node-local data and then what eckpt created in the cluster directory
    /// (`down --purge`).
    Everything,
}

/// What [`stop`] deleted, and what it left that it would have deleted, one line each.
#[derive(Debug, Default)]
pub struct Purged {
    /// Directories and files deleted.
    pub removed: Vec<PathBuf>,
    /// What stays, and why.
    pub kept: Vec<String>,
}

/// `eckpt down`: stops the coordinator and every agent, removes the namespaces; with
/// `purge`, deletes what eckpt created — the agents' node-local data (through each agent,
/// wherever it runs; directly for agents that are down on this host) and the entries of
/// the cluster directory, then the directory if nothing else is in it. Returns what it
/// could not delete, one line each.
pub fn down(dir: &Path, purge: bool) -> Result<Vec<String>, ClusterError> {
    let purge = if purge { Purge::Everything } else { Purge::Nothing };
    Ok(stop(dir, purge, None)?.kept)
}

/// [`down`], deleting what `purge` says. `by_run`: the job generation of the `eckpt run`
/// that started the cluster and stops it (0: it never held the lease); the coordinator
/// refuses it while another generation holds the job, and then nothing is stopped or
/// deleted here either: the refusal is the error (`Fenced`).
pub fn stop(dir: &Path, purge: Purge, by_run: Option<u64>) -> Result<Purged, ClusterError> {
    let dir = ClusterDir::new(dir)?;
    let (file, mut out) = match dir.load() {
        Ok(file) => (Some(file), Purged::default()),
        // Unreadable (damaged, truncated): the processes it started are still found and
        // stopped, by their pid files and the locks they hold.
        Err(_) if fs::symlink_metadata(dir.cluster_file()).is_ok() => {
            let why = format!(
                "{} is unreadable: the cluster's processes are stopped by their pid files and locks",
                dir.cluster_file().display()
            );
            let out = Purged {
                kept: vec![why],
                ..Purged::default()
            };
            (None, out)
        }
        Err(e) => return Err(e),
    };
    let purged = match &file {
        Some(_) => ask_to_stop(&dir, purge, by_run)?,
        None => {
            interrupt(&daemons(&dir));
            Vec::new()
        }
    };
    let pids = daemons(&dir);
    let _ = wait_until(Duration::from_secs(5), "processes to exit", || {
        pids.iter().all(|&p| !pid_alive(p))
    });
    for &pid in pids.iter().filter(|&&p| pid_alive(p)) {
        // SAFETY: kill(2) of a process we verified runs eckpt.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    remove_network(&dir, file.as_ref());
    for node in &purged {
        if let Ok(dirs) = &node.result {
            out.removed.extend(dirs.iter().cloned());
        }
    }
    if purge == Purge::Nothing {
        return Ok(out);
    }
    purge_node_stores(&dir, &purged, purge == Purge::NodeStores, &mut out);
    if purge == Purge::Everything {
        if let Some(why) = purge_cluster_dir(&dir, &mut out)? {
            out.kept.push(format!("kept {}: {why}", dir.root().display()));
        }
    }
    Ok(out)
}

/// Asks the coordinator to stop the cluster (and its agents to purge, unless `purge` is
/// nothing); what the agents deleted. A refusal of this run's (`by_run`) is returned;
/// a coordinator that does not answer leaves the stopping to the signals.
fn ask_to_stop(dir: &ClusterDir, purge: Purge, by_run: Option<u64>) -> Result<Vec<NodePurge>, ClusterError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Internal(format!("starting a runtime: {e}")))?;
    let stop = async {
        if purge == Purge::Nothing {
            let stopped = commands::coordinator_call(dir, StopCluster { by_run }, |_| {}).await;
            stopped.map(|()| Vec::new())
        } else {
            commands::coordinator_call(dir, PurgeCluster { by_run }, |_| {}).await
        }
    };
    let answer = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), stop).await });
    Ok(match answer {
        Ok(Ok(nodes)) => nodes,
        Ok(Err(refused)) if refused.kind() == eckpt_cluster_api::ErrorKind::Fenced => return Err(refused),
        _ => Vec::new(),
    })
}

/// The live daemons of the cluster on this host: each process directory's recorded pid
/// ([`running`]) and the holders of the coordinator's lock and of the agents' stores'
/// (an agent that has not registered has no pid file yet).
fn daemons(dir: &ClusterDir) -> Vec<u32> {
    let mut locks = vec![dir.coordinator().join("lock")];
    let mut processes = vec![dir.coordinator()];
    if let Ok(entries) = fs::read_dir(dir.root().join("nodes")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            locks.push(dir.store(&name).join("agent.lock"));
            processes.push(entry.path());
        }
    }
    if let Ok(journal) = Journal::load(&dir.journal()) {
        let stores = journal.nodes.values().filter_map(|e| e.info.as_ref());
        locks.extend(stores.map(|info| info.store.join("agent.lock")));
    }
    let mut pids: Vec<u32> = processes.iter().filter_map(|p| running(p)).collect();
    pids.extend(
        locks
            .iter()
            .filter_map(|l| eckpt_daemon::owner_lock::OwnerLock::holder(l)),
    );
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Asks `pids` to stop as Ctrl-C does (the daemons shut down on it).
fn interrupt(pids: &[u32]) {
    for &pid in pids {
        // SAFETY: kill(2) of a daemon of the cluster found by [`daemons`].
        unsafe { libc::kill(pid as i32, libc::SIGINT) };
    }
}

/// Removes the cluster's network namespaces and bridge: those `cluster.json` records, or,
/// when it is unreadable, those named after the cluster's nodes that exist.
fn remove_network(dir: &ClusterDir, file: Option<&ClusterFile>) {
    let network = Network::for_dir(dir.root());
    let names: Vec<String> = match file {
        Some(file) => match &file.netns {
            Some(net) => net.nodes.keys().cloned().collect(),
            None => return,
        },
        None => fs::read_dir(dir.root().join("nodes"))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| Path::new("/run/netns").join(network.namespace(name)).exists())
                    .collect()
            })
            .unwrap_or_default(),
    };
    for name in &names {
        network.remove_node(name);
    }
    if file.is_some() || Path::new("/sys/class/net").join(network.bridge()).exists() {
        network.remove_bridge();
    }
}

/// Deletes the node-local data of every node whose agent did not (it was down): directly
/// when its store is on this host, says it is that node's and passes the checks of
/// [`crate::clean::purge_unheld`]. Stores inside the cluster directory are left to its
/// deletion unless `inside`. What stays goes to `out.kept`, one line each.
pub(crate) fn purge_node_stores(
    dir: &ClusterDir,
    purged: &[eckpt_cluster_api::msg::NodePurge],
    inside: bool,
    out: &mut Purged,
) {
    let journal = match Journal::load(&dir.journal()) {
        Ok(journal) => journal,
        Err(e) => {
            out.kept.push(format!(
                "node stores outside the cluster directory were not looked for: the journal is unreadable ({e})"
            ));
            return;
        }
    };
    let here = eckpt_cluster_api::net::host_name();
    for (name, entry) in &journal.nodes {
        let Some(info) = &entry.info else { continue };
        let host = info.host.split('/').next().unwrap_or_default();
        if purged.iter().any(|p| &p.node == name && p.result.is_ok()) {
            // Its agent deleted what eckpt made; what is left there is someone's (inside
            // the cluster directory, its deletion says so).
            if host == here && !info.store.starts_with(dir.root()) {
                report_left(&info.store, out);
            }
            continue;
        }
        if (!inside && info.store.starts_with(dir.root())) || fs::symlink_metadata(&info.store).is_err() {
            continue;
        }
        let result = if host != here {
            Err(format!("it is on host {host}, whose agent is down"))
        } else {
            crate::clean::purge_unheld(&info.store, name, crate::clean::owner_to_expect())
        };
        match result {
            Ok(store) => {
                out.removed.extend(store.removed);
                out.kept.extend(
                    store
                        .kept
                        .into_iter()
                        .map(|(path, why)| format!("kept {}: {why}", path.display())),
                );
            }
            Err(why) => out.kept.push(format!(
                "kept node {name}'s store {}: {why}",
                info.store.display()
            )),
        }
    }
}

/// One line in `out.kept` for each of a purged store and its parity directory that is
/// still there: what its agent left, files eckpt did not create.
fn report_left(store: &Path, out: &mut Purged) {
    for dir in [ClusterDir::coded_beside(store), store.to_path_buf()] {
        let left: Vec<PathBuf> = fs::read_dir(&dir)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        if !left.is_empty() {
            out.kept.push(format!(
                "kept {}: it holds files eckpt did not create ({})",
                dir.display(),
                eckpt_agent::created::listing(&dir, &left)
            ));
        }
    }
}

/// Deletes the entries eckpt created in the cluster directory (each one's own entries only,
/// [`eckpt_agent::created::cluster_entry`]), then the directory unless something else is in it.
/// Why it stays, if it does.
pub(crate) fn purge_cluster_dir(dir: &ClusterDir, out: &mut Purged) -> Result<Option<String>, ClusterError> {
    let root = dir.root();
    if fs::symlink_metadata(root).is_err() {
        return Ok(None);
    }
    let mut removal = eckpt_agent::created::Removal::default();
    let gone = eckpt_agent::created::remove_made(root, eckpt_agent::created::cluster_entry, &mut removal)?;
    out.removed.append(&mut removal.removed);
    if gone {
        out.removed.push(root.to_path_buf());
        return Ok(None);
    }
    Ok(Some(format!(
        "it holds files eckpt did not create ({})",
        eckpt_agent::created::listing(root, &removal.foreign)
    )))
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    fn options(nodes: usize, spares: usize) -> UpOptions {
        UpOptions {
            dir: PathBuf::from("/nonexistent"),
            nodes: Some(nodes),
            spares,
            names: Vec::new(),
            coding: CodingConfig::default(),
            netns: false,
            tls: false,
            link_rate: None,
            exe: PathBuf::from("/nonexistent/eckpt"),
            agents: true,
            bind: None,
            flush: None,
            job: None,
            deadlines: Deadlines::default(),
            domains: BTreeMap::new(),
            agent_placement: AgentPlacement::default(),
        }
    }

    /// Each way a new cluster's shape can be wrong is said in one line; a right one gets
    /// its names.
    #[test]
    fn a_new_clusters_shape_is_checked_before_anything_is_made() {
        let shape = |o: &UpOptions| new_cluster_shape(o, o.nodes.unwrap());
        let default = options(6, 1);
        assert_eq!(
            shape(&default).unwrap(),
            (names("n", 6), names("s", 1)),
            "named n0… and s0…"
        );
        let mut rate = options(6, 0);
        rate.link_rate = Some("1gbit".into());
        assert_eq!(shape(&rate).unwrap_err(), "--link-rate needs --netns");
        let few = options(5, 0);
        assert!(shape(&few)
            .unwrap_err()
            .starts_with("5 nodes cannot form a group of k=4 data + m=2"));
        let mut named = options(6, 0);
        named.names = ["a", "b", "c", "d", "e", "a"].map(String::from).to_vec();
        assert_eq!(shape(&named).unwrap_err(), "node name a is given twice");
        named.names.pop();
        assert_eq!(
            shape(&named).unwrap_err(),
            "5 node names for 6 nodes and 0 spares"
        );
        let mut domains = options(6, 0);
        domains.domains.insert("n9".into(), "rack1".into());
        assert!(shape(&domains)
            .unwrap_err()
            .starts_with("--domain names node n9, which is not a node of the cluster"));
    }

    fn names(prefix: &str, count: usize) -> Vec<String> {
        (0..count).map(|i| format!("{prefix}{i}")).collect()
    }

    /// A cluster.json JSON cannot hold (a flush directory that is not UTF-8) is refused as
    /// bad input, not a panic of `up`, and nothing is written.
    #[test]
    fn a_cluster_file_json_cannot_hold_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(root.path()).unwrap();
        let mut file = ClusterFile {
            format: CLUSTER_FORMAT,
            coding: CodingConfig::default(),
            coordinator_unix: Endpoint::Unix(dir.coordinator_socket()),
            coordinator_tcp: None,
            coordinator_host: None,
            netns: None,
            flush: Some(FlushConfig {
                dir: PathBuf::from(std::ffi::OsStr::from_bytes(b"/flush/\xff")),
                every: 1,
                rate: None,
                keep: 2,
                restore_from_job: None,
            }),
            deadlines: Deadlines::default(),
            agent_placement: AgentPlacement::default(),
        };
        let e = write_cluster_file(&dir, &file).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Invalid, "{e}");
        assert!(e.to_string().contains("cannot record this cluster"), "{e}");
        assert!(!dir.cluster_file().exists());
        file.flush.as_mut().unwrap().dir = PathBuf::from("/flush");
        write_cluster_file(&dir, &file).unwrap();
        assert_eq!(dir.load().unwrap().flush.unwrap().dir, PathBuf::from("/flush"));
    }
}
