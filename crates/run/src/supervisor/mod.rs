//! The supervisor: attempts of the job until it ends. It first claims the job's lease
//! (one supervisor per job; `lease`) and starts its guard (ranks die with it; `guard`).
//! Each attempt, with a generation of its own that its ranks carry, places and launches
//! every rank, then watches: the ranks (one that exits with a status ends the run with it —
//! unless a node is declared lost within the liveness period, the likely cause; one killed
//! by a signal is a failure; one that exits without an epoch the others wrote ends the run,
//! since that epoch can never commit), the cluster's nodes (one declared dead or found
//! damaged is a failure; while the coordinator hears from no agent at all it suspects its
//! own link and nobody is lost), the lease, and the decided epochs (recorded; `--kill-at`
//! fires after them). A failure stops every rank; recovery runs until nothing is lost (more
//! losses than the code tolerates end the run with the coordinator's one-line reason,
//! nothing committed deleted); then the next attempt relaunches every rank where it now
//! lives.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "fault-injection")]
use eckpt_cluster::launch;
use eckpt_cluster_api::dirs::{ClusterDir, ClusterFile, Deadlines, NetnsConfig};
#[cfg(feature = "fault-injection")]
use eckpt_cluster_api::msg::NodeInfo;
use eckpt_cluster_api::msg::{
    EpochOutcome, FlushRestore, JobClaim, LeaseHolder, RecoveryReport, StatusReport,
};
use eckpt_cluster_api::ErrorKind;
use eckpt_coding::Layout;

use crate::cluster::{Cluster, Coordinator, EpochWatch};
#[cfg(feature = "fault-injection")]
use crate::faults::{choose_victims, GroupView, KillPlan};
use crate::guard::Guard;
use crate::host::NodeHost;
use crate::launcher::{kill_launch, remove_scratch, Ending, Launch, LaunchSpec};
use crate::lease::Lease;
use crate::placement::{self, Host, Slots, Unplaced};
use crate::procs;
use crate::record::{AttemptRecord, EpochRecord, FailureRecord, RecoveryRecord, RunRecord, RECORD_FORMAT};
use crate::session::{Outcome, Session};
use crate::slurm::Allocation;
use crate::torch_env;
use crate::{RunError, RunOptions};

/// How often the supervisor looks at the ranks and the nodes.
const TICK: Duration = Duration::from_millis(50);

/// Recoveries in a row that may fail for another reason than too many losses (a node dying
/// while it runs) before the run gives up.
const RECOVERY_TRIES: u32 = 5;

/// What the run says while it goes, one line each.
#[derive(Debug, Clone)]
pub enum Event {
    /// Something worth a line (the cluster used, a resumed job).
    Note(String),
    /// Every rank started.
    Launched {
        /// 1 for the first launch.
        attempt: u32,
        /// Ranks per node.
        placement: BTreeMap<u32, String>,
    },
    /// Nodes lost.
    Lost(FailureRecord),
    /// A recovery and relaunch done.
    Recovered(RecoveryRecord),
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Note(text) => f.write_str(text),
            Event::Launched { attempt, placement } => {
                let mut per_node: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
                for (rank, node) in placement {
                    per_node.entry(node).or_default().push(*rank);
                }
                let nodes: Vec<String> = per_node
                    .iter()
                    .map(|(node, ranks)| format!("{node}:{}", list(ranks)))
                    .collect();
                write!(
                    f,
                    "{} {} ranks: {}",
                    if *attempt == 1 { "launched" } else { "relaunched" },
                    placement.len(),
                    nodes.join(" ")
                )
            }
            Event::Lost(l) => write!(f, "lost {} ({})", l.nodes.join(" "), l.cause),
            Event::Recovered(r) => {
                let went: Vec<String> = r
                    .placement
                    .iter()
                    .map(|(rank, n)| format!("{rank}→{n}"))
                    .collect();
                let moved: Vec<String> = r
                    .moved
                    .iter()
                    .map(|(rank, _, to)| format!("{rank}→{to}"))
                    .collect();
                write!(
                    f,
                    "recovered epoch {}{}: lost {}; ranks {}{}; detect {:.2} s, decode {:.2} s, encode {:.2} s, relaunch {:.2} s ({:.2} s from the loss to every rank running)",
                    r.epoch,
                    r.from_flush.map(|e| format!(" (from flushed epoch {e})")).unwrap_or_default(),
                    if r.lost.is_empty() { "nothing".to_string() } else { r.lost.join(" ") },
                    if went.is_empty() { "stay".to_string() } else { went.join(" ") },
                    if moved.is_empty() { String::new() } else { format!(", moved {}", moved.join(" ")) },
                    // From the loss: the silence until it was declared, then the run's
                    // reaction.
                    r.silence_seconds + r.detect_seconds,
                    r.decode_seconds,
                    r.encode_seconds,
                    r.relaunch_seconds,
                    r.loss_to_running_seconds
                )
            }
        }
    }
}

