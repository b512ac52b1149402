//! eckpt's own GF(2^8) multiply-accumulate kernels for x86-64, one per ISA level
//! ([`ssse3`], [`avx2`], [`avx512`], [`gfni`]), all written once as the generic loop
//! below over what a level provides ([`Lanes`]): load, store, XOR, and a product by a
//! coefficient — two nibble table lookups (PSHUFB) or one GF2P8AFFINEQB.
//!
//! The loop keeps every output row of a pass in registers and reads each input vector once
//! per pass, so each 64 bytes of input is loaded once however many parities it feeds, and
//! a coefficient's table, once loaded, serves several vectors (the level's *columns per
//! iteration*). Rows beyond what fit in registers take further passes over the inputs; then
//! the byte range is cut into pieces small enough that a piece's inputs are still in cache
//! when the next pass reads them again. The loop starts where the first output is
//! cache-line aligned (buffers allocated alike share their misalignment, and vectors that
//! straddle lines in every stream at once make the streams evict each other's lines); the
//! head before that point and the tail after the last whole vector go through the same
//! loop on zero-padded copies. A single input (pipeline hop, parity update) keeps its
//! coefficients in registers for the whole range.
//!
//! Every level is compiled into every x86-64 build and chosen at run time
//! ([`crate::Kernel`]); nothing here depends on the `target-cpu` the crate is built for.

pub(crate) mod avx2;
pub(crate) mod avx512;
pub(crate) mod gfni;
pub(crate) mod ssse3;

/// Bytes of inputs and outputs a piece of a multi-pass call may span, so that the inputs one
/// pass reads are still in L2 (half of a 512 KiB L2, the smallest of the targets) when the
/// next pass reads them again.
const PASS_WORKING_SET: usize = 256 * 1024;

/// A cache line: where the vector loop starts, and the size of a padded head or tail.
const LINE: usize = 64;

/// What an ISA level gives the generic loop.
pub(crate) trait Lanes: Copy {
    /// Bytes per vector.
    const BYTES: usize;
    /// A vector.
    type V: Copy;
    /// An input vector made ready for products (nibbles split, for PSHUFB).
    type X: Copy;
    /// A coefficient made ready for products (tables broadcast into registers).
    type C: Copy;
    /// What is stored per coefficient, built once per map.
    type Table: Copy;

    /// The table of coefficient `c`.
    fn table(c: u8) -> Self::Table;

    /// The level's constants (masks), made inside a function with its target features.
    unsafe fn new() -> Self;
    /// Loads a vector from `p` (unaligned).
    unsafe fn load(p: *const u8) -> Self::V;
    /// Stores a vector at `p` (unaligned).
    unsafe fn store(p: *mut u8, v: Self::V);
    /// The zero vector.
    unsafe fn zero() -> Self::V;
    /// Prepares an input vector for products.
    unsafe fn prepare(self, v: Self::V) -> Self::X;
    /// Loads a coefficient's table into registers.
    unsafe fn coefficient(table: &Self::Table) -> Self::C;
    /// `acc ^ c·x`.
    unsafe fn mul_add(acc: Self::V, c: Self::C, x: Self::X) -> Self::V;
    /// Whether inputs go in pairs through [`Lanes::mul_add2`]: worth it where that saves an
    /// instruction and the registers hold two inputs' vectors.
    const PAIRS: bool = false;
    /// `acc ^ c1·x1 ^ c2·x2` (a level with a three-way XOR joins them in one instruction).
    #[inline(always)]
    unsafe fn mul_add2(acc: Self::V, c1: Self::C, x1: Self::X, c2: Self::C, x2: Self::X) -> Self::V {
        Self::mul_add(Self::mul_add(acc, c1, x1), c2, x2)
    }
}

/// The tables of `coefficients` for level `S`.
pub(crate) fn tables<S: Lanes>(coefficients: &[u8]) -> Vec<S::Table> {
    coefficients.iter().map(|&c| S::table(c)).collect()
}

/// PSHUFB tables of `c`, `N` bytes: the products of `c` by the 16 low nibbles `x`, then by
/// the 16 high nibbles `x << 4`, each 16-byte half repeated for every 128-bit lane of a
/// vector (`N` = 32 per lane), so a coefficient loads with plain vector loads.
pub(crate) fn nibble_table<const N: usize>(c: u8) -> [u8; N] {
    let mut table = [0u8; N];
    let (low, high) = table.split_at_mut(N / 2);
    for lane in 0..N / 32 {
        for x in 0..16u8 {
            low[16 * lane + x as usize] = crate::gf::mul(c, x);
            high[16 * lane + x as usize] = crate::gf::mul(c, x << 4);
        }
    }
    table
}

