//! eckpt's standalone file coder: split a file into `k` data + `m` parity shard files with a
//! checksummed manifest, lose any `m` (or corrupt blocks of them), and get it back byte-exact.
//!
//! Layout: the zero-padded input is cut into stripes of `k · B` bytes; data shard `i` holds
//! bytes `[i·B, (i+1)·B)` of every stripe; parity shard `j` holds `Σ_i X_ji · (data shard i)`,
//! i.e. exactly what ISA-L's `ec_encode_data` writes over the data shard files. Shard files
//! are raw bytes (`shard.000` …), data first; `manifest.json` records the code and a crc32c
//! per shard block, so a corrupted block is treated as an erasure.

mod batch;
mod decode;
mod encode;
mod error;
pub mod manifest;
mod shard_set;
mod verify;

pub use decode::{decode_dir, DecodeSummary};
pub use encode::{encode_file, EncodeOptions, EncodeSummary};
pub use error::ShardsError;
pub use manifest::{Manifest, ManifestError};
pub use shard_set::Damage;
pub use verify::{verify_dir, ShardReport, VerifyReport};
