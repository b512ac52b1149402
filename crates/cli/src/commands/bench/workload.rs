//! The memory workloads the capture and cluster benchmarks share: a pseudo-random image and
//! the pages a pattern changes between two checkpoints, deterministic for a seed, so every
//! benchmark sees the same data.

use std::fmt;
use std::str::FromStr;

use eckpt_capture::page_size;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::Serialize;

/// How the image changes between the two checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Like a matrix multiply that updates one tile per step (examples/c/mat.c): ~0.1 % of
    /// pages, scattered, each changed in one word.
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

/// Fills `buf` with pseudo-random bytes from `seed`.
pub fn fill(buf: &mut [u8], seed: u64) {
    StdRng::seed_from_u64(seed).fill_bytes(buf);
}

/// The pages the pattern changes, ascending. `fraction` changes that share of the pages
/// instead of the pattern's own (MAT: scattered, 0.1 %; LU: in runs, 60 %).
pub fn changed_pages(pattern: Pattern, pages: usize, fraction: Option<f64>, seed: u64) -> Vec<usize> {
    match pattern {
        Pattern::Mat => {
            let want = fraction.map_or(pages / 1000, |f| (pages as f64 * f).round() as usize);
            let want = want.clamp(1, pages.max(1));
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
        Pattern::Lu => match fraction {
            None => (0..pages).filter(|p| p % 10 < 6).collect(),
            Some(f) => {
                let per_hundred = (f * 100.0).round() as usize;
                (0..pages).filter(|p| p % 100 < per_hundred).collect()
            }
        },
    }
}

/// Applies the pattern. Every listed page really changes (words are XORed with non-zero
/// values), so the exact dirty set is known.
pub fn mutate(buf: &mut [u8], pattern: Pattern, pages: &[usize], seed: u64) {
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

/// Changes `buf` (whole pages) as `pattern` does between two checkpoints (`fraction` of the
/// pages if given); returns how many pages changed.
pub fn apply_pattern(buf: &mut [u8], pattern: Pattern, fraction: Option<f64>, seed: u64) -> usize {
    let pages = changed_pages(pattern, buf.len() / page_size(), fraction, seed);
    mutate(buf, pattern, &pages, seed);
    pages.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_change_exactly_the_listed_pages() {
        let ps = page_size();
        for pattern in [Pattern::Mat, Pattern::Lu] {
            let n = 4000;
            let pages = changed_pages(pattern, n, None, 7);
            let mut a = vec![0u8; n * ps];
            fill(&mut a, 7);
            let before = a.clone();
            let mut b = a.clone();
            mutate(&mut b, pattern, &pages, 7);
            let diff: Vec<usize> = (0..n)
                .filter(|&p| a[p * ps..(p + 1) * ps] != b[p * ps..(p + 1) * ps])
                .collect();
            assert_eq!(diff, pages, "{pattern}");
            fill(&mut a, 7);
            assert!(a == before, "fill is deterministic");
            match pattern {
                Pattern::Mat => assert_eq!(pages.len(), 4),
                Pattern::Lu => assert_eq!(pages.len(), 2400),
            }
        }
        assert_eq!(changed_pages(Pattern::Mat, 4000, Some(0.05), 7).len(), 200);
        assert_eq!(changed_pages(Pattern::Lu, 4000, Some(0.25), 7).len(), 1000);
        assert_eq!(
            changed_pages(Pattern::Mat, 4000, Some(0.0), 7).len(),
            1,
            "at least one page"
        );
        assert_eq!("LU".parse::<Pattern>().unwrap(), Pattern::Lu);
        assert!("x".parse::<Pattern>().is_err());
    }
}
