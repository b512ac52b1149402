//! The control plane's work per node does not grow with the cluster: the real coordinator
//! (its state owner, journal, sessions, epochs) over agents in memory, in virtual time, at
//! 64 and 1,024 nodes. What is asserted does not depend on the machine's speed — the
//! requests each node gets per epoch — and timings stay in the benchmarks.

use std::collections::BTreeMap;

use eckpt_coding::config::CodingConfig;

use super::test_cluster::{kind, Kind, Steps, TestCluster};
use eckpt_cluster_api::msg::Relocation;

/// Groups of 2 data and 2 parity members: 64 and 1,024 nodes are whole groups.
fn coding() -> CodingConfig {
    CodingConfig {
        k: 2,
        m: 2,
        ..CodingConfig::default()
    }
}

/// The requests of each kind the agents of a cluster of `nodes` nodes get in an epoch after
/// the first (which places the ranks), one rank per data member, as (fewest, most) per node.
async fn requests_per_node_in_an_epoch(nodes: usize) -> BTreeMap<String, (usize, usize)> {
    let c = TestCluster::start(nodes, coding()).await;
    let world = (nodes / 2) as u32;
    assert!(
        c.checkpoint_together(world).await.committed,
        "epoch 1 at {nodes} nodes"
    );
    c.agents.clear();
    assert!(
        c.checkpoint_together(world).await.committed,
        "epoch 2 at {nodes} nodes"
    );
    let mut per_kind: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for i in 0..nodes {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for request in c.agents.requests(&format!("n{i}")) {
            *counts.entry(format!("{:?}", kind(&request))).or_default() += 1;
        }
        for (k, n) in counts {
            per_kind.entry(k).or_default().push(n);
        }
    }
    per_kind
        .into_iter()
        .map(|(k, counts)| {
            // A node asked nothing of a kind others were asked counts as 0.
            let fewest = if counts.len() < nodes {
                0
            } else {
                *counts.iter().min().unwrap()
            };
            (k, (fewest, *counts.iter().max().unwrap()))
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_epoch_asks_each_node_as_much_at_1024_nodes_as_at_64() {
    let small = requests_per_node_in_an_epoch(64).await;
    let large = requests_per_node_in_an_epoch(1024).await;
    assert!(!small.is_empty(), "no node was asked anything");
    assert_eq!(small, large, "requests per node (fewest, most) by kind");
}

/// How many nodes a recovery asks anything but the scrub every survivor gets, in a cluster
/// of `nodes` nodes that lost one.
async fn nodes_a_recovery_works_on(nodes: usize) -> usize {
    let c = TestCluster::start(nodes, coding()).await;
    assert!(
        c.checkpoint_together((nodes / 2) as u32).await.committed,
        "epoch 1 at {nodes} nodes"
    );
    c.kill("n1").await;
    c.agents.clear();
    c.coord
        .recover(&mut Steps::default(), Relocation::Process)
        .await
        .expect("one loss is recovered");
    (0..nodes)
        .map(|i| format!("n{i}"))
        .filter(|n| c.agents.asked(n).iter().any(|k| *k != Kind::Scrub))
        .count()
}

/// A loss is decoded, re-placed, re-encoded and committed among the nodes of its group:
/// at 1,024 nodes the same few as at 64, not the cluster (which every group's re-encode
/// and a commit told to every node were).
#[tokio::test(start_paused = true)]
async fn a_recovery_works_on_as_many_nodes_at_1024_nodes_as_at_64() {
    let small = nodes_a_recovery_works_on(64).await;
    let large = nodes_a_recovery_works_on(1024).await;
    assert!(small > 0 && small <= 4, "{small} nodes at 64");
    assert_eq!(small, large, "nodes worked on at 64 and at 1,024");
}
