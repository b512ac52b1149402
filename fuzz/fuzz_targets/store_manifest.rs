//! The store's epoch manifest parser on arbitrary bytes: refuse or accept, never panic;
//! what it accepts re-encodes to something it accepts again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(manifest) = eckpt_store::parse_manifest(data) {
        let again = eckpt_store::parse_manifest(&manifest.encode()).expect("a parsed manifest re-encodes validly");
        assert_eq!(again.encode(), manifest.encode());
    }
});
