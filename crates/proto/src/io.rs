//! Async frame reading and writing over the two halves of an authenticated connection.
//!
//! Readers and writers are only handed out by [`crate::Connection`] after the handshake, so
//! code holding one cannot talk to an unauthenticated peer.

use std::io::{self, IoSlice};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use crate::error::ProtoError;
use crate::frame::{
    check_payload_crc, check_prefix, encode_header, parse_header, FrameError, FrameKind, HEADER_LEN,
    PREFIX_LEN,
};

/// Read half of a transport, boxed so TCP and Unix connections share one type.
pub(crate) type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
/// Write half of a transport, boxed so TCP and Unix connections share one type.
pub(crate) type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// Buffer in front of the socket: headers and small control frames cost no extra syscall,
/// while payloads at least this large are read straight into the caller's buffer. Small,
/// because every connection holds one for its whole life: a coordinator of 4,096 nodes
/// keeps three connections or more per node (the agent's session, the requests to it, its
/// ranks'), and at 64 KiB, then 8 KiB, these buffers were the largest part of its heap.
/// Control frames are mostly smaller than this; a data frame's payload still goes straight
/// to its buffer once this one's bytes of it are copied out (`bench transport` streams as
/// fast with 2 KiB as with 64 KiB).
const READ_BUFFER: usize = 2 << 10;

fn read_error(source: io::Error) -> ProtoError {
    ProtoError::Io {
        context: "reading a frame".into(),
        source,
    }
}

fn write_error(source: io::Error) -> ProtoError {
    ProtoError::Io {
        context: "writing a frame".into(),
        source,
    }
}

/// Receiving half of an authenticated connection.
pub struct FrameReader {
    inner: BufReader<BoxRead>,
    max_payload: u32,
    scratch: Vec<u8>,
}

impl FrameReader {
    pub(crate) fn new(inner: BoxRead, max_payload: u32) -> FrameReader {
        FrameReader {
            inner: BufReader::with_capacity(READ_BUFFER, inner),
            max_payload,
            scratch: Vec::new(),
        }
    }

    /// Whether this half can carry no next exchange, found without waiting, as the runtime
    /// last saw the socket: the peer closed its end, the connection failed, or bytes arrived
    /// that no request asked for. A connection kept between requests is looked at so before
    /// it is used again: one its peer dropped a while ago (it restarted, or closed an idle
    /// connection) is then not sent a request that would be lost. One dropped this very
    /// instant fails the request as a peer that died right after it would.
    pub fn is_spent(&mut self) -> bool {
        use tokio::io::AsyncBufRead;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // Pending: nothing to read, the connection open. The noop waker stays registered
        // only until the next read polls with its own.
        std::pin::Pin::new(&mut self.inner)
            .poll_fill_buf(&mut cx)
            .is_ready()
    }

