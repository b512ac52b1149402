//! `eckpt`: erasure-coded incremental checkpoint/restart. Every subcommand prints a one-line
//! reason and exits non-zero on error, and prints JSON with `--json` where it reports results.

mod commands;
mod output;
mod size;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "eckpt",
    version,
    about = "Fast, fault-tolerant checkpoint/restart with erasure-coded node-local checkpoints"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Split a file into k data + m parity shard files (any m may be lost).
    Encode(commands::encode::Args),
    /// Rebuild a file from a shard directory (any k intact shards per stripe).
    Decode(commands::decode::Args),
    /// Check every shard block against the manifest; writes nothing.
    Verify(commands::verify::Args),
    /// Write the block delta between two checkpoint images (any checkpointer's files).
    Delta(commands::delta::DeltaArgs),
    /// Rebuild a new image from its base and an `eckpt delta`.
    Patch(commands::delta::PatchArgs),
    /// Measure throughput next to references measured in the same run.
    #[command(subcommand)]
    Bench(commands::bench::Bench),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Encode(args) => commands::encode::run(args),
        Command::Decode(args) => commands::decode::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Delta(args) => commands::delta::run_delta(args),
        Command::Patch(args) => commands::delta::run_patch(args),
        Command::Bench(bench) => commands::bench::run(bench),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("eckpt: error: {}", one_line(&e));
            std::process::exit(1);
        }
    }
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}
