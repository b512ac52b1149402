//! Dirty-block tracking over registered memory regions.
//!
//! One [`Tracker`] per rank. Each region is tracked by one of two backends:
//! - **uffd**: kernel write tracking (userfaultfd async write-protect + `PAGEMAP_SCAN`), block =
//!   one page. Cost is proportional to what changed, not to the region size, but it only sees
//!   writes through this process's page tables.
//! - **hash**: xxh3 of every block compared with the previous checkpoint's. Portable and sees
//!   every change (DMA, other mappings, another process writing shared memory), at the price
//!   of reading the whole region at every checkpoint.
//!
//! Kernel tracking is used only for page-aligned regions of private anonymous memory: a
//! region not page aligned cannot be protected on its own, and in shared or file-backed
//! memory writes made through another mapping (another rank, the file) would go unseen. In
//! [`TrackMode::Auto`] such a region uses hashing (the backend is returned by `add_region` and
//! reported with each `DirtyRegion`); in [`TrackMode::Uffd`] it is refused with the reason.

use std::collections::BTreeMap;

use serde::Serialize;
use xxhash_rust::xxh3::xxh3_64;

use crate::align::page_size;
use crate::error::CaptureError;
use crate::maps::MemoryMap;
use crate::uffd::{self, Uffd};

/// Which backend(s) a tracker may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackMode {
    /// Kernel tracking where the kernel supports it and the region is page aligned, else hash.
    Auto,
    /// Kernel tracking only; fails when unsupported or when a region is not page aligned.
    Uffd,
    /// Hashing only (also catches writes the page tables cannot see).
    Hash,
}

/// The backend actually tracking a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// userfaultfd async write-protect + `PAGEMAP_SCAN`, page-sized blocks.
    Uffd,
    /// xxh3 per block, block size as configured.
    Hash,
}

/// The blocks of one region that changed since the previous [`Tracker::collect_dirty`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyRegion {
    /// The caller's region id.
    pub id: u32,
    /// Which backend found these blocks.
    pub backend: Backend,
    /// Block size in bytes (page size for uffd).
    pub block_size: u64,
    /// Region length in bytes (the last block may be partial).
    pub len: u64,
    /// Indices of changed blocks, ascending.
    pub blocks: Vec<u64>,
}

impl DirtyRegion {
    /// Byte ranges `(offset, len)` of the changed blocks, consecutive blocks merged and the
    /// last one clipped to the region: what the caller copies out.
    pub fn byte_ranges(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &b in &self.blocks {
            let off = b * self.block_size;
            let len = self.block_size.min(self.len - off);
            match out.last_mut() {
                Some((o, l)) if *o + *l == off => *l += len,
                _ => out.push((off, len)),
            }
        }
        out
    }

    /// Total bytes in the changed blocks.
    pub fn dirty_bytes(&self) -> u64 {
        self.byte_ranges().iter().map(|r| r.1).sum()
    }
}

enum Kind {
    Uffd,
    Hash(Vec<u64>),
}

struct Region {
    start: usize,
    len: usize,
    /// False until the first collect, which reports everything and arms tracking.
    armed: bool,
    kind: Kind,
}

/// Finds the blocks of registered regions that changed between checkpoints.
pub struct Tracker {
    mode: TrackMode,
    hash_block: usize,
    uffd: Option<Uffd>,
    regions: BTreeMap<u32, Region>,
    /// Region ids by start address: the index that lets [`Tracker::add_region`] check a new
    /// region for overlap against one neighbour instead of every region (a rank may protect
    /// 100,000 small regions; a scan of all of them per region made protecting them
    /// quadratic).
    by_start: BTreeMap<usize, u32>,
}

/// Whether kernel write tracking works on this system (probed once per process). `Err` says
/// why not, for logs and for tests that must skip.
pub fn uffd_available() -> Result<(), CaptureError> {
    uffd::probe().map_err(CaptureError::UffdUnavailable)
}

