//! Flushes at the coordinator: the last checkpoint level. After an epoch commits, when a
//! flush is due (`--flush-every`) and none is running, its flush starts in the background —
//! ranks go on checkpointing and the next epochs commit meanwhile: a flush holds only its
//! own turn, never the epoch or recovery lock. Every node hosting ranks copies them into a
//! staging directory of the shared flush directory (`AgentRequest::Flush`); once all are
//! written the coordinator writes the manifest, publishes the epoch by one rename and
//! retires the oldest beyond `--flush-keep` (`eckpt-flush`), deleting their bytes after the
//! flush is reported. Every flushed epoch names its job (id, command, cluster shape), and a
//! flush into a directory whose newest epoch is another job's is refused: retention would
//! delete that job's flushes. A failure anywhere — a node
//! dying, a full file system, the coordinator itself killed — leaves the staging directory
//! unpublished (the next flush removes it) and every published epoch as it was.

use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::time::Instant;

use tokio::sync::{Notify, OwnedMutexGuard};

use super::Coordinator;
use eckpt_cluster_api::dirs::FlushConfig;
use eckpt_cluster_api::msg::{FlushRanks, FlushReport, FlushStatus};
use eckpt_cluster_api::ClusterError;
use eckpt_daemon::blocking;
use eckpt_daemon::debug::{pause_point_async, Phase};
use eckpt_flush::{FlushDir, FlushedJob, JobFilter, Manifest, BLOCK_SIZE, NO_JOB};

use super::Journal;

/// The coordinator's flushes take turns: one at a time.
pub(super) struct Flushing {
    /// Held by a flush, and by a restart from a flush (which must not have an epoch retired
    /// under it).
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Signalled when a flush ends (its retired epochs deleted).
    ended: Notify,
}

/// What the flushes did and do, in the coordinator's state.
#[derive(Debug, Default)]
pub(super) struct FlushState {
    running: Option<u64>,
    /// Whether the epochs the last flush retired are still being deleted.
    purging: bool,
    /// The newest epoch flushed or attempted: automatic flushes are `every` epochs apart.
    latest: u64,
    /// Published epochs in the flush directory, ascending.
    flushed: Vec<u64>,
    last: Option<FlushReport>,
    last_error: Option<String>,
}

impl Flushing {
    pub(super) fn new() -> Flushing {
        Flushing {
            turn: Arc::new(tokio::sync::Mutex::new(())),
            ended: Notify::new(),
        }
    }

    /// Waits for the turn to flush or to read the flushed epochs.
    pub(super) async fn turn(&self) -> OwnedMutexGuard<()> {
        self.turn.clone().lock_owned().await
    }
}

impl FlushState {
    /// No flush running; `flushed` are the epochs the flush directory holds.
    pub(super) fn new(flushed: Vec<u64>) -> FlushState {
        FlushState {
            latest: flushed.last().copied().unwrap_or(0),
            flushed,
            ..FlushState::default()
        }
    }

    /// Whether the flush directory holds a published epoch newer than `floor` (epochs up
    /// to it belong to a job `--fresh` discarded).
    pub(super) fn has_flushed_after(&self, floor: u64) -> bool {
        self.flushed.iter().any(|&e| e > floor)
    }

    /// The newest published epoch (0: none).
    pub(super) fn newest_flushed(&self) -> u64 {
        self.flushed.last().copied().unwrap_or(0)
    }

    /// The flushing as `eckpt status` shows it (`None`: the cluster does not flush).
    pub(super) fn status(&self, config: Option<FlushConfig>) -> Option<FlushStatus> {
        Some(FlushStatus {
            config: config?,
            running: self.running,
            flushed: self.flushed.clone(),
            last: self.last.clone(),
            last_error: self.last_error.clone(),
        })
    }

    /// Records how the flush of `epoch` went; its retired epochs are being deleted.
    fn ended(&mut self, epoch: u64, result: &Result<(FlushReport, Vec<u64>), ClusterError>) {
        self.running = None;
        self.latest = self.latest.max(epoch);
        match result {
            Ok((report, flushed)) => {
                tracing::info!(
                    epoch,
                    bytes = report.bytes,
                    seconds = report.seconds,
                    "flush published"
                );
                self.last = Some(report.clone());
                self.last_error = None;
                self.flushed.clone_from(flushed);
            }
            Err(e) => self.last_error = Some(format!("epoch {epoch}: {e}")),
        }
        self.purging = true;
    }
}

/// The job `journal` holds, as its flushed epochs name it.
pub(super) fn flushed_job(journal: &Journal) -> FlushedJob {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    FlushedJob {
        id: journal.job.id.clone(),
        command: journal.job.holder.as_ref().map(|h| h.command.clone()),
        nodes: count(journal.members().len()),
        k: count(journal.coding.k),
        m: count(journal.coding.m),
    }
}

