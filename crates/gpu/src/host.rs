//! [`HostMemory`]: the [`Device`] implementation over ordinary host memory. It runs the same
//! path as a GPU — fingerprints, staging, packed copies, restore through the staging buffer —
//! with the fingerprint computed by the host reference, so that the whole path is tested on
//! machines without a GPU, and a rank can protect host memory this way when it wants
//! fingerprint tracking of a buffer a device writes by DMA.

use std::ops::Range;

use crate::device::{block_count, Device, DeviceRegion};
use crate::fingerprint::{byte_ranges, fingerprints};
use crate::GpuError;

/// Host memory seen as a device.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostMemory;

impl Device for HostMemory {
    unsafe fn attach(&self, ptr: u64, len: u64, block: u64) -> Result<Box<dyn DeviceRegion>, GpuError> {
        block_count(len, block)?;
        if ptr == 0 {
            return Err(GpuError::InvalidRegion("null pointer".into()));
        }
        Ok(Box::new(HostRegion {
            ptr: ptr as *mut u8,
            len: len as usize,
            block: block as usize,
            prints: None,
            staging: Vec::new(),
        }))
    }
}

struct HostRegion {
    ptr: *mut u8,
    len: usize,
    block: usize,
    /// The previous call's fingerprints (none before the first).
    prints: Option<Vec<u64>>,
    /// The region's length once first used, empty before.
    staging: Vec<u8>,
}

// SAFETY: the pointer is only dereferenced through `&mut self`, and `attach`'s caller keeps the
// memory valid while the region exists.
unsafe impl Send for HostRegion {}

