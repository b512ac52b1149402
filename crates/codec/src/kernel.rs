//! The GF(2^8) multiply-accumulate kernels behind [`crate::LinearMap`]. With the `isal` feature:
//! on CPUs with AVX-512BW and GFNI, eckpt's own kernel ([`crate::gfni`]) for the whole-256-byte
//! part of `apply`; ISA-L's (the variant ISA-L picks at run time) for the rest of `apply`, for
//! `accumulate` and on every other CPU. Without it, the portable reference kernels of
//! [`crate::reference`].

/// Expanded coefficient tables in the form the active kernels want.
#[derive(Clone)]
pub(crate) struct Tables {
    /// ISA-L's `ec_init_tables` output, or the plain coefficients for the reference kernels.
    expanded: Vec<u8>,
    /// GF2P8AFFINEQB matrices for the AVX-512 GFNI kernel, when the CPU has it.
    #[cfg(all(feature = "isal", target_arch = "x86_64"))]
    affine: Option<Vec<u64>>,
}

/// ISA-L takes `int` lengths: longer buffers are processed in pieces of this size.
#[cfg(feature = "isal")]
const MAX_CALL_LEN: usize = 1 << 30;

/// Names the kernels that run on this CPU, for benchmarks, `eckpt encode`'s summary and the
/// fallback warning.
pub fn kernel_name() -> &'static str {
    #[cfg(feature = "isal")]
    {
        static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        NAME.get_or_init(native::name)
    }
    #[cfg(not(feature = "isal"))]
    "portable reference (native ISA-L not built: slow)"
}

/// True when the native ISA-L kernels are compiled in.
pub fn is_native() -> bool {
    cfg!(feature = "isal")
}

#[cfg(feature = "isal")]
mod native {
    use super::{Tables, MAX_CALL_LEN};
    use erasure_isa_l_sys as isal;

    /// What [`super::kernel_name`] says: eckpt's GFNI kernel where [`apply`] uses it, and
    /// the ISA-L variant that runs the rest.
    pub(crate) fn name() -> String {
        let isal = format!("ISA-L 2.32 {}", isal_variant());
        #[cfg(target_arch = "x86_64")]
        if crate::gfni::available() {
            return format!("eckpt AVX-512 GFNI (apply), {isal} (accumulate, tails)");
        }
        isal
    }

    /// The kernel family ISA-L 2.32's run-time dispatch picks on this CPU: the feature tests
    /// of its `mbin_dispatch_init8` (include/multibinary.asm, used by
    /// erasure_code/ec_multibinary.asm) in the same order. (On Hygon families 1–3 ISA-L keeps
    /// `ec_encode_data_update` on AVX; the name does not say so.)
    #[cfg(target_arch = "x86_64")]
    fn isal_variant() -> &'static str {
        use std::arch::is_x86_feature_detected as has;
        if !has!("sse4.2") {
            "base"
        } else if !has!("avx") {
            "sse"
        } else if !has!("avx2") {
            "avx"
        } else if has!("avx512f")
            && has!("avx512vl")
            && has!("avx512bw")
            && has!("avx512cd")
            && has!("avx512dq")
        {
            let gen2 = has!("avx512vbmi2")
                && has!("gfni")
                && has!("vaes")
                && has!("vpclmulqdq")
                && has!("avx512vnni")
                && has!("avx512bitalg")
                && has!("avx512vpopcntdq");
            if gen2 {
                "avx512_gfni"
            } else {
                "avx512"
            }
        } else if has!("gfni") && has!("vaes") && has!("vpclmulqdq") {
            "avx2_gfni"
        } else {
            "avx2"
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn isal_variant() -> &'static str {
        "(its run-time dispatch)"
    }

