//! `eckpt bench …`: throughput measured next to references taken in the same run.

use anyhow::Result;

use super::{bench_capture, bench_codec};

#[derive(clap::Subcommand)]
pub enum Bench {
    /// GF kernels: encode, one-shard parity update and decode, vs memcpy and the system ISA-L.
    Codec(bench_codec::Args),
    /// Incremental capture: dirty tracking + copy vs xdelta3 and `eckpt delta`, same images.
    Capture(bench_capture::Args),
}

pub fn run(bench: Bench) -> Result<i32> {
    match bench {
        Bench::Codec(args) => bench_codec::run(args),
        Bench::Capture(args) => bench_capture::run(args),
    }
}

/// Median seconds per call of `op` over `reps` repetitions, each repetition timing enough
/// calls to last at least `min_seconds` (the machine is noisy: medians, not means).
pub fn median_seconds(reps: usize, min_seconds: f64, mut op: impl FnMut()) -> f64 {
    op(); // warm caches and page in buffers
    let mut samples: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = std::time::Instant::now();
            let mut calls = 0u32;
            while calls == 0 || start.elapsed().as_secs_f64() < min_seconds {
                op();
                calls += 1;
            }
            start.elapsed().as_secs_f64() / f64::from(calls)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
