//! Reading epochs: loading manifests, following delta chains, checking every block.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{io_at, Result, StoreError};
use crate::layout::{epoch_dir_name, scan_rank, RankScan, DATA_FILE, MANIFEST_FILE};
use crate::manifest::{parse_manifest, ItemManifest, Manifest};

/// One stored epoch generation, its manifest checked and its data file open.
///
/// Keeping the file open means a reader is unaffected by retention deleting the directory
/// meanwhile (the inode lives until the last descriptor closes).
#[derive(Debug)]
pub(crate) struct EpochData {
    pub manifest: Manifest,
    /// Data-file offset of each item's first stored block.
    offsets: Vec<u64>,
    /// Item positions by name, built at the first [`EpochData::item_index`]: reads look items
    /// up by name once per piece, and a restart of a rank with 100,000 regions reads 100,000
    /// pieces, so a scan of the items per lookup made it quadratic. Built lazily because most
    /// loads (retention, [`crate::Store::manifest`]) never look an item up.
    by_name: OnceLock<HashMap<String, usize>>,
    file: File,
    data_path: PathBuf,
}

impl EpochData {
    /// Loads the epoch in `dir`, checking that the manifest is intact, is the one the
    /// directory name promises, and that the data file has the length it describes.
    pub(crate) fn load(dir: &Path, rank: u32, epoch: u64, generation: u32) -> Result<EpochData> {
        let corrupt = |detail: String| StoreError::Corrupt { rank, epoch, detail };
        let mpath = dir.join(MANIFEST_FILE);
        let bytes = std::fs::read(&mpath).map_err(io_at(&mpath))?;
        let manifest =
            parse_manifest(&bytes).map_err(|e| corrupt(format!("manifest {}: {e}", mpath.display())))?;
        if manifest.rank != rank || manifest.epoch != epoch || manifest.generation != generation {
            return Err(corrupt(format!(
                "manifest {} describes rank {} epoch {} generation {}",
                mpath.display(),
                manifest.rank,
                manifest.epoch,
                manifest.generation
            )));
        }
        let data_path = dir.join(DATA_FILE);
        let file = File::open(&data_path).map_err(io_at(&data_path))?;
        let actual = file.metadata().map_err(io_at(&data_path))?.len();
        if actual != manifest.data_len {
            return Err(corrupt(format!(
                "data file {} is {actual} bytes, manifest says {}",
                data_path.display(),
                manifest.data_len
            )));
        }
        let mut offsets = Vec::with_capacity(manifest.items.len());
        let mut at = 0u64;
        for item in &manifest.items {
            offsets.push(at);
            at += item.stored_bytes();
        }
        Ok(EpochData {
            manifest,
            offsets,
            by_name: OnceLock::new(),
            file,
            data_path,
        })
    }

    /// Position of the item named `name` in the manifest: one hash lookup.
    pub(crate) fn item_index(&self, name: &str) -> Option<usize> {
        let by_name = self.by_name.get_or_init(|| {
            let names = self.manifest.items.iter().map(|i| i.name.clone());
            names.zip(0..).collect()
        });
        by_name.get(name).copied()
    }

    /// The item named `name`: one hash lookup.
    pub(crate) fn item(&self, name: &str) -> Option<&ItemManifest> {
        self.item_index(name).map(|i| &self.manifest.items[i])
    }

    /// Reads the `k`-th stored block of item `item` into `buf` and checks its CRC.
    /// `target` is the epoch being read, for the error message.
    pub(crate) fn read_block(&self, target: u64, item: usize, k: usize, buf: &mut Vec<u8>) -> Result<()> {
        let it = &self.manifest.items[item];
        buf.resize(it.block_len(it.blocks[k].index) as usize, 0);
        self.read_blocks(target, item, k, buf)
    }

    /// Fills `dst` with stored blocks `k, k + 1, …` of item `item` — one read, however many
    /// blocks: they lie back to back in the data file — and checks each block's CRC.
    /// `dst` must end on a block boundary (or the item's end).
    pub(crate) fn read_blocks(&self, target: u64, item: usize, k: usize, dst: &mut [u8]) -> Result<()> {
        let it = &self.manifest.items[item];
        // Only an item's last block is short, so the k-th stored block starts k full
        // blocks into the item's data.
        let off = self.offsets[item] + k as u64 * u64::from(it.block_size);
        self.file
            .read_exact_at(dst, off)
            .map_err(io_at(&self.data_path))?;
        let mut at = 0;
        for entry in &it.blocks[k..] {
            if at == dst.len() {
                break;
            }
            let n = it.block_len(entry.index) as usize;
            if crc32c::crc32c(&dst[at..at + n]) != entry.crc32c {
                return Err(StoreError::BlockChecksum {
                    rank: self.manifest.rank,
                    epoch: target,
                    item: it.name.clone(),
                    block: entry.index,
                    stored_in: self.manifest.epoch,
                });
            }
            at += n;
        }
        Ok(())
    }
}

