//! A multiply-accumulate kernel for CPUs with AVX-512BW and GFNI, used for full-map `apply`
//! (encode, decode) where ISA-L's kernels are limited by loads: ISA-L re-broadcasts every
//! coefficient matrix for each 64-byte column; this kernel works on four columns (256 bytes)
//! at once, so each matrix is loaded once per four columns and the GF2P8AFFINEQB
//! instructions, not the load ports, set the pace. Everything else (tails, other CPUs,
//! `accumulate`) stays with ISA-L; tests compare this kernel with ISA-L and the reference.

use std::arch::x86_64::*;

use crate::gf;

/// Columns processed per iteration.
const COLUMNS: usize = 4;
/// Output rows computed per pass over the inputs.
const ROWS: usize = 4;
/// Bytes consumed per iteration.
pub(crate) const STEP: usize = 64 * COLUMNS;

/// Whether this CPU runs the kernel (checked once).
pub(crate) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("gfni")
    })
}

/// The 8×8 bit matrix GF2P8AFFINEQB uses to multiply a byte by `c` in GF(2^8)/0x11D:
/// byte `7 - i` holds which input bits feed output bit `i`.
pub(crate) fn affine_matrix(c: u8) -> u64 {
    let mut matrix = 0u64;
    for i in 0..8 {
        let mut row = 0u8;
        for j in 0..8 {
            if gf::mul(c, 1 << j) >> i & 1 == 1 {
                row |= 1 << j;
            }
        }
        matrix |= u64::from(row) << (8 * (7 - i));
    }
    matrix
}

/// Affine matrices for a `rows × cols` coefficient matrix, row-major.
pub(crate) fn matrices(coefficients: &[u8]) -> Vec<u64> {
    coefficients.iter().map(|&c| affine_matrix(c)).collect()
}

/// `outputs[r][..done] = Σ_c X[r][c] · inputs[c][..done]` for the largest `done` that is a
/// multiple of [`STEP`]; returns `done` (the caller finishes the tail).
///
/// # Safety
/// [`available`] must be true; `matrices` holds `outputs.len() × inputs.len()` entries and
/// all slices have equal length.
pub(crate) unsafe fn apply(matrices: &[u64], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> usize {
    let cols = inputs.len();
    let len = outputs[0].len();
    let done = len - len % STEP;
    let ins: Vec<*const u8> = inputs.iter().map(|s| s.as_ptr()).collect();
    for (group, outs) in outputs.chunks_mut(ROWS).enumerate() {
        let rows = outs.len();
        // Per input: the matrices of this group's rows, padded with zero matrices.
        let mut mats = vec![[0u64; ROWS]; cols];
        for (c, m) in mats.iter_mut().enumerate() {
            for r in 0..rows {
                m[r] = matrices[(group * ROWS + r) * cols + c];
            }
        }
        let dst: Vec<*mut u8> = outs.iter_mut().map(|o| o.as_mut_ptr()).collect();
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match rows {
                1 => dot_product_group::<1>(&ins, &mats, &dst, done),
                2 => dot_product_group::<2>(&ins, &mats, &dst, done),
                3 => dot_product_group::<3>(&ins, &mats, &dst, done),
                _ => dot_product_group::<4>(&ins, &mats, &dst, done),
            }
        }
    }
    done
}

/// `R` output rows over all inputs, [`COLUMNS`] 64-byte columns per iteration.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn dot_product_group<const R: usize>(
    ins: &[*const u8],
    mats: &[[u64; ROWS]],
    dst: &[*mut u8],
    len: usize,
) {
    let mut offset = 0;
    while offset < len {
        let mut acc = [[_mm512_setzero_si512(); COLUMNS]; R];
        for (input, m) in ins.iter().zip(mats) {
            let mut x = [_mm512_setzero_si512(); COLUMNS];
            for (col, v) in x.iter_mut().enumerate() {
                // SAFETY: offset + STEP ≤ len, the inputs' length.
                *v = unsafe { _mm512_loadu_si512(input.add(offset + 64 * col).cast()) };
            }
            for (r, row_acc) in acc.iter_mut().enumerate() {
                let matrix = _mm512_set1_epi64(m[r] as i64);
                for (a, v) in row_acc.iter_mut().zip(&x) {
                    *a = _mm512_xor_si512(*a, _mm512_gf2p8affine_epi64_epi8::<0>(*v, matrix));
                }
            }
        }
        for (d, row_acc) in dst.iter().zip(&acc) {
            for (col, a) in row_acc.iter().enumerate() {
                // SAFETY: as for the loads.
                unsafe { _mm512_storeu_si512(d.add(offset + 64 * col).cast(), *a) };
            }
        }
        offset += STEP;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GF2P8AFFINEQB on one byte, as the instruction reference defines it.
    fn affine_byte(matrix: u64, x: u8) -> u8 {
        (0..8).fold(0u8, |out, i| {
            let row = (matrix >> (8 * (7 - i))) as u8;
            out | ((((row & x).count_ones() & 1) as u8) << i)
        })
    }

    #[test]
    fn affine_matrices_multiply_in_the_field() {
        for c in 0..=255u8 {
            let m = affine_matrix(c);
            for x in 0..=255u8 {
                assert_eq!(affine_byte(m, x), gf::mul(c, x), "{c} * {x}");
            }
        }
    }

    #[test]
    fn kernel_matches_reference_for_every_row_grouping() {
        if !available() {
            eprintln!("SKIPPED: this CPU lacks AVX-512BW + GFNI");
            return;
        }
        for (rows, cols) in [(1, 3), (2, 10), (3, 7), (4, 10), (5, 4), (8, 12)] {
            let len = STEP * 5 + 77;
            let coefficients: Vec<u8> = (0..rows * cols).map(|i| (i * 37 + 11) as u8).collect();
            let inputs: Vec<Vec<u8>> = (0..cols)
                .map(|c| (0..len).map(|i| (i * 13 + c * 101) as u8).collect())
                .collect();
            let ins: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
            let mut fast = vec![vec![0xAAu8; len]; rows];
            let mut slow = vec![vec![0u8; len]; rows];
            let mut fast_outs: Vec<&mut [u8]> = fast.iter_mut().map(|v| v.as_mut_slice()).collect();
            // SAFETY: checked `available`; shapes built above.
            let done = unsafe { apply(&matrices(&coefficients), &ins, &mut fast_outs) };
            assert_eq!(done, STEP * 5);
            let mut slow_outs: Vec<&mut [u8]> = slow.iter_mut().map(|v| v.as_mut_slice()).collect();
            crate::reference::apply(&coefficients, cols, &ins, &mut slow_outs);
            for r in 0..rows {
                assert_eq!(
                    fast[r][..done],
                    slow[r][..done],
                    "rows={rows} cols={cols} row {r}"
                );
                assert!(
                    fast[r][done..].iter().all(|&b| b == 0xAA),
                    "the tail is left to the caller"
                );
            }
        }
    }
}