    /// Largest payload accepted; larger frames are refused before allocation.
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Changes the payload limit (e.g. to match a configured block size).
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.max_payload = max_payload;
    }

    /// Reads until `buf` is full or EOF; returns how many bytes arrived.
    async fn read_full(&mut self, buf: &mut [u8]) -> Result<usize, ProtoError> {
        self.read_full_seen(buf, |_| {}).await
    }

    /// [`Self::read_full`], handing each read's bytes to `seen` as they land — while they
    /// are still in the cache the kernel copied them through, so that a checksum over them
    /// costs no second pass over memory.
    async fn read_full_seen(
        &mut self,
        buf: &mut [u8],
        mut seen: impl FnMut(&[u8]),
    ) -> Result<usize, ProtoError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.inner.read(&mut buf[filled..]).await {
                Ok(0) => break,
                Ok(n) => {
                    seen(&buf[filled..filled + n]);
                    filled += n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_error(e)),
            }
        }
        Ok(filled)
    }

    /// Reads one frame of any kind into `buf` (resized to the payload; its capacity is
    /// reused, so a loop over data frames allocates only once).
    pub(crate) async fn recv_raw(&mut self, buf: &mut Vec<u8>) -> Result<FrameKind, ProtoError> {
        let mut header = [0u8; HEADER_LEN];
        let got = self.read_full(&mut header[..PREFIX_LEN]).await?;
        if got == 0 {
            return Err(ProtoError::Closed);
        }
        // Refuse a foreign peer on what it sent, even if that is less than a header.
        check_prefix(&header[..got])?;
        if got < PREFIX_LEN {
            return Err(ProtoError::Truncated {
                got: got as u64,
                expected: HEADER_LEN as u64,
            });
        }
        let rest = self.read_full(&mut header[PREFIX_LEN..]).await?;
        if rest < HEADER_LEN - PREFIX_LEN {
            return Err(ProtoError::Truncated {
                got: (PREFIX_LEN + rest) as u64,
                expected: HEADER_LEN as u64,
            });
        }
        let parsed = parse_header(&header, self.max_payload)?;
        let len = parsed.payload_len as usize;
        // Grow (zeroing only the new part) or shrink; never re-zero reused capacity.
        if buf.len() < len {
            buf.resize(len, 0);
        } else {
            buf.truncate(len);
        }
        let mut crc = 0;
        let got = self
            .read_full_seen(buf, |piece| crc = crc32c::crc32c_append(crc, piece))
            .await?;
        if got < len {
            return Err(ProtoError::Truncated {
                got: (HEADER_LEN + got) as u64,
                expected: (HEADER_LEN + len) as u64,
            });
        }
        check_payload_crc(&parsed, crc)?;
        Ok(parsed.kind)
    }

    /// Reads the next control or data frame into `buf` and says which it was; for streams
    /// that interleave both. Handshake frames after authentication are refused.
    pub async fn recv_into(&mut self, buf: &mut Vec<u8>) -> Result<FrameKind, ProtoError> {
        match self.recv_raw(buf).await? {
            FrameKind::Auth => Err(ProtoError::UnexpectedFrame {
                expected: "control or data",
                found: FrameKind::Auth,
            }),
            kind => Ok(kind),
        }
    }

    /// Reads the next frame, which must be a control message of type `T`.
    pub async fn recv_control<T: DeserializeOwned>(&mut self) -> Result<T, ProtoError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = self.recv_raw(&mut scratch).await.and_then(|kind| match kind {
            FrameKind::Control => serde_json::from_slice(&scratch).map_err(ProtoError::from),
            found => Err(ProtoError::UnexpectedFrame {
                expected: "control",
                found,
            }),
        });
        self.scratch = scratch;
        result
    }

    /// Reads the next frame, which must be a data frame, into `buf` (capacity reused).
    pub async fn recv_data(&mut self, buf: &mut Vec<u8>) -> Result<(), ProtoError> {
        match self.recv_raw(buf).await? {
            FrameKind::Data => Ok(()),
            found => Err(ProtoError::UnexpectedFrame {
                expected: "data",
                found,
            }),
        }
    }
}

/// Sending half of an authenticated connection.
pub struct FrameWriter {
    inner: BoxWrite,
    max_payload: u32,
    scratch: Vec<u8>,
}

impl FrameWriter {
    pub(crate) fn new(inner: BoxWrite, max_payload: u32) -> FrameWriter {
        FrameWriter {
            inner,
            max_payload,
            scratch: Vec::new(),
        }
    }

    /// Largest payload this side sends; a larger one is refused locally with a clear error
    /// instead of being refused by the peer after it was transmitted.
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Changes the send limit (keep it at or below the peer's receive limit).
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.max_payload = max_payload;
    }

    /// Writes one frame: header and payload in vectored writes, so bulk payloads are never
    /// copied behind the header.
    pub(crate) async fn send_frame(&mut self, kind: FrameKind, payload: &[u8]) -> Result<(), ProtoError> {
        write_frame(&mut self.inner, self.max_payload, kind, payload).await
    }

    /// Sends `payload` as one data frame, as raw bytes.
    pub async fn send_data(&mut self, payload: &[u8]) -> Result<(), ProtoError> {
        self.send_frame(FrameKind::Data, payload).await
    }

    /// Sends a control message, serialized as JSON.
    pub async fn send_control<T: Serialize>(&mut self, msg: &T) -> Result<(), ProtoError> {
        self.scratch.clear();
        serde_json::to_writer(&mut self.scratch, msg)?;
        write_frame(
            &mut self.inner,
            self.max_payload,
            FrameKind::Control,
            &self.scratch,
        )
        .await
    }

    /// Flushes and shuts down the write direction, so the peer sees a clean end of stream.
    pub async fn shutdown(&mut self) -> Result<(), ProtoError> {
        self.inner.shutdown().await.map_err(write_error)
    }
}

async fn write_frame(
    w: &mut BoxWrite,
    max_payload: u32,
    kind: FrameKind,
    payload: &[u8],
) -> Result<(), ProtoError> {
    if payload.len() as u64 > u64::from(max_payload) {
        return Err(FrameError::Oversize {
            len: payload.len() as u64,
            max: max_payload.into(),
        }
        .into());
    }
    let header = encode_header(kind, payload)?;
    let mut slices = [IoSlice::new(&header), IoSlice::new(payload)];
    let mut remaining: &mut [IoSlice<'_>] = &mut slices;
    while !remaining.is_empty() {
        let n = w.write_vectored(remaining).await.map_err(write_error)?;
        if n == 0 {
            return Err(write_error(io::ErrorKind::WriteZero.into()));
        }
        IoSlice::advance_slices(&mut remaining, n);
    }
    w.flush().await.map_err(write_error)
}
