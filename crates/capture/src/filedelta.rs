//! File deltas for images written by external checkpointers (BLCR, DMTCP, CRIU dumps): a
//! "pseudo-incremental" checkpoint (full dumps, diffed afterwards), done by comparing blocks
//! in place instead of with xdelta's rolling match search. Checkpoint images keep their layout between epochs, so an
//! in-place block comparison finds the same changes at a fraction of the cost.
//!
//! Both directions stream with bounded memory (a few MiB whatever the file size) and publish
//! their output with write-to-temp + fsync + rename, so a crash leaves either the old file or
//! the complete new one.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::delta::{push_changed, DeltaHeader, DeltaReader, DeltaWriter};
use crate::error::CaptureError;

/// Bytes read from each input per step.
const CHUNK: usize = 4 << 20;
/// Buffer size for streaming the delta file.
const IO_BUF: usize = 1 << 20;

/// What [`delta_files`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeltaStats {
    /// Length of the base file.
    pub base_bytes: u64,
    /// Length of the new file.
    pub new_bytes: u64,
    /// Comparison granularity.
    pub block_size: u32,
    /// Blocks of the new file that differ from the base.
    pub blocks_changed: u64,
    /// Bytes in those blocks.
    pub bytes_changed: u64,
    /// Size of the delta file written.
    pub delta_bytes: u64,
    /// Wall time, including fsync and rename.
    pub seconds: f64,
    /// Part of `seconds` spent making the output durable (file and directory fsync).
    pub fsync_seconds: f64,
}

/// What [`patch_file`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatchStats {
    /// Length of the base file.
    pub base_bytes: u64,
    /// Length of the rebuilt file.
    pub new_bytes: u64,
    /// Runs applied.
    pub runs: u64,
    /// Bytes taken from the delta.
    pub bytes_patched: u64,
    /// Wall time, including fsync and rename.
    pub seconds: f64,
    /// Part of `seconds` spent making the output durable (file and directory fsync).
    pub fsync_seconds: f64,
}

fn ioe(what: &str, path: &Path) -> impl FnOnce(io::Error) -> CaptureError {
    let context = format!("{what} {}", path.display());
    move |e| CaptureError::io(context, e)
}

/// Reads until `buf` is full or EOF; returns the bytes read.
fn fill(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Creates a temp file next to `out`, lets `body` fill it, then fsyncs, renames it over `out`
/// and fsyncs the directory. Returns `body`'s value and the seconds spent in fsync.
fn publish<T>(
    out: &Path,
    body: impl FnOnce(&File) -> Result<T, CaptureError>,
) -> Result<(T, f64), CaptureError> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".eckpt-tmp-")
        .tempfile_in(dir)
        .map_err(ioe("create temp file in", dir))?;
    let v = body(tmp.as_file())?;
    let t0 = Instant::now();
    tmp.as_file().sync_all().map_err(ioe("fsync temp for", out))?;
    tmp.persist(out)
        .map_err(|e| CaptureError::io(format!("rename temp to {}", out.display()), e.error))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(ioe("fsync directory", dir))?;
    Ok((v, t0.elapsed().as_secs_f64()))
}

