//! A node's data shard: the bytes it contributes to its group's code for one object.
//!
//! - **Image shards** (modes `full` and `update`): every item of every rank the node hosts,
//!   at the offsets of a [`ShardLayout`], zero elsewhere. Read straight from the node-local
//!   store, never copied. In `update` mode the layout is kept from epoch to epoch while
//!   every item still fits its extent, so a changed block has a fixed place in the shard and
//!   its parity can be updated in place.
//! - **Stripe blobs** (mode `stripe`): the serialized deltas of the node's ranks for one
//!   epoch (complete images for the first stripe of a chain), kept as a file so that the
//!   whole chain can be decoded after the store has moved on.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use eckpt_store::{parse_delta, Delta, EpochView, Image, Store};
use serde::{Deserialize, Serialize};

use crate::error::io_at;
use crate::ClusterError;

/// Alignment of extents in an image shard.
pub const EXTENT_ALIGN: u64 = 4096;

/// Where one item of one rank sits in an image shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// Rank.
    pub rank: u32,
    /// Item name.
    pub item: String,
    /// Offset in the shard.
    pub offset: u64,
    /// Item length at the object's epoch.
    pub len: u64,
    /// Bytes reserved: the item may grow to this without moving.
    pub capacity: u64,
}

/// The extents of an image shard, ascending by offset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardLayout {
    /// Extents, ascending by offset, not overlapping.
    pub extents: Vec<Extent>,
}

/// `(rank, item, length)` of every item a node's ranks hold at an epoch.
pub type ItemList = Vec<(u32, String, u64)>;

impl ShardLayout {
    /// Packs `items` in `(rank, item)` order, each extent aligned and as large as its item.
    pub fn pack(items: &ItemList) -> ShardLayout {
        let mut sorted = items.clone();
        sorted.sort();
        let mut offset = 0;
        let extents = sorted
            .into_iter()
            .map(|(rank, item, len)| {
                let capacity = len.div_ceil(EXTENT_ALIGN) * EXTENT_ALIGN;
                let e = Extent {
                    rank,
                    item,
                    offset,
                    len,
                    capacity,
                };
                offset += capacity;
                e
            })
            .collect();
        ShardLayout { extents }
    }

    /// Bytes the shard spans.
    pub fn len(&self) -> u64 {
        self.extents.last().map_or(0, |e| e.offset + e.capacity)
    }

    /// Whether the shard is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This layout with `items`' new lengths, if they are the same items and each still
    /// fits its extent (`update` mode keeps offsets stable).
    pub fn refit(&self, items: &ItemList) -> Option<ShardLayout> {
        if items.len() != self.extents.len() {
            return None;
        }
        let lens: HashMap<(u32, &str), u64> = items.iter().map(|(r, i, l)| ((*r, i.as_str()), *l)).collect();
        let mut extents = self.extents.clone();
        for e in &mut extents {
            let len = *lens.get(&(e.rank, e.item.as_str()))?;
            if len > e.capacity {
                return None;
            }
            e.len = len;
        }
        Some(ShardLayout { extents })
    }

    /// The extent of `(rank, item)`.
    pub fn extent(&self, rank: u32, item: &str) -> Option<&Extent> {
        self.extents.iter().find(|e| e.rank == rank && e.item == item)
    }

    /// Ranks present, ascending.
    pub fn ranks(&self) -> Vec<u32> {
        let mut r: Vec<u32> = self.extents.iter().map(|e| e.rank).collect();
        r.dedup();
        r
    }

    /// Cuts a shard's bytes into each rank's image.
    pub fn images(&self, shard: &[u8]) -> Result<BTreeMap<u32, Image>, ClusterError> {
        let mut images: BTreeMap<u32, Image> = BTreeMap::new();
        for e in &self.extents {
            let end = e.offset + e.len;
            if end > shard.len() as u64 {
                return Err(ClusterError::Corrupt(format!(
                    "shard of {} bytes is too short for rank {} item {:?} ending at {end}",
                    shard.len(),
                    e.rank,
                    e.item
                )));
            }
            images
                .entry(e.rank)
                .or_default()
                .items
                .insert(e.item.clone(), shard[e.offset as usize..end as usize].to_vec());
        }
        Ok(images)
    }
}

