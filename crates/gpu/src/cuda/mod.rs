//! [`Cuda`]: the [`Device`] implementation over NVIDIA GPUs, through the driver API loaded at
//! run time ([`driver`]) and a kernel compiled by NVRTC at first use ([`nvrtc`]).
//!
//! A region lives in the context that owns its allocation (the application's — torch's and
//! cupy's primary context, or one a C program created); every call pushes that context for
//! its duration. Its fingerprints and change flags stay in device memory; its staging buffer
//! is page-locked host memory of the region's size, allocated once at first use, so that each
//! copy runs at the bus's speed and a checkpoint allocates nothing after its first (a region
//! that only downloads blocks into a copy of the caller's has none).

mod driver;
mod gather_space;
mod nvrtc;

use std::ffi::{c_int, c_uint, c_void, CString};
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

use driver::{CuContext, CuDevice, CuDevicePtr, CuFunction, CuStream, CurrentContext, Driver};

use crate::device::{block_count, Device, DeviceRegion};
use crate::fingerprint::{block_len, byte_ranges};
use crate::GpuError;
use gather_space::GATHER_SCRATCH;

/// The kernels' source (`kernels.cu`), compiled by NVRTC for the GPU in use.
const KERNELS: &str = include_str!("kernels.cu");
/// Threads per block of the kernels, and the most blocks of a launch (they stride).
const THREADS: c_uint = 256;
const MAX_GRID: u64 = 65_536;
/// A download copies a whole region when more than this fraction (1/N) of it changed.
const WHOLE_COPY_ABOVE: u64 = 8;
/// Up to this many runs of changed blocks are copied straight to their place, one copy each;
/// more are gathered first (a copy costs the bus's latency: 150 µs each on an H100).
const DIRECT_COPIES: usize = 8;

/// The kernels of one context.
#[derive(Clone, Copy)]
struct Kernels {
    fingerprint: CuFunction,
    gather: CuFunction,
}

// SAFETY: function handles are plain driver handles, usable from any thread.
unsafe impl Send for Kernels {}

/// NVIDIA GPUs through the CUDA driver.
pub struct Cuda {
    driver: &'static Driver,
    /// The kernels per context they were loaded in: compiled once per process and loaded once
    /// per context.
    kernels: Mutex<Vec<(usize, Kernels)>>,
}

impl Cuda {
    /// The process's CUDA driver, or why there is none usable ([`GpuError::Unavailable`]).
    pub fn open() -> Result<&'static Cuda, GpuError> {
        static CUDA: OnceLock<Cuda> = OnceLock::new();
        let driver = Driver::get()?;
        Ok(CUDA.get_or_init(|| Cuda {
            driver,
            kernels: Mutex::new(Vec::new()),
        }))
    }

    /// An attribute of the pointer `ptr`, as the driver stores it into a `T`.
    fn pointer_attribute<T: Default>(&self, ptr: u64, attribute: c_int) -> Result<T, GpuError> {
        let mut value = T::default();
        // SAFETY: `value` has the size of the attribute's type (the callers pair them).
        let result =
            unsafe { (self.driver.pointer_get_attribute)((&mut value as *mut T).cast(), attribute, ptr) };
        self.driver.check("cuPointerGetAttribute", result).map(|()| value)
    }

    /// The kernels in the current context `context` (compiled at first use).
    fn kernels(&self, context: CuContext, device: CuDevice) -> Result<Kernels, GpuError> {
        let mut kernels = self
            .kernels
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(&(_, loaded)) = kernels.iter().find(|(c, _)| *c == context as usize) {
            return Ok(loaded);
        }
        let d = self.driver;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: out-pointers to ints; `device` is a valid ordinal.
        unsafe {
            d.check(
                "cuDeviceGetAttribute",
                (d.device_get_attribute)(&mut major, driver::ATTRIBUTE_CC_MAJOR, device),
            )?;
            d.check(
                "cuDeviceGetAttribute",
                (d.device_get_attribute)(&mut minor, driver::ATTRIBUTE_CC_MINOR, device),
            )?;
        }
        let ptx = nvrtc::compile_ptx(KERNELS, "eckpt_kernels.cu", major, minor)?;
        let mut module = std::ptr::null_mut();
        // SAFETY: `ptx` is NUL-terminated PTX; the context is current.
        d.check("cuModuleLoadData", unsafe {
            (d.module_load_data)(&mut module, ptx.as_ptr().cast())
        })?;
        let function = |name: &str| {
            let name = CString::new(name).expect("no NUL");
            let mut function = std::ptr::null_mut();
            // SAFETY: a module loaded above; a NUL-terminated name.
            let found = unsafe { (d.module_get_function)(&mut function, module, name.as_ptr()) };
            d.check("cuModuleGetFunction", found).map(|()| function)
        };
        let loaded = Kernels {
            fingerprint: function("eckpt_fingerprint")?,
            gather: function("eckpt_gather")?,
        };
        kernels.push((context as usize, loaded));
        Ok(loaded)
    }

    fn device_name(&self, device: CuDevice) -> String {
        let mut name = [0 as std::ffi::c_char; 128];
        // SAFETY: the buffer's length is passed.
        let result = unsafe { (self.driver.device_get_name)(name.as_mut_ptr(), name.len() as c_int, device) };
        if result != 0 {
            return format!("CUDA device {device}");
        }
        // SAFETY: the driver wrote a NUL-terminated name within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy();
        format!("CUDA device {device} ({name})")
    }
}

