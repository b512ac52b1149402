//! The srun launcher: an attempt is one job step of the Slurm allocation `eckpt run` runs
//! in, its tasks laid on the nodes one per rank in rank order (`--distribution=arbitrary`
//! from a host file built from the placement), so rank R is task R (`SLURM_PROCID`) on the
//! node eckpt placed it on. Node names are the allocation's host names (the cluster was
//! created with them). The step shares the allocation's CPUs with the agents' step
//! (`--overlap`); it is bounded in time to start (`--immediate`), since a step that cannot
//! be placed waits forever otherwise; one rank's failure ends it (`--kill-on-bad-exit`);
//! and stopping the attempt cancels it through Slurm, which ends its tasks on every node.
//! Each task is the rank under `eckpt run-rank`, as with the MPI launchers: srun, like them,
//! waits for a task's output to close, which a process the rank left may hold.

use std::collections::BTreeSet;
use std::process::Command;

use super::whole_job::WholeJob;
use super::{rank_command, rank_env, write_hostfile, LaunchSpec};
use crate::output::Tags;
use crate::slurm::{self, Allocation};
use crate::RunError;

/// The srun command line for `spec` (host file written under `spec.scratch`).
fn command(spec: &LaunchSpec<'_>) -> Result<Command, RunError> {
    // Slurm knows the nodes by the names they have in the cluster.
    let (hostfile, nodes) = write_hostfile(spec, |node, _| node.to_string())?;
    let distinct: BTreeSet<&str> = nodes.iter().copied().collect();

    let mut command = slurm::step();
    command
        .env("SLURM_HOSTFILE", &hostfile)
        .arg(format!("--job-name={}", spec.launch_id))
        .arg(format!("--ntasks={}", spec.world))
        // The host file names the nodes (a --nodelist as well is refused).
        .arg(format!("--nodes={}", distinct.len()))
        .arg("--distribution=arbitrary")
        .arg("--kill-on-bad-exit=1")
        .arg("--label");
    // srun passes its whole environment to the tasks (`--export=ALL`, the default).
    command.envs(rank_env(spec, &nodes));
    command.args(spec.launcher_args).args(rank_command(spec));
    Ok(command)
}

/// Starts the attempt's step.
pub fn start(spec: &LaunchSpec<'_>) -> Result<WholeJob, RunError> {
    let allocation = Allocation::current()?;
    let step_name = spec.launch_id.to_string();
    let cancel = move || {
        // Killing srun alone would leave its tasks on the other nodes running.
        if let Ok(Some(step)) = allocation.step_named(&step_name) {
            if let Err(e) = allocation.cancel_step(&step) {
                tracing::warn!(%step, "cancelling the attempt's step: {e}");
            }
        }
    };
    WholeJob::spawn(
        command(spec)?,
        spec.launch_id,
        spec.output_drain,
        spec.sinks,
        [
            Tags::Srun { from_stderr: false },
            Tags::Srun { from_stderr: true },
        ],
        "srun is Slurm's: run inside an allocation on a host with Slurm's client commands",
        Some(Box::new(cancel)),
    )
}
