//! A cluster stopped and started again: `eckpt up` on a stopped cluster brings it back as it
//! was, `join` against it fails fast; a damaged coordinator journal is replaced by its copy,
//! or by the previous one when that holds the same decisions, or refused — never served; an
//! agent restarted over a damaged store registers, and recovery rebuilds what it lacks.

mod cluster;

use cluster::{assert_refused, bytes, finish, nodes_without, ok, run_bounded, touch, Cluster};

fn data(world: usize, seed: u64) -> Vec<Vec<u8>> {
    (0..world)
        .map(|r| bytes(120_000 + r * 1000, seed + r as u64))
        .collect()
}

fn epoch_of(c: &mut Cluster, data: &[Vec<u8>]) {
    let report = c.checkpoint(data.to_vec(), true).expect("report");
    assert_eq!(report["outcome"]["committed"], true, "{report}");
}

/// Replaces `from` by `to` (one digit flipped) in the journal and in its copy (`journal.copy.json`): one of
/// them intact is enough for the coordinator.
fn damage_journal(c: &Cluster, from: &str, to: &str) {
    for file in ["journal.json", "journal.copy.json"] {
        let path = c.dir.join("coordinator").join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{from:?} not in {file}: {text}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }
}

fn small_cluster() -> Cluster {
    small_cluster_with(&[])
}

/// [`small_cluster`] with more options of `up`.
fn small_cluster_with(extra: &[&str]) -> Cluster {
    let mut args = vec!["--nodes", "4", "--k", "2", "--m", "2", "--block-size", "8KiB"];
    args.extend_from_slice(extra);
    Cluster::up(&args)
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z'))
    })
}

/// Crash-only: a panic injected in the coordinator right after it journaled a commit
/// aborts it (its log says why) instead of leaving a process that answers heartbeats and
/// refuses the rest; `eckpt coordinator` started again — the restart path — serves that
/// commit byte-exact, and the next epoch commits.
#[test]
fn a_coordinator_that_panics_aborts_and_its_restart_serves_the_commit() {
    // A short partition grace: a rank waiting for its epoch retries a coordinator it lost
    // for the grace and a liveness period, 6 s here.
    let mut c = Cluster::up(&[
        "--nodes",
        "4",
        "--k",
        "2",
        "--m",
        "2",
        "--block-size",
        "8KiB",
        "--partition-grace",
        "3s",
    ]);
    epoch_of(&mut c, &data(2, 1));
    let pid = c.pid("coordinator");
    ok(&["debug", "panic", "--dir", c.d(), "--at", "after-commit"]);
    // The last rank's wait ends when its retries of the dead coordinator run out, whatever
    // it reports.
    c.checkpoint(data(2, 2), true);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ended(&pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the coordinator did not abort"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(c.dir.join("coordinator/log")).unwrap();
    assert!(
        log.contains("injected panic at after-commit in coordinator") && log.contains("crash-only"),
        "{log}"
    );
    let restarted = c.start_coordinator();
    c.wait_all_alive();
    assert_eq!(c.committed(), 2, "the commit was journaled before the panic");
    c.assert_restorable();
    epoch_of(&mut c, &data(2, 3));
    assert_eq!(c.committed(), 3);
    c.assert_restorable();
    drop(c);
    finish(restarted, "the restarted coordinator after down");
}

#[test]
fn a_journal_and_its_copy_damaged_after_a_commit_are_refused_and_one_intact_is_enough() {
    let mut c = small_cluster();
    epoch_of(&mut c, &data(2, 1));
    // Epoch 1's commit is a record of the journal's log, after the snapshot: the previous
    // journal predates it.
    c.kill_coordinator();
    let copy = c.dir.join("coordinator/journal.copy.json");
    let intact = std::fs::read(&copy).unwrap();
    damage_journal(&c, "\"next_epoch\": 1,", "\"next_epoch\": 3,");
    let out = run_bounded(&["coordinator", "--dir", c.d()]);
    assert_refused(&out, "checksum mismatch");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to start") && err.contains("journal.prev.json"),
        "{err}"
    );
    // `up` refuses it the same way before starting anything.
    assert_refused(&run_bounded(&["up", "--dir", c.d()]), "refusing to start");
    // With the copy intact (the journal still damaged), the coordinator resumes from it.
    std::fs::write(&copy, intact).unwrap();
    let restarted = c.start_coordinator();
    c.wait_all_alive();
    assert_eq!(c.committed(), 1);
    c.assert_restorable();
    drop(c);
    finish(restarted, "the coordinator after down");
}

