//! One epoch's encode across all groups and its two-phase commit, and the group encode
//! that recovery reuses to restore redundancy.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::time::Instant;

use tokio::task::JoinSet;

use super::encode_plan::{participants, plan_encode, Choice, EncodePlan, Encoded};
use super::epoch_state::outcome;
use super::pace::aggregate;
use super::protection::check_protection;
use super::state::RanksByNode;
use super::Coordinator;
use eckpt_cluster_api::msg::{Commit, EpochOutcome, GroupRecord, NodeInfo, ShardInfo};
use eckpt_cluster_api::{ClusterError, ErrorKind};
use eckpt_coding::ObjectId;
use eckpt_daemon::debug::pause_point_async;

impl Coordinator {
    /// A node whose part of an epoch failed on its own stored data (a checksum) is marked
    /// damaged: every later epoch would fail on that data the same way, and a recovery
    /// (`eckpt run`'s, or `eckpt recover`) repairs it from its group. A mark the recovery's
    /// scrub does not confirm is cleared by it.
    async fn mark_if_rotten(&self, e: &ClusterError) {
        if let ClusterError::Remote {
            node: Some(node),
            kind: ErrorKind::Corrupt,
            message,
        } = e
        {
            let (node, what) = (node.clone(), message.clone());
            self.read(move |s| s.holds_damaged_ranks(&node, what)).await;
        }
    }

    /// Encodes `epoch` for one group: a full encode (image or stripe) or, in update mode
    /// when every member's layout still fits and it is cheaper, an update of the existing
    /// parity. `force_full` starts over (recovery, new groups). The decisions are
    /// [`plan_encode`]'s and [`EncodePlan::choose`]'s; this asks the members and runs the task.
    pub(super) async fn encode_group(
        &self,
        rec: &GroupRecord,
        alive: &BTreeMap<String, NodeInfo>,
        placement: &RanksByNode,
        epoch: u64,
        force_full: bool,
    ) -> Result<Encoded, ClusterError> {
        let coding = self.read(|s| s.journal().coding).await;
        let infos = participants(&rec.group, alive)?;
        let plan = plan_encode(coding, rec, placement, epoch, force_full);
        let shards = self.describe_shards(&plan, &infos).await?;
        match plan.choose(&shards)? {
            Choice::Update(update) => {
                let task = update.task(self.task_id().await, coding, &infos);
                let requests = infos.iter().map(|i| (i.clone(), task.clone())).collect();
                update.fold(self.run_task(task.task, requests).await?)
            }
            Choice::Full(full) => {
                let task = full.task(self.task_id().await, coding, &infos);
                let requests = infos.iter().map(|i| (i.clone(), task.clone())).collect();
                full.fold(self.run_task(task.task, requests).await?)
            }
        }
    }

    /// Asks each data member of `plan` to describe its shard; answers in the plan's order.
    async fn describe_shards(
        &self,
        plan: &EncodePlan,
        infos: &[NodeInfo],
    ) -> Result<Vec<ShardInfo>, ClusterError> {
        let requests = plan
            .describe()
            .into_iter()
            .map(|(x, d)| (infos[x].clone(), d))
            .collect();
        self.ask_all(requests).await.into_iter().collect()
    }

