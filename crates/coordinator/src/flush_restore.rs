//! Restarting a job from its flush when the node level cannot serve: more than `m` members
//! of a group lost, or node stores that hold nothing (a new cluster, of any size, over the
//! flush directory of a job). The newest flushed epoch that reads back intact is taken —
//! a damaged one is skipped and named — and becomes the cluster's next epoch: every rank's
//! image is prepared on its new node straight from the shared directory (each node reads
//! its own ranks, every block verified), the new groups' parity is encoded, and one
//! journal write commits it all, as for any epoch. Epoch numbers never go back: the
//! flushed image takes a number after every epoch the cluster committed and every epoch the
//! flush directory holds (a new cluster starts over at 1), so nothing later collides with
//! what was flushed or committed before.
//!
//! Only the job's own flushed epochs are restored, or those of the job `--restore-from-job`
//! names: a newest epoch of another job is refused in one line naming both jobs (an older
//! one, reached past damaged epochs, is skipped and named). A cluster that holds no job yet
//! (`eckpt up` over a flush directory) takes the job of the epoch it restores.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::time::Instant;

use super::epoch_state::outcome;
use super::flush_plan::plan_flush_restore;
use super::protection::check_protection;
use super::Coordinator;
use eckpt_cluster_api::dirs::FlushConfig;
use eckpt_cluster_api::msg::{FlushRestore, ImportFlushed};
use eckpt_cluster_api::{ClusterError, ErrorKind};
use eckpt_coding::ObjectId;
use eckpt_daemon::blocking;
use eckpt_flush::{FlushDir, JobFilter};

impl Coordinator {
    /// Restores the job from the newest flushed epoch that reads back intact; `reason`
    /// says why the node level could not serve. The caller holds the epoch/recovery lock.
    pub(super) async fn restore_from_flush(
        self: &Arc<Self>,
        config: &FlushConfig,
        reason: String,
    ) -> Result<FlushRestore, ClusterError> {
        // No flush publishes or retires an epoch while one is read back.
        let _turn = self.flushing.turn().await;
        let dir = FlushDir::new(&config.dir);
        let epochs = {
            let dir = dir.clone();
            blocking(move || Ok(dir.epochs()?)).await?
        };
        // After every epoch the flush directory holds, even those of an earlier cluster:
        // later flushes of this one must never collide with them.
        let floor = epochs.last().map_or(1, |e| e + 1);
        let mut skipped = Vec::new();
        // Epochs up to `fresh_from` are of a job that `--fresh` discarded.
        let (fresh_from, job) = self
            .read(|s| (s.journal().job.fresh_from, s.journal().job.id.clone()))
            .await;
        let filter = JobFilter {
            job: job.as_deref(),
            restore_from: config.restore_from_job.as_deref(),
        };
        for (i, &flushed) in epochs.iter().rev().filter(|&&e| e > fresh_from).enumerate() {
            let manifest = {
                let dir = dir.clone();
                blocking(move || Ok(dir.manifest(flushed)?)).await?
            };
            if let Err(why) = filter.admits(&manifest, dir.root()) {
                if i == 0 {
                    return Err(ClusterError::Mismatch(why));
                }
                skipped.push(format!("flushed epoch {flushed}: {why}"));
                continue;
            }
            match self.restore_epoch(&dir, flushed, floor, &reason).await {
                Ok(mut restore) => {
                    restore.skipped = skipped;
                    return Ok(restore);
                }
                Err(e) if e.kind() == ErrorKind::Corrupt => {
                    tracing::warn!(flushed, error = %e, "flushed epoch damaged, trying an older one");
                    skipped.push(format!("flushed epoch {flushed}: {e}"));
                }
                Err(e) => return Err(e),
            }
        }
        let tried = if skipped.is_empty() {
            "it holds no flushed epoch".to_string()
        } else {
            format!("no flushed epoch reads back intact ({})", skipped.join("; "))
        };
        Err(ClusterError::Unrecoverable(format!(
            "{reason}; and the flush directory {} cannot help: {tried}",
            config.dir.display()
        )))
    }

