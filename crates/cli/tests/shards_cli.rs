//! `eckpt encode / decode / verify` as a user runs them: real files, shards deleted, truncated
//! and corrupted on disk, bytes compared with the original.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn eckpt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args(args)
        .output()
        .expect("eckpt runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as u8
        })
        .collect()
}

/// Writes `len` random bytes to `dir/input` and encodes them into `dir/shards`.
fn encoded(
    dir: &Path,
    len: usize,
    k: usize,
    m: usize,
    block: usize,
    code: &str,
) -> (PathBuf, PathBuf, Vec<u8>) {
    let input = dir.join("input");
    let data = random_bytes(len, len as u64 * 7 + k as u64);
    fs::write(&input, &data).unwrap();
    let shards = dir.join("shards");
    let out = eckpt(&[
        "encode",
        "--k",
        &k.to_string(),
        "--m",
        &m.to_string(),
        "--code",
        code,
        "--block-size",
        &block.to_string(),
        input.to_str().unwrap(),
        "--out",
        shards.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "encode failed: {}", stderr(&out));
    (input, shards, data)
}

fn shard(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("shard.{i:03}"))
}

fn decode_to(shards: &Path, out: &Path) -> Output {
    eckpt(&["decode", shards.to_str().unwrap(), "--out", out.to_str().unwrap()])
}

fn flip_byte(path: &Path, offset: usize) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset] ^= 0x5A;
    fs::write(path, bytes).unwrap();
}

#[test]
fn writes_k_plus_m_equal_raw_shards_and_a_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, data) = encoded(tmp.path(), 100_000, 4, 2, 4096, "cauchy");
    let stripes = 100_000usize.div_ceil(4 * 4096);
    for i in 0..6 {
        assert_eq!(
            fs::metadata(shard(&shards, i)).unwrap().len() as usize,
            stripes * 4096
        );
    }
    assert!(!shard(&shards, 6).exists());
    // Data shard i holds bytes [i·B, (i+1)·B) of every stripe.
    let s1 = fs::read(shard(&shards, 1)).unwrap();
    assert_eq!(&s1[..4096], &data[4096..8192]);
    assert_eq!(&s1[4096..8192], &data[4 * 4096 + 4096..4 * 4096 + 8192]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(shards.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["input_len"], 100_000);
    assert_eq!(manifest["k"], 4);
    assert_eq!(manifest["code"], "cauchy");
}

#[test]
fn rs_code_with_one_parity_is_xor_of_the_data_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, _) = encoded(tmp.path(), 50_000, 5, 1, 1000, "rs");
    let mut xor = vec![0u8; fs::metadata(shard(&shards, 0)).unwrap().len() as usize];
    for i in 0..5 {
        for (x, b) in xor.iter_mut().zip(fs::read(shard(&shards, i)).unwrap()) {
            *x ^= b;
        }
    }
    assert_eq!(fs::read(shard(&shards, 5)).unwrap(), xor);
}

#[test]
fn any_m_missing_or_corrupt_shards_decode_byte_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, data) = encoded(tmp.path(), 1_234_567, 6, 3, 16384, "cauchy");
    // Lose a data shard, corrupt one block of another data shard and one of a parity shard,
    // and truncate nothing else: three damaged shards in some stripes, at most m=3 anywhere.
    fs::remove_file(shard(&shards, 2)).unwrap();
    flip_byte(&shard(&shards, 0), 16384 * 3 + 17);
    flip_byte(&shard(&shards, 7), 5);
    let out = tmp.path().join("restored");
    let o = decode_to(&shards, &out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(&out).unwrap(), data);

    let v = eckpt(&["verify", shards.to_str().unwrap(), "--json"]);
    assert_eq!(v.status.code(), Some(3), "damaged but recoverable");
    let report: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(report["shards"][2]["status"], "missing");
    assert_eq!(report["shards"][0]["status"], "damaged");
    assert_eq!(report["shards"][0]["first_bad_stripe"], 3);
    assert_eq!(report["shards"][7]["bad_blocks"], 1);
    assert_eq!(report["shards"][1]["status"], "ok");
    assert_eq!(report["recoverable"], true);
}

#[test]
fn truncated_shard_counts_as_lost_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, data) = encoded(tmp.path(), 300_000, 3, 2, 8192, "rs");
    let f = fs::OpenOptions::new()
        .write(true)
        .open(shard(&shards, 1))
        .unwrap();
    f.set_len(8192 * 2 + 100).unwrap();
    let out = tmp.path().join("restored");
    let o = decode_to(&shards, &out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(&out).unwrap(), data);
}

