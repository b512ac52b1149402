//! Installing rank images that a decode rebuilt here, or that another agent sends, without
//! holding them: an image is read window by window from where it is (the rebuilt shard
//! file, every chunk checked against the checksum recorded at encode; a scratch store a
//! stripe chain was replayed into; this node's own store) and written window by window
//! into a store, here or — a window per data frame — on the node that now hosts the rank.
//! An agent recovering gigabytes per node stays within a few MiB of buffers.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use eckpt_cluster_api::call::{agent_answer, Call};
use eckpt_cluster_api::msg::{ImportRank, NodeInfo, ObjectKind, ObjectRecord, DATA_FRAME};
use eckpt_cluster_api::net::open_node;
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::{io_at, ClusterError};
use eckpt_proto::Connection;
use eckpt_store::{EpochView, Store};
use memmap2::Mmap;

use super::coding::rebuilt_path;
use super::{blocking, frames, Agent};
use crate::stripe_blob::parse_stripe_blob;
use eckpt_daemon::debug::{pause_point_async, Phase};

/// Rank images readable window by window.
pub trait ImageSource: Send + Sync {
    /// Each rank's items: name and length.
    fn ranks(&self) -> &BTreeMap<u32, Vec<(String, u64)>>;
    /// Fills `window` with the bytes of `rank`'s item `name` from `offset`.
    fn fill(&self, rank: u32, name: &str, offset: u64, window: &mut [u8]) -> Result<(), ClusterError>;
}

/// The images of an `Image` object's member, in its rebuilt shard file: each chunk is
/// checked against its recorded checksum when read (one chunk held at a time).
struct RebuiltShard {
    file: File,
    path: PathBuf,
    chunk: usize,
    crcs: Vec<u32>,
    layout: ShardLayout,
    ranks: BTreeMap<u32, Vec<(String, u64)>>,
    /// The last chunk read and checked: (index, bytes).
    cached: Mutex<(Option<u64>, Vec<u8>)>,
}

impl RebuiltShard {
    fn open(path: &Path, record: &ObjectRecord, member: usize) -> Result<RebuiltShard, ClusterError> {
        let shard = record
            .shards
            .get(member)
            .ok_or_else(|| ClusterError::Protocol(format!("object {} has no member {member}", record.id)))?;
        let file = File::open(path).map_err(io_at(path))?;
        let file_len = file.metadata().map_err(io_at(path))?.len();
        let chunk = record.chunk as usize;
        if file_len < shard.crcs.len() as u64 * chunk as u64 {
            return Err(ClusterError::Corrupt(format!(
                "rebuilt shard {} is short",
                path.display()
            )));
        }
        let mut ranks: BTreeMap<u32, Vec<(String, u64)>> = BTreeMap::new();
        for e in &shard.layout.extents {
            if e.offset.checked_add(e.len).is_none_or(|end| end > shard.len) {
                return Err(ClusterError::Corrupt(format!(
                    "shard of {} bytes is too short for rank {} item {:?} at {}+{}",
                    shard.len, e.rank, e.item, e.offset, e.len
                )));
            }
            ranks.entry(e.rank).or_default().push((e.item.clone(), e.len));
        }
        Ok(RebuiltShard {
            file,
            path: path.to_path_buf(),
            chunk,
            crcs: shard.crcs.clone(),
            layout: shard.layout.clone(),
            ranks,
            cached: Mutex::new((None, Vec::new())),
        })
    }

    /// Copies shard bytes `[offset, offset + out.len())` out of checked chunks.
    fn read(&self, offset: u64, out: &mut [u8], record: &str) -> Result<(), ClusterError> {
        let mut cached = eckpt_daemon::crash_only::lock(&self.cached);
        let mut done = 0;
        while done < out.len() {
            let at = offset + done as u64;
            let q = at / self.chunk as u64;
            if cached.0 != Some(q) {
                let expected = *self.crcs.get(q as usize).ok_or_else(|| {
                    ClusterError::Corrupt(format!("rebuilt shard {} has no chunk {q}", self.path.display()))
                })?;
                cached.1.resize(self.chunk, 0);
                self.file
                    .read_exact_at(&mut cached.1, q * self.chunk as u64)
                    .map_err(io_at(&self.path))?;
                if crc32c::crc32c(&cached.1) != expected {
                    cached.0 = None;
                    return Err(ClusterError::Corrupt(format!(
                        "rebuilt chunk {q} of {record} fails its recorded checksum"
                    )));
                }
                cached.0 = Some(q);
            }
            let from = (at % self.chunk as u64) as usize;
            let n = (self.chunk - from).min(out.len() - done);
            out[done..done + n].copy_from_slice(&cached.1[from..from + n]);
            done += n;
        }
        Ok(())
    }
}

