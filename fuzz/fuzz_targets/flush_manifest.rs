//! The flushed-epoch manifest parser on arbitrary bytes (it is read from shared storage
//! after a disaster): refuse or accept, never panic; what it accepts is safe to index by
//! rank, item and block, and writes back to the same manifest. Input that is a manifest's
//! JSON but for its checksum is also resealed, so the structural rules behind the checksum
//! are fuzzed too.
#![no_main]

use std::path::Path;

use eckpt_flush::{ItemEntry, Manifest};
use libfuzzer_sys::fuzz_target;

fn exercise(manifest: &Manifest) {
    for rank in 0..manifest.world {
        let entry = manifest.rank(rank).expect("every rank of the world is there");
        for item in &entry.items {
            for block in 0..ItemEntry::blocks(item.len, manifest.block_size).min(1024) {
                let _ = item.block_crc(block);
            }
        }
    }
    let _ = manifest.total_bytes();
    let again = Manifest::parse(&manifest.to_json(), Path::new("fuzz")).expect("a manifest writes back validly");
    assert_eq!(&again, manifest);
}

fuzz_target!(|data: &[u8]| {
    if let Ok(manifest) = Manifest::parse(data, Path::new("fuzz")) {
        exercise(&manifest);
    }
    if let Ok(raw) = serde_json::from_slice::<Manifest>(data) {
        if let Ok(resealed) = Manifest::new(raw.epoch, raw.world, raw.block_size, raw.ranks) {
            exercise(&resealed);
        }
    }
});
