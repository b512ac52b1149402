//! One error type for the protocol crate, with messages that name the peer, path or sizes
//! involved, because they end up as the one-line reason the CLI prints.

use std::io;
use std::path::PathBuf;

use crate::frame::{FrameError, FrameKind};

/// Everything that can go wrong in framing, authentication, transports or the secret file.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The bytes received are not a valid frame (see [`FrameError`]).
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The peer closed the connection cleanly between frames.
    #[error("connection closed by peer")]
    Closed,
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed mid-frame after {got} of {expected} bytes")]
    Truncated {
        /// Bytes of the frame that arrived.
        got: u64,
        /// Bytes the frame needed (header, or header plus announced payload).
        expected: u64,
    },
    /// A valid frame of a kind the caller did not expect at this point.
    #[error("expected a {expected} frame, got a {found} frame")]
    UnexpectedFrame {
        /// What the caller asked for.
        expected: &'static str,
        /// What arrived.
        found: FrameKind,
    },
    /// A control frame whose payload does not deserialize as the expected message.
    #[error("malformed control message: {0}")]
    Control(#[from] serde_json::Error),
    /// The handshake failed; the connection was refused (and logged).
    #[error("authentication with {peer} failed: {reason}")]
    Auth {
        /// Address of the peer.
        peer: String,
        /// Why it failed.
        reason: String,
    },
    /// A string that is not a `tcp://host:port` or `unix:///path` endpoint.
    #[error("invalid endpoint {input:?}: {reason}")]
    Endpoint {
        /// The string given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The secret file may be read by other users, so the secret cannot be trusted secret.
    #[error(
        "cluster secret {path} has mode {mode:04o}: it must not be accessible by group or others \
         (run `chmod 600 {path}`)",
        path = path.display()
    )]
    SecretPermissions {
        /// The secret file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secret file exists but is not a valid secret (wrong size, not a regular file).
    #[error("cluster secret {path}: {reason}", path = path.display())]
    SecretInvalid {
        /// The secret file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// The operation and its target.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Adapter for `map_err` that attaches what was being done to an I/O error.
pub(crate) fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> ProtoError {
    let context = context.into();
    move |source| ProtoError::Io { context, source }
}