    pub(crate) fn init_tables(cols: usize, rows: usize, coefficients: &[u8]) -> Tables {
        let mut expanded = vec![0u8; 32 * cols * rows];
        let mut coefficients_copy = coefficients.to_vec();
        // SAFETY: `coefficients` holds rows × cols bytes and `expanded` 32 × rows × cols, as
        // ec_init_tables requires.
        unsafe {
            isal::ec_init_tables(
                cols as i32,
                rows as i32,
                coefficients_copy.as_mut_ptr(),
                expanded.as_mut_ptr(),
            )
        };
        #[cfg(target_arch = "x86_64")]
        let affine = crate::gfni::available().then(|| crate::gfni::matrices(coefficients));
        Tables {
            expanded,
            #[cfg(target_arch = "x86_64")]
            affine,
        }
    }

    pub(crate) fn apply(tables: &Tables, cols: usize, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(affine) = &tables.affine {
            // SAFETY: the matrices exist only when the CPU has the instructions; shapes are
            // checked by LinearMap.
            let done = unsafe { crate::gfni::apply(affine, inputs, outputs) };
            if done > 0 {
                let ins: Vec<&[u8]> = inputs.iter().map(|s| &s[done..]).collect();
                let mut outs: Vec<&mut [u8]> = outputs.iter_mut().map(|s| &mut s[done..]).collect();
                return isal_apply(tables, cols, &ins, &mut outs);
            }
        }
        isal_apply(tables, cols, inputs, outputs)
    }

    fn isal_apply(tables: &Tables, cols: usize, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        let len = outputs[0].len();
        let mut start = 0;
        while start < len {
            let end = (start + MAX_CALL_LEN).min(len);
            let mut ins: Vec<*mut u8> = inputs.iter().map(|s| s[start..].as_ptr() as *mut u8).collect();
            let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s[start..].as_mut_ptr()).collect();
            // SAFETY: every input and output holds at least `end - start` bytes from `start`,
            // ISA-L only reads the inputs, and the tables were built for cols × outputs.len().
            unsafe {
                isal::ec_encode_data(
                    (end - start) as i32,
                    cols as i32,
                    outs.len() as i32,
                    tables.expanded.as_ptr() as *mut u8,
                    ins.as_mut_ptr(),
                    outs.as_mut_ptr(),
                )
            };
            start = end;
        }
    }

    pub(crate) fn accumulate(
        tables: &Tables,
        cols: usize,
        col: usize,
        input: &[u8],
        outputs: &mut [&mut [u8]],
    ) {
        let len = input.len();
        let mut start = 0;
        while start < len {
            let end = (start + MAX_CALL_LEN).min(len);
            let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s[start..].as_mut_ptr()).collect();
            // SAFETY: as in `apply`; ec_encode_data_update only reads `input`.
            unsafe {
                isal::ec_encode_data_update(
                    (end - start) as i32,
                    cols as i32,
                    outs.len() as i32,
                    col as i32,
                    tables.expanded.as_ptr() as *mut u8,
                    input[start..].as_ptr() as *mut u8,
                    outs.as_mut_ptr(),
                )
            };
            start = end;
        }
    }
}

#[cfg(feature = "isal")]
pub(crate) use native::{accumulate, apply, init_tables};

#[cfg(not(feature = "isal"))]
pub(crate) fn init_tables(_cols: usize, _rows: usize, coefficients: &[u8]) -> Tables {
    Tables {
        expanded: coefficients.to_vec(),
    }
}

#[cfg(not(feature = "isal"))]
pub(crate) fn apply(tables: &Tables, cols: usize, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
    crate::reference::apply(&tables.expanded, cols, inputs, outputs)
}

#[cfg(not(feature = "isal"))]
pub(crate) fn accumulate(tables: &Tables, cols: usize, col: usize, input: &[u8], outputs: &mut [&mut [u8]]) {
    crate::reference::accumulate(&tables.expanded, cols, col, input, outputs)
}

#[cfg(all(test, feature = "isal", target_arch = "x86_64"))]
mod tests {
    #[test]
    fn the_name_says_whose_kernel_applies() {
        let name = super::kernel_name();
        assert_eq!(
            name.starts_with("eckpt AVX-512 GFNI"),
            crate::gfni::available(),
            "{name}"
        );
        assert!(name.contains("ISA-L 2.32 "), "{name}");
    }
}
