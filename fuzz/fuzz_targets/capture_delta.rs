//! The block-delta parser behind `eckpt patch` on arbitrary bytes, and applying what it
//! accepts to a base: refuse or accept, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(delta) = eckpt_capture::decode(data) {
        let base = vec![0u8; (delta.header.old_len as usize).min(1 << 20)];
        let _ = delta.apply(&base);
    }
});
