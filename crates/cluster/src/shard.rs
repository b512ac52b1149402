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

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use eckpt_cluster_api::shard_layout::{ItemList, ShardLayout};
use eckpt_store::{parse_delta, Delta, EpochView, Store};
use serde::{Deserialize, Serialize};

use eckpt_cluster_api::{io_at, ClusterError};
use eckpt_cursor::Cursor;

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
    let mut cursor = Cursor::new(bytes);
    if cursor.array::<8>("magic").ok().as_ref() != Some(BLOB_MAGIC) {
        return Err(bad("bad magic".into()));
    }
    let header_len = cursor.u32("header length").map_err(|e| bad(e.to_string()))?;
    let crc = cursor.u32("header checksum").map_err(|e| bad(e.to_string()))?;
    let header = cursor
        .take(header_len.into(), "header")
        .map_err(|_| bad(format!("header of {header_len} bytes past the end")))?;
    if crc32c::crc32c(header) != crc {
        return Err(bad("header checksum mismatch".into()));
    }
    let header: BlobHeader = serde_json::from_slice(header).map_err(|e| bad(format!("header: {e}")))?;
    let body = cursor.rest();
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
