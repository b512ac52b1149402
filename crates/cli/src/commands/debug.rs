//! `eckpt debug pause|wait|resume`: the cluster's fault-injection pause points, for tests
//! and demos. Only in builds with the `fault-injection` feature, which is off by default:
//! `make test` and `make demo` turn it on; the product (`cargo build`, `make build`, `make
//! install`) has no `debug`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_daemon::debug::Phase;

/// The `debug` subcommands.
#[derive(clap::Subcommand)]
pub enum Debug {
    /// Make the cluster stop at PHASE until `resume` (fault injection for tests and demos).
    Pause {
        /// Cluster directory.
        #[arg(long, env = "ECKPT_CLUSTER")]
        dir: PathBuf,
        /// One of before-encode, mid-encode, mid-decode, before-commit, after-commit,
        /// mid-recovery, mid-flush, before-publish, mid-export, mid-ship, before-resolve.
        #[arg(long)]
        at: String,
    },
    /// Make the first process reaching PHASE panic there, once (a crash-only daemon then
    /// aborts; its restart goes on).
    Panic {
        /// Cluster directory.
        #[arg(long, env = "ECKPT_CLUSTER")]
        dir: PathBuf,
        /// A phase, as for `pause`.
        #[arg(long)]
        at: String,
    },
    /// Wait until some process reached the pause point.
    Wait {
        /// Cluster directory.
        #[arg(long, env = "ECKPT_CLUSTER")]
        dir: PathBuf,
        /// Seconds to wait at most.
        #[arg(long, default_value_t = 60)]
        timeout: u64,
    },
    /// Lift the pause.
    Resume {
        /// Cluster directory.
        #[arg(long, env = "ECKPT_CLUSTER")]
        dir: PathBuf,
    },
}

/// Runs a `debug` subcommand.
pub fn run_debug(debug: Debug) -> Result<i32> {
    match debug {
        Debug::Pause { dir, at } => request(&dir, "pause", &at)?,
        Debug::Panic { dir, at } => request(&dir, "panic", &at)?,
        Debug::Wait { dir, timeout } => {
            let dir = ClusterDir::new(&dir)?;
            let deadline = Instant::now() + Duration::from_secs(timeout);
            loop {
                let reached: Vec<String> = std::fs::read_dir(dir.debug())?
                    .flatten()
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix("reached-").map(String::from))
                    .collect();
                if !reached.is_empty() {
                    println!("paused: {}", reached.join(" "));
                    break;
                }
                if Instant::now() > deadline {
                    bail!("no process reached the pause point within {timeout} s");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Debug::Resume { dir } => {
            let dir = ClusterDir::new(&dir)?;
            match std::fs::remove_file(dir.debug().join("pause")) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
    }
    Ok(0)
}

/// Writes `D/debug/KIND` naming phase `at`.
fn request(dir: &std::path::Path, kind: &str, at: &str) -> Result<()> {
    let at = Phase::parse(at).map_err(anyhow::Error::msg)?;
    let dir = ClusterDir::new(dir)?;
    std::fs::create_dir_all(dir.debug())?;
    std::fs::write(dir.debug().join(kind), at.name())?;
    Ok(())
}
