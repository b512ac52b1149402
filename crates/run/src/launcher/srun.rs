//! The srun launcher: an attempt is one job step of the Slurm allocation `eckpt run` runs
//! in, its tasks laid on the nodes one per rank in rank order (`--distribution=arbitrary`
//! from a host file built from the placement), so rank R is task R (`SLURM_PROCID`) on the
//! node eckpt placed it on. Node names are the allocation's host names (the cluster was
//! created with them). The step shares the allocation's CPUs with the agents' step
//! (`--overlap`); it is bounded in time to start (`--immediate`), since a step that cannot
//! be placed waits forever otherwise; one rank's failure ends it (`--kill-on-bad-exit`);
//! and stopping the attempt cancels it through Slurm, which ends its tasks on every node.

use std::collections::BTreeSet;
use std::process::Command;

use super::whole_job::WholeJob;
use super::LaunchSpec;
use crate::output::Tags;
use crate::slurm::{Allocation, COMMAND_WAIT};
use crate::RunError;

/// Input variables of srun that the batch script's own `sbatch` options set and that would
/// override the layout eckpt gives each step.
const LAYOUT_VARIABLES: [&str; 4] = [
    "SLURM_NTASKS_PER_NODE",
    "SLURM_DISTRIBUTION",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
];

/// The srun command line for `spec` (host file written under `spec.scratch`).
fn command(spec: &LaunchSpec<'_>) -> Result<Command, RunError> {
    let mut lines = String::new();
    let mut nodes = Vec::with_capacity(spec.world as usize);
    for (rank, node) in spec.placement {
        if !spec.hosts.contains_key(node) {
            return Err(RunError::Launch(format!(
                "node {node} of rank {rank} is not running"
            )));
        }
        lines.push_str(node);
        lines.push('\n');
        nodes.push(node.as_str());
    }
    let distinct: BTreeSet<&str> = nodes.iter().copied().collect();
    std::fs::create_dir_all(&spec.scratch).map_err(|e| RunError::io(&spec.scratch, e))?;
    let hostfile = spec.scratch.join("hostfile");
    std::fs::write(&hostfile, lines).map_err(|e| RunError::io(&hostfile, e))?;

    let mut command = Command::new("srun");
    for variable in LAYOUT_VARIABLES {
        command.env_remove(variable);
    }
    command
        .env("SLURM_HOSTFILE", &hostfile)
        .arg("--overlap")
        .arg(format!("--job-name={}", spec.launch_id))
        .arg(format!("--ntasks={}", spec.world))
        // The host file names the nodes (a --nodelist as well is refused).
        .arg(format!("--nodes={}", distinct.len()))
        .arg("--distribution=arbitrary")
        .arg("--kill-on-bad-exit=1")
        .arg(format!("--immediate={}", COMMAND_WAIT.as_secs()))
        .arg("--label");
    let mut vars: Vec<(String, String)> = spec.env.to_vec();
    vars.push(("ECKPT_NODES".into(), nodes.join(",")));
    vars.push(("ECKPT_LAUNCH".into(), spec.launch_id.to_string()));
    // srun passes its whole environment to the tasks (`--export=ALL`, the default).
    command.envs(vars);
    command.args(spec.launcher_args).args(spec.command);
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
        spec.sinks,
        [
            Tags::Srun { from_stderr: false },
            Tags::Srun { from_stderr: true },
        ],
        "srun is Slurm's: run inside an allocation on a host with Slurm's client commands",
        Some(Box::new(cancel)),
    )
}
