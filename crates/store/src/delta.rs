//! Self-contained serialized deltas: the unit the cluster erasure-codes in `stripe` mode.
//!
//! A delta carries everything needed to rebuild epoch `E` of a rank from its parent epoch
//! `P` (or, when it has no parent, the whole image of `E`): every item of `E` with its
//! length, block size and the blocks `E` stores. Items of `P` that `E` does not list are
//! gone in `E`. Bytes of an item beyond the parent's length that no block covers are zero.
//!
//! Binary layout (all integers little-endian):
//!
//! ```text
//! header (44 bytes)
//!   magic      8  b"ECKPTDLT"
//!   version    u16 = DELTA_FORMAT
//!   flags      u16 bit 0: has parent; other bits zero
//!   rank       u32
//!   epoch      u64
//!   parent     u64 (0 when there is none)
//!   body_len   u64 length of header + items + trailer
//!   item_count u32
//! item × item_count
//!   name_len u16, name (UTF-8), len u64, block_size u32, block_count u64,
//!   block × block_count: index u64, bytes (length implied by index, block_size, len)
//! trailer
//!   crc32c     u32 of everything before it
//! zero padding up to the length the group agreed on
//! ```
//!
//! Deltas are padded to the largest in an erasure group, coded, and — after a failure —
//! decoded from other nodes' shards. [`parse_delta`] therefore treats its input as hostile:
//! every length is checked against the bytes actually present before anything is
//! allocated, padding must be zero, the checksum must match, and every structural rule of
//! [`Delta::validate`] holds on success.

use std::collections::HashSet;

use eckpt_cursor::{Cursor, Truncated};

use crate::error::{Result, StoreError};
use crate::manifest::{block_len, check_item, Manifest, MAX_BLOCK_SIZE};

/// Serialized delta format version written and read by this crate.
pub const DELTA_FORMAT: u16 = 1;

const MAGIC: &[u8; 8] = b"ECKPTDLT";
const HEADER_LEN: u64 = 44;
const TRAILER_LEN: u64 = 4;
const FLAG_PARENT: u16 = 1;
/// Smallest possible encoded item (1-byte name, no blocks).
const MIN_ITEM_LEN: usize = 2 + 1 + 8 + 4 + 8;
/// Smallest possible encoded block (index plus at least one byte).
const MIN_BLOCK_LEN: usize = 8 + 1;

/// One item of a [`Delta`]; its blocks' bytes owned (`Vec<u8>`) or borrowed from the
/// serialized delta (`&[u8]`, [`parse_delta_ref`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaItem<B = Vec<u8>> {
    /// Item name.
    pub name: String,
    /// Item length in the delta's epoch.
    pub len: u64,
    /// Block size of `blocks`.
    pub block_size: u32,
    /// `(block index, block bytes)`, strictly ascending by index.
    pub blocks: Vec<(u64, B)>,
}

/// A decoded delta: how to turn the parent epoch's image into the epoch's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta<B = Vec<u8>> {
    /// Rank the delta belongs to.
    pub rank: u32,
    /// Epoch the delta produces.
    pub epoch: u64,
    /// Epoch the delta applies to; `None` means the delta is a complete image.
    pub parent: Option<u64>,
    /// Every item of the resulting epoch.
    pub items: Vec<DeltaItem<B>>,
}

impl Delta<&[u8]> {
    /// The delta with its blocks copied out of the bytes it was parsed from.
    pub fn to_owned_blocks(&self) -> Delta {
        Delta {
            rank: self.rank,
            epoch: self.epoch,
            parent: self.parent,
            items: self
                .items
                .iter()
                .map(|i| DeltaItem {
                    name: i.name.clone(),
                    len: i.len,
                    block_size: i.block_size,
                    blocks: i.blocks.iter().map(|(index, b)| (*index, b.to_vec())).collect(),
                })
                .collect(),
        }
    }
}

