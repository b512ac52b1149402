//! NVRTC, CUDA's run-time compiler, loaded at run time: the fingerprint kernel is compiled for
//! the GPU it runs on, at its first use in a process, so that eckpt needs neither the CUDA
//! toolkit to build nor a PTX file matched to a driver version.

use std::ffi::{c_char, c_int, CStr, CString};

use libloading::Library;

use crate::GpuError;

type Program = *mut std::ffi::c_void;

/// NVRTC's sonames, newest first (each CUDA major version ships its own).
const SONAMES: [&str; 5] = [
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
    "libnvrtc.so.11.1",
    "libnvrtc.so",
];

/// Compiles `source` to PTX for compute capability `major.minor`.
pub fn compile_ptx(source: &str, name: &str, major: c_int, minor: c_int) -> Result<CString, GpuError> {
    let mut refusals = Vec::new();
    let library = SONAMES
        .iter()
        // SAFETY: loading NVRTC runs no initialisers with preconditions.
        .find_map(|soname| match unsafe { Library::new(soname) } {
            Ok(library) => Some(library),
            Err(e) => {
                refusals.push(e.to_string());
                None
            }
        })
        .ok_or_else(|| {
            GpuError::Unavailable(format!(
                "NVRTC (libnvrtc.so), which compiles the fingerprint kernel, was not found: {}",
                refusals.join("; ")
            ))
        })?;
    compile_with(&library, source, name, major, minor).map_err(GpuError::Compile)
}

fn compile_with(
    library: &Library,
    source: &str,
    name: &str,
    major: c_int,
    minor: c_int,
) -> Result<CString, String> {
    macro_rules! bind {
        ($name:literal) => {{
            // SAFETY: the type assigned to matches NVRTC's prototype.
            *unsafe { library.get(concat!($name, "\0").as_bytes()) }.map_err(|e| format!("{}: {e}", $name))?
        }};
    }
    let create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int = bind!("nvrtcCreateProgram");
    let compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int =
        bind!("nvrtcCompileProgram");
    let ptx_size: unsafe extern "C" fn(Program, *mut usize) -> c_int = bind!("nvrtcGetPTXSize");
    let get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> c_int = bind!("nvrtcGetPTX");
    let log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int = bind!("nvrtcGetProgramLogSize");
    let get_log: unsafe extern "C" fn(Program, *mut c_char) -> c_int = bind!("nvrtcGetProgramLog");
    let destroy: unsafe extern "C" fn(*mut Program) -> c_int = bind!("nvrtcDestroyProgram");
    let error_string: unsafe extern "C" fn(c_int) -> *const c_char = bind!("nvrtcGetErrorString");
    let describe = |result: c_int| {
        // SAFETY: NVRTC returns a static NUL-terminated string for any result.
        unsafe { CStr::from_ptr(error_string(result)) }
            .to_string_lossy()
            .into_owned()
    };

    let source = CString::new(source).map_err(|e| e.to_string())?;
    let name = CString::new(name).map_err(|e| e.to_string())?;
    let mut program: Program = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers.
    let created = unsafe {
        create(
            &mut program,
            source.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if created != 0 {
        return Err(format!("nvrtcCreateProgram: {}", describe(created)));
    }
    let arch = CString::new(format!("--gpu-architecture=compute_{major}{minor}")).expect("no NUL");
    let options = [arch.as_ptr()];
    // SAFETY: `program` was created above; the options outlive the call.
    let compiled = unsafe { compile(program, options.len() as c_int, options.as_ptr()) };
    let result = if compiled != 0 {
        let mut n = 0usize;
        // SAFETY: `program` is live; the buffer has the size NVRTC reported.
        let log = unsafe {
            log_size(program, &mut n);
            let mut log = vec![0u8; n.max(1)];
            get_log(program, log.as_mut_ptr().cast());
            String::from_utf8_lossy(&log)
                .trim_end_matches('\0')
                .trim()
                .to_string()
        };
        Err(format!("nvrtcCompileProgram: {}: {log}", describe(compiled)))
    } else {
        let mut n = 0usize;
        // SAFETY: as above.
        unsafe {
            ptx_size(program, &mut n);
            let mut ptx = vec![0u8; n.max(1)];
            get_ptx(program, ptx.as_mut_ptr().cast());
            let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
            ptx.truncate(end);
            CString::new(ptx).map_err(|e| e.to_string())
        }
    };
    // SAFETY: `program` is live and destroyed once.
    unsafe { destroy(&mut program) };
    result
}
