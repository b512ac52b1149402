//! The C API in cluster mode: three processes of `examples/c/mat.c` (linked to libeckpt,
//! configured only through ECKPT_CLUSTER / ECKPT_WORLD / ECKPT_RANK) checkpoint into a
//! running cluster; a node dies with its data; after `eckpt recover` the job restarts and
//! ends with the checksums and logs of an uninterrupted standalone run.

mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cluster::{ok, Cluster};

const WORLD: usize = 3;

/// `target/<profile>/deps`, where cargo puts libeckpt.so when it builds the client crate in
/// the same run (`cargo test --workspace`, as `make test` does).
fn lib_dir() -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let profile = deps.parent().unwrap().to_path_buf();
    [deps, profile]
        .into_iter()
        .find(|d| d.join("libeckpt.so").is_file())
        .expect("libeckpt.so is not built: run `cargo build --release` or the whole workspace's tests")
}

fn build_mat(out: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = lib_dir();
    let exe = out.join("mat");
    let status = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Werror", "-I"])
        .arg(repo.join("include"))
        .arg(repo.join("examples/c/mat.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-leckpt", "-lm"])
        .status()
        .unwrap();
    assert!(status.success(), "mat.c does not compile");
    exe
}

/// Runs every rank of the job concurrently with `env` and `steps`; their outputs.
fn job(mat: &Path, work: &Path, steps: u32, env: &dyn Fn(usize) -> Vec<(String, String)>) -> Vec<Output> {
    let children: Vec<_> = (0..WORLD)
        .map(|r| {
            Command::new(mat)
                .current_dir(work)
                .envs(env(r))
                .args(["-m", "8", "-s", &steps.to_string(), "-k", "5"])
                .args(["-l", &format!("{}/rank{r}.log", work.display())])
                .args(["-i", &format!("{}/input{r}", work.display())])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
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

    let in_cluster = |r: usize| {
        vec![
            ("ECKPT_CLUSTER".to_string(), c.d().to_string()),
            ("ECKPT_WORLD".to_string(), WORLD.to_string()),
            ("ECKPT_RANK".to_string(), r.to_string()),
        ]
    };
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
