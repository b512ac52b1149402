//! The system's ISA-L shared library (Debian's `libisal.so.2`), loaded at run time as an
//! independent reference: tests check that eckpt's matrices and parity are byte-identical to
//! its output, and `eckpt bench codec` measures it in the same run as eckpt's own kernels.
//!
//! It is opened with `RTLD_DEEPBIND` so its internal calls bind to its own symbols, not to the
//! ISA-L eckpt links statically (same symbol names, different versions).
//!
//! A crate of its own so that `libloading` is linked only by what measures or tests against
//! it (the CLI, the codec's tests), never by the libraries a rank links.

use std::os::raw::{c_int, c_uchar};

use libloading::os::unix::{Library, Symbol};

type GenMatrixFn = unsafe extern "C" fn(*mut c_uchar, c_int, c_int);
type InitTablesFn = unsafe extern "C" fn(c_int, c_int, *mut c_uchar, *mut c_uchar);
type EncodeFn = unsafe extern "C" fn(c_int, c_int, c_int, *mut c_uchar, *mut *mut c_uchar, *mut *mut c_uchar);
type UpdateFn =
    unsafe extern "C" fn(c_int, c_int, c_int, c_int, *mut c_uchar, *mut c_uchar, *mut *mut c_uchar);

/// Why the system library could not be used (typically: `libisal2` is not installed).
#[derive(Debug, thiserror::Error)]
#[error("system ISA-L {0}")]
pub struct LoadError(String);

/// Sonames tried in order.
const SONAMES: [&str; 2] = ["libisal.so.2", "libisal.so"];

/// Handles to the functions eckpt compares against.
pub struct SystemIsal {
    gen_rs: Symbol<GenMatrixFn>,
    gen_cauchy: Symbol<GenMatrixFn>,
    init_tables: Symbol<InitTablesFn>,
    encode: Symbol<EncodeFn>,
    update: Symbol<UpdateFn>,
    _library: Library,
}

impl SystemIsal {
    /// Loads the system library, or says why it could not (typically: `libisal2` not installed).
    pub fn load() -> Result<SystemIsal, LoadError> {
        let flags = libc::RTLD_NOW | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND;
        let mut errors = Vec::new();
        for soname in SONAMES {
            // SAFETY: loading ISA-L runs no initialisers with preconditions.
            match unsafe { Library::open(Some(soname), flags) } {
                Ok(library) => {
                    return Self::bind(library)
                        .map_err(|e| LoadError(format!("{soname} lacks a function: {e}")))
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        Err(LoadError(format!("not found ({})", errors.join("; "))))
    }

    fn bind(library: Library) -> Result<SystemIsal, libloading::Error> {
        // SAFETY: the signatures match ISA-L's erasure_code.h.
        unsafe {
            Ok(SystemIsal {
                gen_rs: library.get(b"gf_gen_rs_matrix\0")?,
                gen_cauchy: library.get(b"gf_gen_cauchy1_matrix\0")?,
                init_tables: library.get(b"ec_init_tables\0")?,
                encode: library.get(b"ec_encode_data\0")?,
                update: library.get(b"ec_encode_data_update\0")?,
                _library: library,
            })
        }
    }

    /// `gf_gen_rs_matrix` (`cauchy = false`) or `gf_gen_cauchy1_matrix`: the `(k+m) × k` generator.
    pub fn generator(&self, cauchy: bool, k: usize, m: usize) -> Vec<u8> {
        let mut a = vec![0u8; (k + m) * k];
        let f = if cauchy { &self.gen_cauchy } else { &self.gen_rs };
        // SAFETY: `a` holds (k+m)·k bytes.
        unsafe { f(a.as_mut_ptr(), (k + m) as c_int, k as c_int) };
        a
    }

    /// `ec_init_tables` for a `rows × k` coefficient matrix.
    pub fn init_tables(&self, k: usize, rows: usize, coefficients: &[u8]) -> Vec<u8> {
        assert_eq!(coefficients.len(), k * rows);
        let mut tables = vec![0u8; 32 * k * rows];
        let mut coefficients = coefficients.to_vec();
        // SAFETY: sizes as ISA-L documents them.
        unsafe {
            (self.init_tables)(
                k as c_int,
                rows as c_int,
                coefficients.as_mut_ptr(),
                tables.as_mut_ptr(),
            )
        };
        tables
    }

    /// `ec_encode_data`: `outputs = coefficients · inputs` with tables from [`Self::init_tables`].
    pub fn encode(&self, tables: &[u8], inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        let len = outputs[0].len();
        assert!(inputs.iter().all(|s| s.len() == len) && outputs.iter().all(|s| s.len() == len));
        assert_eq!(tables.len(), 32 * inputs.len() * outputs.len());
        assert!(len <= c_int::MAX as usize);
        let mut ins: Vec<*mut u8> = inputs.iter().map(|s| s.as_ptr() as *mut u8).collect();
        let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s.as_mut_ptr()).collect();
        // SAFETY: checked above; ISA-L reads the inputs and tables only.
        unsafe {
            (self.encode)(
                len as c_int,
                ins.len() as c_int,
                outs.len() as c_int,
                tables.as_ptr() as *mut u8,
                ins.as_mut_ptr(),
                outs.as_mut_ptr(),
            )
        };
    }

    /// `ec_encode_data_update`: `outputs ^= coefficients[.., col] · input`, for a map with `k` inputs.
    pub fn update(&self, tables: &[u8], k: usize, col: usize, input: &[u8], outputs: &mut [&mut [u8]]) {
        let len = input.len();
        assert!(outputs.iter().all(|s| s.len() == len) && col < k);
        assert_eq!(tables.len(), 32 * k * outputs.len());
        assert!(len <= c_int::MAX as usize);
        let mut outs: Vec<*mut u8> = outputs.iter_mut().map(|s| s.as_mut_ptr()).collect();
        // SAFETY: checked above.
        unsafe {
            (self.update)(
                len as c_int,
                k as c_int,
                outs.len() as c_int,
                col as c_int,
                tables.as_ptr() as *mut u8,
                input.as_ptr() as *mut u8,
                outs.as_mut_ptr(),
            )
        };
    }
}
