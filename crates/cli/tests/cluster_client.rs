//! The Rust client API in cluster mode: three ranks' memory checkpointed into a running
//! cluster over several epochs, a node lost with its data, recovery, and restart in place
//! from the rank's new node — host memory, and device memory (through the device path over
//! host memory) with epochs completed in the background.

mod cluster;

use cluster::{bytes, ok, Cluster};
use eckpt::{Checkpointer, Config, TrackMode};
use eckpt_gpu::HostMemory;

/// Rank `rank`'s checkpointer; with `device`, its epochs complete in the background.
fn checkpointer(c: &Cluster, rank: u32, device: bool) -> Checkpointer {
    let config = Config {
        rank,
        cluster: Some(c.dir.clone()),
        world: Some(3),
        track: TrackMode::Hash,
        hash_block_size: 4096,
        background: device,
        ..Config::default()
    };
    Checkpointer::new(config).expect("cluster mode")
}

/// Protects `memory` as region "state": as host memory, or (`device`) as device memory.
fn protect_state(ck: &mut Checkpointer, memory: &mut [u8], device: bool) {
    let (ptr, len) = (memory.as_mut_ptr(), memory.len());
    // SAFETY: the callers keep `memory` alive and in place as long as `ck`.
    let protected = unsafe {
        if device {
            ck.protect_on(&HostMemory, "state", ptr as u64, len as u64)
        } else {
            ck.protect("state", ptr, len)
        }
    };
    protected.unwrap();
}

#[test]
fn ranks_restart_in_place_after_their_node_is_lost() {
    for (mode, device) in [
        ("full", false),
        ("stripe", false),
        ("update", false),
        ("update", true),
    ] {
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
        let mut ranks: Vec<Checkpointer> = (0..3).map(|r| checkpointer(&c, r, device)).collect();
        for (ck, m) in ranks.iter_mut().zip(memory.iter_mut()) {
            protect_state(ck, m, device);
        }
        for epoch in 1..=3u64 {
            for (r, m) in memory.iter_mut().enumerate() {
                m[(epoch as usize * 997 + r) % 100_000] ^= 0xff;
            }
            for ck in ranks.iter_mut() {
                assert_eq!(ck.checkpoint().unwrap(), epoch);
            }
            assert_eq!(ranks[0].wait().unwrap(), Some(epoch), "{mode}, device {device}");
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
        let mut ck = checkpointer(&c, 2, device);
        protect_state(&mut ck, &mut restored, device);
        assert_eq!(ck.restart().unwrap(), Some(3), "{mode}, device {device}");
        assert!(
            restored == memory[2],
            "{mode}, device {device}: rank 2 restored different bytes"
        );
    }
}

#[test]
fn a_restart_that_meets_a_damaged_block_has_its_node_marked_damaged_and_recover_rebuilds_it() {
    let c = Cluster::up(&["--nodes", "5", "--k", "3", "--m", "2", "--block-size", "8KiB"]);
    let mut memory: Vec<Vec<u8>> = (0..3).map(|r| bytes(60_000, r as u64 + 70)).collect();
    let mut ranks: Vec<Checkpointer> = (0..3).map(|r| checkpointer(&c, r, false)).collect();
    for (ck, m) in ranks.iter_mut().zip(memory.iter_mut()) {
        protect_state(ck, m, false);
    }
    for ck in ranks.iter_mut() {
        assert_eq!(ck.checkpoint().unwrap(), 1);
    }
    assert_eq!(ranks[0].wait().unwrap(), Some(1));
    drop(ranks);
    // Flip a bit of rank 1's committed image on its node.
    c.corrupt_rank_block(1, 30_000);

    let mut restored = vec![0u8; memory[1].len()];
    let mut ck = checkpointer(&c, 1, false);
    protect_state(&mut ck, &mut restored, false);
    let err = ck.restart().unwrap_err();
    assert_eq!(
        err.code(),
        -4,
        "a damaged block is corruption (ECKPT_ECORRUPT): {err}"
    );
    assert!(err.to_string().contains("eckpt recover"), "{err}");
    assert!(err.to_string().contains("its node is marked damaged"), "{err}");
    drop(ck);
    // The coordinator checked the copy itself: `status` says the node is damaged, which is
    // what has `eckpt run` rebuild it before relaunching the ranks.
    let node = c.status_placement(1);
    let damaged = c.node_status(&node)["damaged"].as_str().map(str::to_string);
    assert!(
        damaged.as_deref().is_some_and(|d| d.contains("checksum")),
        "{damaged:?}"
    );

    ok(&["recover", "--dir", c.d()]);
    let mut ck = checkpointer(&c, 1, false);
    protect_state(&mut ck, &mut restored, false);
    assert_eq!(ck.restart().unwrap(), Some(1));
    assert!(
        restored == memory[1],
        "rank 1 restored different bytes after the repair"
    );
}

/// `eckpt checkpoint` of a file far larger than the agent's buffers: the agent takes the
/// item in a window at a time, checksumming and writing each before the next, so its peak
/// memory (VmHWM) stays far below the item's size — an agent in a small memory cgroup is
/// not killed by a large checkpoint — and the bytes restore exactly.
#[test]
fn an_agent_takes_a_checkpoint_in_without_holding_the_item() {
    const ITEM: usize = 128 << 20;
    let mut c = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1"]);
    let report = c.checkpoint(vec![bytes(ITEM, 11)], true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    let node = c.status_placement(0);
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", c.pid(&format!("nodes/{node}")))).unwrap();
    let peak_kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(
        peak_kib * 1024 < ITEM / 2,
        "the agent peaked at {peak_kib} KiB taking in an item of {} MiB",
        ITEM >> 20
    );
    c.assert_restorable();
}
