//! `eckpt decode`: rebuild the original file from any `k` intact shards per stripe.
//!
//! A reader thread reads the data shards of each batch and checks their blocks; only when a
//! data block is damaged does it read the parity shards of that batch too. The calling thread
//! rebuilds damaged data blocks (stripes split over threads), writes the file under a
//! temporary name and hashes it; the file is renamed into place only if the hash equals the
//! input's recorded xxh3. Too much damage is reported before anything is published.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use eckpt_codec::{Code, CodecError, Decoder, DecoderCache};
use serde::Serialize;
use xxhash_rust::xxh3::Xxh3;

use crate::batch::{split_buffers, split_ranges, stripes_per_batch};
use crate::error::ShardsError;
use crate::shard_set::{BlockBatch, ShardSet};
use eckpt_durable::{self as durable, temp_path};

/// What `eckpt decode --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeSummary {
    /// File written.
    pub out: String,
    /// Bytes written (the original input length).
    pub output_bytes: u64,
    /// Stripes in the set.
    pub stripes: u64,
    /// Stripes where at least one data block had to be rebuilt.
    pub stripes_rebuilt: u64,
    /// Data blocks rebuilt from parity.
    pub blocks_rebuilt: u64,
    /// Wall time.
    pub seconds: f64,
    /// Output bytes per second / 1e9.
    pub gbps: f64,
}

/// Decodes the shard directory `dir` into `out`.
pub fn decode_dir(
    dir: &Path,
    out: &Path,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<DecodeSummary, ShardsError> {
    let started = Instant::now();
    let set = ShardSet::open(dir)?;
    let manifest = &set.manifest;
    let (k, m) = (manifest.k, manifest.m);
    let missing = set.missing_shards();
    if missing.len() > m {
        return Err(ShardsError::MissingShards {
            dir: dir.to_path_buf(),
            files: missing.iter().map(|&i| manifest.shards[i].file.clone()).collect(),
            m,
        });
    }
    let code = Code::new(manifest.code_kind(), k, m)?;
    let temp = temp_path(out);
    let file = File::create(&temp).map_err(ShardsError::io("create", &temp))?;
    let result = rebuild_into(&set, &code, file, &temp, threads, progress);
    let (stripes_rebuilt, blocks_rebuilt) = match result {
        Ok(counts) => counts,
        Err(e) => {
            drop(fs::remove_file(&temp));
            return Err(e);
        }
    };
    durable::publish(&temp, out).map_err(ShardsError::io("write", out))?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(DecodeSummary {
        out: out.display().to_string(),
        output_bytes: manifest.input_len,
        stripes: manifest.stripes,
        stripes_rebuilt,
        blocks_rebuilt,
        seconds,
        gbps: manifest.input_len as f64 / seconds / 1e9,
    })
}

/// Streams every batch through rebuild and into `file` (named `path`); returns (stripes,
/// blocks) rebuilt.
fn rebuild_into(
    set: &ShardSet,
    code: &Code,
    file: File,
    path: &Path,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(u64, u64), ShardsError> {
    let manifest = &set.manifest;
    let (k, block) = (manifest.k, manifest.block_size as usize);
    let per_batch = stripes_per_batch(k, manifest.block_size) as usize;
    let (free_tx, free_rx) = sync_channel::<BlockBatch>(2);
    for _ in 0..2 {
        free_tx.send(set.new_batch(per_batch)).expect("the pool has room");
    }
    let (full_tx, full_rx) = sync_channel::<Result<BlockBatch, ShardsError>>(1);
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut hasher = Xxh3::new();
    let mut decoders = DecoderCache::default();
    let (mut stripes_rebuilt, mut blocks_rebuilt, mut written) = (0u64, 0u64, 0u64);

    std::thread::scope(|scope| {
        let reader = scope.spawn(move || {
            let mut first = 0u64;
            for mut batch in free_rx {
                if first >= manifest.stripes {
                    break;
                }
                let stripes = per_batch.min((manifest.stripes - first) as usize);
                set.reset_batch(&mut batch, first, stripes);
                let read = read_batch(set, &mut batch);
                let failed = read.is_err();
                if full_tx.send(read.map(|_| batch)).is_err() || failed {
                    break;
                }
                first += stripes as u64;
            }
        });
        // Rebuilds and writes one batch, handing its buffers back for recycling.
        let mut write_batch = |batch: Result<BlockBatch, ShardsError>| -> Result<BlockBatch, ShardsError> {
            let mut batch = batch?;
            let plan = plan_rebuild(set, code, &batch, &mut decoders)?;
            stripes_rebuilt += plan.iter().filter(|p| p.is_some()).count() as u64;
            blocks_rebuilt += plan
                .iter()
                .flatten()
                .map(|d| d.erased().iter().filter(|&&e| e < k).count() as u64)
                .sum::<u64>();
            rebuild_batch(&mut batch, &plan, block, threads)?;
            for s in 0..batch.stripes {
                for shard in &batch.blocks[..k] {
                    let left = manifest.input_len - written;
                    let take = (block as u64).min(left) as usize;
                    let bytes = &shard[s * block..s * block + take];
                    out.write_all(bytes).map_err(ShardsError::io("write", path))?;
                    hasher.update(bytes);
                    written += take as u64;
                }
            }
            progress(written);
            Ok(batch)
        };
        let mut consumed = Ok(());
        for batch in full_rx {
            match write_batch(batch) {
                Ok(batch) => {
                    // Recycle the buffers; once the reader has finished nobody takes them,
                    // which is fine.
                    let _ = free_tx.send(batch);
                }
                Err(e) => {
                    consumed = Err(e);
                    break;
                }
            }
        }
        // Leaving the loop dropped the receiver; without the sender too, a reader waiting on
        // either channel ends, so it can be joined.
        drop(free_tx);
        reader.join().map_err(|p| ShardsError::panicked("reader", p))?;
        consumed
    })?;
    out.flush().map_err(ShardsError::io("write", path))?;
    if written != manifest.input_len {
        return Err(ShardsError::Internal(format!(
            "shard set ended after {written} of {} bytes",
            manifest.input_len
        )));
    }
    let digest = format!("{:016x}", hasher.digest());
    if digest != manifest.input_xxh3 {
        return Err(ShardsError::OutputMismatch {
            decoded: digest,
            expected: manifest.input_xxh3.clone(),
        });
    }
    Ok((stripes_rebuilt, blocks_rebuilt))
}

/// Reads the data shards, and the parity shards too if any data block is damaged.
fn read_batch(set: &ShardSet, batch: &mut BlockBatch) -> Result<(), ShardsError> {
    let (k, n) = (set.manifest.k, set.manifest.k + set.manifest.m);
    for shard in 0..k {
        set.read_shard(batch, shard)?;
    }
    let data_damaged = (0..k).any(|i| batch.damage[i].iter().any(|d| d.is_some()));
    if data_damaged {
        for shard in k..n {
            set.read_shard(batch, shard)?;
        }
    }
    Ok(())
}

/// For each stripe, the decoder that rebuilds it, or `None` if its data blocks are intact.
/// Fails, naming the damage, when a stripe has more than `m` damaged blocks.
fn plan_rebuild<'a>(
    set: &ShardSet,
    code: &Code,
    batch: &BlockBatch,
    decoders: &'a mut DecoderCache,
) -> Result<Vec<Option<&'a Decoder>>, ShardsError> {
    let k = code.k();
    let mut patterns = Vec::with_capacity(batch.stripes);
    for s in 0..batch.stripes {
        let damaged = batch.damaged_in_stripe(s);
        if !damaged.iter().any(|&i| i < k) {
            patterns.push(None);
            continue;
        }
        if let Err(e) = decoders.get(code, &damaged) {
            return Err(stripe_lost(set, batch, s, &damaged, e));
        }
        patterns.push(Some(damaged));
    }
    let decoders = &*decoders;
    Ok(patterns
        .into_iter()
        .map(|p| p.and_then(|key| decoders.cached(&key)))
        .collect())
}

