//! `eckpt delta` / `eckpt patch` / `eckpt bench capture` as a user runs them.

use std::fs;
use std::process::{Command, Output};

fn eckpt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args(args)
        .output()
        .expect("eckpt runs")
}

#[test]
fn delta_then_patch_rebuilds_the_new_image() {
    let tmp = tempfile::tempdir().unwrap();
    let [base, new, delta, out] = ["base", "new", "d", "out"].map(|name| tmp.path().join(name));
    let mut image: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(&base, &image).unwrap();
    for page in [0usize, 100, 101, 700] {
        image[page * 4096 + 3] ^= 0x80;
    }
    image.extend_from_slice(b"grown tail");
    fs::write(&new, &image).unwrap();

    let o = eckpt(&[
        "delta",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "-o",
        delta.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Four changed pages plus the tail block that grew.
    assert_eq!(stats["blocks_changed"], 5);
    assert!(stats["delta_bytes"].as_u64().unwrap() < 6 * 4096);

    let o = eckpt(&[
        "patch",
        base.to_str().unwrap(),
        delta.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(fs::read(&out).unwrap() == image);
}

#[test]
fn a_corrupt_delta_is_refused_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let [base, new, delta, out] = ["base", "new", "d", "out"].map(|name| tmp.path().join(name));
    fs::write(&base, vec![1u8; 50_000]).unwrap();
    fs::write(&new, vec![2u8; 50_000]).unwrap();
    assert!(eckpt(&[
        "delta",
        base.to_str().unwrap(),
        new.to_str().unwrap(),
        "-o",
        delta.to_str().unwrap()
    ])
    .status
    .success());
    let mut bytes = fs::read(&delta).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    fs::write(&delta, bytes).unwrap();
    let o = eckpt(&[
        "patch",
        base.to_str().unwrap(),
        delta.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out.exists());
}

#[test]
fn bench_capture_reports_tracking_and_file_deltas() {
    let o = eckpt(&[
        "bench",
        "capture",
        "--size",
        "8MiB",
        "--pattern",
        "lu",
        "--no-xdelta3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["pattern"], "lu");
    assert_eq!(r["size"], 8 << 20);
}
