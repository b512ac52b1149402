//! `update` epochs under every topology and layout (the other cluster tests use the default
//! pipeline): data members send old ⊕ new to every parity holder whatever the topology, and
//! the topology still shapes the full first epoch and the decode; after two updates, losing
//! two rank holders decodes every rank byte-exact from the updated parity.

mod cluster;

use cluster::{bytes, touch, Cluster};

fn updates_then_losses(layout: &str, topology: &str) {
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
        "update",
        "--topology",
        topology,
        "--block-size",
        "16KiB",
    ]);
    let mut data: Vec<Vec<u8>> = (0..5)
        .map(|r| bytes(200_000 + r * 37_111, r as u64 + 1))
        .collect();
    for epoch in 0..3u64 {
        let report = c.checkpoint(data.clone(), true).expect("report");
        assert_eq!(report["outcome"]["committed"], true, "{report}");
        if epoch > 0 {
            assert_eq!(report["outcome"]["kinds"][0], "update", "{report}");
        }
        for (r, d) in data.iter_mut().enumerate() {
            touch(d, r as u64 + 100 * (epoch + 1));
        }
    }
    let victims: Vec<String> = c.nodes_with_ranks().into_iter().take(2).collect();
    for v in &victims {
        c.kill(v, true);
    }
    for v in &victims {
        c.wait_down(v);
    }
    let out = c.recover();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(c.committed(), 3);
    c.assert_restorable();
}

macro_rules! cases {
    ($($name:ident: $layout:expr, $topology:expr;)*) => { $( #[test] fn $name() { updates_then_losses($layout, $topology) } )* };
}

cases! {
    dedicated_pipeline: "dedicated", "pipeline";
    dedicated_ring: "dedicated", "ring";
    dedicated_broadcast: "dedicated", "broadcast";
    dedicated_fanin: "dedicated", "fanin";
    rotated_pipeline: "rotated", "pipeline";
    rotated_ring: "rotated", "ring";
    rotated_broadcast: "rotated", "broadcast";
    rotated_fanin: "rotated", "fanin";
}