impl Device for Cuda {
    unsafe fn attach(&self, ptr: u64, len: u64, block: u64) -> Result<Box<dyn DeviceRegion>, GpuError> {
        let nblocks = block_count(len, block)?;
        let not_device = |e: GpuError| GpuError::InvalidRegion(format!("{ptr:#x} is not CUDA memory: {e}"));
        let kind: c_uint = self
            .pointer_attribute(ptr, driver::POINTER_MEMORY_TYPE)
            .map_err(not_device)?;
        if kind != driver::MEMORY_DEVICE && kind != driver::MEMORY_UNIFIED {
            return Err(GpuError::InvalidRegion(format!(
                "{ptr:#x} is host memory registered with CUDA, not device memory: protect it as host memory"
            )));
        }
        let start: CuDevicePtr = self.pointer_attribute(ptr, driver::POINTER_RANGE_START)?;
        let size: usize = self.pointer_attribute(ptr, driver::POINTER_RANGE_SIZE)?;
        let end = ptr
            .checked_add(len)
            .ok_or_else(|| GpuError::InvalidRegion("address range overflows".into()))?;
        if end > start + size as u64 {
            return Err(GpuError::InvalidRegion(format!(
                "{len} bytes at {ptr:#x} run {} bytes past the end of their allocation ({size} bytes at {start:#x})",
                end - (start + size as u64)
            )));
        }
        let ordinal: c_int = self.pointer_attribute(ptr, driver::POINTER_DEVICE_ORDINAL)?;
        // Memory of a stream-ordered pool or of the virtual memory API belongs to no context
        // (the query fails or says none).
        let mut context: CuContext = self
            .pointer_attribute(ptr, driver::POINTER_CONTEXT)
            .unwrap_or(std::ptr::null_mut());
        let d = self.driver;
        // Such memory is worked on in the device's primary context, retained for the region's
        // life.
        let retained_primary = context.is_null();
        if retained_primary {
            // SAFETY: out-pointer; a valid ordinal.
            d.check("cuDevicePrimaryCtxRetain", unsafe {
                (d.device_primary_ctx_retain)(&mut context, ordinal)
            })?;
        }
        let mut region = CudaRegion {
            driver: d,
            name: self.device_name(ordinal),
            ptr,
            len,
            block,
            nblocks,
            context,
            ordinal,
            retained_primary,
            kernels: None,
            stream: std::ptr::null_mut(),
            prints: 0,
            changed: 0,
            list: 0,
            joined: false,
            staging: std::ptr::null_mut(),
            flags: vec![0; nblocks as usize],
            scanned: false,
        };
        // On failure below, dropping `region` frees what was allocated so far.
        let _current = CurrentContext::push(d, context)?;
        let mut device: CuDevice = 0;
        // SAFETY: out-pointers; the context is current; sizes as allocated.
        unsafe {
            d.check("cuCtxGetDevice", (d.ctx_get_device)(&mut device))?;
            region.kernels = Some(self.kernels(context, device)?);
            d.check("cuStreamCreate", (d.stream_create)(&mut region.stream, 1))?;
            d.check(
                "cuMemAlloc",
                (d.mem_alloc)(&mut region.prints, nblocks as usize * 8),
            )?;
            d.check("cuMemAlloc", (d.mem_alloc)(&mut region.changed, nblocks as usize))?;
            d.check(
                "cuMemAlloc",
                (d.mem_alloc)(&mut region.list, nblocks as usize * 8),
            )?;
        }
        gather_space::join(d, context);
        region.joined = true;
        Ok(Box::new(region))
    }
}

