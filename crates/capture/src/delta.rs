//! Block deltas: a self-describing, checksummed encoding of the blocks in which a byte image
//! differs from its previous version.
//!
//! Format (all integers little-endian):
//!
//! ```text
//! header  32 B   magic "ECKDELTA" | version u16 = 1 | reserved u16 = 0 | block_size u32
//!                | old_len u64 | new_len u64
//! run     17 B+  tag u8 = 0x01 | offset u64 | len u64 | len bytes of the new image
//! end     21 B   tag u8 = 0xFF | run_count u64 | payload_bytes u64 | crc32c u32
//! ```
//!
//! The crc32c covers every byte before it. Runs are sorted, non-overlapping, start on a block
//! boundary, are a whole number of blocks long unless they end at `new_len`, and together
//! cover every byte in `old_len..new_len` (an image that grew carries its new tail). The new
//! image is `base[..min(old_len, new_len)]`, extended to `new_len`, with the runs written over
//! it. The run count sits in the trailer so an encoder can stream without knowing it upfront.
//!
//! The parsers ([`decode`] for a slice, [`DeltaReader`] for a stream) are strict: anything not
//! produced by [`DeltaWriter`] is rejected with a [`DeltaError`]; they never panic and never
//! allocate from a length field (run data is borrowed or streamed).

use std::io::{self, Read, Write};

use eckpt_cursor::{Cursor, Truncated};

/// Magic bytes at the start of every delta.
pub const MAGIC: [u8; 8] = *b"ECKDELTA";
/// Format version this code writes and reads.
pub const VERSION: u16 = 1;
/// Header size in bytes.
pub const HEADER_LEN: usize = 32;
/// Bytes of framing per run (tag, offset, length).
pub const RUN_HEADER_LEN: usize = 17;
/// Trailer size in bytes.
pub const TRAILER_LEN: usize = 21;
/// Largest block size accepted (1 GiB), so a header cannot claim absurd blocks.
pub const MAX_BLOCK_SIZE: u32 = 1 << 30;

const TAG_RUN: u8 = 0x01;
const TAG_END: u8 = 0xFF;

/// Why a delta was rejected.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    /// The input ended inside the field named.
    #[error("delta truncated: {0}")]
    Truncated(#[from] Truncated),
    /// The first 8 bytes are not [`MAGIC`].
    #[error("not a delta: bad magic")]
    BadMagic,
    /// A version this code does not read.
    #[error("unsupported delta version {0} (this build reads {VERSION})")]
    UnsupportedVersion(u16),
    /// Reserved header field not zero.
    #[error("delta header reserved field is {0:#x}, must be 0")]
    BadReserved(u16),
    /// Block size zero or above [`MAX_BLOCK_SIZE`].
    #[error("delta block size {0} outside 1..={MAX_BLOCK_SIZE}")]
    BadBlockSize(u32),
    /// A record tag that is neither run nor end.
    #[error("bad record tag {tag:#04x} at byte {at}")]
    BadTag {
        /// The tag byte found.
        tag: u8,
        /// Its position in the delta.
        at: u64,
    },
    /// A run breaks the layout rules (order, alignment, bounds, zero length).
    #[error("bad run #{index} (offset {offset}, len {len}): {reason}")]
    BadRun {
        /// Zero-based position of the run.
        index: u64,
        /// Its offset in the new image.
        offset: u64,
        /// Its length.
        len: u64,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The trailer's counts disagree with the runs read.
    #[error("trailer says {claimed_runs} runs / {claimed_bytes} bytes, found {runs} / {bytes}")]
    CountMismatch {
        /// Run count in the trailer.
        claimed_runs: u64,
        /// Payload bytes in the trailer.
        claimed_bytes: u64,
        /// Runs actually read.
        runs: u64,
        /// Payload bytes actually read.
        bytes: u64,
    },
    /// The image grew but the runs leave part of its new tail undescribed.
    #[error("runs do not cover the new tail: bytes {from}..{to} missing")]
    UncoveredTail {
        /// First byte not covered.
        from: u64,
        /// `new_len`.
        to: u64,
    },
    /// Checksum mismatch: the delta is corrupted.
    #[error("delta checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc {
        /// crc32c in the trailer.
        stored: u32,
        /// crc32c of the bytes read.
        computed: u32,
    },
    /// Bytes after the trailer.
    #[error("{0} unexpected bytes after the delta trailer")]
    TrailingBytes(u64),
    /// The base given to apply has a different length than the delta was made against.
    #[error("base is {actual} bytes, delta was made against {expected}")]
    BaseLength {
        /// `old_len` from the header.
        expected: u64,
        /// Length of the base supplied.
        actual: u64,
    },
    /// Reading the delta stream failed.
    #[error("reading delta: {0}")]
    Io(#[from] io::Error),
}

/// Fixed fields of a delta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaHeader {
    /// Block size the runs are aligned to.
    pub block_size: u32,
    /// Length of the base image.
    pub old_len: u64,
    /// Length of the new image.
    pub new_len: u64,
}

