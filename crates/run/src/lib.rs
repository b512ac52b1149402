//! `eckpt run`: one command runs an unmodified launch line to completion through node
//! failures. It uses (or starts) a cluster, places the job's ranks on the nodes that can
//! host them, launches them (each a child process, or through `mpirun`) with what the rank
//! library needs, forwards their output, and supervises: when a rank dies or the coordinator
//! declares a node dead it stops the attempt, recovers — the same request as
//! `eckpt recover`: decode, re-place per process, restore redundancy — and relaunches every
//! rank where it now lives; `eckpt_restart()` resumes them from the last committed epoch.
//!
//! - [`placement`]: where new ranks start (pure, property-tested).
//! - [`launcher`]: starting and watching one attempt (local, `mpirun` or srun); [`slurm`]:
//!   the Slurm allocation srun runs in, [`hostlist`] its compressed host lists; [`host`]: a node's network namespace; [`output`]: `[R] ` prefixed lines; [`procs`]: the job's
//!   processes in `/proc`.
//! - [`supervisor`]: the loop of attempts, failures and recoveries; [`faults`]: `--kill-at`.
//! - [`torch_env`]: torch.distributed's `env://` variables in every rank.
//! - [`lease`]: the job's lease and attempt generations; [`guard`]: ranks die with their
//!   supervisor.
//! - [`session`]: using or starting the cluster (on a host file's hosts: [`hostfile`]); [`cluster`]: calls to its coordinator.
//! - [`record`]: the run's journal, for `eckpt report`.

#![warn(missing_docs)]

pub mod cluster;
#[cfg(feature = "fault-injection")]
pub mod faults;
pub mod guard;
pub mod host;
pub mod hostfile;
pub mod hostlist;
pub mod launcher;
pub mod lease;
pub mod output;
pub mod placement;
pub mod procs;
pub mod rank_reaper;
pub mod record;
pub mod session;
pub mod slurm;
pub mod supervisor;
pub mod torch_env;

use std::path::{Path, PathBuf};

use eckpt_cluster_api::msg::{JobStart, Relocation};
use eckpt_cluster_api::ClusterError;

pub use launcher::Launcher;
pub use supervisor::{run, Event};

/// Everything `eckpt run` is asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The cluster to use: a running one is used, a stopped one started, and a new one
    /// created with `up`; `None`: a new cluster in a temporary directory.
    pub cluster: session::ClusterChoice,
    /// Ranks of the job.
    pub ranks: u32,
    /// How ranks are started.
    pub launcher: Launcher,
    /// Options for the launcher (`mpirun`, srun), before the program.
    pub launcher_args: Vec<String>,
    /// Live nodes (members and spares) below which the run stops instead of relaunching
    /// (the last committed epoch is kept, and flushed when the cluster flushes).
    pub min_nodes: usize,
    /// Where new ranks go.
    pub placement: placement::Policy,
    /// Where a lost node's ranks go when no spare replaces it.
    pub relocation: Relocation,
    /// Relaunches allowed after failures before giving up.
    pub max_restarts: u32,
    /// Nodes to kill, when (tests and demos).
    #[cfg(feature = "fault-injection")]
    pub kill_at: faults::KillPlan,
    /// Seed of the choice of nodes to kill.
    #[cfg(feature = "fault-injection")]
    pub seed: u64,
    /// `ECKPT_INTERVAL` for the ranks (`snapshot()`), if given.
    pub interval: Option<String>,
    /// `ECKPT_MTBF` for the ranks, if given.
    pub mtbf: Option<String>,
    /// Keep what this run started: a cluster running, and a finished job's node stores.
    pub keep: bool,
    /// The job's id (`--job`, else the batch system's); `None`: the job the cluster holds,
    /// or a new one.
    pub job: Option<String>,
    /// Resume (default), start over (`--fresh`) or continue a finished job (`--resume`).
    pub start: JobStart,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The `eckpt` executable (agents, coordinator and the `mpirun` helper run it).
    pub exe: PathBuf,
    /// Where the ranks' output goes.
    pub sinks: output::Sinks,
    /// Also write the run's record here.
    pub record: Option<PathBuf>,
}

/// Why `eckpt run` failed (the program's own exit status is not an error).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The cluster refused or failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The ranks could not be started or watched.
    #[error("{0}")]
    Launch(String),
    /// More nodes were lost than the code tolerates: the job cannot go on (nothing
    /// committed was deleted).
    #[error("cannot recover: {0}")]
    Unrecoverable(String),
    /// Too many failures.
    #[error("{0}")]
    Restarts(String),
    /// Interrupted by a signal.
    #[error("interrupted: the ranks were stopped; the last committed epoch is kept")]
    Interrupted,
    /// The job's ranks disagree on how many checkpoints they take: an epoch can never
    /// commit.
    #[error("{0}")]
    Mismatch(String),
    /// Fewer nodes are left than `--min-nodes`.
    #[error("{0}")]
    TooFewNodes(String),
    /// Another supervisor took the job over (this one could not renew its lease in time).
    #[error("lost the job's lease: {0}; the ranks were stopped")]
    LeaseLost(String),
    /// Another run took the job over: a newer generation runs it now.
    #[error("superseded by generation {generation} of job {job} ({holder}), which took the job over when this run's lease (generation {ours}) was not renewed in time: this run's ranks were stopped, and the job and its cluster are left to it")]
    Superseded {
        /// The job's generation now.
        generation: u64,
        /// This run's last generation.
        ours: u64,
        /// The job's id.
        job: String,
        /// Who runs it now.
        holder: String,
    },
    /// A file.
    #[error("{path}: {source}")]
    Io {
        /// Which.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// An I/O error at `path`.
    pub fn io(path: &Path, source: std::io::Error) -> RunError {
        RunError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
