//! What the cluster layer needs from a rank's store: parity-update input, padded deltas
//! for stripe coding, and rebuilding an epoch from a decoded delta.

use std::collections::HashSet;
use std::io::{IoSlice, Write};
use std::path::Path;

use crate::delta::{
    delta_len_of, encoded_len_of, header, item_header, parse_delta_ref, Delta, DeltaItem, DeltaSink,
};
use crate::error::{io_at, Result, StoreError};
use crate::layout::scan_rank;
use crate::manifest::ItemManifest;
use crate::read::{locate, Chain};
use crate::write::Plan;
use crate::Store;

/// One changed block of an epoch relative to its parent: `bytes = old ⊕ new`, where both
/// sides are zero past their item's length. This is what `update` mode multiplies into
/// the parity (`C += X · (D_new ⊕ D_old)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XorBlock {
    /// Item the block belongs to.
    pub item: String,
    /// Block size the index refers to (the epoch's block size for the item; the parent's
    /// for an item the epoch removed).
    pub block_size: u32,
    /// Block index: the block covers `index * block_size ..`.
    pub index: u64,
    /// `old ⊕ new`, as long as the block is within the longer of the two item lengths.
    pub bytes: Vec<u8>,
}

/// Hands `visit` the non-zero `old ⊕ new` of each candidate block of `name`, in order.
fn xor_blocks<E: From<StoreError>>(
    old: &Chain,
    new: &Chain,
    name: &str,
    block_size: u32,
    span: u64,
    candidates: impl Iterator<Item = u64>,
    visit: &mut impl FnMut(XorBlock) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let bs = u64::from(block_size);
    let mut old_buf = Vec::new();
    for index in candidates {
        let start = index * bs;
        let n = bs.min(span - start) as usize;
        let mut bytes = vec![0u8; n];
        old_buf.resize(n, 0);
        new.read_padded(name, start, &mut bytes)?;
        old.read_padded(name, start, &mut old_buf)?;
        for (b, o) in bytes.iter_mut().zip(&old_buf) {
            *b ^= o;
        }
        if bytes.iter().any(|&b| b != 0) {
            visit(XorBlock {
                item: name.to_string(),
                block_size,
                index,
                bytes,
            })?;
        }
    }
    Ok(())
}

/// An item count as the delta header holds it.
fn item_count(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| StoreError::Invalid("too many items".into()))
}

/// An item of a delta: the manifest's shape with the given blocks.
fn delta_item(item: &ItemManifest, blocks: Vec<(u64, Vec<u8>)>) -> DeltaItem {
    DeltaItem {
        name: item.name.clone(),
        len: item.len,
        block_size: item.block_size,
        blocks,
    }
}

impl Store {
    /// For epoch `epoch` (committed or prepared) with parent `P`: every block whose content
    /// differs between `P`'s image and `epoch`'s, as `old ⊕ new`. Covers grown items
    /// (old side zero), shrunk items (new side zero past the new end), new and removed
    /// items. Blocks whose XOR is zero are left out. Needs `P` to still be stored, which
    /// retention guarantees while `epoch` is prepared.
    pub fn dirty_xor(&self, rank: u32, epoch: u64) -> Result<Vec<XorBlock>> {
        let mut out = Vec::new();
        self.dirty_xor_each(rank, epoch, |block| {
            out.push(block);
            Ok::<_, StoreError>(())
        })?;
        Ok(out)
    }

    /// [`Store::dirty_xor`] one block at a time, as the store is read: `visit` gets each
    /// changed block in item and block order, so a caller can send the first changes while
    /// the rest are still being read, and stop at its first error.
    pub fn dirty_xor_each<E: From<StoreError>>(
        &self,
        rank: u32,
        epoch: u64,
        mut visit: impl FnMut(XorBlock) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let dir = self.rank_dir(rank);
        let new = Chain::open(&dir, rank, epoch, true)?;
        let m = &new.target().manifest;
        let parent = m
            .parent
            .ok_or_else(|| StoreError::Invalid(format!("rank {rank} epoch {epoch} has no parent to diff")))?;
        let old = Chain::open(&dir, rank, parent, false)?;
        let om = &old.target().manifest;
        for item in &m.items {
            let old_len = old.target().item(&item.name).map_or(0, |i| i.len);
            let bs = u64::from(item.block_size);
            let span = item.len.max(old_len);
            let span_blocks = span.div_ceil(bs);
            if m.full {
                xor_blocks(
                    &old,
                    &new,
                    &item.name,
                    item.block_size,
                    span,
                    0..span_blocks,
                    &mut visit,
                )?;
            } else {
                // Stored blocks, then every block the item lost by shrinking.
                let tail = if old_len > item.len {
                    item.len / bs
                } else {
                    span_blocks
                };
                let stored = item.blocks.iter().map(|b| b.index).filter(|&i| i < tail);
                let candidates = stored.chain(tail..span_blocks);
                xor_blocks(
                    &old,
                    &new,
                    &item.name,
                    item.block_size,
                    span,
                    candidates,
                    &mut visit,
                )?;
            }
        }
        for item in om.items.iter().filter(|i| new.target().item(&i.name).is_none()) {
            let candidates = 0..item.block_count();
            xor_blocks(
                &old,
                &new,
                &item.name,
                item.block_size,
                item.len,
                candidates,
                &mut visit,
            )?;
        }
        Ok(())
    }

