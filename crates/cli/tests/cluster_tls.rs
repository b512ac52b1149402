//! A cluster made with `--tls`, across emulated hosts (agents in network namespaces, so every
//! agent, peer and coordinator connection is TCP): it encodes, loses two nodes with their
//! data, recovers and restores byte-exact with every connection inside TLS — and a peer
//! holding the secret but speaking without TLS is refused by the coordinator and by an
//! agent. (That TLS leaves no payload byte readable on the wire is `eckpt-proto`'s
//! `tests/tls.rs`.) Needs root and iproute2.

mod cluster;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use cluster::{bytes, Cluster};
use eckpt_cluster_api::commands::ask_coordinator;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{Hello, Status};
use eckpt_cluster_api::net::open;
use eckpt_cluster_api::ClusterError;
use eckpt_proto::{ClusterSecret, Endpoint};

/// How long the tests wait for the coordinator's answer.
const ANSWER: std::time::Duration = std::time::Duration::from_secs(30);

/// Opens `endpoint` with the cluster's secret but without its TLS identity.
fn open_without_tls(dir: &ClusterDir, endpoint: &Endpoint) -> Result<(), ClusterError> {
    let plain = ClusterSecret::load(&dir.secret()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = open(endpoint, &plain, &Hello::Control).await?;
        ask_coordinator(&mut conn, "the coordinator", Status, ANSWER, |_| {}).await?;
        Ok(())
    })
}

#[test]
fn a_cluster_with_tls_recovers_and_refuses_peers_without_it() {
    assert!(cluster::is_root(), "network-namespace tests need root (ip netns)");
    let shape = "--nodes 5 --k 3 --m 2 --layout rotated --netns --tls --block-size 64KiB";
    let mut c = Cluster::up(&shape.split(' ').collect::<Vec<_>>());
    let identity = c.dir.join("tls.pem");
    let mode = std::fs::metadata(&identity).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the TLS key is the owner's only");

    let data: Vec<Vec<u8>> = (0..5).map(|r| bytes(1 << 20, r as u64 + 3)).collect();
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c.lose_and_recover(2);

    let dir = ClusterDir::new(&c.dir).unwrap();
    let file = dir.load().unwrap();
    let coordinator = file.coordinator_tcp.clone().expect("a coordinator over TCP");
    assert!(
        open_without_tls(&dir, &coordinator).is_err(),
        "the coordinator served a peer without TLS"
    );
    // The client sees the refusal when the coordinator drops the connection, which can be
    // before the coordinator's log line is written: wait for the line, do not race it.
    let log = c.dir.join("coordinator/log");
    cluster::wait_for(
        Duration::from_secs(10),
        "the refusal logged in one line naming TLS",
        || {
            std::fs::read_to_string(&log).is_ok_and(|log| {
                log.lines()
                    .any(|l| l.contains("refused connection") && l.contains("TLS: "))
            })
        },
    );
    let node = c.status()["nodes"][0]["addr"].as_str().unwrap().to_string();
    let (host, port) = node.rsplit_once(':').unwrap();
    let agent = Endpoint::Tcp {
        host: host.into(),
        port: port.parse().unwrap(),
    };
    assert!(
        open_without_tls(&dir, &agent).is_err(),
        "an agent served a peer without TLS"
    );
    // With the identity, the same request is answered.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let secret = dir.load_secret().unwrap();
    rt.block_on(async {
        let mut conn = open(&coordinator, &secret, &Hello::Control).await.unwrap();
        let status = ask_coordinator(&mut conn, "the coordinator", Status, ANSWER, |_| {}).await;
        assert!(status.is_ok(), "{status:?}");
    });
}
