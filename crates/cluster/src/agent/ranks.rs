//! What an agent does with ranks' epochs and coded objects on request: take checkpoints
//! in, describe its shard, commit or abort as decided, verify, rebuild, export.

use std::collections::BTreeMap;
use std::sync::Arc;

use eckpt_store::{Image, Store};

use super::coding::rebuilt_path;
use super::{blocking, Agent};
use crate::shard::node_items;
use crate::stripe_blob::{parse_stripe_blob, StripePlan};
use eckpt_cluster_api::msg::DATA_FRAME;
use eckpt_cluster_api::msg::{
    AgentRequest, AgentResponse, Deliver, DescribeRequest, ObjectKind, ObjectRecord, ShardInfo,
};
use eckpt_cluster_api::net::{call, open_node};
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::Mode;
use eckpt_coding::ObjectId;

impl Agent {
    /// Writes `content` as the prepared epoch of `rank` (a delta against its last committed
    /// epoch where blocks match).
    pub fn put_rank(&self, rank: u32, epoch: u64, item: &str, content: &[u8]) -> Result<(), ClusterError> {
        let mut writer = self.store.writer(rank, epoch)?;
        writer.put_full(item, content)?;
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
                return Err(ClusterError::Invalid(format!(
                    "rank {rank} has no epoch {epoch} to commit"
                )));
            }
        }
        for &(id, version) in objects {
            self.coded.commit(id)?;
            if let Some(v) = version {
                if self.coded.staged_versions(id).contains(&v) {
                    self.coded.apply_update(id, v)?;
                }
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
    /// epochs up to `committed` are committed, later ones aborted; staged updates up to each
    /// object's committed version applied, others dropped; objects not kept removed.
    pub fn resolve(
        &self,
        committed: u64,
        keep: &[ObjectId],
        versions: &[(ObjectId, u64)],
    ) -> Result<(), ClusterError> {
        for rank in self.store.ranks()? {
            for epoch in self.store.prepared_epochs(rank)? {
                let prepared = self.store.resume_prepared(rank, epoch)?;
                if epoch <= committed {
                    prepared.commit()?;
                } else {
                    prepared.abort()?;
                }
            }
        }
        for &id in keep {
            self.coded.commit(id)?;
        }
        for (id, _) in self.coded.objects()? {
            let version = versions.iter().find(|(v, _)| *v == id).map(|(_, v)| *v);
            for staged in self.coded.staged_versions(id) {
                if version.is_some_and(|v| staged <= v) {
                    self.coded.apply_update(id, staged)?;
                } else {
                    self.coded.drop_update(id, staged)?;
                }
            }
        }
        self.coded.retain(keep)
    }

    /// Verifies committed `epoch` of each rank (every block) and each object's parity.
    pub fn scrub(&self, ranks: &[u32], epoch: u64, objects: &[ObjectId]) -> AgentResponse {
        let mut bad_ranks = Vec::new();
        for &rank in ranks {
            if let Err(e) = self.store.read_image(rank, epoch) {
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
                .and_then(|path| match std::fs::read(&path) {
                    Ok(bytes) => parse_stripe_blob(&bytes).err().map(|e| e.to_string()),
                    Err(e) => Some(e.to_string()),
                });
            if let Some(p) = problem.or(blob_problem) {
                bad_objects.push((id, p));
            }
        }
        AgentResponse::Damage {
            ranks: bad_ranks,
            objects: bad_objects,
        }
    }

    /// Verifies the shards of `member` rebuilt by each part's task against the recorded
    /// checksums and turns them into rank images at `epoch` (file reads and checksums:
    /// call it off the async runtime).
    pub fn rebuilt_images(
        &self,
        parts: &[(u64, ObjectRecord)],
        member: usize,
        epoch: u64,
    ) -> Result<RebuiltImages, ClusterError> {
        let mut images: BTreeMap<u32, Image> = BTreeMap::new();
        // A stripe chain is replayed in a scratch store: each stripe's deltas apply to the
        // images the previous stripes left.
        let scratch = self
            .coded
            .scratch(&format!("install-{}-{member}", parts.first().map_or(0, |p| p.0)))?;
        let chain = Store::open(&scratch)?;
        for (task, record) in parts {
            let path = rebuilt_path(self, *task, member);
            let bytes = std::fs::read(&path).map_err(eckpt_cluster_api::io_at(&path))?;
            // The bytes are in memory now; the decode's directory goes once it is empty.
            let _ = std::fs::remove_file(&path);
            if let Some(parent) = path.parent() {
                let _ = std::fs::remove_dir(parent);
            }
            let shard = record.shards.get(member).ok_or_else(|| {
                ClusterError::Invalid(format!("object {} has no member {member}", record.id))
            })?;
            let chunk = record.chunk as usize;
            for (q, expected) in shard.crcs.iter().enumerate() {
                let piece = bytes.get(q * chunk..(q + 1) * chunk).ok_or_else(|| {
                    ClusterError::Corrupt(format!("rebuilt shard {} is short", path.display()))
                })?;
                if crc32c::crc32c(piece) != *expected {
                    return Err(ClusterError::Corrupt(format!(
                        "rebuilt chunk {q} of member {member} of object {} fails its recorded checksum",
                        record.id
                    )));
                }
            }
            let data = usize::try_from(shard.len)
                .ok()
                .and_then(|len| bytes.get(..len))
                .ok_or_else(|| {
                    ClusterError::Invalid(format!(
                        "member {member} of object {} is {} bytes long, the rebuilt shard {}",
                        record.id,
                        shard.len,
                        bytes.len()
                    ))
                })?;
            match record.kind {
                ObjectKind::Image => images = shard.layout.images(data)?,
                ObjectKind::Stripe { .. } => {
                    for delta in parse_stripe_blob(data)? {
                        chain.apply_delta(delta.rank, &delta.encode()?)?;
                    }
                }
            }
        }
        if matches!(parts.first().map(|p| p.1.kind), Some(ObjectKind::Stripe { .. })) {
            for rank in chain.ranks()? {
                if chain.latest_committed(rank)? != Some(epoch) {
                    return Err(ClusterError::Corrupt(format!(
                        "the stripe chain of rank {rank} does not reach epoch {epoch}"
                    )));
                }
                images.insert(rank, chain.read_image(rank, epoch)?);
            }
        }
        let _ = std::fs::remove_dir_all(&scratch);
        Ok(RebuiltImages {
            images,
            task: parts.first().map_or(0, |p| p.0),
        })
    }

    /// Delivers rebuilt images: installs them on the nodes that now host their ranks, or
    /// keeps one in a scratch store for `eckpt restore`.
    pub async fn deliver(
        self: &Arc<Self>,
        rebuilt: RebuiltImages,
        epoch: u64,
        deliver: &Deliver,
    ) -> Result<(), ClusterError> {
        let RebuiltImages { mut images, task } = rebuilt;
        match deliver {
            Deliver::Import { placement } => {
                for (rank, image) in images {
                    let node = placement.get(&rank).ok_or_else(|| {
                        ClusterError::Invalid(format!("no placement for rebuilt rank {rank}"))
                    })?;
                    if node.name == self.info.name {
                        let a = self.clone();
                        blocking(move || Ok(a.store.import_image(rank, epoch, &image)?)).await?;
                    } else {
                        self.ship(node, rank, epoch, &image).await?;
                    }
                }
            }
            Deliver::Export { rank } => {
                let image = images.remove(rank).ok_or_else(|| {
                    ClusterError::Invalid(format!("rank {rank} is not in the rebuilt shard"))
                })?;
                let (a, rank) = (self.clone(), *rank);
                blocking(move || {
                    let dir = a.export_scratch(task);
                    let _ = std::fs::remove_dir_all(&dir);
                    Ok(Store::open(&dir)?.import_image(rank, epoch, &image)?)
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Sends a rank image to the agent that now hosts the rank.
    pub async fn ship(
        &self,
        node: &eckpt_cluster_api::msg::NodeInfo,
        rank: u32,
        epoch: u64,
        image: &Image,
    ) -> Result<(), ClusterError> {
        let mut conn = open_node(node, &self.host, &self.secret).await?;
        let items: Vec<(String, u64)> = image
            .items
            .iter()
            .map(|(n, b)| (n.clone(), b.len() as u64))
            .collect();
        conn.send_control(&AgentRequest::ImportRank { rank, epoch, items })
            .await?;
        for bytes in image.items.values() {
            for piece in bytes.chunks(DATA_FRAME) {
                conn.send_data(piece).await?;
            }
        }
        match conn.recv_control().await? {
            AgentResponse::Ok => Ok(()),
            AgentResponse::Error(e) => Err(ClusterError::remote(&node.name, e)),
            other => Err(ClusterError::Protocol(format!("unexpected answer {other:?}"))),
        }
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

/// Rank images cut from rebuilt shards, with the first decode task (names scratch stores).
pub struct RebuiltImages {
    images: BTreeMap<u32, Image>,
    task: u64,
}

/// Asks an agent and expects `Ok`.
pub async fn expect_ok(
    conn: &mut eckpt_proto::Connection,
    node: &str,
    request: &AgentRequest,
) -> Result<(), ClusterError> {
    match call(conn, request).await? {
        AgentResponse::Ok => Ok(()),
        AgentResponse::Error(e) => Err(ClusterError::remote(node, e)),
        other => Err(ClusterError::Protocol(format!("unexpected answer {other:?}"))),
    }
}
