//! The example programs built against the libeckpt of this build, for tests that run them
//! as ranks: `examples/c/<name>.c` with cc, `examples/mpi/stencil.c` with Open MPI's mpicc.

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
/// libeckpt.so by rpath.
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
        .arg(format!("-Wl,-rpath,{}", lib.display()))
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
