//! The cluster beyond single faults: spares taking over, silent corruption repaired,
//! agents and the coordinator restarting mid-commit (two-phase commit resumes from the
//! journal and the prepared epochs), joining and leaving, refused bad requests.

mod cluster;

use cluster::{assert_refused, bytes, finish, ok, run, run_bounded, spawn, touch, Cluster};

fn epoch_of(c: &mut Cluster, data: &[Vec<u8>]) {
    let report = c.checkpoint(data.to_vec(), true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
}

fn data(world: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..world)
        .map(|r| bytes(150_000 + r * 1000, seed + r as u64))
        .collect()
}

#[test]
fn a_spare_takes_over_a_lost_node_whole() {
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
        "8KiB",
    ]);
    let d = data(4, 1);
    epoch_of(&mut c, &d);
    let victim = c.nodes_with_ranks()[2].clone();
    c.kill(&victim, true);
    c.wait_down(&victim);
    let out = ok(&["recover", "--dir", c.d(), "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let moved = &report["rebuilt"][0];
    assert_eq!(moved[0], victim.as_str());
    assert!(
        moved[1].as_object().unwrap().values().all(|n| n == "s0"),
        "{report}"
    );
    assert!(
        c.members().contains(&"s0".to_string()),
        "the spare joined the group"
    );
    assert!(!c.members().contains(&victim));
    c.assert_restorable();
}

/// A flipped bit in a rank's stored block: `eckpt restore` finds it, has the coordinator
/// check the copy, and returns the rank's bytes decoded from its group; `status` then says
/// the node is damaged, and `eckpt recover` repairs it in place.
#[test]
fn silent_corruption_is_found_and_repaired() {
    let mut c = Cluster::up(&["--nodes", "5", "--k", "3", "--m", "2", "--block-size", "8KiB"]);
    let d = data(3, 7);
    epoch_of(&mut c, &d);
    let node = c.status_placement(1);
    c.corrupt_rank_block(1, 5000);
    let got = c.restore(1).expect("decoded from the group");
    assert!(got == d[1], "rank 1 restored other bytes");
    let damage = |c: &Cluster| c.node_status(&node)["damaged"].as_str().map(str::to_string);
    let said = damage(&c).expect("status says the node is damaged");
    assert!(said.contains("checksum"), "{said}");
    let out = ok(&["recover", "--dir", c.d(), "--json"]);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        report["repaired"]
            .as_array()
            .unwrap()
            .contains(&node.as_str().into()),
        "{report}"
    );
    assert_eq!(damage(&c), None, "repaired");
    c.assert_restorable();
}

/// A committed epoch's manifest that fails its seal, or its data file cut short (a write
/// the disk acknowledged and did not keep): the rank's node cannot even list its items.
/// `eckpt restore` still returns the rank's bytes, decoded from its group, and `status`
/// says the node is damaged. The simulator's torn writes found the restore failing with
/// "invalid manifest" instead.
#[test]
fn a_rank_whose_manifest_or_data_file_is_damaged_is_restored_from_its_group() {
    let mut c = Cluster::up(&["--nodes", "5", "--k", "3", "--m", "2", "--block-size", "8KiB"]);
    let d = data(3, 7);
    epoch_of(&mut c, &d);
    for (rank, file) in [(1u64, "manifest"), (2, "data")] {
        let node = c.status_placement(rank);
        let epoch_dir = c.rank_epoch_dir(rank).expect("a committed epoch");
        let path = epoch_dir.join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        match file {
            "manifest" => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x04;
            }
            _ => bytes.truncate(bytes.len() / 2),
        }
        std::fs::write(&path, bytes).unwrap();
        let got = c.restore(rank as usize).expect("decoded from the group");
        assert!(got == d[rank as usize], "rank {rank} restored other bytes");
        let said = c.node_status(&node)["damaged"].as_str().map(str::to_string);
        assert!(
            said.is_some(),
            "status says {node} is damaged after its {file} was"
        );
    }
}

