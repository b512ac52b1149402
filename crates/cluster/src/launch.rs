//! Starting and stopping a local cluster: `eckpt up` (coordinator and agents as detached
//! processes, optionally each agent in its own network namespace), `down`, `join`, and
//! `kill-node` for fault injection.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eckpt_proto::{ClusterSecret, Endpoint};

use crate::client;
use crate::config::CodingConfig;
use crate::coordinator::Journal;
use crate::dirs::{check_node_name, write_atomic, ClusterDir, ClusterFile, NetnsConfig, CLUSTER_FORMAT};
use crate::msg::{CoordRequest, CoordResponse, StatusReport, UpSummary};
use crate::netns::{parse_rate, Network};
use crate::ClusterError;

/// What `eckpt up` starts.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Cluster directory (created).
    pub dir: PathBuf,
    /// Member nodes (`n0`…).
    pub nodes: usize,
    /// Spare nodes (`s0`…).
    pub spares: usize,
    /// Coding.
    pub coding: CodingConfig,
    /// Run each agent in its own network namespace.
    pub netns: bool,
    /// Shape each namespace's link to this `tc` rate.
    pub link_rate: Option<String>,
    /// The `eckpt` executable to start processes with.
    pub exe: PathBuf,
}

/// How long `up` and `join` wait for processes to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

