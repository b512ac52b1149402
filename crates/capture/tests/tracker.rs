//! Dirty tracking: both backends must report exactly the blocks written, epoch after epoch.

use std::collections::BTreeSet;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use eckpt_capture::{
    page_size, uffd_available, AlignedBuf, Backend, CaptureError, DirtyRegion, TrackMode, Tracker,
};

/// True when uffd tests can run; otherwise prints why they are skipped.
fn uffd_or_skip(test: &str) -> bool {
    match uffd_available() {
        Ok(()) => true,
        Err(why) => {
            println!("SKIP {test}: {why}");
            false
        }
    }
}

/// Changes one byte in each given block (XOR with a non-zero value so the content really
/// changes, which the hash backend needs).
fn touch(buf: &mut [u8], block: usize, blocks: &BTreeSet<usize>, rng: &mut StdRng) {
    for &b in blocks {
        let start = b * block;
        let end = (start + block).min(buf.len());
        let at = start + rng.random_range(0..end - start);
        buf[at] ^= (rng.random::<u64>() as u8) | 1;
    }
}

fn only(d: Vec<DirtyRegion>, id: u32) -> DirtyRegion {
    d.into_iter().find(|r| r.id == id).expect("region reported")
}

fn blocks_of(d: &DirtyRegion) -> BTreeSet<usize> {
    d.blocks.iter().map(|&b| b as usize).collect()
}

/// Random page sets over several epochs: each collect reports exactly the pages written since
/// the previous one, so re-arming works; the first collect reports everything.
fn exact_over_epochs(mode: TrackMode, block: usize, len: usize, seed: u64) {
    let mut buf = AlignedBuf::new(len).unwrap();
    buf.fill(0x5a);
    let mut t = Tracker::new(mode, block).unwrap();
    let backend = unsafe { t.add_region(7, buf.as_ptr(), len) }.unwrap();
    let bs = match backend {
        Backend::Uffd => page_size(),
        Backend::Hash => block,
    };
    let nblocks = len.div_ceil(bs);
    let first = only(t.collect_dirty().unwrap(), 7);
    assert_eq!(first.backend, backend);
    assert_eq!(first.block_size as usize, bs);
    assert_eq!(first.blocks, (0..nblocks as u64).collect::<Vec<_>>());
    let mut rng = StdRng::seed_from_u64(seed);
    for epoch in 0..12 {
        let want: BTreeSet<usize> = match epoch {
            0 => BTreeSet::new(),
            1 => (0..nblocks).collect(),
            _ => (0..rng.random_range(0..nblocks / 3 + 1))
                .map(|_| rng.random_range(0..nblocks))
                .collect(),
        };
        touch(&mut buf, bs, &want, &mut rng);
        let got = only(t.collect_dirty().unwrap(), 7);
        assert_eq!(blocks_of(&got), want, "{mode:?} epoch {epoch}");
        assert!(got.blocks.windows(2).all(|w| w[0] < w[1]), "ascending");
    }
}

#[test]
fn uffd_reports_exactly_the_pages_written() {
    if !uffd_or_skip("uffd_reports_exactly_the_pages_written") {
        return;
    }
    exact_over_epochs(TrackMode::Uffd, 1 << 16, 512 * page_size(), 1);
    // More dirty ranges than one PAGEMAP_SCAN call returns (1024): the continuation loop.
    exact_over_epochs(TrackMode::Uffd, 1 << 16, 8192 * page_size(), 2);
}

#[test]
fn uffd_alternating_pages_beyond_one_scan_buffer() {
    if !uffd_or_skip("uffd_alternating_pages_beyond_one_scan_buffer") {
        return;
    }
    let ps = page_size();
    let n = 5000;
    let mut buf = AlignedBuf::new(n * ps).unwrap();
    let mut t = Tracker::new(TrackMode::Uffd, 4096).unwrap();
    unsafe { t.add_region(1, buf.as_ptr(), n * ps) }.unwrap();
    t.collect_dirty().unwrap();
    // 2500 isolated pages = 2500 separate ranges, well past one scan buffer.
    for p in (0..n).step_by(2) {
        buf[p * ps + 3] = 1;
    }
    let got = only(t.collect_dirty().unwrap(), 1);
    assert_eq!(got.blocks, (0..n as u64).step_by(2).collect::<Vec<_>>());
    assert!(only(t.collect_dirty().unwrap(), 1).blocks.is_empty());
}

