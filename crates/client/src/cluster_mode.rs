//! Cluster mode: a rank whose configuration names a cluster directory writes its epochs
//! into the store of the node the coordinator placed it on, reports them ready, and lets
//! the node agents erasure-code them; restart reads from wherever the rank lives now (after
//! a recovery, possibly another node).
//!
//! Every request carries the rank's attempt generation when `eckpt run` started it
//! (`ECKPT_GENERATION`). A coordinator that cannot be reached (restarting, cut off for a
//! while) is tried again for the cluster's retry window; every call is bounded. A rank of
//! a superseded attempt — the coordinator refuses its generation — ends itself at once: it
//! must not go on computing and appending to its files beside the attempt that replaced it.

use std::path::Path;
use std::time::Duration;

use eckpt_cluster_api::call::ToCoordinator;
use eckpt_cluster_api::commands::{export_items, CoordinatorLink};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{
    CheckCopy, EpochOutcome, Locate, NodeInfo, OpenEpoch, Opened, Pace, PaceReport, PaceStats, RankReady,
    RankReport, WaitEpoch,
};
use eckpt_cluster_api::{ClusterError, ErrorKind};

use crate::{Error, Items};

/// A rank's link to its cluster's coordinator.
pub(crate) struct ClusterLink {
    dir: ClusterDir,
    world: u32,
    /// The attempt this rank belongs to (`None`: not started by `eckpt run`).
    generation: Option<u64>,
    /// How long an unreachable coordinator is tried again.
    retry: Duration,
    /// How long the coordinator may keep a request waiting for the other ranks.
    open_wait: Duration,
    /// The connection kept between the rank's requests.
    coordinator: std::sync::Mutex<CoordinatorLink>,
    runtime: tokio::runtime::Runtime,
}

/// Ends this process: a rank of an attempt that a newer one replaced, or whose supervisor is
/// gone. SIGKILL, so that nothing buffered reaches the rank's files on the way out.
fn end_superseded_rank(rank: u32, why: &ClusterError) -> ! {
    eprintln!("eckpt: rank {rank}: {why}; this rank's attempt is over: exiting");
    // SAFETY: kill(2) of this very process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    unreachable!("SIGKILL ends the process")
}

impl ClusterLink {
    pub(crate) fn new(dir: &Path, world: u32, generation: Option<u64>) -> Result<ClusterLink, Error> {
        let dir = ClusterDir::new(dir)?;
        let deadlines = dir.load()?.deadlines;
        let (retry, open_wait) = (deadlines.coordinator_retry(), deadlines.open_wait());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Cluster(format!("starting the I/O runtime: {e}")))?;
        Ok(ClusterLink {
            coordinator: std::sync::Mutex::new(CoordinatorLink::new(&dir)?),
            dir,
            world,
            generation,
            retry,
            open_wait,
            runtime,
        })
    }

    /// One request for `rank`: retried while the coordinator cannot be reached (within the
    /// retry window), bounded as a whole; a refused generation ends the process.
    fn call<C: ToCoordinator>(&self, rank: u32, request: C) -> Result<C::Answer, Error> {
        let limit = self.open_wait + 2 * self.retry;
        let mut coordinator = self.coordinator.lock().unwrap_or_else(|e| e.into_inner());
        let call = coordinator.call_retrying(request, self.retry);
        let answer = self
            .runtime
            .block_on(async { tokio::time::timeout(limit, call).await })
            .unwrap_or_else(|_| {
                Err(ClusterError::Unreachable(format!(
                    "the coordinator did not answer within {} s",
                    limit.as_secs()
                )))
            });
        match answer {
            Err(e) if e.kind() == ErrorKind::Fenced && self.generation.is_some() => {
                end_superseded_rank(rank, &e)
            }
            answer => Ok(answer?),
        }
    }

    /// The epoch to write next, the node (store root) to write it to, and the job's pace as
    /// of the previous epoch; waits while the rank's previous epoch is undecided. `launched_on`
    /// (the node the launcher started the rank on) must be where the rank lives.
    pub(crate) fn open_epoch(
        &self,
        rank: u32,
        launched_on: Option<&str>,
    ) -> Result<(u64, NodeInfo, Option<PaceStats>), Error> {
        let open = OpenEpoch {
            rank,
            world: self.world,
            node: launched_on.map(String::from),
            epoch: None,
            generation: self.generation,
        };
        let Opened { epoch, node, pace } = self.call(rank, open)?;
        Ok((epoch, node, pace))
    }

    /// Reports the rank's epoch prepared on `node`, with its sizes and pace.
    pub(crate) fn ready(&self, rank: u32, epoch: u64, node: &str, report: RankReport) -> Result<(), Error> {
        self.call(
            rank,
            RankReady {
                rank,
                epoch,
                node: node.to_string(),
                report,
                generation: self.generation,
            },
        )
    }

    /// Meets every rank of launch `launch` at pace point `round`; the job's pace.
    pub(crate) fn pace(
        &self,
        rank: u32,
        launch: &str,
        round: u64,
        report: PaceReport,
    ) -> Result<PaceStats, Error> {
        self.call(
            rank,
            Pace {
                rank,
                world: self.world,
                launch: launch.to_string(),
                round,
                report,
                generation: self.generation,
            },
        )
    }

    /// The node holding the rank's latest committed epoch, and that epoch; `None` when the
    /// cluster has none. The coordinator refuses (an error) when the rank's node is down or
    /// the job size is not the checkpointed one.
    pub(crate) fn locate(&self, rank: u32) -> Result<Option<(NodeInfo, u64)>, Error> {
        self.call(
            rank,
            Locate {
                rank,
                world: self.world,
                generation: self.generation,
            },
        )
    }

    /// Has the coordinator check rank `rank`'s copy on its node, which failed its checksums
    /// here: what is wrong with it (the node is then marked damaged), or `None` when the
    /// node's agent reads it back sound.
    pub(crate) fn check_copy(&self, rank: u32) -> Result<Option<String>, Error> {
        self.call(rank, CheckCopy { rank })
    }

    /// The items of rank `rank`'s committed image at `epoch` (default: the committed one)
    /// that `wanted` keeps, read from its node or decoded from its group
    /// ([`export_items`]); and the epoch. Not bounded as a whole: its every step is (the
    /// coordinator's answer by the cluster's answer deadline, each of the agent's frames by
    /// the peer wait).
    pub(crate) fn export_items(
        &self,
        rank: u32,
        epoch: Option<u64>,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<(u64, Items), Error> {
        Ok(self
            .runtime
            .block_on(export_items(&self.dir, rank, epoch, wanted))?)
    }

    /// Waits until `rank`'s `epoch` is committed or aborted.
    pub(crate) fn wait(&self, rank: u32, epoch: u64) -> Result<EpochOutcome, Error> {
        self.call(
            rank,
            WaitEpoch {
                epoch,
                decision_only: true,
            },
        )
    }
}
