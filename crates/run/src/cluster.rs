//! What `eckpt run` asks of the cluster's coordinator: its state, the agents, a recovery
//! (the same request `eckpt recover` sends), the job's lease, and a stream of decided
//! epochs. A trait ([`Coordinator`]), so that the supervisor's decisions run the same
//! against the coordinator over its socket ([`Cluster`]) and against a scripted one in
//! their unit tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use eckpt_cluster_api::call::ToCoordinator;
use eckpt_cluster_api::commands::{coordinator_call, coordinator_call_retrying, coordinator_call_within};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{
    EpochOutcome, FlushEpoch, FlushReport, FlushStatus, JobClaim, JobGrant, Leave, NextAttempt, NodeInfo,
    Nodes, Recover, RecoveryReport, ReleaseJob, Relocation, RenewLease, Status, StatusReport, WaitEpoch,
    WaitFlush,
};

use crate::RunError;

/// The coordinator as the supervisor asks it. Every call is bounded: it fails when the
/// coordinator cannot be reached within the cluster's retry window (`coordinator_retry`:
/// long enough for a restart, or a replacement started on another host).
pub trait Coordinator: Send + Sync {
    /// `eckpt status`.
    fn status(&self) -> Result<StatusReport, RunError>;
    /// The alive agents by name.
    fn nodes(&self) -> Result<BTreeMap<String, NodeInfo>, RunError>;
    /// Waits until no flush is running: the flushing then (`None`: the cluster does not
    /// flush).
    fn wait_flush(&self) -> Result<Option<FlushStatus>, RunError>;
    /// `eckpt flush`: copies the newest committed epoch to the flush directory and waits
    /// for it.
    fn flush_now(&self) -> Result<FlushReport, RunError>;
    /// `eckpt recover`: decode what is lost, place its ranks, restore redundancy — or
    /// restart from the flush when the node level cannot serve.
    fn recover(&self, relocation: Relocation) -> Result<RecoveryReport, RunError>;
    /// `eckpt leave`: stops `node`'s agent on purpose (the batch system took the host
    /// away); the next recovery rebuilds what it held elsewhere.
    fn leave(&self, node: &str) -> Result<(), RunError>;
    /// Claims the job's lease (refused while another supervisor holds it).
    fn claim_job(&self, claim: JobClaim) -> Result<JobGrant, RunError>;
    /// Renews the lease of `generation`, in one attempt answered within a renewal period
    /// (or an error): the next renewal is the retry.
    fn renew_lease(&self, generation: u64) -> Result<(), RunError>;
    /// The generation of the next attempt.
    fn next_attempt(&self, generation: u64) -> Result<u64, RunError>;
    /// Gives the lease up; `finished`: every rank exited 0.
    fn release_job(&self, generation: u64, finished: bool) -> Result<(), RunError>;
    /// Epochs as they are decided, from `first` on.
    fn watch_epochs(&self, first: u64) -> Result<EpochWatch, RunError>;
}

/// A connection-per-call client of one cluster's coordinator, usable from several threads
/// at once (the supervisor's and its lease's).
pub struct Cluster {
    dir: ClusterDir,
    runtime: tokio::runtime::Runtime,
    /// How long a coordinator that cannot be reached is tried again (restarting, replaced
    /// on another host, cut off for a while): the cluster's `coordinator_retry`.
    retry: Duration,
    /// How long a lease renewal may take: the cluster's `lease_renewal`.
    renewal: Duration,
}

fn runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Launch(format!("starting a runtime: {e}")))
}

/// A runtime several threads may block on at once.
fn shared_runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("coordinator-client")
        .enable_all()
        .build()
        .map_err(|e| RunError::Launch(format!("starting a runtime: {e}")))
}

impl Cluster {
    /// The cluster in `dir`.
    pub fn new(dir: &ClusterDir) -> Result<Cluster, RunError> {
        let deadlines = dir.load()?.deadlines;
        Ok(Cluster {
            dir: dir.clone(),
            runtime: shared_runtime()?,
            retry: deadlines.coordinator_retry(),
            renewal: deadlines.lease_renewal(),
        })
    }

    /// The cluster directory.
    pub fn dir(&self) -> &ClusterDir {
        &self.dir
    }

    fn call<C: ToCoordinator>(&self, call: C) -> Result<C::Answer, RunError> {
        Ok(self
            .runtime
            .block_on(coordinator_call_retrying(&self.dir, call, self.retry))?)
    }
}

impl Coordinator for Cluster {
    fn status(&self) -> Result<StatusReport, RunError> {
        Ok(*self.call(Status)?)
    }

    fn nodes(&self) -> Result<BTreeMap<String, NodeInfo>, RunError> {
        let nodes = self.call(Nodes)?;
        Ok(nodes.into_iter().map(|n| (n.name.clone(), n)).collect())
    }

    fn wait_flush(&self) -> Result<Option<FlushStatus>, RunError> {
        self.call(WaitFlush)
    }

    fn flush_now(&self) -> Result<FlushReport, RunError> {
        self.call(FlushEpoch { epoch: None })
    }

    fn recover(&self, relocation: Relocation) -> Result<RecoveryReport, RunError> {
        self.call(Recover { relocation })
    }

    fn leave(&self, node: &str) -> Result<(), RunError> {
        self.call(Leave {
            node: node.to_string(),
        })
    }