impl DeltaHeader {
    fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        h[16..24].copy_from_slice(&self.old_len.to_le_bytes());
        h[24..32].copy_from_slice(&self.new_len.to_le_bytes());
        h
    }

    /// Reads and checks the header at the cursor.
    fn parse(h: &mut Cursor<'_>) -> Result<Self, DeltaError> {
        if h.array::<8>("header")? != MAGIC {
            return Err(DeltaError::BadMagic);
        }
        let version = h.u16("header")?;
        if version != VERSION {
            return Err(DeltaError::UnsupportedVersion(version));
        }
        let reserved = h.u16("header")?;
        if reserved != 0 {
            return Err(DeltaError::BadReserved(reserved));
        }
        let hd = Self {
            block_size: h.u32("header")?,
            old_len: h.u64("header")?,
            new_len: h.u64("header")?,
        };
        check_block_size(hd.block_size)?;
        Ok(hd)
    }
}

fn check_block_size(b: u32) -> Result<(), DeltaError> {
    if b == 0 || b > MAX_BLOCK_SIZE {
        Err(DeltaError::BadBlockSize(b))
    } else {
        Ok(())
    }
}

/// Layout rules shared by the writer and both parsers, so a writer can never produce what a
/// parser rejects.
#[derive(Debug, Clone)]
struct Layout {
    header: DeltaHeader,
    /// End of the previous run: the next one may not start before it.
    next_min: u64,
    /// First byte of `old_len..new_len` not yet covered by a run.
    tail_next: u64,
    runs: u64,
    payload: u64,
}

impl Layout {
    fn new(header: DeltaHeader) -> Self {
        Self {
            header,
            next_min: 0,
            tail_next: header.old_len,
            runs: 0,
            payload: 0,
        }
    }

    fn run(&mut self, offset: u64, len: u64) -> Result<(), DeltaError> {
        let bad = |reason| DeltaError::BadRun {
            index: self.runs,
            offset,
            len,
            reason,
        };
        let bs = u64::from(self.header.block_size);
        if len == 0 {
            return Err(bad("empty run"));
        }
        if !offset.is_multiple_of(bs) {
            return Err(bad("offset not on a block boundary"));
        }
        if offset < self.next_min {
            return Err(bad("runs out of order or overlapping"));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.header.new_len)
            .ok_or_else(|| bad("run extends past the new image"))?;
        if !len.is_multiple_of(bs) && end != self.header.new_len {
            return Err(bad("partial block not at the end of the image"));
        }
        if offset <= self.tail_next && end > self.tail_next {
            self.tail_next = end;
        }
        self.next_min = end;
        self.runs += 1;
        self.payload += len;
        Ok(())
    }

    fn finish(&self, claimed_runs: u64, claimed_bytes: u64) -> Result<(), DeltaError> {
        if claimed_runs != self.runs || claimed_bytes != self.payload {
            return Err(DeltaError::CountMismatch {
                claimed_runs,
                claimed_bytes,
                runs: self.runs,
                bytes: self.payload,
            });
        }
        if self.tail_next < self.header.new_len {
            return Err(DeltaError::UncoveredTail {
                from: self.tail_next,
                to: self.header.new_len,
            });
        }
        Ok(())
    }
}

/// One run of a decoded delta: new-image bytes at `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run<'a> {
    /// Byte offset in the new image.
    pub offset: u64,
    /// The new bytes.
    pub data: &'a [u8],
}

