//! The `mpiexec` launcher (MPICH's Hydra): the whole job is one `mpiexec`, its ranks laid
//! one host-file line per rank (`host:1`, in rank order). Hydra honours that order only
//! when it starts one proxy per line itself, as it does through its ssh launcher — through
//! its Slurm launcher it spreads the ranks over the allocation as it likes — so the hosts
//! are always reached through `eckpt mpirun-agent` as Hydra's ssh (`-launcher-exec`),
//! which goes by srun inside a Slurm allocation and by ssh elsewhere, and Hydra's own view
//! of the resources is switched off (`-rmk user`).

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use super::mpirun::{mpi_host, rsh_agent_command};
use super::whole_job::WholeJob;
use super::{rank_command, rank_env, write_hostfile, LaunchSpec};
use crate::host::NodeHost;
use crate::output::Tags;
use crate::RunError;
use eckpt_cluster_api::dirs::LAUNCH_RSH_SCRIPT;

/// Hydra's `mpiexec` as Debian's MPICH installs it.
const MPIEXEC: &str = "mpiexec.hydra";

/// The `mpiexec` command line for `spec` (host file and ssh wrapper written under
/// `spec.scratch`).
fn command(spec: &LaunchSpec<'_>) -> Result<Command, RunError> {
    if spec
        .hosts
        .values()
        .any(|h| matches!(h, NodeHost::Namespace { .. }))
    {
        return Err(RunError::Launch(
            "--launcher mpiexec: Hydra's proxies cannot reach back out of this cluster's network namespaces; use --launcher mpirun".into(),
        ));
    }
    let (hostfile, nodes) = write_hostfile(spec, |node, host| format!("{}:1", mpi_host(node, host)))?;
    // Hydra runs its launcher as one program, without a shell: a script of one line.
    let ssh = spec.scratch.join(LAUNCH_RSH_SCRIPT);
    let script = format!("#!/bin/sh\nexec {} \"$@\"\n", rsh_agent_command(spec));
    std::fs::write(&ssh, script).map_err(|e| RunError::io(&ssh, e))?;
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| RunError::io(&ssh, e))?;

    let mut command = Command::new(MPIEXEC);
    command
        .args(["-launcher", "ssh", "-launcher-exec"])
        .arg(&ssh)
        .args(["-rmk", "user", "-f"])
        .arg(&hostfile)
        .args(["-n", &spec.world.to_string(), "-prepend-rank"]);
    // Hydra passes its whole environment to the ranks (`-genvall`, the default).
    command.envs(rank_env(spec, &nodes));
    command.args(spec.launcher_args).args(rank_command(spec));
    Ok(command)
}

/// Starts `mpiexec` for the whole job.
pub fn start(spec: &LaunchSpec<'_>) -> Result<WholeJob, RunError> {
    WholeJob::spawn(
        command(spec)?,
        spec.launch_id,
        spec.output_drain,
        spec.sinks,
        [
            Tags::Hydra { from_stderr: false },
            Tags::Hydra { from_stderr: true },
        ],
        "install MPICH: `apt-get install mpich`, or `make setup`",
        None,
    )
}
