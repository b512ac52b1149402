//! Light ranks: what a rank of a job does through the rank library in cluster mode —
//! open an epoch with the coordinator, write its image into the store of the node it was
//! placed on (the blocks that changed, as the library's memory tracking finds them, or the
//! whole image, as it writes files and items), report it ready, wait for the decision — as
//! tasks of a simulated host. Images are drawn from the run's seed, the rank
//! and the epoch, so that any epoch's bytes can be checked again later; an epoch a restart
//! from a flush made holds the images of the flushed epoch ([`Restarts`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use eckpt_cluster_api::call::ToCoordinator;
use eckpt_cluster_api::commands::{export_items, CoordinatorLink};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{FlushRestore, OpenEpoch, RankReady, RankReport, WaitEpoch};
use eckpt_store::{Options, Store};

use crate::lease::Generation;

/// The store item a light rank's image is.
pub(crate) const ITEM: &str = "image";

/// Bytes of an image that change together from epoch to epoch.
const BLOCK: usize = 4096;

/// The image of `rank` at `epoch` in the run of `seed`: `bytes` long. Each block of it
/// changes at an epoch with a chance of one in three (all of them at epoch 1), so that the
/// incremental modes have both changed and unchanged blocks to encode.
pub fn image(seed: u64, rank: u32, epoch: u64, bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 8);
    for block in 0..bytes.div_ceil(BLOCK) as u64 {
        let written = (1..=epoch.max(1))
            .rev()
            .find(|&e| e == 1 || mix(seed ^ mix(u64::from(rank) << 32 | block) ^ mix(e)).is_multiple_of(3))
            .unwrap_or(1);
        let mut state = mix(seed ^ (u64::from(rank) << 40) ^ (block << 20) ^ written);
        let end = (out.len() + BLOCK).min(bytes);
        while out.len() < end {
            state = mix(state);
            out.extend_from_slice(&state.to_le_bytes());
        }
        out.truncate(end);
    }
    out
}

/// splitmix64's finalizer: a reproducible stream per seed, rank, block and epoch.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_reproducible_and_changes_in_some_blocks_only() {
        let bytes = 64 * BLOCK + 100;
        let one = image(7, 2, 5, bytes);
        assert_eq!(one.len(), bytes);
        assert_eq!(one, image(7, 2, 5, bytes));
        assert_ne!(one, image(8, 2, 5, bytes));
        assert_ne!(one, image(7, 3, 5, bytes));
        let next = image(7, 2, 6, bytes);
        let changed = (0..65)
            .filter(|b| {
                one[b * BLOCK..((b + 1) * BLOCK).min(bytes)] != next[b * BLOCK..((b + 1) * BLOCK).min(bytes)]
            })
            .count();
        assert!(changed > 5 && changed < 60, "{changed} of 65 blocks changed");
    }
}

/// The epochs that restarts of the job from its flush made, each with the flushed epoch
/// whose images it holds: shared by the job's ranks, as a relaunched application resumes
/// from the state it read back.
pub type Restarts = Rc<RefCell<BTreeMap<u64, u64>>>;

/// One rank of a job of `world` ranks.
pub struct Rank {
    rank: u32,
    world: u32,
    /// The generation of the job's lease holder, which the rank's requests carry.
    generation: Generation,
    /// The job's restarts from its flush.
    restarts: Restarts,
    link: CoordinatorLink,
    retry: Duration,
    /// The most one call may take, retries included (as the rank library bounds it).
    limit: Duration,
    /// The newest epoch of this rank it saw committed: what its tracked memory's changes
    /// are relative to.
    last_committed: Option<u64>,
}

/// What one checkpoint of a rank came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpointed {
    /// The epoch written.
    pub epoch: u64,
    /// Whether the cluster committed it.
    pub committed: bool,
}

impl Rank {
    /// Rank `rank` of `world`, reaching the coordinator of `dir`, of the attempt whose
    /// generation `generation` holds, of the job restarted from its flush as `restarts` say.
    pub fn new(
        dir: &ClusterDir,
        rank: u32,
        world: u32,
        generation: Generation,
        restarts: Restarts,
    ) -> Result<Rank> {
        let deadlines = dir.load()?.deadlines;
        let retry = deadlines.coordinator_retry();
        Ok(Rank {
            rank,
            world,
            generation,
            restarts,
            link: CoordinatorLink::new(dir)?,
            retry,
            limit: deadlines.open_wait() + 2 * retry,
            last_committed: None,
        })
    }

    /// One request, retried while the coordinator cannot be reached, bounded as a whole.
    async fn call<C: ToCoordinator + Clone>(&mut self, call: C) -> Result<C::Answer> {
        let what = format!("{:?}", call.clone().request());
        let answer = tokio::time::timeout(self.limit, self.link.call_retrying(call, self.retry))
            .await
            .map_err(|_| anyhow!("rank {}: no answer to {what} within {:?}", self.rank, self.limit))?;
        Ok(answer?)
    }