impl HostRegion {
    fn memory(&self) -> &[u8] {
        // SAFETY: `attach`'s contract.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DeviceRegion for HostRegion {
    fn address(&self) -> u64 {
        self.ptr as u64
    }

    fn size(&self) -> u64 {
        self.len as u64
    }

    fn block_size(&self) -> u64 {
        self.block as u64
    }

    fn changed_blocks(&mut self, all: bool) -> Result<Vec<u64>, GpuError> {
        let now = fingerprints(self.memory(), self.block);
        let changed = match (&self.prints, all) {
            (Some(before), false) => (0..now.len() as u64)
                .filter(|&i| before[i as usize] != now[i as usize])
                .collect(),
            _ => (0..now.len() as u64).collect(),
        };
        self.prints = Some(now);
        Ok(changed)
    }

    fn stage(&mut self, blocks: &[u64]) -> Result<(), GpuError> {
        self.staging.resize(self.len, 0);
        let mut at = 0;
        for (offset, n) in byte_ranges(blocks, self.block as u64, self.len as u64) {
            let (offset, n) = (offset as usize, n as usize);
            // SAFETY: `attach`'s contract; the staging buffer is a separate allocation.
            let source = unsafe { std::slice::from_raw_parts(self.ptr.add(offset), n) };
            self.staging[at..at + n].copy_from_slice(source);
            at += n;
        }
        Ok(())
    }

    fn staging(&self) -> &[u8] {
        &self.staging
    }

    fn staging_mut(&mut self) -> Result<&mut [u8], GpuError> {
        self.staging.resize(self.len, 0);
        Ok(&mut self.staging)
    }

    unsafe fn download_blocks(&mut self, blocks: &[u64], into: *mut u8) -> Result<(), GpuError> {
        for (offset, n) in byte_ranges(blocks, self.block as u64, self.len as u64) {
            // SAFETY: `attach`'s contract for the source, the caller's for `into`; both hold
            // the region's length, and the ranges lie inside it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.add(offset as usize),
                    into.add(offset as usize),
                    n as usize,
                )
            };
        }
        Ok(())
    }

    unsafe fn start_restore(&mut self, range: Range<usize>) -> Result<(), GpuError> {
        assert!(
            range.start <= range.end && range.end <= self.staging.len(),
            "restore range {range:?} outside the region"
        );
        // SAFETY: `attach`'s contract and the caller's (others may be writing other pieces of
        // the staging buffer: it is only touched through a raw pointer, in `range`); the
        // staging buffer is a separate allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.staging.as_ptr().add(range.start),
                self.ptr.add(range.start),
                range.len(),
            )
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{stage_changes, Changes, Staged};

    fn capture(region: &mut dyn DeviceRegion, full: bool) -> Changes<'_> {
        let staged = stage_changes(region, full).unwrap();
        assert_eq!(staged == Staged::Full, full);
        staged.changes(region)
    }

    fn attach(memory: &mut [u8], block: u64) -> Box<dyn DeviceRegion> {
        // SAFETY: the tests keep `memory` alive and in place while the region is used.
        unsafe { HostMemory.attach(memory.as_mut_ptr() as u64, memory.len() as u64, block) }.unwrap()
    }

    #[test]
    fn the_first_capture_is_full_and_later_ones_hold_only_changed_blocks() {
        let mut memory: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut region = attach(&mut memory, 64);
        match capture(region.as_mut(), true) {
            Changes::Full(bytes) => assert_eq!(bytes, &memory[..]),
            Changes::Blocks { .. } => panic!("the first capture must be full"),
        }
        let snapshot = memory.clone();
        memory[70] ^= 1; // block 1
        memory[999] ^= 1; // block 15, the short last block (1000 = 15 × 64 + 40)
        match capture(region.as_mut(), false) {
            Changes::Blocks { block_size, blocks } => {
                assert_eq!(block_size, 64);
                let got: Vec<(u64, Vec<u8>)> = blocks.iter().map(|(b, d)| (*b, d.to_vec())).collect();
                assert_eq!(
                    got,
                    vec![(1, memory[64..128].to_vec()), (15, memory[960..].to_vec())]
                );
            }
            Changes::Full(_) => panic!("expected a delta"),
        }
        // Nothing changed since: an empty delta.
        match capture(region.as_mut(), false) {
            Changes::Blocks { blocks, .. } => assert!(blocks.is_empty()),
            Changes::Full(_) => panic!("expected a delta"),
        }
        // Restore puts the staged image back in place.
        region.staging_mut().unwrap().copy_from_slice(&snapshot);
        // SAFETY: the whole staging buffer holds the image, and nothing writes it.
        unsafe { region.start_restore(0..snapshot.len()) }.unwrap();
        assert_eq!(memory, snapshot);
    }

    #[test]
    fn downloaded_blocks_land_in_place_and_nothing_else_is_written() {
        let mut memory: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut region = attach(&mut memory, 64);
        let mut copy = vec![0u8; 1000];
        let all = region.changed_blocks(false).unwrap();
        assert_eq!(all.len(), 16, "the first scan reports every block");
        // SAFETY: `copy` holds the region's length and nothing else touches it.
        unsafe { region.download_blocks(&all, copy.as_mut_ptr()) }.unwrap();
        assert_eq!(copy, memory);
        memory[5] ^= 0xff; // block 0
        memory[64 * 2] ^= 0xff; // blocks 2 and 3, neighbours: one copy
        memory[64 * 3 + 63] ^= 0xff;
        memory[999] ^= 0xff; // the short last block
        let changed = region.changed_blocks(false).unwrap();
        assert_eq!(changed, vec![0, 2, 3, 15]);
        let mut sparse = vec![0xAAu8; 1000];
        // SAFETY: as above.
        unsafe { region.download_blocks(&changed, sparse.as_mut_ptr()) }.unwrap();
        for (b, chunk) in sparse.chunks(64).enumerate() {
            let expected = if changed.contains(&(b as u64)) {
                &memory[b * 64..(b * 64 + chunk.len())]
            } else {
                &[0xAA; 64][..chunk.len()]
            };
            assert_eq!(chunk, expected, "block {b}");
        }
        assert!(
            region.staging().is_empty(),
            "no staging buffer for a region only downloaded"
        );
    }

    #[test]
    fn unusable_regions_are_refused() {
        let mut memory = vec![0u8; 64];
        // SAFETY: only argument checks run.
        unsafe {
            assert!(HostMemory.attach(0, 64, 64).is_err());
            assert!(HostMemory.attach(memory.as_mut_ptr() as u64, 0, 64).is_err());
            assert!(HostMemory.attach(memory.as_mut_ptr() as u64, 64, 12).is_err());
        }
    }
}