/// `0-3,7`: ranks as ranges.
fn list(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i {
            format!("{}-{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    out.join(",")
}

/// Where each node of a placement runs.
type Hosts = BTreeMap<String, NodeHost>;

/// Refuses a cluster that holds a job of another size.
fn check_world(status: &StatusReport, ranks: u32, dir: &ClusterDir) -> Result<(), RunError> {
    if let Some(world) = status.world.filter(|&w| w != ranks) {
        let root = dir.root().display();
        return Err(RunError::Launch(format!(
            "the cluster in {root} holds a job of {world} ranks, not {ranks}: run it with -n {world}, or use another --dir (or `eckpt down --dir {root} --purge`)"
        )));
    }
    Ok(())
}

/// How an attempt ended, for the loop.
enum AttemptEnd {
    /// Every rank exited 0.
    Done,
    /// The program's own failure: the run exits with this status.
    Exit(i32),
    /// A node or a rank was lost: recover and relaunch.
    Failure(String),
}

/// Runs the job of `options` to its end: the program's exit status, or why the run could
/// not go on. `events` hears what happens; the run's record is written at the end.
pub fn run(options: &RunOptions, events: &mut dyn FnMut(Event)) -> Result<(i32, RunRecord), RunError> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupted.clone())
            .map_err(|e| RunError::Launch(format!("installing a signal handler: {e}")))?;
    }
    let session = Session::open(&options.cluster, &mut |text| events(Event::Note(text)))?;
    let started = Instant::now();
    let begun = Cluster::new(&session.dir)
        .and_then(|coordinator| {
            let cluster = Handle {
                dir: session.dir.clone(),
                file: session.dir.load()?,
                coordinator: Arc::new(coordinator),
                launcher: Box::new(options.launcher),
                allocation: session.allocation.clone(),
                slots: session.slots.clone(),
            };
            Supervisor::new(
                options,
                cluster,
                session.from_flush.as_ref(),
                interrupted,
                started,
            )
        })
        .and_then(|supervisor| Ok((Guard::start(&options.exe, &supervisor.run_id)?, supervisor)));
    let (guard, mut supervisor) = match begun {
        Ok(begun) => begun,
        Err(e) => {
            // A cluster this run started must not outlive a run that could not begin.
            let outcome = Outcome::Unfinished { job: None };
            let _ = session.close(options.keep, &outcome, 0, &mut |text| events(Event::Note(text)));
            return Err(e);
        }
    };
    let mut result = supervisor.run(events);
    // A run that lost the job leaves its last epoch to whoever runs it now.
    let lost_the_job = matches!(result, Err(RunError::Superseded { .. } | RunError::LeaseLost(_)));
    let flushed = !lost_the_job && supervisor.flush_at_end(events);
    let generation = supervisor.lease.as_ref().map_or(0, Lease::generation);
    // Every rank is stopped by now: the guard has nothing left to do, and the lease goes
    // (a job whose every rank exited 0 is recorded as finished).
    guard.release();
    if let Some(lease) = supervisor.lease.take() {
        if let Err(e) = lease.release(&*supervisor.cluster, matches!(result, Ok(0))) {
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    let mut record = supervisor.record;
    record.seconds = started.elapsed().as_secs_f64();
    match &result {
        Ok(code) => record.exit_code = Some(*code),
        Err(e) => record.error = Some(e.to_string()),
    }
    let name = format!("run-{}-{}.json", record.started_unix as u64, std::process::id());
    let mut saves = vec![session.dir.root().join("runs").join(name)];
    saves.extend(options.record.clone());
    for path in saves {
        if let Err(e) = record.save(&path) {
            events(Event::Note(format!(
                "could not write the run record {}: {e}",
                path.display()
            )));
        }
    }
    // A finished job's node stores go once its last epoch is where it must outlive them.
    let outcome = if matches!(result, Ok(0)) && flushed {
        Outcome::Finished
    } else {
        Outcome::Unfinished {
            job: Some(supervisor.job.clone()).filter(|job| !job.is_empty()),
        }
    };
    session.close(options.keep, &outcome, generation, &mut |text| {
        events(Event::Note(text))
    })?;
    result.map(|code| (code, record))
}

/// What a supervisor works with: its cluster (the directory and `cluster.json`, read once,
/// and the coordinator) and how ranks start.
struct Handle {
    dir: ClusterDir,
    file: ClusterFile,
    coordinator: Arc<dyn Coordinator>,
    launcher: Box<dyn Launch>,
    /// The Slurm allocation the job runs in (`--launcher srun`): its view of the nodes.
    allocation: Option<Allocation>,
    /// The most ranks each node may run (the session's).
    slots: Slots,
}

struct Supervisor<'a> {
    options: &'a RunOptions,
    cluster: Arc<dyn Coordinator>,
    /// The cluster directory.
    dir: ClusterDir,
    /// The cluster's namespaced network, when its nodes run in namespaces.
    netns: Option<NetnsConfig>,
    /// Starts each attempt's ranks.
    launcher: Box<dyn Launch>,
    record: RunRecord,
    started: Instant,
    #[cfg(feature = "fault-injection")]
    kills: KillPlan,
    #[cfg(feature = "fault-injection")]
    kills_done: u64,
    /// The epoch number before the first one this run saw decided: `--kill-at EPOCH` counts
    /// the run's own epochs from it, so that `8:1` means the eighth epoch of this run on a
    /// cluster whose numbering other jobs (or a `--fresh` start) carried to 50.
    #[cfg(feature = "fault-injection")]
    epochs_before: Option<u64>,
    restarts: u32,
    interrupted: Arc<AtomicBool>,
    watch: EpochWatch,
    /// The attempt's launch id while ranks run.
    launch: Option<String>,
    /// The first failure not yet recovered: when, and which nodes.
    failing_since: Option<Instant>,
    /// When the coordinator last heard the first node lost in that failure (its status's
    /// `silent_seconds` on this process's clock): the loss happened no earlier, and a
    /// recovery is measured from then.
    lost_heard: Option<Instant>,
    /// Nodes seen lost in the current failure (not to report twice).
    reported_lost: BTreeSet<String>,
    /// Nodes this run killed that the coordinator still reports alive: until it declares
    /// them dead, a restart would place ranks on them.
    undeclared: BTreeSet<String>,
    /// Nodes this run killed or Slurm took out of the job: they do not come back, so a group
    /// that lost more than m members, all of them these, is not awaited.
    gone: BTreeSet<String>,
    /// A recovery done, waiting for the relaunch that completes it.
    recovered: Option<RecoveryRecord>,
    /// Names this run's launches (`ECKPT_LAUNCH` is `<run_id>-<attempt>`).
    run_id: String,
    /// The job's lease, once claimed.
    lease: Option<Lease>,
    /// The generation the claim got (0 before): this run's attempts have the generations
    /// from it to the lease's current one, and only their epochs are this run's.
    first_generation: u64,
    /// The job's id, once claimed.
    job: String,
    /// The cluster's time bounds.
    deadlines: Deadlines,
    /// Whether the coordinator's isolation was said (once per episode).
    isolation_said: bool,
    /// The coordinator's term when the attempt started: a rank that fails after it
    /// changed (the coordinator restarted, or failed over to another host) lost its epoch
    /// with the coordinator, and the attempt restarts from the last committed epoch.
    attempt_term: u64,
    /// The Slurm allocation the job runs in (`--launcher srun`): its view of the nodes.
    allocation: Option<Allocation>,
    /// The most ranks each node may run: no attempt is launched with more.
    slots: Slots,
}

