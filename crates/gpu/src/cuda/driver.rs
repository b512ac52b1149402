//! The CUDA driver API, loaded at run time from `libcuda.so.1` (the driver's own library, which
//! every machine with an NVIDIA driver has), so that eckpt builds without the CUDA toolkit and
//! runs where there is no GPU. Only the calls eckpt makes are bound; each returns a
//! [`GpuError::Driver`] naming the call and the driver's error.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

use libloading::Library;

use crate::GpuError;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuDevicePtr = u64;

/// `CU_POINTER_ATTRIBUTE_*` used here.
pub const POINTER_CONTEXT: c_int = 1;
pub const POINTER_MEMORY_TYPE: c_int = 2;
pub const POINTER_DEVICE_ORDINAL: c_int = 9;
pub const POINTER_RANGE_START: c_int = 11;
pub const POINTER_RANGE_SIZE: c_int = 12;
/// `CU_MEMORYTYPE_*`.
pub const MEMORY_DEVICE: c_uint = 2;
pub const MEMORY_UNIFIED: c_uint = 4;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR` / `_MINOR`.
pub const ATTRIBUTE_CC_MAJOR: c_int = 75;
pub const ATTRIBUTE_CC_MINOR: c_int = 76;

/// Resolves `name` in `library` as a function pointer of type `T`.
macro_rules! bind {
    ($library:expr, $name:literal) => {{
        // SAFETY: the type the caller assigns to matches the driver API's prototype.
        let symbol = unsafe { $library.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| format!("{}: {e}", $name))?;
        *symbol
    }};
}

/// The bound driver functions. The library stays loaded for the process's life.
pub struct Driver {
    pub get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub pointer_get_attribute: unsafe extern "C" fn(*mut c_void, c_int, CuDevicePtr) -> CuResult,
    pub device_primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    pub device_primary_ctx_release: unsafe extern "C" fn(CuDevice) -> CuResult,
    pub device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    pub device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    pub ctx_push_current: unsafe extern "C" fn(CuContext) -> CuResult,
    pub ctx_pop_current: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    pub ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    pub ctx_get_device: unsafe extern "C" fn(*mut CuDevice) -> CuResult,
    pub module_load_data: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    pub module_get_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    pub launch_kernel: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CuStream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    pub mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    pub mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    pub mem_host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult,
    pub mem_free_host: unsafe extern "C" fn(*mut c_void) -> CuResult,
    pub memcpy_dtoh_async: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, CuStream) -> CuResult,
    pub memcpy_htod_async: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize, CuStream) -> CuResult,
    pub stream_create: unsafe extern "C" fn(*mut CuStream, c_uint) -> CuResult,
    pub stream_synchronize: unsafe extern "C" fn(CuStream) -> CuResult,
    pub stream_destroy: unsafe extern "C" fn(CuStream) -> CuResult,
    _library: Library,
}

impl Driver {
    /// The process's driver: loaded and initialised at the first call; the reason it is not
    /// usable otherwise (no library, or `cuInit` failed: no device, driver/library mismatch).
    pub fn get() -> Result<&'static Driver, GpuError> {
        static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
        DRIVER
            .get_or_init(Driver::load)
            .as_ref()
            .map_err(|e| GpuError::Unavailable(e.clone()))
    }

    fn load() -> Result<Driver, String> {
        // SAFETY: loading the driver library runs its initialisers, which have no preconditions.
        let library = unsafe { Library::new("libcuda.so.1") }
            .map_err(|e| format!("the CUDA driver library libcuda.so.1 could not be loaded ({e})"))?;
        let init: unsafe extern "C" fn(c_uint) -> CuResult = bind!(library, "cuInit");
        let driver = Driver {
            get_error_name: bind!(library, "cuGetErrorName"),
            get_error_string: bind!(library, "cuGetErrorString"),
            pointer_get_attribute: bind!(library, "cuPointerGetAttribute"),
            device_primary_ctx_retain: bind!(library, "cuDevicePrimaryCtxRetain"),
            device_primary_ctx_release: bind!(library, "cuDevicePrimaryCtxRelease_v2"),
            device_get_attribute: bind!(library, "cuDeviceGetAttribute"),
            device_get_name: bind!(library, "cuDeviceGetName"),
            ctx_push_current: bind!(library, "cuCtxPushCurrent_v2"),
            ctx_pop_current: bind!(library, "cuCtxPopCurrent_v2"),
            ctx_synchronize: bind!(library, "cuCtxSynchronize"),
            ctx_get_device: bind!(library, "cuCtxGetDevice"),
            module_load_data: bind!(library, "cuModuleLoadData"),
            module_get_function: bind!(library, "cuModuleGetFunction"),
            launch_kernel: bind!(library, "cuLaunchKernel"),
            mem_alloc: bind!(library, "cuMemAlloc_v2"),
            mem_free: bind!(library, "cuMemFree_v2"),
            mem_host_alloc: bind!(library, "cuMemHostAlloc"),
            mem_free_host: bind!(library, "cuMemFreeHost"),
            memcpy_dtoh_async: bind!(library, "cuMemcpyDtoHAsync_v2"),
            memcpy_htod_async: bind!(library, "cuMemcpyHtoDAsync_v2"),
            stream_create: bind!(library, "cuStreamCreate"),
            stream_synchronize: bind!(library, "cuStreamSynchronize"),
            stream_destroy: bind!(library, "cuStreamDestroy_v2"),
            _library: library,
        };
        // SAFETY: cuInit takes flags that must be 0.
        let result = unsafe { init(0) };
        if result != 0 {
            return Err(format!("cuInit failed: {}", driver.describe(result)));
        }
        Ok(driver)
    }

    /// The driver's name and description of `result`.
    pub fn describe(&self, result: CuResult) -> String {
        let mut name: *const c_char = std::ptr::null();
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: both calls store a pointer to a static string, or leave null.
        unsafe {
            (self.get_error_name)(result, &mut name);
            (self.get_error_string)(result, &mut text);
        }
        let read = |p: *const c_char| {
            // SAFETY: a non-null result is a NUL-terminated static string of the driver.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        match (read(name), read(text)) {
            (Some(name), Some(text)) => format!("{name} ({text})"),
            (Some(name), None) => name,
            _ => format!("error {result}"),
        }
    }

    /// `Ok` for `CUDA_SUCCESS`, else the error naming `call`.
    pub fn check(&self, call: &'static str, result: CuResult) -> Result<(), GpuError> {
        if result == 0 {
            Ok(())
        } else {
            Err(GpuError::Driver {
                call,
                error: self.describe(result),
            })
        }
    }
}

/// Makes a context current on this thread for the guard's life (the driver keeps a stack per
/// thread, so the application's own current context is back afterwards).
pub struct CurrentContext<'a> {
    driver: &'a Driver,
}

impl<'a> CurrentContext<'a> {
    pub fn push(driver: &'a Driver, context: CuContext) -> Result<Self, GpuError> {
        // SAFETY: `context` is a live context (retained by the caller).
        driver.check("cuCtxPushCurrent", unsafe { (driver.ctx_push_current)(context) })?;
        Ok(CurrentContext { driver })
    }
}

impl Drop for CurrentContext<'_> {
    fn drop(&mut self) {
        let mut popped: CuContext = std::ptr::null_mut();
        // SAFETY: pops the context `push` pushed on this thread.
        unsafe { (self.driver.ctx_pop_current)(&mut popped) };
    }
}
