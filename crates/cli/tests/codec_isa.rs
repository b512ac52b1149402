//! `ECKPT_ISA` as a user meets it: each ISA level this CPU has, forced, encodes shards
//! byte-identical to every other level's (and decodes them back); `bench codec` says the
//! CPU's levels and the kernel it ran; a level that is unknown or missing is refused with
//! one line naming it.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn eckpt(isa: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .env("ECKPT_ISA", isa)
        .args(args)
        .output()
        .expect("eckpt runs")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn every_level_encodes_the_same_shards() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    // Not a multiple of any vector: every level meets heads and tails.
    let data: Vec<u8> = (0..300_001u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&input, &data).unwrap();
    let levels = eckpt_codec::cpu_isa();
    let mut first: Option<Vec<Vec<u8>>> = None;
    for level in &levels {
        let shards = dir.path().join(format!("shards-{level}"));
        let out = eckpt(
            level,
            &[
                "encode",
                "--k",
                "5",
                "--m",
                "3",
                "--block-size",
                "10000",
                "--json",
                input.to_str().unwrap(),
                "--out",
                shards.to_str().unwrap(),
            ],
        );
        assert_eq!(json(&out)["kernel"], *level);
        let files = read_shards(&shards, 8);
        match &first {
            Some(expected) => assert!(files == *expected, "{level} wrote other shards"),
            None => first = Some(files),
        }
        for lost in [0, 4, 6] {
            fs::remove_file(shards.join(format!("shard.{lost:03}"))).unwrap();
        }
        let back = dir.path().join(format!("back-{level}"));
        let out = eckpt(
            level,
            &[
                "decode",
                shards.to_str().unwrap(),
                "--out",
                back.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(fs::read(&back).unwrap() == data, "{level} decoded other bytes");
    }
}

fn read_shards(dir: &Path, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| fs::read(dir.join(format!("shard.{i:03}"))).unwrap())
        .collect()
}

#[test]
fn bench_codec_reports_the_cpu_and_the_forced_kernel() {
    let levels = eckpt_codec::cpu_isa();
    let Some(lowest) = levels.first() else {
        eprintln!("SKIPPED: no x86-64 ISA level on this CPU");
        return;
    };
    let out = eckpt(
        lowest,
        &[
            "bench",
            "codec",
            "--k",
            "4",
            "--m",
            "2",
            "--block-size",
            "4KiB",
            "--reps",
            "1",
            "--klauspost",
            "/nonexistent/klauspost-bench",
            "--json",
        ],
    );
    let report = json(&out);
    assert_eq!(report["kernel"], *lowest);
    assert_eq!(report["cpu_isa"], serde_json::json!(levels));
    assert!(report["klauspost"].is_null(), "no harness, no figures");
}

#[test]
fn a_level_that_is_unknown_or_missing_is_refused() {
    let mut refused = vec!["avx9".to_string()];
    let levels = eckpt_codec::cpu_isa();
    refused.extend(
        ["ssse3", "avx2", "avx512", "gfni"]
            .iter()
            .filter(|l| !levels.contains(l))
            .map(|l| l.to_string()),
    );
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    fs::write(&input, b"some bytes").unwrap();
    for isa in refused {
        let out = eckpt(
            &isa,
            &[
                "encode",
                "--k",
                "2",
                "--m",
                "1",
                input.to_str().unwrap(),
                "--out",
                dir.path().join("s").to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "ECKPT_ISA={isa} was accepted");
        assert!(err.contains(&format!("ECKPT_ISA={isa}")), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}
