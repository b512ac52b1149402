//! Wire protocol of the eckpt cluster (agents and coordinator).
//!
//! Three layers, each usable on its own:
//!
//! - **Frames** ([`frame`]): a 20-byte header (magic, version, kind, flags, length,
//!   CRC-32C of the payload, CRC-32C of the header) and a payload. Control messages are
//!   JSON; bulk checkpoint data is raw bytes, written with vectored I/O straight from the
//!   caller's buffer and read straight into the caller's (reused) buffer. The codec is
//!   sans-IO ([`decode_frame`]) so it can be fuzzed and property-tested; the size limit is
//!   checked on the header, before a payload is buffered or allocated.
//! - **Authentication** ([`ClusterSecret`]): every connection runs a mutual HMAC-SHA256
//!   challenge-response over a per-cluster secret before it can carry a frame; peers that
//!   fail are refused with one log line. The secret file is created 0600, crash-safely, and
//!   refused if group or others can read it.
//! - **Transports** ([`connect`], [`listen`]): TCP or Unix sockets behind one
//!   [`Endpoint`] (`tcp://host:port`, `unix:///path`); TCP optionally inside TLS 1.3
//!   ([`ClusterTls`], `eckpt up --tls`). TCP is the kernel's unless a simulator installed a
//!   network of its own for the process ([`network`]).

#![warn(missing_docs)]

mod auth;
mod error;
pub mod frame;
mod io;
pub mod network;
mod tls;
mod transport;

pub use auth::{random_bytes, secret_path, ClusterSecret, HANDSHAKE_TIMEOUT, SECRET_LEN};
pub use error::ProtoError;
pub use frame::{decode_frame, encode_frame, Decoded, FrameError, FrameKind, DEFAULT_MAX_PAYLOAD};
pub use io::{FrameReader, FrameWriter};
pub use tls::{tls_path, ClusterTls};
pub use transport::{connect, listen, Connection, Endpoint, Incoming, Listener, TransportKind};
