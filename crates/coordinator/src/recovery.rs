//! Recovery: rebuild the committed data of lost (or damaged) members from the survivors of
//! their group by parallel decode, place their ranks on spares or, per process, on the
//! nodes left, then encode the new groups — committed by one journal write, so an
//! interrupted recovery leaves the previous state, still decodable, for the next attempt.
//! The decode it runs also serves `eckpt restore` of a rank whose node is gone (`export.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::protection::check_protection;
use super::recovery_plan::{plan_recovery, RecoveryPlan};
use super::sessions::registered_again;
use super::{Coordinator, Journal};
use eckpt_cluster_api::msg::{
    CodingTask, CoordResponse, DecodeSpec, Deliver, GroupRecord, Install, MoveRank, NodeInfo, RecoveryReport,
    Relocation, Scrub,
};
use eckpt_cluster_api::{ClusterError, ErrorKind};
use eckpt_daemon::debug::pause_point_async;

/// Runs of one recovery at most, when members keep registering again while it runs.
const RECOVERY_RUNS: u32 = 3;

/// A member to rebuild: its position, the node decoding it, and what that node does with it.
type Rebuild = (usize, NodeInfo, Deliver);

/// What a recovery may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Whatever it takes (`eckpt recover`, `eckpt run`): lost nodes rebuilt, ranks moved, a
    /// restore from the flush.
    All,
    /// Parity alone, every rank staying where it is: the coordinator's own repair, which
    /// may run while a job does (`repair.rs`).
    Parity,
}

/// Refuses, for [`Scope::Parity`], a recovery that needs more than parity encoded anew:
/// rebuilding or moving ranks, or a restore from the flush, is for `eckpt recover` and the
/// job's supervisor, which stop the ranks first.
fn parity_only(
    cannot_serve: Option<&str>,
    planned: &Result<RecoveryPlan, ClusterError>,
) -> Result<(), ClusterError> {
    let beyond = |what: String| Err(ClusterError::Refused(format!("{what}: left for `eckpt recover`")));
    if let Some(reason) = cannot_serve {
        return beyond(reason.to_string());
    }
    let Ok(plan) = planned else {
        return Ok(());
    };
    let rebuilds = plan.repairs.iter().any(|r| !r.rebuild.is_empty());
    if rebuilds || !plan.rebuilt.is_empty() || !plan.moves.is_empty() {
        return beyond("rank data must be rebuilt or moved".to_string());
    }
    Ok(())
}

/// What the decode tasks of a recovery cost: their wall time, and the payload bytes each
/// node sent and received (benchmarks compare the busiest link with the link rate).
#[derive(Debug, Default)]
pub(super) struct DecodeCost {
    pub seconds: f64,
    pub traffic: BTreeMap<String, (u64, u64)>,
}

/// Where a recovery reports its steps as it goes.
pub(super) trait Progress: Send {
    /// Step `done` of `total`, named `what`.
    fn step(&mut self, what: &str, done: u64, total: u64) -> impl std::future::Future<Output = ()> + Send;
}

/// The reports the client's connection forwards: `eckpt recover` draws the steps. A client
/// gone meanwhile does not stop the recovery.
impl Progress for tokio::sync::mpsc::UnboundedSender<Box<CoordResponse>> {
    async fn step(&mut self, what: &str, done: u64, total: u64) {
        let _ = self.send(Box::new(CoordResponse::Progress {
            what: what.to_string(),
            done,
            total,
        }));
    }
}

impl Coordinator {
    /// Asks every alive group member to verify its committed data; damaged members by name.
    pub(super) async fn scrub(
        &self,
        journal: &Journal,
        alive: &BTreeMap<String, NodeInfo>,
    ) -> BTreeMap<String, String> {
        let mut requests = Vec::new();
        let mut names = Vec::new();
        let index = journal.node_index();
        for name in journal.members().into_iter().filter(|n| alive.contains_key(n)) {
            names.push(name.clone());
            requests.push((
                alive[&name].clone(),
                Scrub {
                    ranks: index.ranks_on(&name).to_vec(),
                    epoch: journal.committed,
                    // A member has a position.
                    objects: index
                        .group_of(&name)
                        .map(|at| journal.held_objects_at(at))
                        .unwrap_or_default(),
                },
            ));
        }
        let mut damaged = BTreeMap::new();
        for (name, r) in names.into_iter().zip(self.ask_all(requests).await) {
            match r {
                Ok(damage) if damage.is_empty() => {}
                Ok(damage) => {
                    damaged.insert(name, damage.summary());
                }
                Err(e) => {
                    damaged.insert(name, e.to_string());
                }
            }
        }
        damaged
    }

