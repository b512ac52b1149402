//! `eckpt run` beyond what erasure coding survives: more than `m` nodes of a group killed,
//! and the whole cluster deleted and replaced by a smaller one. Either way the job resumes
//! from its last flushed epoch, says so in one line, and ends with the checksums and logs
//! of a failure-free run of the same program.

mod cluster;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cluster::programs::{assert_failure_free, build_c, reference, text};
use cluster::{assert_refused, bytes, eckpt, ok, run_job, Cluster};
use serde_json::Value;

const RANKS: u32 = 4;

/// `mat`'s arguments: `steps` steps, a checkpoint every 4.
fn mat_args(steps: &str) -> Vec<&str> {
    vec!["-m", "2", "-s", steps, "-k", "4", "-l", "log%r", "-i", "input%r"]
}

/// A working directory with every rank's input file.
fn work_dir(root: &Path, name: &str) -> std::path::PathBuf {
    let work = root.join(name);
    std::fs::create_dir_all(&work).unwrap();
    for r in 0..RANKS {
        std::fs::write(work.join(format!("input{r}")), format!("input of rank {r}")).unwrap();
    }
    work
}

#[test]
fn more_than_m_lost_nodes_resume_the_job_from_its_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let args = mat_args("60");
    let expected = reference(&mat, &tmp.path().join("reference"), RANKS, &args);
    let work = work_dir(tmp.path(), "job");
    let flush = tmp.path().join("flush");
    let record = tmp.path().join("record.json");
    let (f, rec) = (flush.display().to_string(), record.display().to_string());
    // One group of 6 (m = 2); three of its rank-hosting nodes die after epoch 5.
    let run_line = format!(
        "--nodes 6 --k 4 --m 2 --flush-dir {f} --flush-every 2 --kill-at 5:3 --record {rec} -n 4 -- {} {}",
        mat.display(),
        args.join(" ")
    );
    let run_args: Vec<&str> = run_line.split(' ').collect();
    let out = run_job(&work, &run_args, Duration::from_secs(300));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_failure_free(&out.stdout, &work, &expected, "after losing 3 nodes of a group");
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("restored the 4-rank job from flushed epoch"))
        .collect();
    assert_eq!(said.len(), 1, "{err}");
    assert!(said[0].contains("more than m=2"), "{err}");
    let record: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let recoveries = record["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{record}");
    // Every 2nd committed epoch is flushed; the kill follows epoch 5's commit as soon as the
    // run sees it (and waits for a flush then running), which a slow machine may see only
    // after epoch 6 committed and began its flush.
    let flushed = recoveries[0]["from_flush"].as_u64().unwrap();
    let committed = |epoch: u64| {
        record["epochs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["epoch"] == epoch && e["committed"] == true)
    };
    assert!(
        flushed >= 2 && flushed.is_multiple_of(2) && committed(flushed),
        "flushed epoch {flushed}: {record}"
    );
    assert_eq!(recoveries[0]["lost"].as_array().unwrap().len(), 3, "{record}");
}

/// Flushed epochs published in `flush`.
fn published(flush: &Path) -> usize {
    std::fs::read_dir(flush).map_or(0, |d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("epoch-"))
            .count()
    })
}

/// Starts `eckpt run ARGS` in `work` in the background.
fn start_job(work: &Path, args: &[&str]) -> Child {
    eckpt()
        .arg("run")
        .args(args)
        .current_dir(work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_job_whose_whole_cluster_is_gone_resumes_from_its_flush_on_fewer_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let args = mat_args("200");
    let expected = reference(&mat, &tmp.path().join("reference"), RANKS, &args);
    let work = work_dir(tmp.path(), "job");
    let flush = tmp.path().join("flush");
    let first = tmp.path().join("first");
    let (f, d) = (flush.display().to_string(), first.display().to_string());
    let run_line = format!(
        "--dir {d} --keep --nodes 6 --k 4 --m 2 --flush-dir {f} --flush-every 2 -n 4 -- {} {}",
        mat.display(),
        args.join(" ")
    );
    let run_args: Vec<&str> = run_line.split(' ').collect();
    // The first cluster runs the job until an epoch is flushed (or to its end: either
    // way its flush holds an epoch the job can resume from), then is interrupted and
    // deleted with every node store.
    let mut job = start_job(&work, &run_args);
    let deadline = Instant::now() + Duration::from_secs(120);
    while published(&flush) == 0 && job.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "no epoch was flushed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &job.id().to_string()])
        .status();
    let _ = job.wait();
    // The cluster is kept: this flushes the committed epoch after a flush still running,
    // unless that one was it ("already flushed").
    let _ = cluster::run(&["flush", "--dir", &d]);
    ok(&["down", "--dir", &d, "--purge"]);
    assert!(published(&flush) > 0);

    // A new, smaller cluster with another code over the same flush directory.
    let record = tmp.path().join("record.json");
    let run_line = format!(
        "--nodes 4 --k 2 --m 1 --flush-dir {f} --record {} -n 4 -- {} {}",
        record.display(),
        mat.display(),
        args.join(" ")
    );
    let run_args: Vec<&str> = run_line.split(' ').collect();
    let out = run_job(&work, &run_args, Duration::from_secs(300));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("restored the 4-rank job from flushed epoch")
            && err.contains("(the node stores hold no committed epoch)"),
        "{err}"
    );
    assert_failure_free(&out.stdout, &work, &expected, "on a new cluster of 4 nodes");
    // The restart from the flush is in the run's record, though no node of this run was lost.
    let record: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let recoveries = record["recoveries"].as_array().unwrap();
    assert_eq!(recoveries.len(), 1, "{record}");
    assert!(recoveries[0]["from_flush"].as_u64().is_some(), "{record}");
    assert!(record["failures"].as_array().unwrap().is_empty(), "{record}");
}