#[test]
fn more_than_m_losses_fail_with_one_line_naming_them_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, _) = encoded(tmp.path(), 200_000, 4, 2, 4096, "cauchy");
    fs::remove_file(shard(&shards, 1)).unwrap();
    fs::remove_file(shard(&shards, 4)).unwrap();
    flip_byte(&shard(&shards, 3), 4096 * 5 + 1);
    let out = tmp.path().join("restored");
    let o = decode_to(&shards, &out);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("stripe 5"), "{err}");
    for name in [
        "shard.001 missing",
        "shard.003 checksum mismatch",
        "shard.004 missing",
    ] {
        assert!(err.contains(name), "{err} should name {name}");
    }
    assert!(!out.exists(), "no output on failure");
    assert!(fs::read_dir(tmp.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("eckpt-tmp")));

    let v = eckpt(&["verify", shards.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(1));
    assert!(stderr(&v).contains("cannot be rebuilt"));

    // Whole files missing beyond m: refused up front, naming the files.
    fs::remove_file(shard(&shards, 0)).unwrap();
    let o = decode_to(&shards, &out);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("shard.000, shard.001, shard.004"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn intact_set_verifies_clean_and_empty_input_roundtrips() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, data) = encoded(tmp.path(), 0, 2, 1, 512, "cauchy");
    assert!(data.is_empty());
    let v = eckpt(&["verify", shards.to_str().unwrap()]);
    assert!(v.status.success(), "{}", stderr(&v));
    let out = tmp.path().join("restored");
    assert!(decode_to(&shards, &out).status.success());
    assert_eq!(fs::read(&out).unwrap(), Vec::<u8>::new());
}

#[test]
fn bad_input_gets_a_clear_error_and_never_touches_an_existing_set() {
    let tmp = tempfile::tempdir().unwrap();
    let (input, shards, _) = encoded(tmp.path(), 10_000, 2, 2, 1024, "cauchy");
    let before = fs::read(shard(&shards, 0)).unwrap();
    let o = eckpt(&[
        "encode",
        "--k",
        "2",
        "--m",
        "2",
        input.to_str().unwrap(),
        "--out",
        shards.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already holds"), "{}", stderr(&o));
    assert_eq!(fs::read(shard(&shards, 0)).unwrap(), before);

    let o = eckpt(&[
        "encode",
        "--k",
        "200",
        "--m",
        "100",
        input.to_str().unwrap(),
        "--out",
        "/nonexistent/x",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("k + m"), "{}", stderr(&o));

    fs::write(shards.join("manifest.json"), b"{\"format\": \"eckpt-shards\"").unwrap();
    let o = decode_to(&shards, &tmp.path().join("x"));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("invalid manifest"), "{}", stderr(&o));

    let o = eckpt(&[
        "encode",
        "--k",
        "2",
        "--m",
        "1",
        "/no/such/file",
        "--out",
        tmp.path().join("o").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot open /no/such/file"));
}

#[test]
fn json_summaries_report_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    fs::write(&input, random_bytes(70_000, 3)).unwrap();
    let shards = tmp.path().join("s");
    let o = eckpt(&[
        "encode",
        "--k",
        "3",
        "--m",
        "2",
        "--block-size",
        "4KiB",
        "--json",
        input.to_str().unwrap(),
        "--out",
        shards.to_str().unwrap(),
    ]);
    assert!(o.status.success());
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["input_bytes"], 70_000);
    assert_eq!(s["stripes"], 6);
    assert_eq!(s["shard_bytes"], 6 * 4096);
}

#[test]
fn bench_codec_reports_every_figure() {
    let o = eckpt(&[
        "bench",
        "codec",
        "--k",
        "4",
        "--m",
        "2",
        "--block-size",
        "64KiB",
        "--reps",
        "1",
        "--klauspost",
        "/nonexistent/klauspost-bench",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in ["encode_gbps", "update_gbps", "decode_gbps", "memcpy_gbps"] {
        assert!(r[key].as_f64().unwrap() > 0.0, "{key}");
    }
}

#[test]
fn files_spanning_several_batches_roundtrip_with_damage_in_each() {
    // 80 MiB with k=2 and 1 MiB blocks: 40 stripes, three 32 MiB batches in flight.
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, data) = encoded(tmp.path(), 80 << 20, 2, 1, 1 << 20, "cauchy");
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(shards.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["shards"][0]["crc32c"].as_str().unwrap().len(), 40 * 8);
    for stripe in [1usize, 20, 39] {
        flip_byte(&shard(&shards, stripe % 2), (stripe << 20) + 99);
    }
    let out = tmp.path().join("restored");
    let o = decode_to(&shards, &out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(fs::read(&out).unwrap() == data);
}

/// A manifest whose recorded length was changed (shorter, or longer into the zero padding)
/// no longer describes the shards: verify says so instead of calling the set intact.
#[test]
fn a_manifest_with_a_changed_length_is_not_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shards, _) = encoded(tmp.path(), 100_000, 4, 2, 4096, "cauchy");
    let manifest = shards.join("manifest.json");
    let original = fs::read_to_string(&manifest).unwrap();
    assert!(eckpt(&["verify", shards.to_str().unwrap()]).status.success());
    for len in ["99999", "100001"] {
        fs::write(&manifest, original.replace("100000", len)).unwrap();
        let out = eckpt(&["verify", shards.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "input_len {len}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("do not hold the input the manifest describes"),
            "{}",
            stderr(&out)
        );
    }
}

/// Devices and pipes have no fixed length: encode refuses them instead of reading forever.
#[test]
fn encode_refuses_a_device() {
    let tmp = tempfile::tempdir().unwrap();
    let out = eckpt(&[
        "encode",
        "--k",
        "2",
        "--m",
        "1",
        "/dev/zero",
        "--out",
        tmp.path().join("s").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/dev/zero: not a regular file"),
        "{}",
        stderr(&out)
    );
}