/// Loads the newest committed generation of `epoch`, or when there is none and
/// `allow_prepared`, its newest prepared generation.
pub(crate) fn locate(
    rank_dir: &Path,
    scan: &RankScan,
    rank: u32,
    epoch: u64,
    allow_prepared: bool,
) -> Result<EpochData> {
    let (prepared, generation) = match scan.committed_gen(epoch) {
        Some(g) => (false, g),
        None => match scan.prepared_gen(epoch).filter(|_| allow_prepared) {
            Some(g) => (true, g),
            None => return Err(StoreError::NoEpoch { rank, epoch }),
        },
    };
    let dir = rank_dir.join(epoch_dir_name(prepared, epoch, generation));
    EpochData::load(&dir, rank, epoch, generation)
}

/// An epoch together with every epoch its content depends on: the last full epoch first,
/// then each delta up to the epoch itself.
pub(crate) struct Chain {
    links: Vec<EpochData>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Chain(epoch {})", self.epoch())
    }
}

impl Chain {
    /// Opens the chain of `epoch` of `rank`. The epoch itself may be prepared when
    /// `allow_prepared` (the cluster diffs and encodes an epoch before committing it); the
    /// epochs it depends on must be committed.
    pub(crate) fn open(rank_dir: &Path, rank: u32, epoch: u64, allow_prepared: bool) -> Result<Chain> {
        let scan = scan_rank(rank_dir)?;
        let mut links = vec![locate(rank_dir, &scan, rank, epoch, allow_prepared)?];
        loop {
            let last = &links[links.len() - 1].manifest;
            if last.full {
                break;
            }
            // validate() guarantees a delta has a parent smaller than itself, so the walk
            // ends.
            let parent = last.parent.unwrap_or(0);
            let from = last.epoch;
            let generation = scan.committed_gen(parent).ok_or_else(|| StoreError::Corrupt {
                rank,
                epoch,
                detail: format!("epoch {from} needs epoch {parent}, which is not committed"),
            })?;
            let dir = rank_dir.join(epoch_dir_name(false, parent, generation));
            links.push(EpochData::load(&dir, rank, parent, generation)?);
        }
        links.reverse();
        Ok(Chain { links })
    }

    /// The epoch the chain was opened for.
    pub(crate) fn target(&self) -> &EpochData {
        &self.links[self.links.len() - 1]
    }

    /// Epoch number of [`Chain::target`].
    pub(crate) fn epoch(&self) -> u64 {
        self.target().manifest.epoch
    }

    /// Length of item `name` in the target epoch, or [`StoreError::NoItem`].
    pub(crate) fn item_len(&self, name: &str) -> Result<u64> {
        let target = self.target();
        target
            .item(name)
            .map(|i| i.len)
            .ok_or_else(|| StoreError::NoItem {
                rank: target.manifest.rank,
                epoch: target.manifest.epoch,
                item: name.to_string(),
            })
    }

    /// Fills `buf` with bytes `offset..offset + buf.len()` of item `name` as of the target
    /// epoch, where bytes past the item's end (or of an absent item) read as zero.
    ///
    /// Replays the chain over the window only: each epoch first cuts the item to its
    /// length at that epoch (bytes beyond become zero), then writes its stored blocks. A
    /// block that fails its checksum fails the read only if no newer epoch overwrites or
    /// cuts all of it: rot in bytes the target no longer holds is not damage to it.
    pub(crate) fn read_padded(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        let a = offset;
        let b = offset
            .checked_add(buf.len() as u64)
            .ok_or_else(|| StoreError::Invalid("read range overflows".into()))?;
        // A full first epoch holding every block of the item over the whole window writes every
        // byte of it: zeroing the window first would be one more pass over memory, a quarter of
        // a restart's time when it reads gigabytes.
        let covered = self.links.first().is_some_and(|first| {
            first.manifest.full
                && first
                    .item(name)
                    .is_some_and(|item| item.len >= b && item.blocks.len() as u64 == item.block_count())
        });
        if !covered {
            buf.fill(0);
        }
        // Invariant: window bytes at or beyond `nonzero_end` are zero (or, when `covered`, are
        // written by the first epoch before any later one reads the invariant).
        let mut nonzero_end = a;
        let mut scratch = Vec::new();
        let mut damage = Damage::default();
        // Blocks before this index of the current link are read one at a time: a run of
        // them failed its checksums.
        let mut singly_until;
        let target = self.epoch();
        for link in &self.links {
            let index = link.item_index(name);
            let len = index.map_or(0, |i| link.manifest.items[i].len);
            if len < nonzero_end {
                let from = len.max(a);
                buf[(from - a) as usize..(nonzero_end - a) as usize].fill(0);
                nonzero_end = from;
            }
            // Bytes at or past the item's length read as zero from here on.
            damage.overwritten(len.max(a), b);
            let Some(i) = index else { continue };
            let item = &link.manifest.items[i];
            let bs = u64::from(item.block_size);
            let first = a / bs;
            let mut k = item.blocks.partition_point(|blk| blk.index < first);
            singly_until = 0;
            while k < item.blocks.len() {
                // index < block_count, so index * bs < len: no overflow.
                let bstart = item.blocks[k].index * bs;
                if bstart >= b {
                    break;
                }
                // Stored blocks with consecutive indices that lie wholly inside the window
                // are read in one go, straight into it, up to `READ_RUN` bytes: the blocks'
                // checksums are then computed while the bytes are still in the cache.
                let mut end = k;
                let mut bend = bstart;
                while end < item.blocks.len()
                    && item.blocks[end].index == item.blocks[k].index + (end - k) as u64
                    && bstart >= a
                    && bend + item.block_len(item.blocks[end].index) <= b
                    && (end == k || bend - bstart + item.block_len(item.blocks[end].index) <= READ_RUN)
                {
                    bend += item.block_len(item.blocks[end].index);
                    end += 1;
                }
                if end > k && k >= singly_until {
                    let run = &mut buf[(bstart - a) as usize..(bend - a) as usize];
                    match link.read_blocks(target, i, k, run) {
                        Ok(()) => {
                            damage.overwritten(bstart, bend);
                            nonzero_end = nonzero_end.max(bend);
                            k = end;
                            continue;
                        }
                        // Block by block, so that the damage is known to the block.
                        Err(StoreError::BlockChecksum { .. }) => singly_until = end,
                        Err(e) => return Err(e),
                    }
                }
                let read = link.read_block(target, i, k, &mut scratch);
                let lo = bstart.max(a);
                let hi = (bstart + item.block_len(item.blocks[k].index)).min(b);
                if lo < hi {
                    if let Err(e) = read {
                        damage.found(lo, hi, e)?;
                    } else {
                        buf[(lo - a) as usize..(hi - a) as usize]
                            .copy_from_slice(&scratch[(lo - bstart) as usize..(hi - bstart) as usize]);
                        damage.overwritten(lo, hi);
                    }
                    nonzero_end = nonzero_end.max(hi);
                }
                k += 1;
            }
        }
        damage.into_result()
    }

