//! `eckpt bench restore` as a user runs it: a store built, read back verified at each thread
//! count beside its references, and removed afterwards, with nothing else in the directory
//! touched.

mod cluster;

use cluster::{assert_refused, ok, run};

#[test]
fn bench_restore_reads_back_verified_and_cleans_up_only_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("someone-elses");
    std::fs::write(&keep, b"not the benchmark's").unwrap();
    let base = dir.path().to_str().unwrap();
    let out = ok(&[
        "bench",
        "restore",
        "--size",
        "40MiB",
        "--items",
        "3",
        "--deltas",
        "2",
        "--threads",
        "1,2",
        "--reps",
        "1",
        "--dir",
        base,
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["items"], 3);
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|row| row["threads"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 2]
    );
    for row in rows {
        for key in [
            "restore_gbytes_per_s",
            "pread_gbytes_per_s",
            "memcpy_gbytes_per_s",
        ] {
            assert!(row[key].as_f64().unwrap() > 0.0, "{key} in {row}");
        }
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(left, [keep], "the benchmark's store is removed, nothing else");
}

#[test]
fn bench_restore_refuses_a_zero_thread_count() {
    let out = run(&["bench", "restore", "--size", "1MiB", "--threads", "0"]);
    assert_refused(&out, "thread count must be at least 1");
}
