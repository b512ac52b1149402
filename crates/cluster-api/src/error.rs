//! Errors of the cluster layer: each names what failed and where, in one line.

use eckpt_codec::CodecError;
use eckpt_coding::CodingError;
use eckpt_proto::ProtoError;
use eckpt_store::StoreError;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A request or configuration that cannot be honoured.
    #[error("{0}")]
    Invalid(String),
    /// A peer sent something the protocol does not allow.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A node could not be reached or dropped the connection.
    #[error("node {node}: {reason}")]
    Node {
        /// Node name.
        node: String,
        /// What happened.
        reason: String,
    },
    /// More members of a group are lost than its code tolerates: the data is gone.
    #[error("{0}")]
    Unrecoverable(String),
    /// Bytes failed their checksum.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The node-local store refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The codec refused.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The wire protocol failed.
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

impl From<CodingError> for ClusterError {
    fn from(e: CodingError) -> ClusterError {
        match e {
            CodingError::Invalid(m) => ClusterError::Invalid(m),
            CodingError::Protocol(m) => ClusterError::Protocol(m),
            CodingError::Codec(c) => ClusterError::Codec(c),
        }
    }
}

/// Wraps an I/O error with the path it concerns.
pub fn io_at(path: impl AsRef<std::path::Path>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let path = path.as_ref().display().to_string();
    move |source| ClusterError::Io { path, source }
}
