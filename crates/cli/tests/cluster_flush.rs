//! Flushes to shared storage, as a user drives them: real agents copy committed epochs to a
//! flush directory while later epochs commit; agents and the coordinator are killed in the
//! middle of a flush, its file system fills up, a flushed file is damaged — and every
//! flushed epoch that was published stays restorable byte for byte (checked against what
//! the ranks checkpointed, read back with `eckpt restore --from-flush`, no cluster needed),
//! or the command fails with one line. Beyond `m` losses in a group, and on a new cluster of
//! another size, the job comes back from the newest intact flushed epoch.

mod cluster;

use std::path::Path;
use std::time::Duration;

use cluster::{assert_refused, bytes, finish, ok, run, spawn, Cluster, Tmpfs};

/// A cluster of 4 nodes (k=2 m=1) that flushes only when asked, into `flush`.
fn flushing_cluster(flush: &Path, extra: &[&str]) -> Cluster {
    let mut args = vec![
        "--nodes",
        "4",
        "--k",
        "2",
        "--m",
        "1",
        "--block-size",
        "64KiB",
        "--flush-dir",
        flush.to_str().unwrap(),
        "--flush-every",
        "0",
    ];
    args.extend_from_slice(extra);
    Cluster::up(&args)
}

/// Two ranks' data for epoch-ish `seed`: different sizes, several flush blocks.
fn data(seed: u64) -> Vec<Vec<u8>> {
    vec![bytes(1_500_000, seed), bytes(700_000, seed + 1000)]
}

/// Rank `rank` of flushed epoch `epoch` (default: the newest), read straight from `flush`.
fn from_flush(flush: &Path, rank: usize, epoch: Option<u64>) -> Result<Vec<u8>, String> {
    let out = flush.with_file_name(format!("flushed-{rank}"));
    let r = rank.to_string();
    let e = epoch.map(|e| e.to_string());
    let mut args = vec![
        "restore",
        "--from-flush",
        flush.to_str().unwrap(),
        "--rank",
        &r,
        "-o",
        out.to_str().unwrap(),
    ];
    if let Some(e) = &e {
        args.extend(["--epoch", e]);
    }
    let _ = std::fs::remove_file(&out);
    let result = run(&args);
    if !result.status.success() {
        assert!(!out.exists(), "a failed restore leaves no output");
        return Err(String::from_utf8_lossy(&result.stderr).into_owned());
    }
    Ok(std::fs::read(&out).unwrap())
}

/// Every rank of flushed epoch `epoch` reads back exactly as checkpointed.
fn assert_flushed(c: &Cluster, flush: &Path, epoch: u64) {
    for (rank, expected) in c.history[&epoch].iter().enumerate() {
        let got = from_flush(flush, rank, Some(epoch)).unwrap_or_else(|e| panic!("epoch {epoch}: {e}"));
        assert!(got == *expected, "rank {rank} of flushed epoch {epoch} differs");
    }
}

/// A [`flushing_cluster`] whose first epoch is committed and flushed.
fn cluster_with_epoch_1_flushed(flush: &Path) -> Cluster {
    let mut c = flushing_cluster(flush, &[]);
    c.checkpoint(data(1), true);
    flush_now(&c);
    c
}

/// The file that marks a directory as eckpt's flush directory.
const MARK: &str = "eckpt-flush-dir";

/// Published epochs in the flush directory, and whether anything else (but its mark) is
/// left there.
fn flushed(flush: &Path) -> (Vec<u64>, Vec<String>) {
    let mut epochs = Vec::new();
    let mut other = Vec::new();
    for entry in std::fs::read_dir(flush).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == MARK {
            continue;
        }
        match name.strip_prefix("epoch-").and_then(|e| e.parse().ok()) {
            Some(e) => epochs.push(e),
            None => other.push(name),
        }
    }
    epochs.sort_unstable();
    (epochs, other)
}

fn flush_now(c: &Cluster) -> String {
    ok(&["flush", "--dir", c.d()])
}

