//! Starting one attempt of a job — every rank, where the placement says — and watching it:
//! [`local`] starts each rank as a child process (in its node's network namespace when the
//! node has one), [`mpirun`] hands the whole job to Open MPI with a host file built from
//! the placement, [`mpiexec`] to MPICH's Hydra likewise, [`srun`] runs it as a step of the
//! Slurm allocation with one host per task; all three are a [`whole_job`] attempt.

pub mod local;
pub mod mpiexec;
pub mod mpirun;
pub mod srun;
pub mod whole_job;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use eckpt_cluster_api::dirs::{LAUNCH_HOSTFILE, LAUNCH_RSH_SCRIPT};

use crate::host::NodeHost;
use crate::output::{drain, Forwarder, Sink, Sinks};
use crate::procs;
use crate::RunError;

/// How the ranks are started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Launcher {
    /// Each rank a child of `eckpt run`.
    #[default]
    Local,
    /// One `mpirun` (Open MPI) for the whole job.
    Mpirun,
    /// One `mpiexec` (MPICH's Hydra) for the whole job.
    Mpiexec,
    /// One srun step per attempt, inside the Slurm allocation `eckpt run` runs in.
    Srun,
}

impl std::str::FromStr for Launcher {
    type Err = String;
    fn from_str(s: &str) -> Result<Launcher, String> {
        match s {
            "local" => Ok(Launcher::Local),
            "mpirun" => Ok(Launcher::Mpirun),
            "mpiexec" => Ok(Launcher::Mpiexec),
            "srun" => Ok(Launcher::Srun),
            _ => Err(format!("launcher {s:?}: expected local, mpirun, mpiexec or srun")),
        }
    }
}

impl Launcher {
    /// The parity layout of a new cluster when `--layout` is not given: **rotated** for srun,
    /// dedicated otherwise.
    ///
    /// Under srun the cluster is the allocation's nodes, and the allocation grants every
    /// node its tasks (`--ntasks-per-node`), which are the only slots ranks may take there
    /// (srun refuses a step with more). In the dedicated layout the `m` parity members of
    /// each group host no rank, so their slots go unused and the data nodes must hold all
    /// the ranks: `--nodes=9 --ntasks-per-node=8 --spares 1 --k 6 --m 2 -n 64` leaves 6 × 8
    /// = 48 slots for 64 ranks, and a job sized to its allocation cannot start. In the
    /// rotated layout every member hosts ranks (8 × 8 = 64) and holds an even share of the
    /// parity; the full encode costs the same (docs/PERFORMANCE.md). It is rotated whatever
    /// the rank count, so that the layout does not change with `-n`, and a job that fits
    /// keeps fitting after a spare replaces a lost node. `--layout dedicated` is still
    /// honoured where it fits, and refused before anything starts where it does not.
    pub fn default_layout(self) -> eckpt_coding::Layout {
        match self {
            Launcher::Srun => eckpt_coding::Layout::Rotated,
            _ => eckpt_coding::Layout::Dedicated,
        }
    }
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Local => "local",
            Launcher::Mpirun => "mpirun",
            Launcher::Mpiexec => "mpiexec",
            Launcher::Srun => "srun",
        })
    }
}

/// One attempt to start.
pub struct LaunchSpec<'a> {
    /// The program and its arguments.
    pub command: &'a [String],
    /// Options for the launcher (`mpirun`, srun), before the program.
    pub launcher_args: &'a [String],
    /// Ranks.
    pub world: u32,
    /// Rank → node.
    pub placement: &'a BTreeMap<u32, String>,
    /// Where each node of the placement runs.
    pub hosts: &'a BTreeMap<String, NodeHost>,
    /// What every rank needs in its environment besides its rank and node.
    pub env: &'a [(String, String)],
    /// The attempt's id (`ECKPT_LAUNCH`: every process of the attempt carries it).
    pub launch_id: &'a str,
    /// Where the ranks' output goes.
    pub sinks: Sinks,
    /// The cluster directory (the `mpirun` helper finds the nodes through it).
    pub cluster_dir: PathBuf,
    /// The `eckpt` executable (the `mpirun` helper is `eckpt mpirun-agent`).
    pub exe: PathBuf,
    /// The namespaced network's subnet (`10.a.b.0/24`), when the cluster has one: MPI's
    /// traffic between nodes is kept on it.
    pub subnet: Option<String>,
    /// Where the attempt may keep files (`mpirun`'s host file).
    pub scratch: PathBuf,
    /// How long the ranks' output is still read once they (or the launcher) ended: a
    /// process left behind holding the pipes does not hold the run longer.
    pub output_drain: Duration,
}