impl<B: AsRef<[u8]>> Delta<B> {
    /// Checks the rules [`parse_delta`] enforces, so that encode and parse agree.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(StoreError::Delta(m));
        if self.epoch == 0 {
            return bad("epoch 0".into());
        }
        if let Some(p) = self.parent {
            if p == 0 || p >= self.epoch {
                return bad(format!("parent {p} of epoch {}", self.epoch));
            }
        }
        let mut names = HashSet::new();
        for item in &self.items {
            if let Err(why) = check_item(&mut names, &item.name, item.block_size) {
                return bad(why);
            }
            let count = item.len.div_ceil(u64::from(item.block_size));
            let mut prev = None;
            for (index, data) in &item.blocks {
                if prev.is_some_and(|p| p >= *index) {
                    return bad(format!("item {:?} blocks not ascending", item.name));
                }
                prev = Some(*index);
                if *index >= count {
                    return bad(format!("item {:?} block {index} past end", item.name));
                }
                if data.as_ref().len() as u64 != block_len(item.len, item.block_size, *index) {
                    return bad(format!("item {:?} block {index} has wrong length", item.name));
                }
            }
            if self.parent.is_none() && item.blocks.len() as u64 != count {
                return bad(format!("full delta misses blocks of item {:?}", item.name));
            }
        }
        Ok(())
    }

    /// Length of the unpadded encoding.
    pub fn encoded_len(&self) -> u64 {
        encoded_len_of(self.items.iter().map(|i| {
            let bytes = i.blocks.iter().map(|(_, d)| d.as_ref().len() as u64).sum::<u64>();
            (i.name.len(), i.blocks.len() as u64, bytes)
        }))
    }

    /// Encodes the delta without padding.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let len = self.encoded_len();
        self.encode_padded(len)
    }

    /// Encodes the delta zero-padded to exactly `len` bytes; errors if it does not fit.
    pub fn encode_padded(&self, len: u64) -> Result<Vec<u8>> {
        self.validate()?;
        let body_len = self.encoded_len();
        if body_len > len {
            return Err(StoreError::DeltaTooLarge {
                rank: self.rank,
                epoch: self.epoch,
                needed: body_len,
                len,
            });
        }
        let cap = usize::try_from(len)
            .map_err(|_| StoreError::Invalid(format!("padded length {len} too large")))?;
        let mut out = Vec::with_capacity(cap);
        let count =
            u32::try_from(self.items.len()).map_err(|_| StoreError::Invalid("too many items".into()))?;
        out.extend_from_slice(&header(self.rank, self.epoch, self.parent, body_len, count));
        for item in &self.items {
            out.extend_from_slice(&item_header(
                &item.name,
                item.len,
                item.block_size,
                item.blocks.len() as u64,
            ));
            for (index, data) in &item.blocks {
                out.extend_from_slice(&index.to_le_bytes());
                out.extend_from_slice(data.as_ref());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len() as u64, body_len);
        out.resize(cap, 0);
        Ok(out)
    }
}

/// The header of an encoded delta.
pub(crate) fn header(
    rank: u32,
    epoch: u64,
    parent: Option<u64>,
    body_len: u64,
    item_count: u32,
) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..10].copy_from_slice(&DELTA_FORMAT.to_le_bytes());
    let flags = if parent.is_some() { FLAG_PARENT } else { 0 };
    h[10..12].copy_from_slice(&flags.to_le_bytes());
    h[12..16].copy_from_slice(&rank.to_le_bytes());
    h[16..24].copy_from_slice(&epoch.to_le_bytes());
    h[24..32].copy_from_slice(&parent.unwrap_or(0).to_le_bytes());
    h[32..40].copy_from_slice(&body_len.to_le_bytes());
    h[40..44].copy_from_slice(&item_count.to_le_bytes());
    h
}

/// The fields of an encoded item before its blocks. Names were checked to fit a u16
/// (`MAX_ITEM_NAME`) when the item was written.
pub(crate) fn item_header(name: &str, len: u64, block_size: u32, block_count: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(MIN_ITEM_LEN - 1 + name.len());
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(name.as_bytes());
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&block_size.to_le_bytes());
    h.extend_from_slice(&block_count.to_le_bytes());
    h
}

