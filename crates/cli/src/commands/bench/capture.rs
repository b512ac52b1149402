//! `eckpt bench capture`: what a rank pays at checkpoint to find and copy what changed, per
//! tracking backend (kernel write tracking, hashing), next to dumping the image and running
//! `xdelta3` against the previous dump, and to [`delta_files`] on the same dumps, all measured
//! in one run on the same data; plus the cost of write tracking to the application between
//! checkpoints.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use eckpt_capture::{
    delta_files, encode_blocks, page_size, uffd_available, AlignedBuf, Backend, TrackMode, Tracker,
};
use serde::Serialize;

use super::workload::{changed_pages, fill, mutate, Pattern};
use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Image size.
    #[arg(long, default_value = "512MiB", value_parser = parse_size)]
    size: u64,
    /// Change pattern: mat (0.1% of pages, scattered) or lu (60% of pages, sweeps).
    #[arg(long, default_value = "mat")]
    pattern: Pattern,
    /// Block size of the hash backend.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    hash_block_size: u64,
    /// Directory for the image files the file-based deltas read (default: the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Skip the xdelta3 reference (minutes on a 512 MiB LU image).
    #[arg(long)]
    no_xdelta3: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<i32> {
    let options = Options {
        size: usize::try_from(args.size)?,
        pattern: args.pattern,
        hash_block_size: usize::try_from(args.hash_block_size)?,
        dir: args.dir,
        run_xdelta3: !args.no_xdelta3,
        ..Options::default()
    };
    let report = measure(&options)?;
    if args.json {
        print_json(&report);
    } else {
        println!(
            "capture bench: {} MiB, pattern {}, {} pages changed ({} bytes)",
            report.size >> 20,
            report.pattern,
            report.pages_changed,
            report.bytes_changed
        );
        for b in &report.backends {
            let ratio = b
                .speedup_vs_xdelta3
                .map(|r| format!(", {r:.0}x faster than xdelta3"))
                .unwrap_or_default();
            println!(
                "  {:<5} find {:.2} ms + copy {:.2} ms = {:.2} ms, delta {} bytes{ratio}; clean scan {:.1} ms/GiB",
                serde_json::to_value(b.backend)?.as_str().unwrap_or("?"),
                b.collect_seconds * 1e3,
                b.copy_seconds * 1e3,
                b.seconds * 1e3,
                b.delta_bytes,
                b.clean_collect_ms_per_gib
            );
        }
        if let Some(x) = &report.xdelta3 {
            println!("  xdelta3 {:.2} s, delta {} bytes", x.seconds, x.delta_bytes);
        }
        println!(
            "  eckpt delta (files) {:.3} s, delta {} bytes",
            report.delta_files.seconds, report.delta_files.delta_bytes
        );
        if let Some(cost) = &report.tracking_cost {
            println!(
                "  write tracking: {:.2} us per first write to a page",
                cost.us_overhead_per_first_write
            );
        }
        report.notes.iter().for_each(|n| println!("  note: {n}"));
    }
    Ok(0)
}

/// What to measure.
#[derive(Debug, Clone)]
struct Options {
    /// Image size in bytes (rounded up to whole pages).
    size: usize,
    /// Change pattern.
    pattern: Pattern,
    /// Block size of the hash backend.
    hash_block_size: usize,
    /// Directory for the image files (a fresh temp dir inside it is used and removed);
    /// `None` = the system temp dir.
    dir: Option<PathBuf>,
    /// Seed of the deterministic data and change positions.
    seed: u64,
    /// Run the xdelta3 reference. It is by far the slowest part (minutes for a 512 MiB LU
    /// image, as it searches for byte matches in changed data), so a quick run may skip it.
    run_xdelta3: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            size: 512 << 20,
            pattern: Pattern::Mat,
            hash_block_size: 64 << 10,
            dir: None,
            seed: 42,
            run_xdelta3: true,
        }
    }
}