/// Committed epochs of rank `rank` in node `node`'s store.
fn stored_epochs(c: &Cluster, node: &str, rank: u64) -> Vec<u64> {
    let dir = c
        .dir
        .join("nodes")
        .join(node)
        .join("store")
        .join(format!("rank.{rank}"));
    let mut epochs: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("epoch-")?.split('-').next()?.parse().ok()
        })
        .collect();
    epochs.sort_unstable();
    epochs
}

#[test]
fn a_flush_runs_beside_later_epochs_and_copies_the_epoch_it_pinned() {
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("flush");
    let mut c = flushing_cluster(&flush, &[]);
    c.checkpoint(data(1), true);
    c.pause("mid-flush");
    let flushing = spawn(&["flush", "--dir", c.d(), "--json"]);
    c.wait_paused();
    // The flush of epoch 1 is stopped half-way; the job goes on checkpointing, and epochs
    // commit. Every epoch changes every block, so the stores' retention (the two newest
    // and what they depend on; a full image when the deltas outgrow it) would have retired
    // epoch 1 by epoch 6 — but it is pinned.
    for seed in 2..=6 {
        let report = c.checkpoint(data(seed), true).unwrap();
        assert_eq!(report["outcome"]["committed"], true, "{report}");
    }
    assert_eq!(c.committed(), 6);
    let status = c.status();
    assert_eq!(status["flush"]["running"], 1, "{status}");
    let node = c.status_placement(0);
    assert_eq!(stored_epochs(&c, &node, 0), vec![1, 4, 5, 6], "epoch 1 pinned");
    c.resume();
    let out = finish(flushing, "flush");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["epoch"], 1);
    assert_eq!(report["bytes"], 2_200_000);
    assert_flushed(&c, &flush, 1);
    // Released: the next commit retires epoch 1 from the node store.
    c.checkpoint(data(7), true);
    assert!(!stored_epochs(&c, &node, 0).contains(&1));
    assert!(flush_now(&c).contains("flushed epoch 7 (2 ranks, 2200000 bytes)"));
    assert_flushed(&c, &flush, 7);
    assert_eq!(flushed(&flush), (vec![1, 7], vec![]));
}

/// The journal records a commit before the agents hear it: a flush asked for in between
/// waits for them, instead of asking a store for an epoch it has not committed yet (seen
/// under load, when `eckpt bench flush` flushed as epochs committed).
#[test]
fn a_flush_asked_for_before_the_agents_heard_of_the_commit_waits_for_them() {
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("flush");
    let mut c = flushing_cluster(&flush, &[]);
    c.checkpoint(data(1), true);
    c.pause("after-commit");
    c.checkpoint(data(2), false);
    c.wait_paused();
    assert_eq!(c.committed(), 2, "journaled, not yet told to the agents");
    let mut flushing = spawn(&["flush", "--dir", c.d(), "--json"]);
    let log = c.dir.join("coordinator/log");
    cluster::wait_for(
        Duration::from_secs(30),
        "the flush to wait for the commit",
        || {
            std::fs::read_to_string(&log)
                .is_ok_and(|log| log.contains("flush waits for the epoch's commit to reach the agents"))
        },
    );
    assert!(
        flushing.try_wait().unwrap().is_none(),
        "the flush waits for the commit to reach the agents"
    );
    c.resume();
    let out = finish(flushing, "flush");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["epoch"], 2);
    assert_flushed(&c, &flush, 2);
}

