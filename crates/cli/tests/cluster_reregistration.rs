//! An agent that registers again (its session timed out while the coordinator was stopped
//! or cut off) resolves its store against the coordinator's answer, dropping what it had
//! prepared and not seen committed. The coordinator counts the same agent alive from its
//! registration on, so a rank's checkpoint can reach the agent before that resolve: it must
//! wait for it, not be stored and then dropped (found by the 30 s link-cut test: epoch 16
//! committed while the node had dropped rank 1's part of it, and the run lost the node).

mod cluster;

use std::path::Path;
use std::time::Duration;

use cluster::hosts::sh;
use cluster::{bytes, finish, spawn, wait_for, Cluster};

/// Whether `log` holds a line containing `text`.
fn logged(log: &Path, text: &str) -> bool {
    std::fs::read_to_string(log).is_ok_and(|l| l.contains(text))
}

#[test]
fn a_checkpoint_that_reaches_an_agent_before_its_resolve_waits_for_it_and_commits() {
    let mut c = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1"]);
    c.checkpoint(vec![bytes(1 << 20, 1), bytes(1 << 20, 2)], true);
    let node = c.status_placement(0);
    let log = c.dir.join("nodes").join(&node).join("log");

    // The coordinator stopped past the liveness period: the agent's heartbeat times out and
    // it registers again once the coordinator runs, as after a partition.
    c.pause("before-resolve");
    let coordinator = c.pid("coordinator");
    sh("kill", &["-STOP", &coordinator]);
    wait_for(Duration::from_secs(30), "the agent to end its session", || {
        logged(&log, "coordinator session ended")
    });
    sh("kill", &["-CONT", &coordinator]);
    let reached = c.dir.join("debug").join(format!("reached-{node}"));
    wait_for(Duration::from_secs(30), "the agent to register again", || {
        reached.exists()
    });

    // Accepted again and not yet resolved: rank 0's checkpoint reaches it now. The epoch
    // needs rank 1 too, so it is decided only after the resolve, which would have dropped
    // rank 0's part had the agent stored it.
    let data = [bytes(1 << 20, 3), bytes(1 << 20, 4)];
    let images: Vec<String> = (0..2)
        .map(|r| c.write_rank(r, &data[r]).to_str().unwrap().to_string())
        .collect();
    let rank0 = spawn(&c.checkpoint_args("2", "0", &[images[0].as_str()]));
    wait_for(
        Duration::from_secs(30),
        "the checkpoint to wait for the resolve",
        || logged(&log, "a request waits until this node's store is resolved"),
    );
    c.resume();
    let out = finish(rank0, "rank 0's checkpoint, which waited for the resolve");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rank1 = spawn(&c.checkpoint_args("2", "1", &["--json", "--wait", images[1].as_str()]));
    let out = finish(rank1, "rank 1's checkpoint");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    for (rank, written) in data.iter().enumerate() {
        assert_eq!(&c.restore(rank).unwrap(), written, "rank {rank}");
    }
}
