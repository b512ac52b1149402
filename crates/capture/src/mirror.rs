//! Copies of memory ranges kept current by copying only what changed: a staging area for
//! checkpoints taken in the background (a training loop stages its state, goes on, and the
//! copy is written out while it runs).
//!
//! Each source range is tracked by a [`Tracker`]: its page-aligned interior by kernel write
//! tracking where the kernel and the memory allow (userfaultfd + `PAGEMAP_SCAN`: the cost of a
//! refresh grows with the pages written, not with the range), its unaligned head and tail —
//! allocators hand out memory a few bytes past a page boundary — by hashing. A refresh copies
//! the blocks written since the previous refresh, all of a range the first time.

use std::collections::BTreeMap;

use crate::align::page_size;
use crate::error::CaptureError;
use crate::tracker::{Backend, TrackMode, Tracker};

/// Block size of the hashed pieces (an unaligned head or tail is less than a page; a whole
/// range is hashed only where kernel tracking is unavailable).
const HASH_BLOCK: usize = 64 << 10;

/// One tracked piece of a mirrored range: where it starts within the range.
struct Piece {
    mirror: u32,
    offset: usize,
}

/// A mirrored range: its source, its copy and the tracker regions covering it.
struct Range {
    source: usize,
    copy: usize,
    len: usize,
    pieces: Vec<u32>,
}

/// What a [`Mirror::refresh`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// Bytes copied from sources to copies.
    pub copied: u64,
    /// Of those, by range (ranges with nothing copied left out): what a caller weighs to
    /// stop tracking a range most of which changes every time.
    pub copied_by_range: BTreeMap<u32, u64>,
    /// Bytes of the ranges, all of which are now current.
    pub mirrored: u64,
    /// Of those, bytes tracked by kernel write tracking (the rest is hashed).
    pub kernel_tracked: u64,
}

/// Keeps a copy of each registered range equal to its source as of the last [`Mirror::refresh`].
pub struct Mirror {
    tracker: Tracker,
    ranges: BTreeMap<u32, Range>,
    pieces: BTreeMap<u32, Piece>,
    next_range: u32,
    next_piece: u32,
}

impl Mirror {
    /// A mirror with kernel write tracking where the kernel has it, hashing otherwise.
    pub fn new() -> Result<Mirror, CaptureError> {
        Ok(Mirror {
            tracker: Tracker::new(TrackMode::Auto, HASH_BLOCK)?,
            ranges: BTreeMap::new(),
            pieces: BTreeMap::new(),
            next_range: 0,
            next_piece: 0,
        })
    }

    /// Mirrors `[source, source + len)` into `[copy, copy + len)` and returns the range's id;
    /// the next refresh copies all of it.
    ///
    /// # Safety
    /// Until the range is removed or the mirror dropped: the source stays mapped (not
    /// remapped) and readable and is registered with no other userfaultfd; the copy stays
    /// writable memory that nothing else reads or writes during a refresh.
    pub unsafe fn add(&mut self, source: *const u8, copy: *mut u8, len: usize) -> Result<u32, CaptureError> {
        let id = self.next_range;
        let start = source as usize;
        let end = start
            .checked_add(len)
            .ok_or_else(|| CaptureError::InvalidRegion {
                id,
                reason: "address range overflows".into(),
            })?;
        let copy_start = copy as usize;
        if copy_start < end && start < copy_start.saturating_add(len) {
            return Err(CaptureError::InvalidRegion {
                id,
                reason: "the copy overlaps its source".into(),
            });
        }
        let mut pieces = Vec::with_capacity(3);
        for (from, to) in split_at_pages(start, end, page_size()) {
            let piece = self.next_piece;
            // SAFETY: within the source range, which the caller keeps mapped (add's contract).
            if let Err(e) = unsafe { self.tracker.add_region(piece, from as *const u8, to - from) } {
                self.forget(&pieces);
                return Err(e);
            }
            self.next_piece += 1;
            self.pieces.insert(
                piece,
                Piece {
                    mirror: id,
                    offset: from - start,
                },
            );
            pieces.push(piece);
        }
        self.next_range += 1;
        self.ranges.insert(
            id,
            Range {
                source: start,
                copy: copy_start,
                len,
                pieces,
            },
        );
        Ok(id)
    }

    /// Stops mirroring range `id`; its source and copy may be freed afterwards.
    pub fn remove(&mut self, id: u32) -> Result<(), CaptureError> {
        let range = self.ranges.remove(&id).ok_or(CaptureError::UnknownRegion(id))?;
        self.forget(&range.pieces);
        Ok(())
    }

    fn forget(&mut self, pieces: &[u32]) {
        for piece in pieces {
            self.pieces.remove(piece);
            // A piece whose unregistering fails stays write-protected at worst, which costs
            // the memory's next writer a fault resolved by the kernel; it is tracked no more.
            let _ = self.tracker.remove_region(*piece);
        }
    }

