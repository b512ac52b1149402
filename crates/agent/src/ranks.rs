//! What an agent does with ranks' epochs and coded objects on request: take checkpoints
//! in, describe its shard, commit or abort as decided, verify, rebuild, export.

use std::sync::Arc;

use eckpt_store::{Store, StoreError};

use super::frames::Frames;
use super::install::{self, Rebuilt, StoreImages};
use super::{blocking, Agent};
use crate::shard::node_items;
use crate::stripe_blob::{parse_stripe_blob, StripePlan};
use eckpt_cluster_api::msg::{Damage, Deliver, DescribeRequest, Inventory, NodeInfo, ShardInfo};
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::Mode;
use eckpt_coding::ObjectId;

impl Agent {
    /// Writes the `len` bytes of `item` that `frames` brings as the prepared epoch of `rank`
    /// (a delta against its last committed epoch where blocks match), a window at a time:
    /// each window's blocks are checksummed and written before the next is taken in, so an
    /// item of any size costs a window of memory.
    pub fn put_rank(
        &self,
        rank: u32,
        epoch: u64,
        item: &str,
        len: u64,
        frames: &mut Frames,
    ) -> Result<(), ClusterError> {
        let mut writer = self.store.writer(rank, epoch)?;
        // The store's own error for a source that failed says nothing of why: the frames'
        // error is kept and reported instead.
        let mut failure = None;
        let written = writer.put_full_from(item, len, &mut |_, window| {
            frames.fill(window).map_err(|e| {
                failure = Some(e);
                StoreError::Invalid(format!("rank {rank}'s item {item:?} was not received"))
            })
        });
        if let Some(e) = failure {
            return Err(e);
        }
        written?;
        // Dropping the prepared epoch releases the rank's lock; the epoch stays prepared
        // on disk until the coordinator's decision arrives.
        drop(writer.prepare()?);
        Ok(())
    }

    /// Answers a [`DescribeRequest`]: the shard's layout and length (image modes), or the
    /// stripe blob planned under the new object, and its length (stripe mode; the encode
    /// writes it).
    pub fn describe(&self, req: &DescribeRequest) -> Result<ShardInfo, ClusterError> {
        match req.mode {
            Mode::Stripe => {
                // Planned only: the encode writes the blob as it reads it.
                let plan = StripePlan {
                    ranks: req.ranks.clone(),
                    epoch: req.epoch,
                    complete: req.complete,
                };
                let len = plan.len(&self.store)?;
                self.coded.put_blob_plan(req.object, &plan)?;
                Ok(ShardInfo {
                    len,
                    layout: ShardLayout::default(),
                    updatable: false,
                    changed: 0,
                })
            }
            Mode::Full | Mode::Update => {
                let items = node_items(&self.store, &req.ranks, req.epoch)?;
                if let Some((layout, version)) = &req.update_from {
                    let parents_match = req.ranks.iter().all(|&r| {
                        self.store
                            .view(r, req.epoch)
                            .is_ok_and(|v| v.manifest().parent == Some(*version))
                    });
                    if let Some(refit) = layout.refit(&items).filter(|_| parents_match) {
                        let mut changed = 0;
                        for &r in &req.ranks {
                            changed += self.store.view(r, req.epoch)?.manifest().data_len;
                        }
                        return Ok(ShardInfo {
                            len: refit.len(),
                            layout: refit,
                            updatable: true,
                            changed,
                        });
                    }
                }
                let layout = ShardLayout::pack(&items);
                Ok(ShardInfo {
                    len: layout.len(),
                    layout,
                    updatable: false,
                    changed: 0,
                })
            }
        }
    }