/// Every item of `ranks` at `epoch` (committed or prepared) in the node's store.
pub fn node_items(store: &Store, ranks: &[u32], epoch: u64) -> Result<ItemList, ClusterError> {
    let mut items = Vec::new();
    for &rank in ranks {
        let view = store.view(rank, epoch)?;
        items.extend(
            view.manifest()
                .items
                .iter()
                .map(|i| (rank, i.name.clone(), i.len)),
        );
    }
    Ok(items)
}

/// Reads an image shard from the store: each extent from its rank's epoch, zero between.
pub struct ImageShard {
    layout: ShardLayout,
    views: HashMap<u32, EpochView>,
}

impl ImageShard {
    /// Opens the epochs the layout needs.
    pub fn open(store: &Store, layout: ShardLayout, epoch: u64) -> Result<ImageShard, ClusterError> {
        let mut views = HashMap::new();
        for rank in layout.ranks() {
            views.insert(rank, store.view(rank, epoch)?);
        }
        Ok(ImageShard { layout, views })
    }

    /// Fills `buf` with shard bytes from `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        buf.fill(0);
        let end = offset + buf.len() as u64;
        let first = self
            .layout
            .extents
            .partition_point(|e| e.offset + e.capacity <= offset);
        for e in &self.layout.extents[first..] {
            if e.offset >= end {
                break;
            }
            let lo = e.offset.max(offset);
            let hi = (e.offset + e.len).min(end);
            if lo < hi {
                let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
                self.views[&e.rank].read_padded(&e.item, lo - e.offset, dst)?;
            }
        }
        Ok(())
    }
}

const BLOB_MAGIC: &[u8; 8] = b"ECKSTRP1";

/// Where each rank's delta sits in a stripe blob.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BlobHeader {
    /// `(rank, offset, len)` of each serialized delta after the header.
    ranks: Vec<(u32, u64, u64)>,
}

/// Serializes the node's stripe for `epoch`: each rank's delta (complete images when
/// `complete`, the first stripe of a chain) behind a checksummed header.
pub fn build_stripe_blob(
    store: &Store,
    ranks: &[u32],
    epoch: u64,
    complete: bool,
) -> Result<Vec<u8>, ClusterError> {
    let mut body = Vec::new();
    let mut header = BlobHeader { ranks: Vec::new() };
    for &rank in ranks {
        let delta = if complete {
            store.complete_delta(rank, epoch)?
        } else {
            store.delta(rank, epoch)?
        };
        let encoded = delta.encode()?;
        header.ranks.push((rank, body.len() as u64, encoded.len() as u64));
        body.extend_from_slice(&encoded);
    }
    let header = serde_json::to_vec(&header).expect("a blob header always serializes");
    let mut blob = Vec::with_capacity(16 + header.len() + body.len());
    blob.extend_from_slice(BLOB_MAGIC);
    blob.extend_from_slice(&(header.len() as u32).to_le_bytes());
    blob.extend_from_slice(&crc32c::crc32c(&header).to_le_bytes());
    blob.extend_from_slice(&header);
    blob.extend_from_slice(&body);
    Ok(blob)
}

/// Parses a (possibly zero-padded, possibly decoded) stripe blob into its deltas. Treats
/// the input as hostile: every offset is checked and every delta fully validated.
pub fn parse_stripe_blob(bytes: &[u8]) -> Result<Vec<Delta>, ClusterError> {
    let bad = |why: String| ClusterError::Corrupt(format!("stripe blob: {why}"));
    if bytes.len() < 16 || &bytes[..8] != BLOB_MAGIC {
        return Err(bad("bad magic".into()));
    }
    let header_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    let header = bytes
        .get(16..16 + header_len)
        .ok_or_else(|| bad(format!("header of {header_len} bytes past the end")))?;
    if crc32c::crc32c(header) != crc {
        return Err(bad("header checksum mismatch".into()));
    }
    let header: BlobHeader = serde_json::from_slice(header).map_err(|e| bad(format!("header: {e}")))?;
    let body = &bytes[16 + header_len..];
    let mut deltas: Vec<Delta> = Vec::with_capacity(header.ranks.len());
    for (rank, offset, len) in header.ranks {
        let end = offset.checked_add(len).filter(|&e| e <= body.len() as u64);
        let end = end.ok_or_else(|| bad(format!("rank {rank} delta past the end")))?;
        let delta = parse_delta(&body[offset as usize..end as usize])?;
        if delta.rank != rank {
            return Err(bad(format!("entry for rank {rank} holds rank {}", delta.rank)));
        }
        if deltas.iter().any(|d| d.rank == rank) {
            return Err(bad(format!("rank {rank} twice")));
        }
        deltas.push(delta);
    }
    Ok(deltas)
}

