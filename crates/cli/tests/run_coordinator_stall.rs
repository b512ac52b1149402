//! A coordinator that stops running (SIGSTOP, a host suspended or starved) or is cut off
//! from its ranks under a live `eckpt run`. A stall or a cut shorter than the retry window
//! must cost the job nothing: the lease is judged on the time the coordinator ran, so waking
//! does not take the job from its supervisor, and ranks checkpointing with `eckpt
//! checkpoint` ride it out. A stall past the window must end the run with one line naming
//! the coordinator, within the window — never leave it waiting on an answer until someone
//! sends SIGCONT. Real coordinator, agent, supervisor and rank processes.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use cluster::programs::text;
use cluster::{finish_job, ok, partition_for, spawn_job, wait_for, PurgeAtEnd};

fn signal(pid: &str, signal: &str) {
    assert!(Command::new("kill")
        .args([signal, pid])
        .status()
        .unwrap()
        .success());
}

fn coordinator_pid(dir: &Path) -> String {
    // The pid, then the host it runs on.
    let file = std::fs::read_to_string(dir.join("coordinator/pid")).unwrap();
    file.lines().next().unwrap().trim().to_string()
}

/// Sends SIGCONT to the stopped coordinator when the test ends, whatever happened, so that
/// its cluster can be taken down.
struct ContinueAtEnd(String);

impl Drop for ContinueAtEnd {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// Steps each rank has completed, by the `step<R>.<i>` files it leaves.
fn steps_of(work: &Path, rank: u32) -> usize {
    std::fs::read_dir(work)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("step{rank}."))
        })
        .count()
}

/// A rank's shell script: `steps` times, write a state file and checkpoint it with `eckpt
/// checkpoint --wait`, then leave `step<R>.<i>`. An epoch a stall aborted is checkpointed
/// again (exit 1); any other failure ends the rank (9). After its third step a rank waits
/// for the test's `go` (a file), so that the steps after it meet the fault the test makes
/// however fast the machine is.
fn checkpointing_rank(steps: usize) -> String {
    format!(
        "i=0; while [ $i -lt {steps} ]; do i=$((i+1)); [ $i = 4 ] && while [ ! -e go ]; do sleep 0.05; done; \
         printf \"rank $ECKPT_RANK step $i\" > state$ECKPT_RANK; \
         while :; do {eckpt} checkpoint --wait state$ECKPT_RANK >/dev/null; rc=$?; [ $rc = 0 ] && break; [ $rc = 1 ] || exit 9; done; \
         touch step$ECKPT_RANK.$i; done",
        eckpt = env!("CARGO_BIN_EXE_eckpt")
    )
}

/// `eckpt run` of two [`checkpointing_rank`]s on a cluster of three nodes (`cluster`: more
/// of `eckpt run`'s options), once both have checkpointed three steps and wait for `go`.
struct CheckpointingJob {
    work: PathBuf,
    dir: PathBuf,
    job: Option<Child>,
    _purge: PurgeAtEnd,
    _tmp: tempfile::TempDir,
}

impl CheckpointingJob {
    fn start(steps: usize, cluster: &[&str]) -> CheckpointingJob {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let dir = tmp.path().join("cluster");
        let d = dir.to_str().unwrap();
        let purge = PurgeAtEnd(d.to_string());
        let script = checkpointing_rank(steps);
        let mut args = vec!["--dir", d, "--nodes", "3", "--k", "2", "--m", "1"];
        args.extend_from_slice(cluster);
        args.extend(["-n", "2", "--", "sh", "-c", &script]);
        let job = spawn_job(&work, &args);
        wait_for(Duration::from_secs(120), "both ranks checkpointing", || {
            steps_of(&work, 0) >= 3 && steps_of(&work, 1) >= 3
        });
        CheckpointingJob {
            work,
            dir,
            job: Some(job),
            _purge: purge,
            _tmp: tmp,
        }
    }

    /// Lets the ranks go on past their third step.
    fn go(&self) {
        std::fs::write(self.work.join("go"), b"").unwrap();
    }

    /// Steps rank `rank` has completed.
    fn steps(&self, rank: u32) -> usize {
        steps_of(&self.work, rank)
    }

