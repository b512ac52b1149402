//! klauspost/reedsolomon (Go), the fastest widely used Reed-Solomon library, as a peer of
//! `eckpt bench codec`: the repository's harness (`bench/klauspost`, built by `make klauspost`
//! to `target/klauspost-bench`) is run once per repetition between eckpt's own samples, on the
//! same CPUs (it inherits this process's affinity) with the same shape, and forced to the
//! kernel level eckpt runs, so ratios compare like with like.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use eckpt_codec::Kernel;

/// The file `make klauspost` builds in the target directory.
const HARNESS: &str = "klauspost-bench";

/// Where `make klauspost` puts the harness: `target/klauspost-bench`, found next to the
/// running `eckpt` (`target/release/eckpt` → `target/klauspost-bench`), else in the target
/// directory of the repository this `eckpt` was built from. The first when neither exists.
pub fn default_path() -> PathBuf {
    let beside_exe = std::env::current_exe().ok().and_then(|exe| harness_beside(&exe));
    let in_repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(|root| root.join("target").join(HARNESS));
    let candidates: Vec<PathBuf> = beside_exe.into_iter().chain(in_repository).collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .or(candidates.first())
        .cloned()
        .unwrap_or_else(|| PathBuf::from("target").join(HARNESS))
}

/// `target/klauspost-bench` for the binary `exe` of `target/<profile>/`.
fn harness_beside(exe: &Path) -> Option<PathBuf> {
    Some(exe.parent()?.parent()?.join(HARNESS))
}

/// One run of the harness: GB/s (10^9 data bytes per second) of each operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// `Encode`: k data shards into m parities.
    pub encode: f64,
    /// `EncodeIdx`: one data shard's contribution added to the m parities.
    pub update: f64,
    /// `ReconstructData` with the first m data shards lost.
    pub decode: f64,
}

/// A built harness.
pub struct Harness {
    path: PathBuf,
    /// The library and Go version line it prints first.
    pub library: String,
}

/// The harness's `-variant` that runs the kernels of eckpt's `kernel`.
pub fn variant(kernel: Kernel) -> &'static str {
    match kernel {
        Kernel::Ssse3 => "ssse3",
        Kernel::Avx2 => "avx2",
        // AVX-512 without the GFNI kernels.
        Kernel::Avx512 => "nogfni",
        Kernel::Gfni | Kernel::Isal | Kernel::Reference => "auto",
    }
}

impl Harness {
    /// The harness at `path`, if it is built; says on stderr why not otherwise.
    pub fn find(path: &Path) -> Option<Harness> {
        if !path.is_file() {
            eprintln!(
                "eckpt: note: no klauspost harness at {} (`make klauspost` builds it; it needs Go)",
                path.display()
            );
            return None;
        }
        Some(Harness {
            path: path.to_path_buf(),
            library: String::new(),
        })
    }

    /// Runs one repetition of RS(`k`,`m`) on `block` bytes per shard (a whole number of
    /// KiB) with `threads` goroutines, for `min_seconds` per operation.
    pub fn run(
        &mut self,
        k: usize,
        m: usize,
        block: u64,
        threads: usize,
        kernel: Kernel,
        min_seconds: f64,
    ) -> Result<Figures> {
        let output = Command::new(&self.path)
            .env("GOMAXPROCS", threads.to_string())
            .args([
                "-variant",
                variant(kernel),
                "-g",
                &threads.to_string(),
                "-reps",
                "1",
            ])
            .args(["-mint", &min_seconds.to_string()])
            .arg(format!("{k}:{m}:{}", block / 1024))
            .output()
            .with_context(|| format!("running {}", self.path.display()))?;
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "{} failed: {}",
                self.path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        if let Some(first) = text.lines().next() {
            self.library = first.trim_start_matches('#').trim().to_string();
        }
        parse(&text).with_context(|| format!("reading the output of {}", self.path.display()))
    }
}

/// The figures of the harness's one result line: `k m block | encode [min,max] | EncodeIdx
/// … | ReconstructData …`, each column's first number the median.
fn parse(text: &str) -> Result<Figures> {
    if text.contains("VERIFY-FAIL") {
        bail!("the harness says its own results are wrong");
    }
    let line = text
        .lines()
        .find(|l| !l.starts_with('#') && l.matches('|').count() == 3 && !l.starts_with('k'))
        .context("no result line")?;
    let columns: Vec<f64> = line
        .split('|')
        .skip(1)
        .map(|c| {
            c.split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .context("a column without a number")
        })
        .collect::<Result<_>>()?;
    Ok(Figures {
        encode: columns[0],
        update: columns[1],
        decode: columns[2],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_is_read_column_by_column() {
        let out = "# klauspost/reedsolomon v1.14.2 go1.26.8 GOMAXPROCS=1\n# cpuid: AMD EPYC  AVX2=true\n\
                   k    m   block     | encode GB/s med [min,max] | EncodeIdx GB/s med[min,max] | ReconstructData GB/s\n\
                   10   4   1MiB      |  12.53 [  9.14, 19.97]   |   3.43 [  0.54,  4.77]   |   8.02 [  5.87, 10.28]\n";
        assert_eq!(
            parse(out).unwrap(),
            Figures {
                encode: 12.53,
                update: 3.43,
                decode: 8.02
            }
        );
        assert!(parse(&out.replace("10.28]", "10.28] VERIFY-FAIL")).is_err());
        assert!(parse("# only a header\n").is_err());
    }

    #[test]
    fn the_harness_is_looked_for_in_the_target_directory_of_the_binary() {
        assert_eq!(
            harness_beside(Path::new("/repo/target/release/eckpt")),
            Some(PathBuf::from("/repo/target/klauspost-bench"))
        );
    }

    #[test]
    fn each_kernel_level_is_compared_with_the_same_level() {
        assert_eq!(variant(Kernel::Avx2), "avx2");
        assert_eq!(variant(Kernel::Ssse3), "ssse3");
        assert_eq!(variant(Kernel::Avx512), "nogfni");
        assert_eq!(variant(Kernel::Gfni), "auto");
    }
}
