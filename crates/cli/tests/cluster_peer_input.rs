//! No panic on peer input: a test that holds the cluster secret plays the coordinator and a
//! peer agent, and sends an agent malformed coding and update tasks, lengths it could never
//! hold, peer streams no task has, and a truncated update record. Each gets an error
//! answer, and the agent keeps serving: it is still running, and the next epoch commits and
//! restores byte-exact.

mod cluster;

use std::process::Command;
use std::time::Duration;

use eckpt_cluster_api::call::Call;
use eckpt_cluster_api::commands::ask_coordinator;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{
    AgentRequest, AgentResponse, CancelTask, CodingTask, DecodeSpec, Group, Hello, ImportRank, Install,
    NodeInfo, Nodes, ObjectKind, ObjectRecord, PutRank, ShardRecord, UpdateTask,
};
use eckpt_cluster_api::net::{answer_of_agent, ask_agent, host_identity, open, open_node};
use eckpt_cluster_api::{ClusterError, CodingConfig};
use eckpt_coding::ObjectId;
use eckpt_proto::{ClusterSecret, Connection};

use cluster::{bytes, touch, Cluster};

/// Longest an answer may take: every malformed request is refused before any waiting.
const ANSWER: Duration = Duration::from_secs(30);

/// An authenticated party on the cluster: the secret, the agents, the first group.
struct Peer {
    secret: ClusterSecret,
    host: String,
    nodes: Vec<NodeInfo>,
    group: Group,
    coding: CodingConfig,
}

impl Peer {
    async fn join(c: &Cluster) -> Peer {
        let dir = ClusterDir::new(&c.dir).unwrap();
        let secret = dir.load_secret().unwrap();
        let file = dir.load().unwrap();
        let mut coord = open(&file.coordinator_unix, &secret, &Hello::Control)
            .await
            .unwrap();
        let answer = Duration::from_secs(30);
        let nodes = ask_coordinator(&mut coord, "the coordinator", Nodes, answer, |_| {})
            .await
            .unwrap();
        let status = c.status();
        let g = &status["groups"][0];
        Peer {
            secret,
            host: host_identity(),
            nodes,
            group: Group {
                id: g["id"].as_u64().unwrap(),
                k: g["k"].as_u64().unwrap() as usize,
                m: g["m"].as_u64().unwrap() as usize,
                members: c.members(),
            },
            coding: serde_json::from_value(status["coding"].clone()).unwrap(),
        }
    }

    fn node(&self, name: &str) -> &NodeInfo {
        self.nodes.iter().find(|n| n.name == name).unwrap()
    }

    /// The group's members' agents, in position order.
    fn members(&self) -> Vec<NodeInfo> {
        self.group.members.iter().map(|m| self.node(m).clone()).collect()
    }

    async fn connect(&self, node: &str) -> Connection {
        open_node(self.node(node), &self.host, &self.secret)
            .await
            .unwrap()
    }

    /// Sends `request` to `node` on a connection of its own and expects an error answer
    /// that says `expected`.
    async fn refused(&self, node: &str, request: &AgentRequest, expected: &str) {
        let mut conn = self.connect(node).await;
        let answer = ask(&mut conn, node, request)
            .await
            .unwrap_or_else(|e| panic!("no answer to {request:?}: {e}"));
        match answer {
            AgentResponse::Error(why) => {
                assert!(why.message.contains(expected), "{why:?}, expected {expected:?}")
            }
            other => panic!("{request:?} answered {other:?}"),
        }
    }

    /// The object the group's first epoch committed.
    fn object(&self) -> ObjectRecord {
        ObjectRecord {
            id: ObjectId {
                group: self.group.id,
                epoch: 1,
            },
            kind: ObjectKind::Image,
            version: 1,
            chunk: 16 << 10,
            data_chunks: 1,
            shards: vec![ShardRecord::default(); self.group.members.len()],
        }
    }

    /// A well-formed encode task of a new object, for the cases to spoil.
    fn encode(&self, task: u64) -> CodingTask {
        let mut object = self.object();
        object.id.epoch = 1000;
        CodingTask {
            task,
            group: self.group.clone(),
            coding: self.coding,
            object,
            participants: self.members().into_iter().map(Some).collect(),
            decode: None,
        }
    }
}

/// Sends `request` to node `node`'s agent on `conn` and reads its answer, passing over its
/// reports of work: each frame within [`ANSWER`].
async fn ask(
    conn: &mut Connection,
    node: &str,
    request: &AgentRequest,
) -> Result<AgentResponse, ClusterError> {
    conn.send_control(request).await?;
    answer_of_agent(conn, node, ANSWER).await
}

fn decode(unavailable: Vec<usize>, rebuild: Vec<(usize, usize)>) -> Option<DecodeSpec> {
    Some(DecodeSpec { unavailable, rebuild })
}

fn alive(c: &Cluster, node: &str) -> bool {
    let pid = c.pid(&format!("nodes/{node}"));
    Command::new("kill")
        .args(["-0", &pid])
        .status()
        .unwrap()
        .success()
}