#[test]
fn commit_resumes_after_the_coordinator_and_an_agent_die_at_the_commit_point() {
    let mut c = Cluster::up(&[
        "--nodes",
        "6",
        "--k",
        "4",
        "--m",
        "2",
        "--mode",
        "update",
        "--block-size",
        "8KiB",
    ]);
    let mut d = data(4, 3);
    epoch_of(&mut c, &d);
    for (r, x) in d.iter_mut().enumerate() {
        touch(x, r as u64);
    }
    // The journal says committed, but no agent has heard: then the coordinator and one
    // agent (keeping its disk) die.
    c.pause("after-commit");
    c.checkpoint(d.clone(), false);
    c.wait_paused();
    let victim = c.nodes_with_ranks()[0].clone();
    c.kill(&victim, false);
    c.kill_coordinator();
    c.resume();
    // Restart both by hand; they resolve the prepared epoch from the journal. (`join`
    // refuses a cluster whose coordinator does not answer yet.)
    let mut coordinator = c.start_coordinator();
    c.wait_coordinator();
    ok(&["join", "--dir", c.d(), "--name", &victim]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while c.status()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| !n["alive"].as_bool().unwrap())
    {
        assert!(std::time::Instant::now() < deadline, "agents did not come back");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(c.committed(), 2);
    c.assert_restorable();
    // Parity was updated in place at the restarted nodes too: lose two and decode.
    let members = c.members();
    c.kill(&members[0], true);
    c.kill(&members[5], true);
    c.wait_down(&members[0]);
    c.assert_restorable();
    drop(c); // `eckpt down` stops the restarted coordinator
    coordinator.wait().unwrap();
}

#[test]
fn nodes_join_and_leave() {
    let mut c = Cluster::up(&["--nodes", "4", "--k", "2", "--m", "2", "--block-size", "8KiB"]);
    epoch_of(&mut c, &data(2, 9));
    ok(&["join", "--dir", c.d(), "--name", "extra1", "--spare"]);
    let s = c.status();
    let extra = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "extra1")
        .unwrap()
        .clone();
    assert_eq!(extra["alive"], true);
    assert_eq!(extra["spare"], true);
    let leaving = c.nodes_with_ranks()[0].clone();
    ok(&["leave", "--dir", c.d(), &leaving]);
    c.wait_down(&leaving);
    ok(&["recover", "--dir", c.d()]);
    assert!(
        c.members().contains(&"extra1".to_string()),
        "the spare replaced the node that left"
    );
    c.assert_restorable();
}

#[test]
fn bad_requests_get_one_line_errors_and_change_nothing() {
    let mut c = Cluster::up(&["--nodes", "3", "--k", "1", "--m", "2", "--block-size", "8KiB"]);
    epoch_of(&mut c, &data(1, 5));
    let file = c.dir.parent().unwrap().join("rank0.img");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            c.checkpoint_args("2", "0", &[file.to_str().unwrap()]),
            "the job has 1 ranks",
        ),
        (
            c.checkpoint_args("1", "0", &["--epoch", "9", file.to_str().unwrap()]),
            "epoch 9 is not open",
        ),
        (c.checkpoint_args("1", "0", &["/nonexistent"]), "/nonexistent"),
        (
            vec!["restore", "--dir", c.d(), "--rank", "5", "-o", "/tmp/x"],
            "rank 5 never checkpointed",
        ),
        (vec!["kill-node", "--dir", c.d(), "nope"], "no node nope"),
        (
            vec!["up", "--dir", c.d(), "--nodes", "3", "--detach"],
            "already holds a cluster",
        ),
        (
            vec!["status", "--dir", "/nonexistent-cluster"],
            "not a cluster directory",
        ),
        (
            vec![
                "up",
                "--dir",
                "/tmp/eckpt-never",
                "--nodes",
                "2",
                "--k",
                "1",
                "--m",
                "2",
            ],
            "need at least 3",
        ),
        (
            vec!["debug", "pause", "--dir", c.d(), "--at", "lunch"],
            "expected one of",
        ),
    ];
    for (args, expected) in cases {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    assert_eq!(c.committed(), 1);
    c.assert_restorable();
}

