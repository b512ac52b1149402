//! Cluster mode: a rank whose configuration names a cluster directory writes its epochs
//! into the store of the node the coordinator placed it on, reports them ready, and lets
//! the node agents erasure-code them; restart reads from wherever the rank lives now (after
//! a recovery, possibly another node).

use std::path::Path;

use eckpt_cluster_api::commands::coordinator_call;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{
    CoordRequest, CoordResponse, EpochOutcome, NodeInfo, PaceReport, PaceStats, RankReport,
};

use crate::Error;

/// A rank's link to its cluster's coordinator.
pub(crate) struct ClusterLink {
    dir: ClusterDir,
    world: u32,
    runtime: tokio::runtime::Runtime,
}

impl ClusterLink {
    pub(crate) fn new(dir: &Path, world: u32) -> Result<ClusterLink, Error> {
        let dir = ClusterDir::new(dir)?;
        dir.load()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Cluster(format!("starting the I/O runtime: {e}")))?;
        Ok(ClusterLink { dir, world, runtime })
    }

    fn call(&self, request: CoordRequest) -> Result<CoordResponse, Error> {
        Ok(self
            .runtime
            .block_on(coordinator_call(&self.dir, &request, |_| {}))?)
    }

    /// The epoch to write next, the node (store root) to write it to, and the job's pace as
    /// of the previous epoch; waits while the rank's previous epoch is undecided. `launched_on`
    /// (the node the launcher started the rank on) must be where the rank lives.
    pub(crate) fn open_epoch(
        &self,
        rank: u32,
        launched_on: Option<&str>,
    ) -> Result<(u64, NodeInfo, Option<PaceStats>), Error> {
        match self.call(CoordRequest::OpenEpoch {
            rank,
            world: self.world,
            node: launched_on.map(String::from),
            epoch: None,
        })? {
            CoordResponse::Opened { epoch, node, pace } => Ok((epoch, node, pace)),
            other => Err(Error::Cluster(format!("unexpected answer {other:?}"))),
        }
    }

    /// Reports the rank's epoch prepared on `node`, with its sizes and pace.
    pub(crate) fn ready(&self, rank: u32, epoch: u64, node: &str, report: RankReport) -> Result<(), Error> {
        self.call(CoordRequest::RankReady {
            rank,
            epoch,
            node: node.to_string(),
            report,
        })?;
        Ok(())
    }

    /// Meets every rank of launch `launch` at pace point `round`; the job's pace.
    pub(crate) fn pace(
        &self,
        rank: u32,
        launch: &str,
        round: u64,
        report: PaceReport,
    ) -> Result<PaceStats, Error> {
        match self.call(CoordRequest::Pace {
            rank,
            world: self.world,
            launch: launch.to_string(),
            round,
            report,
        })? {
            CoordResponse::Paced(pace) => Ok(pace),
            other => Err(Error::Cluster(format!("unexpected answer {other:?}"))),
        }
    }

    /// The node holding the rank's latest committed epoch, and that epoch; `None` when the
    /// cluster has none. The coordinator refuses (an error) when the rank's node is down or
    /// the job size is not the checkpointed one.
    pub(crate) fn locate(&self, rank: u32) -> Result<Option<(NodeInfo, u64)>, Error> {
        match self.call(CoordRequest::Locate {
            rank,
            world: self.world,
        })? {
            CoordResponse::Located(found) => Ok(found),
            other => Err(Error::Cluster(format!("unexpected answer {other:?}"))),
        }
    }

    /// Waits until `epoch` is committed or aborted.
    pub(crate) fn wait(&self, epoch: u64) -> Result<EpochOutcome, Error> {
        match self.call(CoordRequest::WaitEpoch { epoch })? {
            CoordResponse::Outcome(o) => Ok(o),
            other => Err(Error::Cluster(format!("unexpected answer {other:?}"))),
        }
    }
}
