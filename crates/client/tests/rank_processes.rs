//! Protected files across real rank processes: each run below is this test binary started
//! again as a separate process ([`rank_process`]), which protects files, restarts, works and
//! checkpoints, or dies by SIGKILL at an exact point.
//! - A run killed before its first checkpoint leaves no lines in its append file: the next
//!   run's fresh start cuts the file back to its length when the first run protected it.
//! - Files protected by relative paths are found from another working directory holding the
//!   same layout.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use eckpt::{Checkpointer, Config, FileMode};

/// The append file, protected by a relative path.
const LOG: &str = "logs/run.log";
/// The snapshot file, protected by a relative path with a `.` component.
const SNAPSHOT: &str = "./state.bin";

/// Not a test on its own: the rank program the tests start as separate processes. Without
/// `ECKPT_TEST_STEPS` it does nothing. With it, it protects [`LOG`] (append) and
/// [`SNAPSHOT`], restarts (printing `restart: fresh` or `restart: <epoch>`), then runs the
/// comma-separated steps: `append:N` (N lines to the log), `write:TEXT` (the snapshot's
/// content), `checkpoint`, `die` (SIGKILL itself).
#[test]
fn rank_process() {
    let Ok(steps) = std::env::var("ECKPT_TEST_STEPS") else {
        return;
    };
    let mut ck = Checkpointer::new(Config::from_env().unwrap()).unwrap();
    ck.protect_file(LOG, FileMode::Append).unwrap();
    ck.protect_file(SNAPSHOT, FileMode::Snapshot).unwrap();
    match ck.restart().unwrap() {
        None => println!("restart: fresh"),
        Some(epoch) => println!("restart: {epoch}"),
    }
    for step in steps.split(',').filter(|s| !s.is_empty()) {
        match step.split_once(':') {
            Some(("append", n)) => {
                let mut log = fs::read_to_string(LOG).unwrap();
                for _ in 0..n.parse::<usize>().unwrap() {
                    log.push_str(&format!("line {}\n", log.lines().count()));
                }
                fs::write(LOG, log).unwrap();
            }
            Some(("write", text)) => fs::write(SNAPSHOT, text).unwrap(),
            None if step == "checkpoint" => {
                ck.checkpoint().unwrap();
            }
            // SAFETY: signals this very process; nothing runs after it.
            None if step == "die" => unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            },
            _ => panic!("unknown step {step:?}"),
        }
    }
}

/// Runs [`rank_process`] as a new process in `cwd` with the store `store` and `steps`.
fn run_rank(cwd: &Path, store: &Path, steps: &str) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "rank_process", "--nocapture", "--test-threads=1"])
        .current_dir(cwd)
        .env("ECKPT_TEST_STEPS", steps)
        .env("ECKPT_DIR", store)
        .env("ECKPT_RANK", "0")
        .env("ECKPT_TRACK", "hash")
        .output()
        .unwrap()
}

/// What the run's restart said (`fresh` or the epoch).
fn restarted(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        // libtest prints `test rank_process ... ` before it on the same line.
        .find_map(|l| l.split_once("restart: ").map(|(_, said)| said))
        .unwrap_or_else(|| {
            panic!(
                "no restart line: {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_string()
}

fn assert_killed(out: &Output) {
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `header` followed by lines `line first` … `line last-1`.
fn lines(header: &str, first: usize, last: usize) -> String {
    let mut s = header.to_string();
    for i in first..last {
        s.push_str(&format!("line {i}\n"));
    }
    s
}

#[test]
fn runs_killed_before_their_first_checkpoint_leave_no_lines_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let (work, store) = (tmp.path().join("work"), tmp.path().join("store"));
    fs::create_dir_all(work.join("logs")).unwrap();
    // What the log held before the job first protected it is kept.
    fs::write(work.join(LOG), "header\n").unwrap();
    fs::write(work.join(SNAPSHOT), "v0").unwrap();

    let first = run_rank(&work, &store, "append:5,die");
    assert_killed(&first);
    assert_eq!(restarted(&first), "fresh");
    assert_eq!(
        fs::read_to_string(work.join(LOG)).unwrap(),
        lines("header\n", 1, 6)
    );

    // Killed again before checkpointing: the rollback point is still the first protect.
    let second = run_rank(&work, &store, "append:4,die");
    assert_killed(&second);
    assert_eq!(restarted(&second), "fresh");
    assert_eq!(
        fs::read_to_string(work.join(LOG)).unwrap(),
        lines("header\n", 1, 5)
    );

    let third = run_rank(&work, &store, "append:3,checkpoint");
    assert_success(&third);
    assert_eq!(restarted(&third), "fresh");
    assert_eq!(
        fs::read_to_string(work.join(LOG)).unwrap(),
        lines("header\n", 1, 4)
    );

    // Once a checkpoint is committed, it is the rollback point.
    let fourth = run_rank(&work, &store, "append:2,die");
    assert_killed(&fourth);
    assert_eq!(restarted(&fourth), "1");
    let fifth = run_rank(&work, &store, "");
    assert_success(&fifth);
    assert_eq!(restarted(&fifth), "1");
    assert_eq!(
        fs::read_to_string(work.join(LOG)).unwrap(),
        lines("header\n", 1, 4)
    );
}

#[test]
fn relative_paths_are_found_from_another_working_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, store) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("store"),
    );
    for dir in [&a, &b] {
        fs::create_dir_all(dir.join("logs")).unwrap();
    }
    fs::write(a.join(LOG), "").unwrap();
    fs::write(a.join(SNAPSHOT), "v1").unwrap();
    let first = run_rank(&a, &store, "append:3,write:v2,checkpoint,append:2,write:v3");
    assert_success(&first);
    assert_eq!(restarted(&first), "fresh");

    // B holds the same layout (the job's files copied, or on a shared file system).
    fs::copy(a.join(LOG), b.join(LOG)).unwrap();
    fs::write(b.join(SNAPSHOT), "other").unwrap();
    let second = run_rank(&b, &store, "");
    assert_success(&second);
    assert_eq!(restarted(&second), "1");
    assert_eq!(fs::read_to_string(b.join(LOG)).unwrap(), lines("", 0, 3));
    assert_eq!(fs::read_to_string(b.join(SNAPSHOT)).unwrap(), "v2");
    // A restart in B works on B's files only.
    assert_eq!(fs::read_to_string(a.join(LOG)).unwrap(), lines("", 0, 5));
    assert_eq!(fs::read_to_string(a.join(SNAPSHOT)).unwrap(), "v3");
}
