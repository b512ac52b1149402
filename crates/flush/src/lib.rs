//! Flushed checkpoints: the last level of eckpt's multi-level checkpointing. Now and then a
//! committed epoch of every rank is copied from the node-local stores to a shared directory
//! (a parallel file system), so that a job survives what the erasure code cannot — more than
//! `m` lost nodes of a group, the whole partition, the end of an allocation — and can start
//! again later, on another number of nodes. This crate is the format and nothing else: it
//! writes, publishes, reads back (verified) and retires flushed epochs. Who copies what, and
//! when, is the cluster's business (`eckpt-cluster`: `agent/flush.rs`, `coordinator/flush.rs`).
//!
//! # Layout (stable; readable without eckpt running)
//!
//! ```text
//! FLUSH/                        the --flush-dir of one job (and the jobs it continues)
//!   eckpt-flush-dir             the mark: eckpt took this directory as a flush directory
//!   epoch-<E>/                  flushed epoch E, complete: published by one rename, last
//!     manifest.json             what the epoch holds, with checksums (see below)
//!     rank.<R>/                 one directory per rank R of the job, 0 … world-1
//!       <item file>             one file per item: the item's bytes, nothing else
//!   tmp-<E>-<pid>-<ns>-<n>/     a flush being written (or one a crash interrupted): never
//!                               read; removed when the next flush starts
//!   trash-epoch-<E>-<pid>-<ns>-<n>/  an epoch being deleted by retention
//! ```
//!
//! A directory is taken as a flush directory ([`FlushDir::claim`]) when it is new, empty, or
//! holds nothing but an older eckpt's published epochs; then it gets the mark. A non-empty
//! directory without the mark is refused. Inside it, eckpt's entries are recognised by their
//! complete names — `epoch-<E>` (and a valid manifest of epoch `E`), and the two leftover
//! forms above, all numbers in eckpt's decimal form — and nothing else is ever listed,
//! retired or deleted: `epoch-90/model.pt` or `tmp-results/` stay as they are.
//!
//! An item is what a rank checkpointed under one name: `mem/<region>` (a protected memory
//! region), `file/<absolute path>` or `file:<relative path>` (a snapshot file), `eckpt/meta`
//! (the client library's record of regions and files), `file` (`eckpt checkpoint FILE`). Its
//! file name is the item name with every byte other than ASCII letters, digits, `-`, `_` and
//! a non-leading `.` written as `%XX` (`mem/grid` → `mem%2Fgrid`); a name whose encoding
//! exceeds [`MAX_FILE_NAME`] bytes is cut and ends in `~` and the xxh3 of the name. The
//! manifest names the file of every item, so a reader never has to guess.
//!
//! `manifest.json` is JSON ([`Manifest`]): `format` (`"eckpt-flush"`), `version` (2),
//! `epoch`, `world` (ranks in the job), `job` ([`FlushedJob`]: `id`, `command`, and the
//! cluster's `nodes`, `k` and `m`), `block_size`, and per rank its items, each with
//! `name`, `file`, `len`, `xxh3` (of the whole item, 16 hex digits) and `crc32c` (8 hex
//! digits per `block_size` block of the item); and `checksum`, the CRC-32C of the compact
//! JSON of the manifest with `checksum` set to `""`. A flushed file can be checked with
//! standard tools (`xxhsum -H3`), and its bytes are the item as the rank saw it. Version 1
//! (an older eckpt's) is the same without `job`: it is read, but restored only when told
//! (`--restore-from-job -`), since nothing says whose it is.
//!
//! # Guarantees
//!
//! - An epoch directory exists only complete: rank files and the manifest are written and
//!   fsynced under `tmp-…`, and the rename to `epoch-<E>` is the last step ([`Staging`]). A
//!   crash at any instant leaves every previously published epoch intact.
//! - Reading verifies every block's CRC-32C before handing its bytes out and the item's
//!   xxh3 at its end ([`FlushedEpoch`]): a damaged file is an error naming the epoch, rank,
//!   item and block, never wrong bytes.
//! - Retention ([`FlushDir::retire`]) unpublishes the oldest published epochs beyond the
//!   newest `K`, each by a rename to `trash-…`, so no half-deleted epoch keeps its name; the
//!   bytes are deleted afterwards ([`FlushDir::purge_trash`]).
//! - A job never restores another job's state unless told: [`JobFilter::admits`] refuses an
//!   epoch of another job in one line naming both, and [`FlushDir::check_job`] refuses a
//!   directory whose newest epoch is another job's.

#![warn(missing_docs)]

mod dir;
mod error;
mod job;
mod manifest;
mod mark;
mod names;
mod pace;
mod read;
mod write;
mod write_behind;

pub use dir::FlushDir;
pub use error::{FlushError, Result};
pub use job::{FlushedJob, JobFilter, NO_JOB};
pub use manifest::{
    ItemEntry, Manifest, RankEntry, FORMAT, FORMAT_VERSION, MANIFEST_FILE, MAX_MANIFEST_BYTES,
};
pub use mark::MARK_FILE;
pub use names::{item_file_name, MAX_FILE_NAME};
pub use pace::{pace_delay, Pacer};
pub use read::FlushedEpoch;
pub use write::{RankWriter, Staging, BLOCK_SIZE};
pub use write_behind::{WriteBehind, WRITE_BEHIND};
