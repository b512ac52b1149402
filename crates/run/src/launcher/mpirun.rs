//! The `mpirun` launcher (Open MPI): the whole job is one `mpirun`, its ranks mapped one
//! host-file line per rank (`rmaps seq`) from the placement. A node on this host and in
//! this network namespace is this host; a node in a network namespace of its own is a
//! host of its own, reached through `eckpt mpirun-agent` as Open MPI's rsh agent, which
//! starts Open MPI's daemon inside the node's network namespace with the node's name as
//! host name — so ranks on one node share memory and ranks on different nodes talk over
//! the node's (shaped) link. A node on another host is reached by ssh.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{ending, kill_group, kill_launch, own_process_group, Attempt, Ending, LaunchSpec};
use crate::host::NodeHost;
use crate::output::{forward_tagged, Sink};
use crate::procs;
use crate::RunError;

/// The running `mpirun`.
pub struct MpirunAttempt {
    launch: String,
    child: Child,
    crashed: Arc<AtomicBool>,
    forwarders: Vec<JoinHandle<()>>,
    ended: bool,
    /// Ranks seen running on this host (`exited` compares with what runs now).
    seen: BTreeSet<u32>,
}

/// This host's name, as Open MPI knows the local host.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// The host-file name of node `node` (see the module doc).
fn mpi_host(node: &str, host: &NodeHost) -> String {
    match host {
        NodeHost::Here => hostname(),
        NodeHost::Namespace { .. } => node.into(),
        NodeHost::Remote { hostname } => hostname.clone(),
    }
}

/// The `mpirun` command line for `spec` (host file written under `spec.scratch`).
fn command(spec: &LaunchSpec<'_>) -> Result<Command, RunError> {
    let mut lines = String::new();
    let mut nodes = Vec::with_capacity(spec.world as usize);
    for (&rank, node) in spec.placement {
        let host = spec
            .hosts
            .get(node)
            .ok_or_else(|| RunError::Launch(format!("node {node} of rank {rank} is not running")))?;
        lines.push_str(&mpi_host(node, host));
        lines.push('\n');
        nodes.push(node.as_str());
    }
    std::fs::create_dir_all(&spec.scratch).map_err(|e| RunError::io(&spec.scratch, e))?;
    let hostfile = spec.scratch.join("hostfile");
    std::fs::write(&hostfile, lines).map_err(|e| RunError::io(&hostfile, e))?;

    let mut command = Command::new("mpirun");
    // Debian's Open MPI refuses root unless told; tests and containers run as root.
    command
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    command
        .args(["-np", &spec.world.to_string()])
        .arg("--hostfile")
        .arg(&hostfile)
        .args([
            "--mca",
            "rmaps",
            "seq",
            "--oversubscribe",
            "--bind-to",
            "none",
            "--tag-output",
        ]);
    let agent = format!(
        "{} mpirun-agent --dir {}",
        spec.exe.display(),
        spec.cluster_dir.display()
    );
    command.args(["--mca", "plm_rsh_agent", &agent]);
    command.args(["--mca", "plm_rsh_no_tree_spawn", "1"]);
    // More ranks on this machine than cores: ranks waiting for a message must give the core
    // to the rank it waits for, or every exchange costs a scheduler time slice.
    let here = spec
        .placement
        .values()
        .filter(|n| !matches!(spec.hosts.get(*n), Some(NodeHost::Remote { .. })))
        .count();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if here > cores {
        command.args(["--mca", "mpi_yield_when_idle", "1"]);
    }
    if let Some(subnet) = &spec.subnet {
        command.args(["--mca", "oob_tcp_if_include", subnet]);
        command.args(["--mca", "btl_tcp_if_include", subnet]);
    }
    let mut vars: Vec<(String, String)> = spec.env.to_vec();
    vars.push(("ECKPT_NODES".into(), nodes.join(",")));
    vars.push(("ECKPT_LAUNCH".into(), spec.launch_id.to_string()));
    for (key, value) in &vars {
        command.env(key, value).args(["-x", key]);
    }
    command.args(spec.command);
    Ok(command)
}

