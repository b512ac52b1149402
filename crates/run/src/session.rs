//! The cluster a run uses: a running one as it is; a stopped one started again; a new one
//! created with `up`'s options (in a temporary directory when none is given). A cluster the
//! run started is stopped at the end — a temporary one deleted, and a finished job's node
//! stores with it — unless `--keep`.
//!
//! A cluster can also be made of named hosts: the Slurm allocation's (`--launcher srun`) or
//! a host file's. Its nodes are named by the host names (the last `--spares` of them
//! spares) and its coordinator listens on this host's address. Inside an allocation its
//! agents run as one job step of their own, one per host, storing on node-local storage:
//! srun stands where `up` starts agents elsewhere; outside one, the run waits for the
//! agents started on the hosts by hand (`eckpt agent --dir D --bind %n --store …`).

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use eckpt_cluster::launch::{self, Purge, UpOptions};
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines};
use eckpt_cluster_api::msg::{FlushRestore, Status};
use eckpt_cluster_api::ErrorKind;

use crate::placement::{self, Slots};
use crate::slurm::Allocation;
use crate::RunError;

/// Which cluster to use.
#[derive(Debug, Clone)]
pub struct ClusterChoice {
    /// Its directory (`None`: a new temporary one).
    pub dir: Option<PathBuf>,
    /// How to create it when it does not exist (`up`'s options; `dir` is filled in).
    pub up: UpOptions,
    /// Whether `up`'s node count was given: refused for a cluster that already runs.
    pub nodes_given: bool,
    /// A new cluster made of named hosts; `None`: `up`'s `n0`… on this host.
    pub hosts: Option<HostCluster>,
}

/// A cluster made of named hosts.
#[derive(Debug, Clone)]
pub struct HostCluster {
    /// The hosts (a host file's); `None`: the Slurm allocation's.
    pub hosts: Option<Vec<String>>,
    /// The host file's slots (`host slots=N`, `host:N`): the most ranks each host may run.
    /// Inside a Slurm allocation its tasks per node limit them too.
    pub slots: Slots,
    /// The job's ranks: a new cluster is refused, before it is made, when its layout leaves
    /// them too few slots.
    pub ranks: u32,
    /// Each agent's node-local store (`%j`: the Slurm job id, `%n`: the node's name,
    /// expanded by its agent).
    pub node_store: String,
}

/// How a run ended, for what it leaves of a cluster it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every rank exited 0 and, on a cluster that flushes, the last committed epoch is in
    /// the flush directory: the job's node stores go (unless `--keep`).
    Finished,
    /// Anything else — a failure, a stop, an epoch that could not be flushed, a run that
    /// could not begin: the node stores stay for a resume; `job` names the job for
    /// `eckpt clean`, once it is known.
    Unfinished {
        /// The job's id.
        job: Option<String>,
    },
}

/// The cluster in use, and what the run must undo at the end.
#[derive(Debug)]
pub struct Session {
    /// Its directory.
    pub dir: ClusterDir,
    /// Whether this run started it.
    pub started: bool,
    /// Whether this run created its directory in a temporary place.
    pub temporary: bool,
    /// The new cluster resumed the job from its flush directory.
    pub from_flush: Option<FlushRestore>,
    /// The Slurm allocation whose step runs the agents (a host cluster inside one).
    pub allocation: Option<Allocation>,
    /// The most ranks each node may run: the host file's slots and the allocation's tasks
    /// per node, the tighter of both (empty: no limit).
    pub slots: Slots,
    /// The agents' job step this run started (srun), ended with the cluster.
    agents: Option<Child>,
}

fn answers(dir: &ClusterDir) -> bool {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return false;
    };
    runtime.block_on(async {
        let call = eckpt_cluster_api::commands::coordinator_call(dir, Status, |_| {});
        matches!(
            tokio::time::timeout(Duration::from_secs(10), call).await,
            Ok(Ok(_))
        )
    })
}

