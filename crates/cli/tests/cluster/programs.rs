//! The example programs built against the libeckpt of this build, for tests that run them
//! as ranks: `examples/c/<name>.c` with cc, `examples/mpi/stencil.c` with Open MPI's or
//! MPICH's mpicc.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/<profile>/deps`, where cargo puts libeckpt.so when it builds the client crate in
/// the same run (`cargo test --workspace`, as `make test` does), or `target/<profile>`.
pub fn lib_dir() -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let profile = deps.parent().unwrap().to_path_buf();
    [deps, profile]
        .into_iter()
        .find(|d| d.join("libeckpt.so").is_file())
        .expect("libeckpt.so is not built: run `cargo build --release` or the whole workspace's tests")
}

/// Compiles `source` with `compiler` into `out/<name>`, warnings as errors, linked to
/// libeckpt.so by rpath — an old-style `DT_RPATH`, which the loader searches before
/// `LD_LIBRARY_PATH`: cargo runs tests with `target/<profile>` on that path, where an older
/// `cargo build` may have left an older libeckpt.so than the one this build made.
fn build(compiler: &str, source: &Path, out: &Path, name: &str) -> PathBuf {
    let lib = lib_dir();
    let exe = out.join(name);
    let output = Command::new(compiler)
        .args(["-std=c11", "-O2", "-Wall", "-Werror", "-I"])
        .arg(repo().join("include"))
        .arg(source)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .args(["-leckpt", "-lm"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler}: {e} (`make setup` installs it)"));
    assert!(
        output.status.success(),
        "{} does not compile: {}",
        source.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    exe
}

/// `examples/c/<name>.c` built into `out`.
pub fn build_c(name: &str, out: &Path) -> PathBuf {
    build("cc", &repo().join(format!("examples/c/{name}.c")), out, name)
}

/// `examples/mpi/stencil.c` built into `out` with Open MPI's mpicc.
pub fn build_stencil(out: &Path) -> PathBuf {
    build("mpicc", &repo().join("examples/mpi/stencil.c"), out, "stencil")
}

/// `examples/mpi/stencil.c` built into `out` with MPICH's mpicc, as `stencil-mpich`.
pub fn build_stencil_mpich(out: &Path) -> PathBuf {
    build(
        "mpicc.mpich",
        &repo().join("examples/mpi/stencil.c"),
        out,
        "stencil-mpich",
    )
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines rank `rank` printed through `eckpt run`, without the `[R] ` prefix.
pub fn rank_lines(out: &[u8], rank: u32) -> Vec<String> {
    let prefix = format!("[{rank}] ");
    text(out)
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(String::from))
        .collect()
}

/// What a failure-free run of `mat` prints and logs, per rank: standalone checkpoints in
/// a store of its own, one process per rank.
pub fn reference(mat: &Path, dir: &Path, ranks: u32, mat_args: &[&str]) -> BTreeMap<u32, (String, Vec<u8>)> {
    std::fs::create_dir_all(dir).unwrap();
    (0..ranks)
        .map(|r| {
            std::fs::write(dir.join(format!("input{r}")), format!("input of rank {r}")).unwrap();
            let out = Command::new(mat)
                .args(mat_args)
                .current_dir(dir)
                .env("ECKPT_DIR", dir.join("store"))
                .env("ECKPT_RANK", r.to_string())
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out.stderr));
            let sum = text(&out.stdout).trim().to_string();
            (r, (sum, std::fs::read(dir.join(format!("log{r}"))).unwrap()))
        })
        .collect()
}

/// Each rank of an `eckpt run` of `mat` in `work` (its stdout `out`) ended with the checksum
/// and the log of the failure-free run.
pub fn assert_failure_free(
    out: &[u8],
    work: &Path,
    expected: &BTreeMap<u32, (String, Vec<u8>)>,
    context: &str,
) {
    for (r, (sum, log)) in expected {
        let lines = rank_lines(out, *r);
        assert_eq!(lines.last(), Some(sum), "{context}: rank {r}'s checksum");
        let got = std::fs::read(work.join(format!("log{r}"))).unwrap();
        assert!(
            got == *log,
            "{context}: rank {r}'s log differs from the failure-free run"
        );
    }
}

/// What each of `ranks` ranks of the MPI example printed last (its checksum), and rank 0's
/// plate checksum: equal lists, equal results.
pub fn stencil_checksums(out: &str, ranks: u32) -> Vec<String> {
    let mut sums: Vec<String> = (0..ranks)
        .map(|r| {
            out.lines()
                .rfind(|l| l.starts_with(&format!("[{r}] checksum: ")))
                .unwrap_or_else(|| panic!("rank {r} printed no checksum: {out}"))
                .to_string()
        })
        .collect();
    sums.push(
        out.lines()
            .find(|l| l.starts_with("[0] plate checksum: "))
            .unwrap_or_else(|| panic!("no plate checksum: {out}"))
            .to_string(),
    );
    sums
}
