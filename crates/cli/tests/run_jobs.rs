//! `eckpt run` as a user runs it: a real cluster started by the command, real rank
//! processes (the C example, shell commands), nodes SIGKILLed with their stores deleted at
//! random epochs — several per run, one in the middle of a recovery — and the job must end
//! with the checksums and logs of a failure-free run, ranks balanced after every
//! relocation. A program's own exit status is the command's; more losses than the code
//! tolerates end with one clear line and keep what was committed.
//!
//! `ECKPT_TEST_SEED=N` replays the random schedule of an earlier run (it is printed).

mod cluster;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::programs::{assert_failure_free, build_c, reference, text};
use cluster::{ok, run_job as run_in, wait_for, Cluster, PurgeAtEnd};
use serde_json::Value;

// A seed when none is given: the wall clock only names the run.
#[allow(clippy::disallowed_methods)]
fn seed() -> u64 {
    let seed = std::env::var("ECKPT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("ECKPT_TEST_SEED={seed}");
    seed
}

/// xorshift64: the test's own random choices.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn a_program_exit_status_is_the_runs_and_a_program_ignoring_eckpt_runs_through() {
    let tmp = tempfile::tempdir().unwrap();
    // Rank 0's exit ends the attempt and terminates rank 1: rank 0 waits until rank 1 has
    // printed (a marker file outside the working directory), so both lines are expected.
    let marks = tempfile::tempdir().unwrap();
    let script = format!(
        "echo rank $ECKPT_RANK of $ECKPT_WORLD on $ECKPT_NODE; touch {0}/$ECKPT_RANK; \
         while [ ! -e {0}/1 ]; do sleep 0.05; done; exit 3",
        marks.path().display()
    );
    let small = ["--nodes", "3", "--k", "2", "--m", "1"];
    let mut args = small.to_vec();
    args.extend(["-n", "2", "--", "sh", "-c", &script]);
    let out = run_in(tmp.path(), &args, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let lines = text(&out.stdout);
    assert!(lines.contains("[0] rank 0 of 2 on n0"), "{lines}");
    assert!(lines.contains("[1] rank 1 of 2 on n1"), "{lines}");

    let mut args = small.to_vec();
    args.extend(["-n", "3", "--", "sh", "-c", "sleep 0.3; echo done >&2"]);
    let out = run_in(tmp.path(), &args, Duration::from_secs(120));
    assert!(out.status.success(), "{}", text(&out.stderr));
    for r in 0..3 {
        assert!(
            text(&out.stderr).contains(&format!("[{r}] done")),
            "{}",
            text(&out.stderr)
        );
    }
    assert!(
        !tmp.path().read_dir().unwrap().any(|_| true),
        "nothing left in the working directory"
    );
}

#[test]
fn bad_input_gets_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path();
    let cases: [(&[&str], &str); 5] = [
        // Refused before a cluster in namespaces is started for nothing.
        (
            &["--netns", "--launcher", "mpiexec", "-n", "2", "--", "true"],
            "--launcher mpiexec --netns: Hydra's proxies cannot reach back out",
        ),
        (&["-n", "2", "--kill-at", "soon", "--", "true"], "--kill-at item"),
        (&["-n", "0", "--", "true"], "at least one rank"),
        (
            &["-n", "2", "--interval", "auto", "--", "true"],
            "--interval auto needs --mtbf",
        ),
        (
            &[
                "--nodes",
                "3",
                "--k",
                "2",
                "--m",
                "1",
                "-n",
                "2",
                "--",
                "/no/such/program",
            ],
            "/no/such/program",
        ),
    ];
    for (args, expected) in cases {
        let out = run_in(w, args, Duration::from_secs(120));
        let err = text(&out.stderr);
        let last = err.lines().last().unwrap_or_default().to_string();
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            last.contains(expected) && last.starts_with("eckpt: error:"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn cluster_hosts_that_cannot_be_had_get_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let hosts = tmp.path().join("hosts");
    std::fs::write(&hosts, "# nobody\n\n").unwrap();
    let (dir, hostfile) = (tmp.path().join("c"), hosts.display().to_string());
    let d = dir.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["run", "--launcher", "srun", "--dir", d, "-n", "2", "--", "true"],
            "inside a Slurm allocation (sbatch or salloc): SLURM_JOB_ID is not set",
        ),
        (
            &[
                "run",
                "--hostfile",
                &hostfile,
                "--dir",
                d,
                "-n",
                "2",
                "--",
                "true",
            ],
            "no host in the host file",
        ),
        (
            &[
                "run",
                "--nodelist",
                "a,b",
                "--nodes",
                "2",
                "-n",
                "2",
                "--",
                "true",
            ],
            "--nodes: the cluster's nodes are its hosts",
        ),
        (
            &["run", "--nodelist", "a,b", "-n", "2", "--", "true"],
            "a cluster of several hosts needs --dir",
        ),
    ];
    for (args, expected) in cases {
        let child = cluster::eckpt()
            .args(args)
            .current_dir(tmp.path())
            .env_remove("SLURM_JOB_ID")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = cluster::finish(child, &args.join(" "));
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        let last = err.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("eckpt: error:") && last.contains(expected),
            "{args:?}: {err}"
        );
    }
    assert!(!dir.exists(), "nothing was created");
}

