//! Epochs of named byte items, for checkpoint formats that bring their own bytes —
//! torch.distributed.checkpoint's write items, through `eckpt.torch` — rather than memory
//! protected in place. A rank's epoch holds exactly the items of its save; each is stored
//! as the blocks that changed since the rank's previous epoch (the store compares them block
//! by block), and the cluster erasure-codes the epoch as any rank's image. Any rank's items
//! are read back at a committed epoch: from the store (standalone), or in cluster mode from
//! wherever the cluster keeps the rank now, decoded from its group when its node is gone.

use super::{Capture, Checkpointer, Completion, Meta};
use crate::Error;

/// Saved items are stored under this prefix, apart from the checkpointer's own items.
const ITEM_PREFIX: &str = "items/";

/// Items of one rank at one epoch: name and bytes, in name order.
pub type Items = Vec<(String, Vec<u8>)>;

impl Checkpointer {
    /// Saves `items` (name, bytes) as this rank's next epoch and returns its number: exactly
    /// these items — an item of the previous epoch missing here is not in this one. Standalone,
    /// the epoch is committed on return; in cluster mode it is durable on the rank's node and
    /// reported, and the cluster commits it once every rank's is in ([`Checkpointer::wait`]).
    /// A checkpointer that protects memory, device memory or files writes those in its epochs
    /// and is refused: saved items need a checkpointer of their own.
    pub fn save_items(&mut self, items: &[(&str, &[u8])]) -> Result<u64, Error> {
        self.join_background()?;
        if !(self.regions.is_empty()
            && self.devices.is_empty()
            && self.files.is_empty()
            && self.dirs.is_empty())
        {
            return Err(Error::State(
                "this checkpointer protects memory or files, which its epochs hold: save items with a checkpointer of their own".into(),
            ));
        }
        let mut names: Vec<&str> = items.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(Error::Invalid(format!("item {:?} is given twice", pair[0])));
        }
        if names.first().is_some_and(|name| name.is_empty()) {
            return Err(Error::Invalid("an item's name is empty".into()));
        }
        let rank = self.config.rank;
        let (epoch, node) = match &self.cluster {
            Some(link) => {
                let (epoch, node, _) = link.open_epoch(rank, self.config.launched_on())?;
                (epoch, Some(node))
            }
            None => (self.store()?.latest_committed(rank)?.map_or(1, |e| e + 1), None),
        };
        if let Some(node) = &node {
            self.use_store(&node.store)?;
        }
        let store = self.store()?;
        let mut writer = store.writer_of_every_item(rank, epoch)?;
        for (name, bytes) in items {
            writer.put_full(&format!("{ITEM_PREFIX}{name}"), bytes)?;
        }
        if let Some(parent) = writer.parent() {
            for old in store.manifest(rank, parent)?.items {
                if old.name.starts_with(ITEM_PREFIX)
                    && names.binary_search(&&old.name[ITEM_PREFIX.len()..]).is_err()
                {
                    writer.remove(&old.name)?;
                }
            }
        }
        let meta = serde_json::to_vec(&Meta::default())
            .map_err(|e| Error::Internal(format!("epoch {epoch}'s metadata does not serialise: {e}")))?;
        let completion = Completion {
            rank,
            epoch,
            capture: Capture {
                writer,
                staged: Vec::new(),
                meta,
            },
            ready: node.map(|n| (n.name, None)),
        };
        let result = completion.run(&mut self.devices, self.cluster.as_deref());
        self.completed(epoch, result)?;
        Ok(epoch)
    }

    /// The items rank `rank` saved at committed `epoch` (default: its latest committed one)
    /// that `wanted(name)` keeps, with their bytes, in name order; and the epoch. Standalone
    /// they are read from the store, every block verified; in cluster mode from the node that
    /// holds the rank now, or decoded from its group when that node is gone (the path of
    /// `eckpt restore`). No epoch to read is an error that says so, never an empty answer.
    pub fn read_items(
        &mut self,
        rank: u32,
        epoch: Option<u64>,
        wanted: &dyn Fn(&str) -> bool,
    ) -> Result<(u64, Items), Error> {
        self.join_background()?;
        let saved = |stored: &str| {
            stored
                .strip_prefix(ITEM_PREFIX)
                .filter(|name| wanted(name))
                .map(String::from)
        };
        if let Some(link) = &self.cluster {
            let (epoch, items) = link.export_items(rank, epoch, |stored| saved(stored).is_some())?;
            let mut items: Items = items
                .into_iter()
                .filter_map(|(stored, bytes)| Some((saved(&stored)?, bytes)))
                .collect();
            items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            return Ok((epoch, items));
        }
        let store = self.store()?;
        let epoch = match epoch {
            Some(epoch) => epoch,
            None => store.latest_committed(rank)?.ok_or_else(|| {
                Error::State(format!(
                    "rank {rank} has no committed epoch in {}",
                    store.root().display()
                ))
            })?,
        };
        let manifest = store.manifest(rank, epoch)?;
        let mut items: Vec<(String, String, Vec<u8>)> = manifest
            .items
            .iter()
            .filter_map(|item| {
                Some((
                    item.name.clone(),
                    saved(&item.name)?,
                    vec![0u8; item.len as usize],
                ))
            })
            .collect();
        let buffers = items
            .iter_mut()
            .map(|(stored, _, buf)| (stored.as_str(), buf.as_mut_slice()))
            .collect();
        store.read_items_into(rank, epoch, buffers, &mut |_, _| Ok::<(), Error>(()))?;
        let mut items: Items = items.into_iter().map(|(_, name, bytes)| (name, bytes)).collect();
        items.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok((epoch, items))
    }
}
