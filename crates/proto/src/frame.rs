//! Sans-IO frame codec: pure functions over byte slices, so the same checks run in the async
//! reader, in the fuzzer and in any other I/O model.
//!
//! # Wire format (version 1)
//!
//! ```text
//! offset size field
//!  0     4    magic          b"ECKP"
//!  4     1    version        1
//!  5     1    kind           1 = Auth, 2 = Control, 3 = Data
//!  6     2    flags          u16 LE, must be 0 (reserved for later versions)
//!  8     4    payload_len    u32 LE, at most the receiver's limit
//! 12     4    payload_crc    CRC-32C of the payload, u32 LE
//! 16     4    header_crc     CRC-32C of bytes 0..16, u32 LE
//! 20     payload_len bytes   payload (Control: JSON; Data: raw bytes; Auth: see `auth`)
//! ```
//!
//! The header has its own checksum so a corrupted length is caught before the receiver
//! waits for (or allocates) a payload of the wrong size; the payload checksum catches
//! corruption of bulk data that TCP's 16-bit checksum lets through.

use std::fmt;

/// First four bytes of every frame: lets a receiver reject a stray client (HTTP, a port
/// scanner, another protocol) on its first bytes instead of misreading them as a length.
pub const MAGIC: [u8; 4] = *b"ECKP";

/// The only protocol version this build speaks; peers of another version are refused with
/// an error naming both versions, rather than misparsed.
pub const PROTOCOL_VERSION: u8 = 1;

/// Size of the fixed frame header in bytes.
pub const HEADER_LEN: usize = 20;

/// Bytes of the header (magic and version) that are checked before the rest is read, so an
/// incompatible peer is refused even if it sends fewer than [`HEADER_LEN`] bytes and waits.
pub const PREFIX_LEN: usize = 5;

/// Default limit on a frame's payload after authentication: comfortably above the 1–4 MiB
/// blocks the cluster moves, small enough that a peer cannot make us allocate gigabytes.
pub const DEFAULT_MAX_PAYLOAD: u32 = 64 << 20;

/// What a frame carries; the receiver uses it to route the payload without parsing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Handshake messages; accepted only before authentication completes.
    Auth,
    /// A serde-serialized control message (JSON).
    Control,
    /// Raw bulk bytes (checkpoint blocks), never re-encoded.
    Data,
}

impl FrameKind {
    /// The byte that identifies this kind on the wire.
    pub fn to_u8(self) -> u8 {
        match self {
            FrameKind::Auth => 1,
            FrameKind::Control => 2,
            FrameKind::Data => 3,
        }
    }

    /// Inverse of [`FrameKind::to_u8`]; `None` for bytes no kind uses.
    pub fn from_u8(byte: u8) -> Option<FrameKind> {
        match byte {
            1 => Some(FrameKind::Auth),
            2 => Some(FrameKind::Control),
            3 => Some(FrameKind::Data),
            _ => None,
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameKind::Auth => "auth",
            FrameKind::Control => "control",
            FrameKind::Data => "data",
        })
    }
}

/// A validated frame header: everything the receiver needs to read and check the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the payload is.
    pub kind: FrameKind,
    /// Payload length in bytes, already checked against the receiver's limit.
    pub payload_len: u32,
    /// CRC-32C the payload must have.
    pub payload_crc: u32,
}

/// Why bytes are not a valid frame. Every variant is a refusal: the stream cannot be
/// resynchronised, so the connection is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The first bytes are not [`MAGIC`]: the peer does not speak this protocol.
    #[error("bad magic {found:02x?}: not an eckpt frame (expected {MAGIC:02x?} \"ECKP\")")]
    BadMagic {
        /// The bytes received where the magic belongs (fewer than four if only those came).
        found: Vec<u8>,
    },
    /// The peer speaks another protocol version.
    #[error("unsupported protocol version {found} (this build speaks version {PROTOCOL_VERSION} only)")]
    UnsupportedVersion {
        /// The version byte the peer sent.
        found: u8,
    },
    /// The header's own checksum does not match: corrupted in transit.
    #[error("frame header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderChecksum {
        /// Checksum carried in the header.
        stored: u32,
        /// Checksum of the received header bytes.
        computed: u32,
    },
    /// A kind byte no version-1 frame uses.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Flags set that version 1 does not define.
    #[error("unknown frame flags {0:#06x} (version {PROTOCOL_VERSION} defines none)")]
    UnknownFlags(u16),
    /// The payload is larger than the limit; refused before any allocation.
    #[error("frame payload of {len} bytes exceeds the limit of {max} bytes")]
    Oversize {
        /// Payload length announced (or, when sending, requested).
        len: u64,
        /// The limit in force.
        max: u64,
    },
    /// The payload's checksum does not match: corrupted in transit.
    #[error("frame payload checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    PayloadChecksum {
        /// Checksum carried in the header.
        stored: u32,
        /// Checksum of the received payload.
        computed: u32,
    },
}

