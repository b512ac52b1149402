//! The one error type of the store.
//!
//! Every failure names what it concerns (rank, epoch, item, block, path) because the
//! callers are recovery tools: an operator reading "rank 3 epoch 17 item \"heap\" block 40"
//! knows what is lost, where a bare I/O error would not say.

use std::path::PathBuf;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file system operation failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A stored block does not match its checksum: the bytes are not returned.
    #[error(
        "rank {rank} epoch {epoch}: checksum mismatch in item {item:?} block {block} \
         (stored by epoch {stored_in})"
    )]
    BlockChecksum {
        /// Rank whose data is damaged.
        rank: u32,
        /// Epoch that was being read.
        epoch: u64,
        /// Item the block belongs to.
        item: String,
        /// Block index within the item.
        block: u64,
        /// Epoch of the delta chain whose data file holds the damaged block.
        stored_in: u64,
    },
    /// An epoch's stored state is unusable (bad manifest, truncated data, broken chain).
    #[error("rank {rank} epoch {epoch}: {detail}")]
    Corrupt {
        /// Rank whose data is damaged.
        rank: u32,
        /// Epoch that is damaged or depends on damaged data.
        epoch: u64,
        /// What is wrong.
        detail: String,
    },
    /// Manifest bytes were rejected by [`crate::parse_manifest`].
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// Serialized delta bytes were rejected by [`crate::parse_delta`].
    #[error("invalid delta: {0}")]
    Delta(String),
    /// The requested epoch is neither committed nor prepared.
    #[error("rank {rank} epoch {epoch} not found")]
    NoEpoch {
        /// Rank asked for.
        rank: u32,
        /// Epoch asked for.
        epoch: u64,
    },
    /// The epoch exists but has no item of that name.
    #[error("rank {rank} epoch {epoch}: no item {item:?}")]
    NoItem {
        /// Rank asked for.
        rank: u32,
        /// Epoch asked for.
        epoch: u64,
        /// Item asked for.
        item: String,
    },
    /// Another writer (this or another process) holds the rank's lock.
    #[error("rank {rank} is locked by another writer")]
    Busy {
        /// Rank that is busy.
        rank: u32,
    },
    /// Another live process holds the rank ([`crate::RankClaim`]): two processes must not
    /// checkpoint one rank.
    #[error("rank {rank} of this store is in use by {holder}: two processes must not checkpoint the same rank (is ECKPT_RANK set for each process?)")]
    Claimed {
        /// The rank claimed.
        rank: u32,
        /// Who holds it, as it wrote itself down ("process 4242 on node7").
        holder: String,
    },
    /// The caller asked for something the store's rules forbid.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The store's directory is not this user's alone (another owner, a symlink, writable
    /// by others): its contents cannot be trusted.
    #[error(transparent)]
    Untrusted(#[from] eckpt_private_dir::PrivateDirError),
    /// A padded delta was requested with a length smaller than the delta.
    #[error("rank {rank} epoch {epoch}: delta needs {needed} bytes, only {len} allowed")]
    DeltaTooLarge {
        /// Rank of the delta.
        rank: u32,
        /// Epoch of the delta.
        epoch: u64,
        /// Serialized length of the delta.
        needed: u64,
        /// Length that was asked for.
        len: u64,
    },
}

impl StoreError {
    /// Whether the error says stored bytes are damaged: a block that fails its checksum, a
    /// manifest or delta that does not parse or fails its seal, a data file cut short.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            StoreError::BlockChecksum { .. }
                | StoreError::Corrupt { .. }
                | StoreError::Manifest(_)
                | StoreError::Delta(_)
        )
    }
}

/// Result with [`StoreError`].
pub type Result<T> = std::result::Result<T, StoreError>;

/// Wraps an `io::Error` with the path it happened on.
pub(crate) fn io_at(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.into();
    move |source| StoreError::Io { path, source }
}