/// One attached range of GPU memory.
struct CudaRegion {
    driver: &'static Driver,
    /// "CUDA device N (name)", for messages.
    name: String,
    ptr: CuDevicePtr,
    len: u64,
    block: u64,
    nblocks: u64,
    context: CuContext,
    ordinal: CuDevice,
    /// Whether `context` is the device's primary context retained by `attach`.
    retained_primary: bool,
    kernels: Option<Kernels>,
    stream: CuStream,
    /// Device arrays: the last scan's fingerprints (u64 per block), change flags (u8), and the
    /// list of blocks to gather (u64 each).
    prints: CuDevicePtr,
    changed: CuDevicePtr,
    list: CuDevicePtr,
    /// Whether the region joined its context's gather space (`gather_space`), which it leaves
    /// when dropped.
    joined: bool,
    /// Page-locked host memory, `len` bytes, once first used (null before).
    staging: *mut c_void,
    /// The change flags copied back.
    flags: Vec<u8>,
    /// Whether a scan ran (the fingerprints on the device are meaningful).
    scanned: bool,
}

// SAFETY: the driver's handles may be used from any thread once their context is pushed, which
// every method does; the region is used through `&mut self` only.
unsafe impl Send for CudaRegion {}

impl CudaRegion {
    fn kernels(&self) -> Kernels {
        self.kernels.expect("set by attach")
    }

