//! A node's data shard: the bytes it contributes to its group's code for one object.
//!
//! - **Image shards** (modes `full` and `update`): every item of every rank the node hosts,
//!   at the offsets of a [`ShardLayout`], zero elsewhere. Read straight from the node-local
//!   store, never copied. In `update` mode the layout is kept from epoch to epoch while
//!   every item still fits its extent, so a changed block has a fixed place in the shard and
//!   its parity can be updated in place.
//! - **Stripe blobs** (mode `stripe`): see [`crate::stripe_blob`].

use std::collections::HashMap;

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
