//! The C API in cluster mode: three processes of `examples/c/mat.c` (linked to libeckpt,
//! configured only through ECKPT_CLUSTER / ECKPT_WORLD / ECKPT_RANK) checkpoint into a
//! running cluster; a node dies with its data; after `eckpt recover` the job restarts and
//! ends with the checksums and logs of an uninterrupted standalone run. Before recovery, a
//! rank of the lost node is refused a restart, never given a fresh start, and so is a job
//! restarted with another number of ranks.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cluster::{ok, Cluster};

const WORLD: usize = 3;

fn build_mat(out: &Path) -> PathBuf {
    cluster::programs::build_c("mat", out)
}

/// The command line of rank `r` running `steps` steps in `work`.
fn rank(mat: &Path, work: &Path, r: usize, steps: u32) -> Command {
    let mut command = Command::new(mat);
    command
        .current_dir(work)
        .args(["-m", "8", "-s", &steps.to_string(), "-k", "5"])
        .args(["-l", &format!("{}/rank{r}.log", work.display())])
        .args(["-i", &format!("{}/input{r}", work.display())])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command
}

/// Environment of rank `r` of a job of `world` ranks in cluster `c`.
fn in_cluster(c: &Cluster, r: usize, world: usize) -> Vec<(String, String)> {
    vec![
        ("ECKPT_CLUSTER".to_string(), c.d().to_string()),
        ("ECKPT_WORLD".to_string(), world.to_string()),
        ("ECKPT_RANK".to_string(), r.to_string()),
    ]
}

/// Runs every rank of the job concurrently with `env` and `steps`; their outputs.
fn job(mat: &Path, work: &Path, steps: u32, env: &dyn Fn(usize) -> Vec<(String, String)>) -> Vec<Output> {
    let children: Vec<_> = (0..WORLD)
        .map(|r| rank(mat, work, r, steps).envs(env(r)).spawn().unwrap())
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            out
        })
        .collect()
}

#[test]
fn a_c_job_restarts_after_losing_a_node() {
    let c = Cluster::up(&[
        "--nodes",
        "5",
        "--k",
        "3",
        "--m",
        "2",
        "--mode",
        "update",
        "--block-size",
        "64KiB",
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let (reference, work) = (tmp.path().join("reference"), tmp.path().join("job"));
    for dir in [&reference, &work] {
        std::fs::create_dir_all(dir).unwrap();
        for r in 0..WORLD {
            std::fs::write(dir.join(format!("input{r}")), format!("rank {r}")).unwrap();
        }
    }
    let mat = build_mat(tmp.path());

    let store = reference.join("store");
    let standalone = |r: usize| {
        vec![
            ("ECKPT_DIR".to_string(), store.display().to_string()),
            ("ECKPT_RANK".to_string(), r.to_string()),
        ]
    };
    let expected = job(&mat, &reference, 30, &standalone);

    let in_cluster = |r: usize| in_cluster(&c, r, WORLD);
    job(&mat, &work, 15, &in_cluster);
    assert_eq!(c.committed(), 3, "epochs at steps 5, 10 and 15");
    let victim = c.nodes_with_ranks()[1].clone();
    c.kill(&victim, true);
    c.wait_down(&victim);
    ok(&["recover", "--dir", c.d()]);
    let restarted = job(&mat, &work, 30, &in_cluster);
    for r in 0..WORLD {
        let stderr = String::from_utf8_lossy(&restarted[r].stderr);
        assert!(
            stderr.contains("restarted from epoch 3 at step 15"),
            "rank {r}: {stderr}"
        );
        assert_eq!(restarted[r].stdout, expected[r].stdout, "rank {r}: checksum");
        let log = |dir: &Path| std::fs::read(dir.join(format!("rank{r}.log"))).unwrap();
        assert_eq!(log(&work), log(&reference), "rank {r}: log");
    }
    let sums: std::collections::BTreeSet<_> = expected.iter().map(|o| o.stdout.clone()).collect();
    assert_eq!(sums.len(), WORLD, "every rank's state is its own");
}

#[test]
fn restart_refuses_a_lost_node_or_another_job_size_until_recovered() {
    let c = Cluster::up(&["--nodes", "5", "--k", "3", "--m", "2", "--block-size", "64KiB"]);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("job");
    std::fs::create_dir_all(&work).unwrap();
    for r in 0..WORLD {
        std::fs::write(work.join(format!("input{r}")), format!("rank {r}")).unwrap();
    }
    let mat = build_mat(tmp.path());
    job(&mat, &work, 10, &|r| in_cluster(&c, r, WORLD));
    assert_eq!(c.committed(), 2, "epochs at steps 5 and 10");

    let status = c.status();
    let (victim, lost) = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|n| {
            let ranks = n["ranks"].as_array().unwrap();
            (!ranks.is_empty()).then(|| {
                (
                    n["name"].as_str().unwrap().to_string(),
                    ranks[0].as_u64().unwrap() as usize,
                )
            })
        })
        .unwrap();
    c.kill(&victim, true);
    c.wait_down(&victim);
    let log = std::fs::read(work.join(format!("rank{lost}.log"))).unwrap();

    // The relaunched rank of the lost node: an error naming the way out, not a fresh start.
    let refused = rank(&mat, &work, lost, 20)
        .envs(in_cluster(&c, lost, WORLD))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "eckpt_restart failed: cluster unreachable, request refused, or epoch aborted: \
             cluster: rank {lost}'s node {victim} is down: run `eckpt recover`"
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(work.join(format!("rank{lost}.log"))).unwrap(),
        log,
        "log untouched"
    );

    // A rank on a live node, restarted as part of a job of another size.
    let alive = (lost + 1) % WORLD;
    let resized = rank(&mat, &work, alive, 20)
        .envs(in_cluster(&c, alive, WORLD + 1))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resized.stderr);
    assert!(!resized.status.success(), "{stderr}");
    assert!(
        stderr.contains("eckpt_restart failed: checkpoint does not match what is protected")
            && stderr.contains("the job was checkpointed with 3 ranks but restarts with 4"),
        "{stderr}"
    );

    ok(&["recover", "--dir", c.d()]);
    let resumed = rank(&mat, &work, lost, 10)
        .envs(in_cluster(&c, lost, WORLD))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(stderr.contains("restarted from epoch 2 at step 10"), "{stderr}");
}