#[test]
fn a_rank_checkpointing_twice_is_refused_at_once_or_writes_exactly_its_next_epoch() {
    let c = Cluster::up(&["--nodes", "3", "--k", "1", "--m", "2", "--block-size", "8KiB"]);
    let first = bytes(50_000, 1);
    let second = bytes(50_000, 2);
    let dir = c.dir.parent().unwrap();
    let (p1, p2) = (dir.join("first.img"), dir.join("second.img"));
    std::fs::write(&p1, &first).unwrap();
    std::fs::write(&p2, &second).unwrap();
    let (p1, p2) = (p1.to_str().unwrap(), p2.to_str().unwrap());
    let ckpt = |rank: &'static str, extra: &[&'static str], file: &str| -> Vec<String> {
        let mut args = c.checkpoint_args("2", rank, extra);
        args.push(file);
        args.into_iter().map(String::from).collect()
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    // Rank 0 writes epoch 1; rank 1 has not, so epoch 1 stays open and undecided.
    ok(&args(&ckpt("0", &[], p1)));
    // Epoch 1 again, explicitly: refused at once rather than blocking.
    let again = ckpt("0", &["--epoch", "1"], p2);
    assert_refused(&run_bounded(&args(&again)), "rank 0 already wrote epoch 1");
    // Epoch 2 is not open yet: refused at once, not parked until it opens.
    let early = ckpt("0", &["--epoch", "2"], p2);
    assert_refused(&run_bounded(&args(&early)), "epoch 2 is not open");
    assert_eq!(c.status()["open_epoch"], 1);

    // Without --epoch, rank 0 waits for epoch 1's decision and writes exactly epoch 2.
    let next = ckpt("0", &["--json"], p2);
    let waiting = spawn(&args(&next));
    ok(&args(&ckpt("1", &["--wait"], p1)));
    let out = finish(waiting, "checkpoint of rank 0's next epoch");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["epoch"], 2, "{report}");
    assert_eq!(c.committed(), 1);
    assert_eq!(c.restore(0).unwrap(), first, "epoch 1 holds the first image");
}

/// Whether `status` answers (at most 10 s).
fn answers(d: &str) -> bool {
    run_bounded(&["status", "--dir", d]).status.success()
}

