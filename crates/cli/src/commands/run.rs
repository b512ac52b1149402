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
    /// end unless --keep (and, when every rank exited 0, its node stores deleted).
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
    /// The hosts of a new cluster, one node each (Open MPI's or MPICH's host file format; a
    /// host's count, slots=N or :N, is the most ranks it runs); default: this host, or with
    /// --launcher srun the Slurm allocation's. Inside an allocation the agents are started as
    /// a step of it; elsewhere start them by hand.
    #[arg(long, value_name = "FILE", conflicts_with = "nodelist")]
    hostfile: Option<PathBuf>,
    /// The hosts of a new cluster as a list (node1,node2,…), as --hostfile.
    #[arg(long, value_name = "HOSTS")]
    nodelist: Option<String>,
    /// For a cluster of several hosts: each agent's node-local store (%j: the Slurm job id,
    /// %n: the node's name). A finished job's stores are deleted at its end unless --keep;
    /// a failed job's stay (`eckpt clean --job J` deletes them).
    #[arg(long, value_name = "PATH", default_value = eckpt_cluster::clean::DEFAULT_NODE_STORE)]
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
    /// Fault injection: kill COUNT rank-hosting nodes with their stores right after the
    /// run's EPOCH-th epoch commits (EPOCH:COUNT; the run's own count, so 8 is the eighth
    /// epoch of this run whatever number the cluster gives it), or
    /// in the middle of the next recovery (recovery:COUNT); comma-separated.
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
    /// Keep what this run started: the cluster running, and its node stores (by default
    /// a finished job's are deleted at its end). Under srun the agents end with the Slurm
    /// job: only the stores stay.
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
    let (hosts, slots) = match (&args.hostfile, &args.nodelist) {
        (Some(file), _) => {
            let (hosts, slots) = eckpt_run::hostfile::read(file)?;
            (Some(hosts), slots)
        }
        (None, Some(list)) => (Some(eckpt_run::hostfile::from_list(list)), Default::default()),
        (None, None) => (None, Default::default()),
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
    let job = args.job.clone().or_else(batch_job_id);
    let mut up = args.shape.up_options(PathBuf::new(), Some(default_nodes))?;
    // A new cluster resumes only this job's flushed epochs.
    up.job.clone_from(&job);
    if args.shape.layout().is_none() {
        up.coding.layout = args.launcher.default_layout();
    }
    // Refused here, before a cluster is started for nothing: the launcher would refuse the
    // namespaces only at the first launch.
    if args.launcher == Launcher::Mpiexec && up.netns {
        anyhow::bail!(
            "--launcher mpiexec --netns: Hydra's proxies cannot reach back out of the nodes' network namespaces; use --launcher mpirun (Open MPI), or drop --netns"
        );
    }
    let options = RunOptions {
        cluster: ClusterChoice {
            dir: args.dir.clone(),
            up,
            nodes_given: args.shape.nodes.is_some(),
            hosts: on_hosts.then(|| HostCluster {
                hosts,
                slots,
                ranks: args.ranks,
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
        job,
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

/// `n thing` or `n things`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The short table a run ends with: epochs, bytes per epoch full vs stored, encode and
/// recovery times. What a run did not measure (no image size, no encode, no node lost) is
/// left out rather than printed as zeros and empty parentheses.
fn summary(record: &RunRecord) -> Vec<String> {
    let committed: Vec<_> = record.epochs.iter().filter(|e| e.committed).collect();
    let aborted = record.epochs.len() - committed.len();
    let mut lines = vec![format!(
        "summary: exit {} after {:.1} s, {}, {} committed{}",
        record.exit_code.map_or("-".into(), |c| c.to_string()),
        record.seconds,
        count(record.attempts.len(), "attempt", "attempts"),
        count(committed.len(), "epoch", "epochs"),
        if aborted > 0 {
            format!(" ({aborted} aborted)")
        } else {
            String::new()
        }
    )];
    if let Some(first) = committed.first() {
        let image = committed.iter().map(|e| e.image_bytes).max().unwrap_or(0);
        let later: Vec<f64> = committed.iter().skip(1).map(|e| e.stored_bytes as f64).collect();
        let mut bytes = Vec::new();
        if image > 0 {
            bytes.push(format!("full image {}", HumanBytes(image)));
        }
        if first.stored_bytes > 0 {
            bytes.push(format!("first epoch stored {}", HumanBytes(first.stored_bytes)));
        }
        if later.iter().any(|&b| b > 0.0) {
            let stored = median(later);
            let share = if image > 0 {
                format!(" ({:.2} % of full)", 100.0 * stored / image as f64)
            } else {
                String::new()
            };
            bytes.push(format!(
                "later epochs stored median {}{share}",
                HumanBytes(stored as u64)
            ));
        }
        if !bytes.is_empty() {
            lines.push(format!("  bytes per epoch: {}", bytes.join(", ")));
        }
        let encode: Vec<f64> = committed.iter().map(|e| e.encode_seconds).collect();
        if encode.iter().any(|&s| s > 0.0) {
            let mut kinds: Vec<&str> = Vec::new();
            for kind in committed.iter().flat_map(|e| &e.kinds) {
                if !kinds.contains(&kind.as_str()) {
                    kinds.push(kind);
                }
            }
            lines.push(format!(
                "  encode per epoch: median {:.3} s, max {:.3} s{}",
                median(encode.clone()),
                encode.iter().copied().fold(0.0, f64::max),
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", kinds.join(", "))
                }
            ));
        }
    }
    for r in &record.recoveries {
        let mut what = vec![if r.lost.is_empty() {
            "no node lost".to_string()
        } else {
            format!("lost {}", r.lost.join(", "))
        }];
        if let Some(flushed) = r.from_flush {
            what.push(format!("restored from flushed epoch {flushed}"));
        }
        let times: Vec<String> = [
            ("decode", r.decode_seconds),
            ("encode", r.encode_seconds),
            ("relaunch", r.relaunch_seconds),
            // From the loss itself when the run knows it (detection included), else from
            // the run seeing the failure.
            if r.loss_to_running_seconds > 0.0 {
                ("loss to running", r.loss_to_running_seconds)
            } else {
                ("failure to running", r.downtime_seconds)
            },
        ]
        .into_iter()
        .filter(|(_, s)| *s > 0.0)
        .map(|(label, s)| format!("{label} {s:.2} s"))
        .collect();
        let epoch = match r.epoch {
            0 => "recovery before any committed epoch".to_string(),
            e => format!("recovery of epoch {e}"),
        };
        lines.push(format!(
            "  {epoch} ({}){}",
            what.join("; "),
            if times.is_empty() {
                String::new()
            } else {
                format!(": {}", times.join(", "))
            }
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

/// `eckpt run-rank` (hidden): one rank under `mpirun` or `mpiexec`, and the end of what it
/// leaves running (see `eckpt_run::rank_reaper`).
#[derive(clap::Args)]
pub struct RunRankArgs {
    /// The rank's command.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

pub fn run_rank(args: RunRankArgs) -> Result<i32> {
    match eckpt_run::rank_reaper::run(&args.command)? {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_run::record::{AttemptRecord, EpochRecord, RecoveryRecord};

    /// A run whose restore failed before any epoch was measured: no image size, no encode,
    /// no node lost — the summary says so instead of `0 B`, `max 0.000 s ()` and `(lost )`.
    #[test]
    fn a_summary_prints_nothing_meaningless() {
        let record = RunRecord {
            seconds: 3.0,
            attempts: vec![AttemptRecord::default()],
            epochs: vec![EpochRecord {
                epoch: 29,
                committed: true,
                ..EpochRecord::default()
            }],
            recoveries: vec![RecoveryRecord {
                epoch: 29,
                from_flush: Some(20),
                ..RecoveryRecord::default()
            }],
            ..RunRecord::default()
        };
        let lines = summary(&record);
        let text = lines.join("\n");
        assert_eq!(
            lines[0],
            "summary: exit - after 3.0 s, 1 attempt, 1 epoch committed"
        );
        for meaningless in ["0 B", "0.000 s", "()", "(lost )", "lost )", "0.00 s"] {
            assert!(!text.contains(meaningless), "{meaningless:?} in {text}");
        }
        assert!(
            text.contains("recovery of epoch 29 (no node lost; restored from flushed epoch 20)"),
            "{text}"
        );
    }

    #[test]
    fn a_summary_of_a_run_with_a_loss_has_every_figure() {
        let epoch = |epoch, kind: &str, stored| EpochRecord {
            epoch,
            committed: true,
            kinds: vec![kind.to_string(), kind.to_string()],
            encode_seconds: 0.5,
            image_bytes: 1 << 20,
            stored_bytes: stored,
            ..EpochRecord::default()
        };
        let record = RunRecord {
            exit_code: Some(0),
            attempts: vec![AttemptRecord::default(), AttemptRecord::default()],
            epochs: vec![epoch(1, "full", 1 << 20), epoch(2, "update", 1 << 16)],
            recoveries: vec![RecoveryRecord {
                epoch: 2,
                lost: vec!["n1".into(), "n2".into()],
                decode_seconds: 0.4,
                encode_seconds: 0.6,
                relaunch_seconds: 0.1,
                downtime_seconds: 1.1,
                loss_to_running_seconds: 1.2,
                ..RecoveryRecord::default()
            }],
            ..RunRecord::default()
        };
        let text = summary(&record).join("\n");
        assert!(text.contains("2 attempts, 2 epochs committed"), "{text}");
        assert!(
            text.contains("full image 1.00 MiB, first epoch stored 1.00 MiB, later epochs stored median 64.00 KiB (6.25 % of full)"),
            "{text}"
        );
        assert!(text.contains("max 0.500 s (full, update)"), "{text}");
        assert!(
            text.contains("recovery of epoch 2 (lost n1, n2): decode 0.40 s, encode 0.60 s, relaunch 0.10 s, loss to running 1.20 s"),
            "{text}"
        );
    }
}
