//! What a cluster leaves and how it ends, with real coordinator and agent processes: an
//! agent refuses a `--store` that already holds a user's `store` or `coded`, or that sits
//! under a directory others can write into; a directory the user gave keeps its mode;
//! `down --purge` deletes only what eckpt made and says what it kept; `down` stops a
//! cluster whose `cluster.json` is damaged; `join` says at once why its agent exited.

mod cluster;

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::Duration;

use cluster::programs::text;
use cluster::{eckpt, ok, run, run_bounded, wait_for, Cluster, PurgeAtEnd};

const SMALL: [&str; 6] = ["--nodes", "3", "--k", "2", "--m", "1"];

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn agent(d: &str, name: &str, store: &Path) -> Child {
    eckpt()
        .args(["agent", "--dir", d, "--name", name, "--store"])
        .arg(store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// An agent that must exit on its own, refused: its last line.
fn refused(child: Child) -> String {
    let out: Output = cluster::finish(child, "agent");
    assert!(!out.status.success());
    text(&out.stderr).lines().last().unwrap_or_default().to_string()
}

/// Whether process `pid` runs `eckpt` (not a zombie, not a reused pid).
fn eckpt_runs(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')));
    !zombie && cmdline.windows(5).any(|w| w == b"eckpt")
}

fn alive(d: &str) -> bool {
    let status: serde_json::Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["alive"].as_bool().unwrap())
}

#[test]
fn a_users_store_is_refused_and_purge_deletes_only_what_eckpt_made() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let mut args = vec!["up", "--dir", d, "--no-agents", "--detach"];
    args.extend(SMALL);
    ok(&args);

    // A user's directory that already has a `store` and a `coded` of its own.
    let ud0 = tmp.path().join("ud0");
    for (sub, file) in [("store", "mine.txt"), ("coded", "thesis.tex")] {
        std::fs::create_dir_all(ud0.join(sub)).unwrap();
        std::fs::write(ud0.join(sub).join(file), "mine").unwrap();
    }
    set_mode(&ud0, 0o755);
    let line = refused(agent(d, "n0", &ud0));
    assert!(
        line.contains("store holds files eckpt did not create (mine.txt)"),
        "{line}"
    );
    std::fs::remove_file(ud0.join("store/mine.txt")).unwrap();
    let line = refused(agent(d, "n0", &ud0));
    assert!(
        line.contains("coded holds files eckpt did not create (thesis.tex)"),
        "{line}"
    );
    assert_eq!(mode(&ud0), 0o755, "a refused directory is not changed");
    assert_eq!(
        std::fs::read_to_string(ud0.join("coded/thesis.tex")).unwrap(),
        "mine"
    );

    // A store below a directory anyone may write into (and rename entries of).
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o777);
    let line = refused(agent(d, "n0", &open.join("ud")));
    assert!(
        line.contains(&format!(
            "others can write into {} above it (mode 0777, not sticky",
            open.display()
        )),
        "{line}"
    );
    assert!(!open.join("ud").exists(), "nothing is created there");

    // Agents on a directory of the user's (kept as it is), and on new ones.
    let given = tmp.path().join("given");
    std::fs::create_dir(&given).unwrap();
    std::fs::write(given.join("notes.txt"), "mine").unwrap();
    set_mode(&given, 0o755);
    let locals = [given.clone(), tmp.path().join("new1"), tmp.path().join("new2")];
    let mut agents: Vec<Child> = (0..3).map(|i| agent(d, &format!("n{i}"), &locals[i])).collect();
    wait_for(Duration::from_secs(60), "the agents", || alive(d));
    assert_eq!(mode(&given), 0o755, "the user's directory keeps its mode");
    for sub in ["store", "coded"] {
        assert_eq!(mode(&given.join(sub)), 0o700, "{sub} is owner-only");
    }
    // Files of the user's put in directories eckpt made.
    std::fs::write(locals[1].join("store/mine.txt"), "mine").unwrap();
    let runs = dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(runs.join("run-1-1.json"), "{}").unwrap();
    std::fs::write(runs.join("mine.txt"), "mine").unwrap();

    let out = run(&["down", "--dir", d, "--purge"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "kept {}: it holds files eckpt did not create (mine.txt)",
            locals[1].join("store").display()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "kept {d}: it holds files eckpt did not create (runs/mine.txt)"
        )),
        "{err}"
    );
    for agent in &mut agents {
        agent.wait().unwrap();
    }
    assert_eq!(std::fs::read_to_string(runs.join("mine.txt")).unwrap(), "mine");
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["runs"], "only the user's file and what holds it");
    assert!(!runs.join("run-1-1.json").exists());
    let store1: Vec<_> = std::fs::read_dir(locals[1].join("store"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(store1.len(), 1, "node.json and the rest are gone: {store1:?}");
    assert!(!locals[1].join("coded").exists());
    let given_left: Vec<_> = std::fs::read_dir(&given)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(given_left, ["notes.txt"]);
    assert_eq!(mode(&given), 0o755);
    assert!(
        !locals[2].exists(),
        "a directory the agent made is gone once empty"
    );
}

#[test]
fn down_stops_a_cluster_whose_cluster_json_is_damaged() {
    let c = Cluster::up(&SMALL);
    let pids: Vec<u32> = ["coordinator", "nodes/n0", "nodes/n1", "nodes/n2"]
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(c.dir.join(p).join("pid")).unwrap();
            text.lines().next().unwrap().parse().unwrap()
        })
        .collect();
    let file = c.dir.join("cluster.json");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();

    let out = run(&["status", "--dir", c.d()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("unreadable") && err.contains(&format!("`eckpt down --dir {}` still stops", c.d())),
        "{err}"
    );

    let out = run_bounded(&["down", "--dir", c.d(), "--purge"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cluster.json is unreadable: the cluster's processes are stopped"),
        "{}",
        text(&out.stderr)
    );
    wait_for(Duration::from_secs(30), "every daemon to exit", || {
        pids.iter().all(|&p| !eckpt_runs(p))
    });
    assert!(!c.dir.exists(), "purged: everything in it was eckpt's");
}

#[test]
fn join_says_at_once_why_its_agent_exited() {
    // A start wait far longer than `run_bounded` lets `join` run: only noticing the exit
    // ends it in time.
    let mut args = SMALL.to_vec();
    args.extend(["--start-wait", "10m"]);
    let c = Cluster::up(&args);
    let store = c.dir.join("nodes/x1/store");
    std::fs::create_dir_all(&store).unwrap();
    set_mode(&store, 0o700);
    std::fs::write(store.join("node.json"), "{\"format\": 1, \"na").unwrap();
    let out = run_bounded(&["join", "--dir", c.d(), "--name", "x1", "--spare"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("the agent of node x1 exited before it registered")
            && err.contains("unreadable node identity"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}