/// Reads a blob file as a zero-padded shard.
pub struct BlobShard {
    file: File,
    len: u64,
    path: String,
}

impl BlobShard {
    /// Opens a blob file.
    pub fn open(path: &Path) -> Result<BlobShard, ClusterError> {
        let file = File::open(path).map_err(io_at(path))?;
        let len = file.metadata().map_err(io_at(path))?.len();
        Ok(BlobShard {
            file,
            len,
            path: path.display().to_string(),
        })
    }

    /// Fills `buf` with shard bytes from `offset` (zero past the blob's end).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        buf.fill(0);
        if offset < self.len {
            let n = ((self.len - offset) as usize).min(buf.len());
            self.file
                .read_exact_at(&mut buf[..n], offset)
                .map_err(|source| ClusterError::Io {
                    path: self.path.clone(),
                    source,
                })?;
        }
        Ok(())
    }
}

/// CRC-32C of each `chunk`-byte piece of a zero-padded shard of `chunks` pieces, read
/// through `read`.
pub fn chunk_crcs(
    chunks: u64,
    chunk: usize,
    mut read: impl FnMut(u64, &mut [u8]) -> Result<(), ClusterError>,
) -> Result<Vec<u32>, ClusterError> {
    let mut buf = vec![0u8; chunk];
    (0..chunks)
        .map(|c| {
            read(c * chunk as u64, &mut buf)?;
            Ok(crc32c::crc32c(&buf))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> ItemList {
        vec![
            (1, "mem/b".into(), 5000),
            (0, "file".into(), 10),
            (1, "mem/a".into(), 4096),
        ]
    }

    #[test]
    fn packing_is_ordered_aligned_and_refits_only_what_fits() {
        let layout = ShardLayout::pack(&items());
        let names: Vec<(u32, &str, u64)> = layout
            .extents
            .iter()
            .map(|e| (e.rank, e.item.as_str(), e.offset))
            .collect();
        assert_eq!(
            names,
            vec![(0, "file", 0), (1, "mem/a", 4096), (1, "mem/b", 8192)]
        );
        assert_eq!(layout.len(), 8192 + 8192);
        let grown: ItemList = vec![
            (0, "file".into(), 4096),
            (1, "mem/a".into(), 1),
            (1, "mem/b".into(), 8192),
        ];
        let refit = layout.refit(&grown).expect("fits");
        assert_eq!(refit.extent(0, "file").unwrap().len, 4096);
        assert_eq!(refit.extent(1, "mem/b").unwrap().offset, 8192);
        let too_big: ItemList = vec![
            (0, "file".into(), 4097),
            (1, "mem/a".into(), 1),
            (1, "mem/b".into(), 1),
        ];
        assert!(layout.refit(&too_big).is_none());
        let other: ItemList = vec![
            (0, "file".into(), 1),
            (1, "mem/a".into(), 1),
            (2, "mem/b".into(), 1),
        ];
        assert!(layout.refit(&other).is_none());
    }

    #[test]
    fn images_come_back_from_shard_bytes() {
        let layout = ShardLayout::pack(&items());
        let mut shard = vec![0u8; layout.len() as usize];
        for e in &layout.extents {
            for i in 0..e.len {
                shard[(e.offset + i) as usize] = (e.rank as u64 * 7 + i) as u8;
            }
        }
        let images = layout.images(&shard).unwrap();
        assert_eq!(images[&0].items["file"].len(), 10);
        assert_eq!(images[&1].items["mem/b"][4999], (7 + 4999u64) as u8);
        assert!(layout.images(&shard[..100]).is_err());
    }

    #[test]
    fn hostile_blobs_are_refused() {
        assert!(parse_stripe_blob(b"short").is_err());
        let mut blob = Vec::new();
        blob.extend_from_slice(BLOB_MAGIC);
        let header = br#"{"ranks":[[0,0,1000]]}"#;
        blob.extend_from_slice(&(header.len() as u32).to_le_bytes());
        blob.extend_from_slice(&crc32c::crc32c(header).to_le_bytes());
        blob.extend_from_slice(header);
        let err = parse_stripe_blob(&blob).unwrap_err().to_string();
        assert!(err.contains("past the end"), "{err}");
        blob[20] ^= 1;
        assert!(parse_stripe_blob(&blob)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
    }
}
