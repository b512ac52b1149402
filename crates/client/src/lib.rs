//! The rank side of eckpt: register memory regions, files and directories, then
//! `checkpoint()` writes only what changed since the last epoch to the node-local store, and
//! `restart()` fills the registered memory in place and puts files back as the checkpoint saw
//! them (I/O-view consistency). The same API is exported to C (see [`capi`] and
//! `include/eckpt.h`) and wrapped for Python by the `eckpt-py` crate.
//!
//! With `cluster=DIR` (or `ECKPT_CLUSTER`) and the job size, the rank checkpoints into the
//! node-local store of a running `eckpt up` cluster, whose agents erasure-code every epoch;
//! restart finds the rank wherever recovery placed it.
//!
//! ```no_run
//! use eckpt::{Checkpointer, Config, FileMode};
//! let mut state = vec![0u64; 1 << 20];
//! let mut ck = Checkpointer::new(Config::from_env()?)?;
//! // SAFETY: `state` outlives the checkpointer and is not reallocated.
//! unsafe { ck.protect("state", state.as_mut_ptr().cast(), state.len() * 8)? };
//! ck.protect_file("out.log", FileMode::Append)?;
//! if ck.restart()?.is_none() { /* fresh start */ }
//! let epoch = ck.checkpoint()?;
//! # Ok::<(), eckpt::Error>(())
//! ```

mod baseline;
pub mod capi;
mod checkpointer;
mod cluster_mode;
mod config;
mod error;
mod files;
mod pacing;
mod stored_path;

pub use checkpointer::{Checkpointer, Items};
pub use config::Config;
pub use eckpt_capture::{Mirror, Refreshed, TrackMode};
pub use eckpt_gpu::{Cuda, DeviceMirror, DeviceRefreshed};
pub use error::Error;
pub use files::FileMode;
pub use pacing::Interval;
