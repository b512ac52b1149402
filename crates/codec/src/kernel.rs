//! The kernels behind [`crate::LinearMap`]: the coefficient tables each one needs, built
//! once per map, and the call into the kernel the map was built for — eckpt's own SIMD
//! kernels ([`crate::simd`]) on x86-64, ISA-L's run-time dispatch where they do not run
//! (feature `isal`), else the portable reference.

use crate::isa::Kernel;

/// Coefficient tables in the form a kernel wants.
#[derive(Clone)]
pub(crate) enum Tables {
    /// The reference kernels use the coefficients themselves.
    Plain,
    /// What ISA-L's `ec_init_tables` makes: its layout depends on the variant its run-time
    /// dispatch picks (nibble tables, or GFNI matrices on CPUs with GFNI).
    #[cfg(feature = "isal")]
    Isal(Vec<u8>),
    /// One table per coefficient for each of eckpt's levels (see each level's `Lanes`).
    #[cfg(target_arch = "x86_64")]
    Ssse3(Vec<[u8; 32]>),
    #[cfg(target_arch = "x86_64")]
    Avx2(Vec<[u8; 64]>),
    #[cfg(target_arch = "x86_64")]
    Avx512(Vec<[u8; 128]>),
    #[cfg(target_arch = "x86_64")]
    Gfni(Vec<u64>),
}

/// ISA-L takes `int` lengths: longer buffers are processed in pieces of this size.
#[cfg(feature = "isal")]
const MAX_CALL_LEN: usize = 1 << 30;

/// The tables `kernel` needs for `coefficients` (`rows × cols`, row-major).
pub(crate) fn tables(kernel: Kernel, rows: usize, cols: usize, coefficients: &[u8]) -> Tables {
    #[cfg(target_arch = "x86_64")]
    use crate::simd::{avx2::Avx2, avx512::Avx512, gfni::Gfni, ssse3::Ssse3, tables};
    match kernel {
        #[cfg(feature = "isal")]
        Kernel::Isal => {
            let mut expanded = vec![0u8; 32 * rows * cols];
            let mut copy = coefficients.to_vec();
            // SAFETY: `copy` holds rows × cols coefficients and `expanded` 32 bytes for each,
            // as ec_init_tables requires.
            unsafe {
                erasure_isa_l_sys::ec_init_tables(
                    cols as i32,
                    rows as i32,
                    copy.as_mut_ptr(),
                    expanded.as_mut_ptr(),
                )
            };
            Tables::Isal(expanded)
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Ssse3 => Tables::Ssse3(tables::<Ssse3>(coefficients)),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => Tables::Avx2(tables::<Avx2>(coefficients)),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => Tables::Avx512(tables::<Avx512>(coefficients)),
        #[cfg(target_arch = "x86_64")]
        Kernel::Gfni => Tables::Gfni(tables::<Gfni>(coefficients)),
        // The reference, and kernels this build lacks (LinearMap refuses those first).
        _ => Tables::Plain,
    }
}

/// `outputs[r] (^)= Σ_c X[r][first + c] · inputs[c]`, `X` being `coefficients` (row-major,
/// `cols` columns) with `tables` built for the map's kernel: overwritten for `apply`, added
/// into when `accumulate`. Shapes are checked by the caller.
pub(crate) fn run(
    tables: &Tables,
    coefficients: &[u8],
    cols: usize,
    first: usize,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) {
    #[cfg(target_arch = "x86_64")]
    use crate::simd::{avx2, avx512, gfni, ssse3, Job};
    #[cfg(target_arch = "x86_64")]
    macro_rules! job {
        ($tables:expr) => {
            Job {
                tables: $tables,
                stride: cols,
                first,
                inputs,
                outputs,
                accumulate,
            }
        };
    }
    // SAFETY (SIMD levels): LinearMap builds a level's tables only when the CPU has its
    // instructions, and checked that inputs and outputs share one length and that the
    // tables cover its rows and columns.
    match tables {
        Tables::Plain => reference(coefficients, cols, first, inputs, outputs, accumulate),
        #[cfg(feature = "isal")]
        Tables::Isal(t) => isal(t, cols, first, inputs, outputs, accumulate),
        #[cfg(target_arch = "x86_64")]
        Tables::Ssse3(t) => unsafe { ssse3::run(job!(t)) },
        #[cfg(target_arch = "x86_64")]
        Tables::Avx2(t) => unsafe { avx2::run(job!(t)) },
        #[cfg(target_arch = "x86_64")]
        Tables::Avx512(t) => unsafe { avx512::run(job!(t)) },
        #[cfg(target_arch = "x86_64")]
        Tables::Gfni(t) => unsafe { gfni::run(job!(t)) },
    }
}

fn reference(
    coefficients: &[u8],
    cols: usize,
    first: usize,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) {
    if !accumulate {
        for out in outputs.iter_mut() {
            out.fill(0);
        }
    }
    for (c, input) in inputs.iter().enumerate() {
        crate::reference::accumulate(coefficients, cols, first + c, input, outputs);
    }
}

#[cfg(feature = "isal")]
fn isal(
    tables: &[u8],
    cols: usize,
    first: usize,
    inputs: &[&[u8]],
    outputs: &mut [&mut [u8]],
    accumulate: bool,
) {
    use erasure_isa_l_sys as isal;
    let len = outputs.first().map_or(0, |o| o.len());
    let tables = tables.as_ptr() as *mut u8;
    let mut start = 0;
    while start < len {
        let end = (start + MAX_CALL_LEN).min(len);
        let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s[start..].as_mut_ptr()).collect();
        if accumulate {
            for (c, input) in inputs.iter().enumerate() {
                // SAFETY: every input and output holds at least `end - start` bytes from
                // `start`; ISA-L only reads the input and the tables, built for
                // outputs × cols coefficients.
                unsafe {
                    isal::ec_encode_data_update(
                        (end - start) as i32,
                        cols as i32,
                        outs.len() as i32,
                        (first + c) as i32,
                        tables,
                        input[start..].as_ptr() as *mut u8,
                        outs.as_mut_ptr(),
                    )
                };
            }
        } else {
            // `apply` always covers the whole map (first = 0, cols inputs).
            let mut ins: Vec<*mut u8> = inputs.iter().map(|s| s[start..].as_ptr() as *mut u8).collect();
            // SAFETY: as above; ec_encode_data only reads the inputs.
            unsafe {
                isal::ec_encode_data(
                    (end - start) as i32,
                    cols as i32,
                    outs.len() as i32,
                    tables,
                    ins.as_mut_ptr(),
                    outs.as_mut_ptr(),
                )
            };
        }
        start = end;
    }
}
