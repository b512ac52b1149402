//! The epoch state machine: ranks open the epoch (`OpenEpoch`), write it and say so
//! (`RankReady`); the last rank starts its encode (`epoch.rs`), whose outcome opens the
//! next one. An aborted epoch is dropped everywhere and never reused.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::owner::{Draft, State};
use super::pace::check_policy;
use super::Coordinator;
use eckpt_cluster_api::msg::{Abort, EpochOutcome, NodeInfo, Opened, PaceStats, RankReport};
use eckpt_cluster_api::ClusterError;

/// Ranks' progress through the open epoch.
pub(super) struct EpochState {
    /// The epoch ranks write now.
    pub open: u64,
    /// Ranks that wrote it, and their nodes.
    pub ready: BTreeMap<u32, String>,
    /// What each ready rank reported (sizes, pace).
    pub reports: BTreeMap<u32, RankReport>,
    /// Whether its encode and commit are running.
    pub running: bool,
    /// The latest decided epochs (at most [`OUTCOMES_KEPT`]): a week-long job decides
    /// tens of thousands, and the coordinator's memory must not grow with them.
    pub outcomes: BTreeMap<u64, EpochOutcome>,
}

/// How many decided epochs' outcomes the coordinator keeps for `WaitEpoch`: far more than a
/// rank or a supervisor lags behind (they wait for the epoch just written, or the next one
/// to watch).
const OUTCOMES_KEPT: usize = 1024;

impl EpochState {
    /// Epoch `open` open, no rank ready yet.
    pub fn new(open: u64) -> EpochState {
        EpochState {
            open,
            ready: BTreeMap::new(),
            reports: BTreeMap::new(),
            running: false,
            outcomes: BTreeMap::new(),
        }
    }

    /// Records an epoch's outcome and opens the next one.
    fn finish(&mut self, outcome: EpochOutcome) {
        self.open = outcome.epoch + 1;
        self.ready.clear();
        self.reports.clear();
        self.running = false;
        self.outcomes.insert(outcome.epoch, outcome);
        while self.outcomes.len() > OUTCOMES_KEPT {
            self.outcomes.pop_first();
        }
    }

    /// Whether `rank` has written the open epoch (it is ready, or the epoch is being
    /// committed, which needs every rank).
    fn wrote(&self, rank: u32) -> bool {
        self.ready.contains_key(&rank) || self.running
    }

    /// The epoch an `OpenEpoch` of `rank` is for: the open one, or the next one when the
    /// rank already wrote the open one (the call then waits for the decision). An explicit
    /// `expected` epoch never waits: it must be open and not yet written by the rank.
    fn target(&self, rank: u32, expected: Option<u64>) -> Result<u64, ClusterError> {
        let wrote = self.wrote(rank);
        match expected {
            Some(e) if e == self.open && wrote => Err(ClusterError::Refused(format!(
                "rank {rank} already wrote epoch {e}{}: its next checkpoint is epoch {}",
                if self.running {
                    " (being committed)"
                } else {
                    " (waiting for the other ranks)"
                },
                e + 1
            ))),
            Some(e) if e != self.open => Err(ClusterError::Refused(format!(
                "epoch {e} is not open (ranks write epoch {}{})",
                self.open,
                if wrote {
                    format!("; rank {rank} already wrote it")
                } else {
                    String::new()
                }
            ))),
            Some(e) => Ok(e),
            None => Ok(self.open + u64::from(wrote)),
        }
    }

    /// Whether `rank` may now write `target`: `Some(Ok)` yes, `Some(Err)` never (a later
    /// epoch opened, or another checkpoint of the rank wrote it), `None` not yet.
    fn opened(&self, rank: u32, target: u64) -> Option<Result<(), ClusterError>> {
        if self.open == target && !self.wrote(rank) {
            return Some(Ok(()));
        }
        if self.open < target {
            return None;
        }
        Some(Err(ClusterError::Refused(if self.open > target {
            format!(
                "rank {rank} waited to write epoch {target}, but epoch {} opened meanwhile: not writing a later epoch than the one asked for",
                self.open
            )
        } else {
            format!("rank {rank} waited to write epoch {target}, but another checkpoint of rank {rank} wrote it meanwhile")
        })))
    }
}