#[test]
fn a_damaged_journal_falls_back_to_the_previous_one_when_it_holds_the_same_decisions() {
    let mut c = small_cluster();
    epoch_of(&mut c, &data(2, 2));
    // A coordinator restart rewrites the journal (agents register again) with no new
    // decision: the previous journal then holds the same epoch and placement.
    c.kill_coordinator();
    let first = c.start_coordinator();
    c.wait_all_alive();
    let node = c.status_placement(0);
    c.kill_coordinator();
    finish(first, "the killed coordinator");
    let other = if node == "n0" { "n1" } else { "n0" };
    damage_journal(&c, &format!("\"0\": \"{node}\""), &format!("\"0\": \"{other}\""));
    let second = c.start_coordinator();
    c.wait_all_alive();
    assert_eq!(c.committed(), 1);
    assert_eq!(c.status_placement(0), node, "rank 0 stays where its data is");
    c.assert_restorable();
    let mut next = c.history[&1].clone();
    for (r, d) in next.iter_mut().enumerate() {
        touch(d, r as u64);
    }
    epoch_of(&mut c, &next);
    c.assert_restorable();
    drop(c);
    finish(second, "the coordinator after down");
}

#[test]
fn up_brings_a_stopped_cluster_back_with_its_data_and_join_fails_fast_against_it() {
    let mut c = Cluster::up(&[
        "--nodes",
        "6",
        "--spares",
        "1",
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
        touch(x, r as u64 + 10);
    }
    epoch_of(&mut c, &d);
    let before = c.status();
    ok(&["down", "--dir", c.d()]);

    // Stopped: commands say how to start it again; `join` fails fast and leaves no agent.
    assert_refused(&run_bounded(&["status", "--dir", c.d()]), "eckpt up --dir");
    let join = run_bounded(&["join", "--dir", c.d(), "--name", "extra", "--spare"]);
    assert_refused(&join, "is stopped");
    assert!(!c.dir.join("nodes/extra/pid").exists(), "no agent was started");
    assert_refused(
        &run_bounded(&["up", "--dir", c.d(), "--nodes", "6"]),
        "without --nodes restarts it",
    );

    let out = ok(&["up", "--dir", c.d(), "--detach", "--json"]);
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["restarted"], true, "{summary}");
    let after = c.status();
    for key in ["coding", "committed_epoch", "world", "groups"] {
        assert_eq!(before[key], after[key], "{key} after the restart");
    }
    // What changes with every start and every heartbeat: the port, and how long ago each
    // node was last heard.
    let volatile = ["addr", "silent_seconds"];
    assert_eq!(
        nodes_without(&before, &volatile),
        nodes_without(&after, &volatile),
        "nodes after the restart"
    );
    c.assert_restorable();
    // Parity survived too: the next epoch updates it in place, and a loss decodes.
    for (r, x) in d.iter_mut().enumerate() {
        touch(x, r as u64 + 20);
    }
    let report = c.checkpoint(d.clone(), true).expect("report");
    assert_eq!(report["outcome"]["kinds"][0], "update", "{report}");
    let victim = c.nodes_with_ranks()[0].clone();
    c.kill(&victim, true);
    c.wait_down(&victim);
    c.assert_restorable();
}

