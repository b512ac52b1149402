//! The job's lease: `eckpt run` holds it in the coordinator for as long as it supervises
//! the job, renewing it from a thread of its own five times per lease period. A second run
//! of a live job is refused; a run whose supervisor died may take the job over once the
//! dead supervisor's lease has expired (it waits that long, at most one lease period, when
//! the holder has stopped renewing). Each attempt's generation comes from the coordinator
//! ([`Lease::next_attempt`]) under the lock the renewals read it under, so a renewal refused
//! for carrying a generation the coordinator has just replaced is known for what it is.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use eckpt_cluster_api::dirs::Deadlines;
use eckpt_cluster_api::msg::{JobClaim, JobGrant, LeaseHolder};
use eckpt_cluster_api::net::host_name;
use eckpt_cluster_api::ErrorKind;

use crate::cluster::Coordinator;
use crate::RunError;

/// A held lease; released by [`Lease::release`] (or left to expire when the process dies).
pub struct Lease {
    generation: Arc<Mutex<u64>>,
    lost: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    renewer: Option<JoinHandle<()>>,
}

/// Locks `mutex`, poisoned or not. `eckpt run` is no crash-only daemon, but a poisoned lock
/// of a [`Lease`] still holds a whole value: each guards one value replaced in one assignment
/// (a generation, why the lease was lost), and the only lock held across a call (the
/// supervisor's in [`Lease::next_attempt`]) assigns after the call returns. So a panic while
/// one was held leaves the last value written, which the other thread may go on reading.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `e` says the job's lease or generation belongs to someone else.
fn fenced(e: &RunError) -> bool {
    matches!(e, RunError::Cluster(c) if c.kind() == ErrorKind::Fenced)
}

impl Lease {
    /// Claims the job of the cluster in `cluster` for `claim`. When another supervisor holds
    /// the lease but is gone — its process is not running (same host), or it stopped
    /// renewing (another host: watched for two renewal periods) — waits for the lease to
    /// expire, at most one lease period, saying so through `note`, and claims it then; a
    /// live holder is refused at once (after the watch, for a holder on another host).
    pub fn claim(
        cluster: &Arc<dyn Coordinator>,
        claim: JobClaim,
        deadlines: &Deadlines,
        note: &mut dyn FnMut(String),
    ) -> Result<(Lease, JobGrant), RunError> {
        let grant = match cluster.claim_job(claim.clone()) {
            Err(e) if fenced(&e) => match Self::holder_gone(&**cluster, deadlines.lease_renewal())? {
                Some((holder, left)) => {
                    note(format!(
                        "the job's supervisor ({holder}) is gone and has not renewed its lease: taking the job over when the lease expires, in {left:.1} s"
                    ));
                    std::thread::sleep(Duration::from_secs_f64(left) + Duration::from_millis(100));
                    cluster.claim_job(claim)?
                }
                None => return Err(e),
            },
            other => other?,
        };
        let mut lease = Lease {
            generation: Arc::new(Mutex::new(grant.generation)),
            lost: Arc::new(Mutex::new(None)),
            stop: Arc::new(AtomicBool::new(false)),
            renewer: None,
        };
        lease.renewer = Some(lease.start_renewing(cluster.clone(), deadlines.lease_renewal())?);
        Ok((lease, grant))
    }

    /// The holder of the job's lease and the seconds its lease has left, when it is gone;
    /// `None` when it is alive (or the lease is free now).
    fn holder_gone(
        cluster: &dyn Coordinator,
        renewal: Duration,
    ) -> Result<Option<(LeaseHolder, f64)>, RunError> {
        let watch_until = Instant::now() + 2 * renewal + Duration::from_millis(200);
        loop {
            let Some(job) = cluster.status()?.job else {
                return Ok(None);
            };
            let (Some(holder), Some(ago), Some(left)) =
                (job.holder, job.renewed_seconds_ago, job.lease_left_seconds)
            else {
                return Ok(None);
            };
            let silent = ago > 2.0 * renewal.as_secs_f64();
            if silent || (holder.host == host_name() && !eckpt_cluster::launch::pid_alive(holder.pid)) {
                return Ok(Some((holder, left)));
            }
            if holder.host == host_name() || Instant::now() > watch_until {
                return Ok(None);
            }
            std::thread::sleep(renewal / 4);
        }
    }

    fn start_renewing(
        &self,
        cluster: Arc<dyn Coordinator>,
        every: Duration,
    ) -> Result<JoinHandle<()>, RunError> {
        let (generation, lost, stop) = (self.generation.clone(), self.lost.clone(), self.stop.clone());
        std::thread::Builder::new()
            .name("lease".into())
            .spawn(move || {
                let mut next = Instant::now() + every;
                while !stop.load(Ordering::SeqCst) {
                    if Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                    // Renewals go out a renewal period apart, from when each went out:
                    // timed from when one ended, a renewal that waited out a stalled
                    // coordinator left it a whole period more with none, and two stalls
                    // shorter than the liveness period expired a live lease (found by
                    // the simulator).
                    next = Instant::now() + every;
                    // Not held across the call: a renewal waits up to a renewal period
                    // for its answer, and the supervisor reads the generation meanwhile.
                    let held = *lock(&generation);
                    match cluster.renew_lease(held) {
                        // A new attempt's generation replaced this one while it was renewed
                        // (`next_attempt` holds the lock until it has the new one): the
                        // next renewal carries the new generation.
                        Err(e) if fenced(&e) && *lock(&generation) != held => {}
                        Err(e) if fenced(&e) => {
                            *lock(&lost) = Some(e.to_string());
                            return;
                        }
                        // Unanswered (a coordinator restarting gives the holder a whole
                        // lease from its start; a connection that lost the answer is
                        // dropped): try again at the next renewal, on a new connection.
                        Err(e) => tracing::warn!(error = %e, "renewing the job's lease"),
                        Ok(()) => {}
                    }
                }
            })
            .map_err(|e| RunError::Launch(format!("starting the lease thread: {e}")))
    }

