//! One job, one owner. The job a cluster holds has an id and a **lease**: the `eckpt run`
//! that supervises it claims the lease (`ClaimJob`) and renews it while it runs; a second
//! run of a live job is refused, naming the holder. Each attempt of the job (the first
//! launch, every relaunch) gets a new **generation**, which its ranks carry in every
//! request; a request of any other generation — a rank of a superseded attempt, an orphan
//! whose supervisor died — is refused ([`Coordinator::fence`]), so no second writer ever
//! commits into the job's epochs. A job that finished (every rank exited 0) is recorded as
//! finished, so that running it again is refused unless the user says `--resume` or
//! `--fresh`. The mark stays until the job moves on — an epoch commits, or `--fresh`
//! discards it — so a resumed run refused after its claim (its ranks do not fit, its
//! restored world differs) leaves the job finished, as it found it.
//!
//! The id, the generation, the holder and the finished mark are journaled; when the lease
//! was last renewed is not: a restarted coordinator gives the holder a whole lease from its
//! own start. Leases run on the time the coordinator ran (`run_clock.rs`): a coordinator
//! stopped or starved for longer than a lease has not heard its holder renew, and does not
//! take the job from it on waking; nor does one that heard from no agent at all for that
//! long (its own link was cut, up to the partition grace), as the ranks outlive it.
//!
//! A claim is decided before it changes anything: a live holder, another job's checkpoint,
//! a finished job without `--resume`, or a job checkpointed with another number of ranks is
//! refused with the journal untouched. And the lease decides who may stop the cluster
//! ([`Coordinator::begin_stop`]): the `eckpt run` that started a cluster is refused while
//! another generation holds the job, and the cluster is then left to its idle rule; a claim
//! and a stop are decided one at a time ([`StopGate`]), so that no claim is granted on a
//! cluster that is stopping.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::owner::State;
use super::Coordinator;
use eckpt_cluster_api::msg::{Discard, JobClaim, JobGrant, JobStart, JobStatus, LeaseHolder};
use eckpt_cluster_api::ClusterError;

/// Who asks the cluster to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stopper {
    /// The operator (`eckpt down`): obeyed.
    Operator,
    /// The `eckpt run` that started the cluster, with its job generation (0: it never held
    /// the lease): refused once another generation took the job over (one that never held
    /// it: while another generation holds a live lease).
    Run(u64),
    /// The idle rule: refused while any job lease is live.
    Idle,
}

impl From<Option<u64>> for Stopper {
    /// A stop request's `by_run`.
    fn from(by_run: Option<u64>) -> Stopper {
        by_run.map_or(Stopper::Operator, Stopper::Run)
    }
}

/// Whether the cluster is stopping, and whether its idle rule runs. Claims and stops are
/// decided under it one at a time, so that a stop is never let through while a lease is
/// being granted and no lease is granted once a stop was let through.
#[derive(Debug)]
pub(super) struct StopGate {
    stopping: bool,
    idle_rule: bool,
}

impl StopGate {
    /// A gate whose idle rule runs from the start (`--idle-lease`) or not.
    pub(super) fn new(idle_rule: bool) -> StopGate {
        StopGate {
            stopping: false,
            idle_rule,
        }
    }
}

/// The job as the journal records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Its id, once a supervisor claimed it.
    pub id: Option<String>,
    /// The current attempt's generation (0: never claimed).
    pub generation: u64,
    /// The supervisor holding the lease (`None`: released).
    pub holder: Option<LeaseHolder>,
    /// When the job finished (every rank exited 0), seconds since the Unix epoch.
    pub finished_unix: Option<f64>,
    /// Flushed epochs up to this one belong to a job `--fresh` discarded: never restored.
    pub fresh_from: u64,
}

/// Seconds since the Unix epoch: for job ids and the ages `status` prints, never for a
/// decision (leases run on the coordinator's run clock).
#[allow(clippy::disallowed_methods)]
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A new job id: when it was made and by which process.
fn new_job_id() -> String {
    format!("{:x}-{}", unix_now() as u64, std::process::id())
}

impl State {
    /// The lease's holder and how long ago it renewed, while the lease runs.
    pub(super) fn live_lease(&self) -> Option<(LeaseHolder, Duration)> {
        let holder = self.journal().job.holder.clone()?;
        self.leave_out_silence();
        let ago = self.clock.since(self.lease_renewed?);
        (ago < self.deadlines.lease()).then_some((holder, ago))
    }

