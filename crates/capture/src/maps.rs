//! This process's memory mappings, from `/proc/self/maps`: what a region must be mapped as
//! before eckpt trusts it. A checkpoint reads a protected region and a restart writes it; a
//! region that is unmapped (a bogus pointer) or read-only (a `const` global, a `PROT_READ`
//! mapping) would crash the first or fail the second half done, so both are refused up front.
//!
//! A check asks the kernel for the mappings that hold the regions it checks, one query each
//! (`PROCMAP_QUERY`, Linux 6.11): the text of every mapping, which a checkpoint used to read,
//! parse and search, grows with everything the process maps — a PyTorch rank's hundreds of
//! libraries, a thread's stack per thread — and was most of the CPU of a checkpoint of a small
//! image by a rank with a thousand threads beside it. A kernel without the query gets the text
//! read whole, as before.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// One line of `/proc/self/maps`: `[start, end)` and what it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    writable: bool,
    /// Private (copy-on-write) rather than shared.
    private: bool,
    /// Backed by no file (inode 0): anonymous memory, the heap, a stack.
    anonymous: bool,
}

/// A snapshot of the process's mappings, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct MemoryMap {
    mappings: Vec<Mapping>,
}

impl MemoryMap {
    /// Reads `/proc/self/maps` now. Mappings change with every `mmap`, `munmap` and `brk`: a
    /// snapshot is only as good as the moment it was taken.
    pub fn read() -> io::Result<MemoryMap> {
        Ok(MemoryMap::parse(&std::fs::read_to_string("/proc/self/maps")?))
    }

    /// The mappings that hold `ranges` (start, length), asked of the kernel mapping by mapping,
    /// or, where it cannot be asked ([`Query`]), all of them: enough for [`unwritable`] and
    /// [`private_anonymous`] of any part of `ranges`.
    ///
    /// [`unwritable`]: MemoryMap::unwritable
    /// [`private_anonymous`]: MemoryMap::private_anonymous
    pub fn holding(ranges: impl IntoIterator<Item = (usize, usize)>) -> io::Result<MemoryMap> {
        let Some(query) = Query::open()? else {
            return MemoryMap::read();
        };
        let mut mappings = Vec::new();
        for (start, len) in ranges {
            let end = start.saturating_add(len);
            let mut at = start;
            while at < end {
                match query.at(at)? {
                    Answer::Mapped(mapping) => {
                        at = mapping.end;
                        mappings.push(mapping);
                    }
                    // A gap: `unwritable` says where the mappings held end.
                    Answer::Unmapped => break,
                    Answer::Unsupported => return MemoryMap::read(),
                }
            }
        }
        mappings.sort_by_key(|m| m.start);
        mappings.dedup();
        Ok(MemoryMap { mappings })
    }

    /// Parses the text of a `maps` file; lines that do not parse are skipped.
    pub fn parse(text: &str) -> MemoryMap {
        let mut mappings: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
        // The kernel lists mappings in address order; sorting keeps lookups right regardless.
        mappings.sort_by_key(|m| m.start);
        MemoryMap { mappings }
    }

    /// Why `[start, start + len)` cannot be both read and written back, or `None` when every
    /// byte of it lies in writable mappings with no gap.
    pub fn unwritable(&self, start: usize, len: usize) -> Option<String> {
        let Some(end) = start.checked_add(len) else {
            return Some("the range wraps around the address space".into());
        };
        let mut covered = start;
        for mapping in self.covering(start, end) {
            if mapping.start > covered {
                break;
            }
            if !mapping.writable {
                return Some(format!(
                    "{:#x}..{:#x} is mapped read-only (a const global or PROT_READ memory): restart could not write it back",
                    mapping.start.max(start),
                    mapping.end.min(end)
                ));
            }
            covered = mapping.end;
            if covered >= end {
                return None;
            }
        }
        Some(format!("{covered:#x}..{end:#x} is not mapped in this process"))
    }

