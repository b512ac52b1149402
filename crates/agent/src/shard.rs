//! A node's data shard: the bytes it contributes to its group's code for one object.
//!
//! - **Image shards** (modes `full` and `update`): every item of every rank the node hosts,
//!   at the offsets of a [`ShardLayout`], zero elsewhere. Read straight from the node-local
//!   store, never copied. In `update` mode the layout is kept from epoch to epoch while
//!   every item still fits its extent, so a changed block has a fixed place in the shard and
//!   its parity can be updated in place.
//! - **Stripe blobs** (mode `stripe`): see [`crate::stripe_blob`].

use std::collections::BTreeMap;

use eckpt_cluster_api::shard_layout::{ItemList, ShardLayout};
use eckpt_cluster_api::ClusterError;
use eckpt_store::{EpochView, Store};

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
    views: BTreeMap<u32, EpochView>,
}

impl ImageShard {
    /// Opens the epochs the layout needs.
    pub fn open(store: &Store, layout: ShardLayout, epoch: u64) -> Result<ImageShard, ClusterError> {
        let mut views = BTreeMap::new();
        for rank in layout.ranks() {
            views.insert(rank, store.view(rank, epoch)?);
        }
        Ok(ImageShard { layout, views })
    }

    /// Fills `buf` with shard bytes from `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        let end = offset + buf.len() as u64;
        let first = self
            .layout
            .extents
            .partition_point(|e| e.offset + e.capacity <= offset);
        // Only the bytes no item covers are zeroed (padding between extents, past the last):
        // zeroing the whole chunk first was one more pass over every byte encoded.
        let mut filled = offset;
        for e in &self.layout.extents[first..] {
            if e.offset >= end {
                break;
            }
            let lo = e.offset.max(offset);
            let hi = (e.offset + e.len).min(end);
            if lo < hi {
                if lo > filled {
                    buf[(filled - offset) as usize..(lo - offset) as usize].fill(0);
                }
                let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
                self.views[&e.rank].read_padded(&e.item, lo - e.offset, dst)?;
                filled = filled.max(hi);
            }
        }
        buf[(filled - offset) as usize..].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window anywhere in a shard — starting inside an item or in the padding after one,
    /// crossing gaps, running past the last extent — reads the items' bytes at their offsets
    /// and zero everywhere else, whatever the buffer held before.
    #[test]
    fn windows_read_items_at_their_offsets_and_zero_between() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let items: Vec<(u32, &str, Vec<u8>)> = vec![
            (0, "a", (0..5000u32).map(|i| (i % 251) as u8 + 1).collect()),
            (0, "b", vec![7; 10]),
            (1, "c", (0..9000u32).map(|i| (i % 13) as u8 + 1).collect()),
        ];
        for rank in [0, 1] {
            let mut w = store.writer(rank, 1).unwrap();
            for (_, name, bytes) in items.iter().filter(|(r, _, _)| *r == rank) {
                w.put_full(name, bytes).unwrap();
            }
            w.commit().unwrap();
        }
        let list: ItemList = items
            .iter()
            .map(|(r, n, b)| (*r, n.to_string(), b.len() as u64))
            .collect();
        let layout = ShardLayout::pack(&list);
        let mut model = vec![0u8; layout.len() as usize + 3000];
        for (rank, name, bytes) in &items {
            let at = layout.extent(*rank, name).unwrap().offset as usize;
            model[at..at + bytes.len()].copy_from_slice(bytes);
        }
        let shard = ImageShard::open(&store, layout, 1).unwrap();
        for (offset, len) in [
            (0, model.len()),
            (4000, 5000),
            (5000, 100),
            (8200, 6000),
            (13000, 4000),
            (4100, 1),
        ] {
            let mut buf = vec![0xEE; len];
            shard.read(offset as u64, &mut buf).unwrap();
            assert!(buf == model[offset..offset + len], "window {offset}+{len}");
        }
    }
}