    /// Writes the rank's next epoch (its image drawn from `seed`, `bytes` long) and waits
    /// for the cluster's decision on it.
    pub async fn checkpoint(&mut self, seed: u64, bytes: usize) -> Result<Checkpointed> {
        let rank = self.rank;
        let opened = self
            .call(OpenEpoch {
                rank,
                world: self.world,
                node: None,
                epoch: None,
                generation: self.generation.get(),
            })
            .await
            .with_context(|| format!("rank {rank}: opening an epoch"))?;
        let epoch = opened.epoch;
        tracing::debug!(rank, epoch, node = %opened.node.name, "rank opened an epoch");
        let store = Store::open_with(&opened.node.store, Options::default())?;
        let mut writer = store.writer_of_every_item(rank, epoch)?;
        let new = image(seed, rank, epoch, bytes);
        // Even ranks write as the rank library writes tracked memory: the blocks that changed
        // since the epoch the new one follows, nothing read back from the store — when that
        // epoch is the last this rank saw committed, or one a restart it knows of made. A
        // parent it does not know (a restart from the flush whose answer the job never got)
        // is compared in full, as the library's resync does. Odd ranks as it writes files and
        // named items, known in full: the store compares them with the previous epoch and
        // keeps the blocks that differ.
        let known = |parent: &u64| {
            Some(*parent) == self.last_committed || self.restarts.borrow().contains_key(parent)
        };
        match writer
            .parent()
            .filter(|parent| !writer.is_full() && rank.is_multiple_of(2) && known(parent))
        {
            Some(parent) => {
                let old = self.image_of(seed, parent, bytes);
                let changed: Vec<(u64, &[u8])> = new
                    .chunks(BLOCK)
                    .zip(old.chunks(BLOCK))
                    .enumerate()
                    .filter(|(_, (now, before))| now != before)
                    .map(|(b, (now, _))| (b as u64, now))
                    .collect();
                writer.put_dirty(ITEM, BLOCK as u32, bytes as u64, &changed)?;
            }
            None => writer.put_full(ITEM, &new)?,
        }
        let prepared = writer.prepare()?;
        let sizes = prepared.sizes();
        // Released prepared, the epoch is the node's agent's to commit.
        drop(prepared);
        let report = RankReport {
            image_bytes: sizes.image_bytes,
            stored_bytes: sizes.stored_bytes,
            pace: None,
        };
        let ready = RankReady {
            rank,
            epoch,
            node: opened.node.name.clone(),
            report,
            generation: self.generation.get(),
        };
        self.call(ready)
            .await
            .with_context(|| format!("rank {rank}: epoch {epoch} ready"))?;
        tracing::debug!(rank, epoch, "rank ready");
        let outcome = self
            .call(WaitEpoch {
                epoch,
                decision_only: true,
            })
            .await
            .with_context(|| format!("rank {rank}: waiting for epoch {epoch}"))?;
        if outcome.committed {
            self.last_committed = Some(epoch);
        }
        Ok(Checkpointed {
            epoch,
            committed: outcome.committed,
        })
    }

    /// The image this rank's `epoch` holds: the one drawn for it, or for the flushed epoch
    /// whose images a restart from the flush made it hold.
    fn image_of(&self, seed: u64, epoch: u64, bytes: usize) -> Vec<u8> {
        let drawn_for = self.restarts.borrow().get(&epoch).copied().unwrap_or(epoch);
        image(seed, self.rank, drawn_for, bytes)
    }

    /// Reads the rank's newest committed image back as a restart does when its node may be
    /// gone — exported by the coordinator, from the node that holds it or decoded from its
    /// group — and checks it byte for byte against the image that epoch holds: the epoch.
    pub async fn restore(&mut self, dir: &ClusterDir, seed: u64, bytes: usize) -> Result<u64> {
        let (epoch, read) = self.read_back(dir).await?;
        if read != self.image_of(seed, epoch, bytes) {
            bail!("rank {}: epoch {epoch} is not the image it wrote", self.rank);
        }
        Ok(epoch)
    }

    /// Reads the rank's newest committed image back, as [`Rank::restore`], once the job was
    /// restarted from its flush (`restart`, among the job's restarts): it must be the epoch
    /// the restart made, holding the image the rank wrote for the flushed epoch.
    pub async fn restore_restarted(
        &mut self,
        dir: &ClusterDir,
        seed: u64,
        bytes: usize,
        restart: &FlushRestore,
    ) -> Result<()> {
        let epoch = self.restore(dir, seed, bytes).await?;
        if epoch != restart.epoch {
            bail!(
                "rank {}: epoch {epoch} read back, where the restart from flushed epoch {} made epoch {}",
                self.rank,
                restart.flushed_epoch,
                restart.epoch
            );
        }
        Ok(())
    }

    /// The rank's newest committed epoch and its image, exported by the coordinator.
    async fn read_back(&mut self, dir: &ClusterDir) -> Result<(u64, Vec<u8>)> {
        let rank = self.rank;
        let exported = tokio::time::timeout(self.limit, export_items(dir, rank, None, |name| name == ITEM))
            .await
            .map_err(|_| anyhow!("rank {rank}: its export did not end within {:?}", self.limit))?;
        let (epoch, items) = exported.with_context(|| format!("rank {rank}: exporting its checkpoint"))?;
        let read = items
            .into_iter()
            .find(|(name, _)| name == ITEM)
            .map(|(_, content)| content)
            .ok_or_else(|| anyhow!("rank {rank}: epoch {epoch} has no {ITEM}"))?;
        Ok((epoch, read))
    }
}
