//! `eckpt run` inside a real Slurm allocation: Debian's slurmctld and one slurmd per
//! emulated node (a network and a UTS namespace each, `scripts/slurm-sim`), munge, Open MPI
//! and MPICH. The MPI example runs once failure-free on a 3-node allocation, then as the
//! README's batch job scaled to 4 nodes × 2 tasks (6 ranks, no `--layout`: they fit only
//! because srun's default layout puts ranks on every member; `--layout dedicated` is refused
//! in one line before anything starts), then as a job whose srun ranks each leave a process
//! holding their output (it ends as the ranks do), then on 4-node
//! allocations (3 members and a spare) that lose a node holding ranks — not the batch host
//! — with everything on it (slurmd, the agent, the ranks) in the middle of the run: through
//! srun with Open MPI's PMIx, through Open MPI's mpirun and through MPICH's mpiexec with a
//! host file; and once losing only a node's slurmd, which eckpt's heartbeats cannot see but
//! Slurm's view of the job shows. Each job recovers inside its allocation and ends with the
//! failure-free checksums and byte-identical APPEND logs. The emulated network has two nodes
//! per leaf switch (`topology/tree`): those are the job's failure domains. Needs root; the
//! emulated Slurm is global to the machine, so it is started for one test at a time.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use cluster::programs::{build_stencil, build_stencil_mpich, repo, stencil_checksums, text};
use cluster::{assert_torch_env, eckpt, is_root, leave_a_process, ok, processes_running, PRINT_TORCH_ENV};

/// How a node fails.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Failure {
    /// Everything on it dies: eckpt's heartbeats notice first.
    Crash,
    /// Only its slurmd dies: eckpt's agent lives on, and only Slurm knows the node is gone
    /// from the job (it ends the ranks' step there once it declares the node down).
    Slurmd,
}

/// One emulated Slurm at a time in this test process.
static SLURM: Mutex<()> = Mutex::new(());

/// One emulated Slurm at a time on this machine: its spool, configuration and namespaces
/// are at fixed places, so a test suite run beside another (two clones, CI beside a
/// developer) waits for the other's Slurm test to end. Held while the file stays open.
fn machine_turn() -> std::fs::File {
    use std::os::fd::AsRawFd;
    let path = "/run/lock/eckpt-slurm-sim.lock";
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30 * 60);
    // SAFETY: flock(2) on a descriptor this function owns.
    while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        assert!(
            Instant::now() < deadline,
            "another test suite's emulated Slurm held {path} for 30 minutes"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    file
}

/// Where `scripts/slurm-sim/up.sh` writes the configuration.
const SLURM_CONF: &str = "/var/spool/slurm-sim/etc/slurm.conf";

/// The emulated Slurm; taken down when dropped.
struct Slurm;

impl Slurm {
    fn up(nodes: usize) -> Slurm {
        let out = Command::new(repo().join("scripts/slurm-sim/up.sh"))
            .arg(nodes.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "slurm-sim/up.sh: {}", text(&out.stderr));
        Slurm
    }

    /// `Crash`: every process of `node` killed, its link gone; `Slurmd`: its slurmd only.
    fn fail(&self, node: &str, failure: Failure) {
        let how = match failure {
            Failure::Crash => "--node",
            Failure::Slurmd => "--slurmd",
        };
        let out = Command::new(repo().join("scripts/slurm-sim/down.sh"))
            .args([how, node])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "slurm-sim/down.sh {how}: {}",
            text(&out.stderr)
        );
    }

    /// Waits (at most a minute) until Slurm says `node` is down.
    fn wait_down(&self, node: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let out = slurm_command("sinfo")
                .args(["--noheader", "--Node", "--nodes", node, "--format", "%t"])
                .output()
                .unwrap();
            if text(&out.stdout).contains("down") {
                return;
            }
            assert!(Instant::now() < deadline, "Slurm did not mark {node} down");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Submits `script` (run in `work`); its job id.
    fn sbatch(&self, work: &Path, script: &str) -> String {
        let path = work.join("job.sh");
        std::fs::write(&path, script).unwrap();
        let out = slurm_command("sbatch")
            .arg("--parsable")
            .arg(&path)
            .current_dir(work)
            .output()
            .unwrap();
        assert!(out.status.success(), "sbatch: {}", text(&out.stderr));
        text(&out.stdout).trim().split(';').next().unwrap().to_string()
    }

    /// `scontrol show job` of `job` as one line.
    fn job(&self, job: &str) -> String {
        let out = slurm_command("scontrol")
            .args(["show", "job", "--oneliner", job])
            .output()
            .unwrap();
        text(&out.stdout)
    }

    /// Waits (at most `limit`) for `job` to end; its final state line.
    fn wait(&self, job: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let line = self.job(job);
            if ![
                "JobState=PENDING",
                "JobState=RUNNING",
                "JobState=CONFIGURING",
                "JobState=COMPLETING",
            ]
            .iter()
            .any(|s| line.contains(s))
                && line.contains("JobState=")
            {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "job {job} still runs after {limit:?}: {line}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/slurm-sim/down.sh")).output();
    }
}

