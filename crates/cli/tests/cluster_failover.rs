//! Coordinator failover. The cluster directory — the coordinator's journal with it — is on
//! storage every host shares; the coordinator runs on a host of its own (a network
//! namespace), the agents on theirs, each with its node-local store. In the middle of a job
//! the coordinator's host is lost: its process killed, its link down. `eckpt coordinator
//! --dir` started on another host resumes the journal with the same committed epoch and the
//! next term; the agents and the job's supervisor find it through `cluster.json`, and the
//! job ends with the results of a failure-free run. The coordinator replaced is fenced: an
//! agent that follows the new term refuses it. Needs root (namespaces, tmpfs mounts).

mod cluster;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use eckpt_cluster_api::call::Call;
use eckpt_cluster_api::msg::{Abort, AgentResponse};
use eckpt_cluster_api::net::call;
use eckpt_cluster_api::ErrorKind;

use cluster::hosts::{sh, Hosts};
use cluster::programs::{assert_failure_free, build_c, reference};
use cluster::{finish_job, is_root, ok, spawn_job};

/// `eckpt status --json`, asked from the root namespace (over TCP, as from any other host).
fn status(dir: &str) -> serde_json::Value {
    serde_json::from_str(&ok(&["status", "--dir", dir, "--json"])).unwrap()
}

/// `eckpt` in host `i`'s namespace.
fn eckpt_on(hosts: &Hosts, i: usize) -> Command {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", &hosts.namespace(i), env!("CARGO_BIN_EXE_eckpt")]);
    command
}

/// Waits until `ready` holds of the cluster's status, for at most `limit`.
fn wait_for(
    dir: &str,
    limit: Duration,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let out = cluster::run(&["status", "--dir", dir, "--json"]);
        if out.status.success() {
            let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if ready(&s) {
                return s;
            }
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The coordinator replaced, if it still ran (cut off, not dead), would be refused by an
/// agent that follows its successor: a request of term `term` to `node`.
fn ask_as_coordinator_of(dir: &str, node: &str, term: u64) -> AgentResponse {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut conn = cluster::connect_as_coordinator(dir, node, term).await;
        call(&mut conn, &Abort { epoch: u64::MAX }.request())
            .await
            .unwrap()
    })
}

/// A coordinator process, killed when the test ends however it ends.
enum Coordinator {
    /// Started by `up --detach`: known by its pid file.
    Detached(u32),
    Child(Child),
}

impl Coordinator {
    fn detached(dir: &std::path::Path) -> Coordinator {
        let pid = std::fs::read_to_string(dir.join("coordinator/pid")).unwrap();
        Coordinator::Detached(pid.lines().next().unwrap().trim().parse().unwrap())
    }