impl Tracker {
    /// Creates a tracker. `hash_block_size` is the block size of hash-tracked regions
    /// (64 KiB is a good default: small enough for sparse changes, large enough that hashing
    /// runs at memory speed); uffd-tracked regions always use the page size.
    ///
    /// Fails for `TrackMode::Uffd` when the kernel lacks async write-protect.
    pub fn new(mode: TrackMode, hash_block_size: usize) -> Result<Self, CaptureError> {
        if hash_block_size == 0 || hash_block_size > 1 << 30 {
            return Err(CaptureError::InvalidConfig(format!(
                "hash block size must be in 1..=1GiB, got {hash_block_size}"
            )));
        }
        let uffd = match mode {
            TrackMode::Hash => None,
            TrackMode::Auto => match uffd::probe() {
                Ok(()) => Uffd::open().ok(),
                Err(_) => None,
            },
            TrackMode::Uffd => {
                uffd::probe().map_err(CaptureError::UffdUnavailable)?;
                Some(Uffd::open().map_err(|e| CaptureError::UffdUnavailable(e.to_string()))?)
            }
        };
        Ok(Self {
            mode,
            hash_block: hash_block_size,
            uffd,
            regions: BTreeMap::new(),
            by_start: BTreeMap::new(),
        })
    }

    /// The backend new page-aligned regions will get.
    pub fn preferred_backend(&self) -> Backend {
        if self.uffd.is_some() {
            Backend::Uffd
        } else {
            Backend::Hash
        }
    }

    /// Registers region `id` = `[ptr, ptr+len)` and returns the backend tracking it. The first
    /// [`Tracker::collect_dirty`] after this reports all of its blocks.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable memory that stays mapped (and is not remapped) until
    /// the region is removed or the tracker dropped, and not registered with another
    /// userfaultfd.
    pub unsafe fn add_region(
        &mut self,
        id: u32,
        ptr: *const u8,
        len: usize,
    ) -> Result<Backend, CaptureError> {
        let bad = |reason: String| CaptureError::InvalidRegion { id, reason };
        if self.regions.contains_key(&id) {
            return Err(bad("id already registered".into()));
        }
        if len == 0 {
            return Err(bad("zero length".into()));
        }
        let start = ptr as usize;
        let end = start
            .checked_add(len)
            .ok_or_else(|| bad("address range overflows".into()))?;
        if let Some((other, r)) = self.overlapping(start, end) {
            return Err(bad(format!(
                "{start:#x}..{end:#x} overlaps region {other} at {:#x}..{:#x}",
                r.start,
                r.start + r.len
            )));
        }
        let page = page_size();
        let aligned = start.is_multiple_of(page) && len.is_multiple_of(page);
        let kind = match &self.uffd {
            None => Kind::Hash(Vec::new()),
            Some(u) => {
                let refusal = if !aligned {
                    Some(format!(
                        "uffd tracking needs page-aligned start and length (page {page}, start {start:#x}, len {len})"
                    ))
                } else {
                    match MemoryMap::holding([(start, len)]).map(|map| map.private_anonymous(start, len)) {
                        Ok(true) => u
                            .register(start, len)
                            .err()
                            .map(|e| format!("userfaultfd register: {e}")),
                        Ok(false) => Some(
                            "not private anonymous memory: write-protect would miss writes made \
                             through other mappings"
                                .into(),
                        ),
                        Err(e) => Some(format!("reading /proc/self/maps: {e}")),
                    }
                };
                match refusal {
                    None => Kind::Uffd,
                    Some(reason) if self.mode == TrackMode::Uffd => return Err(bad(reason)),
                    // Auto still tracks the region, by hashing.
                    Some(_) => Kind::Hash(Vec::new()),
                }
            }
        };
        let backend = match kind {
            Kind::Uffd => Backend::Uffd,
            Kind::Hash(_) => Backend::Hash,
        };
        self.by_start.insert(start, id);
        self.regions.insert(
            id,
            Region {
                start,
                len,
                armed: false,
                kind,
            },
        );
        Ok(backend)
    }

