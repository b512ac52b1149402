//! `eckpt bench cluster --recover` end to end on loopback: nodes die, the recovery decodes
//! their ranks onto spares or survivors, and the report says what the decode moved over
//! its busiest link and how that compares with the link.

use std::process::Command;

fn bench(spares: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args([
            "bench",
            "cluster",
            "--nodes",
            "5",
            "--k",
            "3",
            "--m",
            "2",
            "--size-per-node",
            "2MiB",
            "--block-size",
            "64KiB",
            "--reps",
            "1",
            "--recover",
            "--spares",
            spares,
            "--json",
        ])
        .output()
        .expect("eckpt runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn recovery_onto_spares_and_onto_survivors_is_measured() {
    for (spares, onto) in [("2", "spares"), ("0", "survivors")] {
        let report = bench(spares);
        let r = &report["recovery"];
        assert_eq!(r["onto"], onto);
        assert_eq!(r["lost"], serde_json::json!(["n0", "n1"]));
        let rebuilt = r["rebuilt"].as_array().unwrap();
        assert_eq!(rebuilt.len(), 2, "{r}");
        for (lost, ranks) in rebuilt.iter().map(|x| (x[0].as_str().unwrap(), &x[1])) {
            for node in ranks.as_object().unwrap().values() {
                let node = node.as_str().unwrap();
                assert_ne!(node, lost);
                assert_eq!(node.starts_with('s'), onto == "spares", "{lost} → {node}");
            }
        }
        // Two data shards of 2 MiB each are rebuilt: every byte crosses some link.
        let busiest = r["decode_link_bytes"].as_u64().unwrap();
        assert!(busiest >= 2 << 20, "{r}");
        let efficiency = r["recover_efficiency"].as_f64().unwrap();
        assert!(efficiency.is_finite() && efficiency > 0.0, "{r}");
        let (decode, restored) = (
            r["decode_seconds"].as_f64().unwrap(),
            r["restored_seconds"].as_f64().unwrap(),
        );
        assert!(decode > 0.0 && restored >= decode, "{r}");
    }
}

/// Agents rebuilding 256 MiB each within 96 MiB of memory: the decode streams rebuilt chunks
/// to disk and the install reads them back a window at a time, so holding a rebuilt shard
/// (or a rank image) whole would get the agent killed and the recovery would fail.
#[test]
fn recovery_runs_within_a_memory_limit_smaller_than_what_it_rebuilds() {
    // Off tmpfs: tmpfs pages count as their writer's memory and are never reclaimed.
    let dir = env!("CARGO_TARGET_TMPDIR");
    let limit = 96u64 << 20;
    let out = Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args([
            "bench",
            "cluster",
            "--nodes",
            "4",
            "--k",
            "2",
            "--m",
            "2",
            "--size-per-node",
            "256MiB",
            "--reps",
            "1",
            "--recover",
            "--spares",
            "2",
            "--memory-limit",
            &limit.to_string(),
            "--dir",
            dir,
            "--json",
        ])
        .output()
        .expect("eckpt runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("memory cgroup") || stderr.contains("off tmpfs") {
        eprintln!("SKIPPED: {stderr}");
        return;
    }
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &report["recovery"];
    assert_eq!(r["memory_limit"], limit);
    let spares = ["s0", "s1"];
    for node in spares {
        let rss = r["rss_peaks"][node].as_u64().unwrap();
        assert!(rss > 0 && rss < limit, "{node} resident {rss}");
        assert!(r["memory_peaks"][node].as_u64().unwrap() <= limit);
    }
    // Each spare rebuilt and installed one lost node's 256 MiB.
    let rebuilt: Vec<&str> = r["rebuilt"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|x| x[1].as_object().unwrap().values().map(|n| n.as_str().unwrap()))
        .collect();
    assert_eq!(rebuilt.len(), 2);
    assert!(rebuilt.iter().all(|n| spares.contains(n)), "{rebuilt:?}");
}
