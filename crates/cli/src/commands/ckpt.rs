//! Checkpoints through a running cluster: `checkpoint` (a file from any checkpointer as a
//! rank's image), `recover` (rebuild lost nodes, or restart from the flush), `restore`
//! (export a rank's image, also straight from a flush directory), `flush` (copy an epoch to
//! shared storage now).

use std::path::PathBuf;

use anyhow::{bail, Result};
use eckpt_cluster_api::commands;
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{CoordResponse, FlushEpoch, Recover, Relocation};
use indicatif::{ProgressBar, ProgressStyle};

use super::cluster::block_on;
use crate::output::{byte_progress, print_json};

#[derive(clap::Args)]
pub struct CheckpointArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Ranks in the job: the epoch commits when all have checkpointed.
    #[arg(long, env = "ECKPT_WORLD")]
    world: u32,
    /// This rank.
    #[arg(long, env = "ECKPT_RANK")]
    rank: u32,
    /// The epoch this checkpoint is for (refused if another is open).
    #[arg(long)]
    epoch: Option<u64>,
    /// Node to keep the rank on (first checkpoint only; default: the least loaded).
    #[arg(long)]
    node: Option<String>,
    /// Wait until the epoch is committed (or aborted: exit 1).
    #[arg(long)]
    wait: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// The checkpoint file (e.g. a BLCR, DMTCP or CRIU image, an application dump).
    file: PathBuf,
}

