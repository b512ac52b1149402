//! What `eckpt run` asks of the cluster's coordinator: its state, the agents, a recovery
//! (the same request `eckpt recover` sends), and a stream of decided epochs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use eckpt_cluster_api::commands::coordinator_call;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{
    CoordRequest, CoordResponse, EpochOutcome, FlushReport, FlushStatus, JobClaim, JobGrant, NodeInfo,
    RecoveryReport, Relocation, StatusReport,
};
use eckpt_cluster_api::ClusterError;

use crate::RunError;

/// A connection-per-call client of one cluster's coordinator.
pub struct Cluster {
    dir: ClusterDir,
    runtime: tokio::runtime::Runtime,
}

fn runtime() -> Result<tokio::runtime::Runtime, RunError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Launch(format!("starting a runtime: {e}")))
}

fn unexpected(other: CoordResponse) -> RunError {
    RunError::Cluster(ClusterError::Protocol(format!("unexpected answer {other:?}")))
}

impl Cluster {
    /// The cluster in `dir`.
    pub fn new(dir: &ClusterDir) -> Result<Cluster, RunError> {
        Ok(Cluster {
            dir: dir.clone(),
            runtime: runtime()?,
        })
    }

    /// The cluster directory.
    pub fn dir(&self) -> &ClusterDir {
        &self.dir
    }

    fn call(&self, request: &CoordRequest) -> Result<CoordResponse, RunError> {
        Ok(self
            .runtime
            .block_on(coordinator_call(&self.dir, request, |_| {}))?)
    }

    /// `eckpt status`.
    pub fn status(&self) -> Result<StatusReport, RunError> {
        match self.call(&CoordRequest::Status)? {
            CoordResponse::Status(s) => Ok(*s),
            other => Err(unexpected(other)),
        }
    }

    /// The alive agents by name.
    pub fn nodes(&self) -> Result<BTreeMap<String, NodeInfo>, RunError> {
        match self.call(&CoordRequest::Nodes)? {
            CoordResponse::Nodes(nodes) => Ok(nodes.into_iter().map(|n| (n.name.clone(), n)).collect()),
            other => Err(unexpected(other)),
        }
    }

    /// Waits until no flush is running: the flushing then (`None`: the cluster does not
    /// flush).
    pub fn wait_flush(&self) -> Result<Option<FlushStatus>, RunError> {
        match self.call(&CoordRequest::WaitFlush)? {
            CoordResponse::FlushState(state) => Ok(state),
            other => Err(unexpected(other)),
        }
    }

    /// `eckpt flush`: copies the newest committed epoch to the flush directory and waits
    /// for it.
    pub fn flush_now(&self) -> Result<FlushReport, RunError> {
        match self.call(&CoordRequest::Flush { epoch: None })? {
            CoordResponse::Flushed(report) => Ok(report),
            other => Err(unexpected(other)),
        }
    }

    /// `eckpt recover`: decode what is lost, place its ranks, restore redundancy — or
    /// restart from the flush when the node level cannot serve.
    pub fn recover(&self, relocation: Relocation) -> Result<RecoveryReport, RunError> {
        match self.call(&CoordRequest::Recover { relocation })? {
            CoordResponse::Recovered(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// `eckpt leave`: stops `node`'s agent on purpose (the batch system took the host
    /// away); the next recovery rebuilds what it held elsewhere.
    pub fn leave(&self, node: &str) -> Result<(), RunError> {
        match self.call(&CoordRequest::Leave {
            node: node.to_string(),
        })? {
            CoordResponse::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

impl Cluster {
    /// Claims the job's lease (refused while another supervisor holds it).
    pub fn claim_job(&self, claim: JobClaim) -> Result<JobGrant, RunError> {
        match self.call(&CoordRequest::ClaimJob(claim))? {
            CoordResponse::JobGranted(grant) => Ok(grant),
            other => Err(unexpected(other)),
        }
    }

    /// Renews the lease of `generation`.
    pub fn renew_lease(&self, generation: u64) -> Result<(), RunError> {
        match self.call(&CoordRequest::RenewLease { generation })? {
            CoordResponse::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The generation of the next attempt.
    pub fn next_attempt(&self, generation: u64) -> Result<u64, RunError> {
        match self.call(&CoordRequest::NextAttempt { generation })? {
            CoordResponse::Generation(next) => Ok(next),
            other => Err(unexpected(other)),
        }
    }

    /// Gives the lease up; `finished`: every rank exited 0.
    pub fn release_job(&self, generation: u64, finished: bool) -> Result<(), RunError> {
        match self.call(&CoordRequest::ReleaseJob { generation, finished })? {
            CoordResponse::Ok => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

/// Decided epochs from `first` on, as they are decided, until [`EpochWatch`] is dropped.
pub struct EpochWatch {
    /// Outcomes in epoch order.
    pub outcomes: Receiver<EpochOutcome>,
    stop: Arc<AtomicBool>,
}

impl EpochWatch {
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
        let request = CoordRequest::WaitEpoch { epoch };
        let call = coordinator_call(&dir, &request, |_| {});
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
            Ok(CoordResponse::Outcome(outcome)) => {
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
