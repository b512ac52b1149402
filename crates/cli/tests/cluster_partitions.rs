//! Partitions between emulated hosts (agents in network namespaces, as in `cluster_netns`):
//! a node cut off from the coordinator but not from its peers, and a node cut off from its
//! peers but not from the coordinator. A cut is a blackhole route inside the node's
//! namespace to the addresses it must not reach, so its other links stay up. What each cut
//! does is documented in docs/RELIABILITY.md ("Partitions"). Needs root and iproute2.

mod cluster;

use std::process::Command;
use std::time::{Duration, Instant};

use cluster::{bytes, touch, Cluster};
use eckpt_cluster::netns::Network;

/// Packets from `node`'s namespace to `hosts` are dropped until the cut is dropped.
struct Cut {
    namespace: String,
    hosts: Vec<String>,
}

impl Cut {
    fn new(c: &Cluster, node: &str, hosts: Vec<String>) -> Cut {
        let namespace = Network::for_dir(&c.dir).namespace(node);
        for host in &hosts {
            route(&namespace, "add", host);
        }
        Cut { namespace, hosts }
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for host in &self.hosts {
            route(&self.namespace, "del", host);
        }
    }
}

fn route(namespace: &str, action: &str, host: &str) {
    let status = Command::new("ip")
        .args(["netns", "exec", namespace, "ip", "route", action, "blackhole"])
        .arg(format!("{host}/32"))
        .status()
        .unwrap();
    assert!(
        status.success(),
        "ip route {action} blackhole {host} in {namespace}"
    );
}

/// Six nodes in namespaces (one spare), k=3 m=2, a 2 s liveness, and epoch 1 of 3 ranks
/// committed.
fn cluster_with_an_epoch() -> Cluster {
    assert!(cluster::is_root(), "partition tests need root (ip netns)");
    let shape =
        "--nodes 6 --spares 1 --k 3 --m 2 --netns --liveness 2s --partition-grace 30s --block-size 16KiB";
    let mut c = Cluster::up(&shape.split(' ').collect::<Vec<_>>());
    let data: Vec<Vec<u8>> = (0..3).map(|r| bytes(200_000 + r * 1000, r as u64 + 5)).collect();
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c
}

/// The host part of each address of `nodes` in the cluster's status.
fn hosts_of(c: &Cluster, nodes: &[String]) -> Vec<String> {
    c.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| nodes.iter().any(|name| n["name"] == name.as_str()))
        .map(|n| {
            n["addr"]
                .as_str()
                .unwrap()
                .rsplit_once(':')
                .unwrap()
                .0
                .to_string()
        })
        .collect()
}

fn alive(c: &Cluster, node: &str) -> bool {
    c.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node)
        .is_some_and(|n| n["alive"].as_bool().unwrap())
}

/// The next epoch: every rank's data of the last one, touched.
fn next_epoch(c: &mut Cluster) -> serde_json::Value {
    let last = *c.history.keys().last().unwrap();
    let mut next = c.history[&last].clone();
    for (r, d) in next.iter_mut().enumerate() {
        touch(d, r as u64 + last);
    }
    c.checkpoint(next, true).expect("report")
}