    /// Whether `[start, start + len)` lies wholly in private anonymous mappings. Async
    /// write-protect is accepted by the kernel on any mapping, but it only sees writes made
    /// through this process's page tables: for shared or file-backed memory, writes by another
    /// mapping, process, or `write(2)` would be missed, so only private anonymous memory may
    /// use it.
    pub fn private_anonymous(&self, start: usize, len: usize) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        let mut covered = start;
        for mapping in self.covering(start, end) {
            if mapping.start > covered || !mapping.private || !mapping.anonymous {
                return false;
            }
            covered = mapping.end;
            if covered >= end {
                return true;
            }
        }
        false
    }

    /// The mappings from the one holding `start` (or the first after it) on, in address
    /// order, up to `end`: a binary search, so a check costs O(log mappings).
    fn covering(&self, start: usize, end: usize) -> impl Iterator<Item = &Mapping> {
        let first = self.mappings.partition_point(|m| m.end <= start);
        self.mappings[first..].iter().take_while(move |m| m.start < end)
    }
}

/// The kernel's answer about one address.
enum Answer {
    /// The mapping holding it.
    Mapped(Mapping),
    /// No mapping holds it.
    Unmapped,
    /// The kernel cannot be asked (older than 6.11, or a sandbox that refuses the ioctl).
    Unsupported,
}

/// `PROCMAP_QUERY` on this process's `maps` file: the mapping holding an address.
struct Query {
    maps: File,
}

/// `struct procmap_query` of `<linux/fs.h>` (Linux 6.11), which the `libc` crate lacks.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 = 0xC068_6611;
const VMA_READABLE: u64 = 0x01;
const VMA_WRITABLE: u64 = 0x02;
const VMA_SHARED: u64 = 0x08;