/// One tracking backend's checkpoint cost.
#[derive(Debug, Clone, Serialize)]
struct BackendResult {
    /// Which backend.
    backend: Backend,
    /// Its block size.
    block_size: u64,
    /// Blocks it reported dirty.
    dirty_blocks: u64,
    /// First epoch: collect (all blocks) + copy of the full image into the staging buffer.
    full_seconds: f64,
    /// Time of `collect_dirty`.
    collect_seconds: f64,
    /// Time to copy the dirty blocks into an in-memory delta (staging buffer reused from the
    /// first epoch).
    copy_seconds: f64,
    /// collect + copy: the rank's pause.
    seconds: f64,
    /// Size of the in-memory delta.
    delta_bytes: u64,
    /// Time of a `collect_dirty` with nothing written, per GiB of region (the fixed cost).
    clean_collect_ms_per_gib: f64,
    /// xdelta3 seconds / this backend's seconds.
    speedup_vs_xdelta3: Option<f64>,
}

/// A file-based delta (xdelta3 or [`delta_files`]) on the dumped images.
#[derive(Debug, Clone, Serialize)]
struct FileDeltaResult {
    /// Wall time.
    seconds: f64,
    /// Part of `seconds` spent in fsync (`delta_files` only; xdelta3 does not fsync).
    fsync_seconds: f64,
    /// Size of the delta file.
    delta_bytes: u64,
}

/// Cost of write tracking to the application between checkpoints.
#[derive(Debug, Clone, Serialize)]
struct TrackingCost {
    /// Pages touched in each measurement.
    pages: u64,
    /// µs per first write to an already-populated, write-protected page.
    us_per_protected_write: f64,
    /// µs per write to a populated, unprotected page (the baseline).
    us_per_plain_write: f64,
    /// The difference: what each first write after a checkpoint costs.
    us_overhead_per_first_write: f64,
}

