//! `eckpt run --launcher mpirun` of the MPI example (`examples/mpi/stencil.c`: a 2-D
//! stencil with halo exchange and a per-rank APPEND log) through Open MPI: a failure-free
//! run and a run that loses two nodes (their daemons, ranks, agents and stores killed after
//! an epoch commits) finish with identical checksums and logs. As root (CI) the second run
//! is on a namespaced cluster, every node in its own network namespace on a shaped link,
//! Open MPI's daemons started inside them through `eckpt mpirun-agent`.

mod cluster;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use cluster::programs::{build_stencil, stencil_checksums};
use cluster::{eckpt, finish_job, is_root, run_job};

/// Runs `eckpt run ARGS` in `work` (at most five minutes).
fn run_in(work: &Path, args: &[&str]) -> Output {
    run_job(work, args, Duration::from_secs(300))
}

/// Every path under `dir`, for a message.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut paths = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            paths.extend(walk(&entry.path()));
        }
    }
    paths
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn checksums(out: &[u8], ranks: u32) -> Vec<String> {
    stencil_checksums(&text(out), ranks)
}

#[test]
fn the_mpi_example_survives_two_node_losses() {
    let tmp = tempfile::tempdir().unwrap();
    let stencil = build_stencil(tmp.path());
    let ranks = 6u32;
    let program = [
        stencil.to_str().unwrap(),
        "-m",
        "2",
        "-s",
        "120",
        "-k",
        "10",
        "-l",
        "log%r",
    ];
    let cluster: Vec<&str> = "--nodes 8 --spares 1 --k 6 --m 2 --block-size 64KiB --mode update"
        .split(' ')
        .collect();

    let reference = tmp.path().join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    let mut args = cluster.clone();
    args.extend(["--launcher", "mpirun", "-n", "6", "--"]);
    args.extend(program);
    // Its temporary cluster goes in a TMPDIR of its own, which must be left without it: the
    // attempt's host file for mpirun included.
    let temp = tmp.path().join("temp");
    std::fs::create_dir_all(&temp).unwrap();
    let job = eckpt()
        .arg("run")
        .args(&args)
        .env("TMPDIR", &temp)
        .current_dir(&reference)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("eckpt runs");
    let out = finish_job(job, Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let expected = checksums(&out.stdout, ranks);
    let left: Vec<_> = std::fs::read_dir(&temp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("eckpt-run-"))
        .map(|p| walk(&p))
        .collect();
    assert!(left.is_empty(), "the temporary cluster stays: {left:?}");

    let work = tmp.path().join("losses");
    std::fs::create_dir_all(&work).unwrap();
    let mut args = cluster.clone();
    if is_root() {
        args.extend(["--netns", "--link-rate", "1gbit"]);
    }
    args.extend(["--launcher", "mpirun", "--kill-at", "4:2", "-n", "6", "--"]);
    args.extend(program);
    let out = run_in(&work, &args);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("eckpt run: lost") && err.contains("eckpt run: recovered epoch"),
        "{err}"
    );
    assert!(err.contains("eckpt run: relaunched 6 ranks"), "{err}");
    assert_eq!(checksums(&out.stdout, ranks), expected, "{err}");
    for r in 0..ranks {
        let log = |dir: &Path| std::fs::read(dir.join(format!("log{r}"))).unwrap();
        assert!(log(&work) == log(&reference), "rank {r}'s log differs");
        assert_eq!(
            String::from_utf8(log(&work)).unwrap().lines().count(),
            120,
            "one line per step"
        );
    }
}