/// Refuses flushing `journal`'s job into `dir` when its newest epoch is another job's — one
/// this cluster neither restored from nor discarded (`--fresh`): publishing would make it
/// older, and retention would delete it.
fn check_lineage(dir: &FlushDir, journal: &Journal, config: &FlushConfig) -> Result<(), ClusterError> {
    let job = journal.job.id.as_deref().unwrap_or(NO_JOB);
    let filter = JobFilter {
        job: Some(job),
        restore_from: config.restore_from_job.as_deref(),
    };
    let Some(&newest) = dir.epochs()?.last() else {
        return Ok(());
    };
    let manifest = dir.manifest(newest)?;
    if newest <= journal.job.fresh_from || filter.admits(&manifest, dir.root()).is_ok() {
        return Ok(());
    }
    let who = match &journal.job.id {
        Some(id) => format!("job {id}"),
        None => "ranks started outside `eckpt run`".to_string(),
    };
    Err(ClusterError::Refused(format!(
        "the newest flushed epoch in {} ({newest}) is {}: flushing {who} there would retire that job's epochs; give {who} a flush directory of its own (a new cluster with `--restore-from-job {}` continues that job instead)",
        dir.root().display(),
        manifest.describe_job(),
        manifest.job_name()
    )))
}

/// Whether committed `epoch` is due for an automatic flush: at least `every` epochs after
/// the newest epoch flushed or attempted (`every` 0: only on demand).
fn due(epoch: u64, every: u64, latest: u64) -> bool {
    every > 0 && latest.checked_add(every).is_some_and(|next| epoch >= next)
}

impl Coordinator {
    /// After `epoch` committed: starts its flush in the background if one is due and none
    /// runs. The flush is marked running before this returns, so a caller that sees the
    /// epoch decided and then waits for flushes ([`Coordinator::wait_flush`]) waits for it.
    pub(super) async fn flush_after_commit(self: &Arc<Self>, epoch: u64) {
        let Some(config) = self.flush_config.clone() else {
            return;
        };
        let every = config.every;
        if !self.read(move |s| due(epoch, every, s.flush.latest)).await {
            return;
        }
        let Ok(turn) = self.flushing.turn.clone().try_lock_owned() else {
            return;
        };
        self.read(move |s| s.flush.running = Some(epoch)).await;
        let coord = self.clone();
        tokio::spawn(async move {
            if let Err(e) = coord.flush(epoch, config, turn).await {
                tracing::warn!(epoch, error = %e, "flush failed");
            }
        });
    }

    /// `eckpt flush`: flushes `epoch` (default: the committed one) after any running flush,
    /// and answers once it is published.
    pub(super) async fn flush_now(self: &Arc<Self>, epoch: Option<u64>) -> Result<FlushReport, ClusterError> {
        let config = self.flush_config.clone().ok_or_else(|| {
            ClusterError::Refused("this cluster does not flush: it was created without --flush-dir".into())
        })?;
        let turn = self.flushing.turn().await;
        let (committed, flushed) = self
            .read(|s| (s.journal().committed, s.flush.flushed.clone()))
            .await;
        let epoch = epoch.unwrap_or(committed);
        if committed == 0 {
            return Err(ClusterError::NotFound("no epoch is committed yet".into()));
        }
        if epoch > committed {
            return Err(ClusterError::NotFound(format!(
                "epoch {epoch} is not committed (the committed epoch is {committed})"
            )));
        }
        if flushed.contains(&epoch) {
            return Err(ClusterError::Refused(format!(
                "epoch {epoch} is already flushed in {}",
                config.dir.display()
            )));
        }
        // An epoch just committed: its commit may still be on its way to the agents.
        let mut delivered = self.delivered.subscribe();
        if *delivered.borrow() < epoch {
            tracing::info!(epoch, "flush waits for the epoch's commit to reach the agents");
        }
        let _ = delivered.wait_for(|&d| d >= epoch).await;
        self.read(move |s| s.flush.running = Some(epoch)).await;
        self.flush(epoch, config, turn).await
    }