/// A Slurm client command talking to the emulated Slurm.
fn slurm_command(program: &str) -> Command {
    let mut command = Command::new(program);
    command.env("SLURM_CONF", SLURM_CONF);
    command
}

/// The batch script running the MPI example under `eckpt run LAUNCH` on `nodes` nodes (the
/// last `spares` of them spares), in `work`: its output goes to `work/job.out`. The agents
/// store in `work/local-<node>`, or with `default_store` where eckpt has them by default
/// (`/tmp/eckpt-job<id>-<node>`).
fn mpi_job(
    work: &Path,
    nodes: usize,
    spares: usize,
    launch: &str,
    stencil: &Path,
    default_store: bool,
) -> String {
    let store = if default_store {
        String::new()
    } else {
        format!("--node-store {}/local-%n", work.display())
    };
    format!(
        "#!/bin/sh\n\
         #SBATCH --nodes={nodes} --ntasks-per-node=2 --no-kill --output={out}\n\
         cd {work} && exec {eckpt} run {launch} --dir {dir} {store} \
         --k 2 --m 1 --spares {spares} -n 4 -- {stencil} -m 2 -s 300 -k 10 -l log%r\n",
        out = work.join("job.out").display(),
        work = work.display(),
        eckpt = env!("CARGO_BIN_EXE_eckpt"),
        dir = work.join("cluster").display(),
        stencil = stencil.display(),
    )
}

/// The README's batch job ("In a Slurm job": `--nodes=9 --ntasks-per-node=8`, `eckpt run
/// --launcher srun --launcher-args=--mpi=pmix --dir $SLURM_SUBMIT_DIR/eckpt-$SLURM_JOB_ID
/// --spares 1 --k 6 --m 2 --flush-dir … -n 64 -- ./app`, no `--layout`) scaled to the
/// simulation: 4 nodes × 2 tasks, `--k 2 --m 1 --spares 1 -n 6`, the node stores and the
/// flush directory in `work`. Before it, the same line with `--layout dedicated`, whose 2
/// data nodes hold 4 ranks: refused in one line, before a cluster or a step is started.
fn readme_job(work: &Path, stencil: &Path) -> String {
    let run = format!(
        "{eckpt} run --launcher srun --launcher-args=--mpi=pmix --node-store {work}/local-%n \
         --spares 1 --k 2 --m 1 --flush-dir {work}/flush -n 6",
        eckpt = env!("CARGO_BIN_EXE_eckpt"),
        work = work.display(),
    );
    let app = format!("-- {} -m 2 -s 200 -k 10 -l log%r", stencil.display());
    format!(
        "#!/bin/bash\n\
         #SBATCH --nodes=4 --ntasks-per-node=2 --no-kill --output={out}\n\
         cd {work}\n\
         {run} --layout dedicated --dir $SLURM_SUBMIT_DIR/dedicated-$SLURM_JOB_ID {app}\n\
         echo \"dedicated: exit $?\"\n\
         exec {run} --dir $SLURM_SUBMIT_DIR/eckpt-$SLURM_JOB_ID {app}\n",
        out = work.join("job.out").display(),
        work = work.display(),
    )
}

