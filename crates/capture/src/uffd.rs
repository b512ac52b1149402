//! Kernel write tracking: userfaultfd asynchronous write-protect + `PAGEMAP_SCAN`.
//!
//! With `UFFD_FEATURE_WP_ASYNC` the kernel resolves write faults on protected pages by itself
//! (no fault thread), leaving the page marked "written" (uffd-wp bit cleared). `PAGEMAP_SCAN`
//! with `PM_SCAN_WP_MATCHING` reports those pages and re-protects them in the same walk, so one
//! ioctl per region both reads the dirty set and re-arms tracking (Linux >= 6.7).
//!
//! Debian's headers predate these interfaces, so the constants are written out here from the
//! kernel's uapi `linux/userfaultfd.h` and `linux/fs.h`.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use crate::align::{page_size, AlignedBuf};

const fn ioc(dir: u64, ty: u64, nr: u64, size: u64) -> u64 {
    (dir << 30) | (size << 16) | (ty << 8) | nr
}
const IOC_READ: u64 = 2;
const IOC_RW: u64 = 3;

const UFFD_API: u64 = 0xAA;
const UFFDIO: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const UFFDIO_WRITEPROTECT_NR: u64 = 0x06;

const UFFDIO_API_IOC: u64 = ioc(IOC_RW, UFFDIO, 0x3F, size_of::<UffdioApi>() as u64);
const UFFDIO_REGISTER_IOC: u64 = ioc(IOC_RW, UFFDIO, 0x00, size_of::<UffdioRegister>() as u64);
const UFFDIO_UNREGISTER_IOC: u64 = ioc(IOC_READ, UFFDIO, 0x01, size_of::<UffdioRange>() as u64);
const UFFDIO_WRITEPROTECT_IOC: u64 = ioc(
    IOC_RW,
    UFFDIO,
    UFFDIO_WRITEPROTECT_NR,
    size_of::<UffdioWriteprotect>() as u64,
);

const PAGEMAP_SCAN_IOC: u64 = ioc(IOC_RW, b'f' as u64, 16, size_of::<PmScanArg>() as u64);
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
/// `PAGE_IS_WRITTEN` from linux/fs.h (bit 1; bit 0 is `PAGE_IS_WPALLOWED`).
const PAGE_IS_WRITTEN: u64 = 1 << 1;

/// Page ranges fetched per `PAGEMAP_SCAN` call.
const SCAN_VEC_LEN: usize = 1024;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