/// Result of [`decode_frame`] on a buffer that holds no error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A complete, verified frame at the start of the buffer.
    Frame {
        /// What the payload is.
        kind: FrameKind,
        /// The payload, borrowed from the input (no copy).
        payload: &'a [u8],
        /// Bytes of the input this frame used (header plus payload): drop them and decode on.
        consumed: usize,
    },
    /// The buffer holds a valid prefix of a frame; at least this many bytes in total are
    /// needed before the frame can be decoded.
    NeedMore {
        /// Minimum total buffer length for progress.
        at_least: usize,
    },
}

/// Checks the first up to [`PREFIX_LEN`] bytes (magic, then version) of a frame, so a reader
/// can refuse a foreign or incompatible peer before waiting for a whole header.
pub fn check_prefix(bytes: &[u8]) -> Result<(), FrameError> {
    let magic_len = bytes.len().min(MAGIC.len());
    if bytes[..magic_len] != MAGIC[..magic_len] {
        return Err(FrameError::BadMagic {
            found: bytes[..magic_len].to_vec(),
        });
    }
    match bytes.get(4) {
        Some(&version) if version != PROTOCOL_VERSION => {
            Err(FrameError::UnsupportedVersion { found: version })
        }
        _ => Ok(()),
    }
}

/// Validates a complete header against `max_payload`, in the order that gives the most
/// useful error: magic, version, header checksum, kind, flags, then size. The size check
/// comes last so a corrupted length reads as corruption, and it comes before any payload
/// is read or allocated.
pub fn parse_header(bytes: &[u8; HEADER_LEN], max_payload: u32) -> Result<FrameHeader, FrameError> {
    check_prefix(bytes)?;
    let stored = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
    let computed = crc32c::crc32c(&bytes[..16]);
    if stored != computed {
        return Err(FrameError::HeaderChecksum { stored, computed });
    }
    let kind = FrameKind::from_u8(bytes[5]).ok_or(FrameError::UnknownKind(bytes[5]))?;
    let flags = u16::from_le_bytes([bytes[6], bytes[7]]);
    if flags != 0 {
        return Err(FrameError::UnknownFlags(flags));
    }
    let payload_len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if payload_len > max_payload {
        return Err(FrameError::Oversize {
            len: payload_len.into(),
            max: max_payload.into(),
        });
    }
    let payload_crc = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    Ok(FrameHeader {
        kind,
        payload_len,
        payload_crc,
    })
}

/// Checks a received payload against its header's checksum.
pub fn verify_payload(header: &FrameHeader, payload: &[u8]) -> Result<(), FrameError> {
    check_payload_crc(header, crc32c::crc32c(payload))
}

/// Checks the CRC-32C `computed` over a received payload (as it arrived, piece by piece)
/// against its header's.
pub fn check_payload_crc(header: &FrameHeader, computed: u32) -> Result<(), FrameError> {
    if computed != header.payload_crc {
        return Err(FrameError::PayloadChecksum {
            stored: header.payload_crc,
            computed,
        });
    }
    Ok(())
}

/// Builds the header for `payload`. It is separate from the payload so a sender can write
/// both with one vectored write instead of copying megabytes of data behind a header.
pub fn encode_header(kind: FrameKind, payload: &[u8]) -> Result<[u8; HEADER_LEN], FrameError> {
    let len = u32::try_from(payload.len()).map_err(|_| FrameError::Oversize {
        len: payload.len() as u64,
        max: u32::MAX.into(),
    })?;
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&MAGIC);
    header[4] = PROTOCOL_VERSION;
    header[5] = kind.to_u8();
    // bytes 6..8: flags, zero
    header[8..12].copy_from_slice(&len.to_le_bytes());
    header[12..16].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let header_crc = crc32c::crc32c(&header[..16]);
    header[16..20].copy_from_slice(&header_crc.to_le_bytes());
    Ok(header)
}

/// A whole frame as one buffer, for callers without vectored I/O (tests, fuzzing, tools
/// writing to a file).
pub fn encode_frame(kind: FrameKind, payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let header = encode_header(kind, payload)?;
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&header);
    frame.extend_from_slice(payload);
    Ok(frame)
}