impl ImageSource for RebuiltShard {
    fn ranks(&self) -> &BTreeMap<u32, Vec<(String, u64)>> {
        &self.ranks
    }

    fn fill(&self, rank: u32, name: &str, offset: u64, window: &mut [u8]) -> Result<(), ClusterError> {
        let e = self
            .layout
            .extent(rank, name)
            .ok_or_else(|| ClusterError::NotFound(format!("rank {rank} has no item {name:?} here")))?;
        self.read(e.offset + offset, window, &format!("rank {rank} item {name:?}"))
    }
}

/// Ranks' images at one epoch of a store: a scratch store a stripe chain was replayed into,
/// or this node's own (a rank moving away).
pub struct StoreImages {
    views: BTreeMap<u32, EpochView>,
    ranks: BTreeMap<u32, Vec<(String, u64)>>,
}

impl StoreImages {
    /// Opens `ranks` at `epoch` of `store`.
    pub fn open(store: &Store, ranks: &[u32], epoch: u64) -> Result<StoreImages, ClusterError> {
        let mut views = BTreeMap::new();
        let mut items = BTreeMap::new();
        for &rank in ranks {
            let view = store.view(rank, epoch)?;
            items.insert(
                rank,
                view.manifest()
                    .items
                    .iter()
                    .map(|i| (i.name.clone(), i.len))
                    .collect(),
            );
            views.insert(rank, view);
        }
        Ok(StoreImages { views, ranks: items })
    }
}

impl ImageSource for StoreImages {
    fn ranks(&self) -> &BTreeMap<u32, Vec<(String, u64)>> {
        &self.ranks
    }

    fn fill(&self, rank: u32, name: &str, offset: u64, window: &mut [u8]) -> Result<(), ClusterError> {
        let view = self
            .views
            .get(&rank)
            .ok_or_else(|| ClusterError::NotFound(format!("rank {rank} is not here")))?;
        Ok(view.read_padded(name, offset, window)?)
    }
}

/// What a decode here rebuilt, ready to install; its files go when it is dropped.
pub struct Rebuilt {
    /// The images.
    pub images: Arc<dyn ImageSource>,
    /// The first decode task (names scratch stores).
    pub task: u64,
    /// The rebuilt shard files (their decode directory goes with the last of them).
    files: Vec<PathBuf>,
    /// A scratch store the images were replayed into.
    store: Option<PathBuf>,
}