pub fn run_checkpoint(args: CheckpointArgs) -> Result<i32> {
    let dir = ClusterDir::new(&args.dir)?;
    let total = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    let bar = byte_progress(total, "send", args.json);
    let what = commands::FileCheckpoint {
        world: args.world,
        rank: args.rank,
        epoch: args.epoch,
        node: args.node.clone(),
        file: &args.file,
        wait: args.wait,
        // Inside `eckpt run`: the attempt this checkpoint belongs to.
        generation: std::env::var("ECKPT_GENERATION")
            .ok()
            .and_then(|g| g.parse().ok()),
    };
    let report = block_on(commands::checkpoint_file(&dir, what, &mut |done, _| {
        bar.set_position(done)
    }));
    bar.finish_and_clear();
    let report = report??;
    let failed = report.outcome.as_ref().is_some_and(|o| !o.committed);
    if args.json {
        print_json(&report);
    } else {
        match &report.outcome {
            Some(o) if o.committed => println!(
                "rank {} epoch {} on {}: {} bytes, epoch committed (encode {:.3} s)",
                report.rank, report.epoch, report.node, report.bytes, o.encode_seconds
            ),
            Some(o) => println!(
                "rank {} epoch {} on {}: epoch aborted: {}",
                report.rank,
                report.epoch,
                report.node,
                o.reason.as_deref().unwrap_or("unknown")
            ),
            None => println!(
                "rank {} epoch {} on {}: {} bytes stored locally; the epoch commits when all ranks are in",
                report.rank, report.epoch, report.node, report.bytes
            ),
        }
    }
    if failed {
        let reason = report.outcome.and_then(|o| o.reason).unwrap_or_default();
        if args.json {
            return Ok(1);
        }
        bail!("epoch {} was aborted: {reason}", report.epoch);
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct RecoverArgs {
    /// Cluster directory.
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// Where the ranks of a lost node go when no spare replaces it: each to the least
    /// loaded node (process), or all together to one node (node).
    #[arg(long, default_value = "process")]
    relocation: Relocation,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run_recover(args: RecoverArgs) -> Result<i32> {
    let dir = ClusterDir::new(&args.dir)?;
    let bar = if args.json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(3);
        b.set_style(ProgressStyle::with_template("recover [{bar:30}] {msg}").expect("valid template"));
        b
    };
    let answer = block_on(commands::coordinator_call(
        &dir,
        Recover {
            relocation: args.relocation,
        },
        |p| {
            if let CoordResponse::Progress { what, done, total } = p {
                bar.set_length(*total);
                bar.set_position(*done);
                bar.set_message(what.clone());
            }
        },
    ));
    bar.finish_and_clear();
    let report = answer??;
    if args.json {
        print_json(&report);
        return Ok(0);
    }
    if let Some(restore) = &report.from_flush {
        println!("{restore}");
        return Ok(0);
    }
    if report.rebuilt.is_empty() && report.repaired.is_empty() && report.reencoded.is_empty() {
        println!("nothing to recover: every node is up and every checksum holds");
    }
    for (node, ranks) in &report.rebuilt {
        let moved: Vec<String> = ranks.iter().map(|(r, n)| format!("rank {r} → {n}")).collect();
        println!("rebuilt {node} (epoch {}): {}", report.epoch, moved.join(", "));
    }
    for (rank, from, to) in &report.moved {
        println!("moved rank {rank} {from} → {to} ({from} holds parity only in the new groups)");
    }
    for node in &report.repaired {
        println!("repaired damaged data on {node}");
    }
    if !report.reencoded.is_empty() {
        println!(
            "redundancy restored: groups {:?} encoded (decode {:.3} s, encode {:.3} s)",
            report.reencoded, report.decode_seconds, report.encode_seconds
        );
    }
    for w in &report.warnings {
        println!("warning: {w}");
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct RestoreArgs {
    /// Cluster directory.
    #[arg(long, required_unless_present = "from_flush")]
    dir: Option<PathBuf>,
    /// Read the rank from this flush directory instead of a cluster (no agent needed: the
    /// whole cluster may be gone).
    #[arg(long, value_name = "FLUSH_DIR", conflicts_with = "dir")]
    from_flush: Option<PathBuf>,
    /// Rank to export.
    #[arg(long)]
    rank: u32,
    /// Epoch (default: the latest committed; with --from-flush the newest flushed epoch
    /// that is complete).
    #[arg(long)]
    epoch: Option<u64>,
    /// Item of the rank's image (default: its only item, or the checkpointed file).
    #[arg(long)]
    item: Option<String>,
    /// Output file (written under a temporary name, renamed when complete).
    #[arg(short = 'o', long = "out")]
    out: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run_restore(args: RestoreArgs) -> Result<i32> {
    let report = match (&args.from_flush, &args.dir) {
        (Some(flush), _) => {
            commands::restore_flushed(flush, args.rank, args.epoch, args.item.as_deref(), &args.out)?
        }
        (None, Some(dir)) => {
            let dir = ClusterDir::new(dir)?;
            block_on(commands::restore(
                &dir,
                args.rank,
                args.epoch,
                args.item.as_deref(),
                &args.out,
            ))??
        }
        (None, None) => bail!("give the cluster (--dir) or a flush directory (--from-flush)"),
    };
    if args.json {
        print_json(&report);
    } else {
        println!(
            "rank {} epoch {}: {} bytes of {:?} written to {}{}",
            report.rank,
            report.epoch,
            report.bytes,
            report.item,
            args.out.display(),
            if report.from_flush {
                format!(" (from the flush in {}, every block verified)", report.from)
            } else if report.decoded {
                format!(" (decoded from the survivors by {})", report.from)
            } else {
                format!(" (from {})", report.from)
            }
        );
    }
    Ok(0)
}

#[derive(clap::Args)]
pub struct FlushArgs {
    /// Cluster directory (created with --flush-dir).
    #[arg(long, env = "ECKPT_CLUSTER")]
    dir: PathBuf,
    /// The epoch to flush (default: the committed one; it must still be in the node stores).
    #[arg(long)]
    epoch: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn run_flush(args: FlushArgs) -> Result<i32> {
    let dir = ClusterDir::new(&args.dir)?;
    let request = FlushEpoch { epoch: args.epoch };
    let report = block_on(commands::coordinator_call(&dir, request, |_| {}))??;
    if args.json {
        print_json(&report);
    } else {
        println!(
            "flushed epoch {} ({} {}, {} bytes) to {} in {:.3} s: {:.1} MB/s (slowest node {:.3} s)",
            report.epoch,
            report.ranks,
            if report.ranks == 1 { "rank" } else { "ranks" },
            report.bytes,
            report.dir.display(),
            report.seconds,
            report.bytes as f64 / report.seconds.max(1e-9) / 1e6,
            report.slowest_node_seconds
        );
    }
    Ok(0)
}
