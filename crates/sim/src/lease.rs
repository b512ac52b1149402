//! The job's lease, held as `eckpt run` holds it: the job claims it once every node has
//! registered, renews it five times per lease period (each renewal answered within a
//! renewal period or abandoned), and its ranks carry the generation it was granted in
//! every request. A renewal the coordinator refuses is judged against
//! what the faults did: the lease may expire while the supervisor itself was cut off from
//! the coordinator (its host frozen, its link cut or stalled), and the job then claims it
//! again, as the `eckpt run` that takes a job over does; refused otherwise — the
//! coordinator stalled or isolated, or restarted — a live holder lost its job, and the run
//! fails.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use anyhow::Result;
use eckpt_cluster_api::commands::{coordinator_call, coordinator_call_within};
use eckpt_cluster_api::dirs::{ClusterDir, Deadlines};
use eckpt_cluster_api::msg::{JobClaim, JobStart, LeaseHolder, RenewLease, StopCluster};
use eckpt_cluster_api::ErrorKind;

use crate::run::{Shared, JOB};
use crate::trace::Trace;

/// The generation the job's ranks carry: `None` while no lease is held (ranks started by
/// hand, outside `eckpt run`, carry none).
pub type Generation = Rc<Cell<Option<u64>>>;

/// When the supervisor could not reach the coordinator through no fault of the
/// coordinator's: from, until (virtual time).
pub type CutOff = (Duration, Duration);

/// The job's supervisor, as the coordinator sees it.
fn holder() -> LeaseHolder {
    LeaseHolder {
        host: JOB.into(),
        pid: 1,
        since_unix: 0.0,
        command: "eckpt-sim".into(),
        run: None,
    }
}

/// Claims the job for `world` ranks, trying again while the coordinator cannot be reached
/// or a lease not yet expired is held; the generation granted.
pub async fn claim(dir: &ClusterDir, world: u32, deadlines: &Deadlines, trace: &Trace) -> u64 {
    loop {
        let claim = JobClaim {
            // Named: an id the coordinator makes up holds the wall clock and its process
            // id, which no replay of the seed repeats.
            job: Some("sim".into()),
            holder: holder(),
            start: JobStart::Default,
            world: Some(world),
        };
        match coordinator_call(dir, claim, |_| {}).await {
            Ok(grant) => {
                trace.event(
                    JOB,
                    format!("the job's lease is held, generation {}", grant.generation),
                );
                return grant.generation;
            }
            Err(e) => trace.event(JOB, format!("claiming the job: {e}")),
        }
        tokio::time::sleep(deadlines.lease_renewal()).await;
    }
}

/// Renews the lease of `generation` (the job of `world` ranks) for as long as the job runs. A renewal refused is
/// judged by [`cut_off_within`]: expected, the job claims the lease again and its ranks
/// take the new generation; not, `shared.lease_lost` says why and the run fails.
pub(crate) async fn renew(
    dir: ClusterDir,
    world: u32,
    generation: Generation,
    trace: Trace,
    shared: Rc<RefCell<Shared>>,
) -> Result<()> {
    let deadlines = dir.load()?.deadlines;
    let every = deadlines.lease_renewal();
    // A renewal period apart from when each went out, as `eckpt run` renews.
    let mut renewals = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    renewals.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        renewals.tick().await;
        let Some(held) = generation.get() else {
            continue;
        };
        let renewal = coordinator_call_within(&dir, RenewLease { generation: held }, every);
        let refused = match renewal.await {
            Err(e) if e.kind() == ErrorKind::Fenced => e,
            // A coordinator restarting gives the holder a whole lease from its start.
            _ => continue,
        };
        let now = turmoil::sim_elapsed().unwrap_or_default();
        // The lease runs from the last renewal the coordinator heard, which a renewal
        // delayed by a fault may have reached up to a lease period before that.
        let since = now.saturating_sub(2 * deadlines.lease() + every);
        let excuse = {
            let shared = shared.borrow();
            if cut_off_within(&shared.supervisor_cut_off, since, now) {
                Some("the supervisor was cut off")
            } else if cut_off_longer(
                &shared.coordinator_frozen,
                deadlines.partition_grace(),
                since,
                now,
            ) {
                Some("the coordinator was cut off for longer than the partition grace")
            } else {
                None
            }
        };
        let Some(excuse) = excuse else {
            shared.borrow_mut().lease_lost = Some(format!(
                "at {now:?}: the lease of generation {held} was refused although neither the job's supervisor was cut off from the coordinator since {since:?} nor the coordinator from everyone for longer than the partition grace: {refused}"
            ));
            return Ok(());
        };
        trace.event(
            JOB,
            format!("the lease expired while {excuse} ({refused}): the job is claimed again"),
        );
        generation.set(None);
        generation.set(Some(claim(&dir, world, &deadlines, &trace).await));
        stop_as_superseded(&dir, held, &trace, &shared).await;
    }
}

