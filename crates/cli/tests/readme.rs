//! Every example in README.md runs as written. A ```` ```sh ```` block is an example: this test
//! runs it with bash (`set -euo pipefail`) in a scratch directory, with the `eckpt` under test
//! first on `PATH`, and fails with its output if it fails. A block the test cannot run — it
//! needs a Slurm allocation, several hosts, or it is `make test` itself — says so on the line
//! before it, with the reason and the test that runs it instead:
//!
//! ```text
//! <!-- readme-test: not run: needs a Slurm allocation; tests/slurm.rs runs it scaled down -->
//! ```
//!
//! A synopsis (`[--option]`, `A|B`, placeholders in capitals) is not an example: it is fenced
//! as ```` ```text ````, and a `sh` block that looks like one fails this test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What precedes a block the test does not run.
const NOT_RUN: &str = "<!-- readme-test: not run: ";

/// A fenced `sh` block: the README line it starts on, whether it is marked not run (and
/// why), and its text.
struct Block {
    line: usize,
    not_run: Option<String>,
    text: String,
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

fn sh_blocks(readme: &str) -> Vec<Block> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let fence = lines[i].trim_start();
        if !fence.starts_with("```") {
            i += 1;
            continue;
        }
        let language = fence.trim_start_matches('`').trim();
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .unwrap_or_else(|| panic!("README.md:{}: a code block is never closed", start + 1));
        if language == "sh" {
            let not_run = start
                .checked_sub(1)
                .and_then(|before| lines[before].strip_prefix(NOT_RUN))
                .map(|reason| reason.trim_end_matches("-->").trim().to_string());
            blocks.push(Block {
                line: start + 1,
                not_run,
                text: lines[start + 1..end].join("\n"),
            });
        }
        i = end + 1;
    }
    blocks
}

/// Why a block reads as a synopsis rather than a command line, if it does.
fn synopsis(text: &str) -> Option<&'static str> {
    let code: String = text
        .lines()
        .map(|l| l.split(" # ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    if code.contains(" [--") || code.contains(" [-") {
        Some("optional flags in brackets")
    } else if code.contains("...") || code.contains('…') {
        Some("an ellipsis")
    } else {
        None
    }
}

/// The directory of the `eckpt` binary this test run built.
fn eckpt_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_eckpt"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[test]
fn every_example_in_the_readme_runs_as_written() {
    let readme = readme();
    let blocks = sh_blocks(&readme);
    assert!(!blocks.is_empty(), "README.md has no sh block");
    let path = format!(
        "{}:{}",
        eckpt_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for block in &blocks {
        if let Some(reason) = &block.not_run {
            assert!(
                reason.len() > 10,
                "README.md:{}: say why the block is not run",
                block.line
            );
            continue;
        }
        if let Some(why) = synopsis(&block.text) {
            panic!(
                "README.md:{}: an sh block with {why} is a synopsis, not an example: fence it as text\n{}",
                block.line, block.text
            );
        }
        let scratch = tempfile::tempdir().unwrap();
        let started = Instant::now();
        let output = Command::new("bash")
            .args(["-c", &format!("set -euo pipefail\n{}", block.text)])
            .current_dir(scratch.path())
            .env("PATH", &path)
            .env("HOME", scratch.path())
            .env_remove("ECKPT_CONFIG")
            .env_remove("ECKPT_CLUSTER")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "README.md:{}: the example failed ({}):\n{}\n--- stdout\n{}--- stderr\n{}",
            block.line,
            output.status,
            block.text,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        eprintln!(
            "README.md:{}: ran in {:.1} s",
            block.line,
            started.elapsed().as_secs_f64()
        );
        assert!(started.elapsed() < Duration::from_secs(600));
        ran += 1;
    }
    assert!(ran >= 3, "only {ran} README examples ran: most should");
}

/// The marker and synopsis rules themselves, on a small README.
#[test]
fn blocks_are_found_with_their_markers() {
    let text = "intro\n```sh\necho one\n```\n<!-- readme-test: not run: needs a Slurm allocation -->\n```sh\nsbatch job.sh\n```\n```text\neckpt up [--k K]\n```\n";
    let blocks = sh_blocks(text);
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        (
            blocks[0].line,
            blocks[0].not_run.as_deref(),
            blocks[0].text.as_str()
        ),
        (2, None, "echo one")
    );
    assert_eq!(blocks[1].not_run.as_deref(), Some("needs a Slurm allocation"));
    assert_eq!(
        synopsis("eckpt up --dir D [--spares 1]"),
        Some("optional flags in brackets")
    );
    assert_eq!(
        synopsis("eckpt status --dir ck   # [--json] prints it as JSON"),
        None
    );
}