fn ioctl<T>(fd: &impl AsRawFd, req: u64, arg: &mut T) -> io::Result<libc::c_int> {
    // SAFETY: `arg` is a live, correctly sized #[repr(C)] struct matching `req`'s encoding.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn ctx(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A userfaultfd in async write-protect mode plus an open `/proc/self/pagemap` for scanning.
pub(crate) struct Uffd {
    fd: OwnedFd,
    pagemap: File,
    vec: Vec<PageRegion>,
}

impl Uffd {
    /// Opens a userfaultfd and negotiates async write-protect. `WP_UNPOPULATED` is requested
    /// too (so never-touched pages are protected and a mere read of them does not look like a
    /// write) but is optional: without it tracking stays correct, only reads of untouched pages
    /// may show up as dirty.
    pub(crate) fn open() -> io::Result<Self> {
        let fd = Self::api(UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED)
            .or_else(|_| Self::api(UFFD_FEATURE_WP_ASYNC))?;
        let pagemap = File::open("/proc/self/pagemap").map_err(|e| ctx("open pagemap", e))?;
        Ok(Self {
            fd,
            pagemap,
            vec: vec![PageRegion::default(); SCAN_VEC_LEN],
        })
    }

    fn api(features: u64) -> io::Result<OwnedFd> {
        // SAFETY: plain syscall; the returned descriptor is checked and then owned.
        let raw = unsafe {
            libc::syscall(
                libc::SYS_userfaultfd,
                libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
            )
        };
        if raw < 0 {
            return Err(ctx("userfaultfd", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as libc::c_int) };
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        ioctl(&fd, UFFDIO_API_IOC, &mut api).map_err(|e| ctx("UFFDIO_API", e))?;
        if api.features & UFFD_FEATURE_WP_ASYNC == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "kernel lacks UFFD_FEATURE_WP_ASYNC",
            ));
        }
        Ok(fd)
    }

    /// Registers `[start, start+len)` (page aligned) for write-protect tracking. Nothing is
    /// protected yet: [`Uffd::protect`] arms it.
    pub(crate) fn register(&self, start: usize, len: usize) -> io::Result<()> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(&self.fd, UFFDIO_REGISTER_IOC, &mut reg).map_err(|e| ctx("UFFDIO_REGISTER", e))?;
        if reg.ioctls & (1 << UFFDIO_WRITEPROTECT_NR) == 0 {
            // Leave no half-registered range behind.
            let _ = self.unregister(start, len);
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "range does not support UFFDIO_WRITEPROTECT",
            ));
        }
        Ok(())
    }

    /// Stops tracking `[start, start+len)` and drops its write protection.
    pub(crate) fn unregister(&self, start: usize, len: usize) -> io::Result<()> {
        let mut range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        ioctl(&self.fd, UFFDIO_UNREGISTER_IOC, &mut range)
            .map(drop)
            .map_err(|e| ctx("UFFDIO_UNREGISTER", e))
    }

    /// Write-protects the whole range, so that every later write is recorded.
    pub(crate) fn protect(&self, start: usize, len: usize) -> io::Result<()> {
        let mut wp = UffdioWriteprotect {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        ioctl(&self.fd, UFFDIO_WRITEPROTECT_IOC, &mut wp)
            .map(drop)
            .map_err(|e| ctx("UFFDIO_WRITEPROTECT", e))
    }

    /// Appends the indices (relative to `start`) of pages written since they were last
    /// protected, and re-protects them atomically.
    ///
    /// The scan stops early when its output vector is full; `walk_end` has been unreliable on
    /// some kernels, so the loop instead continues from the end of the last reported range for
    /// as long as the vector comes back full, and stops on the first short answer.
    pub(crate) fn scan_written(&mut self, start: usize, len: usize, out: &mut Vec<u64>) -> io::Result<()> {
        let page = page_size() as u64;
        let end = (start + len) as u64;
        let mut from = start as u64;
        while from < end {
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: from,
                end,
                walk_end: 0,
                vec: self.vec.as_mut_ptr() as u64,
                vec_len: self.vec.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: PAGE_IS_WRITTEN,
                category_anyof_mask: 0,
                return_mask: PAGE_IS_WRITTEN,
            };
            let n = ioctl(&self.pagemap, PAGEMAP_SCAN_IOC, &mut arg).map_err(|e| ctx("PAGEMAP_SCAN", e))?
                as usize;
            for r in &self.vec[..n] {
                let (s, e) = (r.start.max(start as u64), r.end.min(end));
                out.extend((s..e).step_by(page as usize).map(|a| (a - start as u64) / page));
            }
            if n < self.vec.len() {
                break;
            }
            from = self.vec[n - 1].end;
        }
        Ok(())
    }
}

/// Whether async write-protect tracking works here: probed once per process by a full cycle
/// (register, protect, write one page of two, scan) so that "available" means "gives the right
/// answer", not just "the syscall exists". `Err` carries the reason for the caller's message.
pub(crate) fn probe() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE
        .get_or_init(|| probe_once().map_err(|e| e.to_string()))
        .clone()
}

fn probe_once() -> io::Result<()> {
    let page = page_size();
    let mut uffd = Uffd::open()?;
    let mut buf = AlignedBuf::new(2 * page)?;
    buf.fill(1);
    let start = buf.as_ptr() as usize;
    uffd.register(start, 2 * page)?;
    uffd.protect(start, 2 * page)?;
    buf[page] = 2;
    let mut dirty = Vec::new();
    uffd.scan_written(start, 2 * page, &mut dirty)?;
    let mut again = Vec::new();
    uffd.scan_written(start, 2 * page, &mut again)?;
    uffd.unregister(start, 2 * page)?;
    if dirty == [1] && again.is_empty() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "PAGEMAP_SCAN gave wrong answers in probe (first {dirty:?}, second {again:?})"
        )))
    }
}
