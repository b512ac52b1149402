//! `eckpt delta` and `eckpt patch`: block deltas between two images written by any
//! checkpointer (BLCR, DMTCP, CRIU, an application's own dump), the fast replacement for
//! diffing consecutive dumps with xdelta.

use std::path::PathBuf;

use anyhow::Result;
use eckpt_capture::{delta_files, patch_file};

use crate::output::print_json;
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct DeltaArgs {
    /// The previous image.
    base: PathBuf,
    /// The new image.
    new: PathBuf,
    /// Delta file to write (atomically).
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Comparison block size (4KiB matches page-granular images).
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    block_size: u64,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct PatchArgs {
    /// The image the delta was taken against.
    base: PathBuf,
    /// Delta written by `eckpt delta`.
    delta: PathBuf,
    /// Rebuilt new image to write (atomically).
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

pub fn run_delta(args: DeltaArgs) -> Result<i32> {
    let block = u32::try_from(args.block_size).map_err(|_| anyhow::anyhow!("block size too large"))?;
    let stats = delta_files(&args.base, &args.new, &args.out, block)?;
    if args.json {
        print_json(&stats);
    } else {
        println!(
            "{} of {} bytes changed ({} blocks); delta {} bytes written to {} in {:.3} s",
            stats.bytes_changed,
            stats.new_bytes,
            stats.blocks_changed,
            stats.delta_bytes,
            args.out.display(),
            stats.seconds
        );
    }
    Ok(0)
}

pub fn run_patch(args: PatchArgs) -> Result<i32> {
    let stats = patch_file(&args.base, &args.delta, &args.out)?;
    if args.json {
        print_json(&stats);
    } else {
        println!(
            "patched {} bytes in {} {}; {} bytes written to {} in {:.3} s",
            stats.bytes_patched,
            stats.runs,
            if stats.runs == 1 { "run" } else { "runs" },
            stats.new_bytes,
            args.out.display(),
            stats.seconds
        );
    }
    Ok(0)
}
