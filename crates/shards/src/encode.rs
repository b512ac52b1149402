//! `eckpt encode`: stream a file into `k + m` shard files and a manifest.
//!
//! Three stages overlap: a reader thread fills whole-stripe batches (and hashes the input),
//! the calling thread encodes them and checksums every block on `threads` threads, and a
//! writer thread appends the blocks to the shard files. Buffers circulate between the stages,
//! so memory is a few batches whatever the input size.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::time::Instant;

use eckpt_codec::{Code, CodeKind, CodecError};
use serde::Serialize;
use xxhash_rust::xxh3::Xxh3;

use crate::batch::{split_buffers, split_ranges, stripes_per_batch};
use crate::error::ShardsError;
use crate::manifest::{
    self, push_crc_hex, shard_file_name, Manifest, ShardEntry, MANIFEST_FILE, MAX_BLOCK_SIZE,
};
use eckpt_durable::{self as durable, temp_path};

/// Batches in flight between the three stages.
const BATCHES_IN_FLIGHT: usize = 3;

/// How to encode.
#[derive(Debug, Clone)]
pub struct EncodeOptions {
    /// Generator matrix family.
    pub kind: CodeKind,
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Bytes per shard per stripe.
    pub block_size: u64,
    /// Threads for encoding and checksumming.
    pub threads: usize,
}

/// What `eckpt encode --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct EncodeSummary {
    /// Directory written.
    pub out_dir: String,
    /// Code family name.
    pub code: String,
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Bytes per shard per stripe.
    pub block_size: u64,
    /// Input length.
    pub input_bytes: u64,
    /// Stripes written.
    pub stripes: u64,
    /// Length of every shard file.
    pub shard_bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Input bytes per second / 1e9.
    pub gbps: f64,
    /// GF kernel used.
    pub kernel: &'static str,
}

/// One batch of whole stripes moving through the stages.
struct Batch {
    /// `stripes · k · block_size` input bytes, zero-padded past `input_bytes`.
    data: Vec<u8>,
    /// `m` buffers of `stripes · block_size` parity bytes.
    parity: Vec<Vec<u8>>,
    /// crc32c per shard per stripe of the batch.
    crcs: Vec<Vec<u32>>,
    input_bytes: usize,
    stripes: usize,
}