    /// The job in `eckpt status`.
    pub(super) fn job_status(&self) -> Option<JobStatus> {
        let job = &self.journal().job;
        let id = job.id.clone()?;
        let renewed = self.lease_renewed.filter(|_| job.holder.is_some());
        self.leave_out_silence();
        Some(JobStatus {
            id,
            generation: job.generation,
            holder: job.holder.clone(),
            renewed_seconds_ago: renewed.map(|r| self.clock.since(r).as_secs_f64()),
            lease_left_seconds: renewed.map(|r| {
                self.deadlines
                    .lease()
                    .saturating_sub(self.clock.since(r))
                    .as_secs_f64()
            }),
            finished_unix: job.finished_unix,
        })
    }

    /// Refuses a request of `who` (a rank) unless it is the job's current writer: with a
    /// live lease, only its generation; without one, only requests that carry none (ranks
    /// and commands started by hand, outside `eckpt run`).
    pub(super) fn fence(&self, generation: Option<u64>, who: &str) -> Result<(), ClusterError> {
        let job = &self.journal().job;
        let id = job.id.as_deref().unwrap_or("-");
        match (self.live_lease(), generation) {
            (Some(_), Some(g)) if g == job.generation => Ok(()),
            (Some(_), Some(g)) => Err(ClusterError::Fenced(format!(
                "{who} belongs to attempt generation {g} of job {id}, which generation {} replaced: refused",
                job.generation
            ))),
            (None, Some(g)) => Err(ClusterError::Fenced(format!(
                "{who} belongs to generation {g} of job {id}, whose supervisor is gone (its lease {}): refused",
                if job.holder.is_some() { "expired" } else { "was released" }
            ))),
            (Some((holder, _)), None) => Err(ClusterError::Fenced(format!(
                "job {id} is run by {holder} (generation {}): {who}, started without its generation (ECKPT_GENERATION), is refused",
                job.generation
            ))),
            (None, None) => Ok(()),
        }
    }

    /// Refuses `generation` unless it holds the job's live lease.
    fn check_holder(&self, generation: u64) -> Result<(), ClusterError> {
        let job = &self.journal().job;
        if job.generation == generation && self.live_lease().is_some() {
            return Ok(());
        }
        Err(ClusterError::Fenced(format!(
            "generation {generation} does not hold the lease of job {} any more (generation {}, {})",
            job.id.as_deref().unwrap_or("-"),
            job.generation,
            match &job.holder {
                Some(holder) if job.generation == generation => format!("held by {holder} but expired"),
                Some(holder) => format!("held by {holder}"),
                None => "released".to_string(),
            }
        )))
    }
}

impl Coordinator {
    /// Refuses a request of `who` unless it is the job's current writer ([`State::fence`]).
    pub(super) async fn fence(&self, generation: Option<u64>, who: String) -> Result<(), ClusterError> {
        self.read(move |s| s.fence(generation, &who)).await
    }

