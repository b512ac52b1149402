//! `eckpt bench regions`: what the rank library's bookkeeping costs a rank that protects many
//! small regions. For each count N, through `eckpt::Checkpointer` in standalone mode with a
//! store on tmpfs: protect N regions, checkpoint, write one byte in 1 % of them, checkpoint
//! again; then a fresh checkpointer protects the same N regions (same names) and restarts —
//! what a relaunched rank does — and the restored bytes are checked against what was written.
//! The reference, measured in the same run, is a memcpy of the N regions' bytes: the restart's
//! work with no bookkeeping at all, so what the rows show beyond it is per-region cost.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use eckpt::{Checkpointer, Config};
use serde::Serialize;

use super::cluster::scratch;
use super::stats::{cpu_model, interleaved_samples, median, timed};
use super::workload::{changed_pages, fill, Pattern};
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Region counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 10000, 100000])]
    counts: Vec<usize>,
    /// Bytes of each region.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    region_size: u64,
    /// Repetitions per count, each with a store of its own; medians are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Report {
    cpu: String,
    cores: usize,
    region_size: u64,
    reps: usize,
    rows: Vec<Row>,
}

/// One region count's medians over the repetitions (times in seconds).
#[derive(Serialize)]
struct Row {
    regions: usize,
    /// Bytes of all the regions.
    bytes: u64,
    /// Regions written to (one byte each) between the two checkpoints.
    changed_regions: usize,
    /// `protect()` of every region, on a fresh checkpointer.
    protect_seconds: f64,
    /// The first `checkpoint()`: every region stored in full.
    first_checkpoint_seconds: f64,
    /// The second `checkpoint()`: the changed regions only.
    incremental_checkpoint_seconds: f64,
    /// `restart()` of a fresh checkpointer that protected the same regions again.
    restart_seconds: f64,
    /// Its `protect()` of every region plus `restart()`: what a relaunched rank waits for.
    protect_and_restart_seconds: f64,
    /// memcpy of the regions' bytes, warm in the cache (the reference).
    memcpy_seconds: f64,
    /// protect_and_restart / memcpy.
    protect_and_restart_vs_memcpy: f64,
}

/// One repetition's timings of one count, in [`Row`]'s order.
struct Sample {
    protect: f64,
    first_checkpoint: f64,
    incremental_checkpoint: f64,
    reprotect: f64,
    restart: f64,
    memcpy: f64,
}

pub fn run(args: Args) -> Result<i32> {
    ensure!(
        !args.counts.is_empty() && !args.counts.contains(&0),
        "--counts: a region count must be at least 1"
    );
    ensure!(args.region_size > 0, "--region-size must be at least 1 byte");
    let size = usize::try_from(args.region_size).context("--region-size")?;
    let scratch = scratch(None)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if !args.json {
        println!(
            "regions bench: {size}-byte regions, store in {}; {} ({cores} cores); medians of {} reps, seconds unless said",
            scratch.path().display(),
            cpu_model(),
            args.reps.max(1)
        );
        println!(
            "  {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>8}",
            "regions", "protect", "ckpt 1", "ckpt 2", "restart", "prot+rst", "memcpy us", "ratio"
        );
    }
    let mut rows = Vec::new();
    for &count in &args.counts {
        let changed = changed_regions(count);
        let mut samples = Vec::new();
        for rep in 0..args.reps.max(1) {
            let store = scratch.path().join(format!("store-{count}-{rep}"));
            samples.push(measure(&store, count, size, &changed, rep as u64)?);
            std::fs::remove_dir_all(&store).with_context(|| format!("removing {}", store.display()))?;
        }
        let med = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
        let protect_and_restart = med(|s| s.reprotect + s.restart);
        let memcpy = med(|s| s.memcpy);
        let row = Row {
            regions: count,
            bytes: (count * size) as u64,
            changed_regions: changed.len(),
            protect_seconds: med(|s| s.protect),
            first_checkpoint_seconds: med(|s| s.first_checkpoint),
            incremental_checkpoint_seconds: med(|s| s.incremental_checkpoint),
            restart_seconds: med(|s| s.restart),
            protect_and_restart_seconds: protect_and_restart,
            memcpy_seconds: memcpy,
            protect_and_restart_vs_memcpy: protect_and_restart / memcpy,
        };
        if !args.json {
            println!(
                "  {:>8} {:>9.4} {:>9.4} {:>9.4} {:>9.4} {:>10.4} {:>9.2} {:>7.0}x",
                row.regions,
                row.protect_seconds,
                row.first_checkpoint_seconds,
                row.incremental_checkpoint_seconds,
                row.restart_seconds,
                row.protect_and_restart_seconds,
                row.memcpy_seconds * 1e6,
                row.protect_and_restart_vs_memcpy
            );
        }
        rows.push(row);
    }
    if args.json {
        print_json(&Report {
            cpu: cpu_model(),
            cores,
            region_size: args.region_size,
            reps: args.reps.max(1),
            rows,
        });
    }
    Ok(0)
}

