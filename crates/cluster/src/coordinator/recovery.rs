//! Recovery: rebuild the committed data of lost (or damaged) members from the survivors of
//! their group by parallel decode, place their ranks on spares or, per process, on the
//! nodes left, then encode the new groups — committed by one journal write, so an
//! interrupted recovery leaves the previous state, still decodable, for the next attempt.
//! Also the decode behind `eckpt restore` for a rank whose node is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use eckpt_proto::Connection;

use super::{Coordinator, Journal};
use crate::debug::pause_point_async;
use crate::geometry::Geometry;
use crate::msg::{
    AgentRequest, AgentResponse, CodingTask, CoordResponse, DecodeSpec, Deliver, GroupRecord, NodeInfo,
    ObjectKind, RecoveryReport,
};
use crate::ClusterError;

/// A member to rebuild: its position, the node decoding it, and what that node does with it.
type Rebuild = (usize, NodeInfo, Deliver);

/// A group's losses.
struct Damage {
    /// Positions whose shards cannot be used.
    unavailable: Vec<usize>,
    /// Positions lost for good (agent down), a subset of `unavailable`.
    lost: Vec<usize>,
}

async fn progress(conn: &mut Connection, what: &str, done: u64, total: u64) {
    let _ = conn
        .send_control(&CoordResponse::Progress {
            what: what.to_string(),
            done,
            total,
        })
        .await;
}

impl Coordinator {
    /// Asks every alive group member to verify its committed data; damaged members by name.
    async fn scrub(&self, journal: &Journal, alive: &BTreeMap<String, NodeInfo>) -> BTreeMap<String, String> {
        let mut requests = Vec::new();
        let mut names = Vec::new();
        for rec in &journal.groups {
            let g = &rec.group;
            for (pos, name) in g
                .members
                .iter()
                .enumerate()
                .filter(|(_, n)| alive.contains_key(*n))
            {
                // The objects this member holds something of: parity, or a stripe blob.
                let objects = rec
                    .objects
                    .iter()
                    .filter(|o| {
                        let geometry = Geometry::new(journal.coding.layout, g.k, g.m, o.data_chunks);
                        geometry.parity_chunks(pos) > 0
                            || (matches!(o.kind, ObjectKind::Stripe { .. }) && geometry.holds_data(pos))
                    })
                    .map(|o| o.id)
                    .collect();
                names.push(name.clone());
                requests.push((
                    alive[name].clone(),
                    AgentRequest::Scrub {
                        ranks: journal.ranks_on(name),
                        epoch: journal.committed,
                        objects,
                    },
                ));
            }
        }
        let mut damaged = BTreeMap::new();
        for (name, r) in names.into_iter().zip(self.ask_all(requests).await) {
            match r {
                Ok(AgentResponse::Damage { ranks, objects }) if ranks.is_empty() && objects.is_empty() => {}
                Ok(AgentResponse::Damage { ranks, objects }) => {
                    let what = ranks
                        .iter()
                        .map(|(r, e)| format!("rank {r}: {e}"))
                        .chain(objects.iter().map(|(o, e)| format!("object {o}: {e}")))
                        .collect::<Vec<_>>()
                        .join("; ");
                    damaged.insert(name, what);
                }
                Ok(other) => {
                    damaged.insert(name, format!("unexpected scrub answer {other:?}"));
                }
                Err(e) => {
                    damaged.insert(name, e.to_string());
                }
            }
        }
        damaged
    }