    /// Asks every holder of `groups`, just encoded anew and committed, to verify its part of
    /// their objects (a scrub of those objects alone). A recovery reports a group's
    /// redundancy restored only when each holder confirms it: an agent that registered again
    /// in the middle of the recovery resolved its store against the journal of that moment
    /// and dropped the parity it had prepared, and its commit then found nothing to commit.
    /// A holder that does not confirm is marked damaged (`status` says so, and the
    /// coordinator's repair encodes the group again). Returns the ids of the confirmed
    /// groups, and a line for each other.
    async fn confirm_parity(&self, groups: &[GroupRecord], epoch: u64) -> (Vec<u64>, Vec<String>) {
        let (journal, alive) = self.read(|s| (s.journal().clone(), s.alive())).await;
        let mut requests = Vec::new();
        let mut asked = Vec::new();
        let mut unconfirmed: BTreeMap<u64, Vec<(String, String)>> = BTreeMap::new();
        for rec in groups {
            let ids: Vec<_> = rec.objects.iter().map(|o| o.id).collect();
            for name in &rec.group.members {
                let objects: Vec<_> = journal
                    .held_objects(name)
                    .into_iter()
                    .filter(|id| ids.contains(id))
                    .collect();
                if objects.is_empty() {
                    continue;
                }
                let Some(info) = alive.get(name) else {
                    let down = "down".to_string();
                    unconfirmed
                        .entry(rec.group.id)
                        .or_default()
                        .push((name.clone(), down));
                    continue;
                };
                asked.push((rec.group.id, name.clone()));
                requests.push((
                    info.clone(),
                    Scrub {
                        ranks: Vec::new(),
                        epoch,
                        objects,
                    },
                ));
            }
        }
        for ((group, name), answer) in asked.into_iter().zip(self.ask_all(requests).await) {
            let problem = match answer {
                // Only objects were asked for.
                Ok(damage) if damage.is_empty() => continue,
                Ok(damage) => damage.summary(),
                Err(e) => e.to_string(),
            };
            unconfirmed.entry(group).or_default().push((name, problem));
        }
        let marked: Vec<(String, String)> = unconfirmed.values().flatten().cloned().collect();
        self.read(move |s| {
            for (node, what) in marked {
                s.lacks_objects(&node, what);
            }
        })
        .await;
        let confirmed = groups
            .iter()
            .map(|rec| rec.group.id)
            .filter(|id| !unconfirmed.contains_key(id))
            .collect();
        let lines = unconfirmed
            .into_iter()
            .map(|(group, holders)| {
                let holders: Vec<String> = holders.iter().map(|(n, what)| format!("{n} ({what})")).collect();
                format!(
                    "group {group} is not protected yet: its parity is not confirmed by {}; the coordinator encodes it again",
                    holders.join(", ")
                )
            })
            .collect();
        (confirmed, lines)
    }

