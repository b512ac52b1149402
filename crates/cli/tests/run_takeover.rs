//! A job taken over from its `eckpt run`: the supervisor stopped (SIGSTOP) long enough for
//! its lease to expire, a second run of the same command taking the job, the first one
//! woken. The run that took over must own the job alone — the first run's ranks gone before
//! its own start, the cluster (which the first run started) left running under it, and the
//! first run ending with one line naming its successor and a record of only its own epochs —
//! and a run refused at its claim must leave the job exactly as it found it. Real
//! coordinator, agent, supervisor and rank processes.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use cluster::programs::{assert_failure_free, build_c, reference, text};
use cluster::{finish_job, ok, processes_with, run, run_job, spawn_job, wait_for, PurgeAtEnd};
use serde_json::Value;

const SMALL: [&str; 6] = ["--nodes", "3", "--k", "2", "--m", "1"];

fn status(d: &str) -> Value {
    serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap()
}

fn answers(d: &str) -> bool {
    run(&["status", "--dir", d, "--json"]).status.success()
}

/// The last line a failed command printed.
fn last_line(out: &Output) -> String {
    text(&out.stderr).lines().last().unwrap_or_default().to_string()
}

fn signal(child: &Child, signal: &str) {
    assert!(Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap()
        .success());
}

/// SIGKILLs the run the test stops unless the test saw it end: a stopped supervisor would
/// outlive a failed test (its guard then ends its ranks).
struct KillIfLeft(Option<u32>);