#[test]
fn killing_an_agent_or_the_coordinator_mid_flush_never_publishes_a_partial_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("flush");
    let mut c = cluster_with_epoch_1_flushed(&flush);

    // An agent dies while it writes its ranks.
    c.checkpoint(data(2), true);
    c.pause("mid-flush");
    let flushing = spawn(&["flush", "--dir", c.d()]);
    c.wait_paused();
    let victim = c.status_placement(0);
    c.kill(&victim, false);
    c.resume();
    let out = finish(flushing, "flush");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(&victim), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert_eq!(flushed(&flush).0, vec![1], "nothing of epoch 2 is published");
    assert_flushed(&c, &flush, 1);
    ok(&["join", "--dir", c.d(), "--name", &victim]);
    c.wait_all_alive();
    flush_now(&c);
    assert_eq!(
        flushed(&flush),
        (vec![1, 2], vec![]),
        "the next flush cleared the leftovers"
    );
    assert_flushed(&c, &flush, 2);

    // The coordinator dies with every part written, before it publishes.
    c.checkpoint(data(3), true);
    c.pause("before-publish");
    let flushing = spawn(&["flush", "--dir", c.d()]);
    c.wait_paused();
    c.kill_coordinator();
    c.resume();
    let out = finish(flushing, "flush");
    assert!(!out.status.success());
    let (epochs, leftovers) = flushed(&flush);
    assert_eq!(epochs, vec![1, 2]);
    assert!(leftovers.iter().all(|n| n.starts_with("tmp-3-")), "{leftovers:?}");
    assert_flushed(&c, &flush, 1);
    assert_flushed(&c, &flush, 2);
    let mut coordinator = c.start_coordinator();
    c.wait_all_alive();
    flush_now(&c);
    let (epochs, leftovers) = flushed(&flush);
    assert_eq!(epochs, vec![2, 3], "--flush-keep 2 retired epoch 1");
    assert!(
        leftovers.iter().all(|n| n.starts_with("trash-epoch-1-")),
        "{leftovers:?}"
    );
    // Its bytes are deleted after the flush answered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !flushed(&flush).1.is_empty() {
        assert!(std::time::Instant::now() < deadline, "{:?}", flushed(&flush));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_flushed(&c, &flush, 3);
    ok(&["down", "--dir", c.d()]);
    let _ = coordinator.wait();
}