    /// Decodes the shards of `rebuild` members of `rec` (every object of its chain) at the
    /// given targets and installs them as `deliver` says. Returns the first task id.
    async fn decode_members(
        &self,
        rec: &GroupRecord,
        unavailable: &[usize],
        rebuild: &[Rebuild],
        alive: &BTreeMap<String, NodeInfo>,
        epoch: u64,
    ) -> Result<u64, ClusterError> {
        let coding = self.snapshot().coding;
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
                task: self.task_id(),
                group: g.clone(),
                coding,
                object: object.clone(),
                participants: participants.clone(),
                decode: Some(DecodeSpec {
                    unavailable: unavailable.to_vec(),
                    rebuild: targets.clone(),
                }),
                pause_after_rows: None,
            };
            let requests = participants
                .iter()
                .flatten()
                .map(|p| (p.clone(), AgentRequest::Code(task.clone())))
                .collect();
            for r in self.ask_all(requests).await {
                r?;
            }
            parts.push((task.task, object.clone()));
        }
        let installs = rebuild
            .iter()
            .map(|(member, target, deliver)| {
                (
                    target.clone(),
                    AgentRequest::Install {
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

    /// `eckpt recover`.
    pub(super) async fn recover(
        self: &Arc<Self>,
        conn: &mut Connection,
    ) -> Result<RecoveryReport, ClusterError> {
        let _op = self.op.lock().await;
        self.abort_open_epoch().await;
        let journal = self.snapshot();
        let alive = self.alive();
        let epoch = journal.committed;
        let mut report = RecoveryReport {
            epoch,
            ..RecoveryReport::default()
        };
        progress(conn, "verifying survivors", 0, 3).await;
        let damaged = if epoch > 0 {
            self.scrub(&journal, &alive).await
        } else {
            BTreeMap::new()
        };
        for (name, what) in &damaged {
            report.warnings.push(format!("{name} holds damaged data: {what}"));
        }

        // Which members of which group are gone or damaged.
        let mut damage: BTreeMap<usize, Damage> = BTreeMap::new();
        for (gi, rec) in journal.groups.iter().enumerate() {
            let lost: Vec<usize> = (0..rec.group.members.len())
                .filter(|&x| !alive.contains_key(&rec.group.members[x]))
                .collect();
            let mut unavailable = lost.clone();
            unavailable.extend(
                (0..rec.group.members.len()).filter(|&x| damaged.contains_key(&rec.group.members[x])),
            );
            if !unavailable.is_empty() {
                damage.insert(gi, Damage { unavailable, lost });
            }
        }
        if damage.is_empty() {
            progress(conn, "nothing to recover", 3, 3).await;
            return Ok(report);
        }

        // Targets: spares first (a spare takes over a lost member whole), else the ranks of a
        // lost member are spread per process over the nodes left.
        let members = journal.members();
        let mut spares: Vec<String> = journal
            .nodes
            .iter()
            .filter(|(name, e)| !e.removed && !members.contains(*name) && alive.contains_key(*name))
            .map(|(name, _)| name.clone())
            .collect();
        spares.sort_by_key(|n| super::natural_key(n));
        spares.reverse();
        let lost_names: BTreeSet<String> = damage
            .iter()
            .flat_map(|(gi, d)| {
                d.lost
                    .iter()
                    .map(|&x| journal.groups[*gi].group.members[x].clone())
            })
            .collect();
        let hosts: Vec<String> = members
            .iter()
            .filter(|n| !lost_names.contains(*n) && journal.holds_data(n))
            .cloned()
            .collect();
        let mut placement = journal.placement.clone();
        let mut replaced: BTreeMap<String, String> = BTreeMap::new();
        let mut added: BTreeMap<String, usize> = BTreeMap::new();
        let mut plans: Vec<(usize, Vec<Rebuild>)> = Vec::new();
        for (&gi, d) in &damage {
            let rec = &journal.groups[gi];
            if d.unavailable.len() > rec.group.m
                || (epoch > 0 && rec.objects.is_empty() && !d.lost.is_empty())
            {
                let lost_ranks: Vec<String> = d
                    .unavailable
                    .iter()
                    .flat_map(|&x| journal.ranks_on(&rec.group.members[x]))
                    .map(|r| r.to_string())
                    .collect();
                let names: Vec<&str> = d
                    .unavailable
                    .iter()
                    .map(|&x| rec.group.members[x].as_str())
                    .collect();
                report.unrecoverable.push(format!(
                    "group {} lost {} of {} members ({}), more than m={}: ranks {} at epoch {epoch} cannot be rebuilt",
                    rec.group.id,
                    d.unavailable.len(),
                    rec.group.members.len(),
                    names.join(", "),
                    rec.group.m,
                    if lost_ranks.is_empty() { "none".to_string() } else { lost_ranks.join(", ") },
                ));
                continue;
            }
            let mut rebuild = Vec::new();
            for &x in &d.unavailable {
                let name = &rec.group.members[x];
                let ranks = journal.ranks_on(name);
                if !d.lost.contains(&x) {
                    // Damaged but alive: repaired in place.
                    if !ranks.is_empty() {
                        let mut here = BTreeMap::new();
                        for &r in &ranks {
                            here.insert(r, alive[name].clone());
                        }
                        rebuild.push((x, alive[name].clone(), Deliver::Import { placement: here }));
                    }
                    report.repaired.push(name.clone());
                    continue;
                }
                if let Some(spare) = spares.pop() {
                    replaced.insert(name.clone(), spare.clone());
                    let mut to = BTreeMap::new();
                    for &r in &ranks {
                        placement.insert(r, spare.clone());
                        to.insert(r, alive[&spare].clone());
                    }
                    if !ranks.is_empty() {
                        rebuild.push((x, alive[&spare].clone(), Deliver::Import { placement: to }));
                    }
                    report
                        .rebuilt
                        .push((name.clone(), ranks.iter().map(|&r| (r, spare.clone())).collect()));
                    continue;
                }
                if ranks.is_empty() {
                    continue;
                }
                let mut to = BTreeMap::new();
                for &r in &ranks {
                    let host = journal
                        .least_loaded(&hosts, &added)
                        .ok_or_else(|| ClusterError::Unrecoverable("no node is left to host ranks".into()))?;
                    *added.entry(host.clone()).or_default() += 1;
                    placement.insert(r, host.clone());
                    to.insert(r, alive[&host].clone());
                }
                let target = to.values().next().expect("ranks is not empty").clone();
                report.rebuilt.push((
                    name.clone(),
                    to.iter().map(|(r, n)| (*r, n.name.clone())).collect(),
                ));
                rebuild.push((x, target, Deliver::Import { placement: to }));
            }
            plans.push((gi, rebuild));
        }

        progress(conn, "decoding lost data", 1, 3).await;
        let started = Instant::now();
        for (gi, rebuild) in &plans {
            if epoch == 0 || rebuild.is_empty() {
                continue;
            }
            let d = &damage[gi];
            self.decode_members(&journal.groups[*gi], &d.unavailable, rebuild, &alive, epoch)
                .await?;
        }
        report.decode_seconds = started.elapsed().as_secs_f64();
        pause_point_async(&self.dir.debug(), "mid-recovery", "coordinator").await;

        // New groups: spares replace lost members in place when every loss of a group found
        // one; otherwise the nodes left are grouped anew.
        let recovered: BTreeSet<usize> = plans.iter().map(|(gi, _)| *gi).collect();
        let regroup_all = damage.iter().any(|(gi, d)| {
            recovered.contains(gi)
                && d.lost
                    .iter()
                    .any(|&x| !replaced.contains_key(&journal.groups[*gi].group.members[x]))
        });
        let mut next = journal.clone();
        next.placement = placement;
        let mut changed: Vec<usize> = Vec::new();
        if regroup_all {
            let mut nodes: Vec<String> = members
                .iter()
                .filter(|n| !lost_names.contains(*n))
                .cloned()
                .collect();
            nodes.extend(replaced.values().cloned());
            let keep_unrecoverable: Vec<GroupRecord> = journal
                .groups
                .iter()
                .enumerate()
                .filter(|(gi, _)| damage.contains_key(gi) && !recovered.contains(gi))
                .map(|(_, g)| g.clone())
                .collect();
            let stuck: BTreeSet<String> = keep_unrecoverable
                .iter()
                .flat_map(|g| g.group.members.iter().cloned())
                .collect();
            nodes.retain(|n| !stuck.contains(n));
            let mut groups = next.regroup(&nodes);
            if groups.is_empty() && !nodes.is_empty() {
                report.warnings.push(format!(
                    "only {} node(s) left: not enough for m={} parity, the data is not protected",
                    nodes.len(),
                    next.coding.m
                ));
            }
            changed.extend(0..groups.len());
            groups.extend(keep_unrecoverable);
            next.groups = groups;
        } else {
            for gi in &recovered {
                let id = next.next_group;
                next.next_group += 1;
                let rec = &mut next.groups[*gi];
                rec.group.id = id;
                for member in rec.group.members.iter_mut() {
                    if let Some(spare) = replaced.get(member) {
                        *member = spare.clone();
                    }
                }
                rec.objects.clear();
                changed.push(*gi);
            }
        }
        for name in &lost_names {
            if let Some(e) = next.nodes.get_mut(name) {
                e.removed = e.removed
                    || recovered
                        .iter()
                        .any(|gi| journal.groups[*gi].group.members.contains(name));
            }
        }
        for spare in replaced.values() {
            if let Some(e) = next.nodes.get_mut(spare) {
                e.spare = false;
            }
        }

        progress(conn, "restoring redundancy", 2, 3).await;
        let started = Instant::now();
        let mut commit = Vec::new();
        if epoch > 0 {
            let to_encode: Vec<GroupRecord> = changed.iter().map(|&i| next.groups[i].clone()).collect();
            let results = self.encode_groups(to_encode, &next.placement, epoch, true).await;
            let mut failed = None;
            for (&i, r) in changed.iter().zip(results) {
                match r {
                    Ok(e) => {
                        commit.extend(e.commit.clone());
                        next.groups[i] = e.record;
                        report.reencoded.push(next.groups[i].group.id);
                    }
                    Err(e) => {
                        failed.get_or_insert(e);
                    }
                }
            }
            if let Some(e) = failed {
                return Err(e);
            }
        }
        next.next_task = self.snapshot().next_task;
        *self.journal.lock().expect("journal lock") = next.clone();
        self.save(&next)?;
        report.encode_seconds = started.elapsed().as_secs_f64();
        self.send_commit(epoch, &commit, false).await;
        progress(conn, "done", 3, 3).await;
        if !report.unrecoverable.is_empty() {
            let mut why = report.unrecoverable.clone();
            why.extend(report.warnings.iter().cloned());
            return Err(ClusterError::Unrecoverable(why.join("; ")));
        }
        Ok(report)
    }

    /// `eckpt restore`: where to read rank `rank` at `epoch` from, decoding it onto a helper
    /// agent when its node is gone. A decode that fails is retried once after scrubbing the
    /// group, with the members whose data fails its checksums as erasures too: the export
    /// is byte-exact while lost plus damaged members are at most `m`, a clear error beyond.
    pub(super) async fn export(
        self: &Arc<Self>,
        rank: u32,
        epoch: Option<u64>,
    ) -> Result<CoordResponse, ClusterError> {
        let _op = self.op.lock().await;
        let journal = self.snapshot();
        let alive = self.alive();
        let committed = journal.committed;
        let epoch = epoch.unwrap_or(committed);
        if committed == 0 {
            return Err(ClusterError::Invalid("no epoch is committed yet".into()));
        }
        let node = journal
            .placement
            .get(&rank)
            .ok_or_else(|| ClusterError::Invalid(format!("rank {rank} never checkpointed")))?;
        if let Some(info) = alive.get(node) {
            return Ok(CoordResponse::ExportFrom {
                node: info.clone(),
                epoch,
                scratch: None,
            });
        }
        if epoch != committed {
            return Err(ClusterError::Invalid(format!(
                "rank {rank}'s node {node} is down and parity protects only epoch {committed}, not {epoch}"
            )));
        }
        let (gi, x) = journal
            .group_of(node)
            .ok_or_else(|| ClusterError::Invalid(format!("node {node} is in no group")))?;
        let rec = &journal.groups[gi];
        let members = &rec.group.members;
        // Erasures: the members that are down and, once a decode failed, those whose data
        // fails its checksums (a corrupt parity chunk breaks a decode like a lost member).
        let mut erasures: BTreeMap<usize, String> = (0..members.len())
            .filter(|&p| !alive.contains_key(&members[p]))
            .map(|p| (p, "down".to_string()))
            .collect();
        let helper = members
            .iter()
            .find_map(|n| alive.get(n))
            .or_else(|| alive.values().next())
            .cloned()
            .ok_or_else(|| ClusterError::Invalid("no agent is alive".into()))?;
        let mut scrubbed = false;
        let task = loop {
            if erasures.len() > rec.group.m || rec.objects.is_empty() {
                let why: Vec<String> = erasures
                    .iter()
                    .map(|(&p, what)| format!("{} {what}", members[p]))
                    .collect();
                return Err(ClusterError::Unrecoverable(format!(
                    "rank {rank} at epoch {epoch} is lost: group {} has {} of {} members unusable ({}), more than m={}",
                    rec.group.id,
                    erasures.len(),
                    members.len(),
                    why.join("; "),
                    rec.group.m
                )));
            }
            let unavailable: Vec<usize> = erasures.keys().copied().collect();
            let rebuild = [(x, helper.clone(), Deliver::Export { rank })];
            match self
                .decode_members(rec, &unavailable, &rebuild, &alive, epoch)
                .await
            {
                Ok(task) => break task,
                Err(e) if scrubbed => return Err(e),
                Err(e) => {
                    scrubbed = true;
                    let group = Journal {
                        groups: vec![rec.clone()],
                        ..journal.clone()
                    };
                    let damaged = self.scrub(&group, &alive).await;
                    if damaged.is_empty() {
                        return Err(e);
                    }
                    for (p, name) in members.iter().enumerate() {
                        if let Some(what) = damaged.get(name) {
                            erasures.insert(p, format!("damaged: {what}"));
                        }
                    }
                }
            }
        };
        Ok(CoordResponse::ExportFrom {
            node: helper,
            epoch,
            scratch: Some(task),
        })
    }
}
