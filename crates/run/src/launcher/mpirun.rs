//! The `mpirun` launcher (Open MPI): the whole job is one `mpirun`, its ranks mapped one
//! host-file line per rank (`rmaps seq`) from the placement. A node on this host and in
//! this network namespace is this host; a node in a network namespace of its own is a
//! host of its own, reached through `eckpt mpirun-agent` as Open MPI's rsh agent, which
//! starts Open MPI's daemon inside the node's network namespace with the node's name as
//! host name — so ranks on one node share memory and ranks on different nodes talk over
//! the node's (shaped) link. A node on another host is reached by ssh; inside a Slurm
//! allocation (no node in a network namespace here), Open MPI starts its daemons by its
//! own Slurm support, one srun step for all of them ([`daemon_options`]).

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
    let slurm = by_slurm(spec, crate::slurm::Allocation::current().is_ok());
    if slurm {
        crate::slurm::clear_layout(&mut command);
    }
    command.args(daemon_options(spec, slurm));
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

/// Whether Open MPI's own Slurm support starts the job's daemons: inside an allocation,
/// when no node of the job is in a network namespace of this host (the batch host is a
/// host of the allocation, where `mpirun` runs the ranks itself).
fn by_slurm(spec: &LaunchSpec<'_>, in_allocation: bool) -> bool {
    in_allocation
        && !spec
            .placement
            .values()
            .any(|n| matches!(spec.hosts.get(n), Some(NodeHost::Namespace { .. })))
}

/// How Open MPI starts its daemons on the job's hosts. By its own Slurm support when
/// `slurm` ([`by_slurm`]): one srun step starts every daemon, sharing the allocation's CPUs and
/// bounded in its wait to start as every step of eckpt's is (`slurm::step_options`),
/// where one srun per host from the batch host would start thousands of processes there.
/// Otherwise through `eckpt mpirun-agent`, once per host and from here (no tree spawn):
/// the nodes in network namespaces of this host are reachable from it alone.
fn daemon_options(spec: &LaunchSpec<'_>, slurm: bool) -> Vec<String> {
    if slurm {
        let srun = crate::slurm::step_options().join(" ");
        return ["--mca", "plm", "slurm", "--mca", "plm_slurm_args", &srun]
            .map(String::from)
            .into();
    }
    [
        "--mca",
        "plm_rsh_agent",
        &rsh_agent_command(spec),
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
    ]
    .map(String::from)
    .into()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::{Sink, Sinks};
    use std::path::PathBuf;
    use std::time::Duration;

    /// One rank per node of `hosts`, the command line's daemon options.
    fn daemon_options_of(hosts: &BTreeMap<String, NodeHost>, in_allocation: bool) -> Vec<String> {
        let placement: BTreeMap<u32, String> = hosts
            .keys()
            .cloned()
            .enumerate()
            .map(|(r, n)| (r as u32, n))
            .collect();
        let spec = LaunchSpec {
            command: &[],
            launcher_args: &[],
            world: placement.len() as u32,
            placement: &placement,
            hosts,
            env: &[],
            launch_id: "l1",
            sinks: Sinks {
                out: Sink::Stdout,
                err: Sink::Stderr,
            },
            cluster_dir: PathBuf::from("/c"),
            exe: PathBuf::from("/bin/eckpt"),
            subnet: None,
            scratch: PathBuf::from("/s"),
            output_drain: Duration::from_secs(1),
        };
        daemon_options(&spec, by_slurm(&spec, in_allocation))
    }

    /// A generated allocation of `n` hosts, seen from its first (the batch host).
    fn remote_hosts(n: usize) -> BTreeMap<String, NodeHost> {
        (1..=n)
            .map(|i| {
                let name = format!("node{i:04}");
                let host = match i {
                    1 => NodeHost::Here,
                    _ => NodeHost::Remote {
                        hostname: name.clone(),
                    },
                };
                (name, host)
            })
            .collect()
    }

    /// Inside an allocation of 4,096 hosts, Open MPI starts its daemons by one srun step
    /// (its Slurm support), not one process per host from the batch host.
    #[test]
    fn daemons_of_an_allocation_start_by_one_slurm_step() {
        let options = daemon_options_of(&remote_hosts(4096), true);
        assert_eq!(
            options,
            [
                "--mca",
                "plm",
                "slurm",
                "--mca",
                "plm_slurm_args",
                "--overlap --immediate=30"
            ]
        );
    }

    /// Outside an allocation, or with a node in a network namespace of this host, the
    /// daemons go through `eckpt mpirun-agent`, each from here.
    #[test]
    fn daemons_elsewhere_start_through_the_agent() {
        let agent = |options: Vec<String>| options.iter().any(|o| o == "plm_rsh_agent");
        assert!(agent(daemon_options_of(&remote_hosts(4), false)));
        let mut hosts = remote_hosts(4);
        hosts.insert(
            "n1".into(),
            NodeHost::Namespace {
                path: "/proc/1/ns/net".into(),
                id: "net:[1]".into(),
            },
        );
        assert!(agent(daemon_options_of(&hosts, true)));
    }
}
