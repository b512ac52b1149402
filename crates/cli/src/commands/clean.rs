//! `eckpt clean --job J`: what a failed or killed job left on this host — its node stores,
//! and with `--dir` the cluster directory eckpt made for it — deleted by `down --purge`'s
//! rule: only what eckpt made and recorded (the work is `eckpt_cluster::clean`).

use std::path::PathBuf;

use anyhow::Result;
use eckpt_cluster::clean::{self, CleanOptions, DEFAULT_NODE_STORE};

use crate::output::print_json;

#[derive(clap::Args)]
pub struct CleanArgs {
    /// The job whose leftovers to delete (`$SLURM_JOB_ID` in a Slurm epilog).
    #[arg(long)]
    job: String,
    /// The job's cluster directory: deleted too (eckpt's entries, then the directory if
    /// nothing else is in it) when its journal holds the job and no coordinator runs;
    /// with it go the stores it records on this host.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Where the job's agents stored (as `eckpt run --node-store`: %j the job id, %n any
    /// node's name).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_NODE_STORE)]
    node_store: String,
    /// Print what was removed and kept as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: CleanArgs) -> Result<i32> {
    let report = clean::clean(&CleanOptions {
        job: args.job,
        dir: args.dir,
        node_store: args.node_store,
    })?;
    if args.json {
        print_json(&report);
        return Ok(0);
    }
    for path in &report.removed {
        println!("removed {}", path.display());
    }
    for kept in &report.kept {
        println!("kept {}: {}", kept.path.display(), kept.why);
    }
    if report.removed.is_empty() && report.kept.is_empty() {
        println!("nothing of job {} here", report.job);
    }
    Ok(0)
}
