//! `eckpt run`: a job launched, supervised and carried through node failures (the work is
//! in the `eckpt-run` crate); and `eckpt mpirun-agent`, the helper Open MPI calls to start
//! its daemon inside a node's network namespace.

use std::path::PathBuf;

use anyhow::{Context, Result};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{JobStart, Relocation};
#[cfg(feature = "fault-injection")]
use eckpt_run::faults::KillPlan;
use eckpt_run::output::{Sink, Sinks};
use eckpt_run::placement::Policy;
use eckpt_run::record::RunRecord;
use eckpt_run::session::{ClusterChoice, HostCluster};
use eckpt_run::{Launcher, RunOptions};
use indicatif::HumanBytes;

use super::cluster::{this_exe, ShapeArgs};
use crate::output::print_json;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Cluster directory: a running cluster is used; otherwise one is started there with
    /// the options below (default: a new one in a temporary directory), and stopped at the
    /// end unless --keep.
    #[arg(long)]
    dir: Option<PathBuf>,
    #[command(flatten)]
    shape: ShapeArgs,
    /// Ranks of the job.
    #[arg(short = 'n', long = "ranks")]
    ranks: u32,
    /// How ranks start: each a child of eckpt run (local), through Open MPI (mpirun) or
    /// MPICH's Hydra (mpiexec), or as a step of the Slurm allocation eckpt run runs in (srun:
    /// the cluster's nodes are the allocation's hosts, its agents a step of their own;
    /// needs --dir on shared storage).
    #[arg(long, default_value = "local")]
    launcher: Launcher,
    /// Options for mpirun or srun, given before the program (e.g. "--mpi=pmix", or
    /// "--mca btl tcp,self"); split as a shell would.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true, default_value = "")]
    launcher_args: String,
    /// The hosts of a new cluster, one node each (Open MPI's or MPICH's host file format);
    /// default: this host, or with --launcher srun the Slurm allocation's. Inside an
    /// allocation the agents are started as a step of it; elsewhere start them by hand.
    #[arg(long, value_name = "FILE", conflicts_with = "nodelist")]
    hostfile: Option<PathBuf>,
    /// The hosts of a new cluster as a list (node1,node2,…), as --hostfile.
    #[arg(long, value_name = "HOSTS")]
    nodelist: Option<String>,
    /// For a cluster of several hosts: each agent's node-local store (%j: the Slurm job id,
    /// %n: the node's name).
    #[arg(long, value_name = "PATH", default_value = "/tmp/eckpt-job%j-%n")]
    node_store: String,
    /// Stop instead of relaunching when fewer of the cluster's nodes than this are alive
    /// (members and spares; the last committed epoch is kept, and flushed with --flush-dir).
    #[arg(long, default_value_t = 0)]
    min_nodes: usize,
    /// Where new ranks go: ranks per node as even as possible (balanced), or each node
    /// filled to its cores first (pack).
    #[arg(long, default_value = "balanced")]
    placement: Policy,
    /// Where a lost node's ranks go when no spare replaces it: each to the least loaded
    /// node (process), or together to one node (node).
    #[arg(long, default_value = "process")]
    relocation: Relocation,
    /// Relaunches after failures before giving up.
    #[arg(long, default_value_t = 10)]
    max_restarts: u32,
    /// Fault injection: kill COUNT rank-hosting nodes with their stores right after epoch
    /// EPOCH commits (EPOCH:COUNT), or in the middle of the next recovery (recovery:COUNT);
    /// comma-separated.
    #[cfg(feature = "fault-injection")]
    #[arg(long, value_name = "EPOCH:COUNT[,…]", default_value = "")]
    kill_at: String,
    /// Seed of the choice of nodes --kill-at kills.
    #[cfg(feature = "fault-injection")]
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How often the ranks' `snapshot()` checkpoints: a duration (30s, 5m) or auto
    /// (Young/Daly from the measured checkpoint cost and --mtbf). Default: the ranks' own
    /// setting (ECKPT_INTERVAL, else 30s).
    #[arg(long)]
    interval: Option<String>,
    /// Mean time between failures, for --interval auto (e.g. 24h).
    #[arg(long)]
    mtbf: Option<String>,
    /// Keep a cluster this run started running at the end.
    #[arg(long)]
    keep: bool,
    /// Also write the run's record (epochs, failures, recoveries) to this file.
    #[arg(long)]
    record: Option<PathBuf>,
    /// The job's id (default: the batch system's, from SLURM_JOB_ID, PBS_JOBID or LSB_JOBID;
    /// without one, the job the cluster holds, or a new id). A cluster holding another
    /// job's checkpoint is refused.
    #[arg(long)]
    job: Option<String>,
    /// Discard the cluster's checkpoint of the job and start over.
    #[arg(long, conflicts_with = "resume")]
    fresh: bool,
    /// Continue a job that finished (every rank exited 0) from its final epoch.
    #[arg(long)]
    resume: bool,
    /// Print the run's record as JSON on stdout at the end; the program's stdout then goes
    /// to stderr.
    #[arg(long)]
    json: bool,
    /// The program and its arguments (after --).
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<String>,
}