/// The regions written between the two checkpoints: 1 % of them (at least one), scattered.
fn changed_regions(count: usize) -> Vec<usize> {
    changed_pages(Pattern::Mat, count, Some(0.01), count as u64)
}

/// One repetition with a store of its own at `store`; fails when the restart does not give
/// back exactly the bytes of the second checkpoint.
fn measure(store: &Path, count: usize, size: usize, changed: &[usize], seed: u64) -> Result<Sample> {
    let config = Config {
        dir: Some(store.to_path_buf()),
        ..Config::default()
    };
    // Every region is a slice of one allocation, back to back: adjacent regions, which the
    // rank library must accept.
    let mut memory = vec![0u8; count * size];
    fill(&mut memory, seed);

    let mut ck = Checkpointer::new(config.clone())?;
    let protect = timed(|| protect_all(&mut ck, &mut memory, size))?;
    let first_checkpoint = timed(|| checkpoint(&mut ck, 1))?;
    for &r in changed {
        memory[r * size] = memory[r * size].wrapping_add(1);
    }
    let incremental_checkpoint = timed(|| checkpoint(&mut ck, 2))?;
    drop(ck);

    let written = memory.clone();
    fill(&mut memory, !seed);
    let mut ck = Checkpointer::new(config)?;
    let reprotect = timed(|| protect_all(&mut ck, &mut memory, size))?;
    let restart = timed(|| match ck.restart()? {
        Some(2) => Ok(()),
        other => bail!("restart found epoch {other:?}, expected 2"),
    })?;
    drop(ck);
    if let Some(r) = (0..count).find(|&r| memory[r * size..][..size] != written[r * size..][..size]) {
        bail!("restart restored wrong bytes: region r{r} of {count} differs from what the checkpoint saved");
    }

    // A copy of a few kilobytes takes well under a microsecond: timed over repeated calls.
    let memcpy = interleaved_samples(
        1,
        0.01,
        &mut [&mut || memory.copy_from_slice(std::hint::black_box(&written))],
    )[0][0];
    Ok(Sample {
        protect,
        first_checkpoint,
        incremental_checkpoint,
        reprotect,
        restart,
        memcpy,
    })
}

/// Protects `memory` as regions `r0`, `r1`, … of `size` bytes each.
fn protect_all(ck: &mut Checkpointer, memory: &mut [u8], size: usize) -> Result<()> {
    for (r, region) in memory.chunks_exact_mut(size).enumerate() {
        // SAFETY: `memory` outlives the checkpointer, which the caller drops before it moves
        // or frees `memory`.
        unsafe { ck.protect(&format!("r{r}"), region.as_mut_ptr(), size)? };
    }
    Ok(())
}

fn checkpoint(ck: &mut Checkpointer, expected: u64) -> Result<()> {
    let epoch = ck.checkpoint()?;
    ensure!(
        epoch == expected,
        "checkpoint wrote epoch {epoch}, expected {expected}"
    );
    Ok(())
}