    /// Like [`Chain::read_padded`] but the window must lie inside an existing item.
    pub(crate) fn read_exact(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = self.item_len(name)?;
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > len) {
            return Err(StoreError::Invalid(format!(
                "range {offset}+{} outside item {name:?} of {len} bytes",
                buf.len()
            )));
        }
        self.read_padded(name, offset, buf)
    }
}

/// Byte ranges of a read's window whose stored block failed its checksum, each with its
/// error, until a newer epoch overwrites them ([`Chain::read_padded`]).
#[derive(Default)]
struct Damage {
    /// `(from, to, error)`: an index into `errors`, which a range split in two shares.
    ranges: Vec<(u64, u64, usize)>,
    errors: Vec<StoreError>,
}

impl Damage {
    /// Bytes `lo..hi` are damaged, if `e` is a checksum failure, unless a newer epoch
    /// overwrites them; any other error is the read's.
    fn found(&mut self, lo: u64, hi: u64, e: StoreError) -> Result<()> {
        if !matches!(e, StoreError::BlockChecksum { .. }) {
            return Err(e);
        }
        self.overwritten(lo, hi);
        self.ranges.push((lo, hi, self.errors.len()));
        self.errors.push(e);
        Ok(())
    }

    /// Bytes `lo..hi` now hold what a newer epoch says: damage there no longer matters.
    fn overwritten(&mut self, lo: u64, hi: u64) {
        if self.ranges.is_empty() || lo >= hi {
            return;
        }
        let mut left = Vec::with_capacity(self.ranges.len());
        for (a, b, e) in self.ranges.drain(..) {
            if a < lo {
                left.push((a, b.min(lo), e));
            }
            if b > hi {
                left.push((a.max(hi), b, e));
            }
        }
        self.ranges = left;
    }

    /// The damage left at the lowest offset, as the read's error.
    fn into_result(mut self) -> Result<()> {
        match self.ranges.iter().min_by_key(|(a, _, _)| *a) {
            Some(&(_, _, e)) => Err(self.errors.swap_remove(e)),
            None => Ok(()),
        }
    }
}

/// The most bytes [`Chain::read_padded`] reads with one call before it checks their blocks: about
/// a core's L2 cache.
const READ_RUN: u64 = 1 << 20;

/// Streams one item of one epoch (`std::io::Read` + `Seek`), for items too large to
/// materialize at once. Every block it returns has been checksum-verified; a damaged block
/// surfaces as an `io::Error` wrapping the [`StoreError`].
#[derive(Debug)]
pub struct ItemReader {
    chain: Chain,
    name: String,
    len: u64,
    pos: u64,
}

impl ItemReader {
    pub(crate) fn new(chain: Chain, name: &str) -> Result<ItemReader> {
        let len = chain.item_len(name)?;
        Ok(ItemReader {
            chain,
            name: name.to_string(),
            len,
            pos: 0,
        })
    }

    /// Length of the item.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the item is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Read for ItemReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.len.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.chain
            .read_padded(&self.name, self.pos, &mut buf[..n])
            .map_err(std::io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for ItemReader {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        let target = match pos {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        let target = target
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before start"))?;
        self.pos = target;
        Ok(target)
    }
}
