//! What the Rust API's test files share: a standalone configuration of rank 3 with 4 KiB
//! hashing blocks, and reproducible bytes.

use std::path::Path;

use eckpt::{Config, TrackMode};

/// The rank every test checkpoints as.
pub const RANK: u32 = 3;

pub fn config(dir: &Path, track: TrackMode) -> Config {
    Config {
        dir: Some(dir.to_path_buf()),
        rank: RANK,
        track,
        hash_block_size: 4096,
        ..Config::default()
    }
}

/// Fills `buf` with xorshift bytes from `seed`.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut s = seed | 1;
    for b in buf.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = s as u8;
    }
}
