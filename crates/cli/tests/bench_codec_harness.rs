//! `eckpt bench codec` runs the klauspost/reedsolomon harness as whoever runs the benchmark,
//! so a harness at the default location (`<dir of eckpt>/../klauspost-bench`) is run only
//! where nobody else could have put it: an `eckpt` copied into a directory under a
//! world-writable one (as `/tmp`) must not run the `klauspost-bench` planted beside that
//! directory, and says so in one line; a path given with `--klauspost` runs, and so does a
//! default in a private directory (through the descriptor that was checked).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

/// The tests of this file write executables (a copy of `eckpt`, a harness) and run them.
/// A process one test forks while another still has a file open for writing inherits that
/// descriptor until its `exec`, and running the file then fails with "Text file busy"
/// (ETXTBSY): so they take turns.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `eckpt` copied to `dir/bin/eckpt` (`bin` owner-only), as a user may install it.
fn copy_eckpt(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    set_mode(&bin, 0o700);
    let exe = bin.join("eckpt");
    std::fs::copy(env!("CARGO_BIN_EXE_eckpt"), &exe).unwrap();
    set_mode(&exe, 0o755);
    exe
}

/// A stand-in harness at `path`: it writes its arguments to `marker` and prints a result
/// line as the real one does.
fn plant_harness(path: &Path, marker: &Path, mode: u32) {
    let script = format!(
        "#!/bin/sh\n\
         echo \"$@\" > '{}'\n\
         echo '# fake harness'\n\
         echo 'k m block | encode GB/s | EncodeIdx GB/s | ReconstructData GB/s'\n\
         echo '4 2 4KiB | 1.50 [1.0, 2.0] | 2.50 [2.0, 3.0] | 3.50 [3.0, 4.0]'\n",
        marker.display()
    );
    std::fs::write(path, script).unwrap();
    set_mode(path, mode);
}

/// `exe bench codec` on a small shape, with `extra` arguments.
fn bench(exe: &Path, extra: &[&str]) -> Output {
    let out = Command::new(exe)
        .args([
            "bench",
            "codec",
            "--k",
            "4",
            "--m",
            "2",
            "--block-size",
            "4KiB",
            "--reps",
            "1",
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

#[test]
fn a_harness_planted_in_a_directory_others_can_write_is_not_run() {
    let _turn = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    // A world-writable sticky directory, as /tmp.
    let open = tmp.path().canonicalize().unwrap().join("open");
    std::fs::create_dir(&open).unwrap();
    set_mode(&open, 0o1777);
    let exe = copy_eckpt(&open);
    let planted = open.join("klauspost-bench");
    let marker = tmp.path().join("planted-ran");
    plant_harness(&planted, &marker, 0o755);

    let out = bench(&exe, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!marker.exists(), "the planted harness ran: {err}");
    let expected = format!(
        "not running {}: {} is writable by others; pass --klauspost PATH",
        planted.display(),
        open.display()
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("klauspost")).collect();
    assert_eq!(lines.len(), 1, "one line about the harness: {err}");
    assert!(lines[0].ends_with(&expected), "{err}");
    // (A harness `make klauspost` built in this repository's target directory, the next
    // default, may run instead: it is not the planted one.)
    assert_ne!(report(&out)["klauspost"]["library"], "fake harness");

    // Named with --klauspost, a harness in a private directory runs.
    let private = tmp.path().join("private");
    std::fs::create_dir(&private).unwrap();
    set_mode(&private, 0o700);
    let given = private.join("klauspost-bench");
    let given_marker = tmp.path().join("given-ran");
    plant_harness(&given, &given_marker, 0o700);
    let out = bench(&exe, &["--klauspost", given.to_str().unwrap()]);
    let args = std::fs::read_to_string(&given_marker).expect("the given harness ran");
    assert!(
        args.contains("-variant") && args.trim_end().ends_with("4:2:4"),
        "{args}"
    );
    assert!(!marker.exists(), "the planted harness ran");
    let r = report(&out);
    assert_eq!(r["klauspost"]["library"], "fake harness", "{r}");
    assert_eq!(r["klauspost"]["encode_gbps"], 1.5, "{r}");
}

#[test]
fn a_default_harness_in_a_private_directory_runs() {
    let _turn = one_at_a_time();
    let tmp = tempfile::tempdir().unwrap();
    let private = tmp.path().canonicalize().unwrap().join("private");
    std::fs::create_dir(&private).unwrap();
    set_mode(&private, 0o700);
    let exe = copy_eckpt(&private);
    let marker = tmp.path().join("default-ran");
    plant_harness(&private.join("klauspost-bench"), &marker, 0o755);
    let out = bench(&exe, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(marker.exists(), "the default harness did not run: {err}");
    assert!(!err.contains("not running"), "{err}");
    assert_eq!(report(&out)["klauspost"]["decode_gbps"], 3.5);
}