/// The newest flushed epoch's manifest in `flush`.
fn newest_manifest(flush: &Path) -> Value {
    let newest = std::fs::read_dir(flush)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_prefix("epoch-")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .expect("a flushed epoch");
    let path = flush.join(format!("epoch-{newest}")).join("manifest.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Every entry of `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_job_restores_another_jobs_flushed_state_only_when_told() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let args = mat_args("16");
    let flush = tmp.path().join("flush");
    let f = flush.display().to_string();
    let job_line = |job: &str, extra: &str| {
        format!(
            "--job {job} --nodes 3 --k 2 --m 1 --flush-dir {f} --flush-every 1{extra} -n 4 -- {} {}",
            mat.display(),
            args.join(" ")
        )
    };
    // A cluster of ranks started by hand takes the flush directory first, and flushes
    // nothing yet.
    let mut other = Cluster::up(&[
        "--nodes",
        "3",
        "--k",
        "2",
        "--m",
        "1",
        "--flush-dir",
        &f,
        "--flush-every",
        "0",
    ]);
    // Job A runs to its end; its last epoch is flushed, naming the job.
    let work_a = work_dir(tmp.path(), "a");
    let line = job_line("jobA", "");
    let out = run_job(
        &work_a,
        &line.split(' ').collect::<Vec<_>>(),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let manifest = newest_manifest(&flush);
    assert_eq!(manifest["version"], 2, "{manifest}");
    let job = &manifest["job"];
    assert_eq!(job["id"], "jobA", "{manifest}");
    assert!(
        job["command"].as_str().unwrap().contains("mat -m 2 -s 16"),
        "{manifest}"
    );
    assert_eq!(
        (&job["nodes"], &job["k"], &job["m"]),
        (&3.into(), &2.into(), &1.into())
    );
    assert_eq!(manifest["world"], 4);
    let before = listing(&flush);
    // The other cluster's flush would make job A's epochs older, and retire them: refused.
    other.checkpoint(vec![bytes(100_000, 1)], true);
    assert_refused(&cluster::run(&["flush", "--dir", other.d()]), "is job jobA's (`");
    assert_eq!(listing(&flush), before);

    // Job B, a new cluster over the same flush directory: refused in one line naming both
    // jobs, before anything starts — its program never runs, the flush is untouched.
    let work_b = work_dir(tmp.path(), "b");
    let line = job_line("jobB", "");
    let out = run_job(
        &work_b,
        &line.split(' ').collect::<Vec<_>>(),
        Duration::from_secs(120),
    );
    assert_refused(&out, "is job jobA's (`");
    let err = text(&out.stderr);
    assert!(
        err.contains("not job jobB's") && err.contains("`--restore-from-job jobA` starts job jobB from it"),
        "{err}"
    );
    assert!(!work_b.join("log0").exists(), "job B's ranks never ran");
    assert_eq!(listing(&flush), before);

    // Told, job B starts from job A's state (in A's working directory: its files are part
    // of that state), and its own flushes name it.
    let line = job_line("jobB", " --restore-from-job jobA");
    let out = run_job(
        &work_a,
        &line.split(' ').collect::<Vec<_>>(),
        Duration::from_secs(300),
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("restored the 4-rank job from flushed epoch"),
        "{err}"
    );
    assert_eq!(newest_manifest(&flush)["job"]["id"], "jobB");
}