/// One call's work: `outputs[r] (^)= Σ_c table(r, c) · inputs[c]`, where the coefficient
/// of output `r` and input `c` is `tables[r * stride + first + c]` — the whole map for
/// `apply` (`first = 0`), one column of it for `accumulate`.
pub(crate) struct Job<'a, 'b, T> {
    /// Per-coefficient tables of the whole map, row-major.
    pub tables: &'a [T],
    /// Columns of the whole map.
    pub stride: usize,
    /// The map column of `inputs[0]`.
    pub first: usize,
    /// The inputs, all `len` bytes.
    pub inputs: &'a [&'a [u8]],
    /// The outputs, all `len` bytes.
    pub outputs: &'a mut [&'b mut [u8]],
    /// Add into the outputs instead of overwriting them.
    pub accumulate: bool,
}

/// Raw pointers of one pass: `rows` outputs starting at map row `row0`.
#[derive(Clone, Copy)]
pub(crate) struct Pass<'a, T> {
    tables: &'a [T],
    stride: usize,
    first: usize,
    row0: usize,
    ins: &'a [*const u8],
    outs: &'a [*mut u8],
}

impl<T> Pass<'_, T> {
    /// The table of the pass's output `r` and input `c`.
    #[inline(always)]
    unsafe fn table(&self, r: usize, c: usize) -> &T {
        self.tables
            .get_unchecked((self.row0 + r) * self.stride + self.first + c)
    }
}

/// The `R × V` accumulators at `offset`: the outputs' bytes when adding into them, else
/// zero (a constant the compiler folds into the first product).
#[inline(always)]
unsafe fn start<S: Lanes, const R: usize, const V: usize, const ACC: bool>(
    outs: &[*mut u8],
    offset: usize,
) -> [[S::V; V]; R] {
    let mut acc = [[S::zero(); V]; R];
    if ACC {
        for (r, row) in acc.iter_mut().enumerate() {
            for (v, a) in row.iter_mut().enumerate() {
                *a = S::load(outs[r].add(offset + v * S::BYTES));
            }
        }
    }
    acc
}

/// Stores the accumulators at `offset`.
#[inline(always)]
unsafe fn finish<S: Lanes, const R: usize, const V: usize>(
    outs: &[*mut u8],
    offset: usize,
    acc: &[[S::V; V]; R],
) {
    for (r, row) in acc.iter().enumerate() {
        for (v, a) in row.iter().enumerate() {
            S::store(outs[r].add(offset + v * S::BYTES), *a);
        }
    }
}

/// `V` vectors of `input` at `offset`, prepared for products.
#[inline(always)]
unsafe fn vectors<S: Lanes, const V: usize>(s: S, input: *const u8, offset: usize) -> [S::X; V] {
    let mut x = [s.prepare(S::zero()); V];
    for (v, xv) in x.iter_mut().enumerate() {
        *xv = s.prepare(S::load(input.add(offset + v * S::BYTES)));
    }
    x
}

/// Adds `V` vectors of `input` at `offset` times each row's coefficient.
#[inline(always)]
unsafe fn add_input<S: Lanes, const R: usize, const V: usize>(
    s: S,
    acc: &mut [[S::V; V]; R],
    coefficient: impl Fn(usize) -> S::C,
    input: *const u8,
    offset: usize,
) {
    let x = vectors::<S, V>(s, input, offset);
    for (r, row) in acc.iter_mut().enumerate() {
        let c = coefficient(r);
        for (a, xv) in row.iter_mut().zip(&x) {
            *a = S::mul_add(*a, c, *xv);
        }
    }
}

/// Adds `V` vectors of two inputs at `offset` times each row's coefficients.
#[inline(always)]
unsafe fn add_inputs<S: Lanes, const R: usize, const V: usize>(
    s: S,
    acc: &mut [[S::V; V]; R],
    coefficients: impl Fn(usize) -> (S::C, S::C),
    inputs: (*const u8, *const u8),
    offset: usize,
) {
    let x1 = vectors::<S, V>(s, inputs.0, offset);
    let x2 = vectors::<S, V>(s, inputs.1, offset);
    for (r, row) in acc.iter_mut().enumerate() {
        let (c1, c2) = coefficients(r);
        for (a, (v1, v2)) in row.iter_mut().zip(x1.iter().zip(&x2)) {
            *a = S::mul_add2(*a, c1, *v1, c2, *v2);
        }
    }
}

