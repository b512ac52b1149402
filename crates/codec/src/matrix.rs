//! Generator and decode matrices, built exactly as ISA-L builds them so that parity written by
//! eckpt equals ISA-L's `ec_encode_data` output for the same code.
//!
//! Matrices are row-major `Vec<u8>` of `rows × cols`.

use crate::gf;
use crate::CodecError;

/// Which generator matrix a code uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodeKind {
    /// ISA-L's `gf_gen_cauchy1_matrix`: every square submatrix is invertible (MDS for any k, m
    /// with k + m ≤ 256). The default.
    Cauchy,
    /// ISA-L's `gf_gen_rs_matrix` (Vandermonde-like, rows `2^(i·j)`): its first parity row is
    /// all ones, so with m = 1 it is plain XOR parity (SCore's scheme). Not MDS for every
    /// (k, m): some erasure patterns give a singular decode matrix, which is refused.
    Rs,
}

impl CodeKind {
    /// The name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        match self {
            CodeKind::Cauchy => "cauchy",
            CodeKind::Rs => "rs",
        }
    }

    /// Parses a name written by [`CodeKind::name`].
    pub fn from_name(name: &str) -> Option<CodeKind> {
        match name {
            "cauchy" => Some(CodeKind::Cauchy),
            "rs" => Some(CodeKind::Rs),
            _ => None,
        }
    }
}

/// The `(k + m) × k` systematic generator matrix: identity on top, parity rows below.
pub fn generator(kind: CodeKind, k: usize, m: usize) -> Vec<u8> {
    let rows = k + m;
    let mut a = vec![0u8; rows * k];
    for i in 0..k {
        a[i * k + i] = 1;
    }
    match kind {
        CodeKind::Cauchy => {
            for i in k..rows {
                for j in 0..k {
                    a[i * k + j] = gf::inv((i ^ j) as u8);
                }
            }
        }
        CodeKind::Rs => {
            let mut gen = 1u8;
            for i in k..rows {
                let mut p = 1u8;
                for j in 0..k {
                    a[i * k + j] = p;
                    p = gf::mul(p, gen);
                }
                gen = gf::mul(gen, 2);
            }
        }
    }
    a
}

/// Inverts an `n × n` matrix by Gauss-Jordan elimination, or reports it singular.
pub fn invert(matrix: &[u8], n: usize) -> Result<Vec<u8>, CodecError> {
    assert_eq!(matrix.len(), n * n, "matrix is not {n}×{n}");
    let mut a = matrix.to_vec();
    let mut out = vec![0u8; n * n];
    for i in 0..n {
        out[i * n + i] = 1;
    }
    for col in 0..n {
        let pivot = (col..n)
            .find(|&r| a[r * n + col] != 0)
            .ok_or(CodecError::SingularMatrix)?;
        if pivot != col {
            for c in 0..n {
                a.swap(pivot * n + c, col * n + c);
                out.swap(pivot * n + c, col * n + c);
            }
        }
        let scale = gf::inv(a[col * n + col]);
        for c in 0..n {
            a[col * n + c] = gf::mul(a[col * n + c], scale);
            out[col * n + c] = gf::mul(out[col * n + c], scale);
        }
        for r in 0..n {
            let factor = a[r * n + col];
            if r == col || factor == 0 {
                continue;
            }
            for c in 0..n {
                a[r * n + c] ^= gf::mul(factor, a[col * n + c]);
                out[r * n + c] ^= gf::mul(factor, out[col * n + c]);
            }
        }
    }
    Ok(out)
}

/// Product of a `rows × inner` matrix and an `inner × cols` matrix.
pub fn multiply(a: &[u8], b: &[u8], rows: usize, inner: usize, cols: usize) -> Vec<u8> {
    let mut out = vec![0u8; rows * cols];
    for r in 0..rows {
        for i in 0..inner {
            let f = a[r * inner + i];
            if f == 0 {
                continue;
            }
            for c in 0..cols {
                out[r * cols + c] ^= gf::mul(f, b[i * cols + c]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rs_first_parity_row_is_all_ones() {
        let g = generator(CodeKind::Rs, 7, 3);
        assert!(g[7 * 7..8 * 7].iter().all(|&x| x == 1));
    }

    #[test]
    fn inverse_times_matrix_is_identity() {
        let g = generator(CodeKind::Cauchy, 5, 5);
        // Rows 3..8 of the generator: a mix of identity and parity rows.
        let sub = g[3 * 5..8 * 5].to_vec();
        let inv = invert(&sub, 5).unwrap();
        let id = multiply(&inv, &sub, 5, 5, 5);
        for r in 0..5 {
            for c in 0..5 {
                assert_eq!(id[r * 5 + c], u8::from(r == c));
            }
        }
    }

    #[test]
    fn singular_matrix_is_refused() {
        let m = [1, 2, 1, 2];
        assert_eq!(invert(&m, 2), Err(CodecError::SingularMatrix));
    }
}
