//! What `eckpt run` says a recovery took is measured from the loss, not from its detection:
//! a node whose agent stops (SIGSTOP: no heartbeat, no closed connection, as a hung host or
//! a silent link cut) is declared dead only after the cluster's liveness period, and that
//! silence belongs to the time the job lost.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster::programs::{build_c, text};
use cluster::{finish_job, node_of_rank, spawn_job};
use serde_json::Value;

/// The cluster's liveness period in this test (`--liveness`).
const LIVENESS_S: f64 = 1.0;

fn signal(pid: &str, sig: &str) {
    let ok = Command::new("kill").args([sig, pid]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

/// Whatever happens to the test: the ranks are told to end, the stopped agent runs again
/// and the cluster goes down.
struct Cleanup {
    dir: PathBuf,
    go: PathBuf,
    stopped: Option<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.go, "");
        if let Some(pid) = &self.stopped {
            let _ = Command::new("kill").args(["-CONT", pid]).status();
        }
        let _ = cluster::run(&["down", "--dir", self.dir.to_str().unwrap()]);
    }
}

/// Polls `done` every 50 ms for at most `limit`; `what` names it in the failure.
fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status(dir: &Path) -> Option<Value> {
    let out = cluster::run(&["status", "--dir", dir.to_str().unwrap(), "--json"]);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// The number in `line` just before `suffix`, after the last `(` or space before it.
fn number_before(line: &str, suffix: &str) -> f64 {
    let head = line.split(suffix).next().unwrap();
    head.rsplit(['(', ' '])
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {suffix:?} in {line}"))
}

#[test]
fn a_silently_lost_node_counts_its_detection_in_the_recovery_time() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let (dir, work, marks) = (
        tmp.path().join("cluster"),
        tmp.path().join("work"),
        tmp.path().join("marks"),
    );
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&marks).unwrap();
    let go = marks.join("go");
    let mut cleanup = Cleanup {
        dir: dir.clone(),
        go: go.clone(),
        stopped: None,
    };
    // Each rank checkpoints two epochs, says it is done, and waits for the test: the
    // relaunched ranks restore the last epoch and say so again.
    let script = format!(
        "{} -m 2 -s 8 -k 4 -l log%r && touch {m}/ready$ECKPT_RANK && while [ ! -e {m}/go ]; do sleep 0.05; done",
        mat.display(),
        m = marks.display()
    );
    let record = work.join("record.json");
    let (d, r) = (dir.display().to_string(), record.display().to_string());
    let liveness = format!("{LIVENESS_S}s");
    let args = [
        "--dir",
        &d,
        "--nodes",
        "4",
        "--spares",
        "1",
        "--k",
        "2",
        "--m",
        "1",
        "--block-size",
        "64KiB",
        "--liveness",
        &liveness,
        "--record",
        &r,
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let job = spawn_job(&work, &args);
    let ready = |rank: u32| marks.join(format!("ready{rank}"));
    wait_for(Duration::from_secs(120), "both ranks checkpointed", || {
        ready(0).exists() && ready(1).exists()
    });
    // No epoch in flight: what was written is committed.
    wait_for(Duration::from_secs(60), "the last epoch decided", || {
        status(&dir).is_some_and(|s| {
            s["committed_epoch"].as_u64() >= Some(1)
                && s["ranks_ready"].as_array().is_some_and(|r| r.is_empty())
        })
    });
    let s = status(&dir).unwrap();
    let victim = node_of_rank(&s, 0);
    let pid_file = std::fs::read_to_string(dir.join("nodes").join(&victim).join("pid")).unwrap();
    let pid = pid_file.lines().next().unwrap().trim().to_string();
    std::fs::remove_file(ready(0)).unwrap();
    std::fs::remove_file(ready(1)).unwrap();
    signal(&pid, "-STOP");
    let stopped = Instant::now();
    cleanup.stopped = Some(pid.clone());
    wait_for(Duration::from_secs(60), "both ranks relaunched", || {
        ready(0).exists() && ready(1).exists()
    });
    // The last heartbeat came before the stop, every rank ran before the markers.
    let observed = stopped.elapsed().as_secs_f64();
    signal(&pid, "-CONT");
    cleanup.stopped = None;
    std::fs::write(&go, "").unwrap();
    let out = finish_job(job, Duration::from_secs(120));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");

    let record: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let recoveries = record["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{record}");
    let r = &recoveries[0];
    assert_eq!(r["lost"], serde_json::json!([victim]), "{record}");
    let seconds = |key: &str| {
        r[key]
            .as_f64()
            .unwrap_or_else(|| panic!("no {key} in the record: {r}"))
    };
    let from_loss = seconds("loss_to_running_seconds");
    let detect = seconds("detect_seconds");
    eprintln!(
        "loss to running {from_loss:.2} s (silent {:.2} s, detect {detect:.2} s, from detection {:.2} s); observed {observed:.2} s",
        seconds("silence_seconds"),
        seconds("downtime_seconds")
    );
    assert!(
        from_loss >= LIVENESS_S,
        "{from_loss} s from the loss to running, under the liveness period that detecting it took: {r}"
    );
    assert!(from_loss >= detect + seconds("silence_seconds"), "{r}");
    assert!(
        from_loss <= observed + LIVENESS_S,
        "{from_loss} s, but every rank ran again within {observed:.2} s of the stop: {r}"
    );

    let line = err
        .lines()
        .find(|l| l.contains("recovered epoch"))
        .unwrap_or_else(|| panic!("no recovery line: {err}"));
    eprintln!("{line}");
    let printed = number_before(line, " s from the loss to every rank running");
    assert!(printed >= LIVENESS_S, "{line}");
    assert!(
        (printed - from_loss).abs() < 0.01,
        "{line} against the record's {from_loss}"
    );
    let printed_detect = number_before(line.split("detect ").nth(1).unwrap(), " s,");
    assert!(
        printed_detect >= LIVENESS_S,
        "detection includes the silence: {line}"
    );
}