/// Runs [`readme_job`] and checks that the dedicated layout was refused before it started
/// anything, and that the job ran with at most 2 ranks per node (the tasks Slurm granted).
fn runs_the_readme_job(slurm: &Slurm, work: &Path, stencil: &Path) {
    let job = slurm.sbatch(work, &readme_job(work, stencil));
    let end = slurm.wait(&job, Duration::from_secs(240));
    let out = std::fs::read_to_string(work.join("job.out")).unwrap_or_default();
    assert!(
        end.contains("JobState=COMPLETED") && end.contains("ExitCode=0:0"),
        "the README's job: {end}\n{out}"
    );
    assert!(
        out.contains(
            "eckpt: error: 6 ranks do not fit: the dedicated layout puts ranks on the 2 data \
             nodes of 4 (1 parity node and 1 spare hold none), 2 slots each = 4; use --layout \
             rotated (6 slots) or at most 4 ranks\ndedicated: exit 1\n"
        ),
        "{out}"
    );
    assert!(
        !work.join(format!("dedicated-{job}/cluster.json")).exists(),
        "a refused cluster is not made"
    );
    assert!(
        !out.contains("srun: error") || open_mpi_crashed_in_init_and_was_relaunched(&out),
        "the README's job failed in its first attempt: {out}"
    );
    let launched = out
        .lines()
        .find_map(|l| l.strip_prefix("eckpt run: launched 6 ranks: "))
        .unwrap_or_else(|| panic!("no launch: {out}"));
    // `node1:0-1 node2:2-3 node3:4-5`: two ranks on each member, none on the spare.
    let nodes: Vec<&str> = launched
        .split(' ')
        .map(|n| n.split(':').next().unwrap())
        .collect();
    assert_eq!(nodes, ["node1", "node2", "node3"], "{launched}");
    assert!(out.contains("(k=2 m=1, full mode, rotated layout)"), "{out}");
    assert_eq!(stencil_checksums(&out, 6).len(), 7, "{out}");
    assert!(
        std::fs::read_dir(work.join("flush")).is_ok_and(|mut d| d.next().is_some()),
        "the last epoch is flushed"
    );
}

/// Whether the job's first attempt ended the one way it may end without eckpt being at fault,
/// and was relaunched once: Open MPI 4.1's TCP transport (Debian 12's 4.1.4), under load,
/// sometimes calls a null callback in a rank still in `MPI_Init` when a faster peer's first
/// message or connection arrives (a core dump shows `mca_btl_tcp.so` calling address 0 from
/// `opal_progress` in `ompi_mpi_init`; the peer then reports "failed to TCP connect"). Its
/// trace: a segmentation fault at address 0 whose backtrace stops at the signal frame (a jump
/// to address 0, not a fault in a function, which would show its callers), before any rank
/// printed a line of its own (MPI_Init precedes everything the example does).
fn open_mpi_crashed_in_init_and_was_relaunched(out: &str) -> bool {
    let Some((first, after)) =
        out.split_once("eckpt run: a rank was killed: restarting from the last committed epoch")
    else {
        return false;
    };
    first.contains("Signal: Segmentation fault (11)")
        && first.contains("Failing at address: (nil)")
        && !first.contains("] [ 1] ")
        && !first.contains("halo steps")
        && after.matches("eckpt run: relaunched 6 ranks").count() == 1
        && !after.contains("srun: error")
}

/// A job whose two ranks, started by srun, each leave a process holding their output (in a
/// session of its own): the step, and the run, end as the ranks do, each rank's
/// `eckpt run-rank` says in one line what it ended, and nothing of it is left running.
fn ends_when_srun_ranks_leave_a_process(slurm: &Slurm, work: &Path) {
    // A duration of its own, to find what this job left and nothing else.
    let sleep = "3711";
    let script = format!(
        "#!/bin/sh\n\
         #SBATCH --nodes=3 --ntasks-per-node=2 --no-kill --output={out}\n\
         cd {work} && exec {eckpt} run --launcher srun --dir {dir} --node-store {work}/local-%n \
         --k 2 --m 1 -n 2 -- sh -c '{leave}; printf \"started \"; {torch}'\n",
        leave = leave_a_process(sleep),
        torch = PRINT_TORCH_ENV,
        out = work.join("job.out").display(),
        work = work.display(),
        eckpt = env!("CARGO_BIN_EXE_eckpt"),
        dir = work.join("cluster").display(),
    );
    let job = slurm.sbatch(work, &script);
    let end = slurm.wait(&job, Duration::from_secs(120));
    let out = std::fs::read_to_string(work.join("job.out")).unwrap_or_default();
    assert!(
        end.contains("JobState=COMPLETED") && end.contains("ExitCode=0:0"),
        "ranks leaving a process: {end}\n{out}"
    );
    // srun's ranks get torch.distributed's variables too.
    assert_torch_env(&out, "started ", 2);
    for rank in 0..2 {
        let said = format!("[{rank}] eckpt run-rank: the rank left ");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&said) && l.ends_with("(sleep) running after it exited: ended it")),
            "rank {rank}: {out}"
        );
    }
    let left = processes_running(&["sleep", sleep]);
    assert!(left.is_empty(), "still running: {left:?}\n{out}");
}

