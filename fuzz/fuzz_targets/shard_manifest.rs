//! The shard-set manifest parser on arbitrary bytes: it must refuse or accept, never panic,
//! and whatever it accepts must be safe to index by stripe and shard.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(manifest) = eckpt_shards::Manifest::parse(data) {
        for shard in 0..manifest.k + manifest.m {
            for stripe in 0..manifest.stripes.min(1024) {
                let _ = manifest.block_crc(shard, stripe);
            }
        }
        let _ = manifest.shard_len();
        assert_eq!(eckpt_shards::Manifest::parse(&manifest.to_json()).ok().as_ref(), Some(&manifest));
    }
});
