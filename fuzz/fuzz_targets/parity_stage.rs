//! Fuzz target `parity_stage`: the check `eckpt_fuzz_checks::parity_stage` under libFuzzer. What it
//! asserts is said there; `make test` replays this target's corpus through the same check.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| eckpt_fuzz_checks::parity_stage(data));