/// The cluster's status, as `eckpt status --json` says it (`None` while it does not answer).
fn status(dir: &Path) -> Option<serde_json::Value> {
    let out = eckpt()
        .args(["status", "--json", "--dir"])
        .arg(dir)
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// A node other than the batch host (`node1`) that holds ranks, once epoch `epoch` has
/// committed.
fn victim_after(dir: &Path, epoch: u64, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = status(dir) {
            if status["committed_epoch"].as_u64().unwrap_or(0) >= epoch {
                let nodes = status["nodes"].as_array().unwrap();
                return nodes
                    .iter()
                    .find(|n| n["name"] != "node1" && !n["ranks"].as_array().unwrap().is_empty())
                    .map(|n| n["name"].as_str().unwrap().to_string())
                    .unwrap_or_else(|| panic!("no rank outside the batch host: {status}"));
            }
        }
        assert!(
            Instant::now() < deadline,
            "epoch {epoch} did not commit in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn work_dir(root: &Path, name: &str) -> PathBuf {
    let work = root.join(name);
    std::fs::create_dir_all(&work).unwrap();
    work
}

/// Runs the MPI example under `eckpt run LAUNCH` on a 4-node allocation that loses a node
/// holding ranks after epoch 3, and checks that it ends as the failure-free run did.
fn survives_a_node_loss(
    slurm: &Slurm,
    work: &Path,
    launch: &str,
    stencil: &Path,
    reference: &Path,
    failure: Failure,
) {
    let expected = stencil_checksums(&std::fs::read_to_string(reference.join("job.out")).unwrap(), 4);
    let job = slurm.sbatch(work, &mpi_job(work, 4, 1, launch, stencil, false));
    let cluster = work.join("cluster");
    let victim = victim_after(&cluster, 3, Duration::from_secs(120));
    if failure == Failure::Slurmd {
        // Slurm takes its time to declare the node down: the job must not end meanwhile,
        // so no epoch commits until then (the ranks wait for it at their next checkpoint).
        let d = cluster.to_str().unwrap();
        ok(&["debug", "pause", "--dir", d, "--at", "before-commit"]);
        slurm.fail(&victim, failure);
        slurm.wait_down(&victim);
        ok(&["debug", "resume", "--dir", d]);
    } else {
        slurm.fail(&victim, failure);
    }
    let end = slurm.wait(&job, Duration::from_secs(240));
    let out = std::fs::read_to_string(work.join("job.out")).unwrap_or_default();
    assert!(
        end.contains("JobState=COMPLETED") && end.contains("ExitCode=0:0"),
        "{launch}: {end}\n{out}"
    );
    let cause = match failure {
        Failure::Crash => "node declared dead",
        Failure::Slurmd => "Slurm took the node out of the job",
    };
    assert!(
        out.contains(&format!("eckpt run: lost {victim} ({cause})")),
        "{launch}: {out}"
    );
    assert!(out.contains("eckpt run: recovered epoch"), "{launch}: {out}");
    // The relaunch that follows the loss (a loaded machine may relaunch once before it).
    let relaunch = out
        .lines()
        .skip_while(|l| !l.starts_with(&format!("eckpt run: lost {victim}")))
        .find(|l| l.starts_with("eckpt run: relaunched 4 ranks"))
        .unwrap_or_else(|| panic!("{launch}: no relaunch after the loss of {victim}: {out}"));
    assert!(
        !relaunch.contains(&format!("{victim}:")),
        "{launch}: a rank on the lost node {victim}: {relaunch}\n{out}"
    );
    assert_eq!(stencil_checksums(&out, 4), expected, "{launch}: {out}");
    for r in 0..4 {
        let log = |dir: &Path| std::fs::read(dir.join(format!("log{r}"))).unwrap();
        assert!(log(work) == log(reference), "{launch}: rank {r}'s log differs");
        assert_eq!(text(&log(work)).lines().count(), 300, "one line per step");
    }
    // The run's steps (agents and ranks) ended with it.
    let steps = slurm_command("squeue")
        .args(["--noheader", "--steps", "--jobs", &job])
        .output()
        .unwrap();
    assert!(
        text(&steps.stdout).trim().is_empty(),
        "{launch}: {}",
        text(&steps.stdout)
    );
}

#[test]
fn mpi_jobs_in_a_slurm_allocation_survive_the_loss_of_a_node() {
    if !is_root() || Command::new("slurmctld").arg("-V").output().is_err() {
        eprintln!("skipped: needs root and Debian's slurm-wlm (`make setup`)");
        return;
    }
    let _turn = SLURM.lock().unwrap_or_else(|e| e.into_inner());
    let _machine_turn = machine_turn();
    let tmp = tempfile::tempdir().unwrap();
    let stencil = build_stencil(tmp.path());
    let stencil_mpich = build_stencil_mpich(tmp.path());
    let hostfile = tmp.path().join("hosts");
    std::fs::write(
        &hostfile,
        "node1 slots=2\nnode2 slots=2\nnode3 slots=2\nnode4 slots=2\n",
    )
    .unwrap();
    let srun = "--launcher srun --launcher-args=--mpi=pmix";

    // Failure-free, on 3 nodes, the agents storing where eckpt has them by default.
    let slurm = Slurm::up(4);
    let reference = work_dir(tmp.path(), "reference");
    let job = slurm.sbatch(&reference, &mpi_job(&reference, 3, 0, srun, &stencil, true));
    let end = slurm.wait(&job, Duration::from_secs(180));
    let out = std::fs::read_to_string(reference.join("job.out")).unwrap_or_default();
    assert!(
        end.contains("JobState=COMPLETED") && end.contains("ExitCode=0:0"),
        "{end}\n{out}"
    );
    // The job finished: its node stores are gone (the emulated nodes share /tmp).
    assert!(
        out.contains("eckpt run: the job finished: removed its node stores"),
        "{out}"
    );
    for node in ["node1", "node2", "node3"] {
        let store = PathBuf::from(format!("/tmp/eckpt-job{job}-{node}"));
        assert!(!store.exists(), "{} is left\n{out}", store.display());
    }
    // With no --domain, the failure domains are Slurm's leaf switches (two nodes each).
    let journal: serde_json::Value =
        serde_json::from_slice(&std::fs::read(reference.join("cluster/coordinator/journal.json")).unwrap())
            .unwrap();
    for (node, switch) in [("node1", "leaf1"), ("node2", "leaf1"), ("node3", "leaf2")] {
        assert_eq!(journal["nodes"][node]["domain"], switch, "{node}: {journal}");
    }
    runs_the_readme_job(&slurm, &work_dir(tmp.path(), "readme"), &stencil);
    ends_when_srun_ranks_leave_a_process(&slurm, &work_dir(tmp.path(), "leftover"));

    let work = work_dir(tmp.path(), "srun");
    survives_a_node_loss(&slurm, &work, srun, &stencil, &reference, Failure::Crash);
    // Every loss leaves a node dead: a new Slurm for each.
    drop(slurm);
    let mpirun = format!("--launcher mpirun --hostfile {}", hostfile.display());
    let work = work_dir(tmp.path(), "mpirun");
    survives_a_node_loss(
        &Slurm::up(4),
        &work,
        &mpirun,
        &stencil,
        &reference,
        Failure::Crash,
    );
    let mpiexec = format!("--launcher mpiexec --hostfile {}", hostfile.display());
    let work = work_dir(tmp.path(), "mpiexec");
    survives_a_node_loss(
        &Slurm::up(4),
        &work,
        &mpiexec,
        &stencil_mpich,
        &reference,
        Failure::Crash,
    );
    // A node whose slurmd dies while eckpt's agent runs on: only Slurm's view tells.
    let work = work_dir(tmp.path(), "slurmd");
    survives_a_node_loss(&Slurm::up(4), &work, srun, &stencil, &reference, Failure::Slurmd);
}
