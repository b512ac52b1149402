//! The per-epoch manifest: what an epoch holds and how to check it.
//!
//! On disk a manifest is a one-line text header followed by a JSON body:
//!
//! ```text
//! ECKPT-MANIFEST v1 crc32c=1a2b3c4d len=1234\n{"format":1,...}
//! ```
//!
//! The header carries the CRC-32C and exact length of the body, so a torn or bit-flipped
//! manifest is rejected before JSON parsing, and the body carries its own `format` so a
//! reader from another version refuses instead of guessing. [`parse_manifest`] is the only
//! way bytes become a [`Manifest`]; it is strict (exact header, no unknown fields, every
//! structural rule in [`Manifest::validate`]) because manifests are read after crashes and
//! from damaged media.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError};

/// Manifest format version written by this crate and the only one it reads.
pub const MANIFEST_FORMAT: u32 = 1;
/// Largest block size accepted, so one block always fits comfortably in memory.
pub const MAX_BLOCK_SIZE: u32 = 1 << 26;
/// Longest item name accepted (bytes), so names stay usable as labels and in frames.
pub const MAX_ITEM_NAME: usize = 4096;

const HEADER_MAGIC: &str = "ECKPT-MANIFEST";
const MAX_HEADER_LEN: usize = 96;

/// One stored block: its index in the item and the CRC-32C of its bytes.
///
/// Serialized as a two-element JSON array to keep manifests of large images compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u32)", into = "(u64, u32)")]
pub struct BlockEntry {
    /// Block index: the block covers bytes `index * block_size ..` of the item.
    pub index: u64,
    /// CRC-32C of the stored bytes.
    pub crc32c: u32,
}

impl From<(u64, u32)> for BlockEntry {
    fn from((index, crc32c): (u64, u32)) -> Self {
        BlockEntry { index, crc32c }
    }
}

impl From<BlockEntry> for (u64, u32) {
    fn from(b: BlockEntry) -> Self {
        (b.index, b.crc32c)
    }
}

/// One item (memory region or file) of an epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemManifest {
    /// Item name, unique within the epoch.
    pub name: String,
    /// Length of the item's content in this epoch.
    pub len: u64,
    /// Block size the stored blocks of this item use in this epoch.
    pub block_size: u32,
    /// Blocks stored by this epoch, strictly ascending by index. In a full epoch every
    /// block of the item; in a delta epoch only the changed ones.
    pub blocks: Vec<BlockEntry>,
}

impl ItemManifest {
    /// Number of blocks the item's current length spans.
    pub fn block_count(&self) -> u64 {
        self.len.div_ceil(u64::from(self.block_size))
    }

    /// Length of block `index` (the last block may be short).
    pub fn block_len(&self, index: u64) -> u64 {
        block_len(self.len, self.block_size, index)
    }

    /// Bytes this epoch stores for the item.
    pub fn stored_bytes(&self) -> u64 {
        self.blocks
            .iter()
            .map(|b| self.block_len(b.index))
            .fold(0u64, u64::saturating_add)
    }
}

/// Length of block `index` of an item of `len` bytes cut into `block_size` blocks; 0 when
/// the block lies past the end.
pub(crate) fn block_len(len: u64, block_size: u32, index: u64) -> u64 {
    let bs = u64::from(block_size);
    match index.checked_mul(bs) {
        Some(start) => len.saturating_sub(start).min(bs),
        None => 0,
    }
}

/// Description of one stored epoch of one rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`MANIFEST_FORMAT`].
    pub format: u32,
    /// Rank the epoch belongs to.
    pub rank: u32,
    /// Epoch number (≥ 1).
    pub epoch: u64,
    /// Generation: a rewrite of the same epoch (coalescing, repair) gets a higher one, and
    /// the highest committed generation is the one read.
    pub generation: u32,
    /// Epoch this one followed when it was written (what [`crate::Store::dirty_xor`] diffs
    /// against). For a delta epoch it is also the epoch the stored blocks apply to.
    pub parent: Option<u64>,
    /// Whether every block of every item is stored (a chain root).
    pub full: bool,
    /// Number of delta epochs from the last full epoch up to and including this one.
    pub chain_len: u32,
    /// Stored bytes of those delta epochs (drives the coalescing ratio).
    pub chain_bytes: u64,
    /// Length of the epoch's data file: the stored blocks, item by item, in order.
    pub data_len: u64,
    /// Items of the image at this epoch, in data-file order.
    pub items: Vec<ItemManifest>,
}