/// Writes to `out` a delta turning `base` into `new`, comparing `block_size`-byte blocks at
/// the same offsets (4096 matches the page granularity of memory images). The delta holds
/// only the changed blocks plus 17 bytes per run of adjacent ones and 53 bytes of header and
/// trailer.
pub fn delta_files(base: &Path, new: &Path, out: &Path, block_size: u32) -> Result<DeltaStats, CaptureError> {
    let t0 = Instant::now();
    if block_size == 0 || block_size > crate::delta::MAX_BLOCK_SIZE {
        return Err(CaptureError::InvalidConfig(format!(
            "block size {block_size} outside 1..={}",
            crate::delta::MAX_BLOCK_SIZE
        )));
    }
    let mut bf = File::open(base).map_err(ioe("open", base))?;
    let mut nf = File::open(new).map_err(ioe("open", new))?;
    let base_bytes = bf.metadata().map_err(ioe("stat", base))?.len();
    let new_bytes = nf.metadata().map_err(ioe("stat", new))?.len();
    let chunk = CHUNK.next_multiple_of(block_size as usize);
    let ((blocks_changed, bytes_changed, delta_bytes), fsync_seconds) = publish(out, |tmp| {
        let mut w = DeltaWriter::new(
            BufWriter::with_capacity(IO_BUF, tmp),
            DeltaHeader {
                block_size,
                old_len: base_bytes,
                new_len: new_bytes,
            },
        )
        .map_err(ioe("write delta", out))?;
        let mut ob = vec![0u8; chunk];
        let mut nb = vec![0u8; chunk];
        let (mut off, mut blocks, mut bytes) = (0u64, 0u64, 0u64);
        loop {
            let n = fill(&mut nf, &mut nb).map_err(ioe("read", new))?;
            if n == 0 {
                break;
            }
            let o = fill(&mut bf, &mut ob).map_err(ioe("read", base))?;
            let (b, by) = push_changed(&mut w, off, &ob[..o], &nb[..n]).map_err(ioe("write delta", out))?;
            blocks += b;
            bytes += by;
            off += n as u64;
        }
        if off != new_bytes {
            return Err(CaptureError::io(
                format!("read {}", new.display()),
                io::Error::other(format!("file changed size while reading ({off} of {new_bytes})")),
            ));
        }
        let (_, size) = w.finish().map_err(ioe("write delta", out))?;
        Ok((blocks, bytes, size))
    })?;
    Ok(DeltaStats {
        base_bytes,
        new_bytes,
        block_size,
        blocks_changed,
        bytes_changed,
        delta_bytes,
        seconds: t0.elapsed().as_secs_f64(),
        fsync_seconds,
    })
}

/// Rebuilds the new file at `out` from `base` and a delta written by [`delta_files`]. The
/// delta is verified (layout, counts, crc32c) before `out` appears; a bad delta or a base of
/// the wrong length leaves `out` untouched.
pub fn patch_file(base: &Path, delta: &Path, out: &Path) -> Result<PatchStats, CaptureError> {
    let t0 = Instant::now();
    let mut bf = File::open(base).map_err(ioe("open", base))?;
    let base_bytes = bf.metadata().map_err(ioe("stat", base))?.len();
    let df = File::open(delta).map_err(ioe("open", delta))?;
    let mut dr = DeltaReader::new(BufReader::with_capacity(IO_BUF, df))?;
    let h = dr.header();
    if h.old_len != base_bytes {
        return Err(crate::delta::DeltaError::BaseLength {
            expected: h.old_len,
            actual: base_bytes,
        }
        .into());
    }
    let keep = h.old_len.min(h.new_len);
    let ((runs, bytes_patched), fsync_seconds) = publish(out, |tmp| {
        let mut w = BufWriter::with_capacity(IO_BUF, tmp);
        let mut buf = vec![0u8; IO_BUF];
        let (mut pos, mut runs, mut patched) = (0u64, 0u64, 0u64);
        let copy_base = |bf: &mut File, w: &mut BufWriter<&File>, n: u64| {
            let got = io::copy(&mut bf.take(n), w).map_err(ioe("copy from", base))?;
            if got != n {
                return Err(CaptureError::io(
                    format!("read {}", base.display()),
                    io::Error::new(io::ErrorKind::UnexpectedEof, "base shorter than the delta says"),
                ));
            }
            Ok(())
        };
        while let Some((off, len)) = dr.next_run()? {
            copy_base(&mut bf, &mut w, off - pos)?;
            dr.copy_run_data(&mut w, &mut buf)?;
            pos = off + len;
            // Past the base's end this makes any further gap copy fail, as it must.
            bf.seek(SeekFrom::Start(pos)).map_err(ioe("seek", base))?;
            runs += 1;
            patched += len;
        }
        if pos < keep {
            copy_base(&mut bf, &mut w, keep - pos)?;
        }
        w.flush().map_err(ioe("write", out))?;
        drop(w);
        let written = tmp.metadata().map_err(ioe("stat temp for", out))?.len();
        if written != h.new_len {
            return Err(CaptureError::io(
                format!("write {}", out.display()),
                io::Error::other(format!("rebuilt {written} bytes, delta says {}", h.new_len)),
            ));
        }
        Ok((runs, patched))
    })?;
    Ok(PatchStats {
        base_bytes,
        new_bytes: h.new_len,
        runs,
        bytes_patched,
        seconds: t0.elapsed().as_secs_f64(),
        fsync_seconds,
    })
}
