//! GF2P8AFFINEQB (AVX-512 + GFNI): one instruction multiplies 64 bytes by a coefficient
//! given as an 8×8 bit matrix. ISA-L's own GFNI kernels re-broadcast every coefficient's
//! matrix for each 64-byte column and are bound by loads; here a matrix, once loaded,
//! serves four columns (256 bytes) for up to four rows, two columns for more, so the
//! affine instructions set the pace.

use std::arch::x86_64::*;

use super::{by_rows, Job, Lanes, Pass};
use crate::gf;

/// Rows one pass keeps in registers.
const MAX_ROWS: usize = 8;

#[derive(Clone, Copy)]
pub(crate) struct Gfni;

impl Lanes for Gfni {
    const BYTES: usize = 64;
    type V = __m512i;
    type X = __m512i;
    type C = __m512i;
    type Table = u64;
    const PAIRS: bool = true;

    fn table(c: u8) -> u64 {
        affine_matrix(c)
    }

    #[inline(always)]
    unsafe fn new() -> Self {
        Gfni
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512i {
        _mm512_loadu_si512(p.cast())
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m512i) {
        _mm512_storeu_si512(p.cast(), v)
    }
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn prepare(self, v: __m512i) -> __m512i {
        v
    }
    #[inline(always)]
    unsafe fn coefficient(matrix: &u64) -> __m512i {
        _mm512_set1_epi64(*matrix as i64)
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m512i, matrix: __m512i, x: __m512i) -> __m512i {
        _mm512_xor_si512(acc, _mm512_gf2p8affine_epi64_epi8::<0>(x, matrix))
    }
    #[inline(always)]
    unsafe fn mul_add2(acc: __m512i, m1: __m512i, x1: __m512i, m2: __m512i, x2: __m512i) -> __m512i {
        // 0x96: a ^ b ^ c.
        _mm512_ternarylogic_epi32::<0x96>(
            acc,
            _mm512_gf2p8affine_epi64_epi8::<0>(x1, m1),
            _mm512_gf2p8affine_epi64_epi8::<0>(x2, m2),
        )
    }
}

/// The 8×8 bit matrix GF2P8AFFINEQB uses to multiply a byte by `c` in GF(2^8)/0x11D:
/// byte `7 - i` holds which input bits feed output bit `i`.
fn affine_matrix(c: u8) -> u64 {
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

#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn pass(pass: Pass<'_, u64>, rows: usize, start: usize, end: usize, accumulate: bool) {
    by_rows!(Gfni, pass, rows, start, end, accumulate;
        1 => 4, 2 => 4, 3 => 4, 4 => 4, 5 => 2, 6 => 2, 7 => 2, 8 => 2)
}

/// Runs `job` with the GFNI kernel.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and GFNI; as for [`super::run`].
pub(crate) unsafe fn run(job: Job<'_, '_, u64>) {
    super::run::<Gfni>(MAX_ROWS, pass, job)
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
}