impl Session {
    /// Uses, starts or creates the cluster `choice` names; says what it did in `note`.
    pub fn open(choice: &ClusterChoice, note: &mut dyn FnMut(String)) -> Result<Session, RunError> {
        let allocation = match &choice.hosts {
            Some(HostCluster { hosts: None, .. }) => Some(Allocation::current()?),
            Some(_) => Allocation::current().ok(),
            None => None,
        };
        let slots = match (&choice.hosts, &allocation) {
            (Some(hosts), Some(allocation)) => placement::tighter(hosts.slots.clone(), &allocation.slots()?),
            (Some(hosts), None) => hosts.slots.clone(),
            (None, _) => Slots::new(),
        };
        if choice.hosts.is_some() && choice.dir.is_none() {
            return Err(RunError::Launch(
                "a cluster of several hosts needs --dir: a cluster directory on storage every host shares"
                    .into(),
            ));
        }
        let (path, temporary) = match &choice.dir {
            Some(dir) => (dir.clone(), false),
            None => {
                // Part of a unique name, nothing more.
                #[allow(clippy::disallowed_methods)]
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                (
                    std::env::temp_dir().join(format!("eckpt-run-{}-{stamp:x}", std::process::id())),
                    true,
                )
            }
        };
        let dir = ClusterDir::new(&path)?;
        if dir.cluster_file().exists() && answers(&dir) {
            if choice.nodes_given {
                let root = dir.root().display();
                return Err(RunError::Launch(format!(
                    "a cluster is already running in {root}: drop --nodes to run on it, or give another --dir"
                )));
            }
            note(format!("using the running cluster in {}", dir.root().display()));
            return Ok(Session {
                dir,
                started: false,
                temporary,
                from_flush: None,
                allocation,
                slots,
                agents: None,
            });
        }
        let mut up = choice.up.clone();
        up.dir = dir.root().to_path_buf();
        let existing = dir.cluster_file().exists();
        if existing {
            up.nodes = None;
        }
        if let Some(hosts) = &choice.hosts {
            on_hosts(&mut up, hosts, allocation.as_ref(), &slots)?;
        }
        if temporary && up.deadlines.idle_ms == 0 {
            up.deadlines.idle_ms = temporary_idle(&up.deadlines).as_millis() as u64;
        }
        let summary = launch::up(&up)?;
        let names: Vec<String> = summary.nodes.iter().chain(&summary.spares).cloned().collect();
        let agents = match (&allocation, &choice.hosts) {
            (Some(allocation), Some(hosts)) => {
                match start_agents(&dir, allocation, &names, &hosts.node_store, &up.exe, &slots) {
                    Ok(step) => Some(step),
                    Err(e) => {
                        // The coordinator `up` just started must not outlive the run.
                        let _ = launch::down(dir.root(), temporary);
                        return Err(e);
                    }
                }
            }
            (None, Some(hosts)) => {
                note(format!(
                    "start the agent of every host: `eckpt agent --dir {} --name HOST --bind %n --store {}` on {}",
                    dir.root().display(),
                    hosts.node_store,
                    names.join(" ")
                ));
                None
            }
            _ => None,
        };
        let from_flush = summary.from_flush.clone();
        note(format!(
            "{} cluster in {}: {} nodes{} (k={} m={}, {} mode, {} layout{})",
            if existing { "restarted the" } else { "started a" },
            dir.root().display(),
            summary.nodes.len(),
            if summary.spares.is_empty() {
                String::new()
            } else {
                format!(" + {} spare(s)", summary.spares.len())
            },
            summary.coding.k,
            summary.coding.m,
            summary.coding.mode,
            summary.coding.layout,
            summary
                .link_rate
                .as_ref()
                .map(|r| format!(", namespaced {r} links"))
                .unwrap_or_default()
        ));
        if let Some(restore) = &from_flush {
            note(restore.to_string());
        }
        Ok(Session {
            dir,
            started: true,
            temporary,
            from_flush,
            allocation,
            slots,
            agents,
        })
    }