/// Reads what is left of the output of processes that ended, for at most `within`; says who
/// holds it open past that ([`crate::output::drain`]).
fn end_output(forwarders: &mut Vec<Forwarder>, within: Duration) {
    if let Some(line) = drain(forwarders, within) {
        Sink::Stderr.write_line("eckpt run: ", line.as_bytes());
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every rank exited 0.
    Done,
    /// A rank exited with a non-zero status.
    Failed {
        /// Which, when known.
        rank: Option<u32>,
        /// Its status.
        code: i32,
    },
    /// A rank was killed by a signal.
    Killed {
        /// Which, when known.
        rank: Option<u32>,
        /// The signal, when known.
        signal: Option<i32>,
    },
}

/// A running attempt.
pub trait Attempt {
    /// How it ended, once it has (the first rank to fail ends it); `None` while running.
    fn poll(&mut self) -> Option<Ending>;
    /// Ranks that have exited with status 0 while others run on (as far as this host can
    /// see them).
    fn exited(&mut self) -> BTreeSet<u32>;
    /// Kills every process of the attempt and reaps them.
    fn stop(&mut self);
}

/// What starts an attempt's ranks: one of the [`Launcher`]s, or a test's script.
pub trait Launch {
    /// Starts every rank of `spec`.
    fn start(&self, spec: &LaunchSpec<'_>) -> Result<Box<dyn Attempt>, RunError>;
}

impl Launch for Launcher {
    fn start(&self, spec: &LaunchSpec<'_>) -> Result<Box<dyn Attempt>, RunError> {
        spec.start(*self)
    }
}

impl LaunchSpec<'_> {
    /// Starts the attempt with `launcher`.
    pub fn start(&self, launcher: Launcher) -> Result<Box<dyn Attempt>, RunError> {
        if self.command.is_empty() {
            return Err(RunError::Launch("no program to run: give it after --".into()));
        }
        match launcher {
            Launcher::Local => Ok(Box::new(local::start(self)?)),
            Launcher::Mpirun => Ok(Box::new(mpirun::start(self)?)),
            Launcher::Mpiexec => Ok(Box::new(mpiexec::start(self)?)),
            Launcher::Srun => Ok(Box::new(srun::start(self)?)),
        }
    }
}

/// Writes the attempt's host file — one line per rank, in rank order, `line` of its node —
/// to `spec.scratch/hostfile`; returns it and every rank's node.
fn write_hostfile<'a>(
    spec: &'a LaunchSpec<'_>,
    line: impl Fn(&str, &NodeHost) -> String,
) -> Result<(PathBuf, Vec<&'a str>), RunError> {
    let mut lines = String::new();
    let mut nodes = Vec::with_capacity(spec.world as usize);
    for (&rank, node) in spec.placement {
        let host = spec
            .hosts
            .get(node)
            .ok_or_else(|| RunError::Launch(format!("node {node} of rank {rank} is not running")))?;
        lines.push_str(&line(node, host));
        lines.push('\n');
        nodes.push(node.as_str());
    }
    std::fs::create_dir_all(&spec.scratch).map_err(|e| RunError::io(&spec.scratch, e))?;
    let hostfile = spec.scratch.join(LAUNCH_HOSTFILE);
    std::fs::write(&hostfile, lines).map_err(|e| RunError::io(&hostfile, e))?;
    Ok((hostfile, nodes))
}

/// Removes an ended attempt's scratch directory: the files a launcher writes there, then the
/// directory, unless someone put a file of their own in it (`eckpt down --purge` reports it).
pub(crate) fn remove_scratch(scratch: &Path) {
    for file in [LAUNCH_HOSTFILE, LAUNCH_RSH_SCRIPT] {
        let _ = std::fs::remove_file(scratch.join(file));
    }
    let _ = std::fs::remove_dir(scratch);
}

/// The command a whole-job launcher (mpirun, mpiexec, srun) starts as each rank: the job's
/// command under `eckpt run-rank` (`rank_reaper`), so a process the rank leaves holding its
/// output does not hold the launcher, and the run, after the rank ended.
fn rank_command(spec: &LaunchSpec<'_>) -> Vec<std::ffi::OsString> {
    let mut command = vec![spec.exe.clone().into_os_string(), "run-rank".into(), "--".into()];
    command.extend(spec.command.iter().map(Into::into));
    command
}

/// What every rank's environment gets from a whole-job launcher: the attempt's variables,
/// every rank's node (`ECKPT_NODES`: the rank reads its own) and the launch id.
fn rank_env(spec: &LaunchSpec<'_>, nodes: &[&str]) -> Vec<(String, String)> {
    let mut vars = spec.env.to_vec();
    vars.push(("ECKPT_NODES".into(), nodes.join(",")));
    vars.push(("ECKPT_LAUNCH".into(), spec.launch_id.to_string()));
    vars
}

/// SIGKILLs every process carrying launch id `launch` (what ranks and daemons started too).
pub fn kill_launch(launch: &str) {
    for (pid, _) in procs::of_launch(launch) {
        procs::kill(pid);
    }
}

/// Makes a spawned child lead a process group of its own, so that stopping it stops what
/// it started.
fn own_process_group(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setpgid(2) is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::setpgid(0, 0);
            Ok(())
        });
    }
}

/// SIGKILLs the process group `pid` leads.
fn kill_group(pid: u32) {
    // SAFETY: kill(2) of a process group we created; a group that is gone is ignored.
    unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
}

/// The ending of a child's exit status.
fn ending(rank: Option<u32>, status: std::process::ExitStatus) -> Ending {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => Ending::Done,
        (Some(code), _) => Ending::Failed { rank, code },
        (None, signal) => Ending::Killed { rank, signal },
    }
}
