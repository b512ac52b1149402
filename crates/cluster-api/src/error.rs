//! Errors of the cluster layer: each names what failed and where, in one line, and has a
//! [`ErrorKind`] that travels with it over the wire, so that a receiver acts on what
//! happened (blame a node, map to a C API code) without reading the text.

use eckpt_codec::CodecError;
use eckpt_coding::CodingError;
use eckpt_flush::FlushError;
use eckpt_proto::ProtoError;
use eckpt_store::StoreError;
use serde::{Deserialize, Serialize};

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// Bad input: an argument, a configuration value, a name that can never be honoured as
    /// given. The caller must change it.
    #[error("{0}")]
    Invalid(String),
    /// What the request names does not exist: a rank that never checkpointed, an epoch not
    /// committed, an item, a node, a cluster directory.
    #[error("{0}")]
    NotFound(String),
    /// The cluster's state does not allow the request now, and waiting alone will not change
    /// that: a node it needs is down or damaged (`eckpt recover` first), the epoch asked for
    /// is not the open one, a directory already holds a cluster. The message says what to
    /// do.
    #[error("{0}")]
    Refused(String),
    /// What the checkpoint holds does not fit the job asking for it (its number of ranks):
    /// permanent, and the user's to resolve, not the cluster's.
    #[error("{0}")]
    Mismatch(String),
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
    /// The coordinator could not be reached (stopped, restarting, or cut off): a rank may
    /// retry within the cluster's deadlines.
    #[error("{0}")]
    Unreachable(String),
    /// The coordinator (or an agent) took the request and then fell silent past the answer's
    /// deadline (stopped, or cut off), or dropped the connection before answering: whether
    /// the request took effect is unknown, so only a request that may be repeated is tried
    /// again.
    #[error("{0}")]
    NoAnswer(String),
    /// A link to a peer broke or never came up: usually a symptom of a failure elsewhere (a
    /// peer that died or gave up), not the cause.
    #[error("{0}")]
    Link(String),
    /// Another process answered with a failure of its own: an agent (`node` names it) or the
    /// coordinator (`node` is `None`; its messages already say where).
    #[error("{}", remote_text(node.as_deref(), message))]
    Remote {
        /// Node that failed, if an agent.
        node: Option<String>,
        /// What kind of failure it reported.
        kind: ErrorKind,
        /// Its one-line message.
        message: String,
    },
    /// A bug or a crashed worker thread, not something the input did.
    #[error("internal error: {0}")]
    Internal(String),
    /// More members of a group are lost than its code tolerates: the data is gone.
    #[error("{0}")]
    Unrecoverable(String),
    /// Bytes failed their checksum.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// A writer that is not (or no longer) the owner: a rank of a superseded attempt, a
    /// second run of a live job, an agent claiming another node's name or store. Refused
    /// with no side effect; never retried.
    #[error("{0}")]
    Fenced(String),
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
    /// A flushed epoch could not be written or read.
    #[error(transparent)]
    Flush(#[from] FlushError),
}

/// What kind of failure an error reports, as it travels between processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorKind {
    /// Bad input.
    Invalid,
    /// What the request names does not exist.
    #[serde(rename = "not-found")]
    NotFound,
    /// The cluster's state does not allow the request now; the message says what to do.
    Refused,
    /// The checkpoint does not fit the job asking for it.
    Mismatch,
    /// A peer broke the protocol.
    Protocol,
    /// A node could not be reached.
    Node,
    /// A link broke because something else failed.
    Link,
    /// More members of a group are lost than its code tolerates.
    Unrecoverable,
    /// Bytes failed their checksum or do not parse.
    Corrupt,
    /// A writer that lost (or never had) ownership was refused.
    Fenced,
    /// A file operation failed (full disk, permissions).
    Io,
    /// A bug or a crashed worker thread.
    Internal,
}

/// An error as it crosses the wire: its kind and its one-line message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// The sender's one-line message.
    pub message: String,
}