    /// Encodes every group concurrently; the alive nodes and each node's ranks are worked
    /// out once and shared, not copied per group.
    pub(super) async fn encode_groups(
        self: &Arc<Self>,
        groups: Vec<GroupRecord>,
        placement: &BTreeMap<u32, String>,
        epoch: u64,
        force_full: bool,
    ) -> Vec<Result<Encoded, ClusterError>> {
        let alive = Arc::new(self.alive().await);
        let placement = Arc::new(RanksByNode::of(placement));
        let mut set = JoinSet::new();
        let count = groups.len();
        for (i, rec) in groups.into_iter().enumerate() {
            let (coord, alive, placement) = (self.clone(), alive.clone(), placement.clone());
            set.spawn(async move {
                (
                    i,
                    coord
                        .encode_group(&rec, &alive, &placement, epoch, force_full)
                        .await,
                )
            });
        }
        let mut out: Vec<Option<Result<Encoded, ClusterError>>> = (0..count).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            if let Ok((i, r)) = joined {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(ClusterError::Internal("encode task failed".into()))))
            .collect()
    }

    /// Tells every node with a session (or, `to`, those of them named) to commit: the ranks
    /// it hosts, the objects it prepared, and which objects it keeps. One that is not told
    /// (not alive, or the request failed) is marked: it registers again at its next
    /// heartbeat and resolves the decision then, as an agent without a session does when it
    /// comes back. A recovery tells only the members of the groups it encoded anew: the
    /// others' holdings did not change.
    pub(super) async fn send_commit(
        &self,
        epoch: u64,
        commit: &[(ObjectId, Option<u64>)],
        ranks: bool,
        to: Option<BTreeSet<String>>,
    ) {
        let commit = commit.to_vec();
        // Each node's part, from maps built once (a scan per node made a commit cost nodes
        // × (groups + ranks)), within the state's visit rather than on a copy of the journal.
        let (sessions, requests) = self
            .read(move |s| {
                let sessions = match &to {
                    Some(to) => s.with_sessions_of(to),
                    None => s.with_sessions(),
                };
                let journal = s.journal();
                let group_of = journal.group_index();
                let keep: Vec<Vec<ObjectId>> = journal
                    .groups
                    .iter()
                    .map(|rec| rec.objects.iter().map(|o| o.id).collect())
                    .collect();
                let object_group: BTreeMap<ObjectId, usize> = keep
                    .iter()
                    .enumerate()
                    .flat_map(|(g, ids)| ids.iter().map(move |&id| (id, g)))
                    .collect();
                let mut committed: Vec<Vec<(ObjectId, Option<u64>)>> = vec![Vec::new(); keep.len()];
                for (id, version) in commit {
                    if let Some(&g) = object_group.get(&id) {
                        committed[g].push((id, version));
                    }
                }
                let ranks_by_node = ranks.then(|| RanksByNode::of(&journal.placement));
                let requests: Vec<(NodeInfo, Commit)> = sessions
                    .iter()
                    .map(|(info, _)| {
                        let group = group_of.get(info.name.as_str()).copied();
                        (
                            info.clone(),
                            Commit {
                                epoch,
                                ranks: ranks_by_node
                                    .as_ref()
                                    .map(|r| r.on(&info.name).to_vec())
                                    .unwrap_or_default(),
                                objects: group.map(|g| committed[g].clone()).unwrap_or_default(),
                                keep: group.map(|g| keep[g].clone()).unwrap_or_default(),
                            },
                        )
                    })
                    .collect();
                (sessions, requests)
            })
            .await;
        let mut missed = Vec::new();
        let told = sessions.len();
        for ((info, session), r) in sessions.into_iter().zip(self.ask_all(requests).await) {
            if let Err(e) = r {
                missed.push((info.name, session, e));
            }
        }
        let nobody_told = missed.len() == told;
        // A warning once per node and session — the first decision it missed, after which
        // it must register again — and none for a node the cluster removed (lost, and
        // rebuilt elsewhere): its agent is not expected to hear anything.
        let missed = self
            .read(move |s| {
                missed
                    .into_iter()
                    .map(|(node, session, e)| {
                        let first = s.missed_decision(&node, session, epoch, nobody_told);
                        let removed = s.journal().nodes.get(&node).is_none_or(|n| n.removed);
                        (node, e, first && !removed)
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        for (node, e, news) in missed {
            if news {
                tracing::warn!(node = %node, epoch, error = %e, "commit not delivered: the agent registers again before it counts as alive");
            } else {
                tracing::debug!(node = %node, epoch, error = %e, "commit not delivered");
            }
        }
        self.delivered.send_if_modified(|delivered| {
            let newer = epoch > *delivered;
            *delivered = (*delivered).max(epoch);
            newer
        });
    }

    /// Domains agents declared while an earlier first encode ran were not spread then (the
    /// groups do not change under an encode): until something is coded, each epoch's encode
    /// first forms the groups across the domains as now known. The journal is copied only
    /// before the first commit.
    async fn spread_before_first_encode(&self, epoch: u64) {
        let unspread = self
            .read(|s| s.journal().committed == 0 && s.journal().clone().spread_before_coding())
            .await;
        if !unspread {
            return;
        }
        match self.update(|j| j.spread_before_coding()).await {
            Ok(_) => tracing::info!(
                epoch,
                "groups formed anew across the failure domains before the first encode"
            ),
            Err(e) => tracing::warn!(epoch, error = %e, "groups not formed anew across the failure domains"),
        }
    }

    /// Runs epoch `epoch` once every rank is ready: encode, then commit or abort.
    pub(super) async fn run_epoch(self: Arc<Self>, epoch: u64) {
        let _op = self.op.lock().await;
        // A recovery or a new attempt of the job that took the lock first aborted the epoch.
        if !self
            .read(move |s| s.epochs.open == epoch && s.epochs.running)
            .await
        {
            return;
        }
        let debug = self.dir.debug();
        pause_point_async(&debug, eckpt_daemon::debug::Phase::BeforeEncode, "coordinator").await;
        self.spread_before_first_encode(epoch).await;
        let (journal, reports) = self
            .read(|s| (s.journal().clone(), s.epochs.reports.clone()))
            .await;
        // Every rank reported its pace (they all checkpoint by interval): the figures the
        // next epoch's ranks schedule by. A rank without one means no figures at all.
        let pace = reports
            .iter()
            .map(|(r, report)| Some((*r, report.pace.as_ref()?)))
            .collect::<Option<Vec<_>>>()
            .and_then(|paces| aggregate(paces).ok());
        let started = Instant::now();
        let members = journal.members();
        let sessions = self.read(move |s| s.sessions_of(&members)).await;
        let results = self
            .encode_groups(journal.groups, &journal.placement, epoch, false)
            .await;
        let encode_seconds = started.elapsed().as_secs_f64();
        let mut outcome = EpochOutcome {
            encode_seconds,
            image_bytes: reports.values().map(|r| r.image_bytes).sum(),
            stored_bytes: reports.values().map(|r| r.stored_bytes).sum(),
            ..outcome(epoch, false, None)
        };
        let mut encoded = Vec::new();
        for r in results {
            match r {
                Ok(e) => encoded.push(e),
                Err(e) => {
                    self.mark_if_rotten(&e).await;
                    outcome.reason.get_or_insert(e.to_string());
                }
            }
        }
        if outcome.reason.is_none() {
            pause_point_async(&debug, eckpt_daemon::debug::Phase::BeforeCommit, "coordinator").await;
            let commit: Vec<(ObjectId, Option<u64>)> =
                encoded.iter().flat_map(|e| e.commit.clone()).collect();
            for e in &encoded {
                outcome.kinds.push(e.kind.to_string());
                outcome.bytes_sent.extend(e.bytes_sent.clone());
                outcome.shard_bytes = outcome.shard_bytes.max(e.shard_bytes);
            }
            let mut next = self.snapshot().await;
            next.committed = epoch;
            next.next_epoch = epoch + 1;
            next.groups = encoded.into_iter().map(|e| e.record).collect();
            let saved = match check_protection(&next, &[]) {
                Ok(()) => {
                    self.update_if_same_sessions(sessions, move |j| {
                        j.committed = next.committed;
                        j.next_epoch = next.next_epoch;
                        // An epoch after the job finished: the job moved on from its finish.
                        j.job.finished_unix = None;
                        j.groups = next.groups;
                        j.record_pace(epoch, pace);
                    })
                    .await
                }
                Err(e) => Err(e),
            };
            match saved {
                Ok(()) => {
                    outcome.committed = true;
                    pause_point_async(&debug, eckpt_daemon::debug::Phase::AfterCommit, "coordinator").await;
                    self.send_commit(epoch, &commit, true, None).await;
                    self.flush_after_commit(epoch).await;
                }
                Err(e) => outcome.reason = Some(e.to_string()),
            }
        }
        if !outcome.committed {
            tracing::warn!(
                epoch,
                reason = outcome.reason.as_deref().map(tracing::field::display),
                "epoch aborted"
            );
            self.abort_everywhere(epoch, pace).await;
        } else {
            tracing::info!(epoch, seconds = encode_seconds, "epoch committed");
        }
        self.finish_epoch(outcome).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::test_cluster::{Fault, Kind, TestCluster, LIVENESS};
    use eckpt_coding::config::CodingConfig;

    /// Six nodes, one group of k=4 m=2: n0–n3 hold data, n4 and n5 parity.
    async fn cluster() -> TestCluster {
        TestCluster::start(6, CodingConfig::default()).await
    }

    /// Racks the agents declared while the first encode ran (no regrouping under an
    /// encode; that epoch then aborted): the next first encode spreads the groups, so that
    /// no group holds more than m members of one rack.
    #[tokio::test]
    async fn the_first_encode_spreads_groups_over_domains_declared_during_an_earlier_one() {
        let c = TestCluster::start(12, CodingConfig::default()).await;
        c.coord
            .update(|j| {
                for i in 0..12 {
                    j.nodes.get_mut(&format!("n{i}")).unwrap().domain = Some(format!("rack{}", i / 3));
                }
            })
            .await
            .unwrap();
        let exposed = |j: &crate::state::Journal| {
            j.groups
                .iter()
                .filter(|g| j.overexposed(&g.group).is_some())
                .count()
        };
        assert_eq!(
            exposed(&c.coord.snapshot().await),
            2,
            "formed in name order: whole racks"
        );
        assert!(c.checkpoint(8).await.committed);
        let journal = c.coord.snapshot().await;
        assert_eq!(exposed(&journal), 0, "{:?}", journal.groups);
    }

    #[tokio::test]
    async fn an_epoch_is_committed_only_after_every_member_encoded_it() {
        let c = cluster().await;
        let outcome = c.checkpoint(8).await;
        assert!(outcome.committed, "{outcome:?}");
        assert_eq!(outcome.kinds, ["full"]);
        let journal = c.coord.snapshot().await;
        assert_eq!((journal.committed, journal.next_epoch), (1, 2));
        assert_eq!(
            journal.groups[0].objects.len(),
            1,
            "the epoch's parity is recorded"
        );
        for data in ["n0", "n1", "n2", "n3"] {
            assert_eq!(
                c.agents.asked(data),
                [Kind::Describe, Kind::Encode, Kind::Commit],
                "{data}"
            );
        }
        for parity in ["n4", "n5"] {
            assert_eq!(c.agents.asked(parity), [Kind::Encode, Kind::Commit], "{parity}");
        }
        let second = c.checkpoint(8).await;
        assert!(second.committed && second.epoch == 2, "{second:?}");
    }

    /// The nodes `status` calls damaged, with why.
    async fn damaged(c: &TestCluster) -> Vec<(String, String)> {
        let status = c.coord.status().await;
        status
            .nodes
            .into_iter()
            .filter_map(|n| Some((n.name, n.damaged?)))
            .collect()
    }

    /// A member whose part of an epoch fails on its own stored data is marked damaged, for a
    /// recovery to repair: the epoch aborts, and `status` says why. A failure of another
    /// kind (a disk that filled up) marks nothing.
    #[tokio::test]
    async fn an_epoch_that_fails_on_a_members_damaged_data_marks_it_damaged() {
        let c = cluster().await;
        assert!(c.checkpoint(8).await.committed);
        c.agents
            .fault("n5", Fault::Fail(Kind::Encode, "No space left on device"));
        assert!(!c.checkpoint(8).await.committed);
        assert_eq!(damaged(&c).await, []);
        c.agents.clear();
        c.agents.fault(
            "n2",
            Fault::Rotten(
                Kind::Encode,
                "rank 2 epoch 1: checksum mismatch in item \"image\" block 3",
            ),
        );
        let outcome = c.checkpoint(8).await;
        assert!(!outcome.committed, "{outcome:?}");
        let marked = damaged(&c).await;
        assert_eq!(marked.len(), 1, "{marked:?}");
        assert_eq!(marked[0].0, "n2");
        assert!(marked[0].1.contains("checksum mismatch"), "{marked:?}");
    }

    /// A session that misses decisions is news once: the first miss (it must register
    /// again), not every epoch after it.
    #[tokio::test]
    async fn a_missed_decision_is_news_once_per_session() {
        let c = cluster().await;
        let session = c
            .coord
            .read(|s| {
                s.with_sessions()
                    .into_iter()
                    .find(|(i, _)| i.name == "n5")
                    .unwrap()
                    .1
            })
            .await;
        let news = c
            .coord
            .read(move |s| {
                [
                    s.missed_decision("n5", session, 1, false),
                    s.missed_decision("n5", session, 2, false),
                    s.missed_decision("n5", session + 1, 3, false),
                    s.missed_decision("nobody", 0, 3, false),
                ]
            })
            .await;
        assert_eq!(news, [true, false, false, false]);
    }

    #[tokio::test]
    async fn a_member_failing_its_part_aborts_the_epoch_everywhere_and_is_named() {
        let c = cluster().await;
        assert!(c.checkpoint(4).await.committed);
        c.agents.clear();
        c.agents.fault(
            "n5",
            Fault::Fail(
                Kind::Encode,
                "/s/n5/coded/p0: No space left on device (os error 28)",
            ),
        );
        let outcome = c.checkpoint(4).await;
        let reason = outcome.reason.clone().unwrap_or_default();
        assert!(
            !outcome.committed && reason.contains("n5") && reason.contains("No space"),
            "{outcome:?}"
        );
        for node in ["n0", "n1", "n2", "n3", "n4", "n5"] {
            assert_eq!(
                c.agents.asked(node).last(),
                Some(&Kind::Abort),
                "{node} drops what it prepared"
            );
            assert!(!c.agents.asked(node).contains(&Kind::Commit), "{node}");
        }
        let journal = c.coord.snapshot().await;
        assert_eq!(journal.committed, 1, "the last committed epoch stays");
        assert_eq!(journal.next_epoch, 3, "an aborted epoch's number is never reused");
    }

    /// A part that fails (here: a peer it cannot connect to) ends the others' parts at once:
    /// they would otherwise wait out the peer deadline for its stream (two minutes).
    #[tokio::test]
    async fn a_member_failing_its_part_has_the_others_cancelled_at_once() {
        let c = cluster().await;
        for node in ["n0", "n1", "n2", "n4", "n5"] {
            c.agents.fault(node, Fault::AwaitPeers(Kind::Encode));
        }
        c.agents.fault(
            "n3",
            Fault::Fail(
                Kind::Encode,
                "node n4: connecting to tcp://10.0.0.14:4000: Invalid argument",
            ),
        );
        let started = Instant::now();
        let outcome = c.checkpoint(4).await;
        let waited = started.elapsed();
        let reason = outcome.reason.clone().unwrap_or_default();
        assert!(
            !outcome.committed && reason.contains("n3") && reason.contains("connecting"),
            "{outcome:?}"
        );
        assert!(
            waited < LIVENESS,
            "the others' parts waited {waited:?} after one had failed"
        );
        for node in ["n0", "n1", "n2", "n4", "n5"] {
            assert!(
                c.agents.asked(node).contains(&Kind::CancelTask),
                "{node} was told to end its part"
            );
        }
        assert_eq!(c.coord.snapshot().await.committed, 0);
    }

    /// A part that cannot be cancelled (a flush's copy) is awaited after another failed:
    /// the task does not end while a participant still works for it.
    #[tokio::test]
    async fn a_part_that_cannot_be_cancelled_is_awaited_after_another_failed() {
        let c = cluster().await;
        let takes = 3 * LIVENESS;
        c.agents.fault("n0", Fault::Slow(Kind::Encode, takes));
        c.agents.fault("n3", Fault::Fail(Kind::Encode, "disk full"));
        let started = Instant::now();
        let outcome = c.checkpoint(4).await;
        let reason = outcome.reason.clone().unwrap_or_default();
        assert!(!outcome.committed && reason.contains("n3"), "{outcome:?}");
        assert!(
            started.elapsed() >= takes,
            "the task ended while n0 still worked for it"
        );
    }

    #[tokio::test]
    async fn a_member_stopped_in_the_middle_of_an_encode_is_named_within_its_liveness() {
        let c = Arc::new(cluster().await);
        // Every part waits for the others' streams; n2 stops once its part has started.
        for node in ["n0", "n1", "n2", "n3", "n4", "n5"] {
            c.agents.fault(node, Fault::AwaitPeers(Kind::Encode));
        }
        let epoch = tokio::spawn({
            let c = c.clone();
            async move { c.checkpoint(4).await }
        });
        while !c.agents.asked("n2").contains(&Kind::Encode) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        c.stop("n2");
        let started = Instant::now();
        let outcome = epoch.await.unwrap();
        let waited = started.elapsed();
        let reason = outcome.reason.clone().unwrap_or_default();
        assert!(!outcome.committed && reason.contains("n2"), "{outcome:?}");
        // Noticed within its liveness period (plus a heartbeat and a watch tick), then its
        // peers are cancelled and answer at once: nothing waits for the stopped member.
        assert!(
            waited < 3 * LIVENESS + Duration::from_secs(1),
            "the epoch waited {waited:?} for a stopped member"
        );
        for node in ["n0", "n1", "n3", "n4", "n5"] {
            let asked = c.agents.asked(node);
            assert!(
                asked.contains(&Kind::CancelTask),
                "{node} was told to end its part: {asked:?}"
            );
            assert_eq!(asked.last(), Some(&Kind::Abort), "{node}");
        }
        assert!(
            !c.agents.asked("n2").contains(&Kind::Abort),
            "a stopped node is not waited for"
        );
        assert_eq!(c.coord.snapshot().await.committed, 0);
    }
}
