//! Where a context's regions gather their changed blocks: [`GATHER_SCRATCH`] bytes of device
//! memory and, for downloads into a caller's copy, as many bytes of page-locked host memory,
//! shared by every region of the context (one gathers at a time) and freed with its last
//! region. Owned by each region instead, they would cost 64 MiB of GPU memory and as much
//! page-locked host memory for every tensor a training job mirrors — hundreds of them.

use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard};

use super::driver::{CuContext, CuDevicePtr, Driver};
use crate::GpuError;

/// The scratch's size: more changed blocks than fit are gathered and copied in turns.
pub(super) const GATHER_SCRATCH: u64 = 64 << 20;

/// One context's space.
struct Space {
    context: usize,
    /// Device memory, `GATHER_SCRATCH` bytes; 0 when the device had no room (its regions then
    /// copy block range by block range).
    scratch: CuDevicePtr,
    /// Page-locked host memory, `GATHER_SCRATCH` bytes, once first asked for (null before).
    bounce: *mut c_void,
    /// The context's regions that joined and have not left.
    regions: usize,
}

// SAFETY: the pointers are driver allocations usable from any thread in their context, and
// are only used under the lock.
unsafe impl Send for Space {}

static SPACES: Mutex<Vec<Space>> = Mutex::new(Vec::new());

fn spaces() -> MutexGuard<'static, Vec<Space>> {
    // A thread that panicked holding the lock aborts the process (crash-only): not seen here.
    SPACES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A region of `context` (current on this thread) joins its context's space, which the first
/// one allocates.
pub(super) fn join(driver: &Driver, context: CuContext) {
    let mut spaces = spaces();
    if let Some(space) = spaces.iter_mut().find(|s| s.context == context as usize) {
        space.regions += 1;
        return;
    }
    let mut scratch = 0;
    // SAFETY: an out-pointer; the context is current (the caller's contract).
    let allocated = unsafe { (driver.mem_alloc)(&mut scratch, GATHER_SCRATCH as usize) };
    spaces.push(Space {
        context: context as usize,
        scratch: if allocated == 0 { scratch } else { 0 },
        bounce: std::ptr::null_mut(),
        regions: 1,
    });
}

/// A region of `context` (current on this thread) leaves its context's space; the last one
/// frees it.
pub(super) fn leave(driver: &Driver, context: CuContext) {
    let mut spaces = spaces();
    let Some(at) = spaces.iter().position(|s| s.context == context as usize) else {
        return;
    };
    spaces[at].regions -= 1;
    if spaces[at].regions > 0 {
        return;
    }
    let space = spaces.swap_remove(at);
    // SAFETY: allocated by `join` and `Gathering::bounce` in this context, freed once. Errors
    // are ignored: a context already destroyed took the memory with it.
    unsafe {
        if space.scratch != 0 {
            (driver.mem_free)(space.scratch);
        }
        if !space.bounce.is_null() {
            (driver.mem_free_host)(space.bounce);
        }
    }
}

/// A context's space, held by one region's gather until dropped.
pub(super) struct Gathering {
    spaces: MutexGuard<'static, Vec<Space>>,
    at: usize,
}

/// The space of `context`, which a region of it joined, held until the returned value drops.
pub(super) fn hold(context: CuContext) -> Gathering {
    let spaces = spaces();
    let at = spaces
        .iter()
        .position(|s| s.context == context as usize)
        .expect("a region joins its context's space at attach");
    Gathering { spaces, at }
}

impl Gathering {
    /// The device scratch, unless the device had no room for it.
    pub(super) fn scratch(&self) -> Option<CuDevicePtr> {
        Some(self.spaces[self.at].scratch).filter(|&s| s != 0)
    }

    /// The page-locked bounce buffer, allocated at the first call (the context current).
    pub(super) fn bounce(&mut self, driver: &Driver) -> Result<*mut u8, GpuError> {
        let space = &mut self.spaces[self.at];
        if space.bounce.is_null() {
            let mut bounce = std::ptr::null_mut();
            // SAFETY: an out-pointer; the caller pushed the context.
            let allocated = unsafe { (driver.mem_host_alloc)(&mut bounce, GATHER_SCRATCH as usize, 0) };
            driver.check("cuMemHostAlloc", allocated)?;
            space.bounce = bounce;
        }
        Ok(space.bounce.cast())
    }
}