impl State {
    /// Records that `rank` wrote `epoch` on `node`; whether it was the last rank (its
    /// encode is then marked running). The same report again (a retry after a broken
    /// connection) is a success.
    fn rank_ready(
        &mut self,
        rank: u32,
        epoch: u64,
        node: String,
        report: RankReport,
    ) -> Result<bool, ClusterError> {
        let journal = self.journal();
        let (placed, world) = (journal.placement.get(&rank).cloned(), journal.world.unwrap_or(0));
        if placed.as_ref() != Some(&node) {
            return Err(ClusterError::Refused(format!(
                "rank {rank} does not live on {node}"
            )));
        }
        let epochs = &mut self.epochs;
        if epoch == epochs.open && epochs.ready.get(&rank) == Some(&node) {
            return Ok(false);
        }
        if epoch != epochs.open || epochs.running {
            return Err(ClusterError::Refused(format!(
                "epoch {epoch} is not open for checkpoints (open: {}{})",
                epochs.open,
                if epochs.running { ", being committed" } else { "" }
            )));
        }
        if let Some(pace) = &report.pace {
            // Every report taken agrees with the first: comparing with it is comparing with
            // all, at the cost of one lookup per rank instead of a pass over the ranks.
            let mut first = epochs
                .reports
                .iter()
                .find_map(|(r, o)| Some((*r, o.pace.as_ref()?.policy.as_str())));
            check_policy(&mut first, rank, pace)?;
        }
        epochs.ready.insert(rank, node);
        epochs.reports.insert(rank, report);
        epochs.running = epochs.ready.len() as u32 == world;
        Ok(epochs.running)
    }
}

/// The outcome of an epoch decided without an encode (or before one ran).
pub(super) fn outcome(epoch: u64, committed: bool, reason: Option<String>) -> EpochOutcome {
    EpochOutcome {
        epoch,
        committed,
        reason,
        encode_seconds: 0.0,
        kinds: Vec::new(),
        bytes_sent: BTreeMap::new(),
        shard_bytes: 0,
        image_bytes: 0,
        stored_bytes: 0,
        generation: None,
    }
}

/// Where `rank` lives (see [`Coordinator::place_rank`]), recording a new placement or job
/// size in `journal`; nothing written when it refuses. A rank already placed costs a lookup;
/// a new one a pass over the groups and the placement, never a scan per node.
fn place(
    journal: &mut Draft,
    rank: u32,
    world: u32,
    node: Option<String>,
    is_alive: impl Fn(&str) -> bool,
) -> Result<String, ClusterError> {
    journal.check_rank(rank, world, |w| {
        format!("the job has {w} ranks; this checkpoint says {world}")
    })?;
    let name = match (journal.placement.get(&rank), node) {
        (Some(placed), Some(wanted)) if *placed != wanted => {
            return Err(ClusterError::Refused(format!(
                "rank {rank} lives on {placed}, not {wanted}"
            )))
        }
        (Some(placed), _) => placed.clone(),
        (None, Some(wanted)) if !(journal.holds_data(&wanted) && is_alive(&wanted)) => {
            return Err(ClusterError::Invalid(format!(
                "node {wanted} cannot host ranks (not an alive data member of a group)"
            )))
        }
        (None, Some(wanted)) => wanted,
        (None, None) => {
            let candidates: Vec<&String> = journal.data_members().filter(|n| is_alive(n)).collect();
            journal
                .least_loaded(candidates, &BTreeMap::new())
                .ok_or_else(|| ClusterError::Refused("no alive node can host ranks".into()))?
        }
    };
    if journal.world != Some(world) || journal.placement.get(&rank) != Some(&name) {
        journal.world = Some(world);
        journal.placement.insert(rank, name.clone());
    }
    Ok(name)
}

