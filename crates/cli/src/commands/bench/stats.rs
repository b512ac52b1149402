//! Timing helpers the benchmarks share: interleaved sampling and medians over repetitions.

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