impl Drop for KillIfLeft {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// The generations written to a beat file, one line per beat.
fn beats(path: &Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// The record `eckpt run` pid `pid` wrote in the cluster directory.
fn record_of(dir: &Path, pid: u32) -> Value {
    let suffix = format!("-{pid}.json");
    let entry = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(&suffix))
        .unwrap_or_else(|| panic!("no record of run {pid}"));
    serde_json::from_slice(&std::fs::read(entry.path()).unwrap()).unwrap()
}

fn epochs(record: &Value) -> Vec<u64> {
    record["epochs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["epoch"].as_u64().unwrap())
        .collect()
}

/// The `mat` example built in `tmp`, and a working directory with the input of each of
/// `ranks` ranks.
fn mat_job(tmp: &Path, ranks: u32) -> (PathBuf, PathBuf) {
    let mat = build_c("mat", tmp);
    let work = tmp.join("work");
    std::fs::create_dir(&work).unwrap();
    for r in 0..ranks {
        std::fs::write(work.join(format!("input{r}")), format!("input of rank {r}")).unwrap();
    }
    (mat, work)
}

#[test]
fn a_superseded_run_leaves_the_cluster_its_files_and_its_epochs_to_the_run_that_took_over() {
    let tmp = tempfile::tempdir().unwrap();
    let (mat, work) = mat_job(tmp.path(), 2);
    let mat_args = ["-m", "4", "-k", "8", "-l", "log%r", "-i", "input%r"];
    let mut full = vec!["-s", "200"];
    full.extend(mat_args);
    let expected = reference(&mat, &tmp.path().join("reference"), 2, &full);
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    // Each rank: the job's first 16 steps (two epochs), then a beat appended to a file of
    // the job every 50 ms until `go`, then the rest of the job, then a wait for `end`.
    let (go, end) = (marks.join("go"), marks.join("end"));
    let mat_line = |steps: &str| format!("{} -s {steps} {}", mat.display(), mat_args.join(" "));
    let script = format!(
        "{} && while [ ! -e {} ]; do echo $ECKPT_GENERATION >> beat$ECKPT_RANK; sleep 0.05; done && {} && while [ ! -e {} ]; do sleep 0.05; done",
        mat_line("16"),
        go.display(),
        mat_line("200"),
        end.display()
    );
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    // The first run creates the cluster, without --keep: it would stop it at its end.
    let mut args = vec!["--dir", d, "--lease", "2s", "-n", "2"];
    args.extend(SMALL);
    args.extend(["--", "sh", "-c", &script]);
    let first = spawn_job(&work, &args);
    let mut left = KillIfLeft(Some(first.id()));
    wait_for(Duration::from_secs(120), "the first run's ranks beating", || {
        beats(&work.join("beat0")).len() >= 2 && beats(&work.join("beat1")).len() >= 2
    });
    let g1 = status(d)["job"]["generation"].as_u64().unwrap();
    signal(&first, "-STOP");
    // Silent for more than two renewals (of 0.4 s): a second run waits out its lease.
    wait_for(
        Duration::from_secs(30),
        "the stopped supervisor to fall silent",
        || status(d)["job"]["renewed_seconds_ago"].as_f64().unwrap() > 1.0,
    );

    // The second run waits out the stopped supervisor's lease and takes the job over.
    let second = spawn_job(&work, &["--dir", d, "-n", "2", "--", "sh", "-c", &script]);
    wait_for(Duration::from_secs(120), "the second run's ranks beating", || {
        beats(&work.join("beat0")).iter().filter(|&&g| g > g1).count() >= 3
    });
    assert!(
        processes_with("ECKPT_GENERATION", &g1.to_string()).is_empty(),
        "the superseded run's ranks still run beside the new attempt"
    );
    for r in 0..2 {
        let beats = beats(&work.join(format!("beat{r}")));
        let taken = beats.iter().position(|&g| g > g1).unwrap_or(beats.len());
        assert!(
            beats[taken..].iter().all(|&g| g > g1),
            "rank {r}: a beat of generation {g1} after the new attempt's first: {beats:?}"
        );
    }
    let g2 = status(d)["job"]["generation"].as_u64().unwrap();
    assert!(g2 > g1);

    // The second run commits epochs of its own while the first is still stopped.
    std::fs::write(&go, "").unwrap();
    wait_for(Duration::from_secs(120), "the second run's epochs", || {
        status(d)["committed_epoch"].as_u64().unwrap() >= 4
    });
    signal(&first, "-CONT");
    let first_pid = first.id();
    left.0 = None;
    let first = finish_job(first, Duration::from_secs(60));
    assert!(!first.status.success());
    let line = last_line(&first);
    assert!(
        line.contains(&format!("superseded by generation {g2}")),
        "{}",
        text(&first.stderr)
    );
    // The cluster the first run started runs on under the second.
    assert!(answers(d), "the superseded run stopped the cluster");
    assert!(
        !processes_with("ECKPT_GENERATION", &g2.to_string()).is_empty(),
        "the second run's ranks were stopped"
    );

    std::fs::write(&end, "").unwrap();
    let second_pid = second.id();
    let second = finish_job(second, Duration::from_secs(300));
    assert!(second.status.success(), "{}", text(&second.stderr));
    assert!(
        text(&second.stderr).contains("ended") && text(&second.stderr).contains("previous supervisor"),
        "{}",
        text(&second.stderr)
    );
    assert_failure_free(&second.stdout, &work, &expected, "after a takeover");

    // Each run's record counts its own epochs: the first's (1 and 2, as many as it took in
    // before it was stopped), then the second's.
    let (mine, theirs) = (record_of(&dir, first_pid), record_of(&dir, second_pid));
    assert!(mine["error"].as_str().unwrap().contains("superseded"), "{mine}");
    assert!(epochs(&mine).iter().all(|&e| e <= 2), "{mine}");
    let later = epochs(&theirs);
    assert!(!later.is_empty() && later.iter().all(|&e| e > 2), "{theirs}");

    // Nobody holds the job any more: the cluster stops by its idle rule.
    wait_for(Duration::from_secs(60), "the cluster to stop once idle", || {
        !answers(d)
    });
}

#[test]
fn a_resume_refused_for_its_rank_count_leaves_the_finished_job_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let (mat, work) = mat_job(tmp.path(), 2);
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let m = mat.to_str().unwrap();
    let job = |ranks: &str, extra: &[&str]| {
        let mut args = vec!["--dir", d, "--keep"];
        args.extend_from_slice(extra);
        args.extend([
            "-n", ranks, "--", m, "-m", "4", "-s", "12", "-k", "4", "-l", "log%r", "-i", "input%r",
        ]);
        run_job(&work, &args, Duration::from_secs(120))
    };
    let done = job("2", &SMALL);
    assert!(done.status.success(), "{}", text(&done.stderr));
    let before = status(d);
    assert!(before["job"]["finished_unix"].is_number(), "{before}");

    let refused = job("3", &["--resume"]);
    assert!(!refused.status.success());
    assert!(
        last_line(&refused).contains("holds a job of 2 ranks, not 3"),
        "{}",
        text(&refused.stderr)
    );
    let after = status(d);
    assert_eq!(after["job"], before["job"], "the refused run changed the job");
    assert_eq!(after["committed_epoch"], before["committed_epoch"]);
    // The job is still finished: a plain run is refused as before.
    let again = job("2", &[]);
    assert!(!again.status.success());
    assert!(
        last_line(&again).contains("finished") && last_line(&again).contains("--resume"),
        "{}",
        text(&again.stderr)
    );
}
