//! Timing helpers the benchmarks share: interleaved sampling and medians over repetitions,
//! one timed call, and the CPU's name for their reports.

/// Seconds per call of each operation, sampled round-robin: every repetition times each
/// operation once in turn (enough calls to last `min_seconds`), so a noisy neighbour slows
/// all of them alike and per-repetition ratios stay meaningful. Returns `samples[op][rep]`.
pub fn interleaved_samples(reps: usize, min_seconds: f64, ops: &mut [&mut dyn FnMut()]) -> Vec<Vec<f64>> {
    for op in ops.iter_mut() {
        op(); // warm caches and page in buffers
    }
    let mut samples = vec![Vec::with_capacity(reps); ops.len()];
    for _ in 0..reps.max(1) {
        for (op, out) in ops.iter_mut().zip(samples.iter_mut()) {
            let start = std::time::Instant::now();
            let mut calls = 0u32;
            while calls == 0 || start.elapsed().as_secs_f64() < min_seconds {
                op();
                calls += 1;
            }
            out.push(start.elapsed().as_secs_f64() / f64::from(calls));
        }
    }
    samples
}

/// The median of `values` (the machine is noisy: medians, not means).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// The median over repetitions of `slow[i] / fast[i]`.
pub fn median_ratio(slow: &[f64], fast: &[f64]) -> f64 {
    let ratios: Vec<f64> = slow.iter().zip(fast).map(|(s, f)| s / f).collect();
    median(&ratios)
}

/// Seconds `op` took.
pub fn timed(op: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let start = std::time::Instant::now();
    op()?;
    Ok(start.elapsed().as_secs_f64())
}

/// The CPU's model name, from /proc/cpuinfo.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