/// Encodes `input` into `out_dir` (created if needed; refused if it already holds a manifest).
/// `progress` is told the input bytes done so far.
pub fn encode_file(
    input: &Path,
    out_dir: &Path,
    opts: &EncodeOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<EncodeSummary, ShardsError> {
    let code = Code::new(opts.kind, opts.k, opts.m).map_err(|e| ShardsError::Invalid(e.to_string()))?;
    if opts.block_size == 0 || opts.block_size > MAX_BLOCK_SIZE {
        return Err(ShardsError::Invalid(format!(
            "block size must be between 1 and {MAX_BLOCK_SIZE} bytes"
        )));
    }
    let reader = File::open(input).map_err(ShardsError::io("open", input))?;
    // A device like /dev/zero never ends; a pipe's length is unknown until it does. Only
    // regular files have the fixed length a manifest records.
    if !reader
        .metadata()
        .map_err(ShardsError::io("stat", input))?
        .is_file()
    {
        return Err(ShardsError::Invalid(format!(
            "{}: not a regular file",
            input.display()
        )));
    }
    fs::create_dir_all(out_dir).map_err(ShardsError::io("create", out_dir))?;
    if out_dir.join(MANIFEST_FILE).exists() {
        return Err(ShardsError::Invalid(format!(
            "{} already holds an encoded file; choose another --out or remove it first",
            out_dir.display()
        )));
    }
    let started = Instant::now();
    let (k, m, block) = (opts.k, opts.m, opts.block_size as usize);
    let temps: Vec<_> = (0..k + m)
        .map(|i| temp_path(&out_dir.join(shard_file_name(i))))
        .collect();
    let files = temps
        .iter()
        .map(|p| File::create(p).map_err(ShardsError::io("create", p)))
        .collect::<Result<Vec<_>, _>>()?;

    let per_batch = stripes_per_batch(k, opts.block_size) as usize;
    let (free_tx, free_rx) = sync_channel::<Batch>(BATCHES_IN_FLIGHT);
    for _ in 0..BATCHES_IN_FLIGHT {
        free_tx
            .send(Batch {
                data: vec![0; per_batch * k * block],
                parity: vec![vec![0; per_batch * block]; m],
                crcs: vec![Vec::with_capacity(per_batch); k + m],
                input_bytes: 0,
                stripes: 0,
            })
            .expect("the pool has room for every batch");
    }
    let (full_tx, full_rx) = sync_channel::<Batch>(1);
    let (coded_tx, coded_rx) = sync_channel::<Batch>(1);

    let outcome = std::thread::scope(|scope| {
        let reader = scope.spawn(move || read_stage(reader, input, free_rx, full_tx, k * block));
        let writer = scope.spawn(|| write_stage(files, &temps, coded_rx, free_tx, k, block, progress));
        let mut encoded = Ok(());
        for mut batch in full_rx {
            encoded = encode_batch(&code, &mut batch, block, opts.threads);
            // A failed send means the writer failed; its error is reported below. Leaving the
            // loop drops the receiver, which stops the reader.
            if encoded.is_err() || coded_tx.send(batch).is_err() {
                break;
            }
        }
        drop(coded_tx);
        let written = writer.join().map_err(|p| ShardsError::panicked("writer", p));
        let read = reader.join().map_err(|p| ShardsError::panicked("reader", p));
        let (input_len, hash) = read??;
        encoded?;
        let crcs = written??;
        Ok((input_len, hash, crcs))
    });
    let (input_len, hash, crcs) = match outcome {
        Ok(v) => v,
        Err(e) => {
            temps.iter().for_each(|t| drop(fs::remove_file(t)));
            return Err(e);
        }
    };

    for (i, temp) in temps.iter().enumerate() {
        durable::publish(temp, &out_dir.join(shard_file_name(i))).map_err(ShardsError::io("write", temp))?;
    }
    let stripes = manifest::stripe_count(input_len, k, opts.block_size);
    let manifest = Manifest {
        format: manifest::FORMAT.into(),
        version: manifest::FORMAT_VERSION,
        code: opts.kind.name().into(),
        k,
        m,
        block_size: opts.block_size,
        input_len,
        stripes,
        input_xxh3: format!("{hash:016x}"),
        shards: crcs
            .iter()
            .enumerate()
            .map(|(i, list)| {
                let mut hex = String::with_capacity(list.len() * 8);
                list.iter().for_each(|&c| push_crc_hex(&mut hex, c));
                ShardEntry {
                    file: shard_file_name(i),
                    crc32c: hex,
                }
            })
            .collect(),
    };
    let manifest_path = out_dir.join(MANIFEST_FILE);
    durable::write_atomic(&manifest_path, &manifest.to_json())
        .map_err(ShardsError::io("write", &manifest_path))?;
    let seconds = started.elapsed().as_secs_f64();
    Ok(EncodeSummary {
        out_dir: out_dir.display().to_string(),
        code: opts.kind.name().into(),
        k,
        m,
        block_size: opts.block_size,
        input_bytes: input_len,
        stripes,
        shard_bytes: manifest.shard_len(),
        seconds,
        gbps: input_len as f64 / seconds / 1e9,
        kernel: code.parity_map().kernel().name(),
    })
}

/// Reads whole-stripe batches; returns the input length and its xxh3.
fn read_stage(
    mut input: File,
    path: &Path,
    free: Receiver<Batch>,
    full: SyncSender<Batch>,
    stripe_bytes: usize,
) -> Result<(u64, u64), ShardsError> {
    let mut hasher = Xxh3::new();
    let mut total = 0u64;
    for mut batch in free {
        let n = read_full(&mut input, &mut batch.data).map_err(ShardsError::io("read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&batch.data[..n]);
        total += n as u64;
        batch.stripes = n.div_ceil(stripe_bytes);
        batch.input_bytes = n;
        batch.data[n..batch.stripes * stripe_bytes].fill(0);
        let short = n < batch.data.len();
        if full.send(batch).is_err() || short {
            break;
        }
    }
    Ok((total, hasher.digest()))
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
pub(crate) fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Computes the batch's parity and the crc32c of every block, stripes split over threads.
fn encode_batch(code: &Code, batch: &mut Batch, block: usize, threads: usize) -> Result<(), ShardsError> {
    let (k, m) = (code.k(), code.m());
    let ranges = split_ranges(batch.stripes, threads);
    let data = &batch.data;
    let parts = split_buffers(&mut batch.parity, &ranges, block);
    let crcs_per_range = std::thread::scope(|scope| {
        let handles: Vec<_> = ranges
            .iter()
            .zip(parts)
            .map(|(range, mut parity)| {
                let range = range.clone();
                scope.spawn(move || {
                    let mut crcs = vec![Vec::with_capacity(range.len()); k + m];
                    for (local, s) in range.enumerate() {
                        let stripe = &data[s * k * block..(s + 1) * k * block];
                        let shards: Vec<&[u8]> = stripe.chunks(block).collect();
                        let mut outs: Vec<&mut [u8]> = parity
                            .iter_mut()
                            .map(|p| &mut p[local * block..(local + 1) * block])
                            .collect();
                        code.encode(&shards, &mut outs)?;
                        for (i, shard) in shards
                            .iter()
                            .copied()
                            .chain(outs.iter().map(|o| &**o))
                            .enumerate()
                        {
                            crcs[i].push(crc32c::crc32c(shard));
                        }
                    }
                    Ok::<_, CodecError>(crcs)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| Ok(h.join().map_err(|p| ShardsError::panicked("encoder", p))??))
            .collect::<Result<Vec<Vec<Vec<u32>>>, ShardsError>>()
    })?;
    for list in batch.crcs.iter_mut() {
        list.clear();
    }
    for range_crcs in crcs_per_range {
        for (list, part) in batch.crcs.iter_mut().zip(range_crcs) {
            list.extend(part);
        }
    }
    Ok(())
}

/// Appends each batch's blocks to the shard files (written under the names `paths`);
/// returns every block's crc32c per shard.
fn write_stage(
    files: Vec<File>,
    paths: &[PathBuf],
    coded: Receiver<Batch>,
    free: SyncSender<Batch>,
    k: usize,
    block: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<Vec<u32>>, ShardsError> {
    let mut writers: Vec<_> = files
        .into_iter()
        .map(|f| std::io::BufWriter::with_capacity(1 << 20, f))
        .collect();
    let mut crcs: Vec<Vec<u32>> = vec![Vec::new(); writers.len()];
    let mut done = 0u64;
    for batch in coded {
        for s in 0..batch.stripes {
            for (i, w) in writers.iter_mut().take(k).enumerate() {
                let at = (s * k + i) * block;
                w.write_all(&batch.data[at..at + block])
                    .map_err(ShardsError::io("write", &paths[i]))?;
            }
        }
        for ((w, p), path) in writers[k..].iter_mut().zip(&batch.parity).zip(&paths[k..]) {
            w.write_all(&p[..batch.stripes * block])
                .map_err(ShardsError::io("write", path))?;
        }
        for (all, new) in crcs.iter_mut().zip(&batch.crcs) {
            all.extend_from_slice(new);
        }
        done += batch.input_bytes as u64;
        progress(done);
        // Recycle the buffers; once the reader has finished nobody takes them, which is fine.
        let _ = free.send(batch);
    }
    for (w, path) in writers.iter_mut().zip(paths) {
        w.flush().map_err(ShardsError::io("write", path))?;
    }
    Ok(crcs)
}