/// Every attempt of a run record placed ranks with at most one more on one node than on
/// another.
fn assert_balanced(record: &Value) {
    for attempt in record["attempts"].as_array().unwrap() {
        let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
        for node in attempt["placement"].as_object().unwrap().values() {
            *per_node.entry(node.as_str().unwrap()).or_default() += 1;
        }
        let (min, max) = (per_node.values().min().unwrap(), per_node.values().max().unwrap());
        assert!(max - min <= 1, "attempt {}: {per_node:?}", attempt["attempt"]);
    }
}

/// No attempt places a rank on a node the run had already lost (killed nodes are wiped and
/// never come back): a relaunch waits until the loss is recovered.
fn assert_no_rank_on_a_lost_node(record: &Value) {
    let failures = record["failures"].as_array().unwrap();
    for attempt in record["attempts"].as_array().unwrap() {
        let start = attempt["start_s"].as_f64().unwrap();
        let lost: BTreeSet<&str> = failures
            .iter()
            .filter(|f| f["t_s"].as_f64().unwrap() < start)
            .flat_map(|f| f["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()))
            .collect();
        for node in attempt["placement"].as_object().unwrap().values() {
            let node = node.as_str().unwrap();
            assert!(
                !lost.contains(node),
                "attempt {} placed a rank on lost node {node}: {record}",
                attempt["attempt"]
            );
        }
    }
}

#[test]
fn random_node_kills_end_with_the_failure_free_result() {
    let mut random = Random(seed() | 1);
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let (ranks, steps, every) = (6u32, 72u32, 4u32);
    let steps_arg = steps.to_string();
    let every_arg = every.to_string();
    let mat_args = [
        "-m", "4", "-s", &steps_arg, "-k", &every_arg, "-l", "log%r", "-i", "input%r",
    ];
    let expected = reference(&mat, &tmp.path().join("reference"), ranks, &mat_args);
    let epochs = u64::from(steps / every);

    for trial in 0..3 {
        let mode = ["full", "update", "stripe"][random.below(3) as usize];
        let layout = ["dedicated", "rotated"][random.below(2) as usize];
        // Two or three losses of one or two nodes (m = 2), a node more in the middle of the
        // first recovery when its loss was a single node.
        let mut at = 1 + random.below(4);
        let first = 1 + random.below(2);
        let mut kills = vec![format!("{at}:{first}")];
        if first == 1 && random.below(2) == 0 {
            kills.push("recovery:1".into());
        }
        for _ in 0..1 + random.below(2) {
            at += 3 + random.below(4);
            if at + 2 < epochs {
                kills.push(format!("{at}:{}", 1 + random.below(2)));
            }
        }
        let kill_at = kills.join(",");
        let work = tmp.path().join(format!("trial{trial}"));
        std::fs::create_dir_all(&work).unwrap();
        for r in 0..ranks {
            std::fs::write(work.join(format!("input{r}")), format!("input of rank {r}")).unwrap();
        }
        let record = work.join("record.json");
        let seed_arg = random.below(1000).to_string();
        let context = format!("trial {trial}: --mode {mode} --layout {layout} --kill-at {kill_at}");
        eprintln!("{context}");
        let mut args: Vec<&str> = "--nodes 8 --spares 1 --k 6 --m 2 --block-size 64KiB --mode"
            .split(' ')
            .collect();
        let record_arg = record.display().to_string();
        args.extend([
            mode,
            "--layout",
            layout,
            "--kill-at",
            &kill_at,
            "--seed",
            &seed_arg,
        ]);
        args.extend(["--record", &record_arg]);
        args.extend(["-n", "6", "--", mat.to_str().unwrap()]);
        args.extend(mat_args);
        let out = run_in(&work, &args, Duration::from_secs(300));
        let err = text(&out.stderr);
        assert!(out.status.success(), "{context}: {err}");
        assert_failure_free(&out.stdout, &work, &expected, &context);
        let record: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
        let lost: usize = record["failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["nodes"].as_array().unwrap().len())
            .sum();
        let expected_lost: u64 = kills
            .iter()
            .map(|k| k.split(':').nth(1).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(
            lost as u64, expected_lost,
            "{context}: every kill happened: {err}"
        );
        assert!(
            record["recoveries"].as_array().unwrap().len()
                >= kills.len() - usize::from(kill_at.contains("recovery")),
            "{context}: {err}"
        );
        assert_eq!(
            err.matches("eckpt run: recovered epoch").count(),
            record["recoveries"].as_array().unwrap().len()
        );
        assert_balanced(&record);
        assert_no_rank_on_a_lost_node(&record);
    }
}

/// Runs `eckpt run ARGS` (split at spaces) in `work`, which must fail; its stderr and last
/// line.
fn failing_run(work: &std::path::Path, args: &str) -> (String, String) {
    let out = run_in(
        work,
        &args.split(' ').collect::<Vec<_>>(),
        Duration::from_secs(120),
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let last = err.lines().last().unwrap_or_default().to_string();
    (err, last)
}

#[test]
fn more_losses_than_m_end_with_a_clear_error_and_keep_what_was_committed() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let dir = tmp.path().join("cluster");
    let dir_arg = dir.display().to_string();
    let (err, last) = failing_run(
        tmp.path(),
        &format!(
            "--dir {dir_arg} --keep --nodes 6 --k 4 --m 2 -n 4 --kill-at 3:3 -- {} -m 2 -s 40 -k 4 -l log%r",
            mat.display()
        ),
    );
    assert!(
        last.starts_with("eckpt: error: cannot recover: group") && last.contains("more than m=2"),
        "{err}"
    );
    let status: Value = serde_json::from_str(&ok(&["status", "--dir", &dir_arg, "--json"])).unwrap();
    let committed = status["committed_epoch"].as_u64().unwrap();
    assert!(committed >= 3, "the committed epoch stays: {status}");
    // The ranks on surviving nodes are still there, byte for byte restorable.
    let alive: Vec<u64> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["alive"].as_bool().unwrap())
        .flat_map(|n| n["ranks"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()))
        .collect();
    assert!(!alive.is_empty(), "{status}");
    for rank in alive {
        let out = tmp.path().join(format!("restored{rank}"));
        ok(&[
            "restore",
            "--dir",
            &dir_arg,
            "--rank",
            &rank.to_string(),
            "--item",
            "mem/0",
            "-o",
            out.to_str().unwrap(),
        ]);
    }
    ok(&["down", "--dir", &dir_arg, "--purge"]);
}

#[test]
fn below_min_nodes_the_run_stops_and_flushes_its_last_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let flush = tmp.path().join("flush");
    let (err, last) = failing_run(
        tmp.path(),
        &format!(
            "--nodes 6 --k 2 --m 1 --min-nodes 6 --flush-dir {} --flush-every 0 -n 4 --kill-at 3:1 -- {} -m 2 -s 40 -k 4 -l log%r",
            flush.display(),
            mat.display()
        ),
    );
    assert!(
        last.starts_with("eckpt: error: 5 node(s) left, fewer than --min-nodes 6"),
        "{err}"
    );
    // Nothing flushed before (on demand only): the end of the run flushed the epoch the job
    // resumes from.
    let flushed = err
        .lines()
        .find_map(|l| l.strip_prefix("eckpt run: flushed epoch "))
        .unwrap_or_else(|| panic!("no flush at the end: {err}"));
    let epoch: u64 = flushed.split(' ').next().unwrap().parse().unwrap();
    assert!(epoch >= 3, "{err}");
    let published: Vec<String> = std::fs::read_dir(&flush)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        published
            .iter()
            .any(|name| name.ends_with(&format!("{epoch:08}")) || name.ends_with(&epoch.to_string())),
        "flushed epoch {epoch} in {published:?}"
    );
}

/// The node stores (`store`, `coded`) of the cluster in `dir` that exist.
fn node_stores(dir: &Path) -> Vec<PathBuf> {
    let Ok(nodes) = std::fs::read_dir(dir.join("nodes")) else {
        return Vec::new();
    };
    let mut stores: Vec<PathBuf> = nodes
        .flatten()
        .flat_map(|node| ["store", "coded"].map(|sub| node.path().join(sub)))
        .filter(|path| path.exists())
        .collect();
    stores.sort();
    stores
}

#[test]
fn a_finished_job_leaves_no_node_store_unless_kept_and_a_failed_one_keeps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    // A job of 2 ranks checkpointing 4 times on a cluster the run starts in `tmp/name`;
    // with `fail`, rank 1 exits 1 after its last checkpoint.
    let job = |name: &str, options: &[&str], fail: bool| {
        let dir = tmp.path().join(name);
        let work = tmp.path().join(format!("{name}-work"));
        std::fs::create_dir(&work).unwrap();
        let script = format!(
            "{} -m 1 -s 8 -k 2 && [ {} = 0 -o $ECKPT_RANK != 1 ]",
            mat.display(),
            u8::from(fail)
        );
        let mut args = vec![
            "--dir",
            dir.to_str().unwrap(),
            "--nodes",
            "3",
            "--k",
            "2",
            "--m",
            "1",
        ];
        args.extend(options);
        args.extend(["-n", "2", "--", "sh", "-c", &script]);
        let out = run_in(&work, &args, Duration::from_secs(120));
        (dir, out)
    };

    let (dir, out) = job("finished", &[], false);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(node_stores(&dir), Vec::<PathBuf>::new(), "{err}");
    assert!(err.contains("the job finished: removed its node stores"), "{err}");
    // The cluster directory stays, with the run's record and the logs.
    assert_eq!(std::fs::read_dir(dir.join("runs")).unwrap().count(), 1);
    assert!(dir.join("nodes/n0/log").is_file());

    let (dir, out) = job("kept", &["--keep"], false);
    let _purge = PurgeAtEnd(dir.display().to_string());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(node_stores(&dir).len(), 6, "{}", text(&out.stderr));
    ok(&["down", "--dir", dir.to_str().unwrap()]);
    assert_eq!(node_stores(&dir).len(), 6, "stopped, the stores stay");

    let (dir, out) = job("failed", &[], true);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(node_stores(&dir).len(), 6, "{err}");
    assert!(
        err.contains("the node stores stay for a resume") && err.contains("`eckpt clean --job "),
        "{err}"
    );
    let status = cluster::run(&["status", "--dir", dir.to_str().unwrap()]);
    assert!(!status.status.success(), "the cluster was stopped");
}