    /// Applies the coordinator's commit decision; idempotent.
    pub fn commit(
        &self,
        epoch: u64,
        ranks: &[u32],
        objects: &[(ObjectId, Option<u64>)],
        keep: &[ObjectId],
    ) -> Result<(), ClusterError> {
        for &rank in ranks {
            if self.store.prepared_epochs(rank)?.contains(&epoch) {
                self.store.resume_prepared(rank, epoch)?.commit()?;
            } else if self.store.latest_committed(rank)? < Some(epoch) {
                return Err(ClusterError::NotFound(format!(
                    "rank {rank} has no epoch {epoch} to commit"
                )));
            }
        }
        for &(id, version) in objects {
            self.coded.commit(id)?;
            if let Some(v) = version {
                self.coded.settle(id, v)?;
            }
        }
        self.coded.retain(keep)
    }

    /// Applies the coordinator's abort decision: prepared rank epochs, prepared objects and
    /// staged updates of `epoch` go.
    pub fn abort(&self, epoch: u64) -> Result<(), ClusterError> {
        for rank in self.store.ranks()? {
            if self.store.prepared_epochs(rank)?.contains(&epoch) {
                self.store.resume_prepared(rank, epoch)?.abort()?;
            }
        }
        for (id, _) in self.coded.objects()? {
            if id.epoch == epoch {
                self.coded.abort(id)?;
            }
            self.coded.drop_update(id, epoch)?;
        }
        Ok(())
    }

    /// Brings local state in line with the coordinator after a restart: prepared rank
    /// epochs up to `committed` are committed, later ones aborted; the staged update of each
    /// object's committed version applied, every other dropped
    /// ([`ParityStore::settle`](crate::parity_store::ParityStore::settle) and the newer
    /// ones); objects not kept removed.
    pub fn resolve(
        &self,
        committed: u64,
        keep: &[ObjectId],
        versions: &[(ObjectId, u64)],
    ) -> Result<(), ClusterError> {
        // A prepared epoch or object that cannot be resolved (damaged: a manifest the
        // prepared epoch builds on) is left as it is and the rest resolved: the node then registers
        // holding less than the journal says, is counted damaged, and a recovery rebuilds
        // what it lacks. Refusing to register over it would keep the node out for good.
        let left = |what: String, e: ClusterError| {
            tracing::warn!(error = %e, "{what} could not be resolved: left for a recovery");
        };
        for rank in self.store.ranks()? {
            for epoch in self.store.prepared_epochs(rank)? {
                let resolved = self.store.resume_prepared(rank, epoch).and_then(|prepared| {
                    if epoch <= committed {
                        prepared.commit()
                    } else {
                        prepared.abort()
                    }
                });
                if let Err(e) = resolved {
                    left(format!("rank {rank}'s prepared epoch {epoch}"), e.into());
                }
            }
        }
        for &id in keep {
            if let Err(e) = self.coded.commit(id) {
                left(format!("object {id:?}"), e);
            }
        }
        for (id, _) in self.coded.objects()? {
            // Not left: an object whose update failed would be reported held at a version
            // it is not at.
            let version = versions.iter().find(|(v, _)| *v == id).map(|&(_, v)| v);
            if let Some(v) = version {
                self.coded.settle(id, v)?;
            }
            // What is staged beyond the journal's version was not committed when the node
            // registered: dropped, as a prepared epoch after `committed` is aborted.
            for staged in self.coded.staged_versions(id) {
                if version.is_none_or(|v| staged > v) {
                    self.coded.drop_update(id, staged)?;
                }
            }
        }
        self.coded.retain(keep)
    }

    /// What this node holds: each rank's newest committed epoch and the committed coded
    /// objects (reported when it registers; the coordinator compares it with its journal).
    pub fn inventory(&self) -> Result<Inventory, ClusterError> {
        let mut ranks = Vec::new();
        for rank in self.store.ranks()? {
            ranks.push((rank, self.store.latest_committed(rank)?));
        }
        Ok(Inventory {
            ranks,
            objects: self.coded.committed_objects()?,
        })
    }

    /// Deletes every rank's epochs and every coded object: the job starts over (`--fresh`).
    pub fn discard(&self) -> Result<(), ClusterError> {
        for rank in self.store.ranks()? {
            self.store.remove_rank(rank)?;
        }
        self.coded.retain(&[])
    }