#[test]
fn uffd_first_writes_to_never_touched_pages_are_seen() {
    if !uffd_or_skip("uffd_first_writes_to_never_touched_pages_are_seen") {
        return;
    }
    let ps = page_size();
    let mut buf = AlignedBuf::new(64 * ps).unwrap(); // never populated
    let mut t = Tracker::new(TrackMode::Uffd, 4096).unwrap();
    unsafe { t.add_region(3, buf.as_ptr(), 64 * ps) }.unwrap();
    assert_eq!(only(t.collect_dirty().unwrap(), 3).blocks.len(), 64);
    buf[5 * ps] = 9;
    buf[63 * ps + 100] = 9;
    assert_eq!(only(t.collect_dirty().unwrap(), 3).blocks, vec![5, 63]);
}

#[test]
fn uffd_exact_on_transparent_huge_pages() {
    if !uffd_or_skip("uffd_exact_on_transparent_huge_pages") {
        return;
    }
    let ps = page_size();
    let len = 8 << 20;
    let mut buf = AlignedBuf::new(len).unwrap();
    // Best effort: ask for THP; the assertion holds whether or not the kernel grants it.
    unsafe { libc::madvise(buf.as_mut_ptr().cast(), len, libc::MADV_HUGEPAGE) };
    buf.fill(3);
    let mut t = Tracker::new(TrackMode::Uffd, 4096).unwrap();
    unsafe { t.add_region(1, buf.as_ptr(), len) }.unwrap();
    t.collect_dirty().unwrap();
    for p in [0usize, 1, 511, 512, 1500, 2047] {
        buf[p * ps + 8] = 4;
    }
    assert_eq!(
        only(t.collect_dirty().unwrap(), 1).blocks,
        vec![0, 1, 511, 512, 1500, 2047]
    );
}

#[test]
fn hash_reports_exactly_the_blocks_changed() {
    exact_over_epochs(TrackMode::Hash, 1 << 16, 200 << 16, 3);
    // Odd block size and a partial last block.
    exact_over_epochs(TrackMode::Hash, 1000, 123_457, 4);
}

#[test]
fn hash_sees_writes_through_another_mapping() {
    // Two shared mappings of one memfd: writes through the second bypass the first's page
    // tables entirely, as DMA or another process would. Hashing still sees them, and Auto
    // tracks such a shared mapping by hashing rather than refusing it.
    let ps = page_size();
    let len = 16 * ps;
    for mode in [TrackMode::Hash, TrackMode::Auto] {
        unsafe {
            let fd = libc::memfd_create(c"eckpt-test".as_ptr(), 0);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let a = libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0);
            let b = libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0);
            assert!(a != libc::MAP_FAILED && b != libc::MAP_FAILED);
            let mut t = Tracker::new(mode, ps).unwrap();
            assert_eq!(t.add_region(1, a.cast(), len).unwrap(), Backend::Hash, "{mode:?}");
            t.collect_dirty().unwrap();
            *b.cast::<u8>().add(9 * ps + 1) = 0xee;
            assert_eq!(only(t.collect_dirty().unwrap(), 1).blocks, vec![9]);
            drop(t);
            if mode == TrackMode::Auto && uffd_available().is_ok() {
                let mut strict = Tracker::new(TrackMode::Uffd, ps).unwrap();
                let e = strict.add_region(1, a.cast(), len).unwrap_err().to_string();
                assert!(e.contains("not private anonymous"), "{e}");
            }
            libc::munmap(a, len);
            libc::munmap(b, len);
            libc::close(fd);
        }
    }
}

