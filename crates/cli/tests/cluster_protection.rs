//! After every commit and every recovery, every rank of the committed epoch sits inside a
//! data shard of exactly one group: real agents are killed (their stores wiped) in random
//! sequences, recovered, checkpointed again, and every rank restores byte-exact — including
//! after its host, itself a replacement, is lost too.

mod cluster;

use std::time::{SystemTime, UNIX_EPOCH};

use cluster::{bytes, ok, touch, Cluster};
use serde_json::Value;

/// The defect found by a user: the spare that took a lost member's rank became a parity-only
/// member of the re-formed group, so the rank was in no data shard and its next loss was
/// final while every command reported success.
#[test]
fn a_rank_taken_over_by_a_spare_survives_the_loss_of_that_spare() {
    let mut c = Cluster::up(&[
        "--nodes",
        "6",
        "--spares",
        "1",
        "--k",
        "4",
        "--m",
        "2",
        "--block-size",
        "16KiB",
    ]);
    let mut data: Vec<Vec<u8>> = (0..4).map(|r| bytes(150_000 + r * 1000, r as u64 + 7)).collect();
    c.checkpoint(data.clone(), true);
    for n in ["n1", "n2"] {
        c.kill(n, true);
    }
    for n in ["n1", "n2"] {
        c.wait_down(n);
    }
    ok(&["recover", "--dir", c.d()]);
    assert_data_holders(&c);
    c.assert_restorable();
    c.kill("s0", true);
    c.wait_down("s0");
    assert_eq!(c.restore(1).expect("rank 1 decodes from its group"), data[1]);
    ok(&["recover", "--dir", c.d()]);
    assert_data_holders(&c);
    c.assert_restorable();
    // Epochs committed after the recoveries protect every rank too.
    for (r, d) in data.iter_mut().enumerate() {
        touch(d, r as u64 + 50);
    }
    c.checkpoint(data, true);
    assert_data_holders(&c);
    c.assert_restorable();
}

/// Every node hosting ranks is a member of exactly one group at a position that holds data
/// (status says each group's k; in the dedicated layout positions `0..k` hold data, in the
/// rotated layout every position does).
fn assert_data_holders(c: &Cluster) {
    let s = c.status();
    let layout = s["coding"]["layout"].as_str().unwrap().to_string();
    for node in s["nodes"].as_array().unwrap() {
        if node["ranks"].as_array().unwrap().is_empty() {
            continue;
        }
        let name = node["name"].as_str().unwrap();
        let groups: Vec<&Value> = s["groups"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["members"].as_array().unwrap().iter().any(|m| m == name))
            .collect();
        assert_eq!(
            groups.len(),
            1,
            "{name} hosts ranks and is in {} groups: {s}",
            groups.len()
        );
        let g = groups[0];
        let pos = g["members"]
            .as_array()
            .unwrap()
            .iter()
            .position(|m| m == name)
            .unwrap();
        let k = g["k"].as_u64().unwrap() as usize;
        assert!(
            layout == "rotated" || pos < k,
            "{name} hosts ranks {} at parity position {pos} of group {} (k={k})",
            node["ranks"],
            g["id"]
        );
        assert_eq!(
            g["protected_epoch"], s["committed_epoch"],
            "group {} does not protect the committed epoch",
            g["id"]
        );
    }
}

/// A small deterministic generator, seeded per run (printed, and taken from
/// `ECKPT_TEST_SEED` to replay a failure).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn seed() -> u64 {
    std::env::var("ECKPT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64)
        | 1
}

/// Rounds of: lose 1..=m members of one random group (stores wiped), recover, checkpoint a
/// changed epoch; after each step every rank restores byte-exact and sits on a data holder.
fn random_losses(layout: &str, mode: &str) {
    let seed = seed();
    eprintln!("{layout} {mode}: ECKPT_TEST_SEED={seed}");
    let mut rng = Rng(seed);
    let mut c = Cluster::up(&[
        "--nodes",
        "10",
        "--spares",
        "1",
        "--k",
        "3",
        "--m",
        "2",
        "--layout",
        layout,
        "--mode",
        mode,
        "--block-size",
        "16KiB",
    ]);
    let world = 6 + rng.below(5);
    let mut data: Vec<Vec<u8>> = (0..world)
        .map(|r| bytes(60_000 + r * 4099, seed ^ r as u64))
        .collect();
    c.checkpoint(data.clone(), true);
    for round in 0..3 {
        let s = c.status();
        let groups = s["groups"].as_array().unwrap();
        let group = &groups[rng.below(groups.len())];
        let mut members: Vec<String> = group["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap().to_string())
            .collect();
        let m = group["m"].as_u64().unwrap() as usize;
        let victims: Vec<String> = (0..1 + rng.below(m))
            .map(|_| members.remove(rng.below(members.len())))
            .collect();
        let what = format!("seed {seed}, {layout} {mode}, round {round}, lost {victims:?} of {members:?}");
        for v in &victims {
            c.kill(v, true);
        }
        for v in &victims {
            c.wait_down(v);
        }
        let out = c.recover();
        assert!(
            out.status.success(),
            "{what}: recover failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_data_holders(&c);
        c.assert_restorable();
        for (r, d) in data.iter_mut().enumerate() {
            touch(d, seed ^ (round * 100 + r) as u64);
        }
        let report = c.checkpoint(data.clone(), true).expect("report");
        assert_eq!(report["outcome"]["committed"], true, "{what}: {report}");
        assert_data_holders(&c);
        c.assert_restorable();
    }
}

#[test]
fn random_losses_dedicated_full() {
    random_losses("dedicated", "full");
}

#[test]
fn random_losses_dedicated_stripe() {
    random_losses("dedicated", "stripe");
}

#[test]
fn random_losses_dedicated_update() {
    random_losses("dedicated", "update");
}

#[test]
fn random_losses_rotated_full() {
    random_losses("rotated", "full");
}

#[test]
fn random_losses_rotated_stripe() {
    random_losses("rotated", "stripe");
}

#[test]
fn random_losses_rotated_update() {
    random_losses("rotated", "update");
}

/// A geometry that cannot be built is refused, not silently shrunk; a group that recovery
/// shrinks says so with its new storage overhead.
#[test]
fn impossible_geometry_is_refused_and_a_shrunk_group_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("c");
    let out = cluster::run(&[
        "up",
        "--dir",
        d.to_str().unwrap(),
        "--nodes",
        "3",
        "--k",
        "4",
        "--m",
        "2",
        "--detach",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "up accepted 3 nodes for k=4 m=2");
    assert!(err.contains("need at least 6 nodes"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        !d.join("cluster.json").exists(),
        "a refused up leaves no cluster behind"
    );

    let mut c = Cluster::up(&["--nodes", "6", "--k", "4", "--m", "2", "--block-size", "16KiB"]);
    c.checkpoint((0..4).map(|r| bytes(40_000, r)).collect(), true);
    c.kill("n0", true);
    c.wait_down("n0");
    let out = ok(&["recover", "--dir", c.d()]);
    assert!(
        out.contains("now has k=3 m=2 (configured k=4): storage overhead 67% instead of 50%"),
        "{out}"
    );
    assert_data_holders(&c);
    c.assert_restorable();
}
