//! The serialized epoch delta (what the cluster erasure-codes and decodes) on arbitrary
//! bytes: refuse or accept, never panic or allocate from a bogus length.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(delta) = eckpt_store::parse_delta(data) {
        let _ = delta.encoded_len();
    }
});