    /// Flushes `epoch` in its turn and records how it went.
    async fn flush(
        self: &Arc<Self>,
        epoch: u64,
        config: FlushConfig,
        turn: OwnedMutexGuard<()>,
    ) -> Result<FlushReport, ClusterError> {
        let result = self.copy_and_publish(epoch, &config).await;
        let result = self
            .read(move |s| {
                s.flush.ended(epoch, &result);
                result
            })
            .await;
        // The retired epochs' bytes are deleted after the flush is reported, still in its
        // turn: the next flush (or a restart from one) waits, the flush's caller does not.
        let dir = FlushDir::new(&config.dir);
        let coord = self.clone();
        tokio::spawn(async move {
            if let Err(e) = blocking(move || Ok(dir.purge_trash()?)).await {
                tracing::warn!(error = %e, "deleting retired flushed epochs failed");
            }
            coord.read(|s| s.flush.purging = false).await;
            drop(turn);
            coord.flushing.ended.notify_waiters();
        });
        result.map(|(report, _)| report)
    }

    /// Every hosting node copies its ranks into a staging directory; then the manifest,
    /// the publication and retention. The report, and the epochs published after it.
    async fn copy_and_publish(
        &self,
        epoch: u64,
        config: &FlushConfig,
    ) -> Result<(FlushReport, Vec<u64>), ClusterError> {
        let started = Instant::now();
        let (journal, alive) = self.read(|s| (s.journal().clone(), s.alive())).await;
        let world = journal
            .world
            .ok_or_else(|| ClusterError::NotFound("no job has checkpointed yet".into()))?;
        let mut per_node: BTreeMap<&String, Vec<u32>> = BTreeMap::new();
        for (rank, node) in &journal.placement {
            per_node.entry(node).or_default().push(*rank);
        }
        let mut hosts = Vec::with_capacity(per_node.len());
        for (node, ranks) in per_node {
            let info = alive.get(node).ok_or_else(|| ClusterError::Node {
                node: node.clone(),
                reason: format!("down: ranks {ranks:?} cannot be flushed"),
            })?;
            hosts.push((info.clone(), ranks));
        }
        let dir = FlushDir::new(&config.dir);
        let job = flushed_job(&journal);
        let staging = {
            let (dir, config) = (dir.clone(), config.clone());
            blocking(move || {
                check_lineage(&dir, &journal, &config)?;
                Ok(dir.stage(epoch)?)
            })
            .await?
        };
        let requests = hosts
            .into_iter()
            .map(|(info, ranks)| {
                let request = FlushRanks {
                    epoch,
                    ranks,
                    staging: staging.path().to_path_buf(),
                    rate: config.rate,
                };
                (info, request)
            })
            .collect();
        let parts = match self.run_task(self.task_id().await, requests).await {
            Ok(answers) => answers,
            Err(e) => {
                let _ = blocking(move || Ok(staging.abandon()?)).await;
                return Err(e);
            }
        };
        let mut ranks = Vec::new();
        let (mut bytes, mut slowest) = (0u64, 0f64);
        for part in parts {
            ranks.extend(part.ranks);
            bytes += part.bytes;
            slowest = slowest.max(part.seconds);
        }
        pause_point_async(&self.dir.debug(), Phase::BeforePublish, "coordinator").await;
        let keep = config.keep;
        let flushed = blocking(move || {
            match Manifest::new(epoch, world, BLOCK_SIZE, job, ranks) {
                Ok(manifest) => staging.publish(&manifest)?,
                Err(e) => {
                    let _ = staging.abandon();
                    return Err(e.into());
                }
            }
            // The epoch is published: failing to retire older ones does not undo that.
            if let Err(e) = dir.retire(keep) {
                tracing::warn!(epoch, error = %e, "retiring older flushed epochs failed");
            }
            Ok(dir.epochs()?)
        })
        .await?;
        let report = FlushReport {
            epoch,
            ranks: world,
            bytes,
            seconds: started.elapsed().as_secs_f64(),
            slowest_node_seconds: slowest,
            dir: config.dir.clone(),
        };
        Ok((report, flushed))
    }

    /// `WaitFlush`: once no flush runs and the last one's retired epochs are deleted, the
    /// flushing status.
    pub(super) async fn wait_flush(&self) -> Option<FlushStatus> {
        loop {
            let ended = self.flushing.ended.notified();
            let config = self.flush_config.clone();
            let idle = self
                .read(move |s| {
                    (s.flush.running.is_none() && !s.flush.purging).then(|| s.flush.status(config))
                })
                .await;
            if let Some(status) = idle {
                return status;
            }
            ended.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_are_every_epochs_apart_and_zero_means_on_demand() {
        assert!(due(1, 1, 0));
        assert!(!due(3, 4, 0) && due(4, 4, 0));
        assert!(!due(9, 4, 6) && due(10, 4, 6));
        assert!(due(13, 4, 6), "a skipped epoch does not delay the next flush");
        assert!(!due(100, 0, 0));
        assert!(!due(u64::MAX, 2, u64::MAX));
    }
}