    fn claim_job(&self, claim: JobClaim) -> Result<JobGrant, RunError> {
        self.call(claim)
    }

    fn renew_lease(&self, generation: u64) -> Result<(), RunError> {
        let renewal = coordinator_call_within(&self.dir, RenewLease { generation }, self.renewal);
        Ok(self.runtime.block_on(renewal)?)
    }

    fn next_attempt(&self, generation: u64) -> Result<u64, RunError> {
        self.call(NextAttempt { generation })
    }

    fn release_job(&self, generation: u64, finished: bool) -> Result<(), RunError> {
        self.call(ReleaseJob { generation, finished })
    }

    fn watch_epochs(&self, first: u64) -> Result<EpochWatch, RunError> {
        EpochWatch::start(&self.dir, first)
    }
}

/// Decided epochs from `first` on, as they are decided, until [`EpochWatch`] is dropped.
pub struct EpochWatch {
    /// Outcomes in epoch order.
    pub outcomes: Receiver<EpochOutcome>,
    stop: Arc<AtomicBool>,
}

impl EpochWatch {
    /// Outcomes the caller sends: the supervisor's tests, standing in for a coordinator.
    #[cfg(test)]
    pub(crate) fn fed_by(outcomes: Receiver<EpochOutcome>) -> EpochWatch {
        EpochWatch {
            outcomes,
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts watching the cluster in `dir` from epoch `first`.
    pub fn start(dir: &ClusterDir, first: u64) -> Result<EpochWatch, RunError> {
        let (send, outcomes) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (dir, flag) = (dir.clone(), stop.clone());
        let runtime = runtime()?;
        std::thread::Builder::new()
            .name("epoch-watch".into())
            .spawn(move || runtime.block_on(watch(dir, first, send, flag)))
            .map_err(|e| RunError::Launch(format!("starting the epoch watcher: {e}")))?;
        Ok(EpochWatch { outcomes, stop })
    }
}

impl Drop for EpochWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Waits for each epoch's decision in turn, one call pending at a time, looking at `stop`
/// every 200 ms.
async fn watch(dir: ClusterDir, mut epoch: u64, send: Sender<EpochOutcome>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let call = coordinator_call(
            &dir,
            WaitEpoch {
                epoch,
                decision_only: false,
            },
            |_| {},
        );
        tokio::pin!(call);
        let answer = loop {
            tokio::select! {
                answer = &mut call => break answer,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                }
            }
        };
        match answer {
            Ok(outcome) => {
                if send.send(outcome).is_err() {
                    return;
                }
                epoch += 1;
            }
            // A coordinator restarting, or the cluster going down at the end: try again.
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use eckpt_cluster_api::dirs::{Deadlines, CLUSTER_FORMAT};
    use eckpt_cluster_api::msg::{CoordRequest, Hello};
    use eckpt_cluster_api::net::{accept_loop, listen_for_cluster, next_request};
    use eckpt_coding::config::CodingConfig;
    use eckpt_proto::{ClusterSecret, Endpoint};

    use super::*;

    /// A cluster directory in `root` whose coordinator takes every request and never
    /// answers, as one does whose answers a cut lost on a connection that stays up.
    fn silent_coordinator(root: &std::path::Path, deadlines: Deadlines) -> ClusterDir {
        let dir = ClusterDir::new(root).unwrap();
        std::fs::create_dir_all(dir.coordinator()).unwrap();
        let endpoint = Endpoint::Unix(dir.coordinator_socket());
        // What `cluster.json` must say; the rest takes its defaults.
        let file = serde_json::json!({
            "format": CLUSTER_FORMAT,
            "coding": CodingConfig::default(),
            "coordinator_unix": endpoint,
            "deadlines": deadlines,
        });
        std::fs::write(dir.cluster_file(), file.to_string()).unwrap();
        let secret = ClusterSecret::create_file(&dir.secret()).unwrap();
        let listening = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            runtime().unwrap().block_on(async move {
                let listener = listen_for_cluster(&endpoint, &secret, &deadlines).await.unwrap();
                listening.0.send(()).unwrap();
                accept_loop(listener, |mut conn| async move {
                    next_request::<Hello>(&mut conn).await?;
                    while next_request::<CoordRequest>(&mut conn).await?.is_some() {}
                    Ok(())
                })
                .await;
            })
        });
        listening.1.recv().unwrap();
        dir
    }

    /// A renewal whose answer never comes is abandoned after a renewal period, so that the
    /// next one goes out while the lease still runs; waiting the cluster's answer window
    /// (here 6.6 s, against a lease of 1 s) lets the lease of a live job expire.
    #[test]
    fn a_renewal_left_unanswered_fails_within_a_renewal_period() {
        let root = tempfile::tempdir().unwrap();
        let deadlines = Deadlines {
            liveness_ms: 600,
            lease_ms: 1_000,
            partition_grace_ms: 6_000,
            ..Deadlines::default()
        };
        let cluster = Cluster::new(&silent_coordinator(root.path(), deadlines)).unwrap();
        let started = Instant::now();
        let e = cluster.renew_lease(1).unwrap_err();
        let waited = started.elapsed();
        assert!(
            waited >= deadlines.lease_renewal() && waited < deadlines.lease(),
            "{waited:?}"
        );
        assert!(e.to_string().contains("did not answer within 0.2 s"), "{e}");
    }
}