/// Everything `eckpt bench capture --json` prints.
#[derive(Debug, Clone, Serialize)]
struct Report {
    /// Image size in bytes.
    size: u64,
    /// Change pattern.
    pattern: Pattern,
    /// Pages changed by the pattern.
    pages_changed: u64,
    /// Bytes of those pages.
    bytes_changed: u64,
    /// Per-backend results (uffd only when the kernel supports it).
    backends: Vec<BackendResult>,
    /// Why a backend or measurement is missing, if one is.
    notes: Vec<String>,
    /// `xdelta3 -e -f -s base new delta` on the dumped images.
    xdelta3: Option<FileDeltaResult>,
    /// [`delta_files`] on the same images (4 KiB blocks, includes fsync).
    delta_files: FileDeltaResult,
    /// xdelta3 seconds / delta_files seconds.
    delta_files_speedup_vs_xdelta3: Option<f64>,
    /// Write-tracking overhead (uffd only).
    tracking_cost: Option<TrackingCost>,
    /// Fixed cost of kernel tracking: `PAGEMAP_SCAN` over a clean region, ms per GiB.
    pagemap_scan_ms_per_gib: Option<f64>,
    /// Fixed cost of hashing: xxh3 over a clean region, ms per GiB.
    xxh3_ms_per_gib: Option<f64>,
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Runs the benchmark. Memory: one image of `size` bytes plus its delta; disk: two images and
/// two deltas in a temp dir that is removed afterwards.
fn measure(opts: &Options) -> Result<Report> {
    let ps = page_size();
    let size = opts.size.next_multiple_of(ps).max(ps);
    let npages = size / ps;
    let pages = changed_pages(opts.pattern, npages, None, opts.seed);
    let mut notes = Vec::new();
    let tmp = match &opts.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .context("cannot create the benchmark's temp dir")?;
    let base_path = tmp.path().join("base.img");
    let new_path = tmp.path().join("new.img");

    let mut modes = Vec::new();
    match uffd_available() {
        Ok(()) => modes.push(TrackMode::Uffd),
        Err(why) => notes.push(format!("uffd backend skipped: {why}")),
    }
    modes.push(TrackMode::Hash);

    let mut buf = AlignedBuf::new(size).with_context(|| format!("cannot allocate {size} bytes"))?;
    let mut backends = Vec::new();
    for (i, &mode) in modes.iter().enumerate() {
        fill(&mut buf, opts.seed);
        if i == 0 {
            fs::write(&base_path, &buf[..])
                .with_context(|| format!("cannot write {}", base_path.display()))?;
        }
        let mut t = Tracker::new(mode, opts.hash_block_size)?;
        // SAFETY: `buf` outlives the tracker (dropped at the end of this iteration).
        unsafe { t.add_region(0, buf.as_ptr(), size)? };
        // First epoch: full image into the staging buffer, which later epochs reuse (a rank
        // keeps it, so the incremental copy does not pay first-touch page faults).
        let f0 = Instant::now();
        let full = t.collect_dirty()?;
        let mut staging = Vec::with_capacity(size + (full[0].blocks.len() + 4) * 32);
        encode_blocks(&buf, full[0].block_size as u32, &full[0].blocks, &mut staging)
            .context("cannot encode the full image")?;
        let full_seconds = f0.elapsed().as_secs_f64();
        mutate(&mut buf, opts.pattern, &pages, opts.seed);
        if i == 0 {
            fs::write(&new_path, &buf[..]).with_context(|| format!("cannot write {}", new_path.display()))?;
        }
        staging.clear();
        let t0 = Instant::now();
        let dirty = t.collect_dirty()?;
        let t1 = Instant::now();
        let d = &dirty[0];
        let delta_bytes = encode_blocks(&buf, d.block_size as u32, &d.blocks, &mut staging)
            .context("cannot encode the delta")?;
        let t2 = Instant::now();
        let clean0 = Instant::now();
        let clean = t.collect_dirty()?;
        let clean_s = clean0.elapsed().as_secs_f64();
        if d.backend == Backend::Uffd && d.blocks.len() != pages.len() {
            notes.push(format!(
                "uffd reported {} dirty pages, the pattern changed {}",
                d.blocks.len(),
                pages.len()
            ));
        }
        if !clean[0].blocks.is_empty() {
            notes.push(format!(
                "{:?}: {} blocks dirty with nothing written",
                d.backend,
                clean[0].blocks.len()
            ));
        }
        backends.push(BackendResult {
            backend: d.backend,
            block_size: d.block_size,
            dirty_blocks: d.blocks.len() as u64,
            full_seconds,
            collect_seconds: (t1 - t0).as_secs_f64(),
            copy_seconds: (t2 - t1).as_secs_f64(),
            seconds: (t2 - t0).as_secs_f64(),
            delta_bytes,
            clean_collect_ms_per_gib: clean_s * 1e3 / gib(size),
            speedup_vs_xdelta3: None,
        });
    }
    drop(buf);

    let xdelta3 = if opts.run_xdelta3 {
        match run_xdelta3(&base_path, &new_path, &tmp.path().join("x.vcdiff")) {
            Ok(r) => Some(r),
            Err(why) => {
                notes.push(format!("xdelta3 skipped: {why}"));
                None
            }
        }
    } else {
        notes.push("xdelta3 skipped on request".into());
        None
    };
    let df = delta_files(&base_path, &new_path, &tmp.path().join("d.delta"), 4096)?;
    let delta_files = FileDeltaResult {
        seconds: df.seconds,
        fsync_seconds: df.fsync_seconds,
        delta_bytes: df.delta_bytes,
    };
    if let Some(x) = &xdelta3 {
        for b in &mut backends {
            b.speedup_vs_xdelta3 = Some(x.seconds / b.seconds);
        }
    }
    let tracking_cost = if modes.contains(&TrackMode::Uffd) {
        Some(tracking_cost((size / ps).min(32 << 10))?)
    } else {
        None
    };
    let clean_cost = |b: Backend| {
        backends
            .iter()
            .find(|r| r.backend == b)
            .map(|r| r.clean_collect_ms_per_gib)
    };
    Ok(Report {
        size: size as u64,
        pattern: opts.pattern,
        pages_changed: pages.len() as u64,
        bytes_changed: (pages.len() * ps) as u64,
        notes,
        delta_files_speedup_vs_xdelta3: xdelta3.as_ref().map(|x| x.seconds / delta_files.seconds),
        xdelta3,
        delta_files,
        tracking_cost,
        pagemap_scan_ms_per_gib: clean_cost(Backend::Uffd),
        xxh3_ms_per_gib: clean_cost(Backend::Hash),
        backends,
    })
}

fn run_xdelta3(base: &Path, new: &Path, out: &Path) -> Result<FileDeltaResult, String> {
    let t0 = Instant::now();
    let status = Command::new("xdelta3")
        .args(["-e", "-f", "-s"])
        .arg(base)
        .arg(new)
        .arg(out)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run xdelta3: {e}"))?;
    let seconds = t0.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("xdelta3 failed: {status}"));
    }
    let delta_bytes = fs::metadata(out).map_err(|e| e.to_string())?.len();
    Ok(FileDeltaResult {
        seconds,
        fsync_seconds: 0.0,
        delta_bytes,
    })
}

