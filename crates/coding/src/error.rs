//! Errors of the coding library: a configuration or task that cannot be honoured, or
//! malformed input from a peer.

use eckpt_codec::CodecError;

/// Why a coding step failed.
#[derive(Debug, thiserror::Error)]
pub enum CodingError {
    /// A configuration or task that cannot be honoured.
    #[error("{0}")]
    Invalid(String),
    /// A peer sent something the protocol does not allow (wrong size, truncated record).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The codec refused.
    #[error(transparent)]
    Codec(#[from] CodecError),
}