#[test]
fn a_cluster_given_an_idle_lease_stops_itself_once_no_job_runs() {
    let shape = "--nodes 3 --k 2 --m 1 --lease 1s --idle-lease 3s";
    let mut c = Cluster::up(&shape.split(' ').collect::<Vec<_>>());
    let d = c.d().to_string();
    // A job running longer than the idle lease keeps it: its lease is live.
    let work = tempfile::tempdir().unwrap();
    let job = cluster::run_job(
        work.path(),
        &["--dir", &d, "-n", "2", "--", "sh", "-c", "sleep 5"],
        std::time::Duration::from_secs(60),
    );
    assert!(job.status.success(), "{}", String::from_utf8_lossy(&job.stderr));
    assert!(answers(&d), "the cluster stopped under a running job");
    // Then, idle, it stops itself within its lease and a tick, checkpoints kept.
    epoch_of(&mut c, &data(2, 7));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while answers(&d) {
        assert!(
            std::time::Instant::now() < deadline,
            "still up 20 s after its last job"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let log = std::fs::read_to_string(c.dir.join("coordinator/log")).unwrap();
    assert!(
        log.contains("no job ran on the cluster for its idle lease"),
        "{log}"
    );
    ok(&["up", "--dir", &d, "--detach"]);
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", "--dir", &d, "--json"])).unwrap();
    assert!(status["committed_epoch"].as_u64().unwrap() >= 1, "{status}");
    let too_short = "up --dir /nonexistent-eckpt --nodes 3 --k 2 --m 1 --idle-lease 500ms";
    let refused = run(&too_short.split(' ').collect::<Vec<_>>());
    assert_refused(&refused, "--idle-lease 500 ms is too short");
}

/// Failure domains: four racks of two nodes, k=3 m=1 (two groups of four). Formed in name
/// order, a group holds both nodes of rack r0, and losing the rack loses that group's data;
/// formed across the racks (`--domain`), each group holds one node per rack, and the lost
/// rack costs each group one member, which its code rebuilds.
#[test]
fn a_whole_failure_domain_lost_at_once_is_rebuilt_when_groups_span_the_domains() {
    let shape = ["--nodes", "8", "--k", "3", "--m", "1", "--block-size", "8KiB"];
    let racks = [
        "--domain", "r0=n0,n1", "--domain", "r1=n2,n3", "--domain", "r2=n4,n5", "--domain", "r3=n6,n7",
    ];
    let rack_of = |node: &str| node[1..].parse::<usize>().unwrap() / 2;
    let lose_rack_r0 = |c: &mut Cluster| {
        epoch_of(c, &data(6, 11));
        for node in ["n0", "n1"] {
            c.kill(node, true);
        }
        c.wait_down("n0");
        c.wait_down("n1");
        c.recover()
    };

    let mut spread = Cluster::up(&[&shape[..], &racks[..]].concat());
    let status = spread.status();
    for group in status["groups"].as_array().unwrap() {
        let members: Vec<usize> = group["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| rack_of(m.as_str().unwrap()))
            .collect();
        let mut racks = members.clone();
        racks.dedup();
        assert_eq!(racks.len(), members.len(), "one node per rack: {group}");
        assert!(group["exposed"].is_null(), "{group}");
    }
    let recovered = lose_rack_r0(&mut spread);
    assert!(
        recovered.status.success(),
        "{}",
        String::from_utf8_lossy(&recovered.stderr)
    );
    spread.assert_restorable();

    let mut by_name = Cluster::up(&shape);
    let lost = lose_rack_r0(&mut by_name);
    assert!(!lost.status.success(), "two members of one group of m=1 are lost");
    assert!(
        String::from_utf8_lossy(&lost.stderr).contains("more than m=1"),
        "{}",
        String::from_utf8_lossy(&lost.stderr)
    );
}

/// `up` of four nodes, k=3 m=1, with `--domain domain`.
fn up_four_in(dir: &std::path::Path, domain: &str) -> std::process::Output {
    let d = dir.to_str().unwrap();
    run(&[
        "up", "--dir", d, "--detach", "--nodes", "4", "--k", "3", "--m", "1", "--domain", domain,
    ])
}

/// Domains that cannot be spread (one rack holds three of four nodes, m=1) are said at `up`
/// and in `status`; a domain naming a node the cluster does not have is refused. A node
/// whose agent says it is in another domain (`join --domain`) is there from then on.
#[test]
fn domains_that_cannot_be_spread_are_said_and_unknown_nodes_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad");
    let out = up_four_in(&bad, "r0=n0,n9");
    assert_refused(&out, "--domain names node n9, which is not a node of the cluster");
    assert!(!bad.join("cluster.json").exists(), "nothing created");
    let out = up_four_in(&bad, "r0");
    assert_refused(&out, "--domain \"r0\": expected DOMAIN=NODE,NODE,…");

    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let up = up_four_in(&dir, "r0=n0,n1,n2");
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let up = String::from_utf8_lossy(&up.stdout);
    assert!(
        up.contains("WARNING: group 1 holds 3 members of failure domain r0, more than m=1"),
        "{up}"
    );
    let status = ok(&["status", "--dir", d]);
    assert!(
        status.contains("EXPOSED: 3 members in failure domain r0"),
        "{status}"
    );
    let out = run(&[
        "join", "--dir", d, "--name", "s0", "--spare", "--domain", "rack 1",
    ]);
    assert_refused(&out, "failure domain \"rack 1\": use 1 to 32 letters");
    ok(&["kill-node", "--dir", d, "n2"]);
    ok(&["join", "--dir", d, "--name", "n2", "--domain", "r1"]);
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    let n2 = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n2")
        .unwrap();
    assert_eq!(n2["domain"], "r1", "{status}");
    assert_eq!(
        status["groups"][0]["exposed"],
        serde_json::json!(["r0", 2]),
        "{status}"
    );
    ok(&["down", "--dir", d]);
}

/// The threads of `pid` that belong to the codec's pool (`eckpt-codec-N`).
fn codec_threads(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter(|task| {
            let comm = std::fs::read_to_string(task.as_ref().unwrap().path().join("comm")).unwrap();
            comm.starts_with("eckpt-codec-")
        })
        .count()
}

/// `--agent-threads 1` codes every chunk on the agent's coding thread alone (no pool is
/// started); by default an agent shares each chunk with a pool of one thread per further
/// core — and either way the parity is right: a member lost after the epoch is rebuilt
/// byte-exact. A thread count of 0 is refused (by the argument parser).
#[test]
fn agents_code_each_chunk_on_the_threads_the_cluster_sets() {
    let shape = ["--nodes", "3", "--k", "2", "--m", "1"];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (threads, pool) in [(Some("1"), 0), (None, cores - 1)] {
        let args: Vec<&str> = match threads {
            Some(t) => [&shape[..], &["--agent-threads", t]].concat(),
            None => shape.to_vec(),
        };
        let mut c = Cluster::up(&args);
        epoch_of(&mut c, &data(2, 3));
        for node in c.members() {
            let pid = c.pid(&format!("nodes/{node}"));
            assert_eq!(
                codec_threads(&pid),
                pool,
                "{node} with --agent-threads {threads:?}"
            );
        }
        c.lose_and_recover(1);
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("cluster");
    let out = run(&[
        &["up", "--dir", d.to_str().unwrap()][..],
        &shape,
        &["--agent-threads", "0", "--detach"],
    ]
    .concat());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr
                .lines()
                .next()
                .unwrap_or("")
                .contains("'--agent-threads <N>'"),
        "{stderr}"
    );
    assert!(!d.join("cluster.json").exists(), "a refused cluster was created");
}

/// `--agent-nice` and `--agent-cpus` reach every thread of every agent (the runtime's and
/// the coding threads alike, started after the agent placed itself), the cluster still
/// codes and commits, and a CPU the host lacks is refused before anything starts.
#[test]
fn agents_run_at_the_nice_value_and_on_the_cpus_the_cluster_sets() {
    let shape = ["--nodes", "3", "--k", "2", "--m", "1"];
    let mut c = Cluster::up(&[&shape[..], &["--agent-nice", "7", "--agent-cpus", "0"]].concat());
    epoch_of(&mut c, &data(2, 3));
    for node in c.members() {
        let pid = c.pid(&format!("nodes/{node}"));
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        let mut threads = 0;
        for task in tasks {
            let task = task.unwrap().path();
            let stat = std::fs::read_to_string(task.join("stat")).unwrap();
            // Field 19 (nice), counted after the command name's closing parenthesis.
            let nice = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .nth(16)
                .unwrap()
                .to_string();
            assert_eq!(nice, "7", "{node} thread {}", task.display());
            let status = std::fs::read_to_string(task.join("status")).unwrap();
            let cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap();
            assert_eq!(cpus.trim(), "0", "{node} thread {}", task.display());
            threads += 1;
        }
        assert!(threads > 1, "{node}: {threads} threads");
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster_dir = dir.path().join("cluster");
    let d = cluster_dir.to_str().unwrap();
    let out = run(&[
        &["up", "--dir", d][..],
        &shape,
        &["--agent-cpus", "1000", "--detach"],
    ]
    .concat());
    assert_refused(&out, "CPU 1000 is not one this host lets it use");
    assert!(
        !cluster_dir.join("cluster.json").exists(),
        "a refused cluster was created"
    );
}