/// Encoded length of a delta whose items are `(name length, block count, bytes in blocks)`.
pub(crate) fn encoded_len_of(items: impl Iterator<Item = (usize, u64, u64)>) -> u64 {
    let items =
        items.map(|(name, blocks, bytes)| (MIN_ITEM_LEN as u64 - 1) + name as u64 + 8 * blocks + bytes);
    HEADER_LEN + items.sum::<u64>() + TRAILER_LEN
}

/// Writes an encoded delta piece by piece — the bytes [`Delta::encode`] would make — for
/// deltas too large to build in memory: callers put the header, items and blocks in order,
/// and [`DeltaSink::finish`] appends the checksum. Small pieces are gathered into writes of
/// [`SINK_BUFFER`] bytes; runs of blocks go out as they are ([`DeltaSink::put_all`]), so the
/// writer needs no buffer of its own and block bytes are not copied on the way.
pub(crate) struct DeltaSink<'a, W: std::io::Write> {
    out: &'a mut W,
    pending: Vec<u8>,
    crc: u32,
    written: u64,
}

/// Bytes of small pieces a [`DeltaSink`] gathers before it writes them.
const SINK_BUFFER: usize = 64 * 1024;

impl<'a, W: std::io::Write> DeltaSink<'a, W> {
    pub(crate) fn new(out: &'a mut W) -> Self {
        DeltaSink {
            out,
            pending: Vec::with_capacity(SINK_BUFFER),
            crc: 0,
            written: 0,
        }
    }

    fn count(&mut self, bytes: &[u8]) {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.written += bytes.len() as u64;
    }

    fn flush_pending(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.count(bytes);
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= SINK_BUFFER {
            self.flush_pending()?;
        }
        Ok(())
    }