#[test]
fn malformed_tasks_and_huge_lengths_get_errors_and_the_agent_keeps_serving() {
    let mut c = Cluster::up(&[
        "--nodes",
        "6",
        "--k",
        "4",
        "--m",
        "2",
        "--block-size",
        "16KiB",
        "--mode",
        "update",
    ]);
    let mut data: Vec<Vec<u8>> = (0..4).map(|r| bytes(200_000, r + 1)).collect();
    c.checkpoint(data.clone(), true);
    assert_eq!(c.committed(), 1);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let peer = rt.block_on(Peer::join(&c));
    // Member 4 holds the first parity of every row (dedicated layout): it receives updates.
    let target = peer.group.members[4].clone();
    let t = &target;
    rt.block_on(async {
        type Spoil = fn(&mut CodingTask);
        let cases: Vec<(&str, Spoil)> = vec![
            ("outside the group", |t| t.decode = decode(vec![6], vec![(6, 0)])),
            ("rebuilt at participant 40", |t| {
                t.decode = decode(vec![1], vec![(1, 40)])
            }),
            ("read or written but has no participant", |t| {
                t.participants[2] = None;
            }),
            ("k=0", |t| t.group.k = 0),
            ("lists 6 members", |t| t.group.m = 7),
            ("outside 512", |t| t.object.chunk = u32::MAX),
            ("outside 512", |t| t.object.chunk = 0),
            ("chunks per data shard", |t| t.object.data_chunks = u64::MAX),
            ("does not fit", |t| t.object.shards[0].len = u64::MAX),
            ("shard records", |t| t.object.shards.clear()),
            ("takes part twice", |t| {
                t.participants[5] = t.participants[0].clone()
            }),
        ];
        for (i, (expected, spoil)) in cases.into_iter().enumerate() {
            let mut task = peer.encode((1 << 40) + i as u64);
            spoil(&mut task);
            peer.refused(t, &AgentRequest::Code(task), expected).await;
        }

        let put = PutRank {
            rank: 0,
            epoch: 2,
            item: "file".into(),
            len: u64::MAX,
            generation: None,
        }
        .request();
        peer.refused(t, &put, "more than this node's").await;
        let import = ImportRank {
            rank: 0,
            epoch: 2,
            items: vec![
                ("a".into(), 1 << 62),
                ("b".into(), 1 << 62),
                ("c".into(), 1 << 62),
            ],
        }
        .request();
        peer.refused(t, &import, "more than this node's").await;
        let install = Install {
            parts: vec![(1 << 41, peer.object())],
            member: 99,
            epoch: 1,
            deliver: eckpt_cluster_api::msg::Deliver::Export { rank: 0 },
        }
        .request();
        let mut conn = peer.connect(t).await;
        match ask(&mut conn, t, &install).await.unwrap() {
            AgentResponse::Error(_) => {}
            other => panic!("install of member 99 answered {other:?}"),
        }

        // Peer streams for no possible participant or phase are answered with an error.
        for (from, phase) in [(100_000, 0), (0, 100_000)] {
            let hello = Hello::Peer {
                task: 1 << 42,
                from,
                phase,
            };
            let mut stream = open(peer.node(t).endpoint_from(&peer.host), &peer.secret, &hello)
                .await
                .unwrap();
            match stream.recv_control::<AgentResponse>().await.unwrap() {
                AgentResponse::Error(why) => assert!(why.message.contains("refused"), "{why:?}"),
                other => panic!("peer stream {from}/{phase} answered {other:?}"),
            }
        }

        // An update without a layout per member, then one fed a truncated record by a data
        // member (played here) of the parity holder's first phase.
        let mut update = UpdateTask {
            task: 1 << 43,
            group: peer.group.clone(),
            coding: peer.coding,
            object: peer.object(),
            epoch: 2,
            participants: peer.members(),
            layouts: Vec::new(),
        };
        peer.refused(t, &AgentRequest::Update(update.clone()), "0 layouts")
            .await;
        update.task += 1;
        update.layouts = vec![Default::default(); peer.group.members.len()];
        let mut control = peer.connect(t).await;
        control
            .send_control(&AgentRequest::Update(update.clone()))
            .await
            .unwrap();
        let hello = Hello::Peer {
            task: update.task,
            from: 0,
            phase: 0,
        };
        let mut stream = open(peer.node(t).endpoint_from(&peer.host), &peer.secret, &hello)
            .await
            .unwrap();
        stream.send_data(&[1, 2, 3, 4, 5]).await.unwrap();
        let answer = answer_of_agent(&mut control, t, ANSWER)
            .await
            .expect("an answer to the update");
        match answer {
            AgentResponse::Error(why) => assert!(why.message.contains("truncated update record"), "{why:?}"),
            other => panic!("a truncated record answered {other:?}"),
        }
        // The parity holder's readers of the other data members stop waiting.
        let cancel = CancelTask {
            task: update.task,
            reason: "the test is done".into(),
        };
        ask_agent(&mut peer.connect(t).await, t, cancel, Duration::from_secs(30))
            .await
            .unwrap();
    });

    // The agent is still there and the cluster works as before.
    assert!(alive(&c, &target), "{target} exited");
    for (r, d) in data.iter_mut().enumerate() {
        touch(d, r as u64 + 7);
    }
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    assert_eq!(c.committed(), 2);
    c.assert_restorable();
}