/// What the run of generation `superseded` does once another took its job over: woken
/// (it was stopped, or cut off), it ends and stops the cluster it started, as the
/// superseded `eckpt run` of an attack did under the run that had taken over (resumed after
/// SIGSTOP). The coordinator must refuse it while the new generation holds the lease, and
/// leave the cluster to its idle rule; a stop let through fails the run.
async fn stop_as_superseded(dir: &ClusterDir, superseded: u64, trace: &Trace, shared: &RefCell<Shared>) {
    let stop = StopCluster {
        by_run: Some(superseded),
    };
    match coordinator_call(dir, stop, |_| {}).await {
        Ok(()) => {
            let now = turmoil::sim_elapsed().unwrap_or_default();
            shared.borrow_mut().stopped_under_successor = Some(format!(
                "at {now:?}: the coordinator let the run of generation {superseded} stop the cluster"
            ));
        }
        Err(e) => trace.event(
            JOB,
            format!("the superseded run of generation {superseded} stops the cluster: {e}"),
        ),
    }
}

/// Whether one of `cut_off` overlaps the time from `since` to `now`.
fn cut_off_within(cut_off: &[CutOff], since: Duration, now: Duration) -> bool {
    cut_off.iter().any(|&(from, until)| from <= now && until >= since)
}

/// Whether `cut_off`, overlapping ones joined, holds one longer than `longest` that
/// overlaps the time from `since` to `now`: the coordinator's silence the lease leaves out
/// is at most the partition grace, and no job is promised to outlive a longer one.
fn cut_off_longer(cut_off: &[CutOff], longest: Duration, since: Duration, now: Duration) -> bool {
    let mut sorted = cut_off.to_vec();
    sorted.sort();
    let mut joined: Vec<CutOff> = Vec::new();
    for (from, until) in sorted {
        match joined.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(until),
            _ => joined.push((from, until)),
        }
    }
    joined
        .iter()
        .any(|&(from, until)| until - from > longest && from <= now && until >= since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_cut_off_that_overlaps_the_window_excuses_an_expired_lease() {
        let s = Duration::from_secs;
        let cut = [(s(3), s(5))];
        assert!(cut_off_within(&cut, s(4), s(9)));
        assert!(cut_off_within(&cut, s(0), s(3)));
        assert!(!cut_off_within(&cut, s(6), s(9)));
        assert!(!cut_off_within(&cut, s(0), s(2)));
        assert!(!cut_off_within(&[], s(0), s(9)));
    }

    #[test]
    fn overlapping_freezes_join_into_one_silence_longer_than_the_grace() {
        let s = Duration::from_secs;
        let freezes = [(s(8), s(11)), (s(5), s(9))];
        assert!(cut_off_longer(&freezes, s(4), s(10), s(12)));
        assert!(!cut_off_longer(&freezes, s(6), s(10), s(12)));
        assert!(!cut_off_longer(&[(s(5), s(7)), (s(8), s(11))], s(4), s(0), s(12)));
        assert!(!cut_off_longer(&freezes, s(4), s(12), s(14)));
    }
}
