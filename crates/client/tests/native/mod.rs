//! What the tests of native programs share: the libeckpt.so of this build, and C programs
//! compiled against it and `include/eckpt.h`, warnings as errors.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A command for `exe` checkpointing into `store` as rank 0, whatever eckpt settings the
/// environment of the test run holds.
pub fn rank_command(exe: &Path, store: &Path) -> Command {
    let mut command = Command::new(exe);
    command.env("ECKPT_DIR", store).env("ECKPT_RANK", "0");
    for variable in [
        "ECKPT_TRACK",
        "ECKPT_BLOCK_SIZE",
        "ECKPT_KEEP",
        "ECKPT_MAX_CHAIN",
        "OMPI_COMM_WORLD_RANK",
        "PMI_RANK",
        "SLURM_PROCID",
    ] {
        command.env_remove(variable);
    }
    command
}

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding libeckpt.so of this build: the directory of this test binary,
/// `target/<profile>/deps/`. Cargo builds the library target with all its crate types (rlib,
/// cdylib, staticlib) in one rustc run before it links any integration test of the package,
/// so the cdylib there is the one built from the sources under test. (`cargo test` does not
/// copy it up to `target/<profile>/`; only `cargo build` does.)
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .expect("test binary is in target/<profile>/deps")
        .to_path_buf();
    assert!(
        dir.join("libeckpt.so").is_file(),
        "libeckpt.so is not in {}",
        dir.display()
    );
    dir
}

/// Runs a compiler, failing the test with its diagnostics.
pub fn compile(mut command: Command) {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Compiles the C program `source` into `out/<its stem>`, warnings as errors, linked to
/// libeckpt.so by an rpath the loader searches before `LD_LIBRARY_PATH` (`DT_RPATH`, not
/// `DT_RUNPATH`): `cargo test` puts `target/<profile>/` there, where a `cargo build` of
/// another day may have left an older libeckpt.so.
pub fn build_c(source: &Path, out: &Path) -> PathBuf {
    let lib = lib_dir();
    let exe = out.join(source.file_stem().expect("a source file name"));
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(repo().join("include"))
        .arg(source)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,--disable-new-dtags,-rpath,{}", lib.display()))
        .args(["-leckpt", "-lm"]);
    compile(cc);
    exe
}