/// A parsed, validated delta borrowing its run data from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delta<'a> {
    /// Block size and lengths.
    pub header: DeltaHeader,
    /// Runs, sorted by offset.
    pub runs: Vec<Run<'a>>,
}

impl Delta<'_> {
    /// Bytes of new data carried.
    pub fn payload_bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.data.len() as u64).sum()
    }

    /// Rebuilds the new image from `base`, which must be the image the delta was made against
    /// (same length). Allocates `new_len` bytes, which validation bounds by base + delta size.
    pub fn apply(&self, base: &[u8]) -> Result<Vec<u8>, DeltaError> {
        let h = self.header;
        if base.len() as u64 != h.old_len {
            return Err(DeltaError::BaseLength {
                expected: h.old_len,
                actual: base.len() as u64,
            });
        }
        let keep = h.old_len.min(h.new_len) as usize;
        let mut out = Vec::with_capacity(h.new_len as usize);
        out.extend_from_slice(&base[..keep]);
        out.resize(h.new_len as usize, 0);
        for r in &self.runs {
            let o = r.offset as usize;
            out[o..o + r.data.len()].copy_from_slice(r.data);
        }
        Ok(out)
    }
}

/// Parses and validates a complete delta held in memory: the entry point for fuzzing.
/// Never panics; memory used is proportional to the number of runs actually present.
pub fn decode(bytes: &[u8]) -> Result<Delta<'_>, DeltaError> {
    let mut cur = Cursor::new(bytes);
    let header = DeltaHeader::parse(&mut Cursor::new(cur.take(HEADER_LEN as u64, "header")?))?;
    let mut layout = Layout::new(header);
    let mut runs = Vec::new();
    loop {
        let at = cur.position() as u64;
        match cur.u8("record tag")? {
            TAG_RUN => {
                let offset = cur.u64("run header")?;
                let len = cur.u64("run header")?;
                layout.run(offset, len)?;
                let data = cur.take(len, "run data")?;
                runs.push(Run { offset, data });
            }
            TAG_END => {
                let claimed_runs = cur.u64("trailer")?;
                let claimed_bytes = cur.u64("trailer")?;
                let computed = crc32c::crc32c(cur.consumed());
                let stored = cur.u32("trailer")?;
                if stored != computed {
                    return Err(DeltaError::Crc { stored, computed });
                }
                layout.finish(claimed_runs, claimed_bytes)?;
                if !cur.is_empty() {
                    return Err(DeltaError::TrailingBytes(cur.remaining() as u64));
                }
                return Ok(Delta { header, runs });
            }
            tag => return Err(DeltaError::BadTag { tag, at }),
        }
    }
}

/// Streams a delta out: header first, then runs in ascending order, then [`DeltaWriter::finish`].
/// Layout rules are checked as runs are pushed, so the output always decodes.
pub struct DeltaWriter<W: Write> {
    w: W,
    crc: u32,
    layout: Layout,
    written: u64,
}

impl<W: Write> DeltaWriter<W> {
    /// Writes the header. Fails on an invalid block size.
    pub fn new(mut w: W, header: DeltaHeader) -> io::Result<Self> {
        check_block_size(header.block_size).map_err(invalid)?;
        let h = header.to_bytes();
        w.write_all(&h)?;
        Ok(Self {
            w,
            crc: crc32c::crc32c(&h),
            layout: Layout::new(header),
            written: HEADER_LEN as u64,
        })
    }

    /// The delta's header.
    pub fn header(&self) -> DeltaHeader {
        self.layout.header
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.w.write_all(b)?;
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.written += b.len() as u64;
        Ok(())
    }

    /// Appends a run of new-image bytes at `offset`. Fails (`InvalidInput`) on a run that
    /// breaks the layout rules (unsorted, unaligned, past the end, empty).
    pub fn push_run(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.layout.run(offset, data.len() as u64).map_err(invalid)?;
        let mut rh = [0u8; RUN_HEADER_LEN];
        rh[0] = TAG_RUN;
        rh[1..9].copy_from_slice(&offset.to_le_bytes());
        rh[9..17].copy_from_slice(&(data.len() as u64).to_le_bytes());
        self.put(&rh)?;
        self.put(data)
    }

