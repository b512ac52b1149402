//! `manifest.json`: what a shard directory holds and how to check it. Parsed strictly: it is
//! read from disks that may be damaged or from users, so every field is validated before any
//! of it sizes a buffer or a loop.

use eckpt_codec::{CodeKind, MAX_SHARDS};
use serde::{Deserialize, Serialize};

/// The manifest's file name inside a shard directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Value of the `format` field.
pub const FORMAT: &str = "eckpt-shards";
/// Current format version; older or newer ones are refused.
pub const FORMAT_VERSION: u32 = 1;
/// Largest block size accepted (larger blocks make no sense and would exhaust memory).
pub const MAX_BLOCK_SIZE: u64 = 1 << 30;
/// Largest manifest accepted, so a bogus file cannot exhaust memory.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 30;

/// Everything needed to check and decode a shard directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub version: u32,
    /// `cauchy` or `rs` (ISA-L's `gf_gen_cauchy1_matrix` / `gf_gen_rs_matrix`).
    pub code: String,
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Bytes each shard contributes to one stripe.
    pub block_size: u64,
    /// Length of the original input in bytes (the last stripe is zero-padded).
    pub input_len: u64,
    /// Number of stripes: `ceil(input_len / (k · block_size))`.
    pub stripes: u64,
    /// xxh3-64 of the original input, lowercase hex: decode re-checks its output against it.
    pub input_xxh3: String,
    /// One entry per shard, data shards first.
    pub shards: Vec<ShardEntry>,
}

/// One shard file and the crc32c of each of its blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardEntry {
    /// File name inside the directory (`shard.000`, …).
    pub file: String,
    /// crc32c of block `s` as 8 lowercase hex digits at `[8s, 8s + 8)`.
    pub crc32c: String,
}

/// Why a manifest was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid manifest: {0}")]
pub struct ManifestError(String);

/// The file name of shard `index`: 3-digit zero-padded.
pub fn shard_file_name(index: usize) -> String {
    format!("shard.{index:03}")
}

/// Number of stripes for an input of `input_len` bytes.
pub fn stripe_count(input_len: u64, k: usize, block_size: u64) -> u64 {
    input_len.div_ceil(k as u64 * block_size)
}

impl Manifest {
    /// Parses and validates manifest bytes.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(ManifestError(format!(
                "{} bytes is larger than any manifest",
                bytes.len()
            )));
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError(format!("not valid JSON: {e}")))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Serialises to pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        out.push(b'\n');
        out
    }

    /// The code family.
    pub fn code_kind(&self) -> CodeKind {
        CodeKind::from_name(&self.code).expect("validated at parse time")
    }

    /// The recorded crc32c of `shard`'s block `stripe`.
    pub fn block_crc(&self, shard: usize, stripe: u64) -> u32 {
        let hex = &self.shards[shard].crc32c[stripe as usize * 8..stripe as usize * 8 + 8];
        u32::from_str_radix(hex, 16).expect("validated at parse time")
    }

    /// Expected size in bytes of each shard file.
    pub fn shard_len(&self) -> u64 {
        self.stripes * self.block_size
    }

    fn validate(&self) -> Result<(), ManifestError> {
        let fail = |msg: String| Err(ManifestError(msg));
        if self.format != FORMAT {
            return fail(format!("format is {:?}, expected {FORMAT:?}", self.format));
        }
        if self.version != FORMAT_VERSION {
            return fail(format!(
                "format version {} is not supported (this eckpt reads {FORMAT_VERSION})",
                self.version
            ));
        }
        if CodeKind::from_name(&self.code).is_none() {
            return fail(format!("unknown code {:?} (expected cauchy or rs)", self.code));
        }
        if self.k == 0 || self.m == 0 || self.k + self.m > MAX_SHARDS {
            return fail(format!("k={} m={} out of range", self.k, self.m));
        }
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return fail(format!("block size {} out of range", self.block_size));
        }
        if self.stripes != stripe_count(self.input_len, self.k, self.block_size) {
            return fail(format!(
                "{} stripes do not fit an input of {} bytes",
                self.stripes, self.input_len
            ));
        }
        if self.input_xxh3.len() != 16 || !is_lower_hex(&self.input_xxh3) {
            return fail("input_xxh3 is not 16 hex digits".into());
        }
        if self.shards.len() != self.k + self.m {
            return fail(format!(
                "{} shard entries for k+m={}",
                self.shards.len(),
                self.k + self.m
            ));
        }
        let crc_len = self
            .stripes
            .checked_mul(8)
            .ok_or_else(|| ManifestError("too many stripes".into()))?;
        for (i, shard) in self.shards.iter().enumerate() {
            if shard.file != shard_file_name(i) {
                return fail(format!(
                    "shard {i} is named {:?}, expected {:?}",
                    shard.file,
                    shard_file_name(i)
                ));
            }
            if shard.crc32c.len() as u64 != crc_len || !is_lower_hex(&shard.crc32c) {
                return fail(format!(
                    "{}: checksum list is not {} hex digits",
                    shard.file, crc_len
                ));
            }
        }
        Ok(())
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Appends a crc32c as 8 lowercase hex digits.
pub fn push_crc_hex(out: &mut String, crc: u32) {
    use std::fmt::Write;
    write!(out, "{crc:08x}").expect("writing to a String cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Manifest {
        let (k, m, stripes) = (3, 2, 2);
        Manifest {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            code: "cauchy".into(),
            k,
            m,
            block_size: 16,
            input_len: 90,
            stripes,
            input_xxh3: "0123456789abcdef".into(),
            shards: (0..k + m)
                .map(|i| ShardEntry {
                    file: shard_file_name(i),
                    crc32c: "deadbeef".repeat(2),
                })
                .collect(),
        }
    }

    #[test]
    fn roundtrip() {
        let m = sample();
        assert_eq!(Manifest::parse(&m.to_json()).unwrap(), m);
        assert_eq!(m.block_crc(4, 1), 0xdeadbeef);
    }

    #[test]
    fn inconsistent_fields_are_refused() {
        let mut bad = sample();
        bad.stripes = 3;
        assert!(Manifest::parse(&bad.to_json())
            .unwrap_err()
            .to_string()
            .contains("stripes"));
        let mut bad = sample();
        bad.shards[1].file = "../etc/passwd".into();
        assert!(Manifest::parse(&bad.to_json()).is_err());
        let mut bad = sample();
        bad.shards[0].crc32c.push('0');
        assert!(Manifest::parse(&bad.to_json()).is_err());
        let mut bad = sample();
        bad.version = 2;
        assert!(Manifest::parse(&bad.to_json())
            .unwrap_err()
            .to_string()
            .contains("version 2"));
        let mut bad = sample();
        bad.block_size = 0;
        assert!(Manifest::parse(&bad.to_json()).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Manifest::parse(&bytes);
        }

        #[test]
        fn mutated_manifest_never_panics(pos in any::<usize>(), byte in any::<u8>()) {
            let mut json = sample().to_json();
            let p = pos % json.len();
            json[p] = byte;
            if let Ok(m) = Manifest::parse(&json) {
                // Whatever parsed must be internally consistent enough to index safely.
                for s in 0..m.k + m.m {
                    for stripe in 0..m.stripes {
                        let _ = m.block_crc(s, stripe);
                    }
                }
            }
        }
    }
}
