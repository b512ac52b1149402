//! One job, one node name, one owner: every second writer is refused. Each test plays a
//! way a real cluster gets a second writer — a user's directory taken for a cluster, a
//! batch job submitted twice, a supervisor killed with its ranks left running, another
//! user's directory in `/dev/shm`, an agent started with a live node's name or another
//! node's store, a coordinator killed in the middle of a recovery, a partition of the
//! coordinator, ranks that disagree on how many checkpoints they take, a rank asking the
//! same pace point twice, a rank exiting before the coordinator noticed its peer's node
//! died — with real coordinator, agent, supervisor and rank processes.

mod cluster;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cluster::programs::{assert_failure_free, build_c, reference, text};
use cluster::{
    bytes, eckpt, finish_job, is_root, node_of_rank, nodes_without, ok, partition_for, processes_with, run,
    run_job, spawn_job, wait_for, Cluster, PurgeAtEnd,
};
use serde_json::Value;

fn status(d: &str) -> Value {
    serde_json::from_str(&ok(&["status", "--dir", d, "--json"])).unwrap()
}

/// The last line a failed command printed.
fn last_line(out: &Output) -> String {
    text(&out.stderr).lines().last().unwrap_or_default().to_string()
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

const SMALL: [&str; 6] = ["--nodes", "3", "--k", "2", "--m", "1"];

/// A new working directory `tmp/name` with the input file of each of `ranks` ranks.
fn work_dir(tmp: &Path, name: &str, ranks: u32) -> PathBuf {
    let work = tmp.join(name);
    std::fs::create_dir(&work).unwrap();
    for r in 0..ranks {
        std::fs::write(work.join(format!("input{r}")), format!("input of rank {r}")).unwrap();
    }
    work
}

/// The `mat` example as a job: built in `tmp`, its failure-free result computed, and a
/// working directory with each rank's input file.
struct MatJob {
    mat: PathBuf,
    args: Vec<&'static str>,
    ranks: String,
    expected: BTreeMap<u32, (String, Vec<u8>)>,
    work: PathBuf,
}

impl MatJob {
    fn new(tmp: &Path, ranks: u32, args: &[&'static str]) -> MatJob {
        let mat = build_c("mat", tmp);
        let expected = reference(&mat, &tmp.join("reference"), ranks, args);
        let work = work_dir(tmp, "work", ranks);
        MatJob {
            mat,
            args: args.to_vec(),
            ranks: ranks.to_string(),
            expected,
            work,
        }
    }

    /// `eckpt run`'s arguments: `options`, then the job.
    fn args<'a>(&'a self, options: &[&'a str]) -> Vec<&'a str> {
        let mut args = options.to_vec();
        args.extend(["-n", &self.ranks, "--", self.mat.to_str().unwrap()]);
        args.extend(&self.args);
        args
    }

    /// `eckpt run` of the job with `options`, to its end.
    fn run(&self, options: &[&str], limit: Duration) -> Output {
        run_job(&self.work, &self.args(options), limit)
    }

    /// The job ended with the checksums and logs of its failure-free run.
    fn assert_done(&self, out: &Output, context: &str) {
        assert_failure_free(&out.stdout, &self.work, &self.expected, context);
    }
}

#[test]
fn a_users_directory_is_never_taken_for_a_cluster_and_purge_deletes_only_what_eckpt_made() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let thesis = tmp.path().join("thesis");
    std::fs::create_dir(&thesis).unwrap();
    std::fs::write(thesis.join("thesis.tex"), "\\documentclass{article}").unwrap();
    std::fs::set_permissions(&thesis, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = thesis.to_str().unwrap();
    let mut args = vec!["up", "--dir", t, "--detach"];
    args.extend(SMALL);
    let out = run(&args);
    assert!(!out.status.success());
    assert!(
        last_line(&out).contains("is not empty and holds no eckpt cluster (it has thesis.tex)"),
        "{}",
        text(&out.stderr)
    );
    let out = run_job(
        tmp.path(),
        &["--dir", t, "-n", "1", "--", "true"],
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(last_line(&out).contains("is not empty"), "{}", text(&out.stderr));
    assert!(thesis.join("thesis.tex").is_file());
    assert_eq!(mode(&thesis), 0o755, "a refused directory is left as it was");

    // A cluster whose agents keep their stores outside its directory, and a file of the
    // user's put in the cluster directory afterwards.
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let mut args = vec!["up", "--dir", d, "--no-agents", "--detach"];
    args.extend(SMALL);
    ok(&args);
    let mut agents = Vec::new();
    for i in 0..3 {
        let local = tmp.path().join(format!("local-n{i}"));
        agents.push(
            eckpt()
                .args(["agent", "--dir", d, "--name", &format!("n{i}"), "--store"])
                .arg(&local)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
    }
    wait_for(Duration::from_secs(30), "the agents", || {
        status(d)["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| n["alive"].as_bool().unwrap())
    });
    assert_eq!(mode(&tmp.path().join("local-n0")), 0o700);
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let out = run(&["down", "--dir", d, "--purge"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("holds files eckpt did not create (notes.txt)"),
        "{}",
        text(&out.stderr)
    );
    for agent in &mut agents {
        agent.wait().unwrap();
    }
    for i in 0..3 {
        let local = tmp.path().join(format!("local-n{i}"));
        assert!(!local.exists(), "{} is left", local.display());
    }
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["notes.txt"]);
}

#[test]
fn a_second_run_of_a_live_job_is_refused_and_a_finished_job_is_not_resumed_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = MatJob::new(
        tmp.path(),
        2,
        &["-m", "4", "-s", "12", "-k", "4", "-l", "log%r", "-i", "input%r"],
    );
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let marks = tmp.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    // The first run holds the job until the test lets its ranks end.
    let hold = format!(
        "while [ ! -e {} ]; do sleep 0.05; done",
        marks.join("end").display()
    );
    let mut args = vec!["--dir", d, "--keep", "-n", "2"];
    args.extend(SMALL);
    args.extend(["--", "sh", "-c", &hold]);
    let first = spawn_job(tmp.path(), &args);
    wait_for(Duration::from_secs(60), "the first run's lease", || {
        run(&["status", "--dir", d, "--json"]).status.success() && !status(d)["job"]["holder"].is_null()
    });
    let second = run_job(
        tmp.path(),
        &["--dir", d, "-n", "2", "--", "sh", "-c", &hold],
        Duration::from_secs(60),
    );
    assert!(!second.status.success());
    let line = last_line(&second);
    assert!(
        line.contains(&format!("is running: eckpt run pid {} on host", first.id()))
            && line.contains("a second run of a live job is refused"),
        "{}",
        text(&second.stderr)
    );
    std::fs::write(marks.join("end"), "").unwrap();
    let first = finish_job(first, Duration::from_secs(60));
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(status(d)["job"]["finished_unix"].is_number());

    // The job finished: running it again is refused, --fresh starts over.
    let job = |extra: &[&str]| {
        let mut options = vec!["--dir", d];
        options.extend_from_slice(extra);
        mat.run(&options, Duration::from_secs(120))
    };
    let again = job(&[]);
    assert!(!again.status.success());
    assert!(
        last_line(&again).contains("finished") && last_line(&again).contains("--resume"),
        "{}",
        text(&again.stderr)
    );
    let fresh = job(&["--fresh"]);
    assert!(fresh.status.success(), "{}", text(&fresh.stderr));
    mat.assert_done(&fresh, "--fresh");
    assert!(!job(&[]).status.success(), "finished again");
    // --resume continues from the final epoch: nothing is computed again, the logs stay.
    let resumed = job(&["--resume"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(
        text(&resumed.stderr).contains("restarted from epoch"),
        "{}",
        text(&resumed.stderr)
    );
    mat.assert_done(&resumed, "--resume");
    // Another job's id on this cluster is refused while it holds this job's checkpoint.
    let other = job(&["--job", "other-job", "--resume"]);
    assert!(!other.status.success());
    assert!(
        last_line(&other).contains("not of job other-job"),
        "{}",
        text(&other.stderr)
    );
}

#[test]
fn ranks_die_with_their_supervisor_and_a_rerun_takes_over_once_the_lease_expired() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = MatJob::new(
        tmp.path(),
        4,
        &["-m", "32", "-s", "400", "-k", "8", "-l", "log%r", "-i", "input%r"],
    );
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let first_args = mat.args(&[
        "--dir", d, "--keep", "--nodes", "6", "--k", "4", "--m", "2", "--lease", "2s",
    ]);
    let first = spawn_job(&mat.work, &first_args);
    wait_for(Duration::from_secs(120), "epoch 3", || {
        run(&["status", "--dir", d, "--json"]).status.success()
            && status(d)["committed_epoch"].as_u64().unwrap() >= 3
    });
    assert!(!processes_with("ECKPT_CLUSTER", d).is_empty(), "the ranks run");
    // SIGKILL: the supervisor cannot stop its ranks itself.
    assert!(Command::new("kill")
        .args(["-9", &first.id().to_string()])
        .status()
        .unwrap()
        .success());
    let _ = finish_job(first, Duration::from_secs(30));
    wait_for(Duration::from_secs(10), "the orphaned ranks to die", || {
        processes_with("ECKPT_CLUSTER", d).is_empty()
    });
    // The job again on its cluster: it waits for the dead supervisor's lease and resumes.
    let out = mat.run(&["--dir", d], Duration::from_secs(300));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("has not renewed its lease"), "{err}");
    assert!(err.contains("resuming the checkpointed job"), "{err}");
    mat.assert_done(&out, "after the supervisor was killed");
}

#[test]
fn ranks_of_another_generation_or_of_none_are_refused_while_a_job_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let end = tmp.path().join("end");
    let hold = format!("while [ ! -e {} ]; do sleep 0.05; done", end.display());
    let mut args = vec!["--dir", d, "--keep", "-n", "1"];
    args.extend(SMALL);
    args.extend(["--", "sh", "-c", &hold]);
    let supervisor = spawn_job(tmp.path(), &args);
    wait_for(Duration::from_secs(60), "the lease", || {
        run(&["status", "--dir", d, "--json"]).status.success() && !status(d)["job"]["holder"].is_null()
    });
    let generation = status(d)["job"]["generation"].as_u64().unwrap();
    let file = tmp.path().join("image");
    std::fs::write(&file, bytes(10_000, 1)).unwrap();
    let out = run(&[
        "checkpoint",
        "--dir",
        d,
        "--world",
        "1",
        "--rank",
        "0",
        file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        last_line(&out).contains("started without its generation"),
        "{}",
        text(&out.stderr)
    );
    let rank = |g: u64| {
        Command::new(&mat)
            .args(["-m", "4", "-s", "8", "-k", "4", "-l", "log0"])
            .current_dir(tmp.path())
            .env("ECKPT_CLUSTER", d)
            .env("ECKPT_WORLD", "1")
            .env("ECKPT_RANK", "0")
            .env("ECKPT_GENERATION", g.to_string())
            .output()
            .unwrap()
    };
    use std::os::unix::process::ExitStatusExt;
    let stale = rank(generation - 1);
    assert_eq!(stale.status.signal(), Some(9), "{}", text(&stale.stderr));
    assert!(
        text(&stale.stderr).contains("attempt is over"),
        "{}",
        text(&stale.stderr)
    );
    std::fs::write(&end, "").unwrap();
    let out = finish_job(supervisor, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The supervisor is gone: its generation is refused too.
    let orphan = rank(generation);
    assert_eq!(orphan.status.signal(), Some(9), "{}", text(&orphan.stderr));
    assert!(
        text(&orphan.stderr).contains("whose supervisor is gone"),
        "{}",
        text(&orphan.stderr)
    );
    assert_eq!(
        status(d)["committed_epoch"],
        0,
        "nothing was committed by a stale writer"
    );
}

#[test]
fn another_users_directory_in_dev_shm_is_refused_as_the_store_root() {
    if !is_root() {
        eprintln!("skipped: playing two users needs root");
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("skipped: setpriv (util-linux) is not installed");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    // The victim is user 65534; "another user" (root here) made its per-user root first,
    // writable by everyone.
    let root = Path::new("/dev/shm/eckpt-65534");
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir(root).unwrap();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tmp = tempfile::Builder::new().prefix("eckpt-victim").tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mat = build_c("mat", tmp.path());
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(&mat)
        .args(["-m", "4", "-s", "4", "-k", "4", "-l", "log0"])
        .current_dir(tmp.path())
        .env("SLURM_JOB_ID", "4242")
        .env_remove("ECKPT_DIR")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(root);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("/dev/shm/eckpt-65534") && err.contains("owned by user 0"),
        "{err}"
    );
}

#[test]
fn an_agent_claiming_a_live_nodes_name_or_another_nodes_store_is_refused_without_a_trace() {
    if !is_root() {
        eprintln!("skipped: a private mount namespace needs root");
        return;
    }
    let mut c = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1", "--block-size", "16KiB"]);
    let data: Vec<Vec<u8>> = (0..2).map(|r| bytes(200_000, r + 1)).collect();
    c.checkpoint(data, true);
    let before = c.status();
    let journal = std::fs::read(c.dir.join("coordinator/journal.json")).unwrap();
    let impostor = |store: &Path| {
        // A second host with the same node name: on this host, its own view of the node's
        // directory (a private tmpfs over it), as the issue that found this reproduced it.
        let script = format!(
            "mount -t tmpfs none {0}/nodes/n0 && exec {1} agent --dir {0} --name n0 --store {2}",
            c.d(),
            env!("CARGO_BIN_EXE_eckpt"),
            store.display()
        );
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .output()
            .unwrap();
        assert!(!out.status.success(), "the impostor was accepted");
        text(&out.stderr)
    };
    let live_store = impostor(&c.dir.join("nodes/n1"));
    assert!(live_store.contains("another agent is running"), "{live_store}");
    let copy = c.dir.parent().unwrap().join("copy");
    std::fs::create_dir(&copy).unwrap();
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(c.dir.join("nodes/n1/store"))
        .arg(&copy)
        .status()
        .unwrap()
        .success());
    let copied = impostor(&copy);
    assert!(copied.contains("belongs to node n1, not n0"), "{copied}");
    let fresh = impostor(&c.dir.parent().unwrap().join("fresh"));
    assert!(fresh.contains("node n0 is already running"), "{fresh}");

    let after = c.status();
    assert_eq!(
        nodes_without(&after, &["silent_seconds"]),
        nodes_without(&before, &["silent_seconds"]),
        "nothing of the impostors is recorded"
    );
    assert_eq!(
        std::fs::read(c.dir.join("coordinator/journal.json")).unwrap(),
        journal
    );
    // The real n0 is the one killed and wiped; n1's store is untouched.
    c.kill("n0", true);
    assert!(!c.dir.join("nodes/n0/store").exists());
    assert!(c.dir.join("nodes/n1/store/rank.1").is_dir());
    c.wait_down("n0");
    c.assert_restorable();
}

#[test]
fn a_coordinator_killed_mid_recovery_leaves_wiped_nodes_damaged_and_the_next_run_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = MatJob::new(
        tmp.path(),
        4,
        &["-m", "4", "-s", "40", "-k", "4", "-l", "log%r", "-i", "input%r"],
    );
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    // A node lost with its disk after epoch 3, and the run gives up at once.
    let first = format!("--dir {d} --keep --nodes 6 --k 4 --m 2 --kill-at 3:1 --max-restarts 0");
    let out = mat.run(&first.split(' ').collect::<Vec<_>>(), Duration::from_secs(300));
    assert!(!out.status.success(), "{}", text(&out.stderr));
    // A second one, then a recovery whose coordinator dies between decode and re-encode.
    let s = status(d);
    let victim = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["alive"].as_bool().unwrap() && !n["ranks"].as_array().unwrap().is_empty())
        .unwrap()["name"]
        .as_str()
        .unwrap()
        .to_string();
    ok(&["kill-node", "--dir", d, &victim, "--wipe"]);
    ok(&["debug", "pause", "--dir", d, "--at", "mid-recovery"]);
    let recovery = eckpt()
        .args(["recover", "--dir", d])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ok(&["debug", "wait", "--dir", d, "--timeout", "120"]);
    let pid = std::fs::read_to_string(dir.join("coordinator/pid")).unwrap();
    assert!(Command::new("kill")
        .args(["-9", pid.lines().next().unwrap()])
        .status()
        .unwrap()
        .success());
    let _ = recovery.wait_with_output();
    ok(&["debug", "resume", "--dir", d]);
    ok(&["down", "--dir", d]);
    ok(&["up", "--dir", d, "--detach"]);
    // The wiped nodes came back with empty stores: damaged, not healthy.
    let s = status(d);
    let damaged: Vec<&str> = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["damaged"].is_string())
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(damaged.len(), 2, "{s}");
    assert!(!s["groups"][0]["lost"].as_array().unwrap().is_empty(), "{s}");
    let out = mat.run(&["--dir", d], Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("recovered epoch"),
        "{}",
        text(&out.stderr)
    );
    mat.assert_done(&out, "after the interrupted recovery");
}

#[test]
fn a_job_outlives_a_partition_of_the_coordinator() {
    if !is_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mat = MatJob::new(
        tmp.path(),
        4,
        &[
            "-m", "16", "-s", "600", "-k", "10", "-l", "log%r", "-i", "input%r",
        ],
    );
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    let options =
        format!("--dir {d} --keep --netns --nodes 6 --k 4 --m 2 --liveness 1s --partition-grace 60s");
    let job = spawn_job(&mat.work, &mat.args(&options.split(' ').collect::<Vec<_>>()));
    wait_for(Duration::from_secs(120), "epoch 2", || {
        run(&["status", "--dir", d, "--json"]).status.success()
            && status(d)["committed_epoch"].as_u64().unwrap() >= 2
    });
    // The coordinator hears no agent for eight seconds: far beyond the liveness period.
    partition_for(&dir, 8.0, || {});
    let out = finish_job(job, Duration::from_secs(400));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("has heard from no agent"), "{err}");
    assert!(!err.contains("lost n"), "no node was lost: {err}");
    mat.assert_done(&out, "through a partition");
}

#[test]
fn ranks_that_disagree_on_the_number_of_checkpoints_end_the_run_naming_them() {
    let tmp = tempfile::tempdir().unwrap();
    let mat = build_c("mat", tmp.path());
    // Rank 1 checkpoints once more than the others (it waits for an epoch they never
    // write), then once less (they wait for it).
    for (rank1_steps, expected) in [
        (
            "44",
            "exited without checkpointing epoch 11, which rank(s) 1 wrote",
        ),
        (
            "36",
            "rank(s) 1 exited without checkpointing epoch 10, which rank(s) ",
        ),
    ] {
        let script = format!(
            "if [ \"$ECKPT_RANK\" = 1 ]; then s={rank1_steps}; else s=40; fi; exec {} -m 4 -s $s -k 4 -l log$ECKPT_RANK",
            mat.display()
        );
        let args = [
            "--nodes", "5", "--k", "4", "--m", "1", "-n", "4", "--", "sh", "-c", &script,
        ];
        let started = Instant::now();
        let out = run_job(tmp.path(), &args, Duration::from_secs(120));
        assert!(!out.status.success(), "rank 1 takes {rank1_steps} steps");
        let line = last_line(&out);
        assert!(line.contains(expected), "{}", text(&out.stderr));
        assert!(line.contains("can never commit"), "{line}");
        assert!(started.elapsed() < Duration::from_secs(60), "ended within 60 s");
    }
}

#[test]
fn a_rank_asking_the_same_pace_point_twice_gets_the_same_answer_and_the_coordinator_lives_on() {
    use eckpt_cluster_api::commands::coordinator_call;
    use eckpt_cluster_api::dirs::ClusterDir;
    use eckpt_cluster_api::msg::{Pace, PaceReport};
    let c = Cluster::up(&SMALL);
    let dir = ClusterDir::new(&c.dir).unwrap();
    let coordinator = c.pid("coordinator");
    let pace = |rank: u32, round: u64, seconds: f64| Pace {
        rank,
        world: 2,
        launch: "L".into(),
        round,
        report: PaceReport {
            calls: 2,
            seconds,
            checkpoint_seconds: None,
            policy: "30s".into(),
        },
        generation: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (first, again, other) = (pace(0, 1, 1.0), pace(0, 1, 1.0), pace(1, 1, 3.0));
    let answers = rt.block_on(async {
        let (a, b, c) = tokio::join!(
            coordinator_call(&dir, first, |_| {}),
            coordinator_call(&dir, again, |_| {}),
            async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                coordinator_call(&dir, other, |_| {}).await
            }
        );
        vec![a, b, c]
    });
    for answer in &answers {
        match answer {
            Ok(p) => assert_eq!(p.step_seconds, 1.5),
            other => panic!("{other:?}"),
        }
    }
    // Asked again once every rank took it: the same answer, not a new pace point.
    match rt.block_on(coordinator_call(&dir, pace(0, 1, 1.0), |_| {})) {
        Ok(p) => assert_eq!(p.step_seconds, 1.5),
        other => panic!("{other:?}"),
    }
    // The next point works: nothing was poisoned, the coordinator is the same process.
    let (zero, one) = (pace(0, 2, 2.0), pace(1, 2, 2.0));
    let next = rt.block_on(async {
        tokio::join!(
            coordinator_call(&dir, zero, |_| {}),
            coordinator_call(&dir, one, |_| {})
        )
    });
    assert!(next.0.is_ok() && next.1.is_ok(), "{next:?}");
    assert_eq!(c.pid("coordinator"), coordinator);
}

#[test]
fn a_rank_failing_before_its_peers_node_is_declared_dead_is_recovered_and_a_crash_is_recorded() {
    let tmp = tempfile::tempdir().unwrap();
    let mat_job = MatJob::new(
        tmp.path(),
        2,
        &[
            "-m", "16", "-s", "2000", "-k", "20", "-l", "log%r", "-i", "input%r",
        ],
    );
    let (mat, work) = (&mat_job.mat, &mat_job.work);
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let _purge = PurgeAtEnd(d.to_string());
    // The same job as a shell line, so that a rank can misbehave once.
    let mat_args = mat_job.args.join(" ").replace("%r", "$ECKPT_RANK");
    // Rank 1 exits 1 as an MPI rank aborts when its peer is gone: once, when told (`go`).
    let script = format!(
        "if [ \"$ECKPT_RANK\" = 1 ] && [ ! -e once ]; then \
           {0} {mat_args} & pid=$!; \
           while kill -0 $pid 2>/dev/null; do \
             if [ -e go ]; then touch once; kill -9 $pid; exit 1; fi; sleep 0.02; done; \
           wait $pid; \
         else exec {0} {mat_args}; fi",
        mat.display()
    );
    let record = work.join("record.json");
    let options = format!(
        "--dir {d} --keep --nodes 3 --spares 1 --k 2 --m 1 --liveness 1s --record {} -n 2 -- sh -c",
        record.display()
    );
    let mut args: Vec<&str> = options.split(' ').collect();
    args.push(&script);
    let job = spawn_job(work, &args);
    wait_for(Duration::from_secs(120), "epoch 2", || {
        run(&["status", "--dir", d, "--json"]).status.success()
            && status(d)["committed_epoch"].as_u64().unwrap() >= 2
    });
    // Rank 0's node stops answering (a host that hangs: its connection stays open, so
    // only its silence tells), and rank 1 exits 1 at once.
    let s = status(d);
    let node0 = node_of_rank(&s, 0);
    let agent = std::fs::read_to_string(dir.join(format!("nodes/{node0}/pid"))).unwrap();
    let agent = agent.lines().next().unwrap().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &agent])
        .status()
        .unwrap()
        .success());
    std::fs::write(work.join("go"), "").unwrap();
    let out = finish_job(job, Duration::from_secs(300));
    let _ = Command::new("kill").args(["-9", &agent]).status();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("lost {node0}")), "{err}");
    mat_job.assert_done(&out, "rank 1 exited 1 before the loss was known");

    // A rank killed by a signal (no node lost) is a failure of the record too.
    let crash = format!(
        "if [ \"$ECKPT_RANK\" = 0 ] && [ ! -e crashed ]; then touch crashed; kill -9 $$; fi; exec {} {mat_args}",
        mat.display()
    );
    let work = work_dir(tmp.path(), "crash", 2);
    let record = work.join("crash.json");
    let options = format!(
        "--nodes 3 --k 2 --m 1 --record {} -n 2 -- sh -c",
        record.display()
    );
    let mut args: Vec<&str> = options.split(' ').collect();
    args.push(&crash);
    let out = run_job(&work, &args, Duration::from_secs(300));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_failure_free(&out.stdout, &work, &mat_job.expected, "rank 0 crashed once");
    let record: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let failures = record["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{record}");
    assert_eq!(failures[0]["cause"], "rank 0 killed by signal 9", "{record}");
    assert_eq!(record["attempts"].as_array().unwrap().len(), 2);
    assert!(record["job"].is_string());
}

