//! The `mpirun` launcher (Open MPI): the whole job is one `mpirun`, its ranks mapped one
//! host-file line per rank (`rmaps seq`) from the placement. A node on this host and in
//! this network namespace is this host; a node in a network namespace of its own is a
//! host of its own, reached through `eckpt mpirun-agent` as Open MPI's rsh agent, which
//! starts Open MPI's daemon inside the node's network namespace with the node's name as
//! host name — so ranks on one node share memory and ranks on different nodes talk over
//! the node's (shaped) link. A node on another host is reached by ssh.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::whole_job::WholeJob;
use super::{rank_command, rank_env, write_hostfile, LaunchSpec};
use crate::host::NodeHost;
use crate::output::Tags;
use crate::RunError;

/// This host's name, as Open MPI knows the local host.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// The host-file name of node `node` (see the module doc).
pub(super) fn mpi_host(node: &str, host: &NodeHost) -> String {
    match host {
        NodeHost::Here => hostname(),
        NodeHost::Namespace { .. } => node.into(),
        NodeHost::Remote { hostname } => hostname.clone(),
    }
}

/// The `mpirun` command line for `spec` (host file written under `spec.scratch`).
fn command(spec: &LaunchSpec<'_>) -> Result<Command, RunError> {
    let (hostfile, nodes) = write_hostfile(spec, mpi_host)?;
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
    command.args(["--mca", "plm_rsh_agent", &rsh_agent_command(spec)]);
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
    for (key, value) in rank_env(spec, &nodes) {
        command.env(&key, value).args(["-x", &key]);
    }
    command.args(spec.launcher_args);
    command.args(rank_command(spec));
    Ok(command)
}

/// `eckpt mpirun-agent` for the cluster of `spec`, as a launcher's rsh command.
pub(super) fn rsh_agent_command(spec: &LaunchSpec<'_>) -> String {
    format!(
        "{} mpirun-agent --dir {}",
        spec.exe.display(),
        spec.cluster_dir.display()
    )
}

/// Starts `mpirun` for the whole job.
pub fn start(spec: &LaunchSpec<'_>) -> Result<WholeJob, RunError> {
    WholeJob::spawn(
        command(spec)?,
        spec.launch_id,
        spec.output_drain,
        spec.sinks,
        [Tags::OpenMpi; 2],
        "install Open MPI: `apt-get install openmpi-bin`, or `make setup`",
        None,
    )
}

/// `eckpt mpirun-agent --dir D HOST COMMAND…`: Open MPI's rsh agent and Hydra's ssh. For a
/// node of the cluster on this host in a network namespace of its own, runs `COMMAND` (the
/// launcher's daemon) inside that namespace and a UTS namespace named after the node; for
/// any other host, hands over to a one-task srun step on it inside a Slurm allocation, to
/// ssh elsewhere. Returns only on error.
pub fn rsh_agent(
    nodes: &BTreeMap<String, eckpt_cluster_api::msg::NodeInfo>,
    host: &str,
    command: &[String],
) -> Result<Infallible, RunError> {
    let script = command.join(" ");
    let namespace = match nodes.get(host).map(NodeHost::of).transpose()? {
        Some(NodeHost::Namespace { path, .. }) => Some(path),
        Some(NodeHost::Here) => None,
        Some(NodeHost::Remote { .. }) | None if crate::slurm::Allocation::current().is_ok() => {
            // Inside an allocation the hosts are reached as Slurm's own launchers do, by
            // a step on the host (compute nodes often refuse ssh).
            let error = crate::slurm::step()
                .args(["--nodes=1", "--ntasks=1", "--kill-on-bad-exit=1"])
                .arg(format!("--nodelist={host}"))
                .args(["sh", "-c", &script])
                .exec();
            return Err(RunError::Launch(format!("srun on {host}: {error}")));
        }
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
