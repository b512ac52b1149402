//! `eckpt logs` on a real cluster: the coordinator's and every node's log in one stream,
//! in time order and prefixed by source; one node's alone; a name that is not a node's
//! refused before it becomes a path; `--follow` prints what is appended as it happens.

mod cluster;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cluster::{eckpt, ok, run, Cluster};

/// The timestamp a merged line's log line starts with.
fn time_of(line: &str) -> &str {
    line.split(" | ")
        .nth(1)
        .and_then(|l| l.split(' ').next())
        .unwrap_or_default()
}

#[test]
fn logs_merge_every_source_in_time_order_and_follow_what_is_appended() {
    let cluster = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1"]);
    let d = cluster.d();

    // `up` returns once the coordinator registered every agent; an agent logs that it
    // started just after, so its first line may still be on its way.
    let sources = ["coordinator | ", "n0 | ", "n1 | ", "n2 | "];
    let logged = |all: &str| {
        sources
            .iter()
            .all(|source| all.lines().any(|l| l.trim_start().starts_with(source)))
            && all.contains("agent registered node=n2")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut all = ok(&["logs", "--dir", d]);
    while !logged(&all) {
        assert!(Instant::now() < deadline, "a source missing: {all}");
        std::thread::sleep(Duration::from_millis(100));
        all = ok(&["logs", "--dir", d]);
    }
    let times: Vec<&str> = all.lines().map(time_of).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "time order: {all}");

    let one = ok(&["logs", "--dir", d, "--node", "n1"]);
    assert!(
        !one.is_empty() && one.lines().all(|l| l.starts_with("n1 | ")),
        "{one}"
    );
    let refused = run(&["logs", "--dir", d, "--node", "../coordinator"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("node name \"../coordinator\""));

    // Following the coordinator's log: a node killed now shows up in it.
    let mut follow = eckpt()
        .args(["logs", "--dir", d, "--follow", "--node", "coordinator"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, seen) = mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    // The log so far comes first: once its last line is through, the kill is news.
    let before = ok(&["logs", "--dir", d, "--node", "coordinator"]).lines().count();
    for _ in 0..before {
        seen.recv_timeout(Duration::from_secs(10))
            .expect("the log so far");
    }
    ok(&["kill-node", "--dir", d, "n1"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut news = Vec::new();
    while !news.iter().any(|l: &String| l.contains("session ended node=n1")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match seen.recv_timeout(left) {
            Ok(line) => news.push(line),
            Err(_) => panic!("--follow did not print n1's end within 20 s: {news:?}"),
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
}
