//! `eckpt bench restore`: how fast a restart reads its images out of the node store — a full
//! epoch and its deltas, every block's checksum verified, by a pool of threads — next to,
//! with as many threads in the same run, reading the full epoch's data file with `pread` (the
//! page cache's copy, nothing checked) and copying the same bytes in memory (memcpy).
//!
//! A GPU restart is this read plus the copy over the bus, which overlaps it piece by piece
//! (`scripts/gpu-check.sh` measures that part): the read must keep up with the bus.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use anyhow::{bail, ensure, Context, Result};
use eckpt_store::{Store, StoreError, DEFAULT_MAX_READ_THREADS};
use serde::Serialize;

use super::stats::{cpu_model, median, timed};
use super::workload::{changed_pages, fill, Pattern};
use crate::output::{byte_progress, print_json};
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Bytes of state, split evenly among the items.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    size: u64,
    /// Items (regions, tensors) the state is made of.
    #[arg(long, default_value_t = 8)]
    items: usize,
    /// Block size of the stored images (the GPU fingerprint block by default).
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    block_size: u64,
    /// Delta epochs written after the full one; the restart reads the last.
    #[arg(long, default_value_t = 5)]
    deltas: u64,
    /// Percent of the blocks each delta rewrites.
    #[arg(long, default_value_t = 1.0)]
    changed_percent: f64,
    /// Thread counts to measure, comma-separated (default: 1, then doubling up to the
    /// store's default).
    #[arg(long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// Repetitions; medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Directory to build the store in, a fresh one inside it (default: /dev/shm, where
    /// node stores live by default, else the temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    cores: usize,
    bytes: u64,
    items: usize,
    block_size: u64,
    deltas: u64,
    changed_percent: f64,
    dir: PathBuf,
    rows: Vec<Row>,
}

/// One thread count's medians, in gigabytes (10⁹ bytes) per second.
#[derive(Serialize)]
struct Row {
    threads: usize,
    /// The store's restore read: the chain opened, every item read and verified.
    restore_gbytes_per_s: f64,
    /// `pread` of the full epoch's data file into the same buffers, nothing checked.
    pread_gbytes_per_s: f64,
    /// memcpy of the same bytes between two buffers in memory.
    memcpy_gbytes_per_s: f64,
    /// restore / memcpy.
    restore_vs_memcpy: f64,
}

/// Bytes each thread copies at a time in the references, the store's piece size.
const PIECE: usize = 16 << 20;

pub fn run(args: Args) -> Result<i32> {
    ensure!(args.items > 0, "--items must be at least 1");
    ensure!(
        args.size >= args.items as u64,
        "--size must give each item at least a byte"
    );
    ensure!(
        (0.0..=100.0).contains(&args.changed_percent),
        "--changed-percent must be between 0 and 100"
    );
    let block = u32::try_from(args.block_size).context("--block-size")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = if args.threads.is_empty() {
        let most = cores.min(DEFAULT_MAX_READ_THREADS);
        let mut t: Vec<usize> = std::iter::successors(Some(1), |t| Some(t * 2))
            .take_while(|&t| t < most)
            .collect();
        t.push(most);
        t
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        bail!("--threads: a thread count must be at least 1");
    }
    let base = args.dir.clone().unwrap_or_else(|| {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        }
    });
    let dir = tempfile::Builder::new()
        .prefix("eckpt-bench-restore-")
        .tempdir_in(&base)
        .with_context(|| format!("a directory in {}", base.display()))?;

    let item_len = usize::try_from(args.size / args.items as u64)?;
    let names: Vec<String> = (0..args.items).map(|i| format!("gpu/t{i}")).collect();
    let mut images: Vec<Vec<u8>> = (0..args.items).map(|_| vec![0u8; item_len]).collect();
    std::thread::scope(|scope| {
        for (i, image) in images.iter_mut().enumerate() {
            scope.spawn(move || fill(image, i as u64 + 1));
        }
    });
    let store = Store::open(dir.path())?;
    let last = write_epochs(&store, &names, &mut images, block, &args)?;
    let full_data = dir.path().join("rank.0/epoch-1-0/data");
    let full_file = File::open(&full_data).with_context(|| format!("{}", full_data.display()))?;

    // Page in the destination once, so that no measurement pays for first touches.
    let mut buffers: Vec<Vec<u8>> = (0..args.items).map(|_| vec![1u8; item_len]).collect();
    let mut rows = Vec::new();
    for &t in &threads {
        let store = store.clone().with_read_threads(t);
        let (mut restore, mut pread, mut memcpy) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.reps.max(1) {
            restore.push(timed(|| restore_all(&store, last, &names, &mut buffers))?);
            pread.push(timed(|| pread_all(&full_file, &mut buffers, t))?);
            memcpy.push(timed(|| {
                copy_all(&images, &mut buffers, t);
                Ok(())
            })?);
        }
        // The restore's bytes are checked against the model, outside the timing.
        restore_all(&store, last, &names, &mut buffers)?;
        ensure!(
            buffers == images,
            "the restore read differs from the images written"
        );
        let gbps = |s: &[f64]| args.size as f64 / median(s) / 1e9;
        rows.push(Row {
            threads: t,
            restore_gbytes_per_s: gbps(&restore),
            pread_gbytes_per_s: gbps(&pread),
            memcpy_gbytes_per_s: gbps(&memcpy),
            restore_vs_memcpy: gbps(&restore) / gbps(&memcpy),
        });
    }
    let report = Report {
        cpu: cpu_model(),
        cores,
        bytes: item_len as u64 * args.items as u64,
        items: args.items,
        block_size: args.block_size,
        deltas: args.deltas,
        changed_percent: args.changed_percent,
        dir: base,
        rows,
    };
    if args.json {
        print_json(&report);
    } else {
        println!(
            "restore bench: {} MiB in {} items, a full epoch + {} deltas of {}% of the {} KiB blocks, store in {}; {} ({} cores)",
            report.bytes >> 20,
            report.items,
            report.deltas,
            report.changed_percent,
            report.block_size >> 10,
            report.dir.display(),
            report.cpu,
            report.cores
        );
        for r in &report.rows {
            println!(
                "  {:>2} threads: restore {:6.2} GB/s (verified) | pread {:6.2} GB/s | memcpy {:6.2} GB/s | restore {:.2}x memcpy",
                r.threads, r.restore_gbytes_per_s, r.pread_gbytes_per_s, r.memcpy_gbytes_per_s, r.restore_vs_memcpy
            );
        }
    }
    Ok(0)
}

