//! The per-block fingerprint, defined once: the CUDA kernel (`cuda/kernels.cu`) computes it
//! on the device and [`fingerprint_block`] on the host, where it is the reference the GPU's
//! figures are checked against and what the host-memory implementation uses.
//!
//! A block is read as little-endian 64-bit words (the last one zero-padded). Word `j`
//! contributes `fmix64(w ^ j·φ)` — MurmurHash3's 64-bit finaliser, a bijection, over the word
//! salted with its position — and the block's fingerprint is the XOR of the contributions. XOR
//! makes the reduction order-free, so thousands of GPU threads can each fold a share of the
//! block; because `fmix64` is a bijection, changing any single word always changes the
//! fingerprint, and a change of several words goes unseen only if their contributions cancel,
//! which for a 64-bit mix happens with probability about 2⁻⁶⁴.

/// The golden-ratio constant that salts a word with its position in the block.
pub const POSITION_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// MurmurHash3's 64-bit finaliser (a bijection with full avalanche).
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The fingerprint of one block's bytes.
pub fn fingerprint_block(block: &[u8]) -> u64 {
    let mut words = block.chunks_exact(8);
    let mut acc = 0u64;
    let mut index = 0u64;
    for word in words.by_ref() {
        let w = u64::from_le_bytes(word.try_into().expect("chunks of 8"));
        acc ^= fmix64(w ^ index.wrapping_mul(POSITION_SALT));
        index += 1;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut padded = [0u8; 8];
        padded[..tail.len()].copy_from_slice(tail);
        acc ^= fmix64(u64::from_le_bytes(padded) ^ index.wrapping_mul(POSITION_SALT));
    }
    acc
}

/// The fingerprints of every `block`-byte block of `data` (the last may be shorter).
pub fn fingerprints(data: &[u8], block: usize) -> Vec<u64> {
    data.chunks(block).map(fingerprint_block).collect()
}

/// The length of block `index` of a region of `len` bytes cut in `block`-byte blocks: `block`,
/// but for a short last block.
pub fn block_len(index: u64, block: u64, len: u64) -> u64 {
    block.min(len - index * block)
}

/// The byte ranges `(offset, len)` of `blocks` (ascending indices) in a region of `len` bytes
/// cut in `block`-byte blocks: consecutive blocks merged, the last clipped to the region.
/// What is copied from the device, one copy per range.
pub fn byte_ranges(blocks: &[u64], block: u64, len: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &b in blocks {
        let offset = b * block;
        let n = block_len(b, block, len);
        match out.last_mut() {
            Some((o, l)) if *o + *l == offset => *l += n,
            _ => out.push((offset, n)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn fmix64_matches_murmur3() {
        // MurmurHash3's fmix64 of 1, computed independently.
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
    }

    #[test]
    fn the_tail_is_zero_padded_and_position_salted() {
        let mut word = [0u8; 8];
        word[..3].copy_from_slice(b"abc");
        assert_eq!(fingerprint_block(b"abc"), fmix64(u64::from_le_bytes(word)));
        let two_words: Vec<u8> = (0..16).collect();
        let expected = fmix64(u64::from_le_bytes(two_words[..8].try_into().unwrap()))
            ^ fmix64(u64::from_le_bytes(two_words[8..].try_into().unwrap()) ^ POSITION_SALT);
        assert_eq!(fingerprint_block(&two_words), expected);
    }

    #[test]
    fn swapped_words_change_the_fingerprint() {
        // A plain XOR or sum of words would not see two words trade places.
        let a: Vec<u8> = [1u64, 2].iter().flat_map(|w| w.to_le_bytes()).collect();
        let b: Vec<u8> = [2u64, 1].iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_ne!(fingerprint_block(&a), fingerprint_block(&b));
    }

    #[test]
    fn ranges_merge_neighbours_and_clip_the_last_block() {
        assert_eq!(byte_ranges(&[0, 1, 3, 4], 10, 45), vec![(0, 20), (30, 15)]);
        assert_eq!(byte_ranges(&[], 10, 45), vec![]);
    }

    proptest! {
        #[test]
        fn any_change_of_one_byte_changes_its_blocks_fingerprint(
            data in proptest::collection::vec(any::<u8>(), 1..300),
            at in any::<prop::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let mut changed = data.clone();
            let i = at.index(data.len());
            changed[i] ^= flip;
            prop_assert_ne!(fingerprint_block(&data), fingerprint_block(&changed));
        }
    }
}
