//! What a tracker needs from the memory it protects, whoever holds it: the [`Device`] trait
//! (a GPU through its driver, or host memory) and [`DeviceRegion`], one attached range.
//!
//! The checkpoint path over it is [`stage_changes`]: fingerprint on the device, copy only the
//! changed blocks into the region's staging buffer, hand them to the store as a delta. The
//! restore path fills the staging buffer with the image and copies each piece back as soon
//! as it is there.

use std::ops::Range;

use crate::fingerprint::block_len;
use crate::GpuError;

/// Memory that can be protected by address: a GPU, or the host.
pub trait Device: Send + Sync {
    /// Attaches `[ptr, ptr + len)`: checks that the range is memory of this device (one
    /// allocation), and sets up fingerprints of `block`-byte blocks. Its staging buffer of
    /// `len` host bytes (page-locked for a GPU, so that copies run at the bus's speed) is
    /// allocated at first use: a region copied only by [`DeviceRegion::download_blocks`] has
    /// none.
    ///
    /// # Safety
    /// The range must stay allocated, and not be moved, until the region is dropped.
    unsafe fn attach(&self, ptr: u64, len: u64, block: u64) -> Result<Box<dyn DeviceRegion>, GpuError>;
}

/// One attached range of device memory, with its fingerprints and its staging buffer.
pub trait DeviceRegion: Send {
    /// The region's first address.
    fn address(&self) -> u64;

    /// The region's length in bytes.
    fn size(&self) -> u64;

    /// The fingerprint block size in bytes (the last block may be shorter).
    fn block_size(&self) -> u64;

    /// Waits for the work the application queued on the device (its writes must be in), then
    /// fingerprints every block and returns the indices, ascending, of the blocks whose
    /// fingerprint differs from the previous call's — every block at the first call or when
    /// `all`. The new fingerprints replace the previous ones.
    fn changed_blocks(&mut self, all: bool) -> Result<Vec<u64>, GpuError>;

    /// Copies the blocks `blocks` (ascending indices) of the region, in order, packed from the
    /// start of the staging buffer, and waits until they are there.
    fn stage(&mut self, blocks: &[u64]) -> Result<(), GpuError>;

    /// The staging buffer (the region's length): what [`DeviceRegion::stage`] copied; empty
    /// before the first stage.
    fn staging(&self) -> &[u8];

    /// The staging buffer, to fill with an image that [`DeviceRegion::start_restore`] copies
    /// to the region (allocated at the first call).
    fn staging_mut(&mut self) -> Result<&mut [u8], GpuError>;

    /// Copies the blocks `blocks` (ascending indices) of the region to the same offsets of
    /// `into`, neighbouring blocks in one copy, and waits until they are there: a copy of the
    /// region kept current by copying what changed, with no staging buffer between.
    ///
    /// # Safety
    /// `into` is valid for writes of the region's length, and nothing else reads or writes it
    /// during the call. For a GPU's copies to run at the bus's speed it is page-locked memory
    /// of the region's context.
    unsafe fn download_blocks(&mut self, blocks: &[u64], into: *mut u8) -> Result<(), GpuError>;

    /// Starts copying bytes `range` of the staging buffer to the same bytes of the region. The
    /// next [`DeviceRegion::changed_blocks`] waits for every copy started (and makes the
    /// restored content the baseline), so that a restart copies each piece of an image while
    /// the next ones are read.
    ///
    /// # Safety
    /// `range` lies inside the staging buffer, holds the image's bytes there, and nothing
    /// writes them until the next [`DeviceRegion::changed_blocks`] (pieces of the buffer
    /// outside `range` may be written meanwhile, by other threads too).
    unsafe fn start_restore(&mut self, range: Range<usize>) -> Result<(), GpuError>;
}

/// What a checkpoint saves of a region.
pub enum Changes<'a> {
    /// The whole region (first epoch, or after a failed one).
    Full(&'a [u8]),
    /// The blocks that changed: `(index, bytes)`, ascending; every block `block_size` long
    /// but the region's last.
    Blocks {
        /// The block size.
        block_size: u64,
        /// The changed blocks.
        blocks: Vec<(u64, &'a [u8])>,
    },
}

/// What [`stage_changes`] left in a region's staging buffer. It owns no bytes, so that the
/// region can move to the thread that writes them; [`Staged::changes`] reads them there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staged {
    /// The whole region.
    Full,
    /// These blocks (ascending), packed in order.
    Blocks(Vec<u64>),
}

impl Staged {
    /// The staged bytes of `region` (the one this was staged from, not restaged since).
    pub fn changes<'a>(&self, region: &'a dyn DeviceRegion) -> Changes<'a> {
        let (len, block) = (region.size(), region.block_size());
        let staging = region.staging();
        match self {
            Staged::Full => Changes::Full(&staging[..len as usize]),
            Staged::Blocks(changed) => {
                let mut blocks = Vec::with_capacity(changed.len());
                let mut at = 0usize;
                for &b in changed {
                    let n = block_len(b, block, len) as usize;
                    blocks.push((b, &staging[at..at + n]));
                    at += n;
                }
                Changes::Blocks {
                    block_size: block,
                    blocks,
                }
            }
        }
    }
}

/// Finds what changed in `region` since the previous call and stages it: the whole region when
/// `full` (every fingerprint is still refreshed), else only the changed blocks, copied from the
/// device range by range (neighbouring blocks in one copy). When it returns, the device memory
/// may change again: the staged bytes are the epoch's.
pub fn stage_changes(region: &mut dyn DeviceRegion, full: bool) -> Result<Staged, GpuError> {
    let changed = region.changed_blocks(full)?;
    region.stage(&changed)?;
    Ok(if full {
        Staged::Full
    } else {
        Staged::Blocks(changed)
    })
}

/// Checks a block size and a region length, and returns the number of blocks.
pub(crate) fn block_count(len: u64, block: u64) -> Result<u64, GpuError> {
    if len == 0 {
        return Err(GpuError::InvalidRegion("zero length".into()));
    }
    if block == 0 || !block.is_multiple_of(8) || block > 1 << 30 {
        return Err(GpuError::InvalidRegion(format!(
            "the block size must be a multiple of 8 bytes up to 1 GiB, got {block}"
        )));
    }
    Ok(len.div_ceil(block))
}
