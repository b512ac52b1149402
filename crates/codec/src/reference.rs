//! Portable, obviously-correct kernels: the oracle the fast kernels are tested against, and
//! the fallback when ISA-L is not built. Byte at a time through a 256-entry product table.

use crate::gf;

/// `outputs[r] = Σ_c coefficients[r][c] · inputs[c]`, with `coefficients` row-major
/// `outputs.len() × cols`.
pub fn apply(coefficients: &[u8], cols: usize, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    for out in outputs.iter_mut() {
        out.fill(0);
    }
    for (c, input) in inputs.iter().enumerate() {
        accumulate(coefficients, cols, c, input, outputs);
    }
}

/// `outputs[r] ^= coefficients[r][col] · input`: one column's contribution.
pub fn accumulate(coefficients: &[u8], cols: usize, col: usize, input: &[u8], outputs: &mut [&mut [u8]]) {
    for (r, out) in outputs.iter_mut().enumerate() {
        let coefficient = coefficients[r * cols + col];
        if coefficient == 0 {
            continue;
        }
        let table = gf::mul_table(coefficient);
        for (o, &x) in out.iter_mut().zip(input.iter()) {
            *o ^= table[x as usize];
        }
    }
}