pub fn run(args: RunArgs) -> Result<i32> {
    if args.ranks == 0 {
        anyhow::bail!("-n: a job needs at least one rank");
    }
    let hosts = match (&args.hostfile, &args.nodelist) {
        (Some(file), _) => Some(eckpt_run::hostfile::read(file)?),
        (None, Some(list)) => Some(eckpt_run::hostfile::from_list(list)),
        (None, None) => None,
    };
    let on_hosts = hosts.is_some() || args.launcher == Launcher::Srun;
    if on_hosts && args.shape.nodes.is_some() {
        anyhow::bail!(
            "--nodes: the cluster's nodes are its hosts (the host file's, or the Slurm allocation's); drop --nodes (--spares keeps some of them spare)"
        );
    }
    #[cfg(feature = "fault-injection")]
    let kill_at = KillPlan::parse(&args.kill_at).map_err(anyhow::Error::msg)?;
    check_interval(args.interval.as_deref(), args.mtbf.as_deref())?;
    let default_nodes = args.shape.default_nodes()?;
    let up = args.shape.up_options(PathBuf::new(), Some(default_nodes))?;
    let options = RunOptions {
        cluster: ClusterChoice {
            dir: args.dir.clone(),
            up,
            nodes_given: args.shape.nodes.is_some(),
            hosts: on_hosts.then(|| HostCluster {
                hosts,
                node_store: args.node_store.clone(),
            }),
        },
        ranks: args.ranks,
        launcher: args.launcher,
        launcher_args: shlex::split(&args.launcher_args)
            .ok_or_else(|| anyhow::anyhow!("--launcher-args {:?}: unbalanced quotes", args.launcher_args))?,
        min_nodes: args.min_nodes,
        placement: args.placement,
        relocation: args.relocation,
        max_restarts: args.max_restarts,
        #[cfg(feature = "fault-injection")]
        kill_at,
        #[cfg(feature = "fault-injection")]
        seed: args.seed,
        interval: args.interval.clone(),
        mtbf: args.mtbf.clone(),
        keep: args.keep,
        job: args.job.clone().or_else(batch_job_id),
        start: if args.fresh {
            JobStart::Fresh
        } else if args.resume {
            JobStart::Resume
        } else {
            JobStart::Default
        },
        command: args.command.clone(),
        exe: this_exe()?,
        sinks: Sinks {
            out: if args.json { Sink::Stderr } else { Sink::Stdout },
            err: Sink::Stderr,
        },
        record: args.record.clone(),
    };
    let (code, record) = eckpt_run::run(&options, &mut |event| eprintln!("eckpt run: {event}"))?;
    if args.json {
        print_json(&record);
    } else {
        for line in summary(&record) {
            eprintln!("eckpt run: {line}");
        }
    }
    Ok(code)
}

