//! Arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), the field
//! ISA-L, Jerasure and most storage codes use. Tables are built at compile time so the
//! reference kernels and the matrix code need no initialisation.

/// The field's reduction polynomial (ISA-L's `gf_mul` uses the same one).
pub const POLYNOMIAL: u16 = 0x11D;

/// `EXP[i] = 2^i`, doubled in length so `EXP[log a + log b]` needs no modulo.
const EXP: [u8; 512] = build_exp();
/// `LOG[a] = i` with `2^i = a`, for `a != 0` (`LOG[0]` is unused).
const LOG: [u8; 256] = build_log();

const fn build_exp() -> [u8; 512] {
    let mut exp = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    exp[510] = exp[0];
    exp[511] = exp[1];
    exp
}

const fn build_log() -> [u8; 256] {
    let exp = build_exp();
    let mut log = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        log[exp[i] as usize] = i as u8;
        i += 1;
    }
    log
}

/// Product of two field elements.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
}

/// Multiplicative inverse; like ISA-L's `gf_inv`, the inverse of 0 is reported as 0.
#[inline]
pub fn inv(a: u8) -> u8 {
    if a == 0 {
        return 0;
    }
    EXP[255 - LOG[a as usize] as usize]
}

/// The 256-entry table `t[x] = c · x`, the building block of the portable kernels.
pub fn mul_table(c: u8) -> [u8; 256] {
    let mut t = [0u8; 256];
    for (x, slot) in t.iter_mut().enumerate() {
        *slot = mul(c, x as u8);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carry-less multiply with reduction, bit by bit: independent of the log tables.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut p: u8 = 0;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLYNOMIAL & 0xFF) as u8;
            }
            b >>= 1;
        }
        p
    }

    #[test]
    fn table_multiply_matches_bitwise_multiply_for_every_pair() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a} * {b}");
            }
        }
    }

    #[test]
    fn every_nonzero_element_has_an_inverse() {
        assert_eq!(inv(0), 0);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "inverse of {a}");
        }
    }

    #[test]
    fn two_generates_the_whole_multiplicative_group() {
        let mut seen = [false; 256];
        for &e in &EXP[..255] {
            assert!(!seen[e as usize], "{e} repeats: 0x11D is not primitive?");
            seen[e as usize] = true;
        }
        assert!(!seen[0]);
    }
}