/// A cut shorter than the liveness period is not a loss: the node is never reported dead,
/// nothing moves, and the next epoch commits with it. (The cut is a quarter of the liveness
/// period: a heartbeat sent as it begins is retransmitted by TCP 0.2, 0.6 and 1.4 s later,
/// so the coordinator hears the node again well within the period.)
#[test]
fn a_node_cut_off_from_the_coordinator_within_its_liveness_is_never_declared_lost() {
    let mut c = cluster_with_an_epoch();
    let victim = c.status_placement(0);
    let cut = Cut::new(&c, &victim, vec![Network::for_dir(&c.dir).bridge_ip()]);
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        assert!(alive(&c, &victim), "{victim} declared dead within its liveness");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(cut);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(alive(&c, &victim), "{victim} declared dead after the cut healed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let report = next_epoch(&mut c);
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    assert_eq!(c.status_placement(0), victim, "nothing moved");
    c.assert_restorable();
}

/// A node the coordinator cannot hear for longer than its liveness is lost even though its
/// peers still reach it: its ranks are rebuilt elsewhere from the group's shards. When the
/// cut heals, the node's agent — still running, with its old store — is not trusted with
/// the ranks again: they stay where recovery put them, every committed epoch restores
/// byte-exact, and the next epoch commits. The node discards its old store's ranks and
/// parity and rejoins as a spare, for the next loss.
#[test]
fn a_node_cut_off_from_the_coordinator_beyond_its_liveness_is_rebuilt_and_rejoins_as_a_spare() {
    let mut c = cluster_with_an_epoch();
    let victim = c.status_placement(0);
    let cut = Cut::new(&c, &victim, vec![Network::for_dir(&c.dir).bridge_ip()]);
    c.wait_down(&victim);
    let out = c.recover();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let moved_to = c.status_placement(0);
    assert_ne!(moved_to, victim, "rank 0 was rebuilt on another node");
    c.assert_restorable();
    drop(cut);
    c.wait_up(&victim);
    let deadline = Instant::now() + Duration::from_secs(30);
    let entry = loop {
        let entry = c.node_status(&victim);
        if entry["spare"] == true {
            break entry;
        }
        assert!(
            Instant::now() < deadline,
            "its agent is back, but not as a spare: {entry}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let s = c.status();
    assert_eq!(entry["removed"], false, "{entry}");
    assert!(entry["ranks"].as_array().unwrap().is_empty(), "{entry}");
    assert!(
        !c.members().contains(&victim),
        "no group counts on its old shards: {s}"
    );
    assert_eq!(
        c.status_placement(0),
        moved_to,
        "rank 0 stays where recovery put it"
    );
    c.assert_restorable();
    let report = next_epoch(&mut c);
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c.assert_restorable();
}

/// A node the coordinator hears but its peers cannot reach: the epoch that needs its links
/// is not committed, the error names the node, the committed epoch stays restorable, and
/// once the cut heals the next epoch commits. Nobody is declared dead: its heartbeats go on.
#[test]
fn a_node_cut_off_from_its_peers_fails_the_epoch_naming_it_and_is_not_declared_lost() {
    let mut c = cluster_with_an_epoch();
    let victim = c.status_placement(0);
    let peers: Vec<String> = c.members().into_iter().filter(|n| *n != victim).collect();
    let cut = Cut::new(&c, &victim, hosts_of(&c, &peers));
    let started = Instant::now();
    let report = next_epoch(&mut c);
    let waited = started.elapsed();
    assert_eq!(report["outcome"]["committed"], false, "{report}");
    let reason = report["outcome"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&format!("node {victim}")), "{report}");
    // The victim's part fails at its first connection, and the others' parts are ended
    // then, not after the peer deadline (two minutes).
    assert!(waited < Duration::from_secs(20), "the epoch took {waited:?}");
    assert!(alive(&c, &victim), "its heartbeats reach the coordinator");
    assert_eq!(c.committed(), 1);
    c.assert_restorable();
    drop(cut);
    let report = next_epoch(&mut c);
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c.assert_restorable();
}

/// The coordinator cut off from every agent for longer than the partition grace: its nodes
/// are declared dead, but nothing is judged lost while it hears nobody — they are awaited,
/// so neither `eckpt run` nor a recovery gives up on them — and once the link is back each
/// gets an agent's reconnection to register. A recovery asked during the cut waits, then
/// finds every node back with its data: nothing is rebuilt, every rank restores, and the
/// next epoch commits. (Found by an attack: a run ended "group 1 lost 3 of 3 members …
/// cannot be rebuilt" as the link came back; seconds later every node was alive and whole.)
#[test]
fn a_cut_of_the_coordinator_beyond_the_grace_loses_nothing_that_comes_back() {
    assert!(cluster::is_root(), "partition tests need root (ip netns)");
    let shape =
        "--nodes 4 --spares 1 --k 2 --m 1 --netns --liveness 1s --partition-grace 5s --block-size 16KiB";
    let mut c = Cluster::up(&shape.split(' ').collect::<Vec<_>>());
    let data: Vec<Vec<u8>> = (0..3).map(|r| bytes(150_000 + r * 1000, r as u64 + 9)).collect();
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    let bridge = Network::for_dir(&c.dir).bridge();
    let link = |state: &str| {
        let status = Command::new("ip")
            .args(["link", "set", &bridge, state])
            .status()
            .unwrap();
        assert!(status.success(), "ip link set {bridge} {state}");
    };
    link("down");
    let dead_but_awaited = |s: &serde_json::Value| {
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| !n["alive"].as_bool().unwrap() && n["awaited"].as_bool().unwrap())
    };
    cluster::wait_for(Duration::from_secs(30), "the grace to run out", || {
        let s = c.status();
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| !n["alive"].as_bool().unwrap())
    });
    let s = c.status();
    assert!(dead_but_awaited(&s), "past the grace, down but not lost: {s}");
    let recovery = c.recover_in_background();
    let log = c.dir.join("coordinator").join("log");
    cluster::wait_for(
        Duration::from_secs(30),
        "the recovery to wait for the nodes",
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("recovery waits for nodes that may come back")
        },
    );
    link("up");
    let out = recovery.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["rebuilt"].as_array().unwrap().is_empty(),
        "nothing was lost: {report}"
    );
    let s = c.status();
    for n in s["nodes"].as_array().unwrap() {
        assert!(
            n["alive"].as_bool().unwrap() && !n["removed"].as_bool().unwrap() && n["damaged"].is_null(),
            "every node is back, whole: {s}"
        );
    }
    c.assert_restorable();
    let report = next_epoch(&mut c);
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c.assert_restorable();
}