    fn kill(&mut self) {
        match self {
            Coordinator::Detached(pid) => {
                if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    cluster::kill_and_wait(&pid.to_string());
                }
            }
            Coordinator::Child(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn a_coordinator_lost_with_its_host_is_started_on_another_and_the_job_goes_on() {
    if !is_root() {
        eprintln!("skipped: network namespaces and tmpfs mounts need root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    // Hosts 0 and 1 run coordinators (the first, then its replacement), 2… the agents.
    let names = ["c0", "c1", "n0", "n1", "n2", "n3", "n4", "n5"];
    let mut hosts = Hosts::new(tmp.path(), &names, 11);
    let dir = tmp.path().join("shared/cluster");
    let d = dir.to_str().unwrap();
    let up = eckpt_on(&hosts, 0)
        .args(["up", "--dir", d, "--bind", &hosts.ip(0)])
        .args("--nodes 6 --k 4 --m 2 --no-agents --detach --liveness 2s".split(' '))
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let mut first = Coordinator::detached(&dir);
    for i in 2..names.len() {
        hosts.start_agent(d, i);
    }
    wait_for(d, Duration::from_secs(60), "every agent registered", |s| {
        s["nodes"].as_array().unwrap().iter().all(|n| n["alive"] == true)
    });
    assert_eq!(status(d)["coordinator_term"], 1);

    let args = ["-m", "8", "-s", "240", "-k", "8", "-l", "log%r", "-i", "input%r"];
    let expected = reference(&mat, &tmp.path().join("reference"), 4, &args);
    let work = tmp.path().join("job");
    std::fs::create_dir_all(&work).unwrap();
    for r in 0..4 {
        std::fs::write(work.join(format!("input{r}")), format!("input of rank {r}")).unwrap();
    }
    let mut run = vec!["--dir", d, "-n", "4", "--", mat.to_str().unwrap()];
    run.extend(args);
    let job = spawn_job(&work, &run);

    // The coordinator's host is lost once the job has committed a few epochs.
    let before = wait_for(d, Duration::from_secs(120), "the job committed epoch 2", |s| {
        s["committed_epoch"].as_u64().unwrap() >= 2
    });
    first.kill();
    sh(
        "ip",
        &[
            "netns",
            "exec",
            &hosts.namespace(0),
            "ip",
            "link",
            "set",
            &hosts.link(0),
            "down",
        ],
    );
    let committed = before["committed_epoch"].as_u64().unwrap();

    // Its replacement, on another host, from the shared journal.
    let _replacement = Coordinator::Child(
        eckpt_on(&hosts, 1)
            .args(["coordinator", "--dir", d, "--bind", &hosts.ip(1)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let after = wait_for(d, Duration::from_secs(60), "the replacement serves", |s| {
        s["coordinator_term"] == 2
    });
    assert!(
        after["committed_epoch"].as_u64().unwrap() >= committed,
        "the replacement resumed from an older epoch: {after}"
    );

    let out = finish_job(job, Duration::from_secs(300));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_failure_free(&out.stdout, &work, &expected, "after a coordinator failover");

    let end = status(d);
    assert_eq!(end["coordinator_term"], 2, "{end}");
    assert!(
        end["committed_epoch"].as_u64().unwrap() > committed,
        "no epoch committed after the failover: {end}"
    );
    assert!(
        end["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["alive"] == true && n["removed"] == false),
        "a node was lost to the failover: {end}"
    );
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("cluster.json")).unwrap()).unwrap();
    assert!(
        file["coordinator_tcp"].to_string().contains(&hosts.ip(1)),
        "cluster.json names the replacement: {file}"
    );

    // The coordinator replaced is fenced at the agents.
    match ask_as_coordinator_of(d, "n0", 1) {
        AgentResponse::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Fenced, "{e:?}");
            assert!(e.message.contains("term 1 is refused"), "{e:?}");
        }
        other => panic!("a coordinator of term 1 was answered {other:?}"),
    }
    ok(&["down", "--dir", d]);
}

/// Agents started by another launcher, each saying its rack (`eckpt agent --domain`), after
/// `up --no-agents` formed the groups in name order: `[n0 n1 n2] [n3 n4 n5]`, two nodes of
/// rack r0 in a group of m=1. The groups are formed anew across the racks as the agents
/// register, before the first epoch, so that losing the whole rack r0 costs each group one
/// member: recovered, every rank restores. (Formed in name order, the loss was
/// unrecoverable: `group 1 lost 2 of 3 members, more than m=1`.) Needs no root.
#[test]
fn failure_domains_the_agents_declare_spread_the_groups_before_the_first_epoch() {
    let mut c = cluster::Cluster::up(&[
        "--nodes",
        "6",
        "--k",
        "2",
        "--m",
        "1",
        "--block-size",
        "8KiB",
        "--no-agents",
    ]);
    let rack_of = |node: &str| node[1..].parse::<usize>().unwrap() / 2;
    let _agents: Vec<KillOnDrop> = (0..6)
        .map(|i| {
            let (name, rack) = (format!("n{i}"), format!("r{}", i / 2));
            KillOnDrop(
                cluster::eckpt()
                    .args(["agent", "--dir", c.d(), "--name", &name, "--domain", &rack])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    c.wait_all_alive();
    let status = c.status();
    for group in status["groups"].as_array().unwrap() {
        let mut racks: Vec<usize> = group["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| rack_of(m.as_str().unwrap()))
            .collect();
        racks.sort();
        racks.dedup();
        assert_eq!(racks.len(), 3, "one node per rack: {group}");
        assert!(group["exposed"].is_null(), "{group}");
    }
    let data: Vec<Vec<u8>> = (0..4).map(|r| cluster::bytes(60_000, r + 1)).collect();
    let report = c.checkpoint(data, true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
    for node in ["n0", "n1"] {
        c.kill(node, true);
    }
    c.wait_down("n0");
    c.wait_down("n1");
    let recovered = c.recover();
    assert!(
        recovered.status.success(),
        "{}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    c.assert_restorable();
}

/// A process started by the test, killed when the test ends however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
