//! The client's error type, with the numeric codes the C API returns.

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad argument or configuration.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The call is not allowed now (e.g. protecting after restart, or no init).
    #[error("{0}")]
    State(String),
    /// What the checkpoint holds does not fit what is protected now (a region's size changed,
    /// an input file was modified, an append file lost data).
    #[error("checkpoint does not match: {0}")]
    Mismatch(String),
    /// Dirty tracking failed.
    #[error(transparent)]
    Capture(#[from] eckpt_capture::CaptureError),
    /// The store failed (I/O, or a checksum mismatch: never wrong bytes).
    #[error(transparent)]
    Store(#[from] eckpt_store::StoreError),
    /// The cluster could not be reached or refused (cluster mode).
    #[error("cluster: {0}")]
    Cluster(String),
    /// A file operation on a protected file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The negative code the C API returns for this error (`ECKPT_E*` in `eckpt.h`).
    pub fn code(&self) -> i32 {
        match self {
            Error::Invalid(_) => capi::ECKPT_EINVAL,
            Error::State(_) => capi::ECKPT_ESTATE,
            Error::Mismatch(_) => capi::ECKPT_EMISMATCH,
            Error::Capture(_) => capi::ECKPT_ECAPTURE,
            Error::Store(
                eckpt_store::StoreError::BlockChecksum { .. } | eckpt_store::StoreError::Corrupt { .. },
            ) => capi::ECKPT_ECORRUPT,
            Error::Store(_) | Error::Io { .. } => capi::ECKPT_EIO,
            Error::Cluster(_) => capi::ECKPT_ECLUSTER,
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

use crate::capi;
