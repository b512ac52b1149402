//! `eckpt bench control` at 64 and 1,024 nodes: the real coordinator and agents (hosted many
//! per process) through epochs and the loss of two nodes. What is asserted does not depend on
//! the machine's speed: every rank restarts with exactly the bytes it checkpointed, and what
//! an epoch costs the coordinator per node — journal bytes, read and write calls — does not
//! grow with the cluster (timings stay in the benchmark).

use std::process::Command;

/// The benchmark at `nodes` nodes. Heartbeats cost the coordinator per second, not per
/// epoch, and an epoch of 1,024 nodes on a few cores lasts seconds: with the default liveness
/// (a heartbeat per node every 0.5 s) they would be most of the calls counted per node and
/// epoch at 1,024 nodes and almost none at 64. A liveness of 30 s makes them rare, so the
/// figures compared are the epoch's. (Killed agents are seen dead when their sockets close.)
fn bench(nodes: usize) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args(["bench", "control", "--nodes", &nodes.to_string()])
        .args([
            "--k",
            "14",
            "--m",
            "2",
            "--epochs",
            "6",
            "--rest",
            "0.5",
            "--kill",
            "2",
            "--liveness",
            "30s",
            "--json",
        ])
        .output()
        .expect("eckpt runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn number(report: &serde_json::Value, field: &str) -> f64 {
    report[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no {field} in {report}"))
}

#[test]
fn a_thousand_nodes_checkpoint_lose_two_and_restart_byte_exact_at_the_cost_per_node_of_sixty_four() {
    let small = bench(64);
    let large = bench(1024);
    for (report, nodes) in [(&small, 64), (&large, 1024)] {
        assert_eq!(report["nodes"], nodes);
        // 14 of each 16 nodes hold data, one rank each; the benchmark restarted every one
        // of them and compared its bytes (it fails otherwise).
        assert_eq!(report["ranks"], nodes / 16 * 14, "{report}");
        assert_eq!(report["killed"], serde_json::json!(["n0", "n1"]), "{report}");
        assert!(number(report, "restart_seconds") > 0.0, "{report}");
        assert!(number(report, "journal_bytes_per_epoch") > 0.0, "{report}");
    }
    // Per node and epoch, the 1,024-node cluster costs the coordinator what 64 nodes do:
    // a cost per message or per journal write that grew with the node table would multiply
    // this by 16.
    for field in [
        "coordinator_io_calls_per_node_per_epoch",
        "coordinator_io_bytes_per_node_per_epoch",
    ] {
        let (at_64, at_1024) = (number(&small, field), number(&large, field));
        assert!(
            at_1024 <= 2.0 * at_64,
            "{field}: {at_1024} at 1,024 nodes, {at_64} at 64"
        );
    }
    // An epoch appends a record of what changed to the journal's log (a few hundred bytes per
    // group, most of them the new chunk checksums): never the whole journal. A snapshot
    // falls on one epoch in many; the median over five is an epoch without one.
    let journal_per_node = |r: &serde_json::Value| number(r, "journal_bytes_per_epoch") / number(r, "nodes");
    assert!(
        journal_per_node(&large) <= 1.25 * journal_per_node(&small),
        "journal bytes per node and epoch: {} at 1,024 nodes, {} at 64",
        journal_per_node(&large),
        journal_per_node(&small)
    );
    let journal = number(&large, "journal_bytes_per_epoch");
    assert!(
        journal <= 64.0 * 1024.0,
        "{journal} journal bytes per epoch at 1,024 nodes"
    );
}

#[test]
fn a_dir_that_does_not_exist_is_named_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_eckpt"))
        .args([
            "bench",
            "control",
            "--nodes",
            "4",
            "--dir",
            "/nonexistent-eckpt/bench",
        ])
        .output()
        .expect("eckpt runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "cannot make the benchmark's directory in /nonexistent-eckpt/bench: No such file or directory"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
}