/// Touches one byte in each of `pages` populated pages, write-protected vs not.
fn tracking_cost(pages: usize) -> Result<TrackingCost> {
    let ps = page_size();
    let len = pages * ps;
    let mut plain = AlignedBuf::new(len).with_context(|| format!("cannot allocate {len} bytes"))?;
    let mut prot = AlignedBuf::new(len).with_context(|| format!("cannot allocate {len} bytes"))?;
    plain.fill(1);
    prot.fill(1);
    let mut t = Tracker::new(TrackMode::Uffd, 64 << 10)?;
    // SAFETY: `prot` outlives the tracker.
    unsafe { t.add_region(0, prot.as_ptr(), len)? };
    t.collect_dirty()?;
    let touch = |b: &mut AlignedBuf| {
        let p = b.as_mut_ptr();
        let t0 = Instant::now();
        for i in 0..pages {
            // SAFETY: in bounds; volatile so the store is not elided.
            unsafe { p.add(i * ps).write_volatile(2) };
        }
        t0.elapsed().as_secs_f64() * 1e6 / pages as f64
    };
    let us_plain = touch(&mut plain);
    let us_prot = touch(&mut prot);
    // Checks that every write was seen, so the number measures real tracking.
    let seen = t.collect_dirty()?[0].blocks.len();
    if seen != pages {
        bail!("tracking cost run saw {seen} of {pages} written pages");
    }
    Ok(TrackingCost {
        pages: pages as u64,
        us_per_protected_write: us_prot,
        us_per_plain_write: us_plain,
        us_overhead_per_first_write: us_prot - us_plain,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bench_runs_and_agrees_with_the_pattern() {
        let opts = Options {
            size: 8 << 20,
            pattern: Pattern::Mat,
            run_xdelta3: false,
            ..Default::default()
        };
        let r = measure(&opts).unwrap();
        assert_eq!(r.pages_changed, 2);
        let hash = r.backends.iter().find(|b| b.backend == Backend::Hash).unwrap();
        assert!(hash.dirty_blocks >= 1 && hash.dirty_blocks <= 2);
        if let Some(u) = r.backends.iter().find(|b| b.backend == Backend::Uffd) {
            assert_eq!(u.dirty_blocks, 2);
            assert!(u.delta_bytes < 2 * 4096 + 200);
        }
        assert!(r.delta_files.delta_bytes <= 2 * 4096 + 200);
        assert!(
            r.notes.iter().all(|n| !n.contains("nothing written")),
            "{:?}",
            r.notes
        );
    }
}