impl Coordinator {
    /// `OpenEpoch`: places the rank if new; the rank's next epoch, once its previous one is
    /// decided (waiting at most the cluster's open wait). It never hands out a later epoch than the one
    /// the call was for: two checkpoints of one rank racing, or an epoch aborted by
    /// recovery while the call waited, give an error rather than a silently skipped epoch.
    pub(super) async fn open_epoch(
        self: &Arc<Self>,
        rank: u32,
        world: u32,
        node: Option<String>,
        expected: Option<u64>,
        generation: Option<u64>,
    ) -> Result<Opened, ClusterError> {
        // Three messages to the state's owner, each doing what it can at once: every rank
        // opens every epoch, and a visit is two wake-ups of the coordinator.
        let target = self
            .read(move |s| {
                s.fence(generation, &format!("rank {rank}"))?;
                s.epochs.target(rank, expected)
            })
            .await?;
        let node = self.place_rank(rank, world, node).await?;
        let pace = self.wait_open(rank, target, generation).await?;
        Ok(Opened {
            epoch: target,
            node,
            pace,
        })
    }

    /// The alive node hosting `rank`: where it lives, else `node` if it can host ranks, else
    /// the least loaded alive data member. A new placement (or job size) is saved; the ranks
    /// of a job placing themselves at once share journal writes. Refused when the rank's node
    /// is down.
    async fn place_rank(
        &self,
        rank: u32,
        world: u32,
        node: Option<String>,
    ) -> Result<NodeInfo, ClusterError> {
        self.state
            .change(move |state, journal| {
                let name = place(journal, rank, world, node, |n| state.is_alive(n))?;
                state.alive_node(&name).ok_or_else(|| {
                    ClusterError::Refused(format!(
                        "rank {rank} lives on {name}, which is down: run `eckpt recover`"
                    ))
                })
            })
            .await?
    }