/// `V` vectors of every input at `offset` into the `R` outputs of `pass`, coefficients
/// loaded as they are used (every input has its own).
///
/// # Safety
/// `offset + V · S::BYTES` bytes are readable in every input and writable in every output;
/// the CPU has the level's instructions.
#[inline(always)]
unsafe fn block<S: Lanes, const R: usize, const V: usize, const ACC: bool>(
    s: S,
    pass: Pass<'_, S::Table>,
    offset: usize,
) {
    let mut acc = start::<S, R, V, ACC>(pass.outs, offset);
    let single = |acc: &mut [[S::V; V]; R], c: usize| {
        let coefficient = |r: usize| S::coefficient(pass.table(r, c));
        add_input::<S, R, V>(s, acc, coefficient, *pass.ins.get_unchecked(c), offset);
    };
    let pair = |acc: &mut [[S::V; V]; R], c: usize| {
        let coefficients = |r: usize| {
            (
                S::coefficient(pass.table(r, c)),
                S::coefficient(pass.table(r, c + 1)),
            )
        };
        let inputs = (*pass.ins.get_unchecked(c), *pass.ins.get_unchecked(c + 1));
        add_inputs::<S, R, V>(s, acc, coefficients, inputs, offset);
    };
    let n = pass.ins.len();
    // The first input (or pair) outside the loop: on zero accumulators its XOR folds away.
    let step = if S::PAIRS && n >= 2 { 2 } else { 1 };
    if step == 2 {
        pair(&mut acc, 0);
    } else {
        single(&mut acc, 0);
    }
    let mut c = step;
    while S::PAIRS && c + 1 < n {
        pair(&mut acc, c);
        c += 2;
    }
    while c < n {
        single(&mut acc, c);
        c += 1;
    }
    finish::<S, R, V>(pass.outs, offset, &acc);
}

/// The `R` outputs of `pass` over `[start, end)`: blocks of `V` vectors, then single
/// vectors; `end - start` is a multiple of `S::BYTES`. With a single input (a pipeline hop,
/// a parity update) its `R` coefficients stay in registers for the whole range, one
/// vector per iteration, instead of being reloaded for every block.
///
/// # Safety
/// As for [`block`], for every offset in the range.
#[inline(always)]
unsafe fn rows<S: Lanes, const R: usize, const V: usize, const ACC: bool>(
    s: S,
    pass: Pass<'_, S::Table>,
    start_at: usize,
    end: usize,
) {
    let mut offset = start_at;
    if let [input] = pass.ins {
        let held: [S::C; R] = std::array::from_fn(|r| S::coefficient(pass.table(r, 0)));
        while offset < end {
            let mut acc = start::<S, R, 1, ACC>(pass.outs, offset);
            add_input::<S, R, 1>(s, &mut acc, |r| held[r], *input, offset);
            finish::<S, R, 1>(pass.outs, offset, &acc);
            offset += S::BYTES;
        }
        return;
    }
    while offset + V * S::BYTES <= end {
        block::<S, R, V, ACC>(s, pass, offset);
        offset += V * S::BYTES;
    }
    while offset < end {
        block::<S, R, 1, ACC>(s, pass, offset);
        offset += S::BYTES;
    }
}

/// The body of a level's pass function: makes the level's `Lanes` (inside the function
/// that has the level's target features) and calls [`rows`] with the pass's row count `R`
/// and the columns per iteration `V` the level chose for it, listed as `R => V` for every
/// `R` in `1..=max_rows`.
macro_rules! by_rows {
    ($S:ty, $pass:expr, $rows:expr, $start:expr, $end:expr, $acc:expr; $($r:literal => $v:literal),+) => {{
        let s = <$S>::new();
        match ($rows, $acc) {
            $(($r, true) => $crate::simd::rows::<$S, $r, $v, true>(s, $pass, $start, $end),
              ($r, false) => $crate::simd::rows::<$S, $r, $v, false>(s, $pass, $start, $end),)+
            _ => unreachable!("a pass has 1..=max_rows rows"),
        }
    }};
}
pub(crate) use by_rows;