/// Every manifest below rank `rank`'s directory in `node`'s store, one bit flipped.
fn damage_manifests(c: &Cluster, node: &str, rank: u64) -> usize {
    let mut damaged = 0;
    let mut dirs = vec![c
        .dir
        .join("nodes")
        .join(node)
        .join("store")
        .join(format!("rank.{rank}"))];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if entry.file_name() == "manifest" {
                let mut bytes = std::fs::read(&path).unwrap();
                let at = bytes.len() / 2;
                bytes[at] ^= 0x10;
                std::fs::write(&path, bytes).unwrap();
                damaged += 1;
            }
        }
    }
    damaged
}

/// An agent killed while an epoch it prepared was being decided, whose store is then
/// damaged (the manifests its prepared epoch builds on), misses the commit: started again,
/// it cannot resolve that epoch. It registers anyway (it used to retry its registration
/// forever, out of the cluster), is counted damaged, and a recovery rebuilds the rank.
#[test]
fn an_agent_that_cannot_resolve_a_damaged_prepared_epoch_registers_and_is_rebuilt() {
    let shape = "--nodes 4 --k 2 --m 2 --mode update --block-size 8KiB";
    let mut c = Cluster::up(&shape.split(' ').collect::<Vec<_>>());
    let first = data(2, 1);
    epoch_of(&mut c, &first);
    let victim = c.status_placement(0);
    c.pause("before-commit");
    let mut second = first.clone();
    for (r, d) in second.iter_mut().enumerate() {
        touch(d, r as u64 + 40);
    }
    c.checkpoint(second, false);
    c.wait_paused();
    c.kill(&victim, false);
    assert!(
        damage_manifests(&c, &victim, 0) >= 2,
        "the prepared epoch and its base"
    );
    c.resume();
    c.wait_decided(2);
    assert_eq!(c.committed(), 2, "the epoch was prepared everywhere: committed");
    ok(&["join", "--dir", c.d(), "--name", &victim]);
    let node = c.node_status(&victim);
    assert_eq!(node["alive"], true, "{node}");
    assert!(
        node["damaged"].as_str().is_some_and(|d| d.contains("rank 0")),
        "{node}"
    );
    let out = c.recover();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.assert_restorable();
}