    /// The current attempt's generation.
    pub fn generation(&self) -> u64 {
        *lock(&self.generation)
    }

    /// Why the lease was lost (another supervisor took the job after this one failed to
    /// renew in time), if it was.
    pub fn lost(&self) -> Option<String> {
        lock(&self.lost).clone()
    }

    /// A new generation for the next attempt: the ranks of older ones are refused.
    pub fn next_attempt(&self, cluster: &dyn Coordinator) -> Result<u64, RunError> {
        let mut held = lock(&self.generation);
        *held = cluster.next_attempt(*held)?;
        Ok(*held)
    }

    /// Stops renewing and gives the lease up; `finished`: every rank exited 0.
    pub fn release(mut self, cluster: &dyn Coordinator, finished: bool) -> Result<(), RunError> {
        self.stop_renewing();
        if self.lost().is_some() {
            return Ok(());
        }
        cluster.release_job(self.generation(), finished)
    }

    fn stop_renewing(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_renewing();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::EpochWatch;
    use eckpt_cluster_api::msg::{
        FlushReport, FlushStatus, JobStart, NodeInfo, RecoveryReport, Relocation, StatusReport,
    };
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicU32;

    /// A coordinator that grants the job and then answers no renewal: each waits out its
    /// renewal period, as a renewal does while the coordinator is stalled.
    struct Stalled {
        every: Duration,
        renewals: AtomicU32,
    }

    impl Coordinator for Stalled {
        fn claim_job(&self, _: JobClaim) -> Result<JobGrant, RunError> {
            Ok(JobGrant {
                job: "job".into(),
                generation: 1,
                committed: 0,
                discarded: None,
                superseded: None,
            })
        }
        fn renew_lease(&self, _: u64) -> Result<(), RunError> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.every);
            Err(RunError::Cluster(eckpt_cluster_api::ClusterError::NoAnswer(
                "no answer within a renewal period".into(),
            )))
        }
        fn status(&self) -> Result<StatusReport, RunError> {
            unreachable!("not asked")
        }
        fn nodes(&self) -> Result<BTreeMap<String, NodeInfo>, RunError> {
            unreachable!("not asked")
        }
        fn wait_flush(&self) -> Result<Option<FlushStatus>, RunError> {
            unreachable!("not asked")
        }
        fn flush_now(&self) -> Result<FlushReport, RunError> {
            unreachable!("not asked")
        }
        fn recover(&self, _: Relocation) -> Result<RecoveryReport, RunError> {
            unreachable!("not asked")
        }
        fn leave(&self, _: &str) -> Result<(), RunError> {
            unreachable!("not asked")
        }
        fn next_attempt(&self, _: u64) -> Result<u64, RunError> {
            unreachable!("not asked")
        }
        fn release_job(&self, _: u64, _: bool) -> Result<(), RunError> {
            unreachable!("not asked")
        }
        fn watch_epochs(&self, _: u64) -> Result<EpochWatch, RunError> {
            unreachable!("not asked")
        }
    }

    /// Renewals go out a renewal period apart from when each went out, also while each
    /// waits out a stalled coordinator: timed from when one ended, they went out half as
    /// often, and a lease expired over two stalls each shorter than the liveness period.
    #[test]
    fn renewals_keep_their_period_while_each_waits_out_a_stalled_coordinator() {
        let deadlines = Deadlines {
            lease_ms: 500,
            ..Deadlines::default()
        };
        let every = deadlines.lease_renewal();
        let stalled = Arc::new(Stalled {
            every,
            renewals: AtomicU32::new(0),
        });
        let cluster: Arc<dyn Coordinator> = stalled.clone();
        let claim = JobClaim {
            job: None,
            holder: LeaseHolder {
                host: "here".into(),
                pid: 1,
                since_unix: 0.0,
                command: "eckpt run".into(),
                run: None,
            },
            start: JobStart::Default,
            world: None,
        };
        let (lease, _) = Lease::claim(&cluster, claim, &deadlines, &mut |_| {}).unwrap();
        std::thread::sleep(12 * every);
        drop(lease);
        // About eleven go out in twelve periods (the first after one); half as many were.
        let renewals = stalled.renewals.load(Ordering::SeqCst);
        assert!(renewals >= 8, "{renewals} renewals in 12 renewal periods");
    }

    /// A thread that panicked holding a lease's lock leaves the value it held: the
    /// supervisor reads it on instead of panicking in turn.
    #[test]
    fn a_poisoned_lock_still_gives_the_last_value_written() {
        let lease = Lease {
            generation: Arc::new(Mutex::new(3)),
            lost: Arc::new(Mutex::new(None)),
            stop: Arc::new(AtomicBool::new(false)),
            renewer: None,
        };
        let (generation, lost) = (lease.generation.clone(), lease.lost.clone());
        let poisoned = std::thread::spawn(move || {
            let _generation = generation.lock().unwrap();
            let _lost = lost.lock().unwrap();
            panic!("a panic while holding the lease's locks");
        })
        .join();
        assert!(poisoned.is_err() && lease.generation.is_poisoned() && lease.lost.is_poisoned());
        assert_eq!(lease.generation(), 3);
        assert_eq!(lease.lost(), None);
    }
}