    /// `ClaimJob`: the lease for a supervisor, and the first generation of its attempts.
    pub(super) async fn claim_job(self: &Arc<Self>, claim: JobClaim) -> Result<JobGrant, ClusterError> {
        let _op = self.op.lock().await;
        let (job, committed, world, lease) = self
            .read(|s| {
                let journal = s.journal();
                (
                    journal.job.clone(),
                    journal.committed,
                    journal.world,
                    s.live_lease(),
                )
            })
            .await;
        if let Some((holder, ago)) = lease {
            return Err(ClusterError::Fenced(format!(
                "job {} is running: {holder} holds its lease since {:.0} s (renewed {:.1} s ago; it expires {:.0} s after the last renewal): a second run of a live job is refused",
                job.id.as_deref().unwrap_or("-"),
                (unix_now() - holder.since_unix).max(0.0),
                ago.as_secs_f64(),
                self.deadlines.lease().as_secs_f64()
            )));
        }
        let id = match (&claim.job, &job.id) {
            (Some(claimed), Some(held)) if claimed != held && committed > 0 && claim.start != JobStart::Fresh => {
                return Err(ClusterError::Fenced(format!(
                    "the cluster holds the checkpoint of job {held} (epoch {committed}), not of job {claimed}: `--job {held}` resumes it, `--fresh` discards it, or use another --dir"
                )))
            }
            (Some(claimed), _) => claimed.clone(),
            (None, Some(held)) => held.clone(),
            (None, None) => new_job_id(),
        };
        let same_job = job.id.as_ref() == Some(&id);
        if let (Some(at), JobStart::Default, true) = (job.finished_unix, claim.start, same_job) {
            return Err(ClusterError::Fenced(format!(
                "job {id} finished {:.0} s ago (every rank exited 0; its final epoch is {committed}): `--resume` continues from that epoch, `--fresh` starts over",
                (unix_now() - at).max(0.0)
            )));
        }
        if let (Some(held), Some(asked), false) = (world, claim.world, claim.start == JobStart::Fresh) {
            if held != asked {
                let root = self.dir.root().display();
                return Err(ClusterError::Mismatch(format!(
                    "the cluster in {root} holds a job of {held} ranks, not {asked}: run it with -n {held}, or use another --dir (or `eckpt down --dir {root} --purge`)"
                )));
            }
        }
        let gate = self.stop_gate.lock().await;
        if gate.stopping {
            return Err(ClusterError::Fenced(format!(
                "the cluster in {} is stopping: run the job again once it stopped (a stopped cluster is started again)",
                self.dir.root().display()
            )));
        }
        let discarded = if claim.start == JobStart::Fresh {
            self.discard_job().await?
        } else {
            None
        };
        // The holder whose lease expired unreleased: its ranks may still run.
        let superseded = job.holder.clone();
        let (holder, claimed) = (claim.holder, id.clone());
        let (generation, committed) = self
            .state
            .change(move |s, j| {
                j.job.id = Some(claimed);
                j.job.generation += 1;
                j.job.holder = Some(holder);
                s.lease_renewed = Some(s.clock.now());
                (j.job.generation, j.committed)
            })
            .await?;
        drop(gate);
        self.start_attempt().await;
        self.lease_runs_from_grant().await;
        tracing::info!(job = %id, generation, "job claimed");
        Ok(JobGrant {
            job: id,
            generation,
            committed,
            discarded,
            superseded,
        })
    }

    /// Lets a stop of the cluster through, or refuses it ([`Stopper`]): once let through,
    /// every later claim is refused.
    pub(super) async fn begin_stop(&self, by: Stopper) -> Result<(), ClusterError> {
        let mut gate = self.stop_gate.lock().await;
        let (job, lease) = self.read(|s| (s.journal().job.clone(), s.live_lease())).await;
        match (by, lease) {
            // A run another generation superseded never stops the cluster, whether its
            // successor's lease is live or not: one stalled past its lease comes back to
            // a cluster it still counts on (found by the simulator: a supervisor frozen
            // 4.7 s through its claim's answer, its predecessor's stop let through).
            (Stopper::Run(generation), lease)
                if generation != job.generation && (generation > 0 || lease.is_some()) =>
            {
                let holder = match (&lease, &job.holder) {
                    (Some((holder, _)), _) => format!("held by {holder}"),
                    (None, Some(holder)) => format!("{holder}, whose lease expired"),
                    (None, None) => "released".to_string(),
                };
                return Err(ClusterError::Fenced(format!(
                    "generation {} of job {} took the cluster over ({holder}): the run of generation {generation} that started it does not stop it under its successor; the cluster stops once no job ran on it for {:.0} s",
                    job.generation,
                    job.id.as_deref().unwrap_or("-"),
                    self.deadlines.idle().unwrap_or(self.deadlines.run_idle()).as_secs_f64()
                )));
            }
            (Stopper::Idle, Some(_)) => {
                return Err(ClusterError::Fenced("a job holds its lease".into()));
            }
            _ => {}
        }
        gate.stopping = true;
        Ok(())
    }

