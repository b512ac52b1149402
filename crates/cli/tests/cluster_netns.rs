//! The cluster across emulated hosts: each agent in its own network namespace on a veth
//! link shaped to 1 Gbit/s, talking TCP through a bridge (no Unix-socket shortcut between
//! namespaces). Encode, lose two nodes with their data, recover, restore byte-exact, tear
//! down without leaving namespaces behind. Needs root and iproute2 (CI runs as root).

mod cluster;

use cluster::{bytes, Cluster};
use eckpt_cluster::netns::Network;

fn namespaces() -> String {
    String::from_utf8(
        std::process::Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
}

#[test]
fn agents_in_namespaces_on_shaped_links() {
    assert!(
        cluster::is_root(),
        "network-namespace tests need root (ip netns, tc)"
    );
    let mut c = Cluster::up(&[
        "--nodes",
        "5",
        "--k",
        "3",
        "--m",
        "2",
        "--layout",
        "rotated",
        "--netns",
        "--link-rate",
        "1gbit",
        "--block-size",
        "64KiB",
    ]);
    // Every agent listens on its own namespace's address, not on loopback.
    let status = c.status();
    for node in status["nodes"].as_array().unwrap() {
        let addr = node["addr"].as_str().unwrap();
        assert!(addr.starts_with("10.") && !addr.starts_with("127."), "{addr}");
    }
    let prefix = format!("eck{}-", Network::for_dir(&c.dir).tag);
    let mine = || namespaces().lines().filter(|l| l.starts_with(&prefix)).count();
    assert_eq!(mine(), 5, "one namespace per agent");

    let data: Vec<Vec<u8>> = (0..5).map(|r| bytes(3 << 20, r as u64 + 11)).collect();
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    let sent: u64 = report["outcome"]["bytes_sent"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert!(
        sent > 10 << 20,
        "the encode crossed the shaped links: {sent} bytes"
    );

    c.lose_and_recover(2);
    drop(c);
    assert_eq!(mine(), 0, "`eckpt down` removes the namespaces");
}