impl Drop for Rebuilt {
    fn drop(&mut self) {
        // Only the images are dropped here: another member rebuilt by the same decode may
        // still be waiting in the same directory.
        for file in &self.files {
            let _ = std::fs::remove_file(file);
            if let Some(dir) = file.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
        if let Some(store) = &self.store {
            let _ = std::fs::remove_dir_all(store);
        }
    }
}

/// The images of `member` rebuilt by each part's task, every chunk checked against the
/// checksums recorded at encode: an `Image` object read from its rebuilt shard, a stripe
/// chain replayed into a scratch store (each stripe's deltas, borrowed from the mapped
/// rebuilt blob, applied to what the previous left). File reads: call it off the runtime.
pub fn rebuilt(
    agent: &Agent,
    parts: &[(u64, ObjectRecord)],
    member: usize,
    epoch: u64,
) -> Result<Rebuilt, ClusterError> {
    let task = parts.first().map_or(0, |p| p.0);
    let files: Vec<PathBuf> = parts
        .iter()
        .map(|(t, _)| rebuilt_path(agent, *t, member))
        .collect();
    if let [(_, record)] = parts {
        if record.kind == ObjectKind::Image {
            let shard = RebuiltShard::open(&files[0], record, member)?;
            return Ok(Rebuilt {
                images: Arc::new(shard),
                task,
                files,
                store: None,
            });
        }
    }
    let dir = agent.coded.scratch(&format!("install-{task}-{member}"))?;
    let mut rebuilt = Rebuilt {
        images: Arc::new(StoreImages {
            views: BTreeMap::new(),
            ranks: BTreeMap::new(),
        }),
        task,
        files,
        store: Some(dir.clone()),
    };
    let chain = Store::open(&dir)?;
    for (t, record) in parts {
        if record.kind == ObjectKind::Image {
            return Err(ClusterError::Protocol(format!(
                "object {} is an image in a stripe chain",
                record.id
            )));
        }
        let path = rebuilt_path(agent, *t, member);
        let shard = RebuiltShard::open(&path, record, member)?;
        let len = record.shards[member].len;
        // Every chunk is checked before the blob is parsed.
        let mut buf = vec![0u8; shard.chunk];
        for q in 0..shard.crcs.len() as u64 {
            shard.read(q * shard.chunk as u64, &mut buf, &format!("object {}", record.id))?;
        }
        // SAFETY: the rebuilt file is private to this decode and not truncated while mapped.
        let map = unsafe { Mmap::map(&shard.file) }.map_err(io_at(&path))?;
        let blob = map
            .get(..len as usize)
            .ok_or_else(|| ClusterError::Corrupt(format!("rebuilt blob {} is short", path.display())))?;
        for (rank, bytes) in parse_stripe_blob(blob)? {
            chain.apply_delta(rank, bytes)?;
        }
    }
    let ranks = chain.ranks()?;
    for &rank in &ranks {
        if chain.latest_committed(rank)? != Some(epoch) {
            return Err(ClusterError::Corrupt(format!(
                "the stripe chain of rank {rank} does not reach epoch {epoch}"
            )));
        }
    }
    rebuilt.images = Arc::new(StoreImages::open(&chain, &ranks, epoch)?);
    Ok(rebuilt)
}

/// Installs `rank` of `images` as committed `epoch` of `store` (blocking).
pub fn import(store: &Store, images: &dyn ImageSource, rank: u32, epoch: u64) -> Result<(), ClusterError> {
    let items = images
        .ranks()
        .get(&rank)
        .ok_or_else(|| ClusterError::Protocol(format!("rank {rank} is not in the rebuilt shard")))?;
    store.import_image_from(rank, epoch, items, &mut |name, offset, window| {
        images.fill(rank, name, offset, window)
    })
}

/// Sends `rank` of `images` to the agent on `node`, one data frame per window read.
pub async fn ship(
    agent: &Agent,
    node: &NodeInfo,
    images: Arc<dyn ImageSource>,
    rank: u32,
    epoch: u64,
) -> Result<(), ClusterError> {
    let items = images
        .ranks()
        .get(&rank)
        .cloned()
        .ok_or_else(|| ClusterError::NotFound(format!("rank {rank} is not here to ship")))?;
    // A receiver that stops (SIGSTOP, a hung host) still has its kernel acknowledging: each
    // frame, and its answer, get the peer wait, so the move fails naming it instead of
    // holding the recovery until someone wakes it.
    let peer_wait = agent.inbox.peer_wait();
    let stalled = |did: &str| ClusterError::Node {
        node: node.name.clone(),
        reason: format!(
            "shipping rank {rank} to it: it {did} for {:.1} s",
            peer_wait.as_secs_f64()
        ),
    };
    let mut conn = open_node(node, &agent.host, &agent.secret).await?;
    let import = ImportRank {
        rank,
        epoch,
        items: items.clone(),
    };
    conn.send_control(&import.request()).await?;
    for (name, len) in items {
        let mut offset = 0;
        while offset < len {
            let n = (len - offset).min(DATA_FRAME as u64) as usize;
            let (images, name_) = (images.clone(), name.clone());
            let piece = blocking(move || {
                let mut piece = vec![0u8; n];
                images.fill(rank, &name_, offset, &mut piece)?;
                Ok(piece)
            })
            .await?;
            tokio::time::timeout(peer_wait, conn.send_data(&piece))
                .await
                .map_err(|_| stalled("took nothing of it"))??;
            if offset == 0 {
                // Fault injection: the receiver has the first frame, not the rest.
                pause_point_async(&agent.dir.debug(), Phase::MidShip, &agent.info.name).await;
            }
            offset += n as u64;
        }
    }
    let answer = tokio::time::timeout(peer_wait, conn.recv_control())
        .await
        .map_err(|_| stalled("did not say it installed it"))?;
    agent_answer::<ImportRank>(&node.name, answer?)
}

/// Receives a rank image another agent ships (`items` announced, then their bytes as data
/// frames) and installs it as committed `epoch`: frames go straight into the store's
/// windows ([`frames`]), so memory never grows with the image.
pub async fn receive(
    agent: &Arc<Agent>,
    conn: &mut Connection,
    rank: u32,
    epoch: u64,
    items: Vec<(String, u64)>,
) -> Result<(), ClusterError> {
    let total = items
        .iter()
        .try_fold(0u64, |sum, (_, len)| sum.checked_add(*len))
        .unwrap_or(u64::MAX);
    frames::check_room(agent.store.root(), &format!("image of rank {rank}"), total)?;
    let a = agent.clone();
    let peer_wait = agent.inbox.peer_wait();
    frames::receive(
        conn,
        total,
        format!("rank {rank}'s image"),
        peer_wait,
        move |frames| {
            a.store
                .import_image_from(rank, epoch, &items, &mut |_, _, window| frames.fill(window))
        },
    )
    .await
}