    /// A run's refused stop hands the cluster to its idle rule: the period the rule must
    /// start with, unless it runs already (`--idle-lease`, or an earlier hand-over). Without
    /// `--idle-lease`, [`Deadlines::run_idle`](eckpt_cluster_api::dirs::Deadlines::run_idle):
    /// the run that started the cluster meant it to end with the job, but not under a
    /// successor whose supervisor merely stalled past a lease (a single lease stopped the
    /// cluster under a job frozen for two, found by the simulator).
    pub(super) async fn hand_to_idle_rule(&self) -> Option<Duration> {
        let mut gate = self.stop_gate.lock().await;
        if std::mem::replace(&mut gate.idle_rule, true) {
            return None;
        }
        Some(self.deadlines.idle().unwrap_or(self.deadlines.run_idle()))
    }

    /// `RenewLease`.
    pub(super) async fn renew_lease(&self, generation: u64) -> Result<(), ClusterError> {
        self.read(move |s| {
            s.check_holder(generation)?;
            s.lease_renewed = Some(s.clock.now());
            Ok(())
        })
        .await
    }

    /// `NextAttempt`: the generation of the supervisor's next launch.
    pub(super) async fn next_attempt(self: &Arc<Self>, generation: u64) -> Result<u64, ClusterError> {
        let _op = self.op.lock().await;
        let next = self
            .state
            .change(move |s, j| {
                s.check_holder(generation)?;
                j.job.generation += 1;
                s.lease_renewed = Some(s.clock.now());
                Ok::<_, ClusterError>(j.job.generation)
            })
            .await??;
        self.start_attempt().await;
        self.lease_runs_from_grant().await;
        Ok(next)
    }

    /// Starts the lease's period again as its grant is answered. The period ran from the
    /// grant's journal write, and the attempt's start after it waits for agents (an open
    /// epoch aborted on a frozen node): the holder, who cannot renew before it hears the
    /// grant, found its lease spent by then, and a stop of the run it superseded was let
    /// through under it (found by the simulator: a claim answered 5 s after it was
    /// journaled). A lease released meanwhile stays released.
    async fn lease_runs_from_grant(&self) {
        self.read(|s| {
            if s.lease_renewed.is_some() {
                s.lease_renewed = Some(s.clock.now());
            }
        })
        .await;
    }

    /// `ReleaseJob`. A release that is not a finish leaves the finished mark as it is: a run
    /// of a finished job that was refused, or ended, before it committed an epoch has not
    /// moved the job on (an epoch's commit clears the mark).
    pub(super) async fn release_job(&self, generation: u64, finished: bool) -> Result<(), ClusterError> {
        self.state
            .change(move |s, j| {
                s.check_holder(generation)?;
                j.job.holder = None;
                if finished {
                    j.job.finished_unix = Some(unix_now());
                }
                s.lease_renewed = None;
                Ok(())
            })
            .await?
    }

    /// A new attempt starts clean: an epoch ranks of older attempts left open is aborted
    /// (it would never commit), and their pace points are forgotten.
    async fn start_attempt(&self) {
        self.abort_open_epoch("aborted: a new attempt of the job started before every rank wrote it")
            .await;
        self.forget_pace_points().await;
    }