impl From<&ClusterError> for WireError {
    fn from(e: &ClusterError) -> WireError {
        WireError {
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

impl ClusterError {
    /// The kind of this failure, for the wire and for callers that act on it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClusterError::Invalid(_) => ErrorKind::Invalid,
            ClusterError::NotFound(_) => ErrorKind::NotFound,
            ClusterError::Refused(_) => ErrorKind::Refused,
            ClusterError::Mismatch(_) => ErrorKind::Mismatch,
            ClusterError::Protocol(_) => ErrorKind::Protocol,
            ClusterError::Node { .. } | ClusterError::Unreachable(_) | ClusterError::NoAnswer(_) => {
                ErrorKind::Node
            }
            ClusterError::Link(_) => ErrorKind::Link,
            ClusterError::Remote { kind, .. } => *kind,
            ClusterError::Internal(_) => ErrorKind::Internal,
            ClusterError::Unrecoverable(_) => ErrorKind::Unrecoverable,
            ClusterError::Corrupt(_) => ErrorKind::Corrupt,
            ClusterError::Fenced(_) => ErrorKind::Fenced,
            ClusterError::Io { .. } => ErrorKind::Io,
            ClusterError::Store(e) => match e {
                StoreError::Io { .. } => ErrorKind::Io,
                StoreError::Untrusted(_) => ErrorKind::Fenced,
                e if e.is_damage() => ErrorKind::Corrupt,
                _ => ErrorKind::Invalid,
            },
            ClusterError::Codec(CodecError::TooManyErasures { .. } | CodecError::SingularMatrix) => {
                ErrorKind::Unrecoverable
            }
            ClusterError::Codec(CodecError::Shape(_)) => ErrorKind::Internal,
            // An ECKPT_ISA the node's CPU cannot run: its configuration, not its data.
            ClusterError::Codec(CodecError::Kernel(_)) => ErrorKind::Invalid,
            ClusterError::Flush(e) => match e {
                FlushError::Io { .. } | FlushError::Source { .. } => ErrorKind::Io,
                e if e.is_corrupt() => ErrorKind::Corrupt,
                _ => ErrorKind::Invalid,
            },
            ClusterError::Proto(e) => match e {
                ProtoError::Closed | ProtoError::Truncated { .. } => ErrorKind::Link,
                ProtoError::Io { source, .. } if is_broken_link(source) => ErrorKind::Link,
                ProtoError::Io { .. } => ErrorKind::Node,
                _ => ErrorKind::Protocol,
            },
        }
    }

    /// The failure agent `node` reported over the wire.
    pub fn remote(node: &str, e: WireError) -> ClusterError {
        ClusterError::Remote {
            node: Some(node.to_string()),
            kind: e.kind,
            message: e.message,
        }
    }

    /// The failure the coordinator reported over the wire, in its own words.
    pub fn from_coordinator(e: WireError) -> ClusterError {
        ClusterError::Remote {
            node: None,
            kind: e.kind,
            message: e.message,
        }
    }

    /// Whether this only says that a link broke: the cause lies elsewhere.
    pub fn is_link_symptom(&self) -> bool {
        self.kind() == ErrorKind::Link
    }

    /// Whether the same request may succeed later ([`ErrorKind::is_retryable`]).
    pub fn is_retryable(&self) -> bool {
        self.kind().is_retryable()
    }
}

impl ErrorKind {
    /// Whether a failure of this kind may pass by itself: a node or the coordinator that
    /// could not be reached, a link that broke. Every other kind is permanent — the input,
    /// the data or the owner must change first — so retrying it only repeats the refusal.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorKind::Node | ErrorKind::Link)
    }
}

fn remote_text(node: Option<&str>, message: &str) -> String {
    match node {
        Some(node) => format!("node {node}: {message}"),
        None => message.to_string(),
    }
}

/// Whether an OS error is a connection broken by the other side.
fn is_broken_link(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::BrokenPipe | K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof
    )
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

impl From<eckpt_private_dir::PrivateDirError> for ClusterError {
    fn from(e: eckpt_private_dir::PrivateDirError) -> ClusterError {
        ClusterError::Store(e.into())
    }
}