    /// Writes the trailer and returns the inner writer and the delta's total size. Fails when
    /// the image grew and the runs did not cover the new tail.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.layout
            .finish(self.layout.runs, self.layout.payload)
            .map_err(invalid)?;
        let mut t = [0u8; TRAILER_LEN - 4];
        t[0] = TAG_END;
        t[1..9].copy_from_slice(&self.layout.runs.to_le_bytes());
        t[9..17].copy_from_slice(&self.layout.payload.to_le_bytes());
        self.put(&t)?;
        let crc = self.crc.to_le_bytes();
        self.w.write_all(&crc)?;
        self.w.flush()?;
        Ok((self.w, self.written + 4))
    }
}

fn invalid(e: DeltaError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// Appends runs for the blocks in which `new` differs from `old` (same-position bytes; blocks
/// past `old`'s end always differ) to `w`, `new` being at `base_off` in the image. Returns the
/// number of changed blocks and their bytes. Shared by [`encode`] and the file delta.
pub(crate) fn push_changed<W: Write>(
    w: &mut DeltaWriter<W>,
    base_off: u64,
    old: &[u8],
    new: &[u8],
) -> io::Result<(u64, u64)> {
    let bs = w.layout.header.block_size as usize;
    let (mut blocks, mut changed) = (0u64, 0u64);
    let mut run: Option<(usize, usize)> = None;
    for (i, nb) in new.chunks(bs).enumerate() {
        let s = i * bs;
        let ob = old.get(s..(s + nb.len()).min(old.len())).unwrap_or(&[]);
        if ob != nb {
            blocks += 1;
            changed += nb.len() as u64;
            run = match run {
                Some((rs, re)) if re == s => Some((rs, s + nb.len())),
                Some((rs, re)) => {
                    w.push_run(base_off + rs as u64, &new[rs..re])?;
                    Some((s, s + nb.len()))
                }
                None => Some((s, s + nb.len())),
            };
        }
    }
    if let Some((rs, re)) = run {
        w.push_run(base_off + rs as u64, &new[rs..re])?;
    }
    Ok((blocks, changed))
}

/// Encodes the delta from `old` to `new` at `block_size` granularity into `w`; returns the
/// delta size in bytes.
pub fn encode_to<W: Write>(old: &[u8], new: &[u8], block_size: u32, w: W) -> io::Result<u64> {
    let mut dw = DeltaWriter::new(
        w,
        DeltaHeader {
            block_size,
            old_len: old.len() as u64,
            new_len: new.len() as u64,
        },
    )?;
    push_changed(&mut dw, 0, old, new)?;
    Ok(dw.finish()?.1)
}

/// Encodes the delta from `old` to `new` into a new buffer.
pub fn encode(old: &[u8], new: &[u8], block_size: u32) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_to(old, new, block_size, &mut out)?;
    Ok(out)
}

