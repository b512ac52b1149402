//! File deltas for images written by external checkpointers (BLCR, DMTCP, CRIU dumps): a
//! "pseudo-incremental" checkpoint (full dumps, diffed afterwards), done by comparing blocks
//! in place instead of with xdelta's rolling match search. Checkpoint images keep their layout between epochs, so an
//! in-place block comparison finds the same changes at a fraction of the cost.
//!
//! Regular files are read without copying them out of the page cache ([`crate::mapped`]):
//! the blocks are compared, and the changed ones written, straight from the mapping. What
//! cannot be mapped is read in 4 MiB steps instead (bounded memory whatever the size); a pipe
//! or a device, whose length is unknown until it ends, is first spooled to an unlinked
//! temporary file next to the output. Both directions publish their output with
//! write-to-temp + fsync + rename, so a crash leaves either the old file or the complete new
//! one.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::delta::{decode, push_changed, DeltaHeader, DeltaReader, DeltaWriter};
use crate::error::CaptureError;
use crate::mapped::{map, Mapped};

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

/// The directory `out` is (to be) in.
fn directory_of(out: &Path) -> &Path {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// An input file, at offset 0, and its bytes mapped when the kernel would map them.
struct Input {
    file: File,
    len: u64,
    map: Option<Mapped>,
}

/// Opens `path` for reading; a pipe or device is spooled into an unlinked temporary file in
/// `spool_dir` first, so that it has a length and can be mapped.
fn open_input(path: &Path, spool_dir: &Path) -> Result<Input, CaptureError> {
    let mut file = File::open(path).map_err(ioe("open", path))?;
    let meta = file.metadata().map_err(ioe("stat", path))?;
    if !meta.is_file() {
        let mut spool = tempfile::tempfile_in(spool_dir).map_err(ioe("create a spool file in", spool_dir))?;
        io::copy(&mut file, &mut spool).map_err(ioe("spool", path))?;
        spool.rewind().map_err(ioe("spool", path))?;
        file = spool;
    }
    let len = file.metadata().map_err(ioe("stat", path))?.len();
    let map = map(&file);
    Ok(Input { file, len, map })
}

/// Creates a temp file next to `out`, lets `body` fill it, then publishes it as `out`
/// ([`eckpt_durable::publish`]). Returns `body`'s value and the seconds spent publishing
/// (fsync, rename, directory fsync).
fn publish<T>(
    out: &Path,
    body: impl FnOnce(&File) -> Result<T, CaptureError>,
) -> Result<(T, f64), CaptureError> {
    let (tmp, file) = eckpt_durable::create_temp(out).map_err(ioe("create temp file for", out))?;
    let filled = body(&file);
    drop(file);
    let v = match filled {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let t0 = Instant::now();
    eckpt_durable::publish(&tmp, out).map_err(ioe("publish", out))?;
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
    let mut old = open_input(base, directory_of(out))?;
    let mut new_input = open_input(new, directory_of(out))?;
    let header = DeltaHeader {
        block_size,
        old_len: old.len,
        new_len: new_input.len,
    };
    let ((blocks_changed, bytes_changed, delta_bytes), fsync_seconds) = publish(out, |tmp| {
        let mut w = DeltaWriter::new(BufWriter::with_capacity(IO_BUF, tmp), header)
            .map_err(ioe("write delta", out))?;
        let (blocks, bytes) = match (&old.map, &new_input.map) {
            (Some(o), Some(n)) => push_changed(&mut w, 0, o, n).map_err(ioe("write delta", out))?,
            _ => streamed_changes(&mut w, (base, &mut old.file), (new, &mut new_input.file), out)?,
        };
        let (_, size) = w.finish().map_err(ioe("write delta", out))?;
        Ok((blocks, bytes, size))
    })?;
    Ok(DeltaStats {
        base_bytes: old.len,
        new_bytes: new_input.len,
        block_size,
        blocks_changed,
        bytes_changed,
        delta_bytes,
        seconds: t0.elapsed().as_secs_f64(),
        fsync_seconds,
    })
}

/// The changed blocks of two files read in [`CHUNK`] steps (when one of them could not be
/// mapped): bounded memory, one copy out of the page cache. Returns the changed blocks and
/// their bytes.
fn streamed_changes<W: Write>(
    w: &mut DeltaWriter<W>,
    (base, bf): (&Path, &mut File),
    (new, nf): (&Path, &mut File),
    out: &Path,
) -> Result<(u64, u64), CaptureError> {
    let header = w.header();
    let chunk = CHUNK.next_multiple_of(header.block_size as usize);
    let mut ob = vec![0u8; chunk];
    let mut nb = vec![0u8; chunk];
    let (mut off, mut blocks, mut bytes) = (0u64, 0u64, 0u64);
    loop {
        let n = fill(nf, &mut nb).map_err(ioe("read", new))?;
        if n == 0 {
            break;
        }
        let o = fill(bf, &mut ob).map_err(ioe("read", base))?;
        let (b, by) = push_changed(w, off, &ob[..o], &nb[..n]).map_err(ioe("write delta", out))?;
        blocks += b;
        bytes += by;
        off += n as u64;
    }
    if off != header.new_len {
        return Err(CaptureError::io(
            format!("read {}", new.display()),
            io::Error::other(format!(
                "file changed size while reading ({off} of {})",
                header.new_len
            )),
        ));
    }
    Ok((blocks, bytes))
}

/// Rebuilds the new file at `out` from `base` and a delta written by [`delta_files`]. The
/// delta is verified (layout, counts, crc32c) before `out` appears; a bad delta or a base of
/// the wrong length leaves `out` untouched.
pub fn patch_file(base: &Path, delta: &Path, out: &Path) -> Result<PatchStats, CaptureError> {
    let t0 = Instant::now();
    let base_input = open_input(base, directory_of(out))?;
    let delta_input = open_input(delta, directory_of(out))?;
    let (header, (runs, bytes_patched), fsync_seconds) = match (&base_input.map, &delta_input.map) {
        (Some(b), Some(d)) => patch_mapped(b, d, out)?,
        _ => patch_streamed(base_input, delta_input, (base, out))?,
    };
    Ok(PatchStats {
        base_bytes: header.old_len,
        new_bytes: header.new_len,
        runs,
        bytes_patched,
        seconds: t0.elapsed().as_secs_f64(),
        fsync_seconds,
    })
}

/// What a patch did: the delta's header, (runs, bytes patched), and seconds of fsync.
type Patched = (DeltaHeader, (u64, u64), f64);

/// Patches from mapped files: the whole delta is validated (layout, counts, crc32c) before
/// anything is written, then every byte goes from a mapping straight to the output.
fn patch_mapped(base: &[u8], delta: &[u8], out: &Path) -> Result<Patched, CaptureError> {
    let parsed = decode(delta)?;
    let h = parsed.header;
    if h.old_len != base.len() as u64 {
        return Err(crate::delta::DeltaError::BaseLength {
            expected: h.old_len,
            actual: base.len() as u64,
        }
        .into());
    }
    // Validated: runs ascend, and cover everything past the base's end.
    let keep = h.old_len.min(h.new_len) as usize;
    let (counts, fsync_seconds) = publish(out, |mut tmp| {
        let mut pos = 0usize;
        for run in &parsed.runs {
            let at = run.offset as usize;
            tmp.write_all(&base[pos.min(keep)..at.min(keep)])
                .map_err(ioe("write", out))?;
            tmp.write_all(run.data).map_err(ioe("write", out))?;
            pos = at + run.data.len();
        }
        if pos < keep {
            tmp.write_all(&base[pos..keep]).map_err(ioe("write", out))?;
        }
        Ok((parsed.runs.len() as u64, parsed.payload_bytes()))
    })?;
    Ok((h, counts, fsync_seconds))
}

/// Patches by streaming (when the base or the delta could not be mapped): the delta is
/// read in order and verified as it goes, the output only published once its trailer
/// checked out.
fn patch_streamed(
    base_input: Input,
    delta_input: Input,
    (base, out): (&Path, &Path),
) -> Result<Patched, CaptureError> {
    let mut bf = base_input.file;
    let base_bytes = base_input.len;
    let mut dr = DeltaReader::new(BufReader::with_capacity(IO_BUF, delta_input.file))?;
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
    Ok((h, (runs, bytes_patched), fsync_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 29) as u8
            })
            .collect()
    }

    /// The streamed fallbacks find the same changes as the mapped paths (cut into more runs
    /// at their read steps), and either patch rebuilds the new file from either delta.
    #[test]
    fn streaming_and_mapping_make_the_same_delta_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        for (old_len, new_len) in [
            (0, 9000),
            (CHUNK + 5000, CHUNK + 5000),
            (3 * CHUNK + 1, CHUNK - 7),
        ] {
            let old = pseudo_random(old_len, old_len as u64);
            let mut new = pseudo_random(new_len, 5);
            let same = old_len.min(new_len) / 2;
            new[..same].copy_from_slice(&old[..same]);
            std::fs::write(p("base"), &old).unwrap();
            std::fs::write(p("new"), &new).unwrap();

            let mapped = delta_files(&p("base"), &p("new"), &p("mapped.delta"), 4096).unwrap();
            let streamed = publish(&p("streamed.delta"), |tmp| {
                let header = DeltaHeader {
                    block_size: 4096,
                    old_len: old_len as u64,
                    new_len: new_len as u64,
                };
                let mut w = DeltaWriter::new(BufWriter::new(tmp), header).unwrap();
                let mut bf = File::open(p("base")).unwrap();
                let mut nf = File::open(p("new")).unwrap();
                let counts = streamed_changes(&mut w, (&p("base"), &mut bf), (&p("new"), &mut nf), &p("x"))?;
                w.finish().unwrap();
                Ok(counts)
            })
            .unwrap()
            .0;
            assert_eq!((mapped.blocks_changed, mapped.bytes_changed), streamed);
            for delta in ["mapped.delta", "streamed.delta"] {
                let inputs = || {
                    (
                        open_input(&p("base"), dir.path()).unwrap(),
                        open_input(&p(delta), dir.path()).unwrap(),
                    )
                };
                let (b, d) = inputs();
                let (b_map, d_map) = (b.map.unwrap(), d.map.unwrap());
                patch_mapped(&b_map, &d_map, &p("out.mapped")).unwrap();
                let (b, d) = inputs();
                patch_streamed(b, d, (&p("base"), &p("out.streamed"))).unwrap();
                let what = format!("{delta}: {old_len} → {new_len}");
                assert!(std::fs::read(p("out.mapped")).unwrap() == new, "{what}");
                assert!(std::fs::read(p("out.streamed")).unwrap() == new, "{what}");
            }
        }
    }
}