    /// Launches `function` over `grid` blocks on the region's stream.
    ///
    /// # Safety
    /// `params` must point to the kernel's arguments, in order and of its types; the region's
    /// context must be current.
    unsafe fn launch(
        &self,
        function: CuFunction,
        grid: u64,
        params: &mut [*mut c_void],
    ) -> Result<(), GpuError> {
        let d = self.driver;
        // SAFETY: forwarded from this function's contract; the driver copies the arguments.
        let launched = unsafe {
            (d.launch_kernel)(
                function,
                grid.clamp(1, MAX_GRID) as c_uint,
                1,
                1,
                THREADS,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        d.check("cuLaunchKernel", launched).map_err(|e| self.named(e))
    }

    /// Bytes of blocks `blocks` (the region's last block is shorter).
    fn bytes_of(&self, blocks: &[u64]) -> u64 {
        blocks.iter().map(|&b| block_len(b, self.block, self.len)).sum()
    }

    /// The staging buffer, allocated at the first call (the region's context is current).
    fn allocated_staging(&mut self) -> Result<*mut c_void, GpuError> {
        if self.staging.is_null() {
            let d = self.driver;
            // SAFETY: an out-pointer; the callers push the region's context.
            let allocated = unsafe { (d.mem_host_alloc)(&mut self.staging, self.len as usize, 0) };
            d.check("cuMemHostAlloc", allocated).map_err(|e| self.named(e))?;
        }
        Ok(self.staging)
    }

    /// Queues a copy of `len` bytes at device address `from` to staging offset `at`.
    fn download(&mut self, at: u64, from: CuDevicePtr, len: u64) -> Result<(), GpuError> {
        assert!(at + len <= self.len, "a copy beyond the staging buffer");
        let staging = self.allocated_staging()?;
        // SAFETY: inside the staging buffer (`len` bytes; checked) and, by the callers, inside
        // device memory.
        unsafe { self.download_to(staging.cast::<u8>().add(at as usize), from, len) }
    }

    /// Queues a copy of `len` bytes at device address `from` to host address `to`.
    ///
    /// # Safety
    /// `to` is valid for writes of `len` bytes until the stream is synchronised.
    unsafe fn download_to(&self, to: *mut u8, from: CuDevicePtr, len: u64) -> Result<(), GpuError> {
        // SAFETY: the caller's contract for `to`; the callers pass device ranges of the region.
        let copied = unsafe { (self.driver.memcpy_dtoh_async)(to.cast(), from, len as usize, self.stream) };
        self.driver
            .check("cuMemcpyDtoHAsync", copied)
            .map_err(|e| self.named(e))
    }

    /// Uploads the list of `blocks` to gather and cuts it into the turns the scratch holds:
    /// `(index of the turn's first block in the list, the turn's blocks)`.
    fn gather_turns<'b>(
        &self,
        blocks: &'b [u64],
    ) -> Result<impl Iterator<Item = (usize, &'b [u64])>, GpuError> {
        let d = self.driver;
        assert!(
            blocks.len() as u64 <= self.nblocks,
            "more blocks than the region has"
        );
        // SAFETY: `blocks` (at most `nblocks` entries, checked) into the list array of
        // `nblocks`; a copy from pageable memory is complete when the call returns.
        let uploaded = unsafe {
            (d.memcpy_htod_async)(self.list, blocks.as_ptr().cast(), blocks.len() * 8, self.stream)
        };
        d.check("cuMemcpyHtoDAsync", uploaded)
            .map_err(|e| self.named(e))?;
        // The callers gather only blocks no larger than the scratch.
        let per_turn = (GATHER_SCRATCH / self.block) as usize;
        Ok(blocks
            .chunks(per_turn)
            .enumerate()
            .map(move |(turn, batch)| (turn * per_turn, batch)))
    }

    /// Queues the gather of `batch`, the blocks at `first..` of the uploaded list, packed into
    /// `scratch`.
    fn gather(&self, first: usize, batch: &[u64], scratch: CuDevicePtr) -> Result<(), GpuError> {
        let (mut base, mut len, mut block) = (self.ptr, self.len, self.block);
        let mut list = self.list + (first * 8) as u64;
        let (mut count, mut out) = (batch.len() as u64, scratch);
        let mut params: [*mut c_void; 6] = [
            (&mut base as *mut u64).cast(),
            (&mut len as *mut u64).cast(),
            (&mut block as *mut u64).cast(),
            (&mut list as *mut u64).cast(),
            (&mut count as *mut u64).cast(),
            (&mut out as *mut u64).cast(),
        ];
        // SAFETY: the parameters match `eckpt_gather`'s signature; the list holds `count`
        // block indices of the region from `first`; the scratch holds a turn's blocks.
        unsafe { self.launch(self.kernels().gather, count, &mut params) }
    }

    fn context(&self) -> Result<CurrentContext<'static>, GpuError> {
        CurrentContext::push(self.driver, self.context)
    }

    fn sync(&self) -> Result<(), GpuError> {
        // SAFETY: the region's stream, in the current context.
        let result = unsafe { (self.driver.stream_synchronize)(self.stream) };
        self.driver
            .check("cuStreamSynchronize", result)
            .map_err(|e| self.named(e))
    }

    /// Adds the device's name to a driver error.
    fn named(&self, e: GpuError) -> GpuError {
        match e {
            GpuError::Driver { call, error } => GpuError::Driver {
                call,
                error: format!("{error} on {}", self.name),
            },
            other => other,
        }
    }
}

