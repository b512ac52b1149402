//! `eckpt verify`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use eckpt_shards::verify_dir;

use crate::output::{byte_progress, print_json};

/// Exit status when blocks are damaged but decode can still rebuild the input.
pub const EXIT_DAMAGED_RECOVERABLE: i32 = 3;

#[derive(clap::Args)]
#[command(after_help = "Exit status: 0 intact, 3 damaged but recoverable, 1 unrecoverable or error.")]
pub struct Args {
    /// Shard directory written by `eckpt encode`.
    dir: PathBuf,
    /// Print the per-shard report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<i32> {
    let bar = byte_progress(super::decode::input_len(&args.dir), "verify", args.json);
    let report = verify_dir(&args.dir, &|done| bar.set_position(done));
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        print_json(&report);
    } else {
        for shard in &report.shards {
            let detail = match (shard.status, shard.first_bad_stripe) {
                ("damaged", Some(first)) => {
                    format!(" ({} bad blocks, first at stripe {first})", shard.bad_blocks)
                }
                ("damaged", None) => " (wrong length)".to_string(),
                _ => String::new(),
            };
            println!("{:<10} {}{detail}", shard.file, shard.status);
        }
    }
    if report.input_hash == "mismatch" {
        bail!(
            "{}: the shards do not hold the input the manifest describes (input_len or input_xxh3 \
             changed): the manifest cannot be trusted",
            report.dir
        );
    }
    if !report.recoverable {
        bail!(
            "{}: {} of {} stripes have more than m={} damaged shards; the input cannot be rebuilt",
            report.dir,
            report.unrecoverable_stripes.max(1),
            report.stripes,
            report.m
        );
    }
    if report.intact {
        if !args.json {
            println!(
                "intact: all {} shards and {} stripes check out",
                report.shards.len(),
                report.stripes
            );
        }
        return Ok(0);
    }
    if !args.json {
        println!(
            "damaged but recoverable: {} stripes affected, at most {} of m={} shards lost in any stripe",
            report.damaged_stripes, report.worst_stripe_damage, report.m
        );
    }
    Ok(EXIT_DAMAGED_RECOVERABLE)
}