    /// Verifies committed `epoch` of each rank (every block) and each object's parity.
    pub fn scrub(&self, ranks: &[u32], epoch: u64, objects: &[ObjectId]) -> Damage {
        let mut bad_ranks = Vec::new();
        for &rank in ranks {
            if let Err(e) = self.store.verify(rank, epoch) {
                bad_ranks.push((rank, e.to_string()));
            }
        }
        let mut bad_objects = Vec::new();
        for &id in objects {
            let problem = match self.coded.scrub(id) {
                Ok(p) => p,
                Err(e) => Some(e.to_string()),
            };
            let blob_problem = self
                .coded
                .blob_path(id)
                .ok()
                .and_then(|path| check_blob(&path).err().map(|e| e.to_string()));
            if let Some(p) = problem.or(blob_problem) {
                bad_objects.push((id, p));
            }
        }
        Damage {
            ranks: bad_ranks,
            objects: bad_objects,
        }
    }

    /// Delivers rebuilt images: installs them on the nodes that now host their ranks, or
    /// keeps one in a scratch store for `eckpt restore`.
    pub async fn deliver(
        self: &Arc<Self>,
        rebuilt: Rebuilt,
        epoch: u64,
        deliver: &Deliver,
    ) -> Result<(), ClusterError> {
        let images = rebuilt.images.clone();
        match deliver {
            Deliver::Import { placement } => {
                for &rank in images.ranks().keys() {
                    let node = placement.get(&rank).ok_or_else(|| {
                        ClusterError::Protocol(format!("no placement for rebuilt rank {rank}"))
                    })?;
                    if node.name == self.info.name {
                        let (a, images) = (self.clone(), images.clone());
                        blocking(move || install::import(&a.store, &*images, rank, epoch)).await?;
                    } else {
                        install::ship(self, node, images.clone(), rank, epoch).await?;
                    }
                }
            }
            Deliver::Export { rank } => {
                let (a, rank, task) = (self.clone(), *rank, rebuilt.task);
                blocking(move || {
                    let dir = a.export_scratch(task);
                    let _ = std::fs::remove_dir_all(&dir);
                    install::import(&Store::open(&dir)?, &*images, rank, epoch)
                })
                .await?;
            }
        }
        drop(rebuilt);
        Ok(())
    }

    /// Sends committed `epoch` of `rank` to the agent on `to` (a rank moving away).
    pub async fn move_rank(
        self: &Arc<Self>,
        rank: u32,
        epoch: u64,
        to: &NodeInfo,
    ) -> Result<(), ClusterError> {
        let a = self.clone();
        let images = blocking(move || StoreImages::open(&a.store, &[rank], epoch)).await?;
        install::ship(self, to, Arc::new(images), rank, epoch).await
    }

    /// The scratch store a decode for `eckpt restore` leaves its image in (removed once
    /// exported).
    pub fn export_scratch(&self, task: u64) -> std::path::PathBuf {
        self.coded_dir().join(format!("rebuild-export-t{task}"))
    }

    /// Where `Export` reads from: the agent's store, or the scratch store of a decode.
    pub fn export_store(&self, scratch: Option<u64>) -> Result<Store, ClusterError> {
        match scratch {
            None => Ok(self.store.clone()),
            Some(task) => Ok(Store::open(self.export_scratch(task))?),
        }
    }
}

/// Checks a stripe blob file, mapped (not read into memory): every delta in it parses.
fn check_blob(path: &std::path::Path) -> Result<(), ClusterError> {
    let file = std::fs::File::open(path).map_err(eckpt_cluster_api::io_at(path))?;
    if file.metadata().map_err(eckpt_cluster_api::io_at(path))?.len() == 0 {
        return parse_stripe_blob(&[]).map(|_| ());
    }
    // SAFETY: committed blobs are never written again; only retention removes them.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(eckpt_cluster_api::io_at(path))?;
    parse_stripe_blob(&map).map(|_| ())
}