    /// Stops tracking region `id` (its memory may be freed afterwards).
    pub fn remove_region(&mut self, id: u32) -> Result<(), CaptureError> {
        let r = self.regions.remove(&id).ok_or(CaptureError::UnknownRegion(id))?;
        self.by_start.remove(&r.start);
        if let (Kind::Uffd, Some(u)) = (&r.kind, &self.uffd) {
            u.unregister(r.start, r.len)
                .map_err(|e| CaptureError::io(format!("unregister region {id}"), e))?;
        }
        Ok(())
    }

    /// The registered region that overlaps `[start, end)`, if any, with its id. Registered
    /// regions never overlap one another, so ordered by start they are ordered by end too:
    /// of those starting before `end`, the last one reaches furthest, and if it ends at or
    /// before `start` none of them overlaps. One lookup, O(log regions).
    fn overlapping(&self, start: usize, end: usize) -> Option<(u32, &Region)> {
        let (_, &id) = self.by_start.range(..end).next_back()?;
        let r = &self.regions[&id];
        (r.start + r.len > start).then_some((id, r))
    }

    /// Returns, per region (ascending id), the blocks changed since the previous call, and
    /// re-arms tracking so the next call sees only later writes. Newly added regions report
    /// every block. The caller copies the blocks right away, while the rank is paused: a write
    /// racing with the copy would be seen next time but could tear this copy.
    pub fn collect_dirty(&mut self) -> Result<Vec<DirtyRegion>, CaptureError> {
        let page = page_size() as u64;
        let mut out = Vec::with_capacity(self.regions.len());
        for (&id, r) in self.regions.iter_mut() {
            let (backend, block_size) = match r.kind {
                Kind::Uffd => (Backend::Uffd, page),
                Kind::Hash(_) => (Backend::Hash, self.hash_block as u64),
            };
            let nblocks = (r.len as u64).div_ceil(block_size);
            let mut blocks = Vec::new();
            match &mut r.kind {
                Kind::Uffd => {
                    let u = self
                        .uffd
                        .as_mut()
                        .expect("uffd regions exist only with an open userfaultfd");
                    if r.armed {
                        u.scan_written(r.start, r.len, &mut blocks)
                            .map_err(|e| CaptureError::io(format!("scan region {id}"), e))?;
                    } else {
                        u.protect(r.start, r.len)
                            .map_err(|e| CaptureError::io(format!("protect region {id}"), e))?;
                        blocks.extend(0..nblocks);
                    }
                }
                Kind::Hash(prev) => {
                    // SAFETY: add_region's contract keeps the range readable while registered.
                    let data = unsafe { std::slice::from_raw_parts(r.start as *const u8, r.len) };
                    hash_scan(data, self.hash_block, prev, r.armed, &mut blocks);
                }
            }
            r.armed = true;
            out.push(DirtyRegion {
                id,
                backend,
                block_size,
                len: r.len as u64,
                blocks,
            });
        }
        Ok(out)
    }
}

/// Hashes every block of `data`, appends indices whose hash differs from `prev` (all of them
/// when `!armed`) and stores the new hashes in `prev`.
fn hash_scan(data: &[u8], block: usize, prev: &mut Vec<u64>, armed: bool, out: &mut Vec<u64>) {
    if !armed {
        prev.clear();
        prev.extend(data.chunks(block).map(xxh3_64));
        out.extend(0..prev.len() as u64);
        return;
    }
    for (i, (chunk, h)) in data.chunks(block).zip(prev.iter_mut()).enumerate() {
        let n = xxh3_64(chunk);
        if n != *h {
            *h = n;
            out.push(i as u64);
        }
    }
}
