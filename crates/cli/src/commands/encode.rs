//! `eckpt encode`.

use std::path::PathBuf;

use anyhow::Result;
use eckpt_codec::CodeKind;
use eckpt_shards::{encode_file, EncodeOptions};

use crate::output::{byte_progress, default_threads, print_json};
use crate::size::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Data shards.
    #[arg(long)]
    k: usize,
    /// Parity shards (losses tolerated).
    #[arg(long)]
    m: usize,
    /// Generator matrix: ISA-L's Cauchy (MDS) or RS/Vandermonde (m=1 is XOR parity).
    #[arg(long, value_enum, default_value = "cauchy")]
    code: CodeArg,
    /// Bytes per shard per stripe (e.g. 64KiB, 1MiB).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    block_size: u64,
    /// Encoding threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
    /// File to encode.
    input: PathBuf,
    /// Directory for manifest.json and shard.000 … (created; must not hold a manifest yet).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CodeArg {
    Cauchy,
    Rs,
}

pub fn run(args: Args) -> Result<i32> {
    let total = std::fs::metadata(&args.input).map(|m| m.len()).unwrap_or(0);
    let bar = byte_progress(total, "encode", args.json);
    let options = EncodeOptions {
        kind: match args.code {
            CodeArg::Cauchy => CodeKind::Cauchy,
            CodeArg::Rs => CodeKind::Rs,
        },
        k: args.k,
        m: args.m,
        block_size: args.block_size,
        threads: args.threads.unwrap_or_else(default_threads),
    };
    let summary = encode_file(&args.input, &args.out, &options, &|done| bar.set_position(done));
    bar.finish_and_clear();
    let summary = summary?;
    if args.json {
        print_json(&summary);
    } else {
        println!(
            "encoded {} bytes into {} ({} code, k={}, m={}, {} stripes of {} B blocks) in {:.2} s ({:.2} GB/s)",
            summary.input_bytes,
            summary.out_dir,
            summary.code,
            summary.k,
            summary.m,
            summary.stripes,
            summary.block_size,
            summary.seconds,
            summary.gbps
        );
    }
    Ok(0)
}
