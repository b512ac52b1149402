//! Every kernel this CPU runs (SSSE3, AVX2, AVX-512, GFNI on x86-64; ISA-L where built)
//! against the portable reference, byte for byte: `apply` and `accumulate`, any shape up to
//! more rows than one pass keeps in registers, any length (heads and tails shorter than a
//! vector), buffers at any alignment. A machine with AVX-512 + GFNI runs every level here.

use eckpt_codec::{reference, supported_kernels, Kernel, LinearMap};
use proptest::prelude::*;

/// Buffers of `len` bytes starting `skew` bytes into an allocation, so that the kernels
/// meet every alignment.
struct Skewed {
    bytes: Vec<u8>,
    skew: usize,
    len: usize,
}

impl Skewed {
    fn new(len: usize, skew: usize, seed: u64) -> Skewed {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let bytes = (0..len + skew)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 24) as u8
            })
            .collect();
        Skewed { bytes, skew, len }
    }
    fn get(&self) -> &[u8] {
        &self.bytes[self.skew..self.skew + self.len]
    }
    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.skew..self.skew + self.len]
    }
}

fn fast_kernels() -> Vec<Kernel> {
    supported_kernels()
        .into_iter()
        .filter(|k| *k != Kernel::Reference)
        .collect()
}

/// Checks `apply` and `accumulate` of every kernel against the reference for one case.
fn check(rows: usize, cols: usize, len: usize, coefficients: &[u8], skews: &[usize], seed: u64) {
    let inputs: Vec<Skewed> = (0..cols)
        .map(|c| Skewed::new(len, skews[c % skews.len()], seed + c as u64))
        .collect();
    let ins: Vec<&[u8]> = inputs.iter().map(|i| i.get()).collect();
    let start: Vec<Skewed> = (0..rows)
        .map(|r| Skewed::new(len, skews[(cols + r) % skews.len()], seed + 1000 + r as u64))
        .collect();

    let mut applied = start.iter().map(|s| s.get().to_vec()).collect::<Vec<_>>();
    let mut outs: Vec<&mut [u8]> = applied.iter_mut().map(|v| v.as_mut_slice()).collect();
    reference::apply(coefficients, cols, &ins, &mut outs);
    let col = cols / 2;
    let mut accumulated = start.iter().map(|s| s.get().to_vec()).collect::<Vec<_>>();
    let mut outs: Vec<&mut [u8]> = accumulated.iter_mut().map(|v| v.as_mut_slice()).collect();
    reference::accumulate(coefficients, cols, col, ins[col], &mut outs);

    for kernel in fast_kernels() {
        let map = LinearMap::with_kernel(kernel, rows, cols, coefficients.to_vec()).unwrap();
        assert_eq!(map.kernel(), kernel);
        let what = format!("{kernel}: {rows}×{cols}, {len} bytes, skews {skews:?}");

        let mut out = start
            .iter()
            .map(|s| Skewed::new(len, s.skew, 7))
            .collect::<Vec<_>>();
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.get_mut()).collect();
        map.apply(&ins, &mut outs).unwrap();
        for (r, o) in out.iter().enumerate() {
            assert!(o.get() == applied[r].as_slice(), "apply, row {r}: {what}");
        }

        let mut out = start
            .iter()
            .map(|s| Skewed {
                bytes: s.bytes.clone(),
                skew: s.skew,
                len,
            })
            .collect::<Vec<_>>();
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(|o| o.get_mut()).collect();
        map.accumulate(col, ins[col], &mut outs).unwrap();
        for (r, o) in out.iter().enumerate() {
            assert!(
                o.get() == accumulated[r].as_slice(),
                "accumulate, row {r}: {what}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn every_kernel_equals_the_reference(
        rows in 1usize..=10,
        cols in 1usize..=12,
        len in 0usize..=1200,
        skews in proptest::collection::vec(0usize..64, 1..5),
        seed in any::<u64>(),
    ) {
        let mut s = seed | 1;
        let coefficients: Vec<u8> = (0..rows * cols).map(|_| { s = s.wrapping_mul(6364136223846793005).wrapping_add(1); (s >> 56) as u8 }).collect();
        check(rows, cols, len, &coefficients, &skews, seed);
    }
}

#[test]
fn many_rows_take_several_passes_over_cache_sized_pieces() {
    // 19 rows: three passes at eight rows per pass; 200 KiB + a tail: several pieces.
    let (rows, cols, len) = (19, 11, 200 * 1024 + 45);
    let coefficients: Vec<u8> = (0..rows * cols).map(|i| (i * 151 + 7) as u8).collect();
    check(rows, cols, len, &coefficients, &[16, 16, 40], 3);
}

#[test]
fn zero_and_one_coefficients_and_every_byte_value() {
    // Every byte value through every coefficient: 256 rows (32 passes) of one input.
    let coefficients: Vec<u8> = (0..=255u8).collect();
    check(256, 1, 256 * 3 + 5, &coefficients, &[0], 11);
}

#[test]
fn every_level_below_the_best_runs_here() {
    // The CPU's ISA levels are all exercised: each has its own kernel in the list.
    for level in eckpt_codec::cpu_isa() {
        assert!(
            fast_kernels().iter().any(|k| k.name() == level),
            "{level} is on this CPU but not tested"
        );
    }
}
