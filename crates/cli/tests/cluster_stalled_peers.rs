//! A peer that stops in the middle of a stream ends the exchange within the cluster's peer
//! wait, with one line naming who, and nothing is left held: an agent that stalls while
//! `eckpt restore` reads a rank from it (alive and heartbeating, so nothing but the deadline
//! can end the wait), a rank that falls silent in the middle of the bytes of its checkpoint
//! (the agent would otherwise hold the rank's store lock for ever), and an agent SIGSTOPped
//! while another ships it a rank (no coordinator is in that exchange to cancel it).

mod cluster;

use std::time::{Duration, Instant};

use eckpt_cluster_api::call::Call;
use eckpt_cluster_api::commands::coordinator_call;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{AgentResponse, MoveRank, Nodes, OpenEpoch, Opened, PutRank, FILE_ITEM};
use eckpt_cluster_api::net::{answer_of_agent, host_identity, open_node};

use cluster::hosts::sh;
use cluster::{bytes, finish, spawn, Cluster};

/// The cluster's peer wait: what each test's stall must end within.
const PEER_WAIT: &str = "3s";

/// How long a stall may take to end: three times the peer wait. Without a deadline the
/// exchanges below never end.
const BOUND: Duration = Duration::from_secs(9);

/// How long the hand-played rank waits for the agent's answer before failing the test.
const HANG: Duration = Duration::from_secs(60);

fn up() -> Cluster {
    Cluster::up(&["--nodes", "4", "--k", "2", "--m", "2", "--peer-wait", PEER_WAIT])
}

#[test]
fn a_restore_whose_agent_stalls_mid_stream_ends_within_the_peer_wait() {
    let mut c = up();
    let data = vec![bytes(16 << 20, 1), bytes(16 << 20, 2)];
    c.checkpoint(data.clone(), true);
    let node = c.status_placement(0);

    c.pause("mid-export");
    let out = c.dir.parent().unwrap().join("restored0");
    let restore = spawn(&[
        "restore",
        "--dir",
        c.d(),
        "--rank",
        "0",
        "-o",
        out.to_str().unwrap(),
    ]);
    c.wait_paused();
    let stalled = Instant::now();
    let restore = finish(restore, "the restore from a stalled agent");
    let waited = stalled.elapsed();
    let err = String::from_utf8_lossy(&restore.stderr);
    assert!(!restore.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "node {node} took the restore and then said nothing for 3.0 s"
        )),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(waited < BOUND, "{waited:?}");
    assert!(!out.exists(), "no partial output");

    c.resume();
    assert_eq!(
        c.restore(0).unwrap(),
        data[0],
        "the rank restores once the agent goes on"
    );
}

#[test]
fn an_agent_gives_up_on_a_checkpoint_whose_sender_stalls_mid_stream() {
    let mut c = up();
    let dir = ClusterDir::new(&c.dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let answer = rt.block_on(async {
        let open = OpenEpoch {
            rank: 0,
            world: 2,
            node: None,
            epoch: None,
            generation: None,
        };
        let Opened { epoch, node, .. } = coordinator_call(&dir, open, |_| {}).await.unwrap();
        let secret = dir.load_secret().unwrap();
        let mut conn = open_node(&node, &host_identity(), &secret).await.unwrap();
        let put = PutRank {
            rank: 0,
            epoch,
            item: FILE_ITEM.into(),
            len: 16 << 20,
            generation: None,
        };
        conn.send_control(&put.request()).await.unwrap();
        conn.send_data(&bytes(1 << 20, 3)).await.unwrap();
        // Silent from here on, the connection held open: a rank SIGSTOPped mid-checkpoint.
        let stalled = Instant::now();
        let answer = tokio::time::timeout(HANG, conn.recv_control::<AgentResponse>())
            .await
            .expect("the agent answers a stalled checkpoint");
        (answer, stalled.elapsed())
    });
    let (answer, waited) = answer;
    match answer {
        Ok(AgentResponse::Error(why)) => assert!(
            why.message.contains("rank 0's item")
                && why
                    .message
                    .contains("said nothing for 3.0 s after 1048576 of 16777216 bytes"),
            "{why:?}"
        ),
        other => panic!("a stalled checkpoint answered {other:?}"),
    }
    assert!(waited < BOUND, "{waited:?}");

    // The agent let go of the rank: its next checkpoint commits and restores.
    let data = vec![bytes(16 << 20, 4), bytes(16 << 20, 5)];
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c.assert_restorable();
}

#[test]
fn a_ship_whose_receiver_stops_mid_stream_ends_within_the_peer_wait() {
    // The coordinator is not in this exchange: only the ship's own deadline can end it.
    let mut c = up();
    let data = vec![bytes(16 << 20, 6), bytes(16 << 20, 7)];
    c.checkpoint(data.clone(), true);
    let epoch = c.committed();
    let from = c.status_placement(0);
    let dir = ClusterDir::new(&c.dir).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let nodes = rt.block_on(coordinator_call(&dir, Nodes, |_| {})).unwrap();
    let shipper = nodes.iter().find(|n| n.name == from).unwrap().clone();
    let receiver = nodes.iter().find(|n| n.name != from).unwrap().clone();
    let receiver_pid = c.pid(&format!("nodes/{}", receiver.name));

    c.pause("mid-ship");
    let secret = dir.load_secret().unwrap();
    let to = receiver.clone();
    let shipped = rt.spawn(async move {
        let mut conn = open_node(&shipper, &host_identity(), &secret).await.unwrap();
        let move_rank = MoveRank { rank: 0, epoch, to };
        conn.send_control(&move_rank.request()).await.unwrap();
        // The shipper reports its work meanwhile; its answer is what counts.
        answer_of_agent(&mut conn, &shipper.name, HANG).await
    });
    c.wait_paused();
    sh("kill", &["-STOP", &receiver_pid]);
    let stalled = Instant::now();
    c.resume();
    let answer = rt.block_on(shipped).unwrap();
    let waited = stalled.elapsed();
    sh("kill", &["-CONT", &receiver_pid]);
    match answer {
        Ok(AgentResponse::Error(why)) => assert!(
            why.message.contains(&receiver.name)
                && why
                    .message
                    .contains("shipping rank 0 to it: it took nothing of it for 3.0 s"),
            "{why:?}"
        ),
        other => panic!("a ship to a stopped receiver answered {other:?}"),
    }
    assert!(waited < BOUND, "{waited:?}");

    // The shipper let go of the rank and the receiver of its half: the cluster's next
    // checkpoint commits, and every rank restores.
    c.wait_up(&receiver.name);
    let data = vec![bytes(16 << 20, 8), bytes(16 << 20, 9)];
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    c.assert_restorable();
}
