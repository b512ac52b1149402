//! `eckpt report`: one self-contained HTML page (inline SVG plots, no scripts, nothing
//! fetched) from `eckpt bench cluster --json` results and `eckpt run` records — given as
//! files, or the runs of a cluster directory — with the model's prediction beside each
//! measurement.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use eckpt_model::Machine;
use eckpt_report::inputs::{self, Input};
use eckpt_report::predictions::Costs;
use serde::Serialize;

use super::calibrate;
use crate::output::{default_threads, print_json};

#[derive(clap::Args)]
pub struct Args {
    /// Result files: `eckpt bench cluster --json` output (one result or a list) and `eckpt
    /// run` records.
    files: Vec<PathBuf>,
    /// A cluster directory: its runs (runs/*.json) are reported, and its calibration
    /// (model.json) prices the predictions.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Costs for the predictions from this calibration file (default: the cluster's, else
    /// the model's reference costs).
    #[arg(long)]
    machine: Option<PathBuf>,
    /// Where to write the page.
    #[arg(short, long, default_value = "report.html")]
    output: PathBuf,
    /// Print a JSON summary of what was written.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Summary {
    output: PathBuf,
    bytes: usize,
    files: Vec<PathBuf>,
    bench_results: usize,
    runs: usize,
    costs: String,
}

/// The JSON files directly in `dir`, sorted; none if it does not exist.
fn json_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

pub fn run(args: Args) -> Result<i32> {
    let mut files = args.files.clone();
    if let Some(dir) = &args.dir {
        if !dir.join("cluster.json").is_file() {
            bail!("{} is not a cluster directory (no cluster.json)", dir.display());
        }
        files.extend(json_files(&dir.join("runs"))?);
    }
    if files.is_empty() {
        bail!("nothing to report: give result files (eckpt bench cluster --json, eckpt run records) or --dir with runs");
    }
    let mut parsed = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        parsed.push((name.clone(), inputs::parse(&name, &bytes)?));
    }
    let calibration = match (&args.machine, &args.dir) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(dir)) => Some(calibrate::path_in(dir)).filter(|p| p.exists()),
        (None, None) => None,
    };
    let (machine, costs_from) = match &calibration {
        Some(path) => (
            calibrate::load(path)?.machine,
            format!("calibration {}", path.display()),
        ),
        None => (Machine::reference(1e9), "the model's reference costs".to_string()),
    };
    let costs = Costs {
        machine,
        host_cores: default_threads() as f64,
    };
    let meta = format!(
        "{} {}: {}. Predictions priced with {costs_from}, at each result's measured link rate.",
        files.len(),
        if files.len() == 1 { "file" } else { "files" },
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let html = eckpt_report::report(&parsed, &costs, &meta);
    std::fs::write(&args.output, &html).with_context(|| format!("writing {}", args.output.display()))?;
    let count = |bench: bool| {
        parsed
            .iter()
            .map(|(_, i)| match i {
                Input::Bench(b) if bench => b.len(),
                Input::Run(_) if !bench => 1,
                _ => 0,
            })
            .sum()
    };
    let summary = Summary {
        output: args.output.clone(),
        bytes: html.len(),
        files,
        bench_results: count(true),
        runs: count(false),
        costs: costs_from,
    };
    if args.json {
        print_json(&summary);
    } else {
        let plural = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        println!(
            "wrote {} ({} bytes): {}, {}",
            summary.output.display(),
            summary.bytes,
            plural(summary.bench_results, "benchmark result", "benchmark results"),
            plural(summary.runs, "run", "runs")
        );
    }
    Ok(0)
}
