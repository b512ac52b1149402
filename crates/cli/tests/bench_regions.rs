//! `eckpt bench regions` as a user runs it: many small regions protected, checkpointed twice,
//! protected again and restarted (verified), one row per count beside its reference.

mod cluster;

use cluster::{assert_refused, ok, run};

#[test]
fn bench_regions_reports_every_count_with_its_reference() {
    let out = ok(&[
        "bench",
        "regions",
        "--counts",
        "10,300",
        "--region-size",
        "24",
        "--reps",
        "1",
        "--json",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["region_size"], 24);
    let rows = r["rows"].as_array().unwrap();
    let counts: Vec<u64> = rows.iter().map(|row| row["regions"].as_u64().unwrap()).collect();
    assert_eq!(counts, [10, 300]);
    assert_eq!(rows[1]["bytes"], 300 * 24);
    assert_eq!(rows[1]["changed_regions"], 3, "1 % of the regions");
    assert_eq!(rows[0]["changed_regions"], 1, "at least one");
    for row in rows {
        for key in [
            "protect_seconds",
            "first_checkpoint_seconds",
            "incremental_checkpoint_seconds",
            "restart_seconds",
            "protect_and_restart_seconds",
            "memcpy_seconds",
        ] {
            assert!(row[key].as_f64().unwrap() > 0.0, "{key} in {row}");
        }
    }
}

#[test]
fn bench_regions_refuses_a_zero_count() {
    let out = run(&["bench", "regions", "--counts", "10,0"]);
    assert_refused(&out, "a region count must be at least 1");
}
