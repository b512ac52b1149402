//! Error type of the crate.

use std::io;

use crate::delta::DeltaError;

/// Everything capture can fail with. Each variant names what was being done so a CLI can
/// print it as its one-line reason.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// An OS call failed; `context` says which operation and on what.
    #[error("{context}: {source}")]
    Io {
        /// The operation (and path, where there is one).
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Kernel write tracking was requested explicitly but does not work on this system.
    #[error("userfaultfd write-protect tracking unavailable: {0}")]
    UffdUnavailable(String),
    /// A region was refused (alignment, overlap, zero length, bad block size).
    #[error("invalid region {id}: {reason}")]
    InvalidRegion {
        /// The region id given by the caller.
        id: u32,
        /// Why it was refused.
        reason: String,
    },
    /// A tracker setting was refused.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// `remove_region` for an id that was never added.
    #[error("unknown region {0}")]
    UnknownRegion(u32),
    /// A delta was malformed or does not match its base.
    #[error(transparent)]
    Delta(#[from] DeltaError),
}

impl CaptureError {
    /// Wraps an `io::Error` with a description of the failed operation.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        CaptureError::Io {
            context: context.into(),
            source,
        }
    }
}
