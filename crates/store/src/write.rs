//! Writing epochs crash-safely, two-phase publication, cleanup and retention.
//!
//! Protocol for one epoch `E` (generation `G`) of a rank, all under the rank's lock:
//!
//! 1. create `tmp-E-G-<pid>-<n>/`, append blocks to `data`, then write `manifest`;
//!    fsync both files and the directory;
//! 2. **prepare**: rename to `prepared-E-G/`, fsync the rank directory (durable, not visible
//!    as committed);
//! 3. **commit**: rename to `epoch-E-G/`, fsync the rank directory — the single atomic step
//!    that publishes the epoch;
//! 4. retention: directories no retained epoch depends on are renamed to `trash-…`, the
//!    rank directory fsync'd, then removed.
//!
//! A crash before 3 leaves the previous committed epoch the latest; a crash after 3 leaves
//! `E` complete. Step 4 only ever runs after the commit it is based on.

use std::collections::{BTreeSet, HashSet};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{io_at, Result, StoreError};
use crate::layout::{
    create_private_dir, epoch_dir_name, fsync_dir, rank_dir, remove_epoch_dir, remove_garbage, scan_rank,
    unique_suffix, RankLock, DATA_FILE, MANIFEST_FILE, TMP_PREFIX,
};
use crate::manifest::{block_len, ItemManifest, Manifest, MANIFEST_FORMAT, MAX_BLOCK_SIZE, MAX_ITEM_NAME};
use crate::read::{Chain, EpochData};
use crate::RetentionPolicy;

/// Bytes of an item processed at a time when blocks must be compared with, or filled in
/// from, the previous image: bounds memory for arbitrarily large items.
const WINDOW: u64 = 4 << 20;

/// Where a new epoch generation's content comes from and how it is stored.
pub(crate) struct Plan {
    pub rank: u32,
    pub epoch: u64,
    pub generation: u32,
    /// Recorded as the manifest's `parent` (what the epoch followed).
    pub parent: Option<u64>,
    /// Image that items not written are carried over from, and that unwritten bytes of
    /// dirty-block items come from. For a delta it is the chain of `parent`.
    pub source: Option<Chain>,
    /// Store every block (a chain root) instead of a delta against `source`.
    pub full: bool,
}

impl Plan {
    /// A full image of `rank` as `epoch` that follows and carries over nothing.
    pub fn self_contained(rank: u32, epoch: u64) -> Plan {
        Plan {
            rank,
            epoch,
            generation: 0,
            parent: None,
            source: None,
            full: true,
        }
    }
}

/// Writes one epoch of one rank. Items not mentioned are carried over unchanged from the
/// previous committed epoch; [`EpochWriter::remove`] drops one.
///
/// Dropping the writer without [`EpochWriter::prepare`] or [`EpochWriter::commit`]
/// abandons the epoch and removes its temporary directory.
#[derive(Debug)]
pub struct EpochWriter {
    root: PathBuf,
    rank: u32,
    epoch: u64,
    generation: u32,
    parent: Option<u64>,
    source: Option<Chain>,
    full: bool,
    default_block_size: u32,
    retention: RetentionPolicy,
    lock: Option<RankLock>,
    tmp: PathBuf,
    data: Option<BufWriter<File>>,
    data_len: u64,
    items: Vec<ItemManifest>,
    written: HashSet<String>,
    removed: HashSet<String>,
    failed: bool,
}

/// One window of an item being written: its complete new content, or the dirty blocks to
/// lay over the old content.
enum Window<'w> {
    New(&'w [u8]),
    Dirty(&'w [(u64, &'w [u8])]),
}

/// Content of one item as the caller hands it over.
enum Content<'a> {
    Full(&'a [u8]),
    /// Complete content read window by window: `fill(offset, window)`.
    Stream(&'a mut dyn FnMut(u64, &mut [u8]) -> Result<()>),
    Dirty(&'a [(u64, &'a [u8])]),
}

