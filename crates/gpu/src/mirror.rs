//! [`DeviceMirror`]: host copies of device memory kept current by copying only the blocks that
//! changed — the staging area of a background save (`eckpt.torch`'s `dcp.async_save`) for GPU
//! tensors.
//!
//! A refresh fingerprints each source on its device (one pass over device memory, at the
//! device's bandwidth, which costs the training nothing it would notice) and copies the blocks
//! whose fingerprint changed straight to the same offsets of the host copy, neighbouring blocks
//! in one copy: the stall of a save is the bus's copy of what changed, not of the whole state.
//! With the host copy page-locked, each copy runs at the bus's speed.

use std::collections::BTreeMap;

use crate::device::{Device, DeviceRegion};
use crate::fingerprint::block_len;
use crate::GpuError;

/// A mirrored pair: the source's attached region and where its copy is.
struct Pair {
    region: Box<dyn DeviceRegion>,
    copy: *mut u8,
}

/// What a [`DeviceMirror::refresh`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceRefreshed {
    /// Bytes copied from sources to copies.
    pub copied: u64,
    /// Of those, by pair (pairs with nothing copied left out).
    pub copied_by_pair: BTreeMap<u32, u64>,
    /// Bytes of the pairs, all of which are now current.
    pub mirrored: u64,
}

/// Keeps a host copy of each registered device range equal to its source as of the last
/// [`DeviceMirror::refresh`].
pub struct DeviceMirror {
    device: &'static dyn Device,
    block: u64,
    pairs: BTreeMap<u32, Pair>,
    next: u32,
}

// SAFETY: the copies' pointers are only written through `&mut self`, and `add`'s caller keeps
// them valid while their pair exists; the regions are `Send`.
unsafe impl Send for DeviceMirror {}

impl DeviceMirror {
    /// A mirror of memory of `device`, fingerprinted in blocks of `block` bytes (a multiple
    /// of 8: the granularity of what a refresh copies).
    pub fn new(device: &'static dyn Device, block: u64) -> DeviceMirror {
        DeviceMirror {
            device,
            block,
            pairs: BTreeMap::new(),
            next: 0,
        }
    }

    /// Mirrors device range `[source, source + len)` into host memory `[copy, copy + len)` and
    /// returns the pair's id; the next refresh copies all of it.
    ///
    /// # Safety
    /// Until the pair is removed or the mirror dropped: the source stays allocated (and not
    /// moved), and the copy stays writable host memory of `len` bytes that nothing else reads
    /// or writes during a refresh.
    pub unsafe fn add(&mut self, source: u64, copy: *mut u8, len: u64) -> Result<u32, GpuError> {
        if copy.is_null() {
            return Err(GpuError::InvalidRegion("the copy is a null pointer".into()));
        }
        // SAFETY: forwarded from this function's contract.
        let region = unsafe { self.device.attach(source, len, self.block) }?;
        let id = self.next;
        self.next += 1;
        self.pairs.insert(id, Pair { region, copy });
        Ok(id)
    }

    /// Stops mirroring pair `id`; its source and copy may be freed afterwards.
    pub fn remove(&mut self, id: u32) -> Result<(), GpuError> {
        self.pairs
            .remove(&id)
            .map(drop)
            .ok_or_else(|| GpuError::InvalidRegion(format!("no mirrored pair {id}")))
    }

    /// Copies into each copy the blocks of its source that changed since the previous refresh
    /// (all of a pair added since), and waits until they are there.
    pub fn refresh(&mut self) -> Result<DeviceRefreshed, GpuError> {
        let mut done = DeviceRefreshed::default();
        for (&id, pair) in &mut self.pairs {
            let region = pair.region.as_mut();
            let changed = region.changed_blocks(false)?;
            // SAFETY: `add`'s contract: the copy holds the region's length, and nothing else
            // touches it during the refresh.
            unsafe { region.download_blocks(&changed, pair.copy) }?;
            let bytes: u64 = changed
                .iter()
                .map(|&b| block_len(b, region.block_size(), region.size()))
                .sum();
            if bytes > 0 {
                done.copied_by_pair.insert(id, bytes);
            }
            done.copied += bytes;
            done.mirrored += region.size();
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostMemory;

    static HOST: HostMemory = HostMemory;

    #[test]
    fn a_refresh_copies_all_at_first_then_only_the_changed_blocks() {
        let mut a: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        let mut b = vec![7u8; 1000];
        let (mut copy_a, mut copy_b) = (vec![0u8; a.len()], vec![0u8; b.len()]);
        let mut mirror = DeviceMirror::new(&HOST, 256);
        // SAFETY: the buffers outlive the mirror's use of them and stay in place.
        let (ia, ib) = unsafe {
            (
                mirror
                    .add(a.as_mut_ptr() as u64, copy_a.as_mut_ptr(), a.len() as u64)
                    .unwrap(),
                mirror
                    .add(b.as_mut_ptr() as u64, copy_b.as_mut_ptr(), b.len() as u64)
                    .unwrap(),
            )
        };
        let first = mirror.refresh().unwrap();
        assert_eq!(first.copied, 5096);
        assert_eq!(first.mirrored, 5096);
        assert_eq!(
            (copy_a.as_slice(), copy_b.as_slice()),
            (a.as_slice(), b.as_slice())
        );

        a[300] ^= 1; // block 1 of a
        b[999] ^= 1; // b's short last block (1000 = 3 × 256 + 232)
        let second = mirror.refresh().unwrap();
        assert_eq!(second.copied, 256 + 232);
        assert_eq!(second.copied_by_pair, BTreeMap::from([(ia, 256), (ib, 232)]));
        assert_eq!(
            (copy_a.as_slice(), copy_b.as_slice()),
            (a.as_slice(), b.as_slice())
        );

        let quiet = mirror.refresh().unwrap();
        assert_eq!((quiet.copied, quiet.mirrored), (0, 5096));
        mirror.remove(ib).unwrap();
        assert!(mirror.remove(ib).is_err(), "a pair is removed once");
        b[0] ^= 1;
        assert_eq!(
            mirror.refresh().unwrap().mirrored,
            4096,
            "a removed pair is not refreshed"
        );
        assert_ne!(copy_b[0], b[0]);
    }

    #[test]
    fn a_bad_pair_is_refused() {
        let mut a = vec![0u8; 64];
        let mut mirror = DeviceMirror::new(&HOST, 64);
        // SAFETY: only the arguments' checks run.
        unsafe {
            assert!(mirror
                .add(a.as_mut_ptr() as u64, std::ptr::null_mut(), 64)
                .is_err());
            assert!(mirror.add(a.as_mut_ptr() as u64, a.as_mut_ptr(), 0).is_err());
        }
    }
}