impl DeviceRegion for CudaRegion {
    fn address(&self) -> u64 {
        self.ptr
    }

    fn size(&self) -> u64 {
        self.len
    }

    fn block_size(&self) -> u64 {
        self.block
    }

    fn changed_blocks(&mut self, all: bool) -> Result<Vec<u64>, GpuError> {
        let d = self.driver;
        let _current = self.context()?;
        // The application's kernels may still be writing the region.
        // SAFETY: the region's context is current.
        d.check("cuCtxSynchronize", unsafe { (d.ctx_synchronize)() })
            .map_err(|e| self.named(e))?;
        let (mut base, mut len, mut block, mut nblocks) = (self.ptr, self.len, self.block, self.nblocks);
        let (mut prints, mut changed) = (self.prints, self.changed);
        let mut all = c_int::from(all || !self.scanned);
        let mut params: [*mut c_void; 7] = [
            (&mut base as *mut u64).cast(),
            (&mut len as *mut u64).cast(),
            (&mut block as *mut u64).cast(),
            (&mut nblocks as *mut u64).cast(),
            (&mut prints as *mut u64).cast(),
            (&mut changed as *mut u64).cast(),
            (&mut all as *mut c_int).cast(),
        ];
        // SAFETY: the parameters match `eckpt_fingerprint`'s signature; the arrays hold
        // `nblocks` entries; the context is current.
        unsafe {
            self.launch(self.kernels().fingerprint, self.nblocks, &mut params)?;
            let copied = (d.memcpy_dtoh_async)(
                self.flags.as_mut_ptr().cast(),
                self.changed,
                self.flags.len(),
                self.stream,
            );
            d.check("cuMemcpyDtoHAsync", copied).map_err(|e| self.named(e))?;
        }
        self.sync()?;
        self.scanned = true;
        Ok(self
            .flags
            .iter()
            .enumerate()
            .filter(|(_, &f)| f != 0)
            .map(|(i, _)| i as u64)
            .collect())
    }

    fn stage(&mut self, blocks: &[u64]) -> Result<(), GpuError> {
        let _current = self.context()?;
        if blocks.len() as u64 == self.nblocks {
            self.download(0, self.ptr, self.len)?;
            return self.sync();
        }
        let space = gather_space::hold(self.context);
        let Some(scratch) = space.scratch().filter(|_| self.block <= GATHER_SCRATCH) else {
            // No room on the device to gather: one copy per run of neighbouring blocks.
            let mut at = 0;
            for (offset, n) in byte_ranges(blocks, self.block, self.len) {
                self.download(at, self.ptr + offset, n)?;
                at += n;
            }
            return self.sync();
        };
        // Each turn's copy out of the scratch goes on while the next is gathered: the stream
        // orders each gather after the previous copy.
        let mut at = 0;
        for (first, batch) in self.gather_turns(blocks)? {
            self.gather(first, batch, scratch)?;
            let bytes = self.bytes_of(batch);
            self.download(at, scratch, bytes)?;
            at += bytes;
        }
        self.sync()
    }

    fn staging(&self) -> &[u8] {
        if self.staging.is_null() {
            return &[];
        }
        // SAFETY: `len` bytes of page-locked memory owned by the region; `stage` waits for its
        // copies, so none is in flight.
        unsafe { std::slice::from_raw_parts(self.staging.cast::<u8>(), self.len as usize) }
    }

    fn staging_mut(&mut self) -> Result<&mut [u8], GpuError> {
        let staging = {
            let _current = self.context()?;
            self.allocated_staging()?
        };
        // SAFETY: `len` bytes of page-locked memory owned by the region; no copy is in flight.
        Ok(unsafe { std::slice::from_raw_parts_mut(staging.cast::<u8>(), self.len as usize) })
    }

