//! The floor of x86-64 kernels: 16-byte PSHUFB nibble lookups (SSSE3), for CPUs older than
//! AVX2 (and to compare levels on one machine).

use std::arch::x86_64::*;

use super::{by_rows, Job, Lanes, Pass};

/// Rows one pass keeps in registers (16 XMM registers).
const MAX_ROWS: usize = 8;

#[derive(Clone, Copy)]
pub(crate) struct Ssse3 {
    low_nibbles: __m128i,
}

impl Lanes for Ssse3 {
    const BYTES: usize = 16;
    type V = __m128i;
    type X = (__m128i, __m128i);
    type C = (__m128i, __m128i);
    type Table = [u8; 32];

    fn table(c: u8) -> [u8; 32] {
        super::nibble_table(c)
    }

    #[inline(always)]
    unsafe fn new() -> Self {
        Ssse3 {
            low_nibbles: _mm_set1_epi8(0x0f),
        }
    }
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m128i {
        _mm_loadu_si128(p.cast())
    }
    #[inline(always)]
    unsafe fn store(p: *mut u8, v: __m128i) {
        _mm_storeu_si128(p.cast(), v)
    }
    #[inline(always)]
    unsafe fn zero() -> __m128i {
        _mm_setzero_si128()
    }
    #[inline(always)]
    unsafe fn prepare(self, v: __m128i) -> Self::X {
        (
            _mm_and_si128(v, self.low_nibbles),
            _mm_and_si128(_mm_srli_epi64::<4>(v), self.low_nibbles),
        )
    }
    #[inline(always)]
    unsafe fn coefficient(table: &[u8; 32]) -> Self::C {
        (
            _mm_loadu_si128(table.as_ptr().cast()),
            _mm_loadu_si128(table.as_ptr().add(16).cast()),
        )
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m128i, (low, high): Self::C, (x_low, x_high): Self::X) -> __m128i {
        _mm_xor_si128(
            acc,
            _mm_xor_si128(_mm_shuffle_epi8(low, x_low), _mm_shuffle_epi8(high, x_high)),
        )
    }
}

#[target_feature(enable = "ssse3")]
unsafe fn pass(pass: Pass<'_, [u8; 32]>, rows: usize, start: usize, end: usize, accumulate: bool) {
    by_rows!(Ssse3, pass, rows, start, end, accumulate;
        1 => 2, 2 => 2, 3 => 2, 4 => 1, 5 => 1, 6 => 1, 7 => 1, 8 => 1)
}

/// Runs `job` with the SSSE3 kernel.
///
/// # Safety
/// The CPU has SSSE3; as for [`super::run`].
pub(crate) unsafe fn run(job: Job<'_, '_, [u8; 32]>) {
    super::run::<Ssse3>(MAX_ROWS, pass, job)
}
