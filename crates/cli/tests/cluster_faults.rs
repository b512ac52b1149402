//! Killing up to m agents with `--wipe` at every phase of an epoch and of recovery leaves
//! every rank's last committed epoch restorable byte-exact, for each layout and incremental
//! mode; losing m+1 members of a group gives a clear error, never wrong bytes. Real agent
//! and coordinator processes, SIGKILL, deleted node-local data.

mod cluster;

use cluster::{bytes, touch, Cluster};

const WORLD: usize = 5;

/// A cluster of 6 (k=4, m=2) with two committed epochs.
fn two_epochs(layout: &str, mode: &str) -> (Cluster, Vec<Vec<u8>>) {
    let mut c = Cluster::up(&[
        "--nodes",
        "6",
        "--k",
        "4",
        "--m",
        "2",
        "--layout",
        layout,
        "--mode",
        mode,
        "--block-size",
        "16KiB",
    ]);
    let mut data: Vec<Vec<u8>> = (0..WORLD)
        .map(|r| bytes(200_000 + r * 37_111, r as u64 + 1))
        .collect();
    let first = c.checkpoint(data.clone(), true).expect("report");
    assert_eq!(first["outcome"]["committed"], true, "{first}");
    for (r, d) in data.iter_mut().enumerate() {
        touch(d, r as u64 + 100);
    }
    let second = c.checkpoint(data.clone(), true).expect("report");
    assert_eq!(second["outcome"]["committed"], true, "{second}");
    // The second epoch really is incremental in the incremental modes.
    let kind = second["outcome"]["kinds"][0].as_str().unwrap().to_string();
    let expected = match mode {
        "update" => "update",
        "stripe" => "stripe",
        _ => "full",
    };
    assert_eq!(kind, expected, "{second}");
    for (r, d) in data.iter_mut().enumerate() {
        touch(d, r as u64 + 200);
    }
    (c, data)
}

/// Two victims holding ranks or parity: a rank holder and the last member.
fn victims(c: &Cluster) -> Vec<String> {
    let members = c.members();
    let first = c.nodes_with_ranks()[1].clone();
    vec![first, members[members.len() - 1].clone()]
}

fn fault_during_epoch(layout: &str, mode: &str, phase: &str) {
    let (mut c, data) = two_epochs(layout, mode);
    let victims = victims(&c);
    c.pause(phase);
    c.checkpoint(data, false);
    c.wait_paused();
    for v in &victims {
        c.kill(v, true);
    }
    c.resume();
    c.wait_decided(3);
    let committed = c.committed();
    match phase {
        // The encode needs the dead nodes: the epoch aborts, epoch 2 stays.
        "before-encode" | "mid-encode" => assert_eq!(committed, 2, "{layout} {mode} {phase}"),
        // Everything was durable before the kill: the coordinator commits.
        _ => assert_eq!(committed, 3, "{layout} {mode} {phase}"),
    }
    for v in &victims {
        c.wait_down(v);
    }
    c.assert_restorable();
    let out = c.recover();
    assert!(
        out.status.success(),
        "recover: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.assert_restorable();
    // The cluster works on: another epoch commits on the new groups and survives a loss.
    let mut next = c.history[&committed].clone();
    for (r, d) in next.iter_mut().enumerate() {
        touch(d, r as u64 + 300);
    }
    let report = c.checkpoint(next, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    let survivor = c.nodes_with_ranks()[0].clone();
    c.kill(&survivor, true);
    c.wait_down(&survivor);
    c.assert_restorable();
}

fn fault_during_recovery(layout: &str, mode: &str) {
    let (c, _) = two_epochs(layout, mode);
    let victims = victims(&c);
    c.kill(&victims[0], true);
    c.wait_down(&victims[0]);
    c.pause("mid-recovery");
    let child = c.recover_in_background();
    c.wait_paused();
    c.kill(&victims[1], true);
    c.resume();
    let first = child.wait_with_output().unwrap();
    c.wait_down(&victims[1]);
    // Whether the interrupted recovery finished or not, the next one completes it.
    let second = c.recover();
    assert!(
        second.status.success(),
        "second recover (first: {}): {}",
        String::from_utf8_lossy(&first.stderr),
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(c.committed(), 2);
    c.assert_restorable();
}

fn too_many_losses(layout: &str, mode: &str) {
    let (c, _) = two_epochs(layout, mode);
    let members = c.members();
    let lost: Vec<String> = c.nodes_with_ranks().into_iter().take(3).collect();
    for v in &lost {
        c.kill(v, true);
    }
    for v in &lost {
        c.wait_down(v);
    }
    let out = c.recover();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("more than m=2") && err.contains("epoch 2"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let lost_rank = c.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == lost[0].as_str())
        .unwrap()["ranks"][0]
        .as_u64()
        .unwrap();
    let err = c.restore(lost_rank as usize).unwrap_err();
    assert!(err.contains("lost"), "{err}");
    assert!(members.len() == 6);
}

#[test]
fn a_degraded_restore_treats_corrupt_parity_as_an_erasure() {
    let (c, _) = two_epochs("dedicated", "full");
    let members = c.members();
    let committed = c.committed();
    let ranks: Vec<usize> = c.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == members[0].as_str())
        .unwrap()["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_u64().unwrap() as usize)
        .collect();
    assert!(!ranks.is_empty());
    // One member lost and one parity member corrupt: 2 <= m erasures, byte-exact.
    c.corrupt_parity(&members[5]);
    c.kill(&members[0], true);
    c.wait_down(&members[0]);
    for &r in &ranks {
        let got = c.restore(r).unwrap_or_else(|e| panic!("rank {r}: {e}"));
        assert!(
            got == c.history[&committed][r],
            "rank {r} restored different bytes"
        );
    }
    // A second corrupt parity member makes 3 > m: a clear error, never wrong bytes.
    c.corrupt_parity(&members[4]);
    let err = c.restore(ranks[0]).unwrap_err();
    assert!(
        err.contains("more than m=2") && err.contains(members[5].as_str()),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

macro_rules! matrix {
    ($($name:ident: $layout:literal, $mode:literal;)*) => {
        mod matrix {
            use super::*;
            $(
                pub mod $name {
                    use super::*;
                    #[test] fn kill_before_encode() { fault_during_epoch($layout, $mode, "before-encode") }
                    #[test] fn kill_mid_pipeline() { fault_during_epoch($layout, $mode, "mid-encode") }
                    #[test] fn kill_before_commit() { fault_during_epoch($layout, $mode, "before-commit") }
                    #[test] fn kill_during_recovery() { fault_during_recovery($layout, $mode) }
                    #[test] fn losing_m_plus_one_is_a_clear_error() { too_many_losses($layout, $mode) }
                }
            )*
        }
    };
}

matrix! {
    dedicated_full: "dedicated", "full";
    dedicated_stripe: "dedicated", "stripe";
    dedicated_update: "dedicated", "update";
    rotated_full: "rotated", "full";
    rotated_stripe: "rotated", "stripe";
    rotated_update: "rotated", "update";
}
