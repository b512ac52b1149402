//! A stripe blob (a node's serialized deltas, possibly decoded from other nodes' shards) on
//! arbitrary bytes: refuse or accept, never panic; what is accepted re-encodes to deltas
//! that parse again to the same thing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(deltas) = eckpt_cluster::shard::parse_stripe_blob(data) {
        for d in deltas {
            let again = d.encode().expect("a parsed delta encodes");
            assert_eq!(eckpt_store::parse_delta(&again).expect("re-parses"), d);
        }
    }
});