    /// Decodes the shards of `rebuild` members of `rec` (every object of its chain) at the
    /// given targets and installs them as `deliver` says. Returns the first task id; adds
    /// the decode tasks' time and traffic to `cost`.
    pub(super) async fn decode_members(
        &self,
        rec: &GroupRecord,
        unavailable: &[usize],
        rebuild: &[Rebuild],
        alive: &BTreeMap<String, NodeInfo>,
        epoch: u64,
        cost: &mut DecodeCost,
    ) -> Result<u64, ClusterError> {
        let coding = self.read(|s| s.journal().coding).await;
        let g = &rec.group;
        let n = g.k + g.m;
        let mut participants: Vec<Option<NodeInfo>> = g
            .members
            .iter()
            .enumerate()
            .map(|(x, name)| {
                (!unavailable.contains(&x))
                    .then(|| alive.get(name).cloned())
                    .flatten()
            })
            .collect();
        let mut targets = Vec::new();
        for (member, target, _) in rebuild {
            let index = match participants
                .iter()
                .position(|p| p.as_ref().is_some_and(|p| p.name == target.name))
            {
                Some(i) => i,
                None => {
                    participants.push(Some(target.clone()));
                    participants.len() - 1
                }
            };
            targets.push((*member, index));
        }
        if participants[..n].iter().filter(|p| p.is_some()).count() < g.k {
            return Err(ClusterError::Unrecoverable(format!(
                "group {} has fewer than k={} readable members",
                g.id, g.k
            )));
        }
        let mut parts = Vec::new();
        for object in &rec.objects {
            let task = CodingTask {
                task: self.task_id().await,
                group: g.clone(),
                coding,
                object: object.clone(),
                participants: participants.clone(),
                decode: Some(DecodeSpec {
                    unavailable: unavailable.to_vec(),
                    rebuild: targets.clone(),
                }),
            };
            let requests: Vec<_> = participants
                .iter()
                .flatten()
                .map(|p| (p.clone(), task.clone()))
                .collect();
            let names: Vec<String> = requests.iter().map(|(p, _)| p.name.clone()).collect();
            let started = Instant::now();
            let answers = self.run_task(task.task, requests).await?;
            cost.seconds += started.elapsed().as_secs_f64();
            for (name, t) in names.into_iter().zip(answers) {
                let traffic = cost.traffic.entry(name).or_default();
                traffic.0 += t.bytes_sent;
                traffic.1 += t.bytes_received;
            }
            parts.push((task.task, object.clone()));
        }
        let installs = rebuild
            .iter()
            .map(|(member, target, deliver)| {
                (
                    target.clone(),
                    Install {
                        parts: parts.clone(),
                        member: *member,
                        epoch,
                        deliver: deliver.clone(),
                    },
                )
            })
            .collect();
        for r in self.ask_all(installs).await {
            r?;
        }
        Ok(parts.first().map_or(0, |p| p.0))
    }

    /// `eckpt recover`: scrub, plan ([`plan_recovery`]), decode, move, re-encode, and switch
    /// the journal only once every step succeeded and the new state protects every rank.
    pub(super) async fn recover(
        self: &Arc<Self>,
        progress: &mut impl Progress,
        relocation: Relocation,
    ) -> Result<RecoveryReport, ClusterError> {
        let _op = self.op.lock().await;
        self.abort_open_epoch("aborted by recovery: re-checkpoint on the ranks' new nodes")
            .await;
        self.recover_held(progress, relocation, Scope::All).await
    }

    /// A recovery within `scope`, by a caller holding the `op` lock. One whose commit was
    /// refused because a member registered again while it ran (what it prepared there is
    /// gone) runs again from a new plan, up to [`RECOVERY_RUNS`] times in all: the
    /// registration that refused it is over, and `eckpt recover` should not fail on it.
    pub(super) async fn recover_held(
        self: &Arc<Self>,
        progress: &mut impl Progress,
        relocation: Relocation,
        scope: Scope,
    ) -> Result<RecoveryReport, ClusterError> {
        let mut runs = 1;
        loop {
            match self.recover_once(progress, relocation, scope).await {
                Err(e) if runs < RECOVERY_RUNS && registered_again(&e) => {
                    tracing::warn!(error = %e, "the recovery runs again: a member registered again while it ran");
                    runs += 1;
                }
                done => return done,
            }
        }
    }