    /// Puts `pieces` in order, written straight from where they are.
    pub(crate) fn put_all(&mut self, pieces: &mut [std::io::IoSlice<'_>]) -> std::io::Result<()> {
        for piece in pieces.iter() {
            self.count(piece);
        }
        self.flush_pending()?;
        let mut pieces = pieces;
        while !pieces.is_empty() {
            let n = self.out.write_vectored(pieces)?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            std::io::IoSlice::advance_slices(&mut pieces, n);
        }
        Ok(())
    }

    /// Writes the trailer; returns the delta's encoded length.
    pub(crate) fn finish(mut self) -> std::io::Result<u64> {
        self.pending.extend_from_slice(&self.crc.to_le_bytes());
        self.flush_pending()?;
        Ok(self.written + TRAILER_LEN)
    }
}

/// Length the delta of the epoch `manifest` describes encodes to (its stored blocks are
/// exactly the delta's blocks).
pub(crate) fn delta_len_of(manifest: &Manifest) -> u64 {
    encoded_len_of(
        manifest
            .items
            .iter()
            .map(|i| (i.name.len(), i.blocks.len() as u64, i.stored_bytes())),
    )
}

/// The serialized delta is the store's only binary format: input that ends early is a bad delta.
impl From<Truncated> for StoreError {
    fn from(e: Truncated) -> Self {
        StoreError::Delta(e.to_string())
    }
}

/// Parses a (possibly zero-padded) serialized delta. Never panics; allocates at most a
/// small multiple of `bytes.len()`.
pub fn parse_delta(bytes: &[u8]) -> Result<Delta> {
    parse_delta_ref(bytes).map(|d| d.to_owned_blocks())
}

/// [`parse_delta`] without copying the blocks: they borrow from `bytes` (a mapped file, a
/// decoded shard), so a delta as large as an image costs only its block list in memory.
pub fn parse_delta_ref(bytes: &[u8]) -> Result<Delta<&[u8]>> {
    let bad = |m: &str| StoreError::Delta(m.to_string());
    if (bytes.len() as u64) < HEADER_LEN + TRAILER_LEN {
        return Err(bad("shorter than a header"));
    }
    let mut head = Cursor::new(bytes);
    if &head.array::<8>("magic")? != MAGIC {
        return Err(bad("bad magic"));
    }
    let version = head.u16("version")?;
    if version != DELTA_FORMAT {
        return Err(StoreError::Delta(format!("unsupported version {version}")));
    }
    let flags = head.u16("flags")?;
    if flags & !FLAG_PARENT != 0 {
        return Err(bad("unknown flags"));
    }
    let rank = head.u32("rank")?;
    let epoch = head.u64("epoch")?;
    let parent_raw = head.u64("parent")?;
    let body_len = head.u64("body length")?;
    let item_count = head.u32("item count")?;
    let parent = if flags & FLAG_PARENT != 0 {
        Some(parent_raw)
    } else if parent_raw != 0 {
        return Err(bad("parent set without flag"));
    } else {
        None
    };
    if body_len < HEADER_LEN + TRAILER_LEN || body_len > bytes.len() as u64 {
        return Err(StoreError::Delta(format!(
            "body length {body_len} outside 48..={}",
            bytes.len()
        )));
    }
    // body_len <= bytes.len(), so it fits a usize.
    let body_len = body_len as usize;
    if bytes[body_len..].iter().any(|&b| b != 0) {
        return Err(bad("non-zero padding"));
    }
    let (body, trailer) = bytes[..body_len].split_at(body_len - TRAILER_LEN as usize);
    if crc32c::crc32c(body) != Cursor::new(trailer).u32("checksum")? {
        return Err(bad("checksum mismatch"));
    }
    let mut cur = Cursor::new(body);
    cur.take(HEADER_LEN, "header")?;
    if item_count as usize > cur.remaining() / MIN_ITEM_LEN {
        return Err(bad("item count exceeds the data"));
    }
    let mut items = Vec::with_capacity(item_count as usize);
    for _ in 0..item_count {
        let name_len = cur.u16("item name length")?;
        let name = std::str::from_utf8(cur.take(name_len.into(), "item name")?)
            .map_err(|_| bad("item name not UTF-8"))?
            .to_string();
        let len = cur.u64("item length")?;
        let block_size = cur.u32("block size")?;
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(StoreError::Delta(format!("block size {block_size}")));
        }
        let block_count = cur.u64("block count")?;
        if block_count > (cur.remaining() / MIN_BLOCK_LEN) as u64 {
            return Err(bad("block count exceeds the data"));
        }
        let mut blocks = Vec::with_capacity(block_count as usize);
        for _ in 0..block_count {
            let index = cur.u64("block index")?;
            let n = block_len(len, block_size, index);
            if n == 0 {
                return Err(StoreError::Delta(format!("item {name:?} block {index} past end")));
            }
            blocks.push((index, cur.take(n, "block")?));
        }
        items.push(DeltaItem {
            name,
            len,
            block_size,
            blocks,
        });
    }
    if cur.remaining() != 0 {
        return Err(bad("trailing bytes after the last item"));
    }
    let delta = Delta {
        rank,
        epoch,
        parent,
        items,
    };
    delta.validate()?;
    Ok(delta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Delta {
        Delta {
            rank: 1,
            epoch: 3,
            parent: Some(2),
            items: vec![DeltaItem {
                name: "a".into(),
                len: 10,
                block_size: 4,
                blocks: vec![(0, vec![1, 2, 3, 4]), (2, vec![9, 9])],
            }],
        }
    }

    #[test]
    fn padded_roundtrip_and_length() {
        let d = sample();
        let enc = d.encode().unwrap();
        assert_eq!(enc.len() as u64, d.encoded_len());
        let padded = d.encode_padded(enc.len() as u64 + 100).unwrap();
        assert_eq!(&padded[..enc.len()], &enc[..]);
        assert_eq!(parse_delta(&padded).unwrap(), d);
        assert!(matches!(
            d.encode_padded(enc.len() as u64 - 1),
            Err(StoreError::DeltaTooLarge { .. })
        ));
    }

    #[test]
    fn rejects_nonzero_padding_and_flips() {
        let enc = sample().encode_padded(200).unwrap();
        for i in 0..enc.len() {
            let mut b = enc.clone();
            b[i] ^= 0x80;
            assert!(parse_delta(&b).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn full_delta_must_cover_every_block() {
        let mut d = sample();
        d.parent = None;
        assert!(d.validate().is_err());
        d.items[0].blocks.insert(1, (1, vec![0; 4]));
        d.validate().unwrap();
    }
}