/// The batch system's job id, which stays the same when the job is requeued or relaunched
/// within its allocation.
fn batch_job_id() -> Option<String> {
    ["SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|id| !id.is_empty()))
}

/// Refuses an interval or MTBF the ranks would refuse only once running.
fn check_interval(interval: Option<&str>, mtbf: Option<&str>) -> Result<()> {
    let duration = |what: &str, text: &str| {
        humantime::parse_duration(text)
            .map(|_| ())
            .or_else(|_| text.parse::<f64>().map(|_| ()))
            .map_err(|_| anyhow::anyhow!("--{what} {text:?}: expected a duration such as 30s, 5m or 24h"))
    };
    if let Some(mtbf) = mtbf {
        duration("mtbf", mtbf)?;
    }
    match interval {
        Some("auto") if mtbf.is_none() => anyhow::bail!("--interval auto needs --mtbf (e.g. --mtbf 24h)"),
        Some("auto") | None => Ok(()),
        Some(every) => duration("interval", every),
    }
}

/// The median of `values` (0 when empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The short table a run ends with: epochs, bytes per epoch full vs stored, encode and
/// recovery times.
fn summary(record: &RunRecord) -> Vec<String> {
    let committed: Vec<_> = record.epochs.iter().filter(|e| e.committed).collect();
    let aborted = record.epochs.len() - committed.len();
    let mut lines = vec![format!(
        "summary: exit {} after {:.1} s, {} attempt(s), {} epoch(s) committed{}",
        record.exit_code.map_or("-".into(), |c| c.to_string()),
        record.seconds,
        record.attempts.len(),
        committed.len(),
        if aborted > 0 {
            format!(" ({aborted} aborted)")
        } else {
            String::new()
        }
    )];
    if let Some(first) = committed.first() {
        let image = committed.iter().map(|e| e.image_bytes).max().unwrap_or(0);
        let later: Vec<f64> = committed.iter().skip(1).map(|e| e.stored_bytes as f64).collect();
        let stored = median(later.clone());
        lines.push(format!(
            "  bytes per epoch: full image {}, first epoch stored {}, later epochs stored median {} ({:.2} % of full)",
            HumanBytes(image),
            HumanBytes(first.stored_bytes),
            HumanBytes(stored as u64),
            if image > 0 && !later.is_empty() {
                100.0 * stored / image as f64
            } else {
                100.0
            }
        ));
        let encode: Vec<f64> = committed.iter().map(|e| e.encode_seconds).collect();
        lines.push(format!(
            "  encode per epoch: median {:.3} s, max {:.3} s ({})",
            median(encode.clone()),
            encode.iter().copied().fold(0.0, f64::max),
            committed.last().map(|e| e.kinds.join(" ")).unwrap_or_default()
        ));
    }
    for r in &record.recoveries {
        lines.push(format!(
            "  recovery of epoch {} (lost {}): decode {:.2} s, encode {:.2} s, relaunch {:.2} s, loss to running {:.2} s",
            r.epoch,
            r.lost.join(" "),
            r.decode_seconds,
            r.encode_seconds,
            r.relaunch_seconds,
            r.downtime_seconds
        ));
    }
    lines
}

/// `eckpt mpirun-agent` (hidden): Open MPI's rsh agent and Hydra's ssh for `eckpt run
/// --launcher mpirun|mpiexec`.
#[derive(clap::Args)]
pub struct MpirunAgentArgs {
    /// Cluster directory.
    #[arg(long)]
    dir: PathBuf,
    /// ssh's "no X11 forwarding", which Hydra passes (nothing to forward here).
    #[arg(short = 'x', hide = true)]
    _no_x11: bool,
    /// The host the launcher starts its daemon on (a node name, or another host).
    host: String,
    /// The command to run there.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

pub fn run_mpirun_agent(args: MpirunAgentArgs) -> Result<i32> {
    let dir = ClusterDir::new(&args.dir)?;
    let cluster = eckpt_run::cluster::Cluster::new(&dir)?;
    let nodes = eckpt_run::cluster::Coordinator::nodes(&cluster).context("finding the cluster's nodes")?;
    match eckpt_run::launcher::mpirun::rsh_agent(&nodes, &args.host, &args.command)? {}
}

/// `eckpt run-guard` (hidden): the process that ends a run's ranks when its supervisor dies
/// (see `eckpt_run::guard`).
#[derive(clap::Args)]
pub struct RunGuardArgs {
    /// The run whose processes to end (launch ids `RUN-<attempt>`).
    #[arg(long)]
    run: String,
}

pub fn run_guard(args: RunGuardArgs) -> Result<i32> {
    let killed = eckpt_run::guard::watch(&args.run);
    if killed > 0 {
        eprintln!(
            "eckpt run-guard: the supervisor of run {} is gone: ended its {killed} process(es)",
            args.run
        );
    }
    Ok(0)
}