/// Encodes the given dirty `blocks` (ascending block indices, as a tracker reports them) of
/// `image` as a same-length delta: the checkpoint-time path, where no old copy exists and the
/// tracker already knows what changed. Returns the delta size.
pub fn encode_blocks<W: Write>(image: &[u8], block_size: u32, blocks: &[u64], w: W) -> io::Result<u64> {
    let len = image.len() as u64;
    let mut dw = DeltaWriter::new(
        w,
        DeltaHeader {
            block_size,
            old_len: len,
            new_len: len,
        },
    )?;
    let bs = u64::from(block_size);
    let mut run: Option<(u64, u64)> = None;
    for &b in blocks {
        let s = b
            .checked_mul(bs)
            .filter(|&s| s < len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "block index past image"))?;
        let e = (s + bs).min(len);
        run = match run {
            Some((rs, re)) if re == s => Some((rs, e)),
            Some((rs, re)) => {
                dw.push_run(rs, &image[rs as usize..re as usize])?;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((rs, re)) = run {
        dw.push_run(rs, &image[rs as usize..re as usize])?;
    }
    Ok(dw.finish()?.1)
}

/// Streaming parser for deltas too large to hold in memory. Same rules as [`decode`]; the
/// checksum is verified when the trailer is reached, so callers must treat everything they
/// produced as provisional until [`DeltaReader::next_run`] returns `Ok(None)`.
pub struct DeltaReader<R: Read> {
    r: R,
    crc: u32,
    layout: Layout,
    pos: u64,
    /// Bytes of the current run's data not yet consumed.
    pending: u64,
    done: bool,
}

impl<R: Read> DeltaReader<R> {
    /// Reads and checks the header.
    pub fn new(mut r: R) -> Result<Self, DeltaError> {
        let mut h = [0u8; HEADER_LEN];
        read_exact(&mut r, &mut h, 0, "header")?;
        let header = DeltaHeader::parse(&mut Cursor::new(&h))?;
        Ok(Self {
            r,
            crc: crc32c::crc32c(&h),
            layout: Layout::new(header),
            pos: HEADER_LEN as u64,
            pending: 0,
            done: false,
        })
    }

    /// The delta's header.
    pub fn header(&self) -> DeltaHeader {
        self.layout.header
    }

    fn get(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), DeltaError> {
        read_exact(&mut self.r, buf, self.pos, what)?;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        self.pos += buf.len() as u64;
        Ok(())
    }

    /// Next run as `(offset, len)`; its data must then be consumed with
    /// [`DeltaReader::copy_run_data`]. `Ok(None)` after a valid trailer (checksum, counts,
    /// tail coverage) and end of input.
    pub fn next_run(&mut self) -> Result<Option<(u64, u64)>, DeltaError> {
        if self.done {
            return Ok(None);
        }
        if self.pending != 0 {
            return Err(DeltaError::Io(io::Error::other("previous run data not consumed")));
        }
        let at = self.pos;
        let mut tag = [0u8; 1];
        self.get(&mut tag, "record tag")?;
        match tag[0] {
            TAG_RUN => {
                let mut rh = [0u8; RUN_HEADER_LEN - 1];
                self.get(&mut rh, "run header")?;
                let mut rh = Cursor::new(&rh);
                let (offset, len) = (rh.u64("run header")?, rh.u64("run header")?);
                self.layout.run(offset, len)?;
                self.pending = len;
                Ok(Some((offset, len)))
            }
            TAG_END => {
                // The counts are checksummed, the checksum that follows them is not.
                let mut t = [0u8; TRAILER_LEN - 1];
                let (counts, crc) = t.split_at_mut(16);
                self.get(counts, "trailer")?;
                let computed = self.crc;
                read_exact(&mut self.r, crc, self.pos, "trailer")?;
                let mut t = Cursor::new(&t);
                let (claimed_runs, claimed_bytes) = (t.u64("trailer")?, t.u64("trailer")?);
                let stored = t.u32("trailer")?;
                if stored != computed {
                    return Err(DeltaError::Crc { stored, computed });
                }
                self.layout.finish(claimed_runs, claimed_bytes)?;
                let extra = io::copy(&mut (&mut self.r).take(1 << 20), &mut io::sink())?;
                if extra != 0 {
                    return Err(DeltaError::TrailingBytes(extra));
                }
                self.done = true;
                Ok(None)
            }
            tag => Err(DeltaError::BadTag { tag, at }),
        }
    }

    /// Copies the current run's data to `out` through `buf` (bounded memory).
    pub fn copy_run_data(&mut self, out: &mut impl Write, buf: &mut [u8]) -> Result<(), DeltaError> {
        if buf.is_empty() && self.pending > 0 {
            return Err(DeltaError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "copy buffer is empty",
            )));
        }
        while self.pending > 0 {
            let n = (buf.len() as u64).min(self.pending) as usize;
            self.get(&mut buf[..n], "run data")?;
            out.write_all(&buf[..n])?;
            self.pending -= n as u64;
        }
        Ok(())
    }
}

/// Fills `buf` from the stream at offset `at`; the end of input is [`DeltaError::Truncated`].
fn read_exact(r: &mut impl Read, buf: &mut [u8], at: u64, what: &'static str) -> Result<(), DeltaError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            DeltaError::Truncated(Truncated {
                what,
                at,
                need: buf.len() as u64,
            })
        } else {
            DeltaError::Io(e)
        }
    })
}