/// The file system under every store, the journal and the daemons' logs fills up: requests
/// fail in one line, no daemon dies (a log line that could not be written used to abort
/// them: tracing reported it with a panicking eprintln!), and once there is room again the
/// cluster recovers and commits.
#[test]
fn a_full_file_system_fails_requests_in_one_line_and_kills_no_daemon() {
    if !cluster::is_root() {
        eprintln!("skipped: mounting a small file system needs root");
        return;
    }
    let shape = "--nodes 4 --k 2 --m 2 --block-size 8KiB --start-wait 5s";
    let mut c = Cluster::up_on_tmpfs("32m", &shape.split(' ').collect::<Vec<_>>());
    epoch_of(&mut c, &data(2, 7));
    let daemons: Vec<String> = ["coordinator", "nodes/n0", "nodes/n2", "nodes/n3"]
        .iter()
        .map(|p| c.pid(p))
        .collect();
    let filler = c.dir.join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).unwrap();
        while file.write_all(&[0u8; 4096]).is_ok() {}
        while file.write_all(&[0]).is_ok() {}
    }
    // A node coming back must be journaled: refused. An epoch must be written: refused.
    c.kill("n1", false);
    c.wait_down("n1");
    let join = run_bounded(&["join", "--dir", c.d(), "--name", "n1"]);
    assert!(!join.status.success(), "joined with no room to journal it");
    let world = "2";
    for rank in ["0", "1"] {
        let image = c.write_rank(0, b"an image that does not fit");
        let out = run_bounded(&c.checkpoint_args(world, rank, &[image.to_str().unwrap()]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || err.trim().lines().count() == 1,
            "rank {rank}: not one line: {err}"
        );
    }
    // A daemon that dies of the refusals dies while handling them: once the coordinator
    // answers and has heard every agent since, each is past them.
    let refused = std::time::Instant::now();
    cluster::wait_for(
        std::time::Duration::from_secs(30),
        "every agent heard after the refusals",
        || {
            let status = c.status();
            ["n0", "n2", "n3"].iter().all(|name| {
                status["nodes"].as_array().unwrap().iter().any(|n| {
                    n["name"] == *name
                        && n["silent_seconds"]
                            .as_f64()
                            .is_some_and(|silent| silent < refused.elapsed().as_secs_f64())
                })
            })
        },
    );
    for pid in &daemons {
        assert!(
            std::path::Path::new("/proc").join(pid).exists(),
            "daemon {pid} died of a full file system"
        );
    }
    std::fs::remove_file(&filler).unwrap();
    ok(&["join", "--dir", c.d(), "--name", "n1"]);
    let out = c.recover();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    c.assert_restorable();
    epoch_of(&mut c, &data(2, 8));
    c.assert_restorable();
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: &str, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// The coordinator's term in the journal on disk.
fn journal_term(c: &Cluster) -> u64 {
    eckpt_coordinator::Journal::load(&c.dir.join("coordinator/journal.json"))
        .unwrap()
        .term
}

/// The coordinator keeps its connections to agents between requests. One kept by a
/// coordinator that was then replaced is refused at its next request, as a new connection
/// of the old term is: an agent follows one coordinator, however it was reached.
#[test]
fn a_connection_kept_by_a_replaced_coordinator_is_refused_at_its_next_request() {
    use eckpt_cluster_api::call::Call;
    use eckpt_cluster_api::msg::{Abort, AgentResponse};
    use eckpt_cluster_api::ErrorKind;

    let mut c = small_cluster();
    epoch_of(&mut c, &data(2, 1));
    assert_eq!(journal_term(&c), 1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let abort = || Abort { epoch: u64::MAX }.request();
    let mut kept = rt.block_on(cluster::connect_as_coordinator(c.d(), "n0", 1));
    let first: AgentResponse = rt
        .block_on(eckpt_cluster_api::net::call(&mut kept, &abort()))
        .unwrap();
    assert!(
        !matches!(first, AgentResponse::Error(_)),
        "the current coordinator's request was refused: {first:?}"
    );

    c.kill_coordinator();
    let restarted = c.start_coordinator();
    c.wait_all_alive();
    assert_eq!(c.status()["coordinator_term"], 2);
    let second: AgentResponse = rt
        .block_on(eckpt_cluster_api::net::call(&mut kept, &abort()))
        .unwrap();
    match second {
        AgentResponse::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Fenced, "{e:?}");
            assert!(e.message.contains("term 1 is refused"), "{e:?}");
        }
        other => panic!("a kept connection of term 1 was answered {other:?}"),
    }

    // The coordinator of term 2, whose own connections are kept too, commits.
    epoch_of(&mut c, &data(2, 2));
    epoch_of(&mut c, &data(2, 3));
    assert_eq!(c.committed(), 3);
    c.assert_restorable();
    drop(c);
    finish(restarted, "the restarted coordinator after down");
}

/// A coordinator started while the cluster's coordinator still runs — stopped (SIGSTOP),
/// and its lock out of sight, as from another host of a shared file system that does not
/// share `flock` — cannot listen (the socket is the running one's) and exits without
/// taking the term: once the running coordinator continues it decides as before. (Taking
/// the term before listening fenced the running one, with nobody to take over.)
#[test]
fn a_coordinator_that_cannot_listen_leaves_the_term_to_the_running_one() {
    let mut c = small_cluster();
    epoch_of(&mut c, &data(2, 1));
    assert_eq!(journal_term(&c), 1);
    let running = c.pid("coordinator");
    signal(&running, "STOP");
    std::fs::remove_file(c.dir.join("coordinator/lock")).unwrap();
    let second = run_bounded(&["coordinator", "--dir", c.d()]);
    signal(&running, "CONT");
    assert!(
        !second.status.success(),
        "a second coordinator listens beside the first"
    );
    assert_eq!(
        journal_term(&c),
        1,
        "the coordinator that could not listen took the term"
    );
    c.wait_all_alive();
    epoch_of(&mut c, &data(2, 2));
    assert_eq!(c.committed(), 2);
    assert_eq!(c.status()["coordinator_term"], 1);
    assert!(!ended(&running), "the running coordinator was fenced");
    c.assert_restorable();
}

