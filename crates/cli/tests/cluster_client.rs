//! The Rust client API in cluster mode: three ranks' memory checkpointed into a running
//! cluster over several epochs, a node lost with its data, recovery, and restart in place
//! from the rank's new node.

mod cluster;

use cluster::{bytes, ok, Cluster};
use eckpt::{Checkpointer, Config, TrackMode};

fn checkpointer(c: &Cluster, rank: u32) -> Checkpointer {
    let config = Config {
        rank,
        cluster: Some(c.dir.clone()),
        world: Some(3),
        track: TrackMode::Hash,
        hash_block_size: 4096,
        ..Config::default()
    };
    Checkpointer::new(config).expect("cluster mode")
}

#[test]
fn ranks_restart_in_place_after_their_node_is_lost() {
    for mode in ["full", "stripe", "update"] {
        let c = Cluster::up(&[
            "--nodes",
            "5",
            "--k",
            "3",
            "--m",
            "2",
            "--mode",
            mode,
            "--block-size",
            "8KiB",
        ]);
        let mut memory: Vec<Vec<u8>> = (0..3).map(|r| bytes(100_000 + r * 5000, r as u64 + 40)).collect();
        let mut ranks: Vec<Checkpointer> = (0..3).map(|r| checkpointer(&c, r)).collect();
        for (ck, m) in ranks.iter_mut().zip(memory.iter_mut()) {
            // SAFETY: `memory` outlives the checkpointers and is not reallocated.
            unsafe { ck.protect("state", m.as_mut_ptr(), m.len()).unwrap() };
        }
        for epoch in 1..=3u64 {
            for (r, m) in memory.iter_mut().enumerate() {
                m[(epoch as usize * 997 + r) % 100_000] ^= 0xff;
            }
            for ck in ranks.iter_mut() {
                assert_eq!(ck.checkpoint().unwrap(), epoch);
            }
            assert_eq!(ranks[0].wait().unwrap(), Some(epoch), "{mode}");
        }
        drop(ranks);
        let node = c.status()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["ranks"].as_array().unwrap().contains(&2.into()))
            .unwrap()["name"]
            .as_str()
            .unwrap()
            .to_string();
        c.kill(&node, true);
        c.wait_down(&node);
        ok(&["recover", "--dir", c.d()]);
        let mut restored = vec![0u8; memory[2].len()];
        let mut ck = checkpointer(&c, 2);
        // SAFETY: as above.
        unsafe {
            ck.protect("state", restored.as_mut_ptr(), restored.len())
                .unwrap()
        };
        assert_eq!(ck.restart().unwrap(), Some(3), "{mode}");
        assert!(restored == memory[2], "{mode}: rank 2 restored different bytes");
    }
}

#[test]
fn a_restart_that_meets_a_damaged_block_says_how_to_rebuild_it_and_recover_does() {
    let c = Cluster::up(&["--nodes", "5", "--k", "3", "--m", "2", "--block-size", "8KiB"]);
    let mut memory: Vec<Vec<u8>> = (0..3).map(|r| bytes(60_000, r as u64 + 70)).collect();
    let mut ranks: Vec<Checkpointer> = (0..3).map(|r| checkpointer(&c, r)).collect();
    for (ck, m) in ranks.iter_mut().zip(memory.iter_mut()) {
        // SAFETY: `memory` outlives the checkpointers and is not reallocated.
        unsafe { ck.protect("state", m.as_mut_ptr(), m.len()).unwrap() };
    }
    for ck in ranks.iter_mut() {
        assert_eq!(ck.checkpoint().unwrap(), 1);
    }
    assert_eq!(ranks[0].wait().unwrap(), Some(1));
    drop(ranks);
    // Flip a bit of rank 1's committed image on its node.
    c.corrupt_rank_block(1, 30_000);

    let mut restored = vec![0u8; memory[1].len()];
    let mut ck = checkpointer(&c, 1);
    // SAFETY: as above.
    unsafe {
        ck.protect("state", restored.as_mut_ptr(), restored.len())
            .unwrap()
    };
    let err = ck.restart().unwrap_err();
    assert_eq!(
        err.code(),
        -4,
        "a damaged block is corruption (ECKPT_ECORRUPT): {err}"
    );
    assert!(err.to_string().contains("eckpt recover"), "{err}");
    drop(ck);

    ok(&["recover", "--dir", c.d()]);
    let mut ck = checkpointer(&c, 1);
    // SAFETY: as above.
    unsafe {
        ck.protect("state", restored.as_mut_ptr(), restored.len())
            .unwrap()
    };
    assert_eq!(ck.restart().unwrap(), Some(1));
    assert!(
        restored == memory[1],
        "rank 1 restored different bytes after the repair"
    );
}
