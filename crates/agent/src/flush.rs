//! An agent's part of the last checkpoint level: copying the committed images of the ranks
//! it hosts into a flush's staging directory on shared storage (pinned in the node store
//! while copied, paced to `--flush-rate`, on a blocking thread so the node keeps serving
//! epochs meanwhile), and preparing flushed images as a new epoch when the cluster restarts
//! from a flush.

use std::path::Path;
use tokio::time::Instant;

use eckpt_cluster_api::msg::FlushPart;
use eckpt_cluster_api::ClusterError;
use eckpt_flush::{FlushDir, Pacer, RankWriter};
use eckpt_store::StoreError;

use super::Agent;
use eckpt_daemon::debug::{pause_point, Phase};

impl Agent {
    /// Copies committed `epoch` of each of `ranks`, deltas resolved, to `staging`, at most
    /// `rate` bytes per second: each rank's items in a file of their own, checksummed and
    /// fsynced. The epoch stays pinned in the store (retention keeps it) until every rank
    /// is written. Blocking: file I/O and checksums.
    pub fn flush(
        &self,
        epoch: u64,
        ranks: &[u32],
        staging: &Path,
        rate: Option<u64>,
    ) -> Result<FlushPart, ClusterError> {
        let started = Instant::now();
        let mut pins = Vec::with_capacity(ranks.len());
        for &rank in ranks {
            pins.push(self.store.pin(rank, epoch).map_err(|e| match e {
                StoreError::NoEpoch { .. } => ClusterError::NotFound(format!(
                    "rank {rank} epoch {epoch} is not in the store of {} (committed epochs: {:?}): it cannot be flushed",
                    self.info.name,
                    self.store.list_epochs(rank).unwrap_or_default()
                )),
                e => e.into(),
            })?);
        }
        let mut pacer = Pacer::new(rate);
        let mut written = Vec::with_capacity(ranks.len());
        for &rank in ranks {
            let manifest = self.store.manifest(rank, epoch)?;
            let mut writer = RankWriter::create(staging, rank)?;
            for item in &manifest.items {
                let mut reader = self.store.item_reader(rank, epoch, &item.name)?;
                writer.item(&item.name, item.len, &mut reader, &mut pacer)?;
            }
            written.push(writer.finish()?);
            pause_point(&self.dir.debug(), Phase::MidFlush, &self.info.name);
        }
        drop(pins);
        Ok(FlushPart {
            ranks: written,
            bytes: pacer.bytes(),
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    /// Prepares flushed epoch `epoch` of each of `ranks`, read from the flush directory
    /// `flush` with every block verified, as this node's epoch `as_epoch`: a self-contained
    /// full image per rank, committed (or aborted) on the coordinator's decision. Blocking.
    pub fn import_flushed(
        &self,
        flush: &Path,
        epoch: u64,
        as_epoch: u64,
        ranks: &[u32],
    ) -> Result<(), ClusterError> {
        let flushed = FlushDir::new(flush).open(epoch)?;
        for &rank in ranks {
            let entry = flushed.manifest().rank(rank).ok_or_else(|| {
                ClusterError::NotFound(format!(
                    "flushed epoch {epoch} has no rank {rank} (its job had {} ranks)",
                    flushed.manifest().world
                ))
            })?;
            let mut writer = self.store.image_writer(rank, as_epoch)?;
            for item in &entry.items {
                let bytes = flushed.read_item(rank, &item.name)?;
                writer.put_full(&item.name, &bytes)?;
            }
            // The prepared epoch stays on disk, its lock released, for the decision.
            drop(writer.prepare()?);
        }
        Ok(())
    }
}