#[test]
fn clean_deletes_what_a_killed_job_left_on_this_host_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    // A cluster whose agents store where `eckpt run --launcher srun` has them store, in a
    // directory of the test's.
    let c = Cluster::up(&["--no-agents", "--nodes", "3", "--k", "2", "--m", "1"]);
    let d = c.d().to_string();
    let local = tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    let pattern = format!("{}/eckpt-job%j-%n", local.display());
    let mut agents: Vec<_> = (0..3)
        .map(|i| {
            cluster::eckpt()
                .args(["agent", "--dir", &d, "--name", &format!("n{i}"), "--store"])
                .arg(pattern.replace("%j", "4242"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    c.wait_all_alive();

    // Job 4242 checkpoints, and its supervisor is killed.
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut args = vec![
        "--dir",
        &d,
        "--job",
        "4242",
        "-n",
        "2",
        "--",
        mat.to_str().unwrap(),
    ];
    args.extend(["-m", "1", "-s", "100000", "-k", "2"]);
    let mut run = cluster::spawn_job(&work, &args);
    wait_for(Duration::from_secs(120), "the job's first epoch", || {
        c.committed() >= 1
    });
    run.kill().unwrap();
    run.wait().unwrap();
    let store = |job: &str, node: &str| local.join(format!("eckpt-job{job}-{node}"));
    let clean = |job: &str, extra: &[&str]| {
        let mut args = vec!["clean", "--job", job, "--node-store", &pattern];
        args.extend(extra);
        cluster::run(&args)
    };
    // Its cluster still runs: nothing is deleted.
    cluster::assert_refused(&clean("4242", &["--dir", &d]), "its coordinator is running");
    assert!(store("4242", "n0").join("store/node.json").is_file());

    // The batch system ends the job: every process of it killed.
    c.kill_coordinator();
    for agent in &mut agents {
        agent.kill().unwrap();
        agent.wait().unwrap();
    }
    // A user's file beside a store, one that only looks like one, a link to elsewhere
    // named as a store, and another job's store.
    std::fs::write(store("4242", "n1").join("notes.txt"), "mine").unwrap();
    std::fs::write(store("4242", "notes"), "mine too").unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(store("4242", "n0"))
        .arg(store("4243", "n0"))
        .status()
        .unwrap();
    assert!(copied.success());
    std::os::unix::fs::symlink(store("4243", "n0"), store("4242", "s9")).unwrap();

    let out = clean("4242", &["--dir", &d, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!Path::new(&d).exists(), "the cluster directory is gone: {report}");
    for node in ["n0", "n2"] {
        assert!(!store("4242", node).exists(), "{node}: {report}");
    }
    let left: Vec<String> = std::fs::read_dir(store("4242", "n1"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["notes.txt"], "{report}");
    assert!(store("4242", "notes").is_file());
    assert!(store("4242", "s9").is_symlink());
    assert!(store("4243", "n0").join("store/node.json").is_file(), "{report}");
    let kept: BTreeMap<&str, &str> = report["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["path"].as_str().unwrap(), k["why"].as_str().unwrap()))
        .collect();
    let why = |path: PathBuf| kept.get(path.to_str().unwrap()).copied().unwrap_or_default();
    assert!(
        why(store("4242", "n1")).contains("files eckpt did not create (notes.txt)"),
        "{report}"
    );
    assert!(why(store("4242", "s9")).contains("symbolic link"), "{report}");
    assert!(
        why(store("4242", "notes")).contains("not a directory"),
        "{report}"
    );

    // The other job's store goes with its own clean, as a Slurm epilog runs it (no --dir).
    let out = clean("4243", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!store("4243", "n0").exists(), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains(&format!("removed {}", store("4243", "n0").display())));
}

/// The arguments of the example `mat` in the jobs that run on one kept cluster one after
/// the other: two ranks, four checkpoints, a log per rank.
const MAT_ARGS: [&str; 8] = ["-m", "1", "-s", "16", "-k", "4", "-l", "log%r"];

/// Jobs of the example `mat` that run one after the other on one cluster, kept between them
/// and purged at the end, in a scratch directory.
struct MatJobs {
    // Dropped first: the cluster is purged before its directory goes.
    _purge: PurgeAtEnd,
    scratch: tempfile::TempDir,
    program: String,
}

impl MatJobs {
    fn new() -> MatJobs {
        let scratch = tempfile::tempdir().unwrap();
        let program = build_c("mat", scratch.path()).display().to_string();
        let dir = scratch.path().join("cluster").display().to_string();
        MatJobs {
            _purge: PurgeAtEnd(dir),
            scratch,
            program,
        }
    }

    /// Where the jobs run and write their logs.
    fn work(&self) -> &Path {
        self.scratch.path()
    }

    /// The cluster's directory.
    fn dir(&self) -> &str {
        &self._purge.0
    }

    /// Runs a job of two ranks with `eckpt run`'s other options `extra`; it must exit 0.
    fn run(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["--dir", self.dir(), "--keep"];
        args.extend_from_slice(extra);
        args.extend(["-n", "2", "--", &self.program]);
        args.extend(MAT_ARGS);
        let out = run_in(self.work(), &args, Duration::from_secs(300));
        assert!(out.status.success(), "{}", text(&out.stderr));
        out
    }
}

/// `--kill-at EPOCH` counts the run's own epochs: on a cluster whose numbering an earlier job
/// carried on, `--fresh --kill-at 2:1` strikes after the second epoch of this run, where it
/// used to strike after the first (any epoch number was past 2).
#[test]
fn kill_at_counts_the_runs_own_epochs_on_a_cluster_that_ran_before() {
    let jobs = MatJobs::new();
    let (w, d) = (jobs.work(), jobs.dir());
    // The first job starts the cluster (its shape), the second runs on it (its --dir only).
    let job = |extra: &[&str]| jobs.run(extra);
    job(&["--nodes", "5", "--spares", "1", "--k", "2", "--m", "1"]);
    let status: Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    let before = status["committed_epoch"].as_u64().unwrap();
    assert!(before >= 4, "the first job committed {before} epochs");
    let record = w.join("second.json");
    let record_arg = record.display().to_string();
    job(&["--fresh", "--kill-at", "2:1", "--record", &record_arg]);
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let causes: Vec<&str> = record["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["cause"].as_str().unwrap())
        .collect();
    assert_eq!(
        causes,
        [format!("--kill-at after epoch {}", before + 2)],
        "{record}"
    );
}

/// A run that starts a cluster for itself and is killed (SIGKILL: it stops nothing, and its
/// guard ends only the ranks) leaves that cluster to stop itself once no run has held it for
/// six leases, its checkpoints kept, instead of running until someone finds it.
#[test]
fn the_cluster_of_a_killed_run_stops_itself_and_keeps_its_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let (temp, work) = (tmp.path().join("temp"), tmp.path().join("work"));
    std::fs::create_dir(&temp).unwrap();
    std::fs::create_dir(&work).unwrap();
    let script = format!(
        "printf \"rank $ECKPT_RANK\" > state$ECKPT_RANK && {} checkpoint --wait state$ECKPT_RANK >/dev/null && sleep 600",
        env!("CARGO_BIN_EXE_eckpt")
    );
    let mut run = cluster::eckpt()
        .args([
            "run",
            "--lease",
            "1s",
            "--start-wait",
            "1s",
            "--nodes",
            "3",
            "--k",
            "2",
            "--m",
            "1",
        ])
        .args(["-n", "2", "--", "sh", "-c", &script])
        .env("TMPDIR", &temp)
        .current_dir(&work)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let dir = || -> Option<PathBuf> {
        let entry = std::fs::read_dir(&temp).ok()?.flatten().next()?;
        Some(entry.path())
    };
    let committed = |d: &Path| {
        let out = cluster::run(&["status", "--dir", d.to_str().unwrap(), "--json"]);
        let status: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        status["committed_epoch"].as_u64().unwrap_or(0)
    };
    wait_for(Duration::from_secs(120), "the run's first epoch", || {
        dir().is_some_and(|d| committed(&d) >= 1)
    });
    let dir = dir().unwrap();
    let d = dir.to_str().unwrap().to_string();
    let _purge = PurgeAtEnd(d.clone());
    let pid = |process: &str| -> String {
        let text = std::fs::read_to_string(dir.join(process).join("pid")).unwrap_or_default();
        text.lines().next().unwrap_or_default().trim().to_string()
    };
    let daemons: Vec<String> = ["coordinator", "nodes/n0", "nodes/n1", "nodes/n2"]
        .iter()
        .map(|p| pid(p))
        .collect();
    assert!(daemons.iter().all(|p| !p.is_empty()), "{daemons:?}");
    run.kill().unwrap();
    run.wait().unwrap();

    wait_for(Duration::from_secs(60), "the cluster to stop itself", || {
        daemons.iter().all(|p| !Path::new("/proc").join(p).exists())
    });
    // Its checkpoints are there to restore from.
    ok(&["up", "--dir", &d, "--detach"]);
    let restored = tmp.path().join("restored");
    ok(&[
        "restore",
        "--dir",
        &d,
        "--rank",
        "1",
        "-o",
        restored.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read(&restored).unwrap(), b"rank 1");
}

/// A flipped bit in a rank's committed image, met as the rank restarts under `eckpt run`:
/// the rank library has the coordinator check that copy, which marks its node damaged; the
/// run takes that for a failure, rebuilds the copy from the group and relaunches, and the
/// job ends with the output of a failure-free run.
#[test]
fn a_restart_that_meets_a_flipped_block_is_rebuilt_from_the_group_and_the_run_goes_on() {
    let jobs = MatJobs::new();
    let (w, d) = (jobs.work(), jobs.dir());
    let dir = Path::new(d);
    let job = |extra: &[&str]| jobs.run(extra);
    job(&["--nodes", "4", "--k", "2", "--m", "1"]);
    let status: Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    let node = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["ranks"].as_array().is_some_and(|r| r.contains(&1.into())))
        .map(|n| n["name"].as_str().unwrap().to_string())
        .expect("rank 1 has a node");
    // The newest epoch of rank 1 that stored blocks: each of them is what a restart reads.
    let rank_dir = dir.join("nodes").join(&node).join("store").join("rank.1");
    let mut stored: Vec<(u64, PathBuf)> = std::fs::read_dir(&rank_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            let epoch = name.strip_prefix("epoch-")?.split('-').next()?.parse().ok()?;
            let data = e.path().join("data");
            (std::fs::metadata(&data).ok()?.len() > 0).then_some((epoch, data))
        })
        .collect();
    stored.sort();
    let (_, data) = stored.pop().expect("rank 1 stored blocks");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&data, bytes).unwrap();

    let record = w.join("resumed.json");
    let record_arg = record.display().to_string();
    let out = job(&["--resume", "--record", &record_arg]);
    let record: Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let failures = record["failures"].as_array().unwrap();
    assert!(
        failures.iter().any(|f| f["cause"] == "node found damaged"
            && f["nodes"]
                .as_array()
                .is_some_and(|n| n.contains(&node.as_str().into()))),
        "the damaged node was the run's failure: {record}"
    );
    assert_eq!(
        record["attempts"].as_array().unwrap().len(),
        2,
        "relaunched once: {record}"
    );
    assert_eq!(record["exit_code"], 0, "{record}");
    let said = text(&out.stderr);
    assert!(
        said.contains("its node is marked damaged"),
        "the rank said why: {said}"
    );
    let expected = reference(Path::new(&jobs.program), &w.join("reference"), 2, &MAT_ARGS);
    assert_failure_free(&out.stdout, w, &expected, "after the rebuilt copy");
    let status: Value = serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap();
    assert!(
        status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["damaged"].is_null()),
        "rebuilt: {status}"
    );
}