    /// Copies every block written since the previous refresh (all of a range added since)
    /// from its source to its copy. The sources' writers must be paused: a write racing with
    /// the copy would be seen by the next refresh, but could tear this one.
    pub fn refresh(&mut self) -> Result<Refreshed, CaptureError> {
        let mut done = Refreshed::default();
        for dirty in self.tracker.collect_dirty()? {
            let piece = &self.pieces[&dirty.id];
            let range = &self.ranges[&piece.mirror];
            done.mirrored += dirty.len;
            if dirty.backend == Backend::Uffd {
                done.kernel_tracked += dirty.len;
            }
            for (offset, len) in dirty.byte_ranges() {
                let at = piece.offset + offset as usize;
                debug_assert!(at + len as usize <= range.len);
                // SAFETY: `at..at + len` lies within the range (the tracker's blocks are
                // clipped to its piece, which lies within the range); add's contract keeps
                // the source readable, the copy writable and the two apart.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        (range.source + at) as *const u8,
                        (range.copy + at) as *mut u8,
                        len as usize,
                    );
                }
                done.copied += len;
                *done.copied_by_range.entry(piece.mirror).or_default() += len;
            }
        }
        Ok(done)
    }
}

/// `[start, end)` cut at its first and last page boundaries: the unaligned head, the
/// page-aligned interior and the unaligned tail, whichever are not empty (the whole range
/// when it holds no full page).
fn split_at_pages(start: usize, end: usize, page: usize) -> Vec<(usize, usize)> {
    let first = start.next_multiple_of(page);
    let last = end - end % page;
    if first >= last {
        return vec![(start, end)];
    }
    [(start, first), (first, last), (last, end)]
        .into_iter()
        .filter(|(from, to)| from < to)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::AlignedBuf;

    #[test]
    fn a_range_is_cut_at_its_page_boundaries() {
        assert_eq!(
            split_at_pages(64, 3 * 4096 + 8, 4096),
            [(64, 4096), (4096, 12288), (12288, 12296)]
        );
        assert_eq!(split_at_pages(4096, 8192, 4096), [(4096, 8192)]);
        assert_eq!(
            split_at_pages(64, 2 * 4096 + 8, 4096),
            [(64, 4096), (4096, 8192), (8192, 8200)]
        );
        assert_eq!(split_at_pages(64, 4096 + 8, 4096), [(64, 4104)]);
        assert_eq!(split_at_pages(64, 4000, 4096), [(64, 4000)]);
        assert_eq!(split_at_pages(4000, 4200, 4096), [(4000, 4200)]);
    }

    /// Source and copy compared whole after each refresh (the reference), with writes into
    /// the unaligned head, the interior and the tail; only the written blocks are copied.
    #[test]
    fn a_refresh_copies_what_changed_and_leaves_the_copy_equal() {
        let page = page_size();
        // Anonymous, page-aligned memory; the range starts 64 bytes in, as an allocator's does.
        let mut source = AlignedBuf::new(16 * page).unwrap();
        let mut copy = vec![0u8; 16 * page];
        for (i, b) in source.iter_mut().enumerate() {
            *b = i as u8;
        }
        let len = 15 * page;
        let mut mirror = Mirror::new().unwrap();
        // SAFETY: both buffers outlive the mirror and nothing else touches them.
        let id = unsafe { mirror.add(source.as_ptr().add(64), copy.as_mut_ptr(), len) }.unwrap();
        let first = mirror.refresh().unwrap();
        assert_eq!(first.copied, len as u64);
        assert_eq!(first.copied_by_range, BTreeMap::from([(id, len as u64)]));
        assert_eq!(first.mirrored, len as u64);
        assert_eq!(&copy[..len], &source[64..64 + len]);
        assert_eq!(mirror.refresh().unwrap().copied, 0, "nothing was written");
        for at in [70, 5 * page + 3, 64 + len - 1] {
            source[at] ^= 0xff;
        }
        let second = mirror.refresh().unwrap();
        assert_eq!(&copy[..len], &source[64..64 + len]);
        if second.kernel_tracked > 0 {
            // A page for the interior's write, the head and the tail whole (each under a page).
            assert_eq!(second.copied, (page + (page - 64) + 64) as u64, "{second:?}");
        }
        mirror.remove(id).unwrap();
        source[6 * page] ^= 1;
        assert_eq!(mirror.refresh().unwrap(), Refreshed::default());
        assert!(mirror.remove(id).is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Any range (any start within a page, any length up to 12 pages) and any rounds of
        /// writes anywhere in it: after each refresh the copy equals the source, byte for byte.
        #[test]
        fn the_copy_equals_the_source_after_every_refresh(
            offset in 0usize..4096,
            len in 1usize..12 * 4096,
            rounds in proptest::collection::vec(proptest::collection::vec((0usize..1 << 20, 0u8..=255), 0..20), 1..5),
        ) {
            let mut source = AlignedBuf::new(offset + len).unwrap();
            let mut copy = vec![0u8; len];
            let mut mirror = Mirror::new().unwrap();
            // SAFETY: both buffers outlive the mirror and nothing else touches them.
            unsafe { mirror.add(source.as_ptr().add(offset), copy.as_mut_ptr(), len) }.unwrap();
            for writes in rounds {
                for (at, value) in writes {
                    source[offset + at % len] = value;
                }
                mirror.refresh().unwrap();
                proptest::prop_assert!(copy[..] == source[offset..offset + len]);
            }
        }
    }

    #[test]
    fn a_copy_overlapping_its_source_is_refused() {
        let mut buffer = vec![0u8; 8192];
        let mut mirror = Mirror::new().unwrap();
        let source = buffer.as_ptr();
        // SAFETY: refused before anything is registered.
        let err = unsafe { mirror.add(source, buffer.as_mut_ptr().add(100), 4096) }.unwrap_err();
        assert!(err.to_string().contains("overlaps its source"), "{err}");
    }
}