    /// Waits for the job's end (at most `limit`): every one of its `steps` done by both
    /// ranks, no lease or node lost.
    fn finish(&mut self, limit: Duration, steps: usize) {
        let out = finish_job(self.job.take().expect("finished once"), limit);
        // The coordinator's log too, should an assertion fail: what it decided, and when.
        let log = std::fs::read_to_string(self.dir.join("coordinator/log")).unwrap_or_default();
        let stderr = text(&out.stderr);
        let said = format!("{stderr}\n--- coordinator log ---\n{log}");
        assert!(out.status.success(), "{said}");
        assert!(!stderr.contains("lost the job's lease"), "{said}");
        assert!(!stderr.contains("lost n"), "no node was lost: {said}");
        assert_eq!((self.steps(0), self.steps(1)), (steps, steps), "{said}");
    }
}

#[test]
fn a_coordinator_stopped_for_several_leases_neither_ends_the_job_nor_fails_its_ranks() {
    const STEPS: usize = 30;
    let mut job = CheckpointingJob::start(STEPS, &["--lease", "2s"]);
    // Six leases, and more than a connection's wait (5 s) of a rank that does not retry.
    let coordinator = coordinator_pid(&job.dir);
    let _continue = ContinueAtEnd(coordinator.clone());
    let before = job.steps(0) + job.steps(1);
    signal(&coordinator, "-STOP");
    job.go();
    std::thread::sleep(Duration::from_secs(12));
    signal(&coordinator, "-CONT");
    assert!(
        job.steps(0) + job.steps(1) <= before + 2,
        "the ranks went on checkpointing while the coordinator was stopped"
    );

    job.finish(Duration::from_secs(240), STEPS);
    let log = std::fs::read_to_string(job.dir.join("coordinator/log")).unwrap_or_default();
    assert!(
        log.contains("the coordinator did not run for"),
        "the coordinator did not notice its stall: {log}"
    );
}

#[test]
fn a_coordinator_stopped_past_the_retry_window_ends_the_run_with_one_line_instead_of_holding_it() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let flush = tmp.path().join("flush");
    let f = flush.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let go = work.join("go");
    // Each rank checkpoints once, when the test says go, and ends: the run's last act is
    // the flush of that epoch (the only flush: --flush-every 0).
    let script = format!(
        "while [ ! -e {go} ]; do sleep 0.05; done; printf \"rank $ECKPT_RANK\" > state$ECKPT_RANK && {eckpt} checkpoint --wait state$ECKPT_RANK",
        go = go.display(),
        eckpt = env!("CARGO_BIN_EXE_eckpt")
    );
    // The retry window: the partition grace and the liveness period, 3 s.
    let args = [
        "--dir",
        d,
        "--nodes",
        "3",
        "--k",
        "2",
        "--m",
        "1",
        "--liveness",
        "1s",
        "--partition-grace",
        "2s",
        "--flush-dir",
        f,
        "--flush-every",
        "0",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let job = spawn_job(&work, &args);
    wait_for(Duration::from_secs(120), "the run's cluster", || {
        cluster::run(&["status", "--dir", d, "--json"]).status.success()
    });
    // The coordinator holds the run's flush before publishing it, then stops for good.
    ok(&["debug", "pause", "--dir", d, "--at", "before-publish"]);
    std::fs::write(&go, "").unwrap();
    ok(&["debug", "wait", "--dir", d, "--timeout", "120"]);
    let coordinator = coordinator_pid(&dir);
    let _continue = ContinueAtEnd(coordinator.clone());
    signal(&coordinator, "-STOP");
    let stopped = Instant::now();

    let out = finish_job(job, Duration::from_secs(120));
    let took = stopped.elapsed();
    let stderr = text(&out.stderr);
    // The flush's wait ends after the window (5 s, a connection's wait at least), and each
    // later call after a connection's wait and the window: far within a minute.
    assert!(
        took < Duration::from_secs(60),
        "the run ended {took:?} after the stall: {stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "could not flush epoch 1 at the end of the run: the coordinator of {d} took the request and then said nothing for 5.0 s"
        )),
        "{stderr}"
    );
    ok(&["debug", "resume", "--dir", d]);
}

/// Every node's link cut for 30 s (the bridge of a namespaced cluster down): the ranks,
/// `eckpt checkpoint` processes inside their nodes' namespaces, cannot reach the
/// coordinator, which hears no agent and suspects its own link. Inside the retry window
/// (the partition grace and the liveness period, 61 s) the job loses nothing: the ranks
/// retry, nobody is declared dead, and every step is checkpointed.
#[test]
fn ranks_checkpointing_with_eckpt_checkpoint_ride_out_a_30_s_link_cut() {
    if !cluster::is_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    const STEPS: usize = 20;
    let mut job = CheckpointingJob::start(STEPS, &["--netns", "--liveness", "1s"]);
    partition_for(&job.dir, 30.0, || job.go());
    job.finish(Duration::from_secs(300), STEPS);
}