    /// Restores flushed epoch `flushed` as the cluster's next epoch (at least `floor`); on
    /// failure every node drops what it prepared and the journal is as it was (but for the
    /// epoch number).
    async fn restore_epoch(
        self: &Arc<Self>,
        dir: &FlushDir,
        flushed: u64,
        floor: u64,
        reason: &str,
    ) -> Result<FlushRestore, ClusterError> {
        let (world, flushed_job) = {
            let dir = dir.clone();
            blocking(move || {
                let epoch = dir.open(flushed)?;
                Ok((epoch.manifest().world, epoch.manifest().job.clone()))
            })
            .await?
        };
        let journal = self.snapshot().await;
        if let Some(w) = journal.world.filter(|&w| w != world) {
            return Err(ClusterError::Mismatch(format!(
                "flushed epoch {flushed} is of a job of {world} ranks, the cluster's job has {w}"
            )));
        }
        let alive = self.alive().await;
        let names: BTreeSet<String> = alive.keys().cloned().collect();
        // Reserved before anything is written: a failed attempt never reuses the number.
        let epoch = self
            .update(move |j| {
                let e = j.next_epoch.max(floor);
                j.next_epoch = e + 1;
                e
            })
            .await?;
        let mut next = plan_flush_restore(&journal, &names, world, epoch)?;
        // A cluster without a job yet holds the restored epoch's from now on.
        if next.job.id.is_none() {
            next.job.id = flushed_job.and_then(|j| j.id);
        }
        let restored = self.import_and_encode(dir, flushed, &mut next).await;
        let (import_seconds, encode_seconds, commit) = match restored {
            Ok(done) => done,
            Err(e) => {
                self.abort_everywhere(epoch, None).await;
                self.finish_epoch(outcome(
                    epoch,
                    false,
                    Some(format!("restore from the flush failed: {e}")),
                ))
                .await;
                return Err(e);
            }
        };
        let next = self
            .update(move |j| {
                next.next_task = j.next_task;
                **j = next.clone();
                next
            })
            .await?;
        self.send_commit(epoch, &commit, true, None).await;
        let mut done = outcome(epoch, true, None);
        done.reason = Some(format!("restored from flushed epoch {flushed}"));
        self.finish_epoch(done).await;
        tracing::info!(flushed, epoch, reason, "restored from the flush");
        Ok(FlushRestore {
            flushed_epoch: flushed,
            epoch,
            world,
            placement: next.placement,
            reason: reason.to_string(),
            skipped: Vec::new(),
            import_seconds,
            encode_seconds,
        })
    }

    /// Prepares every rank's flushed image on its node, then encodes the new groups:
    /// seconds of each, and the objects to commit. `next` gets the groups' records.
    async fn import_and_encode(
        self: &Arc<Self>,
        dir: &FlushDir,
        flushed: u64,
        next: &mut super::Journal,
    ) -> Result<(f64, f64, Vec<(ObjectId, Option<u64>)>), ClusterError> {
        let epoch = next.committed;
        let alive = self.alive().await;
        let mut per_node: BTreeMap<&String, Vec<u32>> = BTreeMap::new();
        for (rank, node) in &next.placement {
            per_node.entry(node).or_default().push(*rank);
        }
        let mut requests = Vec::new();
        for (node, ranks) in per_node {
            let info = alive.get(node).ok_or_else(|| ClusterError::Node {
                node: node.clone(),
                reason: "down: run `eckpt recover` again".into(),
            })?;
            let request = ImportFlushed {
                flush: dir.root().to_path_buf(),
                epoch: flushed,
                as_epoch: epoch,
                ranks,
            };
            requests.push((info.clone(), request));
        }
        let started = Instant::now();
        self.run_task(self.task_id().await, requests).await?;
        let import_seconds = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut commit = Vec::new();
        let results = self
            .encode_groups(next.groups.clone(), &next.placement, epoch, true)
            .await;
        for (i, r) in results.into_iter().enumerate() {
            let e = r?;
            commit.extend(e.commit.clone());
            next.groups[i] = e.record;
        }
        check_protection(next, &[])?;
        Ok((import_seconds, started.elapsed().as_secs_f64(), commit))
    }
}