    /// Serialized length of `epoch`'s delta (see [`Store::padded_delta`]), from its
    /// manifest alone, so the group can agree on the largest before encoding.
    pub fn delta_len(&self, rank: u32, epoch: u64) -> Result<u64> {
        let dir = self.rank_dir(rank);
        let scan = scan_rank(&dir)?;
        Ok(delta_len_of(&locate(&dir, &scan, rank, epoch, true)?.manifest))
    }

    /// The delta of `epoch` (committed or prepared): the blocks it stores, every block
    /// verified. A delta epoch yields a delta against its parent; a full epoch (first one,
    /// or coalesced) yields a complete image without parent, so the cluster's stripe chain
    /// restarts where the local chain does.
    pub fn delta(&self, rank: u32, epoch: u64) -> Result<Delta> {
        let dir = self.rank_dir(rank);
        let scan = scan_rank(&dir)?;
        let data = locate(&dir, &scan, rank, epoch, true)?;
        let m = &data.manifest;
        let mut items = Vec::with_capacity(m.items.len());
        for (i, item) in m.items.iter().enumerate() {
            let mut blocks = Vec::with_capacity(item.blocks.len());
            for (k, b) in item.blocks.iter().enumerate() {
                let mut buf = Vec::new();
                data.read_block(epoch, i, k, &mut buf)?;
                blocks.push((b.index, buf));
            }
            items.push(delta_item(item, blocks));
        }
        Ok(Delta {
            rank,
            epoch,
            parent: if m.full { None } else { m.parent },
            items,
        })
    }

    /// Encoded length of what [`Store::write_delta`] writes, from the manifests alone, so
    /// that a group can agree on the largest before anything is read.
    pub fn encoded_delta_len(&self, rank: u32, epoch: u64, complete: bool) -> Result<u64> {
        if !complete {
            return self.delta_len(rank, epoch);
        }
        let chain = Chain::open(&self.rank_dir(rank), rank, epoch, true)?;
        let m = &chain.target().manifest;
        Ok(encoded_len_of(
            m.items.iter().map(|i| (i.name.len(), i.block_count(), i.len)),
        ))
    }

