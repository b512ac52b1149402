//! Incremental capture for eckpt: find what changed in a rank's memory since the last
//! checkpoint, and encode it compactly.
//!
//! - [`Tracker`]: dirty-block tracking over registered regions, by kernel write tracking
//!   (userfaultfd async write-protect + `PAGEMAP_SCAN`) or by xxh3 block hashing.
//! - [`delta`]: a strict, checksummed block-delta format (encode, decode, apply); [`decode`]
//!   takes `&[u8]` and is the fuzzing entry point.
//! - [`Mirror`]: copies of memory ranges kept current by copying only the blocks written
//!   since the last refresh (staging for checkpoints written in the background).
//! - [`MemoryMap`]: this process's mappings, to refuse memory a restart could not write back.
//! - [`delta_files`] / [`patch_file`]: streaming file deltas for images written by external
//!   checkpointers, the fast replacement for diffing consecutive dumps with xdelta.

mod align;
pub mod delta;
mod error;
mod filedelta;
mod mapped;
mod maps;
mod mirror;
mod tracker;
mod uffd;

pub use align::{page_size, AlignedBuf};
pub use delta::{decode, encode, encode_blocks, Delta, DeltaError, DeltaHeader, DeltaWriter};
pub use error::CaptureError;
pub use filedelta::{delta_files, patch_file, DeltaStats, PatchStats};
pub use maps::MemoryMap;
pub use mirror::{Mirror, Refreshed};
pub use tracker::{uffd_available, Backend, DirtyRegion, TrackMode, Tracker};