#[test]
fn remove_and_readd_region() {
    let ps = page_size();
    for mode in [TrackMode::Auto, TrackMode::Hash] {
        let mut buf = AlignedBuf::new(32 * ps).unwrap();
        let mut other = AlignedBuf::new(8 * ps).unwrap();
        let mut t = Tracker::new(mode, ps).unwrap();
        unsafe { t.add_region(1, buf.as_ptr(), 32 * ps) }.unwrap();
        unsafe { t.add_region(2, other.as_ptr(), 8 * ps) }.unwrap();
        assert_eq!(t.collect_dirty().unwrap().len(), 2);
        t.remove_region(1).unwrap();
        buf[0] = 1;
        other[ps] = 1;
        let d = t.collect_dirty().unwrap();
        assert_eq!(d.len(), 1, "removed region no longer reported");
        assert_eq!(d[0].id, 2);
        assert_eq!(d[0].blocks, vec![1]);
        unsafe { t.add_region(1, buf.as_ptr(), 32 * ps) }.unwrap();
        assert_eq!(only(t.collect_dirty().unwrap(), 1).blocks.len(), 32);
        buf[31 * ps] = 5;
        assert_eq!(only(t.collect_dirty().unwrap(), 1).blocks, vec![31]);
        assert!(matches!(
            t.remove_region(99),
            Err(CaptureError::UnknownRegion(99))
        ));
    }
}

#[test]
fn bad_regions_are_refused_with_a_reason() {
    let ps = page_size();
    let buf = AlignedBuf::new(16 * ps).unwrap();
    let mut t = Tracker::new(TrackMode::Auto, ps).unwrap();
    unsafe { t.add_region(1, buf.as_ptr(), 8 * ps) }.unwrap();
    let dup = unsafe { t.add_region(1, buf.as_ptr().add(8 * ps), 8 * ps) };
    assert!(dup.unwrap_err().to_string().contains("already registered"));
    let overlap = unsafe { t.add_region(2, buf.as_ptr().add(4 * ps), 8 * ps) };
    let base = buf.as_ptr() as usize;
    assert_eq!(
        overlap.unwrap_err().to_string(),
        format!(
            "invalid region 2: {:#x}..{:#x} overlaps region 1 at {base:#x}..{:#x}",
            base + 4 * ps,
            base + 12 * ps,
            base + 8 * ps
        ),
        "the message says which ranges collide"
    );
    let empty = unsafe { t.add_region(3, buf.as_ptr().add(8 * ps), 0) };
    assert!(empty.unwrap_err().to_string().contains("zero length"));
    assert!(Tracker::new(TrackMode::Hash, 0).is_err());
}

/// What the tracker is asked in [`overlap_is_refused_exactly_and_adjacent_regions_accepted`]:
/// add `[offset, offset + len)` of a buffer, or remove the region added by the `k`-th
/// add (modulo those live).
#[derive(Debug, Clone)]
enum Op {
    Add { offset: usize, len: usize },
    Remove(prop::sample::Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..120, 1usize..24).prop_map(|(offset, len)| Op::Add { offset, len }),
        1 => any::<prop::sample::Index>().prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Against a model that checks every live region: a new region is refused exactly when
    /// it shares a byte with one (touching ends are not shared), and accepted otherwise,
    /// through any sequence of adds and removes. Small ranges in a small buffer, so that
    /// overlaps at either end, containment both ways and exact adjacency all come up.
    #[test]
    fn overlap_is_refused_exactly_and_adjacent_regions_accepted(ops in prop::collection::vec(op(), 1..60)) {
        let buf = [0u8; 144];
        let mut t = Tracker::new(TrackMode::Hash, 64).unwrap();
        let mut live: Vec<(u32, usize, usize)> = Vec::new();
        for (id, op) in (0u32..).zip(ops) {
            match op {
                Op::Add { offset, len } => {
                    let end = offset + len;
                    let collides = live.iter().find(|&&(_, s, e)| offset < e && s < end);
                    // SAFETY: the range lies in `buf`, which outlives the tracker.
                    let added = unsafe { t.add_region(id, buf.as_ptr().add(offset), len) };
                    match (collides, added) {
                        (None, Ok(_)) => live.push((id, offset, end)),
                        (Some(&(other, ..)), Err(e)) => {
                            let text = e.to_string();
                            prop_assert!(text.contains("overlaps region"), "{text}");
                            // The region named is one the new one really overlaps.
                            let named = live.iter().find(|r| text.contains(&format!("overlaps region {} ", r.0)));
                            prop_assert!(
                                named.is_some_and(|&(_, s, e)| offset < e && s < end),
                                "{text} (first colliding: {other})"
                            );
                        }
                        (collides, added) => prop_assert!(
                            false,
                            "{offset}..{end} with {live:?}: collides with {collides:?}, tracker said {added:?}"
                        ),
                    }
                }
                Op::Remove(k) if !live.is_empty() => {
                    let (id, ..) = live.remove(k.index(live.len()));
                    t.remove_region(id).unwrap();
                }
                Op::Remove(_) => {}
            }
        }
        let mut ids: Vec<u32> = t.collect_dirty().unwrap().iter().map(|d| d.id).collect();
        ids.sort_unstable();
        let mut want: Vec<u32> = live.iter().map(|r| r.0).collect();
        want.sort_unstable();
        prop_assert_eq!(ids, want);
    }
}