impl Manifest {
    /// Serializes the manifest with its checksummed header (the on-disk form).
    pub fn encode(&self) -> Vec<u8> {
        let body = serde_json::to_vec(self).expect("manifest serialization cannot fail");
        let mut out = format!(
            "{HEADER_MAGIC} v{MANIFEST_FORMAT} crc32c={:08x} len={}\n",
            crc32c::crc32c(&body),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// Total length of the image this epoch describes.
    pub fn image_len(&self) -> u64 {
        self.items.iter().map(|i| i.len).fold(0u64, u64::saturating_add)
    }

    /// Checks every structural rule; a manifest that passes can be used to address the
    /// data file without any further bounds checks going wrong.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(StoreError::Manifest(m));
        if self.format != MANIFEST_FORMAT {
            return bad(format!("format {} (expected {MANIFEST_FORMAT})", self.format));
        }
        if self.epoch == 0 {
            return bad("epoch 0".into());
        }
        if let Some(p) = self.parent {
            if p == 0 || p >= self.epoch {
                return bad(format!("parent {p} of epoch {}", self.epoch));
            }
        }
        if self.full {
            if self.chain_len != 0 || self.chain_bytes != 0 {
                return bad("full epoch with a delta chain".into());
            }
        } else if self.parent.is_none() || self.chain_len == 0 {
            return bad("delta epoch without parent or chain".into());
        }
        let mut names = HashSet::new();
        let mut total = 0u64;
        for item in &self.items {
            if let Err(why) = check_item(&mut names, &item.name, item.block_size) {
                return bad(why);
            }
            if item.blocks.windows(2).any(|w| w[0].index >= w[1].index) {
                return bad(format!("item {:?} blocks not ascending", item.name));
            }
            let count = item.block_count();
            if let Some(last) = item.blocks.last() {
                if last.index >= count {
                    return bad(format!("item {:?} block {} past end", item.name, last.index));
                }
            }
            if self.full && item.blocks.len() as u64 != count {
                return bad(format!("full epoch misses blocks of item {:?}", item.name));
            }
            for b in &item.blocks {
                total = total
                    .checked_add(item.block_len(b.index))
                    .ok_or_else(|| StoreError::Manifest("data length overflows".into()))?;
            }
        }
        if total != self.data_len {
            return bad(format!("blocks sum to {total}, data_len is {}", self.data_len));
        }
        if !self.full && self.chain_bytes < self.data_len {
            return bad("chain bytes smaller than this delta".into());
        }
        Ok(())
    }
}

/// Parses and validates on-disk manifest bytes; any deviation is an error, never a panic.
pub fn parse_manifest(bytes: &[u8]) -> Result<Manifest> {
    let bad = |m: &str| StoreError::Manifest(m.to_string());
    let scan = &bytes[..bytes.len().min(MAX_HEADER_LEN)];
    let nl = scan
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| bad("no header line"))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| bad("header not UTF-8"))?;
    let body = &bytes[nl + 1..];
    let mut fields = header.split(' ');
    let (magic, version, crc, len) = match (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) {
        (Some(m), Some(v), Some(c), Some(l), None) => (m, v, c, l),
        _ => return Err(bad("malformed header")),
    };
    if magic != HEADER_MAGIC {
        return Err(bad("bad magic"));
    }
    if version != format!("v{MANIFEST_FORMAT}") {
        return Err(StoreError::Manifest(format!("unsupported version {version:?}")));
    }
    let crc = crc
        .strip_prefix("crc32c=")
        .filter(|h| h.len() == 8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| bad("malformed checksum"))?;
    let len: usize = len
        .strip_prefix("len=")
        .and_then(|l| l.parse().ok())
        .ok_or_else(|| bad("malformed length"))?;
    let canonical = format!("{HEADER_MAGIC} v{MANIFEST_FORMAT} crc32c={crc:08x} len={len}");
    if header != canonical {
        return Err(bad("non-canonical header"));
    }
    if body.len() != len {
        return Err(StoreError::Manifest(format!(
            "body is {} bytes, header says {len}",
            body.len()
        )));
    }
    if crc32c::crc32c(body) != crc {
        return Err(bad("checksum mismatch"));
    }
    let manifest: Manifest =
        serde_json::from_slice(body).map_err(|e| StoreError::Manifest(format!("JSON: {e}")))?;
    manifest.validate()?;
    Ok(manifest)
}

/// The rules every item header obeys, in manifests and serialized deltas alike: a name of
/// 1..=[`MAX_ITEM_NAME`] bytes not seen before in the same epoch, and a block size in
/// 1..=[`MAX_BLOCK_SIZE`]. Returns why not, for the caller's error variant.
pub(crate) fn check_item<'a>(
    names: &mut HashSet<&'a str>,
    name: &'a str,
    block_size: u32,
) -> std::result::Result<(), String> {
    if name.is_empty() || name.len() > MAX_ITEM_NAME {
        return Err(format!("item name of {} bytes", name.len()));
    }
    if !names.insert(name) {
        return Err(format!("duplicate item {name:?}"));
    }
    if block_size == 0 || block_size > MAX_BLOCK_SIZE {
        return Err(format!("item {name:?} block size {block_size}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            format: MANIFEST_FORMAT,
            rank: 2,
            epoch: 5,
            generation: 0,
            parent: Some(4),
            full: false,
            chain_len: 1,
            chain_bytes: 12,
            data_len: 12,
            items: vec![ItemManifest {
                name: "heap".into(),
                len: 20,
                block_size: 8,
                blocks: vec![(1, 7).into(), (2, 9).into()],
            }],
        }
    }

    #[test]
    fn encode_parse_roundtrip_and_short_last_block() {
        let m = sample();
        assert_eq!(m.items[0].block_len(2), 4);
        assert_eq!(m.items[0].stored_bytes(), 12);
        assert_eq!(parse_manifest(&m.encode()).unwrap(), m);
    }

    #[test]
    fn rejects_structural_errors() {
        let mut m = sample();
        m.data_len = 13;
        assert!(m.validate().is_err());
        let mut m = sample();
        m.items[0].blocks[1].index = 3; // past end of a 20-byte item of 8-byte blocks
        m.data_len = 8;
        assert!(m.validate().is_err());
        let mut m = sample();
        m.full = true;
        assert!(m.validate().is_err());
        let mut m = sample();
        m.parent = Some(5);
        assert!(m.validate().is_err());
    }

    #[test]
    fn rejects_any_single_flipped_byte() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x01;
            assert!(parse_manifest(&b).is_err(), "flip at {i} accepted");
        }
        assert!(parse_manifest(&bytes[..bytes.len() - 1]).is_err());
    }
}