impl EpochWriter {
    pub(crate) fn begin(
        root: &Path,
        lock: RankLock,
        plan: Plan,
        default_block_size: u32,
        retention: RetentionPolicy,
    ) -> Result<EpochWriter> {
        let dir = rank_dir(root, plan.rank);
        let tmp = dir.join(format!(
            "{TMP_PREFIX}{}-{}-{}",
            plan.epoch,
            plan.generation,
            unique_suffix()
        ));
        create_private_dir(&tmp, false)?;
        let data_path = tmp.join(DATA_FILE);
        let file = File::create(&data_path).map_err(io_at(&data_path))?;
        Ok(EpochWriter {
            root: root.to_path_buf(),
            rank: plan.rank,
            epoch: plan.epoch,
            generation: plan.generation,
            parent: plan.parent,
            source: plan.source,
            full: plan.full,
            default_block_size,
            retention,
            lock: Some(lock),
            tmp,
            data: Some(BufWriter::with_capacity(1 << 20, file)),
            data_len: 0,
            items: Vec::new(),
            written: HashSet::new(),
            removed: HashSet::new(),
            failed: false,
        })
    }

    /// Epoch being written.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Previous committed epoch this one follows, if any.
    pub fn parent(&self) -> Option<u64> {
        self.parent
    }

    /// Whether this epoch is stored as a full image (first epoch, or the retention policy
    /// decided the delta chain is long enough) rather than as a delta.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Stores the complete content of an item, cut into the store's default block size.
    /// For a delta epoch only the blocks that differ from the previous image are stored.
    pub fn put_full(&mut self, name: &str, content: &[u8]) -> Result<()> {
        let bs = self.default_block_size;
        self.put(name, bs, content.len() as u64, Content::Full(content))
    }

    /// [`EpochWriter::put_full`] cut into `block_size`-byte blocks: for an item that later
    /// epochs update with [`EpochWriter::put_dirty`] in blocks of that size (device memory is
    /// fingerprinted in 64 KiB blocks), so that the manifest of a large item stays small and a
    /// delta replaces whole stored blocks.
    pub fn put_full_in_blocks(&mut self, name: &str, block_size: u32, content: &[u8]) -> Result<()> {
        self.put(name, block_size, content.len() as u64, Content::Full(content))
    }

    /// [`EpochWriter::put_full`] for content too large to hold: `fill(offset, window)` fills
    /// each window of the item in turn (ascending offsets, a few MiB each), so memory stays
    /// at one window whatever the item's length.
    pub fn put_full_from(
        &mut self,
        name: &str,
        len: u64,
        fill: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    ) -> Result<()> {
        let bs = self.default_block_size;
        self.put(name, bs, len, Content::Stream(fill))
    }

