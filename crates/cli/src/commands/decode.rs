//! `eckpt decode`.

use std::path::PathBuf;

use anyhow::Result;
use eckpt_shards::decode_dir;

use crate::output::{byte_progress, default_threads, print_json};

#[derive(clap::Args)]
pub struct Args {
    /// Shard directory written by `eckpt encode`.
    dir: PathBuf,
    /// File to write (replaced atomically, only if decoding succeeds).
    #[arg(long)]
    out: PathBuf,
    /// Rebuild threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<i32> {
    let bar = byte_progress(input_len(&args.dir), "decode", args.json);
    let summary = decode_dir(
        &args.dir,
        &args.out,
        args.threads.unwrap_or_else(default_threads),
        &|done| bar.set_position(done),
    );
    bar.finish_and_clear();
    let summary = summary?;
    if args.json {
        print_json(&summary);
    } else {
        println!(
            "decoded {} bytes to {} ({} of {} stripes rebuilt, {} blocks) in {:.2} s",
            summary.output_bytes,
            summary.out,
            summary.stripes_rebuilt,
            summary.stripes,
            summary.blocks_rebuilt,
            summary.seconds
        );
    }
    Ok(0)
}

/// The input length the manifest records, for the progress bar (0 if unreadable: decode
/// itself reports why).
pub fn input_len(dir: &std::path::Path) -> u64 {
    std::fs::read(dir.join(eckpt_shards::manifest::MANIFEST_FILE))
        .ok()
        .and_then(|b| eckpt_shards::Manifest::parse(&b).ok())
        .map_or(0, |m| m.input_len)
}