/// Wraps an I/O error with the path it concerns.
pub fn io_at(path: impl AsRef<std::path::Path>) -> impl FnOnce(std::io::Error) -> ClusterError {
    let path = path.as_ref().display().to_string();
    move |source| ClusterError::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::AgentResponse;

    fn across_the_wire(e: &ClusterError) -> ClusterError {
        let json = serde_json::to_vec(&AgentResponse::Error(WireError::from(e))).unwrap();
        match serde_json::from_slice(&json).unwrap() {
            AgentResponse::Error(w) => ClusterError::remote("n3", w),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_keeps_its_kind_and_words_across_the_wire() {
        let corrupt = ClusterError::Corrupt("obj g1-e4 member 2: chunk 9 fails its crc32c".into());
        let got = across_the_wire(&corrupt);
        assert_eq!(got.kind(), ErrorKind::Corrupt);
        assert_eq!(got.to_string(), format!("node n3: {corrupt}"));
        let io = ClusterError::Io {
            path: "/d/coded/p0".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        assert_eq!(across_the_wire(&io).kind(), ErrorKind::Io);
        assert!(!across_the_wire(&io).is_link_symptom());
    }

    #[test]
    fn broken_connections_are_link_symptoms_and_crashes_are_internal() {
        let closed = ClusterError::Proto(ProtoError::Closed);
        assert!(closed.is_link_symptom());
        assert!(across_the_wire(&closed).is_link_symptom());
        let pipe = ClusterError::Proto(ProtoError::Io {
            context: "sending".into(),
            source: std::io::Error::from(std::io::ErrorKind::BrokenPipe),
        });
        assert!(pipe.is_link_symptom());
        assert_eq!(
            ClusterError::Internal("worker thread".into()).kind(),
            ErrorKind::Internal
        );
        assert_eq!(
            ClusterError::from_coordinator(WireError {
                kind: ErrorKind::Invalid,
                message: "rank 3 is unknown".into()
            })
            .to_string(),
            "rank 3 is unknown"
        );
    }

    /// Only what may pass by itself is retryable — an unreachable coordinator or node, a
    /// broken link, here or reported by another process — and a world-size mismatch keeps
    /// its kind across the wire (the C API returns `ECKPT_EMISMATCH` for it).
    #[test]
    fn retryable_failures_are_unreachable_peers_and_broken_links_only() {
        let retryable = [
            ClusterError::Unreachable("no coordinator at 10.0.0.1:7000".into()),
            ClusterError::Node {
                node: "n1".into(),
                reason: "connection refused".into(),
            },
            ClusterError::Proto(ProtoError::Closed),
        ];
        for e in &retryable {
            assert!(e.is_retryable(), "{e}");
            assert!(across_the_wire(e).is_retryable(), "{e}");
        }
        let mismatch = ClusterError::Mismatch("the job has 3 ranks; this checkpoint says 4".into());
        let permanent = [
            ClusterError::NotFound("no epoch is committed yet".into()),
            ClusterError::Refused("rank 3's node n1 is down: run `eckpt recover`".into()),
            ClusterError::Invalid("--k 0: at least 1 data member".into()),
            ClusterError::Fenced("rank 2 of generation 3: superseded by 4".into()),
            ClusterError::Corrupt("chunk 9 fails its crc32c".into()),
            ClusterError::Unrecoverable("group 0 lost 3 members, m=2".into()),
            mismatch,
        ];
        for e in &permanent {
            assert!(!e.is_retryable(), "{e}");
            assert!(!across_the_wire(e).is_retryable(), "{e}");
        }
        for (e, kind) in permanent.iter().zip([
            ErrorKind::NotFound,
            ErrorKind::Refused,
            ErrorKind::Invalid,
            ErrorKind::Fenced,
            ErrorKind::Corrupt,
            ErrorKind::Unrecoverable,
            ErrorKind::Mismatch,
        ]) {
            assert_eq!(across_the_wire(e).kind(), kind, "{e}");
        }
    }
}
