//! The capture benchmark behind `eckpt bench capture`: how long a rank is paused to find and
//! copy its changed memory, per tracking backend, against the seed's method (dump the image,
//! then `xdelta3` against the previous dump) and against [`delta_files`] on the same dumps, all
//! measured in one run on the same data. Also measures what write tracking costs the
//! application between checkpoints.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Instant;

use serde::Serialize;

use crate::align::{page_size, AlignedBuf};
use crate::delta::encode_blocks;
use crate::error::CaptureError;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::filedelta::delta_files;
use crate::tracker::{uffd_available, Backend, TrackMode, Tracker};

/// How the image changes between the two checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Like the seed's MAT workload: ~0.1 % of pages, scattered, each changed in one word.
    Mat,
    /// Like NPB LU: ~60 % of pages rewritten entirely, in sweeps (6 of every 10 pages).
    Lu,
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "mat" => Ok(Pattern::Mat),
            "lu" => Ok(Pattern::Lu),
            _ => Err(format!("unknown pattern {s:?} (expected mat or lu)")),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pattern::Mat => "mat",
            Pattern::Lu => "lu",
        })
    }
}

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct CaptureBenchOptions {
    /// Image size in bytes (rounded up to whole pages).
    pub size: usize,
    /// Change pattern.
    pub pattern: Pattern,
    /// Block size of the hash backend.
    pub hash_block_size: usize,
    /// Directory for the image files (a fresh temp dir inside it is used and removed);
    /// `None` = the system temp dir.
    pub dir: Option<PathBuf>,
    /// Seed of the deterministic data and change positions.
    pub seed: u64,
    /// Run the xdelta3 reference. It is by far the slowest part (minutes for a 512 MiB LU
    /// image, as it searches for byte matches in changed data), so a quick run may skip it.
    pub run_xdelta3: bool,
}

impl Default for CaptureBenchOptions {
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
pub struct BackendResult {
    /// Which backend.
    pub backend: Backend,
    /// Its block size.
    pub block_size: u64,
    /// Blocks it reported dirty.
    pub dirty_blocks: u64,
    /// First epoch: collect (all blocks) + copy of the full image into the staging buffer.
    pub full_seconds: f64,
    /// Time of `collect_dirty`.
    pub collect_seconds: f64,
    /// Time to copy the dirty blocks into an in-memory delta (staging buffer reused from the
    /// first epoch).
    pub copy_seconds: f64,
    /// collect + copy: the rank's pause.
    pub seconds: f64,
    /// Size of the in-memory delta.
    pub delta_bytes: u64,
    /// Time of a `collect_dirty` with nothing written, per GiB of region (the fixed cost).
    pub clean_collect_ms_per_gib: f64,
    /// xdelta3 seconds / this backend's seconds.
    pub speedup_vs_xdelta3: Option<f64>,
}

/// A file-based delta (xdelta3 or [`delta_files`]) on the dumped images.
#[derive(Debug, Clone, Serialize)]
pub struct FileDeltaResult {
    /// Wall time.
    pub seconds: f64,
    /// Part of `seconds` spent in fsync (`delta_files` only; xdelta3 does not fsync).
    pub fsync_seconds: f64,
    /// Size of the delta file.
    pub delta_bytes: u64,
}

/// Cost of write tracking to the application between checkpoints.
#[derive(Debug, Clone, Serialize)]
pub struct TrackingCost {
    /// Pages touched in each measurement.
    pub pages: u64,
    /// µs per first write to an already-populated, write-protected page.
    pub us_per_protected_write: f64,
    /// µs per write to a populated, unprotected page (the baseline).
    pub us_per_plain_write: f64,
    /// The difference: what each first write after a checkpoint costs.
    pub us_overhead_per_first_write: f64,
}

/// Everything `eckpt bench capture --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureBenchReport {
    /// Image size in bytes.
    pub size: u64,
    /// Change pattern.
    pub pattern: Pattern,
    /// Pages changed by the pattern.
    pub pages_changed: u64,
    /// Bytes of those pages.
    pub bytes_changed: u64,
    /// Per-backend results (uffd only when the kernel supports it).
    pub backends: Vec<BackendResult>,
    /// Why a backend or measurement is missing, if one is.
    pub notes: Vec<String>,
    /// `xdelta3 -e -f -s base new delta` on the dumped images.
    pub xdelta3: Option<FileDeltaResult>,
    /// [`delta_files`] on the same images (4 KiB blocks, includes fsync).
    pub delta_files: FileDeltaResult,
    /// xdelta3 seconds / delta_files seconds.
    pub delta_files_speedup_vs_xdelta3: Option<f64>,
    /// Write-tracking overhead (uffd only).
    pub tracking_cost: Option<TrackingCost>,
    /// Fixed cost of kernel tracking: `PAGEMAP_SCAN` over a clean region, ms per GiB.
    pub pagemap_scan_ms_per_gib: Option<f64>,
    /// Fixed cost of hashing: xxh3 over a clean region, ms per GiB.
    pub xxh3_ms_per_gib: Option<f64>,
}