    /// One run of [`Coordinator::recover_held`].
    async fn recover_once(
        self: &Arc<Self>,
        progress: &mut impl Progress,
        relocation: Relocation,
        scope: Scope,
    ) -> Result<RecoveryReport, ClusterError> {
        // A coordinator just restarted or replaced, or that has just heard agents again after
        // a silence of its own, rebuilds no node whose agent may still be on its way to it:
        // the wait ends when every node registered, or with its bound (`State::awaited`).
        let awaited = self.read(|s| s.awaited()).await;
        if !awaited.is_empty() {
            tracing::info!(
                nodes = listed(&awaited),
                "recovery waits for nodes that may come back before judging what is lost"
            );
            progress.step("waiting for the agents to register", 0, 3).await;
            while !self.read(|s| s.awaited().is_empty()).await {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let began = Instant::now();
        let (journal, alive, damaged_before, flushed_since) = self
            .read(|s| {
                let flushed_since = s.flush.has_flushed_after(s.journal().job.fresh_from);
                let damaged: BTreeSet<String> = s.damaged().into_keys().collect();
                (s.journal().clone(), s.alive(), damaged, flushed_since)
            })
            .await;
        // Nodes that registered without committed data they should hold: rebuilt below
        // (the scrub finds what they miss), then no longer damaged.
        let epoch = journal.committed;
        let mut report = RecoveryReport {
            epoch,
            ..RecoveryReport::default()
        };
        progress.step("verifying survivors", 0, 3).await;
        let verifying = Instant::now();
        let damaged = if epoch > 0 {
            self.scrub(&journal, &alive).await
        } else {
            BTreeMap::new()
        };
        report.verify_seconds = verifying.elapsed().as_secs_f64();
        for (name, what) in &damaged {
            report.warnings.push(format!("{name} holds damaged data: {what}"));
        }
        let alive_names: BTreeSet<String> = alive.keys().cloned().collect();
        let damaged_names: BTreeSet<String> = damaged.keys().cloned().collect();
        let planned = plan_recovery(&journal, &alive_names, &damaged_names, relocation);
        report.plan_seconds = began.elapsed().as_secs_f64();
        // The node level cannot serve: the job restarts from its flush, if it has one.
        let cannot_serve = match &planned {
            Err(e) if e.kind() == ErrorKind::Unrecoverable => Some(e.to_string()),
            Ok(plan) if !plan.unrecoverable.is_empty() => Some(plan.unrecoverable.join("; ")),
            Ok(_) if epoch == 0 && flushed_since => {
                Some("the node stores hold no committed epoch".to_string())
            }
            _ => None,
        };
        if scope == Scope::Parity {
            parity_only(cannot_serve.as_deref(), &planned)?;
        }
        if let (Some(reason), Some(config)) = (cannot_serve, self.flush_config.clone()) {
            progress.step("restoring from the flush", 1, 3).await;
            let restore = self.restore_from_flush(&config, reason).await?;
            self.clear_damage(damaged_before).await;
            progress.step("done", 3, 3).await;
            report.epoch = restore.epoch;
            report.warnings.extend(restore.skipped.iter().cloned());
            report.from_flush = Some(restore);
            return Ok(report);
        }
        let plan = planned?;
        if plan.is_empty() {
            // The scrub found every committed byte where it belongs.
            self.clear_damage(damaged_before).await;
            progress.step("nothing to recover", 3, 3).await;
            return Ok(report);
        }
        tracing::info!(
            epoch,
            lost = listed(plan.rebuilt.iter().map(|(n, _)| n)),
            repaired = listed(&plan.repaired),
            moves = plan.moves.len(),
            unrecoverable = plan.unrecoverable.len(),
            "recovery planned"
        );
        let node = |name: &String| {
            alive.get(name).cloned().ok_or_else(|| ClusterError::Node {
                node: name.clone(),
                reason: "down: run `eckpt recover` again".into(),
            })
        };

        // A member that registers again while the recovery runs resolves its store against
        // the journal of that moment, dropping what the recovery prepared on it (decoded
        // shards, new parity): the commit is refused then, as an epoch's is. (Found by the
        // simulator once its disks took time: a coordinator frozen past the agents'
        // heartbeat wait mid-recovery journaled parity that its holders had dropped.)
        let members = plan.next.members();
        let sessions = self.read(move |s| s.sessions_of(&members)).await;

        progress.step("decoding lost data", 1, 3).await;
        let started = Instant::now();
        let mut cost = DecodeCost::default();
        if epoch > 0 {
            for repair in plan.repairs.iter().filter(|r| !r.rebuild.is_empty()) {
                let mut rebuild = Vec::with_capacity(repair.rebuild.len());
                for b in &repair.rebuild {
                    let placement = b
                        .placement
                        .iter()
                        .map(|(r, n)| Ok((*r, node(n)?)))
                        .collect::<Result<_, ClusterError>>()?;
                    rebuild.push((b.member, node(&b.target)?, Deliver::Import { placement }));
                }
                self.decode_members(
                    &journal.groups[repair.group],
                    &repair.unavailable,
                    &rebuild,
                    &alive,
                    epoch,
                    &mut cost,
                )
                .await?;
            }
            let moves = plan
                .moves
                .iter()
                .map(|m| {
                    Ok((
                        node(&m.from)?,
                        MoveRank {
                            rank: m.rank,
                            epoch,
                            to: node(&m.to)?,
                        },
                    ))
                })
                .collect::<Result<Vec<_>, ClusterError>>()?;
            for r in self.ask_all(moves).await {
                r?;
            }
        }
        report.decode_seconds = started.elapsed().as_secs_f64();
        report.decode_task_seconds = cost.seconds;
        report.decode_traffic = cost.traffic;
        pause_point_async(
            &self.dir.debug(),
            eckpt_daemon::debug::Phase::MidRecovery,
            "coordinator",
        )
        .await;

        progress.step("restoring redundancy", 2, 3).await;
        let started = Instant::now();
        let mut next = plan.next;
        let mut commit = Vec::new();
        if epoch > 0 {
            let to_encode: Vec<GroupRecord> = plan.reencode.iter().map(|&i| next.groups[i].clone()).collect();
            let results = self.encode_groups(to_encode, &next.placement, epoch, true).await;
            for (&i, r) in plan.reencode.iter().zip(results) {
                let e = r?;
                commit.extend(e.commit.clone());
                next.groups[i] = e.record;
            }
        }
        check_protection(&next, &plan.lost_groups)?;
        pause_point_async(
            &self.dir.debug(),
            eckpt_daemon::debug::Phase::BeforeCommit,
            "coordinator",
        )
        .await;
        // The commit point of the recovery: one journal write, with the task counter as it
        // stands now (tasks were handed out while decoding and encoding).
        let reencoded: Vec<GroupRecord> = plan.reencode.iter().map(|&i| next.groups[i].clone()).collect();
        self.update_if_same_sessions(sessions, move |j| {
            next.next_task = j.next_task;
            **j = next;
        })
        .await?;
        self.clear_damage(damaged_before).await;
        report.encode_seconds = started.elapsed().as_secs_f64();
        let members: BTreeSet<String> = reencoded
            .iter()
            .flat_map(|rec| rec.group.members.iter().cloned())
            .collect();
        self.send_commit(epoch, &commit, false, Some(members)).await;
        if epoch > 0 {
            let (confirmed, unconfirmed) = self.confirm_parity(&reencoded, epoch).await;
            report.reencoded = confirmed;
            if !unconfirmed.is_empty() {
                report.warnings.extend(unconfirmed);
                // Scope::Parity is the repair itself: what it could not restore waits for
                // the next registration or `eckpt recover`, rather than a loop of repairs.
                if scope == Scope::All {
                    self.repair_soon();
                }
            }
        }
        progress.step("done", 3, 3).await;
        report.rebuilt = plan.rebuilt;
        report.repaired = plan.repaired;
        report.moved = plan.moves.into_iter().map(|m| (m.rank, m.from, m.to)).collect();
        report.warnings.extend(plan.warnings);
        tracing::info!(
            epoch,
            rebuilt = rebuilt_text(&report.rebuilt),
            moved = listed(
                report
                    .moved
                    .iter()
                    .map(|(rank, from, to)| format!("rank {rank} {from} → {to}"))
            ),
            groups = listed(&report.reencoded),
            decode_seconds = report.decode_seconds,
            encode_seconds = report.encode_seconds,
            "recovery committed"
        );
        if !plan.unrecoverable.is_empty() {
            let mut why = plan.unrecoverable;
            why.extend(report.warnings.iter().cloned());
            return Err(ClusterError::Unrecoverable(why.join("; ")));
        }
        Ok(report)
    }
}

/// `items` as a reader lists them (`n1, n2`) for a log field, or nothing — the field left
/// out — when there are none.
fn listed<T: std::fmt::Display>(
    items: impl IntoIterator<Item = T>,
) -> Option<tracing::field::DisplayValue<String>> {
    let text: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    (!text.is_empty()).then(|| tracing::field::display(text.join(", ")))
}

/// Where the ranks of each rebuilt node went, as a reader says it: `n1: ranks 1,5 → s0;
/// n2: rank 3 → n0` (a node that hosted no ranks: `n4 (no ranks)`), or nothing when no
/// node was rebuilt.
fn rebuilt_text(rebuilt: &[(String, BTreeMap<u32, String>)]) -> Option<tracing::field::DisplayValue<String>> {
    let nodes: Vec<String> = rebuilt
        .iter()
        .map(|(node, ranks)| {
            let mut by_node: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for (rank, to) in ranks {
                by_node.entry(to).or_default().push(rank.to_string());
            }
            if by_node.is_empty() {
                return format!("{node} (no ranks)");
            }
            let went: Vec<String> = by_node
                .iter()
                .map(|(to, ranks)| {
                    let noun = if ranks.len() == 1 { "rank" } else { "ranks" };
                    format!("{noun} {} → {to}", ranks.join(","))
                })
                .collect();
            format!("{node}: {}", went.join(", "))
        })
        .collect();
    (!nodes.is_empty()).then(|| tracing::field::display(nodes.join("; ")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::super::test_cluster::{Fault, Kind, Steps, TestCluster, LIVENESS};
    use eckpt_cluster_api::msg::{RecoveryReport, Relocation};
    use eckpt_cluster_api::ClusterError;
    use eckpt_coding::config::CodingConfig;
    use serde_json::Value;

    /// Six nodes in one group (k=4 m=2), 8 ranks committed at epoch 1; then n1 (a data
    /// member hosting ranks) dies.
    async fn one_lost() -> TestCluster {
        let c = TestCluster::start(6, CodingConfig::default()).await;
        assert!(c.checkpoint(8).await.committed);
        assert!(!c.coord.snapshot().await.ranks_on("n1").is_empty());
        c.kill("n1").await;
        c.agents.clear();
        c
    }

    /// `eckpt recover` (ranks relocated per process), its steps unheard.
    async fn recover(c: &TestCluster) -> Result<RecoveryReport, ClusterError> {
        c.coord.recover(&mut Steps::default(), Relocation::Process).await
    }

    /// What a recovery decides: placement, groups and their parity, the committed epoch.
    async fn decisions(c: &TestCluster) -> Value {
        let j = c.coord.snapshot().await;
        serde_json::json!({
            "placement": j.placement,
            "groups": j.groups,
            "committed": j.committed,
            "world": j.world,
        })
    }

    #[tokio::test]
    async fn a_lost_node_is_decoded_and_the_journal_switches_once_the_new_group_is_protected() {
        let c = one_lost().await;
        let mut steps = Steps::default();
        let report = c.coord.recover(&mut steps, Relocation::Process).await.unwrap();
        assert_eq!(report.rebuilt.len(), 1, "{report:?}");
        assert_eq!(report.rebuilt[0].0, "n1");
        assert_eq!(
            steps.0,
            [
                "0/3 verifying survivors",
                "1/3 decoding lost data",
                "2/3 restoring redundancy",
                "3/3 done"
            ]
        );
        let journal = c.coord.snapshot().await;
        assert_eq!(journal.committed, 1);
        assert!(journal.ranks_on("n1").is_empty(), "n1's ranks live elsewhere now");
        assert_eq!(journal.placement.len(), 8);
        assert!(journal
            .groups
            .iter()
            .all(|g| !g.group.members.contains(&"n1".to_string())));
        assert!(journal
            .groups
            .iter()
            .all(|g| g.objects.last().is_some_and(|o| o.version == 1)));
        assert!(c.agents.asked("n1").is_empty(), "a dead node is asked nothing");
        for survivor in ["n0", "n2", "n3", "n4", "n5"] {
            let asked = c.agents.asked(survivor);
            assert_eq!(asked.first(), Some(&Kind::Scrub), "{survivor}: {asked:?}");
            // Holders of the new parity confirm it after the commit: they verify it.
            let holds_parity = !journal.held_objects(survivor).is_empty();
            let after_commit = if holds_parity {
                [Kind::Commit, Kind::Scrub].as_slice()
            } else {
                [Kind::Commit].as_slice()
            };
            assert!(asked.ends_with(after_commit), "{survivor}: {asked:?}");
        }
        assert_eq!(report.reencoded.len(), journal.groups.len(), "{report:?}");
        // The rebuilt ranks are decoded and installed before the new group is encoded.
        let order: Vec<Kind> = ["n0", "n2", "n3", "n4", "n5"]
            .iter()
            .flat_map(|n| c.agents.asked(n))
            .collect();
        assert!(
            order.contains(&Kind::Decode) && order.contains(&Kind::Install) && order.contains(&Kind::Encode)
        );
        assert!(
            c.checkpoint(8).await.committed,
            "the job checkpoints on the survivors"
        );
    }

    /// Registers n1's agent again (its store kept) as a new session; the answer and session.
    async fn n1_comes_back(c: &TestCluster) -> (eckpt_cluster_api::msg::Registered, u64) {
        let reg = eckpt_cluster_api::msg::Registration {
            info: TestCluster::info("n1"),
            token: "token-n1".into(),
            fresh: false,
            domain: None,
        };
        let (answer, session) = c.register(reg).await;
        (answer.unwrap(), session)
    }

    #[tokio::test]
    async fn a_node_rebuilt_elsewhere_while_away_rejoins_as_a_spare_once_it_holds_nothing() {
        let c = one_lost().await;
        recover(&c).await.unwrap();
        let removed = |j: &crate::state::Journal| (j.nodes["n1"].removed, j.nodes["n1"].spare);
        assert_eq!(removed(&c.coord.snapshot().await), (true, false));

        // Back with its store: told to discard what it holds; while it reports holding
        // something (it did not discard), it stays out, and its heartbeats end its session.
        let (answer, session) = n1_comes_back(&c).await;
        assert!(answer.discard && answer.keep.is_empty(), "{answer:?}");
        let stale = eckpt_cluster_api::msg::Inventory {
            ranks: vec![(1, Some(1))],
            objects: Vec::new(),
        };
        c.coord.holds("n1".into(), session, stale).await.unwrap();
        assert_eq!(removed(&c.coord.snapshot().await), (true, false));
        let beat = c.coord.read(move |s| s.heard_from("n1", session)).await;
        assert!(beat.is_err_and(|e| e.to_string().contains("rebuilt elsewhere")));

        // Discarded: a spare, and the next loss is rebuilt onto it.
        let (answer, session) = n1_comes_back(&c).await;
        assert!(answer.discard);
        c.coord
            .holds("n1".into(), session, Default::default())
            .await
            .unwrap();
        assert_eq!(removed(&c.coord.snapshot().await), (false, true));
        let (again, _) = n1_comes_back(&c).await;
        assert!(!again.discard, "a spare keeps what it holds");
        assert!(c.checkpoint(8).await.committed);
        let lost = "n2";
        assert!(!c.coord.snapshot().await.ranks_on(lost).is_empty());
        c.kill(lost).await;
        let report = recover(&c).await.unwrap();
        assert_eq!(report.rebuilt.len(), 1, "{report:?}");
        let journal = c.coord.snapshot().await;
        assert!(
            journal.group_of("n1").is_some(),
            "n1 replaced {lost}: {:?}",
            journal.groups
        );
        assert!(!journal.nodes["n1"].spare && !journal.nodes["n1"].removed);
    }

    #[tokio::test]
    async fn a_failure_in_any_phase_of_a_recovery_leaves_the_journal_as_it_was_and_names_the_node() {
        // n1's ranks are decoded onto n0 and n2 (Install); n3 takes part in every task.
        for (phase, node) in [
            (Kind::Decode, "n3"),
            (Kind::Install, "n0"),
            (Kind::Describe, "n3"),
            (Kind::Encode, "n3"),
        ] {
            let c = one_lost().await;
            let before = decisions(&c).await;
            c.agents.fault(node, Fault::Fail(phase, "injected: disk gone"));
            let e = recover(&c).await.expect_err(&format!("a failure at {phase:?}"));
            let text = e.to_string();
            assert!(
                text.contains(node) && text.contains("disk gone"),
                "{phase:?}: {text}"
            );
            assert!(c.agents.asked(node).contains(&phase), "{phase:?} reached {node}");
            assert_eq!(decisions(&c).await, before, "{phase:?}: the journal changed");
            assert!(
                ["n0", "n2", "n3", "n4", "n5"]
                    .iter()
                    .all(|n| !c.agents.asked(n).contains(&Kind::Commit)),
                "{phase:?}: a commit was sent"
            );
        }
    }

    #[tokio::test]
    async fn a_survivor_whose_data_fails_the_scrub_is_rebuilt_too_while_losses_are_at_most_m() {
        let c = one_lost().await;
        c.agents
            .fault("n3", Fault::Fail(Kind::Scrub, "injected: checksum mismatch"));
        let report = recover(&c).await.unwrap();
        assert_eq!(report.repaired, ["n3"], "{report:?}");
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("n3") && w.contains("checksum mismatch")),
            "{report:?}"
        );
        assert!(c.coord.snapshot().await.ranks_on("n1").is_empty());
        // A third loss in the group of m=2 is beyond the code: refused, journal kept.
        let c = one_lost().await;
        let before = decisions(&c).await;
        c.agents
            .fault("n3", Fault::Fail(Kind::Scrub, "injected: checksum mismatch"));
        c.agents
            .fault("n4", Fault::Fail(Kind::Scrub, "injected: checksum mismatch"));
        let e = recover(&c).await.unwrap_err();
        assert!(
            e.to_string().contains("n1") || e.to_string().contains("more than"),
            "{e}"
        );
        assert_eq!(decisions(&c).await, before);
    }

    /// A holder of the new parity that cannot show it after the commit (it dropped what it
    /// prepared when it registered again in the middle of the recovery): the recovery does
    /// not report its group protected, and says so.
    #[tokio::test]
    async fn a_group_whose_holder_does_not_confirm_its_parity_is_not_reported_protected() {
        let c = one_lost().await;
        for node in ["n0", "n2", "n3", "n4", "n5"] {
            c.agents.fault(
                node,
                Fault::FailAfter(Kind::Commit, Kind::Scrub, "object g9-e1 is missing"),
            );
        }
        let report = recover(&c).await.unwrap();
        assert!(report.reencoded.is_empty(), "{report:?}");
        let journal = c.coord.snapshot().await;
        for rec in &journal.groups {
            let id = rec.group.id;
            assert!(
                report
                    .warnings
                    .iter()
                    .any(|w| w.contains(&format!("group {id} is not protected yet"))
                        && w.contains("is missing")),
                "{report:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_member_stopped_in_the_middle_of_a_decode_is_named_within_its_liveness() {
        let c = Arc::new(one_lost().await);
        let before = decisions(&c).await;
        for node in ["n0", "n2", "n3", "n4", "n5"] {
            c.agents.fault(node, Fault::AwaitPeers(Kind::Decode));
        }
        let recovery = tokio::spawn({
            let c = c.clone();
            async move { recover(&c).await }
        });
        while !c.agents.asked("n4").contains(&Kind::Decode) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        c.stop("n4");
        let started = Instant::now();
        let e = recovery.await.unwrap().unwrap_err();
        let waited = started.elapsed();
        assert!(e.to_string().contains("n4"), "{e}");
        assert!(
            waited < 3 * LIVENESS + Duration::from_secs(1),
            "waited {waited:?}"
        );
        assert_eq!(decisions(&c).await, before);
    }

    /// Logs say where ranks went as a reader would, not as Rust debug output
    /// (`[("n1", {1: "s0", 5: "s0"})]`), and leave out a field with nothing in it.
    #[test]
    fn recovery_logs_read_as_prose() {
        use std::collections::BTreeMap;
        let rebuilt = vec![
            (
                "n1".to_string(),
                BTreeMap::from([
                    (1, "s0".to_string()),
                    (5, "s0".to_string()),
                    (7, "n0".to_string()),
                ]),
            ),
            ("n4".to_string(), BTreeMap::new()),
        ];
        assert_eq!(
            super::rebuilt_text(&rebuilt).unwrap().to_string(),
            "n1: rank 7 → n0, ranks 1,5 → s0; n4 (no ranks)"
        );
        assert!(super::rebuilt_text(&[]).is_none());
        assert_eq!(super::listed([3u64, 4]).unwrap().to_string(), "3, 4");
        assert!(super::listed(Vec::<String>::new()).is_none());
    }
}
