//! 32-byte VPSHUFB nibble lookups (AVX2): the kernel of AVX2-only CPUs such as Zen 3.
//! With 16 YMM registers, up to four rows keep two vectors each (64 bytes per iteration,
//! each coefficient's tables serving two vectors: eight accumulators, four nibble vectors,
//! the mask and two tables); more rows keep one. Tables are stored already repeated for
//! both 128-bit lanes, so they load without a lane broadcast.

use std::arch::x86_64::*;

use super::{by_rows, Job, Lanes, Pass};

/// Rows one pass keeps in registers.
const MAX_ROWS: usize = 8;

#[derive(Clone, Copy)]
pub(crate) struct Avx2 {
    low_nibbles: __m256i,
}

impl Lanes for Avx2 {
    const BYTES: usize = 32;
    type V = __m256i;
    type X = (__m256i, __m256i);
    type C = (__m256i, __m256i);
    type Table = [u8; 64];

    fn table(c: u8) -> [u8; 64] {
        super::nibble_table(c)
    }

    #[inline(always)]
    unsafe fn new() -> Self {
        Avx2 {
            low_nibbles: _mm256_set1_epi8(0x0f),
        }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p.cast())
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m256i) {
        _mm256_storeu_si256(p.cast(), v)
    }
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn prepare(self, v: __m256i) -> Self::X {
        (
            _mm256_and_si256(v, self.low_nibbles),
            _mm256_and_si256(_mm256_srli_epi64::<4>(v), self.low_nibbles),
        )
    }
    #[inline(always)]
    unsafe fn coefficient(table: &[u8; 64]) -> Self::C {
        (
            _mm256_loadu_si256(table.as_ptr().cast()),
            _mm256_loadu_si256(table.as_ptr().add(32).cast()),
        )
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m256i, (low, high): Self::C, (x_low, x_high): Self::X) -> __m256i {
        _mm256_xor_si256(
            acc,
            _mm256_xor_si256(_mm256_shuffle_epi8(low, x_low), _mm256_shuffle_epi8(high, x_high)),
        )
    }
}

#[target_feature(enable = "avx2")]
unsafe fn pass(pass: Pass<'_, [u8; 64]>, rows: usize, start: usize, end: usize, accumulate: bool) {
    by_rows!(Avx2, pass, rows, start, end, accumulate;
        1 => 2, 2 => 2, 3 => 2, 4 => 2, 5 => 1, 6 => 1, 7 => 1, 8 => 1)
}

/// Runs `job` with the AVX2 kernel.
///
/// # Safety
/// The CPU has AVX2; as for [`super::run`].
pub(crate) unsafe fn run(job: Job<'_, '_, [u8; 64]>) {
    super::run::<Avx2>(MAX_ROWS, pass, job)
}