/// Starts `mpirun` for the whole job.
pub fn start(spec: &LaunchSpec<'_>) -> Result<MpirunAttempt, RunError> {
    let mut command = command(spec)?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    own_process_group(&mut command);
    let mut child = command.spawn().map_err(|e| {
        RunError::Launch(format!(
            "starting mpirun: {e} (install Open MPI: `apt-get install openmpi-bin`, or `make setup`)"
        ))
    })?;
    let crashed = Arc::new(AtomicBool::new(false));
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let forwarders = vec![
        forward_tagged(out.expect("piped"), spec.sinks, Sink::Stderr, crashed.clone()),
        forward_tagged(err.expect("piped"), spec.sinks, Sink::Stderr, crashed.clone()),
    ];
    Ok(MpirunAttempt {
        launch: spec.launch_id.to_string(),
        child,
        crashed,
        forwarders,
        ended: false,
        seen: BTreeSet::new(),
    })
}

impl MpirunAttempt {
    fn join_output(&mut self) {
        for forwarder in self.forwarders.drain(..) {
            let _ = forwarder.join();
        }
    }
}

impl Attempt for MpirunAttempt {
    fn poll(&mut self) -> Option<Ending> {
        let status = match self.child.try_wait() {
            Ok(Some(status)) => status,
            Ok(None) => return None,
            Err(_) => {
                return Some(Ending::Killed {
                    rank: None,
                    signal: None,
                })
            }
        };
        self.ended = true;
        // Its last lines say whether a rank died of a signal.
        self.join_output();
        match ending(None, status) {
            Ending::Failed { .. } if self.crashed.load(Ordering::SeqCst) => Some(Ending::Killed {
                rank: None,
                signal: None,
            }),
            other => Some(other),
        }
    }

    fn exited(&mut self) -> BTreeSet<u32> {
        let running = procs::running_ranks(&self.launch);
        self.seen.extend(running.iter().copied());
        self.seen.difference(&running).copied().collect()
    }

    fn stop(&mut self) {
        if !self.ended {
            kill_group(self.child.id());
        }
        // Open MPI's daemons and the ranks they started carry the launch id.
        kill_launch(&self.launch);
        let _ = self.child.wait();
        self.ended = true;
        self.join_output();
    }
}

impl Drop for MpirunAttempt {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `eckpt mpirun-agent --dir D HOST COMMAND…`: Open MPI's rsh agent. For a node of the
/// cluster on this host in a network namespace of its own, runs `COMMAND` (Open MPI's
/// daemon) inside that namespace and a UTS namespace named after the node; for any other
/// host, hands over to ssh. Returns only on error.
pub fn rsh_agent(
    nodes: &BTreeMap<String, eckpt_cluster_api::msg::NodeInfo>,
    host: &str,
    command: &[String],
) -> Result<Infallible, RunError> {
    let script = command.join(" ");
    let namespace = match nodes.get(host).map(NodeHost::of).transpose()? {
        Some(NodeHost::Namespace { path, .. }) => Some(path),
        Some(NodeHost::Here) => None,
        Some(NodeHost::Remote { .. }) | None => {
            let error = Command::new("ssh").arg(host).args(command).exec();
            return Err(RunError::Launch(format!("ssh {host}: {error}")));
        }
    };
    if let Some(path) = namespace {
        let ns = std::fs::File::open(&path).map_err(|e| RunError::io(&path, e))?;
        let name = CString::new(host).map_err(|_| RunError::Launch(format!("host name {host:?}")))?;
        // SAFETY: plain system calls on a file we hold open and a valid C string; this
        // process is about to exec.
        let failed = unsafe {
            libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) != 0
                || libc::unshare(libc::CLONE_NEWUTS) != 0
                || libc::sethostname(name.as_ptr(), host.len()) != 0
        };
        if failed {
            return Err(RunError::Launch(format!(
                "entering node {host}'s namespaces: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    let error = Command::new("sh").args(["-c", &script]).exec();
    Err(RunError::Launch(format!("sh: {error}")))
}