/// An agent stopped (SIGSTOP) past its liveness period and replaced meanwhile — another
/// agent of its node, as on another host, with a store of its own — finds out when it
/// continues: its session is not the node's any more, and registering again is refused
/// while the replacement runs. It exits, letting go of its store's lock and its port, and
/// the replacement goes on as the node. (It used to go on heartbeating over its old
/// session, answered as if alive, holding both for good.)
#[test]
fn an_agent_replaced_while_stopped_exits_when_it_continues() {
    let c = Cluster::up(&["--nodes", "3", "--k", "2", "--m", "1", "--block-size", "16KiB"]);
    // Written once the coordinator accepted the agent.
    wait_for(Duration::from_secs(30), "n2's pid file", || {
        c.dir.join("nodes/n2/pid").exists()
    });
    let old = c.pid("nodes/n2");
    let signal = |signal: &str| {
        let sent = Command::new("kill").args([signal, &old]).status().unwrap();
        assert!(sent.success(), "kill {signal} {old}");
    };
    signal("-STOP");
    c.wait_down("n2");
    // On the other host the stopped agent's socket in the shared directory reaches nothing.
    std::fs::remove_file(c.dir.join("nodes/n2/agent.sock")).unwrap();
    let elsewhere = c.dir.parent().unwrap().join("elsewhere");
    let mut replacement = eckpt()
        .args(["agent", "--dir", c.d(), "--name", "n2", "--store"])
        .arg(&elsewhere)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    c.wait_up("n2");
    signal("-CONT");
    let lock = c.dir.join("nodes/n2/store/agent.lock");
    wait_for(
        Duration::from_secs(30),
        "the replaced agent to let go of its store",
        || eckpt_daemon::owner_lock::OwnerLock::take(&lock, "agent").is_ok(),
    );
    wait_for(Duration::from_secs(30), "the replaced agent to exit", || {
        std::fs::read_to_string(format!("/proc/{old}/stat")).map_or(true, |s| {
            s.rsplit(") ").next().is_some_and(|rest| rest.starts_with('Z'))
        })
    });
    assert!(
        replacement.try_wait().unwrap().is_none(),
        "the replacement exited"
    );
    let n2 = status(c.d())["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "n2")
        .cloned()
        .unwrap();
    assert_eq!(n2["alive"], true, "{n2}");
    drop(c);
    let _ = replacement.kill();
    let _ = replacement.wait();
}
