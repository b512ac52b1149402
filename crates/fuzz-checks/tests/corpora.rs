//! Every stored fuzz corpus, replayed through its target's check on the stable toolchain:
//! the inputs cargo-fuzz kept for their coverage, and every input that once crashed a parser
//! (kept in the corpus as its regression test), run in `make test`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use eckpt_fuzz_checks::TARGETS;

fn corpora() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_file_passes_its_targets_check() {
    let mut failed = Vec::new();
    for target in TARGETS {
        let dir = corpora().join(target.name);
        let inputs = files(&dir);
        assert!(
            inputs.len() >= 10,
            "{}: only {} inputs; run `make fuzz` and keep its corpus",
            dir.display(),
            inputs.len()
        );
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            if catch_unwind(AssertUnwindSafe(|| (target.check)(&data))).is_err() {
                failed.push(input.display().to_string());
            }
        }
    }
    assert!(failed.is_empty(), "inputs that fail their check: {failed:?}");
}

/// A corpus directory that no target reads would be replayed by nothing: each is a target's.
#[test]
fn every_corpus_directory_belongs_to_a_target() {
    for entry in std::fs::read_dir(corpora()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            TARGETS.iter().any(|t| t.name == name),
            "fuzz/corpus/{name} belongs to no fuzz target"
        );
    }
}