/// A level's pass function: `rows` outputs of the pass over `[start, end)`, added into the
/// outputs when the flag is set.
pub(crate) type PassFn<T> = unsafe fn(Pass<'_, T>, usize, usize, usize, bool);

/// Runs `job` with a level whose passes keep at most `max_rows` outputs in registers.
///
/// # Safety
/// The CPU has the level's instructions; every input and output of `job` has one length;
/// `job.tables` covers every row of the outputs and every column of the inputs.
pub(crate) unsafe fn run<S: Lanes>(max_rows: usize, pass_fn: PassFn<S::Table>, job: Job<'_, '_, S::Table>) {
    let rows_total = job.outputs.len();
    let len = job.outputs.first().map_or(0, |o| o.len());
    if rows_total == 0 || len == 0 {
        return;
    }
    let ins: Vec<*const u8> = job.inputs.iter().map(|i| i.as_ptr()).collect();
    let outs: Vec<*mut u8> = job.outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
    let passes = rows_total.div_ceil(max_rows);
    // Start the vector loop where the first output is cache-line aligned: buffers allocated
    // alike share their misalignment, and a vector straddling two lines in every stream
    // makes the streams evict each other's half-used lines (all streams at one page offset
    // map to the same L1 sets).
    let head = (outs[0].align_offset(LINE)).min(len);
    let whole = head + (len - head) / S::BYTES * S::BYTES;
    let piece = if passes == 1 {
        whole.max(S::BYTES)
    } else {
        (PASS_WORKING_SET / (ins.len() + rows_total)).max(S::BYTES) / S::BYTES * S::BYTES
    };
    let each_pass = |ins: &[*const u8], outs: &[*mut u8], start: usize, end: usize| {
        for p in 0..passes {
            let row0 = p * max_rows;
            let rows = max_rows.min(rows_total - row0);
            let pass = Pass {
                tables: job.tables,
                stride: job.stride,
                first: job.first,
                row0,
                ins,
                outs: &outs[row0..row0 + rows],
            };
            // SAFETY: forwarded from `run`'s contract; the range lies inside the buffers.
            unsafe { pass_fn(pass, rows, start, end, job.accumulate) };
        }
    };
    // The bytes before the aligned start and after the last whole vector (each shorter
    // than a line): zero-padded copies through the same loop.
    let padded = |inputs: &[&[u8]], outputs: &mut [&mut [u8]], from: usize, to: usize| {
        if from == to {
            return;
        }
        let n = to - from;
        let mut scratch = vec![0u8; (ins.len() + rows_total) * LINE];
        let (in_copies, out_copies) = scratch.split_at_mut(ins.len() * LINE);
        for (copy, input) in in_copies.chunks_mut(LINE).zip(inputs) {
            copy[..n].copy_from_slice(&input[from..to]);
        }
        if job.accumulate {
            for (copy, output) in out_copies.chunks_mut(LINE).zip(outputs.iter()) {
                copy[..n].copy_from_slice(&output[from..to]);
            }
        }
        let copy_ins: Vec<*const u8> = in_copies.chunks(LINE).map(|c| c.as_ptr()).collect();
        let copy_outs: Vec<*mut u8> = out_copies.chunks_mut(LINE).map(|c| c.as_mut_ptr()).collect();
        each_pass(&copy_ins, &copy_outs, 0, n.next_multiple_of(S::BYTES));
        for (copy, output) in out_copies.chunks(LINE).zip(outputs.iter_mut()) {
            output[from..to].copy_from_slice(&copy[..n]);
        }
    };
    let mut start = head;
    while start < whole {
        let end = (start + piece).min(whole);
        each_pass(&ins, &outs, start, end);
        start = end;
    }
    padded(job.inputs, job.outputs, 0, head);
    padded(job.inputs, job.outputs, whole, len);
}

#[cfg(test)]
mod tests {
    #[test]
    fn nibble_tables_multiply_every_byte_in_every_lane() {
        for c in [0u8, 1, 2, 0x1d, 0x8e, 0xff] {
            let t: [u8; 64] = super::nibble_table(c);
            for lane in 0..2 {
                for x in 0..=255u8 {
                    let low = t[16 * lane + (x & 15) as usize];
                    let high = t[32 + 16 * lane + (x >> 4) as usize];
                    assert_eq!(low ^ high, crate::gf::mul(c, x), "{c} * {x} in lane {lane}");
                }
            }
        }
    }
}
