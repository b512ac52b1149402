//! Fuzz target `update_records`: the check `eckpt_fuzz_checks::update_records` under libFuzzer. What it
//! asserts is said there; `make test` replays this target's corpus through the same check.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eckpt_fuzz_checks::update_records(data));
