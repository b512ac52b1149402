//! Page-aligned anonymous memory.
//!
//! Kernel write tracking works on whole pages of anonymous mappings, so regions handed to the
//! userfaultfd backend must start on a page boundary and cover whole pages. `AlignedBuf` gives
//! tests, benchmarks and callers that allocate their own state a buffer that satisfies this.

use std::io;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::OnceLock;

/// The system page size in bytes, read once (the granularity of userfaultfd tracking).
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as usize
        } else {
            4096
        }
    })
}

/// A zero-filled, page-aligned private anonymous mapping of `len` bytes (the mapping itself is
/// rounded up to whole pages). Unmapped on drop.
///
/// Why a mapping and not `Vec`: the allocator may hand out memory that shares pages with other
/// objects, and userfaultfd registration needs a page-aligned anonymous range of its own.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: AlignedBuf owns its mapping exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// Maps `len` bytes (> 0) of zeroed, page-aligned memory.
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AlignedBuf length must be > 0",
            ));
        }
        let page = page_size();
        let map_len = len
            .checked_next_multiple_of(page)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "length overflows"))?;
        // SAFETY: anonymous private mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Self { ptr, len, map_len })
    }

    /// Length in bytes as requested (not rounded).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length buffers are refused by [`AlignedBuf::new`]. Present because
    /// clippy expects `is_empty` next to `len`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address, page aligned: what is passed to `Tracker::add_region`.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Mutable start address, page aligned.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping is valid for `len` bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_writable() {
        let mut b = AlignedBuf::new(10_000).unwrap();
        assert_eq!(b.as_ptr() as usize % page_size(), 0);
        assert_eq!(b.len(), 10_000);
        assert!(b.iter().all(|&x| x == 0));
        b[9_999] = 7;
        assert_eq!(b[9_999], 7);
        assert!(AlignedBuf::new(0).is_err());
    }
}
