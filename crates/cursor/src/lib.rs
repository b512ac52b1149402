//! The one byte cursor of eckpt's binary formats: a bounds-checked little-endian reader over
//! a byte slice. Every read returns the bytes asked for or a [`Truncated`] naming the field
//! the input ended in and where; nothing panics and nothing is allocated, so parsers of
//! untrusted input (capture deltas, store deltas, …) can be written as a sequence of `?`.
//!
//! ```
//! use eckpt_cursor::Cursor;
//!
//! let mut c = Cursor::new(&[7, 1, 0, 0, 0, 0xAB]);
//! assert_eq!(c.u8("tag").unwrap(), 7);
//! assert_eq!(c.u32("length").unwrap(), 1);
//! assert_eq!(c.take(1, "payload").unwrap(), &[0xAB]);
//! let e = c.u16("crc").unwrap_err();
//! assert_eq!(e.to_string(), "input ends inside the crc (2 bytes needed at byte 6)");
//! ```
//!
//! Why not `bytes::Buf` or `byteorder`: their errors say neither which field nor where, so
//! every call would need its own `map_err`, and neither lends out sub-slices for the input's
//! lifetime (payloads here are borrowed, never copied).

#![warn(missing_docs)]

/// The input ended inside a field: what it was, where it started, how many bytes it needed.
/// Stream readers build it too (its fields are public), so a format read from a slice and
/// from a stream fails the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("input ends inside the {what} ({need} bytes needed at byte {at})")]
pub struct Truncated {
    /// The field being read.
    pub what: &'static str,
    /// Its offset in the input.
    pub at: u64,
    /// Its length in bytes.
    pub need: u64,
}

/// A position in a byte slice; reads advance it.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes read so far: the offset of the next read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// True when everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Everything read so far (what a trailing checksum covers).
    pub fn consumed(&self) -> &'a [u8] {
        &self.bytes[..self.pos]
    }

    /// Everything not read yet, without reading it.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }

    /// The next `n` bytes, borrowed from the input. `n` is a `u64` so a length field can be
    /// passed as read: a length larger than the input is an error, never a cast.
    pub fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Truncated> {
        let truncated = Truncated {
            what,
            at: self.pos as u64,
            need: n,
        };
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.remaining())
            .ok_or(truncated)?;
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Truncated> {
        let (head, _) = self.rest().split_first_chunk::<N>().ok_or(Truncated {
            what,
            at: self.pos as u64,
            need: N as u64,
        })?;
        self.pos += N;
        Ok(*head)
    }

    /// The next byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, Truncated> {
        Ok(self.array::<1>(what)?[0])
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, Truncated> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, Truncated> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, Truncated> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_little_endian_fields_in_order() {
        let mut bytes = vec![0xFF];
        bytes.extend_from_slice(&0x1234u16.to_le_bytes());
        bytes.extend_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        bytes.extend_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
        bytes.extend_from_slice(b"magic");
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.u8("a").unwrap(), 0xFF);
        assert_eq!(c.u16("b").unwrap(), 0x1234);
        assert_eq!(c.u32("c").unwrap(), 0xDEAD_BEEF);
        assert_eq!(c.position(), 7);
        assert_eq!(c.consumed(), &bytes[..7]);
        assert_eq!(c.u64("d").unwrap(), 0x0102_0304_0506_0708);
        assert_eq!(c.rest(), b"magic");
        assert_eq!(&c.array::<5>("e").unwrap(), b"magic");
        assert!(c.is_empty());
        assert_eq!(c.take(0, "nothing").unwrap(), &[] as &[u8]);
    }

    #[test]
    fn a_short_read_names_the_field_and_does_not_move() {
        let mut c = Cursor::new(&[1, 2, 3]);
        c.u8("tag").unwrap();
        let e = c.u64("offset").unwrap_err();
        assert_eq!(
            e,
            Truncated {
                what: "offset",
                at: 1,
                need: 8
            }
        );
        assert_eq!(c.position(), 1);
        assert_eq!(c.take(u64::MAX, "data").unwrap_err().need, u64::MAX);
        assert_eq!(c.take(2, "data").unwrap(), &[2, 3]);
    }

    proptest! {
        /// Any sequence of reads on any input either succeeds within bounds or fails without
        /// moving; it never panics.
        #[test]
        fn reads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64),
                             ops in proptest::collection::vec((0u8..6, any::<u64>()), 0..32)) {
            let mut c = Cursor::new(&bytes);
            for (op, n) in ops {
                let before = c.position();
                let ok = match op {
                    0 => c.u8("f").is_ok(),
                    1 => c.u16("f").is_ok(),
                    2 => c.u32("f").is_ok(),
                    3 => c.u64("f").is_ok(),
                    4 => c.array::<3>("f").is_ok(),
                    _ => c.take(n % 80, "f").is_ok(),
                };
                prop_assert!(c.position() <= bytes.len());
                if !ok {
                    prop_assert_eq!(c.position(), before);
                }
                prop_assert_eq!(c.consumed().len() + c.rest().len(), bytes.len());
            }
        }
    }
}