#[test]
fn a_full_flush_file_system_and_a_damaged_flushed_file_fail_in_one_line() {
    if !cluster::is_root() {
        eprintln!("skipped: mounting a small file system needs root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("flush");
    // Room for one flushed epoch (2.2 MB) but not for a second beside it.
    let _mount = Tmpfs::mount(&flush, "3m");
    let mut c = cluster_with_epoch_1_flushed(&flush);
    c.checkpoint(data(2), true);
    let out = run(&["flush", "--dir", c.d()]);
    assert_refused(&out, "No space left on device");
    let status = c.status();
    let error = status["flush"]["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("epoch 2: ") && error.contains("No space left"),
        "{error}"
    );
    assert_eq!(
        flushed(&flush),
        (vec![1], vec![]),
        "the failed flush removed what it wrote"
    );
    assert_flushed(&c, &flush, 1);

    // One flipped bit in a flushed file: its rank fails with one line and writes nothing;
    // the other rank is intact.
    let file = flush.join("epoch-1").join("rank.1").join("file");
    let mut on_disk = std::fs::read(&file).unwrap();
    on_disk[600_000] ^= 0x04;
    std::fs::write(&file, on_disk).unwrap();
    let err = from_flush(&flush, 1, None).unwrap_err();
    assert!(
        err.contains("flushed epoch 1 rank 1 item \"file\": block 0 (bytes 0..700000)")
            && err.contains("fails its checksum"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(from_flush(&flush, 0, None).unwrap() == c.history[&1][0]);
}

#[test]
fn more_than_m_losses_restart_from_the_newest_intact_flush_and_a_new_cluster_resumes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("flush");
    let mut c = cluster_with_epoch_1_flushed(&flush);
    c.checkpoint(data(2), true);
    flush_now(&c);
    c.checkpoint(data(3), true);
    // The newest flushed epoch is damaged: the restart takes epoch 1 and says why. (The
    // attempt with epoch 2 used up epoch number 4: a number is never given out twice.)
    let file = flush.join("epoch-2").join("rank.0").join("file");
    let mut on_disk = std::fs::read(&file).unwrap();
    on_disk[1_200_000] ^= 0x01;
    std::fs::write(&file, on_disk).unwrap();
    let hosts = c.nodes_with_ranks();
    for node in &hosts {
        c.kill(node, true);
        c.wait_down(node);
    }
    let out = run(&["recover", "--dir", c.d()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    assert!(
        text.starts_with("restored the 2-rank job from flushed epoch 1 as epoch 5 (group")
            && text.contains("more than m=1")
            && text.contains("skipped flushed epoch 2: ")
            && text.contains("fails its checksum"),
        "{text}"
    );
    assert_eq!(c.committed(), 5);
    let one = c.history[&1].clone();
    c.history.insert(5, one);
    c.assert_restorable();
    // Later epochs commit and flush on top of it, numbered after it.
    c.checkpoint(data(6), true);
    assert_eq!(c.committed(), 6);
    flush_now(&c);
    assert_flushed(&c, &flush, 6);

    // The whole cluster gone; a new one of another size and shape over the same flush.
    ok(&["down", "--dir", c.d(), "--purge"]);
    let dir2 = tmp.path().join("cluster2");
    let d2 = dir2.to_str().unwrap();
    let f = flush.to_str().unwrap();
    let out = ok(&[
        "up",
        "--dir",
        d2,
        "--detach",
        "--nodes",
        "6",
        "--k",
        "3",
        "--m",
        "2",
        "--flush-dir",
        f,
    ]);
    assert!(
        out.contains("restored the 2-rank job from flushed epoch 6 as epoch 7 (the node stores hold no committed epoch)"),
        "{out}"
    );
    for (rank, expected) in c.history[&6].iter().enumerate() {
        let path = tmp.path().join(format!("new{rank}"));
        let r = rank.to_string();
        ok(&["restore", "--dir", d2, "--rank", &r, "-o", path.to_str().unwrap()]);
        assert!(std::fs::read(&path).unwrap() == *expected, "rank {rank}");
    }
    ok(&["down", "--dir", d2, "--purge"]);
}

#[test]
fn flush_commands_refuse_bad_input_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("flush");
    let f = flush.to_str().unwrap();
    let plain = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1"]);
    assert_refused(
        &run(&["flush", "--dir", plain.d()]),
        "created without --flush-dir",
    );
    let mut c = flushing_cluster(&flush, &[]);
    assert_refused(&run(&["flush", "--dir", c.d()]), "no epoch is committed yet");
    assert_refused(
        &run(&["restore", "--from-flush", f, "--rank", "0", "-o", "x"]),
        "holds no complete flushed epoch",
    );
    c.checkpoint(data(1), true);
    assert_refused(
        &run(&["flush", "--dir", c.d(), "--epoch", "9"]),
        "epoch 9 is not committed",
    );
    flush_now(&c);
    assert_refused(&run(&["flush", "--dir", c.d()]), "epoch 1 is already flushed");
    let out = tmp.path().join("out");
    let o = out.to_str().unwrap();
    assert_refused(
        &run(&[
            "restore",
            "--from-flush",
            f,
            "--rank",
            "0",
            "--epoch",
            "7",
            "-o",
            o,
        ]),
        "holds no flushed epoch 7 (flushed epochs: 1)",
    );
    assert_refused(
        &run(&["restore", "--from-flush", f, "--rank", "5", "-o", o]),
        "flushed epoch 1 has no rank 5 (the job had 2 ranks)",
    );
    assert_refused(
        &run(&[
            "restore",
            "--from-flush",
            f,
            "--rank",
            "0",
            "--item",
            "mem/x",
            "-o",
            o,
        ]),
        "rank 0 has no item \"mem/x\" (it has file)",
    );
    assert!(!out.exists());
    let d3 = tmp.path().join("c3");
    assert_refused(
        &run(&[
            "up",
            "--dir",
            d3.to_str().unwrap(),
            "--nodes",
            "3",
            "--k",
            "2",
            "--m",
            "1",
            "--flush-dir",
            f,
            "--flush-keep",
            "0",
            "--detach",
        ]),
        "--flush-keep must keep at least 1",
    );
    assert_eq!(flushed(&flush), (vec![1], vec![]), "nothing flushed was touched");
}

/// The statuses' list of flushed epochs.
fn status_flushed(c: &Cluster) -> Vec<u64> {
    serde_json::from_value(c.status()["flush"]["flushed"].clone()).unwrap()
}

#[test]
fn a_flush_directory_is_eckpts_only_when_marked_and_its_users_files_are_never_housekept() {
    let tmp = tempfile::tempdir().unwrap();
    // A user's directory given by mistake: refused before anything starts, untouched.
    let theirs = tmp.path().join("theirs");
    for d in ["tmp-results", "trash-can", "mydata"] {
        std::fs::create_dir_all(theirs.join(d)).unwrap();
        std::fs::write(theirs.join(d).join("file"), d).unwrap();
    }
    let d = tmp.path().join("refused");
    let out = run(&[
        "up",
        "--dir",
        d.to_str().unwrap(),
        "--detach",
        "--nodes",
        "4",
        "--k",
        "2",
        "--m",
        "1",
        "--flush-dir",
        theirs.to_str().unwrap(),
    ]);
    assert_refused(&out, "is not empty and is not an eckpt flush directory (it has ");
    assert!(!d.exists(), "nothing was started");
    for name in ["tmp-results", "trash-can", "mydata"] {
        assert_eq!(
            std::fs::read_to_string(theirs.join(name).join("file")).unwrap(),
            name
        );
    }
    assert!(!theirs.join(MARK).exists());

    // eckpt's own flush directory, where the user then puts things of theirs, some named
    // like eckpt's entries.
    let flush = tmp.path().join("flush");
    let mut c = cluster_with_epoch_1_flushed(&flush);
    let planted = ["tmp-results/a", "trash-can/b", "epoch-90/model.pt", "tmp-2-x/c"];
    for path in planted {
        let path = flush.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "theirs").unwrap();
    }
    std::fs::create_dir(flush.join("epoch-7")).unwrap();
    let theirs_intact = || {
        for path in planted {
            assert_eq!(
                std::fs::read_to_string(flush.join(path)).unwrap(),
                "theirs",
                "{path}"
            );
        }
        assert!(flush.join("epoch-7").is_dir());
    };
    // Flushing epoch 2 neither deletes them nor retires epoch 2 as older than "epoch 90".
    c.checkpoint(data(2), true);
    assert!(flush_now(&c).contains("flushed epoch 2"));
    assert_eq!(status_flushed(&c), vec![1, 2]);
    theirs_intact();
    assert_flushed(&c, &flush, 2);
    // Retention retires eckpt's oldest epoch only, and deletes its bytes only.
    c.checkpoint(data(3), true);
    flush_now(&c);
    assert_eq!(status_flushed(&c), vec![2, 3]);
    cluster::wait_for(
        std::time::Duration::from_secs(120),
        "the retired epoch's deletion",
        || {
            !std::fs::read_dir(&flush)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("trash-epoch-1-"))
        },
    );
    theirs_intact();
    assert_flushed(&c, &flush, 3);
    assert!(
        from_flush(&flush, 0, None).unwrap() == c.history[&3][0],
        "the newest is eckpt's"
    );

    // A new cluster over it resumes eckpt's newest epoch; the user's `epoch-7/` is not
    // taken for a broken one.
    ok(&["down", "--dir", c.d(), "--purge"]);
    let d2 = tmp.path().join("cluster2");
    let out = ok(&[
        "up",
        "--dir",
        d2.to_str().unwrap(),
        "--detach",
        "--nodes",
        "4",
        "--k",
        "2",
        "--m",
        "1",
        "--flush-dir",
        flush.to_str().unwrap(),
    ]);
    assert!(
        out.contains("restored the 2-rank job from flushed epoch 3 as epoch 4"),
        "{out}"
    );
    theirs_intact();
    ok(&["down", "--dir", d2.to_str().unwrap(), "--purge"]);
}

#[test]
fn bench_flush_reports_throughput_against_the_write_speed_and_latency_while_flushing() {
    let tmp = tempfile::tempdir().unwrap();
    let flush = tmp.path().join("shared");
    let o = run(&[
        "bench",
        "flush",
        "--nodes",
        "3",
        "--k",
        "2",
        "--m",
        "1",
        "--block-size",
        "64KiB",
        "--size-per-rank",
        "4MiB",
        "--reps",
        "2",
        "--checkpoints",
        "2",
        // Half a second per flush: unpaced, an idle machine flushed the 4 MiB of each node
        // faster than a checkpoint took, and no checkpoint fell within a flush.
        "--flush-rate",
        "8MiB",
        "--flush-dir",
        flush.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = |key: &str| r[key].as_f64().unwrap_or_else(|| panic!("{key}: {}", r[key]));
    let list = |key: &str| -> Vec<f64> {
        let v = r[key].as_array().unwrap_or_else(|| panic!("{key}: {}", r[key]));
        v.iter().map(|x| x.as_f64().unwrap()).collect()
    };
    assert_eq!(r["ranks"], 2);
    // Every rank's 4 MiB, plus the manifest.
    assert!(f("flush_bytes") > f("size_per_rank") * 2.0, "{r}");
    assert!(r["writers"].as_u64().unwrap() >= 1);
    for key in ["write_gbps", "flush_gbps", "slowest_node_seconds"] {
        let v = list(key);
        assert_eq!(v.len(), 2, "{key}");
        assert!(v.iter().all(|x| x.is_finite() && *x > 0.0), "{key}: {v:?}");
    }
    for key in [
        "flush_vs_write",
        "checkpoint_ms",
        "checkpoint_ms_flushing",
        "slowdown",
    ] {
        assert!(f(key).is_finite() && f(key) > 0.0, "{key}: {r}");
    }
    for key in ["commit_ms", "commit_ms_flushing", "commit_slowdown"] {
        assert!(f(key).is_finite() && f(key) > 0.0, "{key}: {r}");
    }
    // Two checkpoints timed idle per repetition; during flushes, as many were asked for as
    // flushes allow, at least one in all (the benchmark fails otherwise).
    let per_rep = |key: &str| -> Vec<Vec<f64>> { serde_json::from_value(r[key].clone()).unwrap() };
    let (idle, busy) = (per_rep("samples_ms"), per_rep("samples_ms_flushing"));
    let (commit_idle, commit_busy) = (
        per_rep("commit_samples_ms"),
        per_rep("commit_samples_ms_flushing"),
    );
    assert!(idle.iter().all(|s| s.len() == 2), "{idle:?}");
    let during: Vec<u64> = serde_json::from_value(r["checkpoints_during_flush"].clone()).unwrap();
    assert_eq!(during, busy.iter().map(|s| s.len() as u64).collect::<Vec<_>>());
    assert!(during.iter().sum::<u64>() >= 1);
    // A commit ends after the slowest rank's call returned.
    for (calls, commits) in [(&idle, &commit_idle), (&busy, &commit_busy)] {
        for (c, m) in calls.iter().flatten().zip(commits.iter().flatten()) {
            assert!(*c > 0.0 && m >= c, "checkpoint {c} ms, commit {m} ms");
        }
    }
    // The reference files are gone; the flushes left their newest epoch, published.
    let names: Vec<String> = std::fs::read_dir(&flush)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["flush"]);
    let epochs: Vec<String> = std::fs::read_dir(flush.join("flush"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != MARK)
        .collect();
    assert!(epochs.len() == 1 && epochs[0].starts_with("epoch-"), "{epochs:?}");
}
