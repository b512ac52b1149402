//! The one error type of the shard coder.
//!
//! A variant per kind of failure, so callers can act on what went wrong (retry elsewhere after
//! a full disk, give up on a set with too much damage, report a bug) without parsing text; the
//! messages still name the path, the stripe and the shards, because the reader is usually an
//! operator deciding whether data is lost.

use std::any::Any;
use std::ops::Range;
use std::path::{Path, PathBuf};

use eckpt_codec::CodecError;

use crate::manifest::ManifestError;
use crate::shard_set::Damage;

/// Why encoding, decoding or verifying a shard set failed.
#[derive(Debug, thiserror::Error)]
pub enum ShardsError {
    /// A file operation failed: `action` (`open`, `read`, `write`, …) on `path`.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done, as a verb.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// `manifest.json` was refused: without a trustworthy manifest nothing can be checked.
    #[error("{}: {source}", path.display())]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: ManifestError,
    },
    /// More whole shard files are missing than the code's `m` parity shards can replace:
    /// refused before anything is written.
    #[error(
        "cannot decode {}: {} shard files are missing ({}) but the code tolerates at most m={m}",
        .dir.display(),
        .files.len(),
        .files.join(", ")
    )]
    MissingShards {
        /// The shard directory.
        dir: PathBuf,
        /// The missing files, in shard order.
        files: Vec<String>,
        /// The code's parity count.
        m: usize,
    },
    /// A stripe has more damaged blocks than the code can rebuild: that part of the input is
    /// lost, and the output is not published.
    #[error(
        "cannot decode {}: stripe {stripe} (input bytes {}..{}) has {} damaged shards ({}): {source}",
        .dir.display(),
        .input_bytes.start,
        .input_bytes.end,
        .damaged.len(),
        describe_damage(.damaged)
    )]
    DamagedStripe {
        /// The shard directory.
        dir: PathBuf,
        /// The stripe that cannot be rebuilt.
        stripe: u64,
        /// The input bytes the stripe holds.
        input_bytes: Range<u64>,
        /// Each damaged shard's file and what is wrong with its block.
        damaged: Vec<(String, Damage)>,
        /// Why the codec cannot rebuild it (too many erasures, or a singular matrix).
        #[source]
        source: CodecError,
    },
    /// Every block passed its checksum but the rebuilt file does not hash to the manifest's
    /// `input_xxh3`: damage the block checksums missed, or a manifest that does not describe
    /// these shards. The output is discarded.
    #[error("decoded bytes hash to {decoded} but the input hashed to {expected}: output discarded")]
    OutputMismatch {
        /// xxh3 of the decoded bytes, 16 hex digits.
        decoded: String,
        /// xxh3 the manifest records for the input.
        expected: String,
    },
    /// The request cannot be carried out as asked: `k`, `m` or the block size out of range,
    /// an input that is not a regular file, an output directory already in use.
    #[error("{0}")]
    Invalid(String),
    /// The codec refused an operation on buffers this crate shaped: a bug here, not in the
    /// caller's input.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A bug: a worker thread (reader, writer, encoder, rebuilder) panicked, or an invariant
    /// did not hold. Reported rather than propagated as a panic so the caller can clean up.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ShardsError {
    /// The error for an I/O failure `action` on `path`, for `map_err`; the path is only
    /// copied when the operation failed.
    pub(crate) fn io<'a>(
        action: &'static str,
        path: &'a Path,
    ) -> impl FnOnce(std::io::Error) -> ShardsError + 'a {
        move |source| ShardsError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// The error for a worker thread that panicked with `payload` (what `JoinHandle::join`
    /// returns), naming the thread and the panic message when it has one.
    pub(crate) fn panicked(thread: &str, payload: Box<dyn Any + Send>) -> ShardsError {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("no message");
        ShardsError::Internal(format!("the {thread} thread panicked: {message}"))
    }
}

/// `shard.001 missing, shard.003 checksum mismatch`.
fn describe_damage(damaged: &[(String, Damage)]) -> String {
    damaged
        .iter()
        .map(|(file, damage)| format!("{file} {}", damage.describe()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicked_thread_is_an_internal_error_with_its_message() {
        let payload = std::thread::spawn(|| panic!("block {} out of range", 7))
            .join()
            .unwrap_err();
        let err = ShardsError::panicked("reader", payload);
        assert!(matches!(err, ShardsError::Internal(_)), "{err:?}");
        assert_eq!(
            err.to_string(),
            "internal error: the reader thread panicked: block 7 out of range"
        );
        let literal = std::thread::spawn(|| panic!("boom")).join().unwrap_err();
        assert!(ShardsError::panicked("writer", literal)
            .to_string()
            .ends_with("writer thread panicked: boom"));
    }

    #[test]
    fn a_lost_stripe_names_the_stripe_and_each_damaged_shard() {
        let err = ShardsError::DamagedStripe {
            dir: "/s".into(),
            stripe: 5,
            input_bytes: 80..96,
            damaged: vec![
                ("shard.001".into(), Damage::Missing),
                ("shard.003".into(), Damage::ChecksumMismatch),
                ("shard.004".into(), Damage::Truncated),
            ],
            source: CodecError::TooManyErasures { erased: 3, m: 2 },
        };
        assert_eq!(
            err.to_string(),
            "cannot decode /s: stripe 5 (input bytes 80..96) has 3 damaged shards (shard.001 missing, \
             shard.003 checksum mismatch, shard.004 truncated): 3 shards lost but the code tolerates at most m=2"
        );
    }
}