    /// Writes the serialized delta of `epoch` (committed or prepared) to `out` (named
    /// `out_path` in errors), block by block as the store is read: the bytes
    /// [`Store::delta`]`.encode()` makes, or with `complete` the whole image as a delta
    /// without parent — every block of every item, read through the delta chain in windows
    /// and verified (the first stripe of a cluster's stripe chain carries these). Memory
    /// stays at one window whatever the image size; `out` needs no buffer (small pieces are
    /// gathered, a window's blocks written straight from it). Returns the bytes written.
    pub fn write_delta(
        &self,
        rank: u32,
        epoch: u64,
        complete: bool,
        out: &mut impl Write,
        out_path: &Path,
    ) -> Result<u64> {
        let len = self.encoded_delta_len(rank, epoch, complete)?;
        let mut sink = DeltaSink::new(out);
        let put = |sink: &mut DeltaSink<'_, _>, bytes: &[u8]| sink.put(bytes).map_err(io_at(out_path));
        let dir = self.rank_dir(rank);
        if complete {
            let chain = Chain::open(&dir, rank, epoch, true)?;
            let m = &chain.target().manifest;
            put(
                &mut sink,
                &header(rank, epoch, None, len, item_count(m.items.len())?),
            )?;
            // One pass over the chain per window of many blocks, not per block.
            const WINDOW_BLOCKS: u64 = 1024;
            let mut window = Vec::new();
            for item in &m.items {
                let bs = u64::from(item.block_size);
                put(
                    &mut sink,
                    &item_header(&item.name, item.len, item.block_size, item.block_count()),
                )?;
                for first in (0..item.block_count()).step_by(WINDOW_BLOCKS as usize) {
                    let start = first * bs;
                    window.resize((WINDOW_BLOCKS * bs).min(item.len - start) as usize, 0);
                    chain.read_padded(&item.name, start, &mut window)?;
                    let indices: Vec<[u8; 8]> = (0..window.len().div_ceil(bs as usize) as u64)
                        .map(|i| (first + i).to_le_bytes())
                        .collect();
                    let mut pieces: Vec<IoSlice<'_>> = indices
                        .iter()
                        .zip(window.chunks(bs as usize))
                        .flat_map(|(index, block)| [IoSlice::new(index), IoSlice::new(block)])
                        .collect();
                    sink.put_all(&mut pieces).map_err(io_at(out_path))?;
                }
            }
        } else {
            let data = locate(&dir, &scan_rank(&dir)?, rank, epoch, true)?;
            let m = &data.manifest;
            let parent = if m.full { None } else { m.parent };
            put(
                &mut sink,
                &header(rank, epoch, parent, len, item_count(m.items.len())?),
            )?;
            let mut buf = Vec::new();
            for (i, item) in m.items.iter().enumerate() {
                let count = item.blocks.len() as u64;
                put(
                    &mut sink,
                    &item_header(&item.name, item.len, item.block_size, count),
                )?;
                for (k, b) in item.blocks.iter().enumerate() {
                    data.read_block(epoch, i, k, &mut buf)?;
                    put(&mut sink, &b.index.to_le_bytes())?;
                    put(&mut sink, &buf)?;
                }
            }
        }
        let written = sink.finish().map_err(io_at(out_path))?;
        if written != len {
            return Err(StoreError::Invalid(format!(
                "rank {rank} epoch {epoch}: wrote a {written}-byte delta, {len} expected"
            )));
        }
        Ok(written)
    }

    /// [`Store::delta`] serialized and zero-padded to exactly `len` bytes (the group's
    /// largest [`Store::delta_len`]); [`StoreError::DeltaTooLarge`] if it does not fit.
    pub fn padded_delta(&self, rank: u32, epoch: u64, len: u64) -> Result<Vec<u8>> {
        let needed = self.delta_len(rank, epoch)?;
        if needed > len {
            return Err(StoreError::DeltaTooLarge {
                rank,
                epoch,
                needed,
                len,
            });
        }
        self.delta(rank, epoch)?.encode_padded(len)
    }

    /// Rebuilds and commits an epoch from a (padded) serialized delta, e.g. one recovered
    /// by erasure decoding: the delta's parent must be committed here (or the delta be a
    /// complete image), and its epoch newer than the latest committed one. Returns the
    /// epoch. Prepared epochs of the rank are discarded.
    pub fn apply_delta(&self, rank: u32, bytes: &[u8]) -> Result<u64> {
        let delta = parse_delta_ref(bytes)?;
        if delta.rank != rank {
            return Err(StoreError::Invalid(format!(
                "delta of rank {} applied to rank {rank}",
                delta.rank
            )));
        }
        let lock = self.lock_rank(rank, true)?;
        let scan = scan_rank(&self.rank_dir(rank))?;
        if let Some(l) = scan.latest().filter(|&l| l >= delta.epoch) {
            return Err(StoreError::Invalid(format!(
                "rank {rank} epoch {} is not newer than committed epoch {l}",
                delta.epoch
            )));
        }
        if let Some(p) = delta.parent {
            if scan.committed_gen(p).is_none() {
                return Err(StoreError::NoEpoch { rank, epoch: p });
            }
        }
        let plan: Plan = self.plan_after(rank, delta.epoch, delta.parent)?;
        let carried: Vec<String> = plan
            .source
            .as_ref()
            .map(|c| c.target().manifest.items.iter().map(|i| i.name.clone()).collect())
            .unwrap_or_default();
        let mut writer = self.begin(lock, plan)?;
        for item in &delta.items {
            writer.put_dirty(&item.name, item.block_size, item.len, &item.blocks)?;
        }
        // Looked up in a set: a rank's image may hold 100,000 items.
        let in_delta: HashSet<&str> = delta.items.iter().map(|i| i.name.as_str()).collect();
        for name in carried {
            if !in_delta.contains(name.as_str()) {
                writer.remove(&name)?;
            }
        }
        writer.commit()?;
        Ok(delta.epoch)
    }
}
