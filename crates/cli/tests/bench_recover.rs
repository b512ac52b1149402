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
        let (decode, restored) = (r["decode_seconds"].as_f64().unwrap(), r["restored_seconds"].as_f64().unwrap());
        assert!(decode > 0.0 && restored >= decode, "{r}");
    }
}
