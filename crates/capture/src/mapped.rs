//! A file's bytes without copying them: a regular file is mapped read-only, straight from
//! the page cache, with sequential read-ahead advice. Pipes, devices and anything the
//! kernel will not map have no mapping; callers stream those instead.
//!
//! A mapping sees the file as it is when read, like `read()` would, but a file cut shorter
//! while mapped raises SIGBUS where `read()` returns a short count: mapped inputs must not
//! be truncated while a delta or patch reads them (checkpoint images are complete files
//! that the next checkpoint replaces, not rewrites).

use std::fs::File;
use std::ops::Deref;

use memmap2::{Advice, Mmap, MmapOptions};

/// The bytes of a mapped file (an empty file has no mapping, only no bytes).
pub(crate) enum Mapped {
    Empty,
    Map(Mmap),
}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Mapped::Empty => &[],
            Mapped::Map(m) => m,
        }
    }
}

/// Maps `file` if it is a regular file the address space can hold; `None` means stream it.
pub(crate) fn map(file: &File) -> Option<Mapped> {
    let meta = file.metadata().ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.len() == 0 {
        return Some(Mapped::Empty);
    }
    let len = usize::try_from(meta.len()).ok()?;
    // SAFETY: the mapping is read-only and private to this process; the module's contract
    // (no truncation while mapped) is what keeps every byte of it readable.
    let map = unsafe { MmapOptions::new().len(len).map(file) }.ok()?;
    // Read-ahead for files not (all) in the page cache; a hint, so its failure is harmless.
    let _ = map.advise(Advice::Sequential);
    Some(Mapped::Map(map))
}