    /// Waits until `rank` may write `target` (its previous epoch decided), at most the
    /// cluster's open wait; then, in the same visit, fences `generation` again (a new
    /// attempt of the job may have started while the rank waited: its epoch is not this
    /// rank's to write) and returns the job's pace as of `target - 1`, recorded when that
    /// epoch was decided: every rank opening `target` gets the same figures.
    async fn wait_open(
        &self,
        rank: u32,
        target: u64,
        generation: Option<u64>,
    ) -> Result<Option<PaceStats>, ClusterError> {
        let wait = self.deadlines.open_wait();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            let opened = self
                .read(move |s| {
                    let opened = s.epochs.opened(rank, target)?;
                    Some(opened.and_then(|()| {
                        s.fence(generation, &format!("rank {rank}"))?;
                        Ok(s.journal().pace.get(&(target - 1)).copied())
                    }))
                })
                .await;
            if let Some(opened) = opened {
                return opened;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(ClusterError::Refused(format!(
                    "rank {rank} already wrote epoch {}, still undecided after {:.0} s: every rank must checkpoint it before rank {rank} can write epoch {target} (see `eckpt status`)",
                    target - 1,
                    wait.as_secs_f64()
                )));
            }
        }
    }

    /// `RankReady`: records the rank; the last one starts the epoch's encode. The same
    /// report again (a retry after a broken connection) is a success.
    pub(super) async fn rank_ready(
        self: &Arc<Self>,
        rank: u32,
        epoch: u64,
        node: String,
        report: RankReport,
        generation: Option<u64>,
    ) -> Result<(), ClusterError> {
        let complete = self
            .read(move |s| {
                s.fence(generation, &format!("rank {rank}"))?;
                s.rank_ready(rank, epoch, node, report)
            })
            .await?;
        // Nobody waits on a rank's readiness (ranks wait for decisions, which
        // `finish_epoch` announces): waking every waiting rank here made an epoch cost
        // ranks² reads.
        if complete {
            let coord = self.clone();
            tokio::spawn(async move { coord.run_epoch(epoch).await });
        }
        Ok(())
    }

    /// Records an epoch's outcome, stamped with the job's generation (a new attempt aborts
    /// the open epoch, so it is its ranks'), and opens the next one.
    pub(super) async fn finish_epoch(&self, mut outcome: EpochOutcome) {
        self.read(move |s| {
            outcome.generation = Some(s.journal().job.generation);
            s.epochs.finish(outcome)
        })
        .await;
        self.changed.notify_waiters();
    }

    /// `WaitEpoch`: the outcome of `epoch` once decided.
    pub(super) async fn wait_epoch(&self, epoch: u64, decision_only: bool) -> EpochOutcome {
        loop {
            let notified = self.changed.notified();
            let decided = self
                .read(move |s| {
                    if let Some(o) = s.epochs.outcomes.get(&epoch) {
                        return Some(if decision_only { o.decision() } else { o.clone() });
                    }
                    (epoch < s.epochs.open).then(|| {
                        let committed = s.journal().committed >= epoch;
                        let reason = (!committed).then(|| "decided before the coordinator restarted".into());
                        outcome(epoch, committed, reason)
                    })
                })
                .await;
            if let Some(decided) = decided {
                return decided;
            }
            notified.await;
        }
    }

    /// Decides `epoch` aborted: the next epoch gets a new number, and every alive agent drops
    /// what it prepared (an agent that misses this resolves it when it registers again).
    pub(super) async fn abort_everywhere(&self, epoch: u64, pace: Option<PaceStats>) {
        let _ = self
            .update(move |j| {
                j.next_epoch = epoch + 1;
                j.record_pace(epoch, pace);
            })
            .await;
        let requests = self
            .alive()
            .await
            .into_values()
            .map(|n| (n, Abort { epoch }))
            .collect();
        self.ask_all(requests).await;
    }

    /// Sends `Abort` for the open epoch if ranks had started it (recovery moves ranks; a
    /// new attempt of the job relaunches them), `reason` saying why.
    pub(super) async fn abort_open_epoch(&self, reason: &str) {
        let started = self
            .read(|s| {
                let epochs = &mut s.epochs;
                (!epochs.ready.is_empty()).then(|| {
                    epochs.ready.clear();
                    epochs.reports.clear();
                    epochs.open
                })
            })
            .await;
        let Some(epoch) = started else {
            return;
        };
        self.abort_everywhere(epoch, None).await;
        self.finish_epoch(outcome(epoch, false, Some(reason.into())))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_that_wrote_the_open_epoch_waits_for_the_next() {
        let mut s = EpochState::new(3);
        assert_eq!(s.target(0, None).unwrap(), 3);
        assert!(matches!(s.opened(0, 3), Some(Ok(()))));
        s.ready.insert(0, "n0".into());
        assert_eq!(s.target(0, None).unwrap(), 4);
        assert!(s.opened(0, 4).is_none(), "not yet: epoch 3 undecided");
        assert!(s.target(0, Some(3)).is_err(), "an explicit epoch never waits");
        assert!(s.target(0, Some(5)).is_err());
        assert_eq!(s.target(1, Some(3)).unwrap(), 3);
        s.ready.clear();
        s.open = 5;
        assert!(
            s.opened(0, 4).is_some_and(|r| r.is_err()),
            "a later epoch opened meanwhile"
        );
    }

    #[test]
    fn decided_epochs_kept_are_bounded_and_the_latest() {
        let mut s = EpochState::new(1);
        for epoch in 1..=3000 {
            s.finish(outcome(epoch, epoch % 3 != 0, None));
        }
        assert_eq!(s.outcomes.len(), OUTCOMES_KEPT);
        assert_eq!(s.outcomes.keys().next_back(), Some(&3000));
        assert_eq!(s.outcomes.keys().next(), Some(&(3001 - OUTCOMES_KEPT as u64)));
        assert_eq!(s.open, 3001);
    }
}
