//! A chunk's CRC-32C after a change, from the change alone. CRC-32C is affine,
//! `crc(a ⊕ b) = crc(a) ⊕ crc(b) ⊕ crc(0…0)`, so changing a chunk by `d` (a chunk of zeros
//! but for the changed bytes) moves its CRC by `crc(d) ⊕ crc(0…0)`, and the moves of several
//! changes add up. An update's data members and parity holders both report new CRCs this
//! way instead of reading whole chunks back; the recorded CRC, not the bytes on disk, is the
//! starting point, so damage to the unchanged bytes is never blessed.

/// A chunk-sized difference being gathered, and the CRC move it makes.
pub(crate) struct ChunkDifference {
    bytes: Vec<u8>,
    /// `crc(0…0)` of a chunk.
    zeros: u32,
}

impl ChunkDifference {
    /// An empty (all-zero) difference of chunks of `chunk` bytes.
    pub(crate) fn new(chunk: usize) -> ChunkDifference {
        let bytes = vec![0u8; chunk];
        ChunkDifference {
            zeros: crc32c::crc32c(&bytes),
            bytes,
        }
    }

    /// The difference's bytes, to XOR or read changes into.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// How the difference moves a chunk's CRC: `crc(new) = crc(old) ^ move`. Leaves the
    /// difference empty again.
    pub(crate) fn take_move(&mut self) -> u32 {
        let moved = crc32c::crc32c(&self.bytes) ^ self.zeros;
        self.bytes.fill(0);
        moved
    }
}
