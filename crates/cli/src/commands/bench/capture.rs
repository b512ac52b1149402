//! `eckpt bench capture`: what a rank pays at checkpoint to find and copy what changed
//! (kernel write tracking and hashing), next to xdelta3 and `eckpt delta` on the same images
//! in the same run, plus the cost of write tracking between checkpoints.

use std::path::PathBuf;

use anyhow::Result;
use eckpt_capture::bench::{run_capture_bench, CaptureBenchOptions, Pattern};

use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Image size.
    #[arg(long, default_value = "512MiB", value_parser = parse_size)]
    size: u64,
    /// Change pattern: mat (0.1% of pages, scattered) or lu (60% of pages, sweeps).
    #[arg(long, default_value = "mat")]
    pattern: Pattern,
    /// Block size of the hash backend.
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    hash_block_size: u64,
    /// Directory for the image files the file-based deltas read (default: the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Skip the xdelta3 reference (minutes on a 512 MiB LU image).
    #[arg(long)]
    no_xdelta3: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<i32> {
    let options = CaptureBenchOptions {
        size: usize::try_from(args.size)?,
        pattern: args.pattern,
        hash_block_size: usize::try_from(args.hash_block_size)?,
        dir: args.dir,
        run_xdelta3: !args.no_xdelta3,
        ..CaptureBenchOptions::default()
    };
    let report = run_capture_bench(&options)?;
    if args.json {
        print_json(&report);
    } else {
        println!(
            "capture bench: {} MiB, pattern {}, {} pages changed ({} bytes)",
            report.size >> 20,
            report.pattern,
            report.pages_changed,
            report.bytes_changed
        );
        for b in &report.backends {
            let ratio = b
                .speedup_vs_xdelta3
                .map(|r| format!(", {r:.0}x faster than xdelta3"))
                .unwrap_or_default();
            println!(
                "  {:<5} find {:.2} ms + copy {:.2} ms = {:.2} ms, delta {} bytes{ratio}; clean scan {:.1} ms/GiB",
                serde_json::to_value(b.backend)?.as_str().unwrap_or("?"),
                b.collect_seconds * 1e3,
                b.copy_seconds * 1e3,
                b.seconds * 1e3,
                b.delta_bytes,
                b.clean_collect_ms_per_gib
            );
        }
        if let Some(x) = &report.xdelta3 {
            println!("  xdelta3 {:.2} s, delta {} bytes", x.seconds, x.delta_bytes);
        }
        println!(
            "  eckpt delta (files) {:.3} s, delta {} bytes",
            report.delta_files.seconds, report.delta_files.delta_bytes
        );
        if let Some(cost) = &report.tracking_cost {
            println!(
                "  write tracking: {:.2} us per first write to a page",
                cost.us_overhead_per_first_write
            );
        }
        report.notes.iter().for_each(|n| println!("  note: {n}"));
    }
    Ok(0)
}