    /// `--fresh`: forgets the job's checkpoints — journal first (the commit point), then
    /// every node deletes its ranks' epochs and its coded objects. Every group member must
    /// be alive: one that is down would keep the old job's data. The epoch discarded, if
    /// there was one.
    async fn discard_job(self: &Arc<Self>) -> Result<Option<u64>, ClusterError> {
        let journal = self.snapshot().await;
        let alive = self.alive().await;
        let down: Vec<String> = journal
            .nodes
            .iter()
            .filter(|(name, entry)| !entry.removed && !alive.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect();
        if !down.is_empty() {
            return Err(ClusterError::Refused(format!(
                "--fresh deletes the job's checkpoints on every node, but {} {} down: `eckpt recover` first, or start a new cluster",
                down.join(" "),
                if down.len() == 1 { "is" } else { "are" }
            )));
        }
        self.abort_open_epoch("aborted: the job starts over (--fresh)")
            .await;
        let newest_flushed = self.read(|s| s.flush.newest_flushed()).await;
        let discarded = (journal.committed > 0).then_some(journal.committed);
        self.update(move |j| {
            j.placement.clear();
            j.world = None;
            j.committed = 0;
            j.pace.clear();
            for group in &mut j.groups {
                group.objects.clear();
            }
            j.job.fresh_from = j.next_epoch.saturating_sub(1).max(newest_flushed);
            j.job.finished_unix = None;
        })
        .await?;
        let requests = alive.into_values().map(|n| (n, Discard)).collect();
        for answer in self.ask_all(requests).await {
            answer?;
        }
        // `discarded=11`, or no field when nothing had been committed.
        tracing::info!(discarded, "job discarded (--fresh)");
        Ok(discarded)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use eckpt_cluster_api::dirs::Deadlines;
    use eckpt_cluster_api::msg::{JobClaim, JobGrant, JobStart, LeaseHolder};
    use eckpt_coding::config::CodingConfig;

    use super::super::test_cluster::{Fault, Kind, TestCluster, RANK_BYTES};
    use super::Stopper;

    fn claim(start: JobStart) -> JobClaim {
        JobClaim {
            job: Some("job".into()),
            holder: LeaseHolder {
                host: "host".into(),
                pid: 1,
                since_unix: 0.0,
                command: "app".into(),
                run: None,
            },
            start,
            world: Some(2),
        }
    }

    /// A coordinator that did not run for longer than the lease (stopped, starved) did not
    /// hear its holder renew meanwhile: on waking, the lease is still the holder's. A holder
    /// silent for a lease while the coordinator runs loses it.
    #[tokio::test]
    async fn a_lease_outlives_a_stall_of_the_coordinator_but_not_a_silent_holder() {
        let deadlines = Deadlines {
            lease_ms: 1_000,
            ..TestCluster::deadlines()
        };
        let c = TestCluster::with_deadlines(6, CodingConfig::default(), deadlines).await;
        let grant = c.coord.claim_job(claim(JobStart::Default)).await.unwrap();
        // The runtime, and the coordinator on it, stops for three leases.
        std::thread::sleep(Duration::from_secs(3));
        c.coord
            .renew_lease(grant.generation)
            .await
            .expect("the holder keeps its lease through the coordinator's stall");

        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let lost = c.coord.renew_lease(grant.generation).await.unwrap_err();
        assert!(lost.to_string().contains("expired"), "{lost}");
    }

    /// Six agents, a lease of 1 s and a partition grace of 10 s: the cluster, its deadlines
    /// and the job's grant.
    async fn leased_cluster() -> (TestCluster, Deadlines, JobGrant) {
        let deadlines = Deadlines {
            lease_ms: 1_000,
            partition_grace_ms: 10_000,
            ..TestCluster::deadlines()
        };
        let c = TestCluster::with_deadlines(6, CodingConfig::default(), deadlines).await;
        let grant = c.coord.claim_job(claim(JobStart::Default)).await.unwrap();
        (c, deadlines, grant)
    }

    /// A coordinator that hears from no agent at all (its own link cut, within the partition
    /// grace) did not hear its holder either: the silence does not count against the lease,
    /// as the ranks, which retry for the grace, outlive it. (Found by the simulator: a
    /// coordinator cut off for longer than a lease took the job from its live supervisor.)
    #[tokio::test]
    async fn a_lease_outlives_a_silence_of_every_agent_within_the_grace() {
        let (c, _, grant) = leased_cluster().await;
        // Every agent silent for two and a half leases, then the holder renews.
        let silence_then_renew = || async {
            for node in 0..6 {
                c.stop(&format!("n{node}"));
            }
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            c.coord.renew_lease(grant.generation).await
        };
        silence_then_renew()
            .await
            .expect("the holder keeps its lease through the coordinator's silence");
        let job = c.coord.status().await.job.expect("a job");
        assert!(job.lease_left_seconds.unwrap() > 0.5, "{job:?}");

        // The agents are heard again, and the coordinator is cut off a second time at once,
        // while their sightings are still set ahead for their reconnection: that silence
        // does not count either.
        for node in 0..6 {
            c.resume(&format!("n{node}"));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.coord.renew_lease(grant.generation).await.unwrap();
        silence_then_renew()
            .await
            .expect("the holder keeps its lease through the coordinator's second silence");
    }

    /// A coordinator restarted while cut off from every agent gives the holder a whole lease
    /// from its start and then hears nobody: that silence, from its start, does not count
    /// either. (Found by the simulator: the coordinator crashed and restarted within a
    /// freeze.)
    #[tokio::test]
    async fn a_lease_outlives_the_silence_of_a_coordinator_restarted_while_cut_off() {
        let (c, deadlines, grant) = leased_cluster().await;
        let restarted = c.restarted(deadlines).await;
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        restarted
            .renew_lease(grant.generation)
            .await
            .expect("the holder keeps its lease through the restarted coordinator's silence");
    }

    /// The run of a generation another one took the job over from never stops the cluster:
    /// not while the successor's lease is live, nor once it expired (its supervisor may be
    /// stalled, and come back to the cluster). (Found by the simulator: a supervisor frozen
    /// through its claim's answer, its predecessor's stop let through.) The operator's stop
    /// is obeyed.
    #[tokio::test]
    async fn a_superseded_run_does_not_stop_the_cluster_under_its_successor_live_or_expired() {
        let (c, deadlines, first) = leased_cluster().await;
        let superseded = || c.coord.begin_stop(Stopper::Run(first.generation));
        tokio::time::sleep(deadlines.lease() + Duration::from_millis(200)).await;
        let second = c.coord.claim_job(claim(JobStart::Default)).await.unwrap();
        assert!(second.generation > first.generation);
        let refused = superseded().await.unwrap_err();
        assert!(refused.to_string().contains("under its successor"), "{refused}");
        tokio::time::sleep(deadlines.lease() + Duration::from_millis(200)).await;
        let refused = superseded().await.unwrap_err();
        assert!(refused.to_string().contains("whose lease expired"), "{refused}");
        c.coord.begin_stop(Stopper::Operator).await.unwrap();
    }

    /// A claim's lease runs from its answer: a claim whose attempt start waited on a slow
    /// agent (aborting an epoch left open) still leaves its holder a whole lease. (Found by
    /// the simulator: a claim answered 5 s after it was journaled, its lease spent.)
    #[tokio::test]
    async fn a_claim_answered_late_leaves_its_holder_a_whole_lease() {
        let deadlines = Deadlines {
            lease_ms: 1_000,
            ..TestCluster::deadlines()
        };
        let c = TestCluster::with_deadlines(6, CodingConfig::default(), deadlines).await;
        // Rank 0 of 2 wrote the next epoch, outside any job; n0 takes 1.5 s to abort it.
        let opened = c.coord.open_epoch(0, 2, None, None, None).await.unwrap();
        let report = eckpt_cluster_api::msg::RankReport {
            image_bytes: RANK_BYTES,
            stored_bytes: RANK_BYTES,
            pace: None,
        };
        c.coord
            .rank_ready(0, opened.epoch, opened.node.name, report, None)
            .await
            .unwrap();
        c.agents
            .fault("n0", Fault::Slow(Kind::Abort, Duration::from_millis(1_500)));
        let started = std::time::Instant::now();
        let grant = c.coord.claim_job(claim(JobStart::Default)).await.unwrap();
        assert!(started.elapsed() > deadlines.lease(), "the claim waited no abort");
        c.coord
            .renew_lease(grant.generation)
            .await
            .expect("the lease its holder just heard of is live");
    }

    async fn finished(c: &TestCluster) -> bool {
        c.coord.snapshot().await.job.finished_unix.is_some()
    }

    #[tokio::test]
    async fn a_finished_job_stays_finished_until_an_epoch_moves_it_on() {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        let first = c.coord.claim_job(claim(JobStart::Default)).await.unwrap();
        c.coord.release_job(first.generation, true).await.unwrap();
        assert!(finished(&c).await);

        // A resumed run that ends before it commits an epoch (refused after its claim: its
        // ranks did not fit) leaves the job finished: a plain run is still refused.
        let resumed = c.coord.claim_job(claim(JobStart::Resume)).await.unwrap();
        c.coord.release_job(resumed.generation, false).await.unwrap();
        assert!(
            finished(&c).await,
            "a resume that changed nothing unfinished the job"
        );
        let plain = c.coord.claim_job(claim(JobStart::Default)).await.unwrap_err();
        assert!(plain.to_string().contains("--resume"), "{plain}");

        // An epoch committed after the finish: the job moved on, and a plain run resumes it.
        assert!(c.checkpoint(2).await.committed);
        assert!(
            !finished(&c).await,
            "a job that committed past its finish is still marked finished"
        );
        c.coord.claim_job(claim(JobStart::Default)).await.unwrap();
    }
}