    unsafe fn download_blocks(&mut self, blocks: &[u64], into: *mut u8) -> Result<(), GpuError> {
        let _current = self.context()?;
        // More than an eighth of the region changed: one copy of all of it costs less than
        // putting that many gathered blocks in place on the host (30 % of 2 GiB of tensors:
        // 98 ms gathered, 39 ms whole, on an H200).
        let ranges = match self.bytes_of(blocks) > self.len / WHOLE_COPY_ABOVE {
            true => vec![(0, self.len)],
            false => byte_ranges(blocks, self.block, self.len),
        };
        let mut space = gather_space::hold(self.context);
        // The bounce buffer at the first call, which copies every block (no block was scanned
        // before), so that no later one, copying a few, pays for its allocation.
        let bounce = space.bounce(self.driver).map_err(|e| self.named(e))?;
        let scratch = space
            .scratch()
            .filter(|_| ranges.len() > DIRECT_COPIES && self.block <= GATHER_SCRATCH);
        let Some(scratch) = scratch else {
            for (offset, n) in ranges {
                // SAFETY: the caller's contract: `into` holds the region's length, and the
                // ranges lie inside the region; the copies are waited for below.
                unsafe { self.download_to(into.add(offset as usize), self.ptr + offset, n)? };
            }
            return self.sync();
        };
        // Scattered blocks: a copy per range costs the bus's latency each, so they are gathered
        // on the device, copied in one transfer per turn, and put in place by the host.
        for (first, batch) in self.gather_turns(blocks)? {
            self.gather(first, batch, scratch)?;
            // SAFETY: the bounce buffer holds a turn's blocks; waited for before it is read.
            unsafe { self.download_to(bounce, scratch, self.bytes_of(batch))? };
            self.sync()?;
            let mut at = 0;
            for &b in batch {
                let n = block_len(b, self.block, self.len);
                // SAFETY: block `b` lies inside the region, so inside `into` (the caller's
                // contract); the bounce buffer holds the turn's packed blocks.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bounce.add(at as usize),
                        into.add((b * self.block) as usize),
                        n as usize,
                    )
                };
                at += n;
            }
        }
        Ok(())
    }

    unsafe fn start_restore(&mut self, range: Range<usize>) -> Result<(), GpuError> {
        assert!(
            range.start <= range.end && range.end as u64 <= self.len && !self.staging.is_null(),
            "restore range {range:?} outside the region's staging buffer"
        );
        let d = self.driver;
        let _current = self.context()?;
        // SAFETY: `range` of the staging buffer to the same range of the region, both
        // allocated `len` bytes; the caller does not write the range again before the next
        // scan, which waits for the copy (the context's synchronisation covers this stream).
        let copied = unsafe {
            (d.memcpy_htod_async)(
                self.ptr + range.start as u64,
                self.staging.cast_const().cast::<u8>().add(range.start).cast(),
                range.len(),
                self.stream,
            )
        };
        d.check("cuMemcpyHtoDAsync", copied).map_err(|e| self.named(e))
    }
}

impl Drop for CudaRegion {
    fn drop(&mut self) {
        let d = self.driver;
        // Errors are ignored: nothing can be done about them while dropping, and a context
        // already destroyed took these allocations with it.
        if let Ok(_current) = self.context() {
            // SAFETY: each handle was created by `attach` in this context and is freed once.
            unsafe {
                if !self.stream.is_null() {
                    (d.stream_destroy)(self.stream);
                }
                if self.prints != 0 {
                    (d.mem_free)(self.prints);
                }
                for buffer in [self.changed, self.list] {
                    if buffer != 0 {
                        (d.mem_free)(buffer);
                    }
                }
                if !self.staging.is_null() {
                    (d.mem_free_host)(self.staging);
                }
                if self.joined {
                    gather_space::leave(d, self.context);
                }
            }
        }
        if self.retained_primary {
            // SAFETY: releases the retain of `attach`.
            unsafe { (d.device_primary_ctx_release)(self.ordinal) };
        }
    }
}