    /// Stops a cluster this run started unless `keep`: a temporary one is deleted, and a
    /// [`Outcome::Finished`] job's node stores go with `down --purge`'s rule (only what
    /// eckpt made) while the cluster directory stays; anything else stays for a resume.
    /// `keep` keeps the cluster running and its stores (an srun step's agents end with the
    /// Slurm job: then only the stores stay). A cluster the run did not start is left as it
    /// is, and so is one another run took the job of: the coordinator refuses the stop of
    /// `generation` (this run's last, 0 if it never held the lease) while another generation
    /// holds the job, and leaves the cluster to its idle rule.
    pub fn close(
        mut self,
        keep: bool,
        outcome: &Outcome,
        generation: u64,
        note: &mut dyn FnMut(String),
    ) -> Result<(), RunError> {
        if !self.started {
            return Ok(());
        }
        if keep && self.agents.is_some() {
            note(
                "--keep: the agents are a step of this Slurm job, which ends with it; stopping the cluster, keeping its node stores"
                    .into(),
            );
        }
        let root = self.dir.root().display().to_string();
        if keep && self.agents.is_none() {
            note(format!(
                "the cluster keeps running in {root}: `eckpt status --dir {root}`, `eckpt down --dir {root} --purge`"
            ));
            return Ok(());
        }
        let purge = if self.temporary {
            Purge::Everything
        } else if !keep && *outcome == Outcome::Finished {
            Purge::NodeStores
        } else {
            Purge::Nothing
        };
        let purged = match launch::stop(self.dir.root(), purge, Some(generation)) {
            Err(refused) if refused.kind() == ErrorKind::Fenced => {
                note(format!("the cluster in {root} keeps running: {refused}"));
                return Ok(());
            }
            other => other?,
        };
        for kept in purged.kept {
            note(kept);
        }
        match (purge, outcome) {
            (Purge::NodeStores, _) => note(format!(
                "the job finished: removed its node stores ({} directories; --keep keeps them)",
                purged.removed.len()
            )),
            (Purge::Nothing, Outcome::Unfinished { job: Some(job) }) if !keep => note(format!(
                "the node stores stay for a resume (run the same command again); `eckpt clean --job {job} --dir {root}` deletes them{}",
                if self.agents.is_some() {
                    ", run on each node (a Slurm epilog)"
                } else {
                    ""
                }
            )),
            _ => {}
        }
        if let (Some(step), Some(allocation)) = (self.agents.take(), &self.allocation) {
            end_agents(step, allocation, &agents_step_name(allocation));
        }
        Ok(())
    }
}

/// The idle lease of a cluster a run starts for itself (no `--dir`, no `--idle-lease`). Its
/// run ends it, but a run that is killed cannot, and its guard ends only the ranks: the
/// cluster then stops itself, checkpoints kept, once no run has held it for this long — six
/// leases, and never before a starting run has had its wait for the agents.
fn temporary_idle(deadlines: &Deadlines) -> Duration {
    deadlines.run_idle().max(deadlines.start_wait())
}

/// `up`'s options for a new cluster of `hosts`: named by their names, the last `--spares`
/// of them spares, and the coordinator on this host's address. Refused when the job's ranks
/// do not fit the slots of the nodes its layout puts ranks on.
fn on_hosts(
    up: &mut UpOptions,
    hosts: &HostCluster,
    allocation: Option<&Allocation>,
    slots: &Slots,
) -> Result<(), RunError> {
    up.agents = false;
    if up.bind.is_none() {
        // The name Slurm knows this host by resolves to the address the other nodes reach.
        up.bind = Some(this_node()?);
    }
    if up.nodes.is_none() {
        // A stopped cluster restarts with the nodes it recorded.
        return Ok(());
    }
    let ranks = hosts.ranks;
    let hosts = match (&hosts.hosts, allocation) {
        (Some(hosts), _) => hosts.clone(),
        (None, Some(allocation)) => allocation.nodes()?,
        (None, None) => {
            return Err(RunError::Launch(
                "no hosts: give a host file, or run in a Slurm allocation".into(),
            ))
        }
    };
    if hosts.len() <= up.spares {
        return Err(RunError::Launch(format!(
            "{} host(s): too few for --spares {} and the job's nodes",
            hosts.len(),
            up.spares
        )));
    }
    if up.domains.is_empty() && allocation.is_some() {
        // No `--domain` given: the batch system's topology, where it has one.
        up.domains = crate::slurm::leaf_switches()
            .into_iter()
            .filter(|(node, _)| hosts.contains(node))
            .collect();
    }
    let members = hosts.len() - up.spares;
    placement::check_fit(ranks, &hosts[..members], up.spares, slots, &up.coding, |node| {
        up.domains.get(node).cloned()
    })
    .map_err(RunError::Launch)?;
    up.nodes = Some(members);
    up.names = hosts;
    Ok(())
}

