//! Nodes on "other hosts": the cluster directory is shared, but every node keeps its
//! checkpoints on storage of its own. The test builds the hosts itself — a network
//! namespace per node on a bridge, a tmpfs per node for `eckpt agent --store` — starts
//! only the coordinator with `eckpt up --no-agents`, and the agents in the namespaces by
//! hand, as `mpirun -npernode 1 eckpt agent …` or srun would on a real cluster. The agents
//! reach the coordinator over TCP; `eckpt run` starts each rank in its node's namespace,
//! kills two nodes with their stores mid-run, recovers, and the job ends with the result
//! of a failure-free run. Nothing is ever stored in the cluster directory. Needs root.

mod cluster;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cluster::hosts::Hosts;
use cluster::programs::build_c;
use cluster::{is_root, ok, run_job};

#[test]
fn agents_on_their_own_hosts_keep_checkpoints_on_their_own_storage() {
    if !is_root() {
        eprintln!("skipped: network namespaces and tmpfs mounts need root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let names = ["n0", "n1", "n2", "n3", "n4", "n5", "s0"];
    let mut hosts = Hosts::new(tmp.path(), &names, 9);
    let dir = tmp.path().join("shared/cluster");
    let d = dir.to_str().unwrap();
    let up = format!(
        "up --dir {d} --nodes 6 --spares 1 --k 4 --m 2 --no-agents --bind {} --detach",
        hosts.bridge_ip()
    );
    ok(&up.split(' ').collect::<Vec<_>>());
    for i in 0..names.len() {
        hosts.start_agent(d, i);
    }

    // A failure-free reference, standalone.
    let reference = tmp.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    let args = ["-m", "8", "-s", "48", "-k", "4", "-l", "log%r", "-i", "input%r"];
    let work = tmp.path().join("job");
    std::fs::create_dir_all(&work).unwrap();
    let mut expected = Vec::new();
    for r in 0..4 {
        for place in [&reference, &work] {
            std::fs::write(place.join(format!("input{r}")), format!("rank {r}")).unwrap();
        }
        let out = Command::new(&mat)
            .args(args)
            .current_dir(&reference)
            .env("ECKPT_DIR", reference.join("store"))
            .env("ECKPT_RANK", r.to_string())
            .output()
            .unwrap();
        assert!(out.status.success());
        expected.push(String::from_utf8(out.stdout).unwrap().trim().to_string());
    }

    let mut run = vec![
        "--dir",
        d,
        "-n",
        "4",
        "--kill-at",
        "4:2",
        "--",
        mat.to_str().unwrap(),
    ];
    run.extend(args);
    let out = run_job(&work, &run, Duration::from_secs(300));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("waiting for the agents") || err.contains("launched 4 ranks"),
        "{err}"
    );
    assert!(err.contains("eckpt run: recovered epoch"), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    for (r, sum) in expected.iter().enumerate() {
        assert!(stdout.contains(&format!("[{r}] {sum}")), "rank {r}: {stdout}");
        let log = |place: &Path| std::fs::read(place.join(format!("log{r}"))).unwrap();
        assert!(log(&work) == log(&reference), "rank {r}'s log");
    }

    // Every rank ran in its node's namespace: the agents' TCP sessions to the coordinator
    // are there, and the checkpoints are on the nodes' own storage, none in the cluster
    // directory.
    let sessions = Command::new("ip")
        .args([
            "netns",
            "exec",
            &hosts.namespace(0),
            "ss",
            "-tn",
            "state",
            "established",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sessions.stdout).contains(&format!("{}:", hosts.bridge_ip())),
        "n0 talks to the coordinator over TCP: {}",
        String::from_utf8_lossy(&sessions.stdout)
    );
    for node in std::fs::read_dir(dir.join("nodes")).unwrap().flatten() {
        assert!(
            !node.path().join("store").exists(),
            "{} holds a store",
            node.path().display()
        );
    }
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    let mut hosting = 0;
    for node in status["nodes"].as_array().unwrap() {
        let name = node["name"].as_str().unwrap();
        let local = hosts.locals[names.iter().position(|n| *n == name).unwrap()].join("eckpt");
        if node["removed"].as_bool().unwrap() {
            assert!(!local.join("store").exists(), "{name} was wiped");
        }
        for rank in node["ranks"].as_array().unwrap() {
            hosting += 1;
            assert!(
                local.join(format!("store/rank.{rank}")).is_dir(),
                "rank {rank} on {name}'s storage"
            );
        }
    }
    assert_eq!(hosting, 4);
    ok(&["down", "--dir", d]);
}