fn fill(buf: &mut [u8], seed: u64) {
    StdRng::seed_from_u64(seed).fill_bytes(buf);
}

/// The pages the pattern changes, ascending.
fn changed_pages(pattern: Pattern, pages: usize, seed: u64) -> Vec<usize> {
    match pattern {
        Pattern::Mat => {
            let want = (pages / 1000).max(1);
            let mut r = StdRng::seed_from_u64(seed ^ 0x4d41_5400);
            let mut hit = vec![false; pages];
            let mut n = 0;
            while n < want {
                let p = r.random_range(0..pages);
                if !hit[p] {
                    hit[p] = true;
                    n += 1;
                }
            }
            (0..pages).filter(|&p| hit[p]).collect()
        }
        Pattern::Lu => (0..pages).filter(|p| p % 10 < 6).collect(),
    }
}

/// Applies the pattern. Every listed page really changes (words are XORed with non-zero
/// values), so the exact dirty set is known.
fn mutate(buf: &mut [u8], pattern: Pattern, pages: &[usize], seed: u64) {
    let ps = page_size();
    let mut r = StdRng::seed_from_u64(seed ^ 0x4c55_0000_0000_0001);
    for &p in pages {
        let page = &mut buf[p * ps..(p + 1) * ps];
        match pattern {
            Pattern::Mat => {
                let w = (r.random::<u64>() as usize % (ps / 8)) * 8;
                let v = u64::from_le_bytes(page[w..w + 8].try_into().expect("8")) ^ (r.random::<u64>() | 1);
                page[w..w + 8].copy_from_slice(&v.to_le_bytes());
            }
            Pattern::Lu => {
                for c in page.chunks_exact_mut(8) {
                    let v = u64::from_le_bytes(c.try_into().expect("8")) ^ (r.random::<u64>() | 1);
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
}

/// An image of `len` bytes (whole pages) filled with pseudo-random bytes from `seed`: the
/// first checkpoint of a benchmark workload.
pub fn workload_image(len: usize, seed: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len.div_ceil(page_size()) * page_size()];
    fill(&mut buf, seed);
    buf
}

/// Changes `buf` (whole pages) as `pattern` does between two checkpoints; returns how many
/// pages changed. Other crates' benchmarks use it so every benchmark sees the same workload.
pub fn apply_pattern(buf: &mut [u8], pattern: Pattern, seed: u64) -> usize {
    let pages = changed_pages(pattern, buf.len() / page_size(), seed);
    mutate(buf, pattern, &pages, seed);
    pages.len()
}

fn ioe(what: String) -> impl FnOnce(io::Error) -> CaptureError {
    move |e| CaptureError::io(what, e)
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Runs the benchmark. Memory: one image of `size` bytes plus its delta; disk: two images and
/// two deltas in a temp dir that is removed afterwards.
pub fn run_capture_bench(opts: &CaptureBenchOptions) -> Result<CaptureBenchReport, CaptureError> {
    let ps = page_size();
    let size = opts.size.next_multiple_of(ps).max(ps);
    let npages = size / ps;
    let pages = changed_pages(opts.pattern, npages, opts.seed);
    let mut notes = Vec::new();
    let tmp = match &opts.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .map_err(ioe("create bench temp dir".into()))?;
    let base_path = tmp.path().join("base.img");
    let new_path = tmp.path().join("new.img");

    let mut modes = Vec::new();
    match uffd_available() {
        Ok(()) => modes.push(TrackMode::Uffd),
        Err(why) => notes.push(format!("uffd backend skipped: {why}")),
    }
    modes.push(TrackMode::Hash);

    let mut buf = AlignedBuf::new(size).map_err(ioe(format!("allocate {size} bytes")))?;
    let mut backends = Vec::new();
    for (i, &mode) in modes.iter().enumerate() {
        fill(&mut buf, opts.seed);
        if i == 0 {
            fs::write(&base_path, &buf[..]).map_err(ioe(format!("write {}", base_path.display())))?;
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
            .map_err(ioe("encode full image".into()))?;
        let full_seconds = f0.elapsed().as_secs_f64();
        mutate(&mut buf, opts.pattern, &pages, opts.seed);
        if i == 0 {
            fs::write(&new_path, &buf[..]).map_err(ioe(format!("write {}", new_path.display())))?;
        }
        staging.clear();
        let t0 = Instant::now();
        let dirty = t.collect_dirty()?;
        let t1 = Instant::now();
        let d = &dirty[0];
        let delta_bytes = encode_blocks(&buf, d.block_size as u32, &d.blocks, &mut staging)
            .map_err(ioe("encode delta".into()))?;
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
    Ok(CaptureBenchReport {
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
fn tracking_cost(pages: usize) -> Result<TrackingCost, CaptureError> {
    let ps = page_size();
    let len = pages * ps;
    let mut plain = AlignedBuf::new(len).map_err(ioe("allocate".into()))?;
    let mut prot = AlignedBuf::new(len).map_err(ioe("allocate".into()))?;
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
        return Err(CaptureError::InvalidConfig(format!(
            "tracking cost run saw {seen} of {pages} written pages"
        )));
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
    use xxhash_rust::xxh3::xxh3_64 as digest;

    #[test]
    fn patterns_change_exactly_the_listed_pages() {
        let ps = page_size();
        for pattern in [Pattern::Mat, Pattern::Lu] {
            let n = 4000;
            let pages = changed_pages(pattern, n, 7);
            let mut a = vec![0u8; n * ps];
            fill(&mut a, 7);
            let before = digest(&a);
            let mut b = a.clone();
            mutate(&mut b, pattern, &pages, 7);
            let diff: Vec<usize> = (0..n)
                .filter(|&p| a[p * ps..(p + 1) * ps] != b[p * ps..(p + 1) * ps])
                .collect();
            assert_eq!(diff, pages, "{pattern}");
            fill(&mut a, 7);
            assert_eq!(digest(&a), before, "fill is deterministic");
            match pattern {
                Pattern::Mat => assert_eq!(pages.len(), 4),
                Pattern::Lu => assert_eq!(pages.len(), 2400),
            }
        }
        assert_eq!("LU".parse::<Pattern>().unwrap(), Pattern::Lu);
        assert!("x".parse::<Pattern>().is_err());
    }

    #[test]
    fn small_bench_runs_and_agrees_with_the_pattern() {
        let opts = CaptureBenchOptions {
            size: 8 << 20,
            pattern: Pattern::Mat,
            run_xdelta3: false,
            ..Default::default()
        };
        let r = run_capture_bench(&opts).unwrap();
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
