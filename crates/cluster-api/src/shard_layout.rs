//! Where each rank's items sit in a node's image shard (modes `full` and `update`): the
//! layout the coordinator records per object and member, so that any node can cut a
//! decoded shard back into images.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

    /// Checks a layout read from a message before anything is cut or read by it: extents
    /// ascending and apart, each item within its capacity, no end past `u64::MAX`.
    pub fn check(&self) -> Result<(), ClusterError> {
        let mut end = 0u64;
        for e in &self.extents {
            match e.offset.checked_add(e.capacity) {
                Some(stop) if e.offset >= end && e.len <= e.capacity => end = stop,
                _ => {
                    return Err(ClusterError::Protocol(format!(
                        "layout extent of rank {} item {:?} at {} ({} of {} bytes) overlaps, is out of \
                         order or overflows",
                        e.rank, e.item, e.offset, e.len, e.capacity
                    )))
                }
            }
        }
        Ok(())
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
        let lens: BTreeMap<(u32, &str), u64> = items.iter().map(|(r, i, l)| ((*r, i.as_str()), *l)).collect();
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
    fn layouts_from_messages_are_checked() {
        let layout = ShardLayout::pack(&items());
        assert!(layout.check().is_ok());
        let mut bad = layout.clone();
        bad.extents[1].offset = 0;
        assert!(bad.check().is_err(), "overlap");
        let mut bad = layout.clone();
        bad.extents[2].len = bad.extents[2].capacity + 1;
        assert!(bad.check().is_err(), "longer than its capacity");
        let mut bad = layout;
        bad.extents[2].offset = u64::MAX;
        assert!(bad.check().is_err(), "past u64::MAX");
    }
}