#[test]
fn adjacent_regions_are_accepted_and_a_byte_shared_at_either_end_is_not() {
    let buf = [0u8; 300];
    let mut t = Tracker::new(TrackMode::Hash, 64).unwrap();
    // SAFETY (every add below): the ranges lie in `buf`, which outlives the tracker.
    unsafe { t.add_region(0, buf.as_ptr().add(100), 100) }.unwrap();
    unsafe { t.add_region(1, buf.as_ptr().add(200), 100) }.expect("adjacent after");
    unsafe { t.add_region(2, buf.as_ptr(), 100) }.expect("adjacent before");
    for (offset, len) in [(99, 2), (199, 2), (150, 1), (0, 300), (50, 100)] {
        let refused = unsafe { t.add_region(9, buf.as_ptr().add(offset), len) };
        assert!(refused.is_err(), "{offset}+{len} overlaps");
    }
    // A removed region's bytes may be protected again.
    t.remove_region(0).unwrap();
    unsafe { t.add_region(3, buf.as_ptr().add(100), 100) }.unwrap();
}

#[test]
fn unaligned_region_falls_back_to_hash_in_auto_and_is_refused_in_uffd_mode() {
    let ps = page_size();
    let mut buf = AlignedBuf::new(16 * ps).unwrap();
    let mut auto = Tracker::new(TrackMode::Auto, 1024).unwrap();
    let aligned = unsafe { auto.add_region(1, buf.as_ptr(), 8 * ps) }.unwrap();
    let unaligned = unsafe { auto.add_region(2, buf.as_ptr().add(8 * ps + 100), 3000) }.unwrap();
    assert_eq!(unaligned, Backend::Hash);
    assert_eq!(aligned, auto.preferred_backend());
    auto.collect_dirty().unwrap();
    buf[8 * ps + 100 + 2500] ^= 1;
    buf[ps] ^= 1;
    let d = auto.collect_dirty().unwrap();
    assert_eq!(only(d.clone(), 2).blocks, vec![2]);
    assert_eq!(only(d.clone(), 2).block_size, 1024);
    let r1 = only(d, 1);
    assert_eq!(r1.blocks, vec![ps as u64 / r1.block_size]);

    if !uffd_or_skip("unaligned_region_refused_in_uffd_mode") {
        return;
    }
    assert_eq!(aligned, Backend::Uffd);
    let mut strict = Tracker::new(TrackMode::Uffd, 1024).unwrap();
    let e = unsafe { strict.add_region(1, buf.as_ptr().add(100), 2 * ps) }.unwrap_err();
    assert!(e.to_string().contains("page-aligned"), "{e}");
}

#[test]
fn byte_ranges_merge_adjacent_blocks_and_clip_the_tail() {
    let d = DirtyRegion {
        id: 0,
        backend: Backend::Hash,
        block_size: 100,
        len: 950,
        blocks: vec![0, 1, 2, 5, 7, 9],
    };
    assert_eq!(d.byte_ranges(), vec![(0, 300), (500, 100), (700, 100), (900, 50)]);
    assert_eq!(d.dirty_bytes(), 550);
}