impl<'a> Supervisor<'a> {
    /// A supervisor of `options`' job on `cluster`; `from_flush`: the cluster was just
    /// started from its flush directory.
    fn new(
        options: &'a RunOptions,
        cluster: Handle,
        from_flush: Option<&FlushRestore>,
        interrupted: Arc<AtomicBool>,
        started: Instant,
    ) -> Result<Supervisor<'a>, RunError> {
        let Handle {
            dir,
            file,
            coordinator,
            launcher,
            allocation,
            slots,
        } = cluster;
        let status = coordinator.status()?;
        // When the run started, for its record: a stamp.
        #[allow(clippy::disallowed_methods)]
        let now_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let record = RunRecord {
            format: RECORD_FORMAT,
            command: options.command.clone(),
            ranks: options.ranks,
            launcher: options.launcher.to_string(),
            placement: format!("{:?}", options.placement).to_lowercase(),
            coding: Some(status.coding),
            nodes: status
                .nodes
                .iter()
                .filter(|n| !n.spare && !n.removed)
                .map(|n| n.name.clone())
                .collect(),
            spares: status
                .nodes
                .iter()
                .filter(|n| n.spare && !n.removed)
                .map(|n| n.name.clone())
                .collect(),
            link_rate: file.netns.as_ref().and_then(|n| n.rate.clone()),
            started_unix: now_unix,
            ..RunRecord::default()
        };
        let watch: EpochWatch = coordinator.watch_epochs(status.open_epoch)?;
        let mut supervisor = Supervisor {
            options,
            cluster: coordinator,
            dir,
            netns: file.netns,
            launcher,
            record,
            started,
            #[cfg(feature = "fault-injection")]
            kills: options.kill_at.clone(),
            #[cfg(feature = "fault-injection")]
            kills_done: 0,
            #[cfg(feature = "fault-injection")]
            epochs_before: None,
            restarts: 0,
            interrupted,
            watch,
            launch: None,
            failing_since: None,
            lost_heard: None,
            reported_lost: BTreeSet::new(),
            undeclared: BTreeSet::new(),
            gone: BTreeSet::new(),
            recovered: None,
            run_id: format!("{:x}-{}", now_unix as u64, std::process::id()),
            lease: None,
            first_generation: 0,
            job: String::new(),
            deadlines: file.deadlines,
            isolation_said: false,
            attempt_term: 0,
            allocation,
            slots,
        };
        if let Some(restore) = from_flush {
            supervisor.record_flush_restore(restore);
        }
        Ok(supervisor)
    }

    /// Records a restart from the flush directory (no node of this run was lost).
    fn record_flush_restore(&mut self, restore: &FlushRestore) {
        let now = self.now();
        let mut r = RecoveryRecord {
            start_s: now,
            end_s: now,
            ..RecoveryRecord::default()
        };
        r.absorb(&RecoveryReport {
            epoch: restore.epoch,
            from_flush: Some(restore.clone()),
            ..RecoveryReport::default()
        });
        self.record.recoveries.push(r);
    }

    /// At the run's end, on a cluster that flushes, the last committed epoch goes to the
    /// flush directory unless it is there already: node-local storage may not outlive the
    /// job's allocation, shared storage does. A failure to flush is said, not fatal: the
    /// epoch stays committed on the nodes. Whether the last committed epoch is where it
    /// must be (flushed, or no flush directory): the node stores may then go.
    fn flush_at_end(&self, events: &mut dyn FnMut(Event)) -> bool {
        let Ok(status) = self.cluster.status() else {
            return false;
        };
        let Some(flush) = &status.flush else {
            return true;
        };
        if status.committed_epoch == 0 || flush.flushed.contains(&status.committed_epoch) {
            return true;
        }
        match self.cluster.flush_now() {
            Ok(report) => {
                events(Event::Note(format!(
                    "flushed epoch {} to {} at the end of the run ({:.1} s)",
                    report.epoch,
                    report.dir.display(),
                    report.seconds
                )));
                true
            }
            Err(e) => {
                events(Event::Note(format!(
                    "could not flush epoch {} at the end of the run: {e}; the node stores stay",
                    status.committed_epoch
                )));
                false
            }
        }
    }

    /// Claims the job's lease: refused while another supervisor runs the job.
    fn claim(&mut self, events: &mut dyn FnMut(Event)) -> Result<(), RunError> {
        let holder = LeaseHolder {
            host: eckpt_cluster_api::net::host_name(),
            pid: std::process::id(),
            since_unix: self.record.started_unix,
            command: self.options.command.join(" "),
            run: Some(self.run_id.clone()),
        };
        let claim = JobClaim {
            job: self.options.job.clone(),
            holder,
            start: self.options.start,
            world: Some(self.options.ranks),
        };
        let (lease, grant) = Lease::claim(&self.cluster, claim, &self.deadlines, &mut |text| {
            events(Event::Note(text))
        })?;
        if let Some(epoch) = grant.discarded {
            events(Event::Note(format!(
                "--fresh: discarded job {}'s checkpoint of epoch {epoch}; the job starts over",
                grant.job
            )));
        }
        if let Some(predecessor) = &grant.superseded {
            self.end_superseded(predecessor, events);
        }
        self.record.job = Some(grant.job.clone());
        self.job = grant.job;
        self.first_generation = grant.generation;
        self.lease = Some(lease);
        Ok(())
    }

    /// Ends the processes of the run whose lease this claim replaced, before anything is
    /// launched: a supervisor stopped (SIGSTOP) or killed with its guard leaves ranks that
    /// would go on writing the job's files beside this run's until their next request to
    /// the coordinator. Those on this host are found by the run's launch ids; those
    /// elsewhere are refused at their next request and end themselves.
    fn end_superseded(&self, predecessor: &LeaseHolder, events: &mut dyn FnMut(Event)) {
        let Some(run) = &predecessor.run else { return };
        if predecessor.host != eckpt_cluster_api::net::host_name() {
            events(Event::Note(format!(
                "the job's previous supervisor ({predecessor}) lost its lease: its ranks on other hosts are refused at their next request"
            )));
            return;
        }
        let killed = procs::end_run(run, Instant::now() + self.deadlines.liveness());
        if killed > 0 {
            events(Event::Note(format!(
                "ended {killed} process(es) left by the job's previous supervisor ({predecessor}), whose lease expired"
            )));
        }
    }

    fn lease(&self) -> Result<&Lease, RunError> {
        let lease = self
            .lease
            .as_ref()
            .ok_or_else(|| RunError::Launch("the job's lease is not held".into()))?;
        match lease.lost() {
            Some(why) => {
                if let Ok(status) = self.cluster.status() {
                    self.check_superseded(&status)?;
                }
                Err(RunError::LeaseLost(why))
            }
            None => Ok(lease),
        }
    }

    /// Refuses to go on when `status` says a newer generation runs the job: another run
    /// took it over while this one could not renew its lease (stopped, or cut off). Checked
    /// before any decision on an attempt's end, since the successor's takeover is what ends
    /// this run's ranks.
    fn check_superseded(&self, status: &StatusReport) -> Result<(), RunError> {
        let ours = self.lease.as_ref().map_or(0, Lease::generation);
        match &status.job {
            Some(job) if ours > 0 && job.generation > ours => Err(RunError::Superseded {
                generation: job.generation,
                ours,
                job: job.id.clone(),
                holder: job
                    .holder
                    .as_ref()
                    .map_or("its lease since released".to_string(), ToString::to_string),
            }),
            _ => Ok(()),
        }
    }

    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn check_interrupt(&self) -> Result<(), RunError> {
        if self.interrupted.load(Ordering::SeqCst) {
            return Err(RunError::Interrupted);
        }
        Ok(())
    }

    /// Waits (at most the cluster's start wait) for agents that never registered: a
    /// cluster whose agents other launchers start on their hosts is up before they are.
    fn await_agents(&self, events: &mut dyn FnMut(Event)) -> Result<(), RunError> {
        let wait = self.deadlines.start_wait();
        let deadline = Instant::now() + wait;
        let mut said = false;
        loop {
            self.check_interrupt()?;
            let status = self.cluster.status()?;
            let missing: Vec<String> = status
                .nodes
                .iter()
                .filter(|n| n.addr.is_empty() && !n.removed)
                .map(|n| n.name.clone())
                .collect();
            if missing.is_empty() || Instant::now() > deadline {
                return Ok(());
            }
            if !said {
                events(Event::Note(format!(
                    "waiting for the agents of {} to register (at most {:.0} s)",
                    missing.join(" "),
                    wait.as_secs_f64()
                )));
                said = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn run(&mut self, events: &mut dyn FnMut(Event)) -> Result<i32, RunError> {
        self.await_agents(events)?;
        self.claim(events)?;
        let mut status = self.cluster.status()?;
        let flushed = status.flush.as_ref().is_some_and(|f| !f.flushed.is_empty());
        if status.committed_epoch == 0 && flushed {
            // Agents that registered after `up` (started by another launcher): the job
            // resumes from its flush now, as `up` does when it starts them itself.
            if let Some(restore) = self.cluster.recover(self.options.relocation)?.from_flush {
                events(Event::Note(restore.to_string()));
                self.record_flush_restore(&restore);
            }
            status = self.cluster.status()?;
        }
        check_world(&status, self.options.ranks, &self.dir)?;
        if status.committed_epoch > 0 {
            events(Event::Note(format!(
                "resuming the checkpointed job from epoch {}",
                status.committed_epoch
            )));
        }
        let mut attempt_no = 0;
        loop {
            self.heal(events)?;
            attempt_no += 1;
            if attempt_no > 1 {
                self.lease()?.next_attempt(&*self.cluster)?;
            }
            match self.attempt(attempt_no, events)? {
                AttemptEnd::Done => return Ok(0),
                AttemptEnd::Exit(code) => return Ok(code),
                AttemptEnd::Failure(why) => {
                    self.restarts += 1;
                    if self.restarts > self.options.max_restarts {
                        return Err(RunError::Restarts(format!(
                            "giving up after {} restarts ({why}); the last committed epoch is kept: run the same command again to resume",
                            self.options.max_restarts
                        )));
                    }
                }
            }
        }
    }

    /// Nodes lost now: members of a group or hosts of ranks whose agent is down, or that
    /// came back without committed data they should hold (damaged).
    fn lost(status: &StatusReport) -> BTreeSet<String> {
        status
            .nodes
            .iter()
            .filter(|n| {
                (!n.alive || n.damaged.is_some())
                    && !n.removed
                    && !n.awaited
                    && (n.group.is_some() || !n.ranks.is_empty())
            })
            .map(|n| n.name.clone())
            .collect()
    }

    /// Why `status` counts `lost` as lost: declared dead, or only found damaged — up, but
    /// holding data that is missing or fails its checksums.
    fn loss_cause(status: &StatusReport, lost: &BTreeSet<String>) -> &'static str {
        let damaged_only = status
            .nodes
            .iter()
            .filter(|n| lost.contains(&n.name))
            .all(|n| n.alive && n.damaged.is_some());
        match damaged_only {
            true => "node found damaged",
            false => "node declared dead",
        }
    }

    /// When the coordinator last heard the first of `nodes` it has not heard for longest,
    /// by `status` (just received), on this process's clock.
    fn last_heard(status: &StatusReport, nodes: &BTreeSet<String>) -> Option<Instant> {
        let now = Instant::now();
        status
            .nodes
            .iter()
            .filter(|n| nodes.contains(&n.name))
            .filter_map(|n| now.checked_sub(Duration::try_from_secs_f64(n.silent_seconds?).ok()?))
            .min()
    }

    /// Notes newly lost nodes as a failure (once each); `status`: the coordinator's report
    /// that declared them lost, which says when it last heard them (`None`: this run lost
    /// them itself, now).
    fn note_lost(
        &mut self,
        lost: &BTreeSet<String>,
        status: Option<&StatusReport>,
        cause: &str,
        events: &mut dyn FnMut(Event),
    ) {
        let new: BTreeSet<String> = lost.difference(&self.reported_lost).cloned().collect();
        if new.is_empty() {
            return;
        }
        if let Some(heard) = status.and_then(|s| Self::last_heard(s, &new)) {
            self.lost_heard = Some(self.lost_heard.map_or(heard, |h| h.min(heard)));
        }
        let new: Vec<String> = new.into_iter().collect();
        self.failing_since.get_or_insert_with(Instant::now);
        self.reported_lost.extend(new.iter().cloned());
        let failure = FailureRecord {
            t_s: self.now(),
            nodes: new,
            cause: cause.to_string(),
        };
        self.record.failures.push(failure.clone());
        events(Event::Lost(failure));
    }

    /// Recovers until nothing is lost.
    fn heal(&mut self, events: &mut dyn FnMut(Event)) -> Result<(), RunError> {
        let mut tries = 0;
        // Since when nothing is lost but a node this run killed is not declared dead yet.
        let mut undeclared_since: Option<Instant> = None;
        // Since when recoveries have answered that a group lost more than it tolerates.
        let mut unrecoverable_since: Option<Instant> = None;
        // Slurm is asked once per heal, not at every tick of the loop below (which polls the
        // coordinator every 50 ms while a node is not declared dead): the nodes it took away
        // join `undeclared`, which the loop waits out.
        let status = self.cluster.status()?;
        self.leave_what_slurm_took(&status, events)?;
        loop {
            self.check_interrupt()?;
            let status = self.cluster.status()?;
            self.undeclared
                .retain(|n| status.nodes.iter().any(|s| &s.name == n && s.alive && !s.removed));
            let lost = Self::lost(&status);
            if lost.is_empty() {
                // A coordinator just restarted or replaced awaits its agents for a bounded
                // while (`NodeStatus::awaited`): ranks are placed once they are back, or
                // once they are lost.
                if status.nodes.iter().any(|n| n.awaited) {
                    std::thread::sleep(TICK);
                    continue;
                }
                if self.undeclared.is_empty() {
                    return self.check_min_nodes(&status);
                }
                // A node this run killed (or Slurm took): the coordinator declares it dead
                // within its liveness period, or its partition grace while it suspects itself.
                let since = *undeclared_since.get_or_insert_with(Instant::now);
                if since.elapsed() > self.deadlines.declaration() {
                    return Err(RunError::Launch(format!(
                        "the coordinator did not declare killed node(s) {} dead within {:.0} s",
                        self.undeclared.iter().cloned().collect::<Vec<_>>().join(" "),
                        self.deadlines.declaration().as_secs_f64()
                    )));
                }
                std::thread::sleep(TICK);
                continue;
            }
            undeclared_since = None;
            self.note_lost(&lost, Some(&status), Self::loss_cause(&status, &lost), events);
            let start = Instant::now();
            let recovered = self.recovered.get_or_insert_with(|| RecoveryRecord {
                start_s: 0.0,
                ..RecoveryRecord::default()
            });
            if recovered.start_s == 0.0 {
                recovered.start_s = self.started.elapsed().as_secs_f64();
                recovered.detect_seconds = self
                    .failing_since
                    .map_or(0.0, |t| start.saturating_duration_since(t).as_secs_f64());
            }
            #[cfg(feature = "fault-injection")]
            let result = match self.kills.during_recovery() {
                Some(count) => self.recover_with_kill(count, events),
                None => self.cluster.recover(self.options.relocation),
            };
            #[cfg(not(feature = "fault-injection"))]
            let result = self.cluster.recover(self.options.relocation);
            match result {
                Ok(report) => self.absorb(&report, events),
                Err(RunError::Cluster(e)) if e.kind() == ErrorKind::Unrecoverable => {
                    // More than m members of a group are down. A member down is often one
                    // rebooting or cut off for a while, its store intact (a link that
                    // blinks past the liveness period is enough): the job ends only once
                    // they have stayed away for the partition grace, and is recovered as
                    // soon as enough of them are back. Nodes this run killed, or Slurm
                    // took, are not awaited.
                    if lost.is_subset(&self.gone) {
                        return Err(RunError::Unrecoverable(e.to_string()));
                    }
                    let grace = self.deadlines.partition_grace();
                    let since = *unrecoverable_since.get_or_insert_with(|| {
                        events(Event::Note(format!(
                            "{e}: waiting up to {:.0} s for its members to come back",
                            grace.as_secs_f64()
                        )));
                        Instant::now()
                    });
                    if since.elapsed() >= grace {
                        return Err(RunError::Unrecoverable(e.to_string()));
                    }
                    std::thread::sleep(self.deadlines.liveness().min(grace - since.elapsed()));
                }
                Err(e) => {
                    tries += 1;
                    if tries >= RECOVERY_TRIES {
                        return Err(e);
                    }
                    events(Event::Note(format!("recovery failed, trying again: {e}")));
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }

    /// Nodes whose agent still answers but that Slurm took out of the job (or reports down,
    /// drained, failed or not responding) can run no step any more: they leave the cluster,
    /// and recovery rebuilds what they held elsewhere.
    fn leave_what_slurm_took(
        &mut self,
        status: &StatusReport,
        events: &mut dyn FnMut(Event),
    ) -> Result<(), RunError> {
        let Some(allocation) = &self.allocation else {
            return Ok(());
        };
        let held: BTreeSet<String> = allocation.nodes()?.into_iter().collect();
        let candidates: Vec<String> = status
            .nodes
            .iter()
            .filter(|n| n.alive && !n.removed && !self.undeclared.contains(&n.name))
            .map(|n| n.name.clone())
            .collect();
        let unavailable = allocation.unavailable(&candidates)?;
        let gone: BTreeSet<String> = candidates
            .into_iter()
            .filter(|n| !held.contains(n) || unavailable.contains(n))
            .collect();
        for node in &gone {
            self.cluster.leave(node)?;
        }
        if !gone.is_empty() {
            self.undeclared.extend(gone.iter().cloned());
            self.gone.extend(gone.iter().cloned());
            self.note_lost(&gone, None, "Slurm took the node out of the job", events);
        }
        Ok(())
    }

    /// Refuses to relaunch on fewer live nodes (members and spares) than `--min-nodes`.
    fn check_min_nodes(&self, status: &StatusReport) -> Result<(), RunError> {
        let left = status.nodes.iter().filter(|n| n.alive && !n.removed).count();
        if left >= self.options.min_nodes {
            return Ok(());
        }
        Err(RunError::TooFewNodes(format!(
            "{left} node(s) left, fewer than --min-nodes {}: the job stops here; the last committed epoch is kept (run it again on more nodes to resume)",
            self.options.min_nodes
        )))
    }

    fn absorb(&mut self, report: &RecoveryReport, events: &mut dyn FnMut(Event)) {
        if let Some(restore) = &report.from_flush {
            events(Event::Note(restore.to_string()));
        }
        if let Some(r) = self.recovered.as_mut() {
            r.absorb(report);
            if report.from_flush.is_some() && r.lost.is_empty() {
                r.lost = self.reported_lost.iter().cloned().collect();
            }
        }
    }

    /// A recovery with `count` nodes killed in its middle (between decode and re-encode),
    /// through the coordinator's fault-injection pause point.
    #[cfg(feature = "fault-injection")]
    fn recover_with_kill(
        &mut self,
        count: usize,
        events: &mut dyn FnMut(Event),
    ) -> Result<RecoveryReport, RunError> {
        let debug = self.dir.debug();
        std::fs::create_dir_all(&debug).map_err(|e| RunError::io(&debug, e))?;
        let pause = debug.join("pause");
        std::fs::write(&pause, "mid-recovery").map_err(|e| RunError::io(&pause, e))?;
        let (cluster, relocation) = (self.cluster.clone(), self.options.relocation);
        let recovery = std::thread::spawn(move || cluster.recover(relocation));
        let reached = debug.join("reached-coordinator");
        let deadline = Instant::now() + Duration::from_secs(300);
        while !reached.exists() && !recovery.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let killed = if reached.exists() {
            self.kill_nodes(count, "killed during recovery", events)
        } else {
            Ok(())
        };
        let _ = std::fs::remove_file(&pause);
        let result = recovery
            .join()
            .unwrap_or_else(|_| Err(RunError::Launch("the recovery thread panicked".into())));
        killed?;
        result
    }

    /// Kills `count` rank-hosting nodes: every process of the job on them, their agent,
    /// and their node-local data.
    #[cfg(feature = "fault-injection")]
    fn kill_nodes(
        &mut self,
        count: usize,
        cause: &str,
        events: &mut dyn FnMut(Event),
    ) -> Result<(), RunError> {
        let status = self.cluster.status()?;
        let infos = self.cluster.nodes()?;
        let hosting: BTreeSet<String> = status
            .nodes
            .iter()
            .filter(|n| n.alive && !n.ranks.is_empty())
            .map(|n| n.name.clone())
            .collect();
        let groups: Vec<GroupView> = status
            .groups
            .iter()
            .map(|g| GroupView {
                members: g.members.clone(),
            })
            .collect();
        let lost = Self::lost(&status);
        self.kills_done += 1;
        let victims = choose_victims(
            &groups,
            &hosting,
            &lost,
            count,
            self.options.seed ^ self.kills_done,
        );
        for victim in &victims {
            let ranks: Vec<u32> = status
                .nodes
                .iter()
                .find(|n| &n.name == victim)
                .map(|n| n.ranks.clone())
                .unwrap_or_default();
            self.kill_processes(victim, &ranks, infos.get(victim))?;
            launch::kill_node(self.dir.root(), victim, true)?;
        }
        let set: BTreeSet<String> = victims.into_iter().collect();
        self.undeclared.extend(set.iter().cloned());
        self.gone.extend(set.iter().cloned());
        self.note_lost(&set, None, cause, events);
        Ok(())
    }

    /// SIGKILLs the job's processes on `node`: its ranks of the running attempt, and when
    /// the node has a network namespace of its own, everything in it.
    #[cfg(feature = "fault-injection")]
    fn kill_processes(&self, node: &str, ranks: &[u32], info: Option<&NodeInfo>) -> Result<(), RunError> {
        if let Some(launch) = &self.launch {
            for (pid, rank) in procs::of_launch(launch) {
                if rank.is_some_and(|r| ranks.contains(&r)) {
                    procs::kill(pid);
                }
            }
        }
        match info.map(NodeHost::of).transpose()? {
            Some(NodeHost::Namespace { id, .. }) => {
                for pid in procs::in_netns(&id) {
                    procs::kill(pid);
                }
                Ok(())
            }
            Some(NodeHost::Remote { hostname }) => Err(RunError::Launch(format!(
                "--kill-at: node {node} runs on host {hostname}, which this command cannot kill"
            ))),
            _ => Ok(()),
        }
    }

    /// Places and launches every rank, then watches the attempt to its end.
    fn attempt(&mut self, attempt_no: u32, events: &mut dyn FnMut(Event)) -> Result<AttemptEnd, RunError> {
        let generation = self.lease()?.generation();
        let (placement, hosts, master_addr) = self.place()?;
        self.attempt_term = self.cluster.status()?.coordinator_term;
        let launch_id = format!("{}-{attempt_no}", self.run_id);
        let mut env = vec![
            ("ECKPT_CLUSTER".to_string(), self.dir.root().display().to_string()),
            ("ECKPT_WORLD".to_string(), self.options.ranks.to_string()),
            ("ECKPT_JOB".to_string(), self.job.clone()),
            ("ECKPT_GENERATION".to_string(), generation.to_string()),
        ];
        let master_port = torch_env::master_port(&self.run_id, attempt_no);
        env.extend(torch_env::attempt_vars(
            self.options.ranks,
            &master_addr,
            master_port,
        ));
        for (key, value) in [
            ("ECKPT_INTERVAL", &self.options.interval),
            ("ECKPT_MTBF", &self.options.mtbf),
        ] {
            if let Some(value) = value {
                env.push((key.to_string(), value.clone()));
            }
        }
        let spec = LaunchSpec {
            command: &self.options.command,
            launcher_args: &self.options.launcher_args,
            world: self.options.ranks,
            placement: &placement,
            hosts: &hosts,
            env: &env,
            launch_id: &launch_id,
            sinks: self.options.sinks,
            cluster_dir: self.dir.root().to_path_buf(),
            exe: self.options.exe.clone(),
            subnet: self.netns.as_ref().map(|_| {
                let net = eckpt_cluster::netns::Network::for_dir(self.dir.root());
                format!("10.{}.{}.0/24", net.subnet.0, net.subnet.1)
            }),
            scratch: self.dir.launch_scratch(&launch_id),
            output_drain: self.deadlines.liveness(),
        };
        let mut attempt = self.launcher.start(&spec)?;
        self.launch = Some(launch_id.clone());
        let start_s = self.now();
        if let Some(mut r) = self.recovered.take() {
            r.end_s = start_s;
            r.relaunch_seconds = (r.end_s - r.start_s - r.decode_seconds - r.encode_seconds).max(0.0);
            let now = Instant::now();
            let since = |t: Instant| now.saturating_duration_since(t).as_secs_f64();
            r.downtime_seconds = self.failing_since.map_or(0.0, since);
            // The loss happened when the coordinator last heard the node, not when the run
            // saw it declared: the silence until then is the detection's.
            let lost_at = match (self.lost_heard, self.failing_since) {
                (Some(heard), Some(seen)) => Some(heard.min(seen)),
                (heard, seen) => heard.or(seen),
            };
            r.silence_seconds = match (lost_at, self.failing_since) {
                (Some(lost_at), Some(seen)) => seen.saturating_duration_since(lost_at).as_secs_f64(),
                _ => 0.0,
            };
            r.loss_to_running_seconds = lost_at.map_or(0.0, since);
            self.record.recoveries.push(r.clone());
            events(Event::Recovered(r));
        }
        self.failing_since = None;
        self.lost_heard = None;
        self.reported_lost.clear();
        events(Event::Launched {
            attempt: attempt_no,
            placement: placement.clone(),
        });
        let end = self.watch_attempt(&mut *attempt, events);
        attempt.stop();
        kill_launch(&launch_id);
        remove_scratch(&self.dir.launch_scratch(&launch_id));
        self.launch = None;
        let end = end?;
        // Epochs decided at the very end (the last one, waited for by the ranks).
        self.take_epochs(events)?;
        self.record.attempts.push(AttemptRecord {
            attempt: attempt_no,
            start_s,
            generation,
            end_s: self.now(),
            placement,
            end: match &end {
                AttemptEnd::Done => "exited 0".into(),
                AttemptEnd::Exit(code) => format!("exited {code}"),
                AttemptEnd::Failure(why) => why.clone(),
            },
        });
        Ok(end)
    }

    /// Where every rank runs: ranks the cluster placed stay, new ones are placed by the
    /// policy on the nodes that can host ranks, none beyond its slots; where each node is;
    /// and where rank 0's node is reached (torch.distributed's `MASTER_ADDR`). Ranks that do not fit stop the run before anything is launched, saying why.
    fn place(&self) -> Result<(BTreeMap<u32, String>, Hosts, String), RunError> {
        let status = self.cluster.status()?;
        let infos = self.cluster.nodes()?;
        let hosts: Vec<Host> = status
            .nodes
            .iter()
            .filter(|n| n.alive && n.hosts_ranks && !n.removed)
            .filter_map(|n| {
                Some(Host {
                    name: n.name.clone(),
                    cores: infos.get(&n.name)?.cores,
                    slots: self.slots.get(&n.name).copied(),
                })
            })
            .collect();
        let placed: BTreeMap<u32, String> = status
            .nodes
            .iter()
            .flat_map(|n| n.ranks.iter().map(move |r| (*r, n.name.clone())))
            .filter(|(r, _)| *r < self.options.ranks)
            .collect();
        let placement = placement::place(self.options.ranks, &hosts, &placed, self.options.placement)
            .map_err(|why| self.unplaced(why, &status, &hosts))?;
        let mut where_ = BTreeMap::new();
        for node in placement.values().collect::<BTreeSet<_>>() {
            let info = infos
                .get(node)
                .ok_or_else(|| RunError::Launch(format!("node {node} is down")))?;
            where_.insert(node.clone(), NodeHost::of(info)?);
        }
        let master_addr = placement
            .get(&0)
            .and_then(|node| infos.get(node))
            .map(torch_env::master_addr)
            .ok_or_else(|| RunError::Launch("rank 0 is placed on no running node".into()))?;
        Ok((placement, where_, master_addr))
    }

    /// Why the ranks cannot be placed, in one line with what would fit: before this run lost
    /// anything, the cluster's layout or the rank count; after a loss (or resuming), the
    /// allocation no longer fits the job, which stops with its last committed epoch kept.
    fn unplaced(&self, why: Unplaced, status: &StatusReport, hosts: &[Host]) -> RunError {
        let world = self.options.ranks;
        let grant = if self.allocation.is_some() {
            "the allocation no longer fits"
        } else {
            "the hosts' slots no longer fit"
        };
        let stop = format!(
            "the job stops here with the last committed epoch kept: run the same command again where {world} ranks fit to resume it{}",
            if status.flush.is_some() {
                " (a new allocation resumes from the flush directory)"
            } else {
                ""
            }
        );
        let slots: Vec<u32> = hosts.iter().filter_map(|h| h.slots).collect();
        match why {
            Unplaced::NoHost => RunError::Launch("no alive node can host ranks".into()),
            Unplaced::Over { node, ranks, slots } => RunError::TooFewNodes(format!(
                "{grant} {world} ranks as the cluster placed them: {node} holds {ranks}, over its {slots} slots; {stop}"
            )),
            Unplaced::Full { slots: total, .. }
                if self.record.failures.is_empty() && status.committed_epoch == 0 =>
            {
                let members: Option<u64> = status
                    .nodes
                    .iter()
                    .filter(|n| n.alive && n.group.is_some() && !n.removed)
                    .map(|n| self.slots.get(&n.name).map(|&s| u64::from(s)))
                    .sum();
                let rotated = match (status.coding.layout, members) {
                    (Layout::Dedicated, Some(all)) if all > total => {
                        format!(", or a new cluster (another --dir) with --layout rotated ({all} slots)")
                    }
                    _ => String::new(),
                };
                RunError::Launch(format!(
                    "{world} ranks do not fit: the {} layout of the cluster in {} puts ranks on {} node(s), {}; use at most {total} ranks{rotated}",
                    status.coding.layout,
                    self.dir.root().display(),
                    hosts.len(),
                    placement::per_node(&slots, total)
                ))
            }
            Unplaced::Full { slots: total, .. } => RunError::TooFewNodes(format!(
                "{grant} {world} ranks: the {} node(s) left that host ranks have {}, {} short; {stop}",
                hosts.len(),
                placement::per_node(&slots, total),
                u64::from(world).saturating_sub(total)
            )),
        }
    }

    /// Records the epochs decided since last time and fires the kills they make due.
    fn take_epochs(&mut self, events: &mut dyn FnMut(Event)) -> Result<(), RunError> {
        #[cfg(not(feature = "fault-injection"))]
        let _ = events;
        while let Ok(outcome) = self.watch.outcomes.try_recv() {
            if !self.ours(&outcome) {
                continue;
            }
            self.record.epochs.push(EpochRecord::new(&outcome, self.now()));
            #[cfg(feature = "fault-injection")]
            let before = *self.epochs_before.get_or_insert(outcome.epoch.saturating_sub(1));
            #[cfg(feature = "fault-injection")]
            if outcome.committed {
                let count = self.kills.due(outcome.epoch.saturating_sub(before));
                if count > 0 {
                    // On a cluster that flushes, the kill comes after the flush this epoch
                    // started (or the one running) ended: what a test may fall back to is
                    // then fixed, whatever the machine's speed.
                    self.cluster.wait_flush()?;
                    let cause = format!("--kill-at after epoch {}", outcome.epoch);
                    self.kill_nodes(count, &cause, events)?;
                }
            }
        }
        Ok(())
    }

    /// Whether `outcome` is of an epoch of this run's ranks: decided under one of its
    /// generations (not a predecessor's, before the claim, nor a successor's); one the
    /// coordinator no longer knows the generation of is counted.
    fn ours(&self, outcome: &EpochOutcome) -> bool {
        let current = self.lease.as_ref().map_or(0, Lease::generation);
        outcome
            .generation
            .is_none_or(|g| (self.first_generation..=current).contains(&g) && current > 0)
    }

    fn watch_attempt(
        &mut self,
        attempt: &mut dyn crate::launcher::Attempt,
        events: &mut dyn FnMut(Event),
    ) -> Result<AttemptEnd, RunError> {
        let mut tick: u64 = 0;
        loop {
            self.check_interrupt()?;
            self.lease()?;
            self.take_epochs(events)?;
            let ending = attempt.poll();
            if ending.is_some() {
                self.check_superseded(&self.cluster.status()?)?;
            }
            match ending {
                None => {}
                Some(Ending::Done) => {
                    self.check_no_epoch_left_open(&self.cluster.status()?, None)?;
                    return Ok(AttemptEnd::Done);
                }
                Some(Ending::Failed { rank, code }) => return self.rank_failed(rank, code, events),
                Some(Ending::Killed { rank, signal }) => {
                    let who = rank.map_or("a rank".to_string(), |r| format!("rank {r}"));
                    let how = signal.map_or(String::new(), |s| format!(" by signal {s}"));
                    let status = self.cluster.status()?;
                    let lost = Self::lost(&status);
                    self.note_lost(&lost, Some(&status), Self::loss_cause(&status, &lost), events);
                    if lost.is_empty() && self.undeclared.is_empty() {
                        self.restart_without_loss(
                            &format!("{who} was killed{how}"),
                            format!("{who} killed{how}"),
                            events,
                        );
                    }
                    return Ok(AttemptEnd::Failure(format!("{who} killed{how}")));
                }
            }
            if tick.is_multiple_of(4) {
                let status = self.cluster.status()?;
                self.check_superseded(&status)?;
                self.say_isolation(&status, events);
                let lost = Self::lost(&status);
                if !lost.is_empty() {
                    self.note_lost(&lost, Some(&status), Self::loss_cause(&status, &lost), events);
                    return Ok(AttemptEnd::Failure(format!(
                        "node {} lost",
                        lost.into_iter().collect::<Vec<_>>().join(" ")
                    )));
                }
                self.check_no_epoch_left_open(&status, Some(&attempt.exited()))?;
            }
            tick += 1;
            std::thread::sleep(TICK);
        }
    }

    /// A rank exited with a non-zero status. Its node's loss is the likely cause when one
    /// is declared within the liveness period (an MPI rank aborts when a peer's node dies,
    /// before the coordinator has missed the node's heartbeats), and so is a coordinator
    /// replaced since the attempt started (the epoch the rank was checkpointing was lost
    /// with it): then it is a failure to recover from; otherwise the status is the
    /// program's answer.
    fn rank_failed(
        &mut self,
        rank: Option<u32>,
        code: i32,
        events: &mut dyn FnMut(Event),
    ) -> Result<AttemptEnd, RunError> {
        let who = rank.map_or("a rank".to_string(), |r| format!("rank {r}"));
        let deadline = Instant::now() + self.deadlines.liveness() + Duration::from_millis(500);
        loop {
            let status = self.cluster.status()?;
            if status.coordinator_term != self.attempt_term {
                let why = format!(
                    "{who} exited {code} after the coordinator was replaced (term {} to {})",
                    self.attempt_term, status.coordinator_term
                );
                self.restart_without_loss(&why, "coordinator replaced".into(), events);
                return Ok(AttemptEnd::Failure(why));
            }
            let lost = Self::lost(&status);
            if !lost.is_empty() || !self.undeclared.is_empty() {
                self.note_lost(&lost, Some(&status), Self::loss_cause(&status, &lost), events);
                return Ok(AttemptEnd::Failure(format!(
                    "{who} exited {code} after a node loss"
                )));
            }
            if Instant::now() > deadline {
                return Ok(AttemptEnd::Exit(code));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Records a failure that lost no node (a rank killed, the coordinator replaced) and
    /// says that the attempt restarts from the last committed epoch.
    fn restart_without_loss(&mut self, what: &str, cause: String, events: &mut dyn FnMut(Event)) {
        events(Event::Note(format!(
            "{what}: restarting from the last committed epoch"
        )));
        self.failing_since.get_or_insert_with(Instant::now);
        self.record.failures.push(FailureRecord {
            t_s: self.now(),
            nodes: Vec::new(),
            cause,
        });
    }

    /// Says once per episode that the coordinator hears from no agent (it suspects its own
    /// link, so nobody is declared lost meanwhile).
    fn say_isolation(&mut self, status: &StatusReport, events: &mut dyn FnMut(Event)) {
        match status.isolated_seconds {
            Some(seconds) if !self.isolation_said => {
                self.isolation_said = true;
                events(Event::Note(format!(
                    "the coordinator has heard from no agent for {seconds:.1} s (a partition of its link?): nobody is declared lost for up to {:.0} s",
                    self.deadlines.partition_grace().as_secs_f64()
                )));
            }
            None if self.isolation_said => {
                self.isolation_said = false;
                events(Event::Note("the coordinator hears from its agents again".into()));
            }
            _ => {}
        }
    }

    /// An epoch that some ranks wrote and a rank that exited did not can never commit: the
    /// ranks disagree on how many checkpoints they take. Ends the run naming the ranks and
    /// the epoch, instead of waiting forever (or exiting 0 with the epoch never committed).
    /// `exited`: the ranks that exited so far; `None` once every rank has.
    fn check_no_epoch_left_open(
        &self,
        status: &StatusReport,
        exited: Option<&BTreeSet<u32>>,
    ) -> Result<(), RunError> {
        let ready: BTreeSet<u32> = status.ranks_ready.iter().copied().collect();
        let world = self.options.ranks;
        if ready.is_empty() || ready.len() as u32 >= world {
            return Ok(());
        }
        let missing: Vec<u32> = (0..world)
            .filter(|r| !ready.contains(r) && exited.is_none_or(|e| e.contains(r)))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let ready: Vec<u32> = ready.into_iter().collect();
        Err(RunError::Mismatch(format!(
            "rank(s) {} exited without checkpointing epoch {}, which rank(s) {} wrote: the epoch can never commit (every rank must checkpoint the same number of times); the last committed epoch is {}",
            list(&missing),
            status.open_epoch,
            list(&ready),
            status.committed_epoch
        )))
    }
}

#[cfg(test)]
mod tests;