/// Decodes the frame at the start of `buf`, refusing payloads over `max_payload` before
/// they are buffered. Errors surface as soon as the bytes that prove them are present, so
/// a byte-at-a-time feed sees the same outcome as a whole buffer.
pub fn decode_frame(buf: &[u8], max_payload: u32) -> Result<Decoded<'_>, FrameError> {
    check_prefix(&buf[..buf.len().min(PREFIX_LEN)])?;
    let Some(header_bytes) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(Decoded::NeedMore { at_least: HEADER_LEN });
    };
    let header = parse_header(header_bytes, max_payload)?;
    let total = HEADER_LEN + header.payload_len as usize;
    let Some(payload) = buf.get(HEADER_LEN..total) else {
        return Ok(Decoded::NeedMore { at_least: total });
    };
    verify_payload(&header, payload)?;
    Ok(Decoded::Frame {
        kind: header.kind,
        payload,
        consumed: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_is_the_documented_one() {
        let frame = encode_frame(FrameKind::Data, b"abc").unwrap();
        assert_eq!(&frame[..4], b"ECKP");
        assert_eq!(frame[4], 1);
        assert_eq!(frame[5], 3);
        assert_eq!(&frame[6..8], &[0, 0]);
        assert_eq!(&frame[8..12], &3u32.to_le_bytes());
        assert_eq!(&frame[12..16], &crc32c::crc32c(b"abc").to_le_bytes());
        assert_eq!(&frame[16..20], &crc32c::crc32c(&frame[..16]).to_le_bytes());
        assert_eq!(&frame[20..], b"abc");
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let mut frame = encode_frame(FrameKind::Control, b"{}").unwrap();
        frame[4] = 7;
        let err = decode_frame(&frame, 1024).unwrap_err();
        assert_eq!(err, FrameError::UnsupportedVersion { found: 7 });
        assert!(err.to_string().contains("version 7"), "{err}");
        assert!(err.to_string().contains("version 1"), "{err}");

        let err = decode_frame(b"GET / HTTP/1.1\r\n", 1024).unwrap_err();
        assert_eq!(
            err,
            FrameError::BadMagic {
                found: b"GET ".to_vec()
            }
        );
        // A foreign first byte is refused without waiting for more.
        assert!(matches!(
            decode_frame(b"G", 1024),
            Err(FrameError::BadMagic { .. })
        ));

        let big = encode_frame(FrameKind::Data, &[0u8; 2048]).unwrap();
        let err = decode_frame(&big[..HEADER_LEN], 1024).unwrap_err();
        assert_eq!(err, FrameError::Oversize { len: 2048, max: 1024 });
        assert!(
            err.to_string().contains("2048") && err.to_string().contains("1024"),
            "{err}"
        );
    }

    #[test]
    fn corrupted_length_is_a_checksum_error_not_a_wait() {
        let mut frame = encode_frame(FrameKind::Data, &[5u8; 100]).unwrap();
        frame[9] ^= 0x01; // length 100 -> 356
        assert!(matches!(
            decode_frame(&frame, 1 << 20),
            Err(FrameError::HeaderChecksum { .. })
        ));
    }

    #[test]
    fn payload_corruption_is_detected() {
        let mut frame = encode_frame(FrameKind::Data, &[5u8; 100]).unwrap();
        frame[HEADER_LEN + 50] ^= 0x80;
        assert!(matches!(
            decode_frame(&frame, 1 << 20),
            Err(FrameError::PayloadChecksum { .. })
        ));
    }

    #[test]
    fn nonzero_flags_and_unknown_kinds_are_refused() {
        let mut frame = encode_frame(FrameKind::Data, b"x").unwrap();
        frame[6] = 1;
        let crc = crc32c::crc32c(&frame[..16]);
        frame[16..20].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_frame(&frame, 16), Err(FrameError::UnknownFlags(1)));

        let mut frame = encode_frame(FrameKind::Data, b"x").unwrap();
        frame[5] = 9;
        let crc = crc32c::crc32c(&frame[..16]);
        frame[16..20].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_frame(&frame, 16), Err(FrameError::UnknownKind(9)));
    }

    #[test]
    fn kind_bytes_roundtrip() {
        for kind in [FrameKind::Auth, FrameKind::Control, FrameKind::Data] {
            assert_eq!(FrameKind::from_u8(kind.to_u8()), Some(kind));
        }
        assert_eq!(FrameKind::from_u8(0), None);
    }
}
