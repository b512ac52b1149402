//! A GF(2^8)-linear map from `cols` equal-length byte vectors to `rows` of them. Encoding
//! (parity = X·D), decoding (lost = Y·survivors), pipeline steps and parity updates are all
//! instances of it, so they share one kernel path.

use crate::kernel::{self, Tables};
use crate::pool;
use crate::{CodecError, Kernel};

/// `rows × cols` coefficients plus the kernel that multiplies by them and its tables.
#[derive(Clone)]
pub struct LinearMap {
    rows: usize,
    cols: usize,
    coefficients: Vec<u8>,
    kernel: Kernel,
    tables: Tables,
}

impl std::fmt::Debug for LinearMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinearMap")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("coefficients", &self.coefficients)
            .field("kernel", &self.kernel)
            .finish()
    }
}

impl LinearMap {
    /// Builds the map from row-major coefficients, for the process's kernel
    /// ([`crate::kernel`]: `ECKPT_ISA`, else the fastest this CPU runs).
    pub fn new(rows: usize, cols: usize, coefficients: Vec<u8>) -> Result<LinearMap, CodecError> {
        LinearMap::with_kernel(crate::kernel()?, rows, cols, coefficients)
    }

    /// Builds the map for a given kernel (tests run every kernel the CPU has side by side);
    /// refuses one this process cannot run and coefficients that are not `rows × cols`.
    pub fn with_kernel(
        kernel: Kernel,
        rows: usize,
        cols: usize,
        coefficients: Vec<u8>,
    ) -> Result<LinearMap, CodecError> {
        if rows == 0 || cols == 0 || coefficients.len() != rows * cols {
            return Err(CodecError::Shape(format!(
                "{} coefficients for a {rows}×{cols} map",
                coefficients.len()
            )));
        }
        if !kernel.is_supported() {
            return Err(CodecError::Kernel(format!(
                "the {kernel} kernel does not run here (this CPU has: {})",
                crate::cpu_isa().join(", ")
            )));
        }
        let tables = kernel::tables(kernel, rows, cols, &coefficients);
        Ok(LinearMap {
            rows,
            cols,
            coefficients,
            kernel,
            tables,
        })
    }

    /// The kernel this map multiplies with.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Number of output vectors.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of input vectors.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The coefficient applied to input `col` in output `row`.
    pub fn coefficient(&self, row: usize, col: usize) -> u8 {
        self.coefficients[row * self.cols + col]
    }

    /// Row-major coefficients.
    pub fn coefficients(&self) -> &[u8] {
        &self.coefficients
    }

    /// `outputs[r] = Σ_c X[r][c] · inputs[c]` (outputs are overwritten).
    pub fn apply(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), CodecError> {
        self.apply_threaded(inputs, outputs, 1)
    }

    /// [`LinearMap::apply`] with the byte range split over `threads` threads.
    pub fn apply_threaded(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        threads: usize,
    ) -> Result<(), CodecError> {
        let lens: Vec<usize> = inputs.iter().map(|s| s.len()).collect();
        let len = self.check_shapes(&lens, self.cols, outputs)?;
        for_each_range(len, threads, outputs, |start, end, outs| {
            let ins: Vec<&[u8]> = inputs.iter().map(|s| &s[start..end]).collect();
            self.run(0, &ins, outs, false);
        });
        Ok(())
    }

    /// `outputs[r] ^= X[r][col] · input`: adds one input's contribution. This is the pipeline
    /// step of a reduction (`P_i ^= X_ij · D_j`) and, with `input = old ⊕ new`, the
    /// incremental parity update (`C_i ^= X_ij · Δ_j`).
    pub fn accumulate(&self, col: usize, input: &[u8], outputs: &mut [&mut [u8]]) -> Result<(), CodecError> {
        self.accumulate_threaded(col, input, outputs, 1)
    }

    /// [`LinearMap::accumulate`] with the byte range split over `threads` threads.
    pub fn accumulate_threaded(
        &self,
        col: usize,
        input: &[u8],
        outputs: &mut [&mut [u8]],
        threads: usize,
    ) -> Result<(), CodecError> {
        if col >= self.cols {
            return Err(CodecError::Shape(format!(
                "input column {col} outside 0..{}",
                self.cols
            )));
        }
        let len = self.check_shapes(&[input.len()], 1, outputs)?;
        // One call per thread: a single input streams through, so cutting it up buys nothing.
        for_each_range(len, threads, outputs, |start, end, outs| {
            self.run(col, &[&input[start..end]], outs, true);
        });
        Ok(())
    }

    /// `outputs (^)= X[·][first..first + inputs.len()] · inputs` with the map's kernel.
    fn run(&self, first: usize, inputs: &[&[u8]], outputs: &mut [&mut [u8]], accumulate: bool) {
        kernel::run(
            &self.tables,
            &self.coefficients,
            self.cols,
            first,
            inputs,
            outputs,
            accumulate,
        );
    }

    /// Checks that there are `rows` outputs, `expected_inputs` inputs, and that all have one
    /// length, which is returned.
    fn check_shapes(
        &self,
        input_lens: &[usize],
        expected_inputs: usize,
        outputs: &[&mut [u8]],
    ) -> Result<usize, CodecError> {
        if input_lens.len() != expected_inputs {
            return Err(CodecError::Shape(format!(
                "{} inputs given, {expected_inputs} expected",
                input_lens.len()
            )));
        }
        if outputs.len() != self.rows {
            return Err(CodecError::Shape(format!(
                "{} outputs given, {} expected",
                outputs.len(),
                self.rows
            )));
        }
        let len = outputs[0].len();
        if outputs.iter().any(|o| o.len() != len) || input_lens.iter().any(|&l| l != len) {
            return Err(CodecError::Shape("inputs and outputs differ in length".into()));
        }
        Ok(len)
    }
}

/// Runs `work(start, end, outputs_restricted_to_range)` on the ranges [`pool::ranges`] cuts
/// `[0, len)` into, on `threads` threads of the codec's worker pool.
fn for_each_range<F>(len: usize, threads: usize, outputs: &mut [&mut [u8]], work: F)
where
    F: Fn(usize, usize, &mut [&mut [u8]]) + Sync,
{
    let ranges = pool::ranges(len, threads);
    if ranges.len() <= 1 {
        work(0, len, outputs);
        return;
    }
    // Transpose: for each part, its slice of every output.
    let mut parts: Vec<Vec<&mut [u8]>> = ranges.iter().map(|_| Vec::with_capacity(outputs.len())).collect();
    for out in outputs.iter_mut() {
        let mut rest: &mut [u8] = out;
        for (part, range) in parts.iter_mut().zip(&ranges) {
            let (head, tail) = rest.split_at_mut(range.len());
            part.push(head);
            rest = tail;
        }
    }
    pool::map_owned(parts, threads, &|t, mut part| {
        work(ranges[t].start, ranges[t].end, &mut part)
    });
}