/// Writes the full epoch 1 and `deltas` epochs after it, each rewriting `changed_percent` of
/// the blocks of every item (scattered, other ones each epoch), keeping `images` the
/// model of the last; returns the last epoch.
fn write_epochs(
    store: &Store,
    names: &[String],
    images: &mut [Vec<u8>],
    block: u32,
    args: &Args,
) -> Result<u64> {
    let total = images.iter().map(|i| i.len() as u64).sum::<u64>() * (1 + args.deltas);
    let bar = byte_progress(total, "building the store", args.json);
    let mut writer = store.writer(0, 1)?;
    for (name, image) in names.iter().zip(images.iter()) {
        writer.put_full_in_blocks(name, block, image)?;
        bar.inc(image.len() as u64);
    }
    writer.commit()?;
    let bs = block as usize;
    for epoch in 2..=1 + args.deltas {
        let mut writer = store.writer(0, epoch)?;
        for (i, (name, image)) in names.iter().zip(images.iter_mut()).enumerate() {
            let count = image.len().div_ceil(bs);
            let fraction = args.changed_percent / 100.0;
            let changed = changed_pages(Pattern::Mat, count, Some(fraction), epoch * 1000 + i as u64);
            for &b in &changed {
                image[b * bs] = image[b * bs].wrapping_add(epoch as u8 | 1);
            }
            let blocks: Vec<(u64, &[u8])> = changed
                .iter()
                .map(|&b| (b as u64, &image[b * bs..((b + 1) * bs).min(image.len())]))
                .collect();
            writer.put_dirty(name, block, image.len() as u64, &blocks)?;
            bar.inc(image.len() as u64);
        }
        writer.commit()?;
    }
    bar.finish_and_clear();
    Ok(1 + args.deltas)
}

fn restore_all(store: &Store, epoch: u64, names: &[String], buffers: &mut [Vec<u8>]) -> Result<()> {
    let items = names
        .iter()
        .map(String::as_str)
        .zip(buffers.iter_mut().map(|b| &mut b[..]))
        .collect();
    store.read_items_into(0, epoch, items, &mut |_, _| Ok::<(), StoreError>(()))?;
    Ok(())
}

/// Reads the data file's first bytes (the full image, items back to back) into the buffers,
/// `threads` threads taking pieces in turn.
fn pread_all(file: &File, buffers: &mut [Vec<u8>], threads: usize) -> Result<()> {
    let mut at = 0u64;
    let mut pieces = Vec::new();
    for buffer in buffers.iter_mut() {
        for piece in buffer.chunks_mut(PIECE) {
            let len = piece.len() as u64;
            pieces.push((at, piece));
            at += len;
        }
    }
    let results = in_pool(pieces, threads, |(offset, piece)| {
        file.read_exact_at(piece, offset)
    });
    results.into_iter().collect::<std::io::Result<()>>()?;
    Ok(())
}

fn copy_all(sources: &[Vec<u8>], buffers: &mut [Vec<u8>], threads: usize) {
    let pieces: Vec<(&[u8], &mut [u8])> = sources
        .iter()
        .zip(buffers.iter_mut())
        .flat_map(|(s, d)| s.chunks(PIECE).zip(d.chunks_mut(PIECE)))
        .collect();
    in_pool(pieces, threads, |(s, d)| d.copy_from_slice(s));
}

/// Runs `work` on every piece with `threads` threads, each taking the next piece in turn, as
/// the store's reader does; returns the results.
fn in_pool<P: Send, R: Send>(pieces: Vec<P>, threads: usize, work: impl Fn(P) -> R + Sync) -> Vec<R> {
    let queue = std::sync::Mutex::new(pieces.into_iter());
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut results = Vec::new();
                    loop {
                        let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                        let Some(piece) = next else { break };
                        results.push(work(piece));
                    }
                    results
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
}
