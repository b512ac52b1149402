//! What every fuzz target asserts of a parser of untrusted input, as plain functions of the
//! input bytes: a parser refuses or accepts, never panics, and what it accepts is safe to
//! use and writes back to itself.
//!
//! Two runners share them. cargo-fuzz (`fuzz/`, `make fuzz`, nightly) drives them under
//! libFuzzer and grows the corpora in `fuzz/corpus/<target>/`; the test `tests/corpora.rs`
//! feeds every stored corpus file to its check on the stable toolchain, in `make test`, so an
//! input that once crashed a parser stays a regression test without nightly.

mod deltas;
mod files;
mod wire;

pub use deltas::{capture_delta, store_delta, stripe_blob, update_records};
pub use files::{flush_manifest, parity_stage, report_inputs, shard_manifest, store_manifest};
pub use wire::{control_messages, proto_frame};

/// A fuzz target: its name (the cargo-fuzz binary and its corpus directory) and its check.
pub struct Target {
    pub name: &'static str,
    pub check: fn(&[u8]),
}

/// Every fuzz target, by name.
pub const TARGETS: &[Target] = &[
    Target {
        name: "capture_delta",
        check: capture_delta,
    },
    Target {
        name: "control_messages",
        check: control_messages,
    },
    Target {
        name: "flush_manifest",
        check: flush_manifest,
    },
    Target {
        name: "parity_stage",
        check: parity_stage,
    },
    Target {
        name: "proto_frame",
        check: proto_frame,
    },
    Target {
        name: "report_inputs",
        check: report_inputs,
    },
    Target {
        name: "shard_manifest",
        check: shard_manifest,
    },
    Target {
        name: "store_delta",
        check: store_delta,
    },
    Target {
        name: "store_manifest",
        check: store_manifest,
    },
    Target {
        name: "stripe_blob",
        check: stripe_blob,
    },
    Target {
        name: "update_records",
        check: update_records,
    },
];