fn spawn_detached(mut command: Command, log: &Path) -> Result<u32, ClusterError> {
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(crate::io_at(log))?;
    let err = out.try_clone().map_err(crate::io_at(log))?;
    command.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid is async-signal-safe; the child gets its own session so it outlives
    // the command that started it and no terminal signal reaches it.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let child = command
        .spawn()
        .map_err(|e| ClusterError::Invalid(format!("starting {command:?}: {e}")))?;
    Ok(child.id())
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

fn read_pid(dir: &Path) -> Option<u32> {
    fs::read_to_string(ClusterDir::pid_file(dir))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether a process directory's recorded pid is a live process running `eckpt`.
fn running(dir: &Path) -> Option<u32> {
    let pid = read_pid(dir)?;
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
) -> Result<Command, ClusterError> {
    let (mut command, bind) = match &file.netns {
        Some(net) => {
            let index = *net
                .nodes
                .get(name)
                .ok_or_else(|| ClusterError::Invalid(format!("node {name} has no namespace")))?;
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
    Ok(command)
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) -> Result<(), ClusterError> {
    let deadline = Instant::now() + timeout;
    while !check() {
        if Instant::now() > deadline {
            return Err(ClusterError::Invalid(format!("timed out waiting for {what}")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn status_now(dir: &ClusterDir) -> Option<StatusReport> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    match rt.block_on(client::coordinator_call(dir, &CoordRequest::Status, |_| {})) {
        Ok(CoordResponse::Status(s)) => Some(*s),
        _ => None,
    }
}

fn wait_alive(dir: &ClusterDir, names: &[String]) -> Result<(), ClusterError> {
    wait_until(START_TIMEOUT, "the agents to register", || {
        status_now(dir).is_some_and(|s| {
            names
                .iter()
                .all(|n| s.nodes.iter().any(|node| &node.name == n && node.alive))
        })
    })
}

/// `eckpt up`: creates the cluster directory and starts everything; returns once every
/// agent is registered.
pub fn up(options: &UpOptions) -> Result<UpSummary, ClusterError> {
    options.coding.validate()?;
    if let Some(rate) = &options.link_rate {
        parse_rate(rate)?;
        if !options.netns {
            return Err(ClusterError::Invalid("--link-rate needs --netns".into()));
        }
    }
    let dir = ClusterDir::new(&options.dir)?;
    if dir.cluster_file().exists() {
        return Err(ClusterError::Invalid(format!(
            "{} already holds a cluster: `eckpt down --dir {} --purge` first, or use another directory",
            dir.root().display(),
            dir.root().display()
        )));
    }
    let (k, m) = (options.coding.k, options.coding.m);
    if options.nodes < k + m {
        return Err(ClusterError::Invalid(format!(
            "{} nodes cannot form a group of k={k} data + m={m} parity members: need at least {} \
             nodes, or a smaller --k",
            options.nodes,
            k + m
        )));
    }
    for sub in [dir.coordinator(), dir.debug(), dir.root().join("nodes")] {
        fs::create_dir_all(&sub).map_err(crate::io_at(&sub))?;
    }
    // Checkpoints and parity are the job's memory: only their owner may read them.
    fs::set_permissions(dir.root(), std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(crate::io_at(dir.root()))?;
    ClusterSecret::create_file(&dir.secret())?;
    let nodes: Vec<String> = (0..options.nodes).map(|i| format!("n{i}")).collect();
    let spares: Vec<String> = (0..options.spares).map(|i| format!("s{i}")).collect();
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
        netns: netns.clone(),
    };
    write_atomic(
        &dir.cluster_file(),
        &serde_json::to_vec_pretty(&file).expect("serializes"),
    )?;
    Journal::new(options.coding, &nodes, &spares).save(&dir.journal())?;

    let mut bind = "127.0.0.1".to_string();
    if let Some(net) = &netns {
        let network = Network::for_dir(dir.root());
        network.create_bridge()?;
        for (name, &index) in &net.nodes {
            network.add_node(name, index, net.rate.as_deref())?;
        }
        bind = network.bridge_ip();
    }
    let mut coordinator = Command::new(&options.exe);
    coordinator
        .arg("coordinator")
        .arg("--dir")
        .arg(dir.root())
        .args(["--bind", &bind]);
    spawn_detached(coordinator, &ClusterDir::log_file(&dir.coordinator()))?;
    wait_until(START_TIMEOUT, "the coordinator", || {
        dir.load().is_ok_and(|f| f.coordinator_tcp.is_some()) && status_now(&dir).is_some()
    })?;
    let file = dir.load()?;
    for (list, spare) in [(&nodes, false), (&spares, true)] {
        for name in list {
            let node_dir = dir.node(name);
            fs::create_dir_all(&node_dir).map_err(crate::io_at(&node_dir))?;
            let command = agent_command(&options.exe, &file, &dir, name, spare)?;
            spawn_detached(command, &ClusterDir::log_file(&node_dir))?;
        }
    }
    let all: Vec<String> = nodes.iter().chain(&spares).cloned().collect();
    wait_alive(&dir, &all)?;
    Ok(UpSummary {
        dir: dir.root().to_path_buf(),
        coding: options.coding,
        nodes,
        spares,
        netns: options.netns,
        link_rate: options.link_rate.clone(),
        layout: options.coding.layout,
        topology: options.coding.topology,
    })
}

/// `eckpt join`: starts an agent named `name` (a new spare, or a node coming back).
pub fn join(dir: &Path, name: &str, spare: bool, exe: &Path) -> Result<(), ClusterError> {
    check_node_name(name)?;
    let dir = ClusterDir::new(dir)?;
    let mut file = dir.load()?;
    let node_dir = dir.node(name);
    if let Some(pid) = running(&node_dir) {
        return Err(ClusterError::Invalid(format!(
            "node {name} is already running (pid {pid})"
        )));
    }
    fs::create_dir_all(&node_dir).map_err(crate::io_at(&node_dir))?;
    if let Some(net) = &mut file.netns {
        if !net.nodes.contains_key(name) {
            let index = net.nodes.values().max().map_or(0, |i| i + 1);
            net.nodes.insert(name.to_string(), index);
            write_atomic(
                &dir.cluster_file(),
                &serde_json::to_vec_pretty(&file).expect("serializes"),
            )?;
        }
        let index = file.netns.as_ref().expect("netns").nodes[name];
        let network = Network::for_dir(dir.root());
        if !Path::new("/run/netns").join(network.namespace(name)).exists() {
            network.add_node(name, index, file.netns.as_ref().and_then(|n| n.rate.as_deref()))?;
        }
    }
    let command = agent_command(exe, &file, &dir, name, spare)?;
    spawn_detached(command, &ClusterDir::log_file(&node_dir))?;
    wait_alive(&dir, &[name.to_string()])
}

/// `eckpt kill-node`: SIGKILLs a node's agent; with `wipe`, deletes its node-local data too
/// (a permanent loss).
pub fn kill_node(dir: &Path, name: &str, wipe: bool) -> Result<Option<u32>, ClusterError> {
    check_node_name(name)?;
    let dir = ClusterDir::new(dir)?;
    dir.load()?;
    let node_dir = dir.node(name);
    if !node_dir.is_dir() {
        return Err(ClusterError::Invalid(format!(
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
        for sub in [dir.store(name), dir.coded(name)] {
            if sub.exists() {
                fs::remove_dir_all(&sub).map_err(crate::io_at(&sub))?;
            }
        }
    }
    Ok(pid)
}

/// `eckpt down`: stops the coordinator and every agent, removes the namespaces; with
/// `purge`, deletes the directory.
pub fn down(dir: &Path, purge: bool) -> Result<(), ClusterError> {
    let dir = ClusterDir::new(dir)?;
    let file = dir.load()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Invalid(e.to_string()))?;
    let _ = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(10),
            client::coordinator_call(&dir, &CoordRequest::Shutdown, |_| {}),
        )
        .await
    });
    let mut processes = vec![dir.coordinator()];
    if let Ok(entries) = fs::read_dir(dir.root().join("nodes")) {
        processes.extend(entries.flatten().map(|e| e.path()));
    }
    let pids: Vec<u32> = processes.iter().filter_map(|p| running(p)).collect();
    let _ = wait_until(Duration::from_secs(5), "processes to exit", || {
        pids.iter().all(|&p| !pid_alive(p))
    });
    for &pid in pids.iter().filter(|&&p| pid_alive(p)) {
        // SAFETY: kill(2) of a process we verified runs eckpt.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    if let Some(net) = &file.netns {
        let network = Network::for_dir(dir.root());
        for name in net.nodes.keys() {
            network.remove_node(name);
        }
        network.remove_bridge();
    }
    if purge {
        fs::remove_dir_all(dir.root()).map_err(crate::io_at(dir.root()))?;
    }
    Ok(())
}
