//! The cluster a run uses: a running one as it is; a stopped one started again; a new one
//! created with `up`'s options (in a temporary directory when none is given). A cluster the
//! run started is stopped at the end — and a temporary one deleted — unless `--keep`.

use std::path::PathBuf;
use std::time::Duration;

use eckpt_cluster::launch::{self, UpOptions};
use eckpt_cluster_api::dirs::ClusterDir;
use eckpt_cluster_api::msg::{CoordRequest, CoordResponse, FlushRestore};

use crate::RunError;

/// Which cluster to use.
#[derive(Debug, Clone)]
pub struct ClusterChoice {
    /// Its directory (`None`: a new temporary one).
    pub dir: Option<PathBuf>,
    /// How to create it when it does not exist (`up`'s options; `dir` is filled in).
    pub up: UpOptions,
    /// Whether `up`'s node count was given: refused for a cluster that already runs.
    pub nodes_given: bool,
}

/// The cluster in use, and what the run must undo at the end.
#[derive(Debug)]
pub struct Session {
    /// Its directory.
    pub dir: ClusterDir,
    /// Whether this run started it.
    pub started: bool,
    /// Whether this run created its directory in a temporary place.
    pub temporary: bool,
    /// The new cluster resumed the job from its flush directory.
    pub from_flush: Option<FlushRestore>,
}

fn answers(dir: &ClusterDir) -> bool {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return false;
    };
    runtime.block_on(async {
        let call = eckpt_cluster_api::commands::coordinator_call(dir, &CoordRequest::Status, |_| {});
        matches!(
            tokio::time::timeout(Duration::from_secs(10), call).await,
            Ok(Ok(CoordResponse::Status(_)))
        )
    })
}

impl Session {
    /// Uses, starts or creates the cluster `choice` names; says what it did in `note`.
    pub fn open(choice: &ClusterChoice, note: &mut dyn FnMut(String)) -> Result<Session, RunError> {
        let (path, temporary) = match &choice.dir {
            Some(dir) => (dir.clone(), false),
            None => {
                let stamp = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                (
                    std::env::temp_dir().join(format!("eckpt-run-{}-{stamp:x}", std::process::id())),
                    true,
                )
            }
        };
        let dir = ClusterDir::new(&path)?;
        if dir.cluster_file().exists() && answers(&dir) {
            if choice.nodes_given {
                let root = dir.root().display();
                return Err(RunError::Launch(format!(
                    "a cluster is already running in {root}: drop --nodes to run on it, or give another --dir"
                )));
            }
            note(format!("using the running cluster in {}", dir.root().display()));
            return Ok(Session {
                dir,
                started: false,
                temporary,
                from_flush: None,
            });
        }
        let mut up = choice.up.clone();
        up.dir = dir.root().to_path_buf();
        let existing = dir.cluster_file().exists();
        if existing {
            up.nodes = None;
        }
        let summary = launch::up(&up)?;
        let from_flush = summary.from_flush.clone();
        note(format!(
            "{} cluster in {}: {} nodes{} (k={} m={}, {} mode{})",
            if existing { "restarted the" } else { "started a" },
            dir.root().display(),
            summary.nodes.len(),
            if summary.spares.is_empty() {
                String::new()
            } else {
                format!(" + {} spare(s)", summary.spares.len())
            },
            summary.coding.k,
            summary.coding.m,
            summary.coding.mode,
            summary
                .link_rate
                .as_ref()
                .map(|r| format!(", namespaced {r} links"))
                .unwrap_or_default()
        ));
        if let Some(restore) = &from_flush {
            note(restore.to_string());
        }
        Ok(Session {
            dir,
            started: true,
            temporary,
            from_flush,
        })
    }

    /// Stops a cluster this run started (and deletes a temporary one) unless `keep`.
    pub fn close(self, keep: bool, note: &mut dyn FnMut(String)) -> Result<(), RunError> {
        if !self.started {
            return Ok(());
        }
        let root = self.dir.root().display().to_string();
        if keep {
            note(format!(
                "the cluster keeps running in {root}: `eckpt status --dir {root}`, `eckpt down --dir {root} --purge`"
            ));
            return Ok(());
        }
        for kept in launch::down(self.dir.root(), self.temporary)? {
            note(kept);
        }
        Ok(())
    }
}
