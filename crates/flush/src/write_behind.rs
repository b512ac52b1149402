//! Writing a large file so that its closing fsync is short: the dirty pages are handed to
//! the disk as the file grows, so that the disk writes while the writer reads, checksums
//! and copies the next bytes — instead of everything waiting for the fsync at the end, as
//! with plain writes (the kernel starts writeback of its own only past its dirty limits).

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;

/// Bytes written between two writeback starts: large enough for the disk to see large
/// requests, small enough that writeback keeps up with the writer.
pub const WRITE_BEHIND: u64 = 8 << 20;

/// A file written sequentially from its start, whose writeback starts every
/// [`WRITE_BEHIND`] bytes (`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which does not wait
/// for the disk). [`WriteBehind::sync`] makes it durable.
#[derive(Debug)]
pub struct WriteBehind {
    file: File,
    written: u64,
    /// Bytes whose writeback has been started.
    handed: u64,
}

impl WriteBehind {
    /// Writes `file` from its current end, which must be its start.
    pub fn new(file: File) -> WriteBehind {
        WriteBehind {
            file,
            written: 0,
            handed: 0,
        }
    }

    /// Appends `bytes`; starts writeback of every whole [`WRITE_BEHIND`] written since the
    /// last start. A file system that cannot start writeback early (an error from
    /// `sync_file_range`) only leaves more to [`WriteBehind::sync`].
    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.written += bytes.len() as u64;
        while self.written - self.handed >= WRITE_BEHIND {
            // SAFETY: a plain system call on a descriptor this value owns.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    self.handed as libc::off64_t,
                    WRITE_BEHIND as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
            self.handed += WRITE_BEHIND;
        }
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Makes the file's data and metadata durable (fsync).
    pub fn sync(self) -> io::Result<()> {
        self.file.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_exactly_what_was_written_in_whatever_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut w = WriteBehind::new(File::create(&path).unwrap());
        let mut expected = Vec::new();
        let mut x = 1u64;
        for piece in [
            0usize,
            1,
            4095,
            WRITE_BEHIND as usize - 3,
            7,
            3 * WRITE_BEHIND as usize + 11,
        ] {
            let bytes: Vec<u8> = (0..piece)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (x >> 56) as u8
                })
                .collect();
            w.write_all(&bytes).unwrap();
            expected.extend_from_slice(&bytes);
        }
        assert_eq!(w.written(), expected.len() as u64);
        w.sync().unwrap();
        assert!(std::fs::read(&path).unwrap() == expected);
    }
}