/// A coordinator superseded — a coordinator of the next term took the journal over, and
/// is gone too — answers an agent that registers that it decides nothing more, and stops.
/// The agent does not take that for its own refusal: it goes on looking for the current
/// coordinator and registers with the next one started, and the cluster commits again.
#[test]
fn an_agent_answered_by_a_superseded_coordinator_registers_with_the_next_one() {
    let mut c = small_cluster();
    epoch_of(&mut c, &data(2, 1));
    c.kill("n3", false);
    c.wait_down("n3");
    let superseded = c.pid("coordinator");
    let path = c.dir.join("coordinator/journal.json");
    let mut journal = eckpt_coordinator::Journal::load(&path).unwrap();
    journal.term += 1;
    journal.save(&path).unwrap();
    let log = c.dir.parent().unwrap().join("n3-again.log");
    let mut agent = cluster::eckpt()
        .args(["agent", "--dir", c.d(), "--name", "n3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !ended(&superseded) {
        assert!(
            std::time::Instant::now() < deadline,
            "the superseded coordinator did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let next = c.start_coordinator();
    c.wait_all_alive();
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the agent exited: {}",
        std::fs::read_to_string(&log).unwrap()
    );
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("has taken this journal over"), "{said}");
    assert_eq!(c.status()["coordinator_term"], 3);
    epoch_of(&mut c, &data(2, 2));
    c.assert_restorable();
    drop(c);
    finish(next, "the next coordinator after down");
    let _ = agent.kill();
    let _ = agent.wait();
}

/// A node that restarts while the coordinator is down — longer than the start wait, as
/// when the coordinator's host reboots too — holds committed checkpoints: its agent keeps
/// trying past the start wait and rejoins once a coordinator runs, and the cluster commits
/// again (one that gave up left the node lost for good). An agent of a new store holds
/// nothing: it gives up at the start wait, in one line.
#[test]
fn a_known_node_restarted_during_a_coordinator_outage_rejoins_after_the_start_wait() {
    let mut c = small_cluster_with(&["--start-wait", "1s"]);
    epoch_of(&mut c, &data(2, 1));
    c.kill("n3", false);
    c.wait_down("n3");
    c.kill_coordinator();
    let logs = c.dir.parent().unwrap().to_path_buf();
    let agent = |name: &str, extra: &[&str]| {
        cluster::eckpt()
            .args(["agent", "--dir", c.d(), "--name", name])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(logs.join(format!("{name}.log"))).unwrap())
            .spawn()
            .unwrap()
    };
    let mut known = agent("n3", &[]);
    let fresh = agent("n9", &["--spare"]).wait_with_output().unwrap();
    let said = |name: &str| std::fs::read_to_string(logs.join(format!("{name}.log"))).unwrap();
    assert!(
        !fresh.status.success(),
        "a new store's agent registered with no coordinator"
    );
    assert!(
        said("n9").contains("did not accept this agent within 1 s"),
        "{}",
        said("n9")
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !said("n3").contains("keeps trying") {
        assert!(std::time::Instant::now() < deadline, "{}", said("n3"));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        known.try_wait().unwrap().is_none(),
        "the known node's agent gave up: {}",
        said("n3")
    );
    let restarted = c.start_coordinator();
    c.wait_all_alive();
    epoch_of(&mut c, &data(2, 2));
    assert_eq!(c.committed(), 2);
    c.assert_restorable();
    drop(c);
    finish(restarted, "the restarted coordinator after down");
    let _ = known.kill();
    let _ = known.wait();
}
