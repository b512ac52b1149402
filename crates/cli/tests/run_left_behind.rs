//! A rank that leaves a process running when it exits — a shell's background job, here one
//! in a session of its own — holding its output: `mpirun` and Hydra's `mpiexec` count the
//! rank as ended only once its output closes, so without `eckpt run-rank` around each rank
//! the launcher, and `eckpt run` with it, waited as long as that process lived. The run ends
//! as soon as the ranks do, one line per rank names what it left, nothing of it is left
//! running, and a rank's exit code is still the run's.

mod cluster;

use std::path::Path;
use std::time::{Duration, Instant};

use cluster::programs::text;
use cluster::{leave_a_process, processes_running, run_job};

/// Longer than a run of two ranks that print a line takes, far shorter than the leftovers
/// live (`sleep 3600`).
const LIMIT: Duration = Duration::from_secs(120);

fn run_leaving_a_process(work: &Path, launcher: &str, exit: u8) {
    // A duration of its own, to find what this test left and nothing else.
    let sleep = format!("{}", 3600 + exit as u32 + 100 * launcher.len() as u32);
    let script = format!("{}; echo started; exit {exit}", leave_a_process(&sleep));
    let args = [
        "--nodes",
        "3",
        "--k",
        "2",
        "--m",
        "1",
        "--launcher",
        launcher,
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        &script,
    ];
    let started = Instant::now();
    let out = run_job(work, &args, LIMIT);
    let took = started.elapsed();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(exit as i32), "{launcher}: {err}");
    assert!(took < LIMIT, "{launcher}: {took:?}");
    // A rank that fails makes the launcher end the others, reaper and all (then the run's
    // own end of the launch's processes ends what they left): only a clean end is awaited.
    for rank in (0..2).filter(|_| exit == 0) {
        assert!(
            text(&out.stdout).contains(&format!("[{rank}] started")),
            "{launcher}: {}",
            text(&out.stdout)
        );
        let said = format!("[{rank}] eckpt run-rank: the rank left ");
        let line = err.lines().find(|l| l.starts_with(&said));
        assert!(
            line.is_some_and(|l| l.ends_with("(sleep) running after it exited: ended it")),
            "{launcher}, rank {rank}: {err}"
        );
    }
    let left = processes_running(&["sleep", &sleep]);
    assert!(left.is_empty(), "{launcher}: still running: {left:?}");
}

#[test]
fn a_process_a_rank_leaves_holding_its_output_does_not_hold_mpirun() {
    let tmp = tempfile::tempdir().unwrap();
    run_leaving_a_process(tmp.path(), "mpirun", 0);
    run_leaving_a_process(tmp.path(), "mpirun", 3);
}

#[test]
fn a_process_a_rank_leaves_holding_its_output_does_not_hold_mpiexec() {
    let tmp = tempfile::tempdir().unwrap();
    run_leaving_a_process(tmp.path(), "mpiexec", 0);
}