impl Query {
    /// Opened anew for each check: a descriptor kept across a `fork` would answer for the
    /// parent. `None` when the file cannot be opened as a query (no `/proc`).
    fn open() -> io::Result<Option<Query>> {
        match File::open("/proc/self/maps") {
            Ok(maps) => Ok(Some(Query { maps })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn at(&self, address: usize) -> io::Result<Answer> {
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: address as u64,
            ..ProcmapQuery::default()
        };
        // SAFETY: `q` is a `struct procmap_query` of the size it says, asking for no name or
        // build id (their sizes and addresses zero), so the kernel writes within it alone.
        let rc = unsafe { libc::ioctl(self.maps.as_raw_fd(), PROCMAP_QUERY as _, &mut q) };
        if rc == 0 {
            return Ok(Answer::Mapped(Mapping {
                start: q.vma_start as usize,
                end: q.vma_end as usize,
                writable: q.vma_flags & (VMA_READABLE | VMA_WRITABLE) == VMA_READABLE | VMA_WRITABLE,
                private: q.vma_flags & VMA_SHARED == 0,
                anonymous: q.inode == 0,
            }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(Answer::Unmapped),
            Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM | libc::EACCES) => {
                Ok(Answer::Unsupported)
            }
            _ => Err(e),
        }
    }
}

/// `lo-hi perms offset dev inode [path]`.
fn parse_line(line: &str) -> Option<Mapping> {
    let mut fields = line.split_ascii_whitespace();
    let (range, perms, _offset, _dev, inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let (lo, hi) = range.split_once('-')?;
    let perms = perms.as_bytes();
    Some(Mapping {
        start: usize::from_str_radix(lo, 16).ok()?,
        end: usize::from_str_radix(hi, 16).ok()?,
        writable: perms.first() == Some(&b'r') && perms.get(1) == Some(&b'w'),
        private: perms.get(3) == Some(&b'p'),
        anonymous: inode == "0",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00401000 r--p 00000000 08:01 123 /usr/bin/prog
00401000-00402000 rw-p 00001000 08:01 123 /usr/bin/prog
00402000-00404000 rw-p 00000000 00:00 0 [heap]
00404000-00405000 rw-p 00000000 00:00 0
00406000-00407000 rw-s 00000000 00:05 77 /dev/shm/x
7ffd0000-7ffd1000 r-xp 00000000 00:00 0 [vdso]
";

    #[test]
    fn writable_ranges_may_span_adjacent_mappings() {
        let map = MemoryMap::parse(MAPS);
        assert_eq!(map.unwritable(0x401000, 0x1000), None);
        assert_eq!(
            map.unwritable(0x401800, 0x3000),
            None,
            "file data, heap and anonymous, no gap"
        );
        assert_eq!(
            map.unwritable(0x406000, 0x1000),
            None,
            "shared memory is writable too"
        );
    }

    #[test]
    fn read_only_and_unmapped_ranges_are_refused_with_the_reason() {
        let map = MemoryMap::parse(MAPS);
        assert!(map.unwritable(0x400010, 8).unwrap().contains("read-only"));
        assert!(
            map.unwritable(0x404800, 0x1000).unwrap().contains("not mapped"),
            "runs into a gap"
        );
        assert!(map.unwritable(0x1000, 1 << 40).is_some());
        assert!(map.unwritable(0x1000, 1).unwrap().contains("not mapped"));
        assert!(map.unwritable(usize::MAX - 2, 8).unwrap().contains("wraps"));
    }

    #[test]
    fn only_private_anonymous_memory_is_for_the_kernel_tracker() {
        let map = MemoryMap::parse(MAPS);
        assert!(map.private_anonymous(0x402000, 0x3000));
        assert!(
            !map.private_anonymous(0x401000, 0x2000),
            "starts in a file mapping"
        );
        assert!(!map.private_anonymous(0x406000, 0x1000), "shared");
        assert!(!map.private_anonymous(0x404000, 0x2000), "runs into a gap");
    }

    /// What the kernel answers about the mappings holding some ranges is what the text of
    /// every mapping says about them (when this kernel answers at all).
    #[test]
    fn the_mappings_asked_for_agree_with_the_whole_text() {
        let page = 4096;
        let anon = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as usize;
        assert_ne!(anon, libc::MAP_FAILED as usize);
        // A read-only page and a hole in the middle: three mappings and a gap.
        unsafe {
            assert_eq!(libc::mprotect((anon + page) as *mut _, page, libc::PROT_READ), 0);
            assert_eq!(libc::munmap((anon + 3 * page) as *mut _, page), 0);
        }
        let local = [0u8; 64];
        let code = MemoryMap::read as fn() -> io::Result<MemoryMap> as usize;
        let ranges = [
            (anon, page),
            (anon, 2 * page),
            (anon + 2 * page, page),
            (anon + 2 * page, 2 * page),
            (local.as_ptr() as usize, local.len()),
            (code, 1),
        ];
        let asked = MemoryMap::holding(ranges).unwrap();
        let whole = MemoryMap::read().unwrap();
        for (start, len) in ranges {
            assert_eq!(
                asked.unwritable(start, len),
                whole.unwritable(start, len),
                "{start:#x}+{len}"
            );
            assert_eq!(
                asked.private_anonymous(start, len),
                whole.private_anonymous(start, len),
                "{start:#x}+{len}"
            );
        }
        assert_eq!(asked.unwritable(anon, page), None);
        assert!(asked.unwritable(anon, 2 * page).unwrap().contains("read-only"));
        assert!(asked
            .unwritable(anon + 2 * page, 2 * page)
            .unwrap()
            .contains("not mapped"));
        assert!(asked.private_anonymous(anon + 2 * page, page));
        unsafe { libc::munmap(anon as *mut _, 3 * page) };
    }

    #[test]
    fn this_process_s_stack_is_writable_and_its_code_is_not() {
        let map = MemoryMap::read().unwrap();
        let local = [0u8; 64];
        assert_eq!(map.unwritable(local.as_ptr() as usize, local.len()), None);
        let code = MemoryMap::read as fn() -> io::Result<MemoryMap> as usize;
        assert!(map.unwritable(code, 1).is_some());
    }
}