    /// Stores an item as its new length plus the blocks that changed since the previous
    /// committed epoch: `blocks` are `(index, bytes)` strictly ascending, each covering
    /// `index * block_size ..` and exactly `block_size` long except a short last block.
    /// Bytes no block covers keep the previous image's value (zero past its old length).
    pub fn put_dirty(
        &mut self,
        name: &str,
        block_size: u32,
        new_len: u64,
        blocks: &[(u64, &[u8])],
    ) -> Result<()> {
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(StoreError::Invalid(format!("block size {block_size}")));
        }
        let mut prev = None;
        for (index, data) in blocks {
            if prev.is_some_and(|p| p >= *index) {
                return Err(StoreError::Invalid(format!(
                    "item {name:?}: dirty blocks not strictly ascending at {index}"
                )));
            }
            prev = Some(*index);
            let want = block_len(new_len, block_size, *index);
            if want == 0 || data.len() as u64 != want {
                return Err(StoreError::Invalid(format!(
                    "item {name:?}: block {index} is {} bytes, expected {want}",
                    data.len()
                )));
            }
        }
        self.put(name, block_size, new_len, Content::Dirty(blocks))
    }

    /// Drops an item that the previous epoch had (a no-op for a name it did not have).
    pub fn remove(&mut self, name: &str) -> Result<()> {
        if self.written.contains(name) {
            return Err(StoreError::Invalid(format!(
                "item {name:?} already written in epoch {}",
                self.epoch
            )));
        }
        self.removed.insert(name.to_string());
        Ok(())
    }

    fn put(&mut self, name: &str, block_size: u32, len: u64, content: Content<'_>) -> Result<()> {
        if self.failed {
            return Err(StoreError::Invalid(
                "writer failed earlier; drop it and start again".into(),
            ));
        }
        if name.is_empty() || name.len() > MAX_ITEM_NAME {
            return Err(StoreError::Invalid(format!("item name of {} bytes", name.len())));
        }
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(StoreError::Invalid(format!("block size {block_size}")));
        }
        if self.written.contains(name) {
            return Err(StoreError::Invalid(format!(
                "item {name:?} written twice in epoch {}",
                self.epoch
            )));
        }
        let mut item = ItemManifest {
            name: name.to_string(),
            len,
            block_size,
            blocks: Vec::new(),
        };
        match self.write_blocks(&mut item, content) {
            Ok(()) => {
                self.removed.remove(name);
                self.written.insert(name.to_string());
                self.items.push(item);
                Ok(())
            }
            Err(e) => {
                // Blocks already appended would shift every later offset: unusable.
                self.failed = true;
                Err(e)
            }
        }
    }

    fn write_blocks(&mut self, item: &mut ItemManifest, content: Content<'_>) -> Result<()> {
        let bs = u64::from(item.block_size);
        let count = item.block_count();
        if let (false, Content::Dirty(blocks)) = (self.full, &content) {
            for (index, data) in blocks.iter() {
                self.emit(item, *index, data)?;
            }
            return Ok(());
        }
        let per_window = (WINDOW / bs).max(1);
        let mut old = Vec::new();
        let mut streamed = Vec::new();
        let mut dirty_at = 0usize;
        let mut first = 0u64;
        let mut content = content;
        while first < count {
            let end_block = count.min(first + per_window);
            let a = first * bs;
            let b = item.len.min(end_block * bs);
            let n = (b - a) as usize;
            let window = match &mut content {
                Content::Full(c) => {
                    let c: &[u8] = c;
                    Window::New(&c[a as usize..b as usize])
                }
                Content::Stream(fill) => {
                    streamed.resize(n, 0);
                    fill(a, &mut streamed)?;
                    Window::New(&streamed)
                }
                Content::Dirty(blocks) => Window::Dirty(blocks),
            };
            match window {
                Window::New(new) => {
                    if self.full {
                        for (k, chunk) in new.chunks(bs as usize).enumerate() {
                            self.emit(item, first + k as u64, chunk)?;
                        }
                    } else {
                        old.resize(n, 0);
                        let comparable = self.comparable_source(&item.name, a, &mut old)?;
                        let pairs = new.chunks(bs as usize).zip(old.chunks(bs as usize));
                        for (k, (nb, ob)) in pairs.enumerate() {
                            if !comparable || nb != ob {
                                self.emit(item, first + k as u64, nb)?;
                            }
                        }
                    }
                }
                Window::Dirty(blocks) => {
                    old.resize(n, 0);
                    self.read_source(&item.name, a, &mut old)?;
                    while let Some((index, data)) = blocks.get(dirty_at) {
                        if *index >= end_block {
                            break;
                        }
                        let at = ((*index - first) * bs) as usize;
                        old[at..at + data.len()].copy_from_slice(data);
                        dirty_at += 1;
                    }
                    let window = std::mem::take(&mut old);
                    for (k, chunk) in window.chunks(bs as usize).enumerate() {
                        self.emit(item, first + k as u64, chunk)?;
                    }
                    old = window;
                }
            }
            first = end_block;
        }
        Ok(())
    }

    /// [`Self::read_source`] for a window whose new content is known in full, where the
    /// source only tells which blocks changed: `false` when a source block fails its
    /// checksum. Every block of the window is then stored anew, so that the new epoch leans
    /// on nothing damaged — rot in a committed epoch must not fail every later checkpoint
    /// of the rank. The damaged epoch itself is left as it is, for the cluster to repair or
    /// retention to drop.
    fn comparable_source(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<bool> {
        match self.read_source(name, offset, buf) {
            Ok(()) => Ok(true),
            Err(e @ StoreError::BlockChecksum { .. }) => {
                tracing::warn!(rank = self.rank, epoch = self.epoch, error = %e, "the previous epoch is damaged: its blocks are stored anew");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Bytes of the source image for an item window, zero where it has none.
    fn read_source(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        match &self.source {
            Some(chain) => chain.read_padded(name, offset, buf),
            None => {
                buf.fill(0);
                Ok(())
            }
        }
    }

    fn emit(&mut self, item: &mut ItemManifest, index: u64, bytes: &[u8]) -> Result<()> {
        let path = self.tmp.join(DATA_FILE);
        let data = self
            .data
            .as_mut()
            .ok_or_else(|| StoreError::Invalid("writer already finished".into()))?;
        data.write_all(bytes).map_err(io_at(&path))?;
        self.data_len += bytes.len() as u64;
        item.blocks.push((index, crc32c::crc32c(bytes)).into());
        Ok(())
    }

    /// Carries over the source's items the caller did not write or remove.
    fn carry_over(&mut self) -> Result<()> {
        let Some(source) = &self.source else {
            return Ok(());
        };
        let carried: Vec<(String, u64, u32)> = source
            .target()
            .manifest
            .items
            .iter()
            .filter(|i| !self.written.contains(&i.name) && !self.removed.contains(&i.name))
            .map(|i| (i.name.clone(), i.len, i.block_size))
            .collect();
        for (name, len, block_size) in carried {
            if self.full {
                self.put(&name, block_size, len, Content::Dirty(&[]))?;
            } else {
                self.items.push(ItemManifest {
                    name,
                    len,
                    block_size,
                    blocks: Vec::new(),
                });
            }
        }
        Ok(())
    }

    /// Makes the epoch durable without publishing it (first phase of a two-phase commit):
    /// after this returns, a crash keeps it as prepared, and
    /// [`crate::Store::resume_prepared`] can still commit or abort it.
    pub fn prepare(mut self) -> Result<PreparedEpoch> {
        if self.failed {
            return Err(StoreError::Invalid(
                "writer failed earlier; drop it and start again".into(),
            ));
        }
        self.carry_over()?;
        let (chain_len, chain_bytes) = match (&self.source, self.full) {
            (_, true) => (0, 0),
            (Some(src), false) => {
                let m = &src.target().manifest;
                (m.chain_len + 1, m.chain_bytes + self.data_len)
            }
            (None, false) => return Err(StoreError::Invalid("delta epoch without a parent".into())),
        };
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            rank: self.rank,
            epoch: self.epoch,
            generation: self.generation,
            parent: self.parent,
            full: self.full,
            chain_len,
            chain_bytes,
            data_len: self.data_len,
            items: std::mem::take(&mut self.items),
        };
        manifest.validate()?;
        let sizes = EpochSizes::of(&manifest);
        let data_path = self.tmp.join(DATA_FILE);
        let data = self
            .data
            .take()
            .ok_or_else(|| StoreError::Invalid("writer already finished".into()))?;
        let file = data.into_inner().map_err(|e| io_at(&data_path)(e.into_error()))?;
        file.sync_all().map_err(io_at(&data_path))?;
        drop(file);
        let mpath = self.tmp.join(MANIFEST_FILE);
        let mut mfile = File::create(&mpath).map_err(io_at(&mpath))?;
        mfile.write_all(&manifest.encode()).map_err(io_at(&mpath))?;
        mfile.sync_all().map_err(io_at(&mpath))?;
        drop(mfile);
        fsync_dir(&self.tmp)?;
        let dir = rank_dir(&self.root, self.rank);
        let prepared = dir.join(epoch_dir_name(true, self.epoch, self.generation));
        eckpt_durable::rename_durably(&self.tmp, &prepared).map_err(io_at(&prepared))?;
        let lock = self
            .lock
            .take()
            .ok_or_else(|| StoreError::Invalid("writer already finished".into()))?;
        Ok(PreparedEpoch {
            root: self.root.clone(),
            rank: self.rank,
            epoch: self.epoch,
            generation: self.generation,
            retention: self.retention,
            sizes,
            _lock: lock,
        })
    }

    /// Prepares and commits in one go: the epoch becomes the latest committed one.
    pub fn commit(self) -> Result<()> {
        self.prepare()?.commit()
    }
}

impl Drop for EpochWriter {
    fn drop(&mut self) {
        if self.lock.is_some() {
            // Not prepared: nothing durable to keep. Remove while still holding the lock.
            self.data = None;
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// An epoch that is durable but not committed. Holds the rank's lock until committed or
/// aborted; dropping it leaves the epoch prepared on disk for
/// [`crate::Store::resume_prepared`].
#[derive(Debug)]
pub struct PreparedEpoch {
    root: PathBuf,
    rank: u32,
    epoch: u64,
    generation: u32,
    retention: RetentionPolicy,
    sizes: EpochSizes,
    _lock: RankLock,
}

/// How large an epoch is: what a full checkpoint would write, and what this one stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EpochSizes {
    /// Bytes of the complete image (every item's length).
    pub image_bytes: u64,
    /// Bytes of blocks the epoch stored (all of them for a full epoch, the changed ones
    /// for a delta).
    pub stored_bytes: u64,
}

impl EpochSizes {
    /// The sizes `manifest` describes.
    pub fn of(manifest: &Manifest) -> EpochSizes {
        EpochSizes {
            image_bytes: manifest.items.iter().map(|i| i.len).sum(),
            stored_bytes: manifest.data_len,
        }
    }
}

impl PreparedEpoch {
    pub(crate) fn resume(
        root: &Path,
        lock: RankLock,
        manifest: &Manifest,
        retention: RetentionPolicy,
    ) -> PreparedEpoch {
        PreparedEpoch {
            root: root.to_path_buf(),
            rank: manifest.rank,
            epoch: manifest.epoch,
            generation: manifest.generation,
            retention,
            sizes: EpochSizes::of(manifest),
            _lock: lock,
        }
    }

    /// Its image and stored sizes.
    pub fn sizes(&self) -> EpochSizes {
        self.sizes
    }

    /// Rank of the epoch.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The prepared epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Publishes the epoch atomically, then retires what no retained epoch needs. A
    /// retention failure is logged, not returned: the commit itself has happened.
    pub fn commit(self) -> Result<()> {
        let dir = rank_dir(&self.root, self.rank);
        let from = dir.join(epoch_dir_name(true, self.epoch, self.generation));
        let to = dir.join(epoch_dir_name(false, self.epoch, self.generation));
        eckpt_durable::rename_durably(&from, &to).map_err(io_at(&to))?;
        if let Err(e) = apply_retention(&dir, self.rank, &self.retention) {
            tracing::warn!(rank = self.rank, epoch = self.epoch, error = %e, "retention failed");
        }
        Ok(())
    }

    /// Discards the epoch; the previous committed epoch stays the latest.
    pub fn abort(self) -> Result<()> {
        let dir = rank_dir(&self.root, self.rank);
        remove_epoch_dir(&dir, &epoch_dir_name(true, self.epoch, self.generation))
    }
}

/// Removes leftovers of crashes in a rank directory (caller holds the rank lock):
/// temporary and trash directories, prepared epochs that can no longer be committed (not
/// newer than the latest committed one, or all of them when `discard_prepared`), and
/// generations superseded by a newer committed generation of the same epoch.
pub(crate) fn cleanup_rank(dir: &Path, discard_prepared: bool) -> Result<()> {
    let scan = scan_rank(dir)?;
    for name in &scan.garbage {
        remove_garbage(dir, name)?;
    }
    let latest = scan.latest();
    for (&epoch, gens) in &scan.prepared {
        if discard_prepared || latest.is_some_and(|l| epoch <= l) {
            for &g in gens {
                remove_epoch_dir(dir, &epoch_dir_name(true, epoch, g))?;
            }
        }
    }
    for (&epoch, gens) in &scan.committed {
        for &g in &gens[..gens.len() - 1] {
            remove_epoch_dir(dir, &epoch_dir_name(false, epoch, g))?;
        }
    }
    Ok(())
}

/// Deletes committed epochs that neither the `keep_committed` newest committed epochs, nor
/// a pinned epoch, nor any prepared epoch depend on (caller holds the rank lock). If any dependency cannot be
/// established (unreadable manifest, missing parent) nothing is deleted.
pub(crate) fn apply_retention(dir: &Path, rank: u32, policy: &RetentionPolicy) -> Result<()> {
    let scan = scan_rank(dir)?;
    let mut roots: Vec<u64> = scan
        .committed
        .keys()
        .rev()
        .take(policy.keep_committed)
        .copied()
        .collect();
    roots.extend(scan.pinned.iter().filter(|e| scan.committed.contains_key(e)));
    for (&epoch, gens) in &scan.prepared {
        let g = gens[gens.len() - 1];
        let data = EpochData::load(&dir.join(epoch_dir_name(true, epoch, g)), rank, epoch, g)?;
        if !data.manifest.full {
            roots.extend(data.manifest.parent);
        }
    }
    let mut needed = BTreeSet::new();
    for root in roots {
        let mut epoch = root;
        while needed.insert(epoch) {
            let g = scan.committed_gen(epoch).ok_or_else(|| StoreError::Corrupt {
                rank,
                epoch,
                detail: "needed by a retained epoch but not committed".into(),
            })?;
            let data = EpochData::load(&dir.join(epoch_dir_name(false, epoch, g)), rank, epoch, g)?;
            match (data.manifest.full, data.manifest.parent) {
                (false, Some(p)) => epoch = p,
                _ => break,
            }
        }
    }
    // Newest first: an epoch only depends on older ones, so a crash part-way leaves every
    // epoch still listed with its whole chain.
    for (&epoch, gens) in scan.committed.iter().rev() {
        let keep_newest = needed.contains(&epoch);
        for (i, &g) in gens.iter().enumerate() {
            if !(keep_newest && i == gens.len() - 1) {
                remove_epoch_dir(dir, &epoch_dir_name(false, epoch, g))?;
            }
        }
    }
    Ok(())
}
