//! Light ranks: what a rank of a job does through the rank library in cluster mode —
//! open an epoch with the coordinator, write its image into the store of the node it was
//! placed on, report it ready, wait for the decision — without the library's memory
//! tracking, as tasks of a simulated host. Images are drawn from the run's seed, the rank
//! and the epoch, so that any epoch's bytes can be checked again later.

use anyhow::{bail, Context, Result};
use eckpt_cluster_api::commands::CoordinatorLink;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{Locate, OpenEpoch, RankReady, RankReport, WaitEpoch};
use eckpt_store::{Options, Store};

/// The store item a light rank's image is.
const ITEM: &str = "image";

/// The image of `rank` at `epoch` in the run of `seed`: `bytes` long.
pub fn image(seed: u64, rank: u32, epoch: u64, bytes: usize) -> Vec<u8> {
    let mut state = seed ^ (u64::from(rank) << 40) ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = Vec::with_capacity(bytes + 8);
    while out.len() < bytes {
        // splitmix64: a different stream per (seed, rank, epoch), cheap and reproducible.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(bytes);
    out
}

/// One rank of a job of `world` ranks.
pub struct Rank {
    rank: u32,
    world: u32,
    link: CoordinatorLink,
    retry: std::time::Duration,
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
    /// Rank `rank` of `world`, reaching the coordinator of `dir`.
    pub fn new(dir: &ClusterDir, rank: u32, world: u32) -> Result<Rank> {
        let retry = dir.load()?.deadlines.coordinator_retry();
        Ok(Rank {
            rank,
            world,
            link: CoordinatorLink::new(dir)?,
            retry,
        })
    }

    /// Writes the rank's next epoch (its image drawn from `seed`, `bytes` long) and waits
    /// for the cluster's decision on it.
    pub async fn checkpoint(&mut self, seed: u64, bytes: usize) -> Result<Checkpointed> {
        let rank = self.rank;
        let opened = self
            .link
            .call_retrying(
                OpenEpoch {
                    rank,
                    world: self.world,
                    node: None,
                    epoch: None,
                    generation: None,
                },
                self.retry,
            )
            .await
            .with_context(|| format!("rank {rank}: opening an epoch"))?;
        let epoch = opened.epoch;
        let store = Store::open_with(&opened.node.store, Options::default())?;
        let mut writer = store.writer(rank, epoch)?;
        writer.put_full(ITEM, &image(seed, rank, epoch, bytes))?;
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
            generation: None,
        };
        self.link
            .call_retrying(ready, self.retry)
            .await
            .with_context(|| format!("rank {rank}: epoch {epoch} ready"))?;
        let outcome = self
            .link
            .call_retrying(
                WaitEpoch {
                    epoch,
                    decision_only: true,
                },
                self.retry,
            )
            .await
            .with_context(|| format!("rank {rank}: waiting for epoch {epoch}"))?;
        Ok(Checkpointed {
            epoch,
            committed: outcome.committed,
        })
    }

    /// Reads the rank's newest committed image from the node the coordinator says holds it
    /// and checks it byte for byte against the image of that epoch: the epoch.
    pub async fn restore(&mut self, seed: u64, bytes: usize) -> Result<Option<u64>> {
        let rank = self.rank;
        let located = self
            .link
            .call_retrying(
                Locate {
                    rank,
                    world: self.world,
                    generation: None,
                },
                self.retry,
            )
            .await
            .with_context(|| format!("rank {rank}: locating its checkpoint"))?;
        let Some((node, epoch)) = located else {
            return Ok(None);
        };
        let store = Store::open_with(&node.store, Options::default())?;
        let mut read = vec![0u8; bytes];
        store
            .read_item_into(rank, epoch, ITEM, &mut read)
            .with_context(|| format!("rank {rank}: reading epoch {epoch} on {}", node.name))?;
        if read != image(seed, rank, epoch, bytes) {
            bail!(
                "rank {rank}: epoch {epoch} on {} is not the image it wrote",
                node.name
            );
        }
        Ok(Some(epoch))
    }
}
