//! The one error type of the flushed layout: every variant says which epoch, rank, item or
//! path it concerns, because the reader is a restart after a disaster and the operator must
//! know what is damaged.

use std::path::{Path, PathBuf};

/// Result of this crate's operations.
pub type Result<T> = std::result::Result<T, FlushError>;

/// Why a flushed epoch could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum FlushError {
    /// A file operation failed (a full file system, permissions).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A manifest was refused: it does not parse, fails its checksum, or breaks a rule.
    #[error("{path}: invalid manifest: {why}")]
    Manifest {
        /// The manifest file (or `-` for bytes not read from a file).
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Flushed bytes do not match their recorded checksum (or a file has the wrong length).
    #[error("flushed epoch {epoch} rank {rank} item {item:?}: {detail}")]
    Corrupt {
        /// The epoch.
        epoch: u64,
        /// The rank.
        rank: u32,
        /// The item.
        item: String,
        /// What is wrong (which block, which file).
        detail: String,
    },
    /// The bytes to flush could not be read from where they come from (the node store).
    #[error("rank {rank} item {item:?}: reading it: {source}")]
    Source {
        /// The rank.
        rank: u32,
        /// The item.
        item: String,
        /// What the source said.
        #[source]
        source: std::io::Error,
    },
    /// Something asked for is not there (an epoch, a rank, an item).
    #[error("{0}")]
    Missing(String),
    /// A request that cannot be honoured.
    #[error("{0}")]
    Invalid(String),
}

impl FlushError {
    /// Whether the error says stored bytes are damaged (as opposed to absent or unreadable
    /// for another reason).
    pub fn is_corrupt(&self) -> bool {
        matches!(self, FlushError::Corrupt { .. } | FlushError::Manifest { .. })
    }
}

/// Wraps an I/O error with the path it concerns.
pub(crate) fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> FlushError + '_ {
    move |source| FlushError::Io {
        path: path.to_path_buf(),
        source,
    }
}