/// The error naming local stripe `s`, its damaged shards and why the codec cannot rebuild it.
fn stripe_lost(
    set: &ShardSet,
    batch: &BlockBatch,
    s: usize,
    damaged: &[usize],
    why: CodecError,
) -> ShardsError {
    let manifest = &set.manifest;
    let stripe = batch.first_stripe + s as u64;
    let stripe_bytes = manifest.k as u64 * manifest.block_size;
    ShardsError::DamagedStripe {
        dir: set.dir().to_path_buf(),
        stripe,
        input_bytes: stripe * stripe_bytes..((stripe + 1) * stripe_bytes).min(manifest.input_len),
        damaged: damaged
            .iter()
            .map(|&i| {
                (
                    manifest.shards[i].file.clone(),
                    batch.damage[i][s].expect("damaged"),
                )
            })
            .collect(),
        source: why,
    }
}

/// Rebuilds damaged blocks in place, stripes split over threads.
fn rebuild_batch(
    batch: &mut BlockBatch,
    plan: &[Option<&Decoder>],
    block: usize,
    threads: usize,
) -> Result<(), ShardsError> {
    if plan.iter().all(|p| p.is_none()) {
        return Ok(());
    }
    let ranges = split_ranges(batch.stripes, threads);
    let parts = split_buffers(&mut batch.blocks, &ranges, block);
    std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .iter()
            .zip(parts)
            .map(|(range, mut shards)| {
                let plan = &plan[range.clone()];
                scope.spawn(move || {
                    for (local, decoder) in plan.iter().enumerate() {
                        let Some(decoder) = decoder else { continue };
                        let mut inputs: Vec<&[u8]> = Vec::with_capacity(decoder.survivors().len());
                        let mut outputs: Vec<&mut [u8]> = Vec::with_capacity(decoder.erased().len());
                        for (i, shard) in shards.iter_mut().enumerate() {
                            let bytes = &mut shard[local * block..(local + 1) * block];
                            if decoder.erased().contains(&i) {
                                outputs.push(bytes);
                            } else if decoder.survivors().contains(&i) {
                                inputs.push(bytes);
                            }
                        }
                        decoder.decode(&inputs, &mut outputs)?;
                    }
                    Ok::<_, CodecError>(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join().map_err(|p| ShardsError::panicked("rebuild", p))??;
            Ok(())
        })
    })
}