/// This host's name in Slurm (`SLURMD_NODENAME`, else the host name).
fn this_node() -> Result<String, RunError> {
    if let Some(name) = std::env::var("SLURMD_NODENAME").ok().filter(|n| !n.is_empty()) {
        return Ok(name);
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .map_err(|e| RunError::io(Path::new("/proc/sys/kernel/hostname"), e))
}

/// The name of the agents' step of `allocation`.
fn agents_step_name(allocation: &Allocation) -> String {
    format!("eckpt-agents-{}", allocation.job)
}

/// Starts the agents of `names` as one step of `allocation`, one task per host: it does not
/// end when a node fails (`--no-kill`, and no task's exit ends the others), and shares the
/// allocation's CPUs with the ranks' steps (`--overlap`). Each agent's log is its node's
/// `log` in the cluster directory, as under `up`. Where every node has the same `slots`, each
/// agent offers that many cores (`--cores`): a recovery spreads a lost node's ranks by the
/// cores the nodes offer, so by the slots, and never beyond them while they hold the job.
fn start_agents(
    dir: &ClusterDir,
    allocation: &Allocation,
    names: &[String],
    store: &str,
    exe: &Path,
    slots: &Slots,
) -> Result<Child, RunError> {
    // srun opens each log before the agent runs (inside the owner-only cluster directory).
    for name in names {
        let node = dir.node(name);
        std::fs::create_dir_all(&node).map_err(|e| RunError::io(&node, e))?;
    }
    let mut command = crate::slurm::step();
    command
        .arg("--no-kill")
        .arg("--kill-on-bad-exit=0")
        .arg(format!("--job-name={}", agents_step_name(allocation)))
        .arg(format!("--nodes={}", names.len()))
        .arg(format!("--ntasks={}", names.len()))
        .arg("--ntasks-per-node=1")
        .arg(format!("--nodelist={}", crate::hostlist::compress(names)))
        .arg(format!("--output={}", dir.root().join("nodes/%N/log").display()))
        .arg(exe)
        .arg("agent")
        .arg("--dir")
        .arg(dir.root())
        // Each agent listens on the address its node's name resolves to, and stores under
        // a directory of its own on its node.
        .args(["--bind", "%n", "--store", &store.replace("%j", &allocation.job)]);
    let granted: Option<Vec<u32>> = names.iter().map(|n| slots.get(n).copied()).collect();
    if let Some(&[first, ref rest @ ..]) = granted.as_deref() {
        if rest.iter().all(|&s| s == first) {
            command.arg(format!("--cores={first}"));
        }
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // srun's own messages (a step it could not start, a node failure) are the run's.
        .stderr(Stdio::inherit());
    command
        .spawn()
        .map_err(|e| RunError::Launch(format!("starting the agents' step with srun: {e}")))
}

/// Ends the agents' step: they stop with the cluster (`down`), so srun ends by itself; one
/// that does not within [`crate::slurm::COMMAND_WAIT`] is cancelled through Slurm.
fn end_agents(mut step: Child, allocation: &Allocation, name: &str) {
    let deadline = Instant::now() + crate::slurm::COMMAND_WAIT;
    while Instant::now() < deadline {
        if matches!(step.try_wait(), Ok(Some(_)) | Err(_)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if let Ok(Some(id)) = allocation.step_named(name) {
        let _ = allocation.cancel_step(&id);
    }
    let _ = step.kill();
    let _ = step.wait();
}
