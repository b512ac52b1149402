//! One epoch's encode across all groups and its two-phase commit, and the group encode
//! that recovery reuses to restore redundancy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinSet;

use super::protection::check_protection;
use super::Coordinator;
use crate::debug::pause_point_async;
use eckpt_cluster_api::msg::{
    AgentRequest, AgentResponse, CodingTask, DescribeRequest, EpochOutcome, GroupRecord, NodeInfo,
    ObjectKind, ObjectRecord, ShardInfo, ShardRecord, TaskReport, UpdateTask,
};
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::Mode;
use eckpt_coding::geometry::Geometry;
use eckpt_coding::ObjectId;

/// A group's encode, done but not yet committed.
pub(super) struct Encoded {
    /// The group's record once committed.
    pub record: GroupRecord,
    /// `full`, `stripe` or `update`.
    pub kind: &'static str,
    /// Payload bytes each member sent.
    pub bytes_sent: BTreeMap<String, u64>,
    /// Padded data-shard bytes.
    pub shard_bytes: u64,
    /// What members commit: new prepared objects, or a staged update's version.
    pub commit: Vec<(ObjectId, Option<u64>)>,
}

fn expect_task(r: AgentResponse) -> Result<TaskReport, ClusterError> {
    match r {
        AgentResponse::Task(t) => Ok(t),
        other => Err(ClusterError::Protocol(format!(
            "expected a task report, got {other:?}"
        ))),
    }
}

impl Coordinator {
    /// Encodes `epoch` for one group: a full encode (image or stripe) or, in update mode
    /// when every member's layout still fits, an update of the existing parity. `force_full`
    /// starts over (recovery, new groups).
    pub(super) async fn encode_group(
        &self,
        rec: &GroupRecord,
        alive: &BTreeMap<String, NodeInfo>,
        placement: &BTreeMap<u32, String>,
        epoch: u64,
        force_full: bool,
    ) -> Result<Encoded, ClusterError> {
        let coding = self.snapshot().coding;
        let g = &rec.group;
        let n = g.k + g.m;
        let infos: Vec<NodeInfo> = g
            .members
            .iter()
            .map(|name| {
                alive.get(name).cloned().ok_or_else(|| ClusterError::Node {
                    node: name.clone(),
                    reason: "down: run `eckpt recover`".into(),
                })
            })
            .collect::<Result<_, _>>()?;
        let probe = Geometry::new(coding.layout, g.k, g.m, 1);
        let data: Vec<usize> = (0..n).filter(|&x| probe.holds_data(x)).collect();
        let ranks_of = |x: usize| -> Vec<u32> {
            placement
                .iter()
                .filter(|(_, node)| **node == g.members[x])
                .map(|(r, _)| *r)
                .collect()
        };
        let current = rec.objects.last().filter(|_| !force_full);
        let id = ObjectId { group: g.id, epoch };
        let complete = match coding.mode {
            Mode::Stripe => current.is_none() || rec.objects.len() >= coding.max_stripes as usize,
            _ => false,
        };
        let update_base = current.filter(|o| coding.mode == Mode::Update && o.kind == ObjectKind::Image);
        let describe: Vec<(NodeInfo, AgentRequest)> = data
            .iter()
            .map(|&x| {
                (
                    infos[x].clone(),
                    AgentRequest::Describe(DescribeRequest {
                        epoch,
                        ranks: ranks_of(x),
                        mode: coding.mode,
                        object: id,
                        complete,
                        update_from: update_base.map(|o| (o.shards[x].layout.clone(), o.version)),
                    }),
                )
            })
            .collect();
        let mut shards: Vec<ShardInfo> = Vec::with_capacity(data.len());
        for r in self.ask_all(describe).await {
            match r? {
                AgentResponse::Shard(s) => shards.push(s),
                other => return Err(ClusterError::Protocol(format!("expected a shard, got {other:?}"))),
            }
        }
        let mut bytes_sent = BTreeMap::new();

        // An update sends every changed byte through the first parity holder of its row; a
        // full pipeline encode sends m·D over each data member's link. Update only when it
        // is the cheaper of the two (an LU-like epoch that rewrites most pages is not).
        let changed: u64 = shards.iter().map(|s| s.changed).sum();
        let longest = shards.iter().map(|s| s.len).max().unwrap_or(0);
        let cheaper = changed < g.m as u64 * longest;
        if let Some(base) = update_base.filter(|_| cheaper && shards.iter().all(|s| s.updatable)) {
            let mut layouts = vec![ShardLayout::default(); n];
            for (&x, s) in data.iter().zip(&shards) {
                layouts[x] = s.layout.clone();
            }
            let task = UpdateTask {
                task: self.task_id(),
                group: g.clone(),
                coding,
                object: base.clone(),
                epoch,
                participants: infos.clone(),
                layouts: layouts.clone(),
            };
            let requests = infos
                .iter()
                .map(|i| (i.clone(), AgentRequest::Update(task.clone())))
                .collect();
            let mut object = base.clone();
            object.version = epoch;
            for (x, r) in self.run_task(task.task, requests).await?.into_iter().enumerate() {
                let report = expect_task(r)?;
                bytes_sent.insert(g.members[x].clone(), report.bytes_sent);
                let shard = &mut object.shards[x];
                if probe.holds_data(x) {
                    shard.layout = layouts[x].clone();
                    shard.len = layouts[x].len();
                    shard.ranks = ranks_of(x);
                }
                for (q, crc) in report.crcs {
                    let slot = shard.crcs.get_mut(q as usize).ok_or_else(|| {
                        ClusterError::Protocol(format!(
                            "update reported chunk {q} of member {x} out of range"
                        ))
                    })?;
                    *slot = crc;
                }
            }
            let shard_bytes = object.data_chunks * u64::from(object.chunk);
            return Ok(Encoded {
                record: GroupRecord {
                    group: g.clone(),
                    objects: vec![object],
                },
                kind: "update",
                bytes_sent,
                shard_bytes,
                commit: vec![(base.id, Some(epoch))],
            });
        }

        // A small object (a stripe of a few changed pages) gets a smaller chunk: padding each
        // shard to whole configured chunks would move mostly zeros. A member holds data in
        // `per_cycle` rows of each cycle (1 dedicated, k rotated), so its shard is cut in at
        // least that many chunks.
        let per_cycle = (0..n).map(|x| probe.data_chunks(x)).max().unwrap_or(1).max(1);
        let chunk =
            (longest.div_ceil(per_cycle).div_ceil(4096).max(1) * 4096).min(u64::from(coding.chunk)) as u32;
        let data_chunks = longest.div_ceil(u64::from(chunk));
        let geometry = Geometry::new(coding.layout, g.k, g.m, data_chunks);
        let mut records = vec![ShardRecord::default(); n];
        for (&x, s) in data.iter().zip(&shards) {
            records[x] = ShardRecord {
                layout: s.layout.clone(),
                ranks: ranks_of(x),
                len: s.len,
                crcs: Vec::new(),
            };
        }
        let kind = match coding.mode {
            Mode::Stripe => ObjectKind::Stripe { complete },
            _ => ObjectKind::Image,
        };
        let mut object = ObjectRecord {
            id,
            kind,
            version: epoch,
            chunk,
            data_chunks,
            shards: records,
        };
        let task = CodingTask {
            task: self.task_id(),
            group: g.clone(),
            coding,
            object: object.clone(),
            participants: infos.iter().cloned().map(Some).collect(),
            decode: None,
            pause_after_rows: Some((geometry.rows() / 2).max(1)),
        };
        let requests = infos
            .iter()
            .map(|i| (i.clone(), AgentRequest::Code(task.clone())))
            .collect();
        for (x, r) in self.run_task(task.task, requests).await?.into_iter().enumerate() {
            let report = expect_task(r)?;
            bytes_sent.insert(g.members[x].clone(), report.bytes_sent);
            if geometry.holds_data(x) {
                let mut crcs = report.crcs;
                crcs.sort_unstable();
                if crcs.len() as u64 != geometry.data_chunks(x)
                    || crcs.iter().enumerate().any(|(i, (q, _))| *q != i as u64)
                {
                    return Err(ClusterError::Protocol(format!(
                        "member {} read {} data chunks, expected {}",
                        g.members[x],
                        crcs.len(),
                        geometry.data_chunks(x)
                    )));
                }
                object.shards[x].crcs = crcs.into_iter().map(|(_, c)| c).collect();
            }
        }
        let mut objects = match kind {
            ObjectKind::Stripe { complete: false } => rec.objects.clone(),
            _ => Vec::new(),
        };
        objects.push(object);
        Ok(Encoded {
            record: GroupRecord {
                group: g.clone(),
                objects,
            },
            kind: match coding.mode {
                Mode::Stripe if complete => "stripe-full",
                Mode::Stripe => "stripe",
                Mode::Update => "full",
                Mode::Full => "full",
            },
            bytes_sent,
            shard_bytes: geometry.data_chunks(data.first().copied().unwrap_or(0)) * u64::from(chunk),
            commit: vec![(id, None)],
        })
    }

    /// Encodes every group concurrently.
    pub(super) async fn encode_groups(
        self: &Arc<Self>,
        groups: Vec<GroupRecord>,
        placement: &BTreeMap<u32, String>,
        epoch: u64,
        force_full: bool,
    ) -> Vec<Result<Encoded, ClusterError>> {
        let alive = self.alive();
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
            .map(|r| r.unwrap_or_else(|| Err(ClusterError::Invalid("encode task failed".into()))))
            .collect()
    }

    /// Tells every alive node to commit: the ranks it hosts, the objects it prepared, and
    /// which objects it keeps. Failures are logged: an agent that missed the decision
    /// resolves it when it registers again.
    pub(super) async fn send_commit(&self, epoch: u64, commit: &[(ObjectId, Option<u64>)], ranks: bool) {
        let journal = self.snapshot();
        let requests = self
            .alive()
            .into_iter()
            .map(|(name, info)| {
                let group_objects: Vec<ObjectId> = journal.keep_of(&name);
                let objects = commit
                    .iter()
                    .filter(|(id, _)| group_objects.contains(id))
                    .copied()
                    .collect();
                (
                    info,
                    AgentRequest::Commit {
                        epoch,
                        ranks: if ranks {
                            journal.ranks_on(&name)
                        } else {
                            Vec::new()
                        },
                        objects,
                        keep: group_objects,
                    },
                )
            })
            .collect();
        for r in self.ask_all(requests).await {
            if let Err(e) = r {
                tracing::warn!(error = %e, epoch, "commit not delivered");
            }
        }
    }

    /// Runs epoch `epoch` once every rank is ready: encode, then commit or abort.
    pub(super) async fn run_epoch(self: Arc<Self>, epoch: u64) {
        let _op = self.op.lock().await;
        let debug = self.dir.debug();
        pause_point_async(&debug, crate::debug::Phase::BeforeEncode, "coordinator").await;
        let journal = self.snapshot();
        let started = Instant::now();
        let results = self
            .encode_groups(journal.groups, &journal.placement, epoch, false)
            .await;
        let encode_seconds = started.elapsed().as_secs_f64();
        let mut outcome = EpochOutcome {
            epoch,
            committed: false,
            reason: None,
            encode_seconds,
            kinds: Vec::new(),
            bytes_sent: BTreeMap::new(),
            shard_bytes: 0,
        };
        let mut encoded = Vec::new();
        for r in results {
            match r {
                Ok(e) => encoded.push(e),
                Err(e) => {
                    outcome.reason.get_or_insert(e.to_string());
                }
            }
        }
        if outcome.reason.is_none() {
            pause_point_async(&debug, crate::debug::Phase::BeforeCommit, "coordinator").await;
            let commit: Vec<(ObjectId, Option<u64>)> =
                encoded.iter().flat_map(|e| e.commit.clone()).collect();
            for e in &encoded {
                outcome.kinds.push(e.kind.to_string());
                outcome.bytes_sent.extend(e.bytes_sent.clone());
                outcome.shard_bytes = outcome.shard_bytes.max(e.shard_bytes);
            }
            let mut next = self.snapshot();
            next.committed = epoch;
            next.next_epoch = epoch + 1;
            next.groups = encoded.into_iter().map(|e| e.record).collect();
            let saved = check_protection(&next, &[]).and_then(|()| {
                self.update(|j| {
                    j.committed = next.committed;
                    j.next_epoch = next.next_epoch;
                    j.groups = next.groups;
                })
            });
            match saved {
                Ok(()) => {
                    outcome.committed = true;
                    pause_point_async(&debug, crate::debug::Phase::AfterCommit, "coordinator").await;
                    self.send_commit(epoch, &commit, true).await;
                }
                Err(e) => outcome.reason = Some(e.to_string()),
            }
        }
        if !outcome.committed {
            tracing::warn!(epoch, reason = ?outcome.reason, "epoch aborted");
            self.abort_everywhere(epoch).await;
        } else {
            tracing::info!(epoch, seconds = encode_seconds, "epoch committed");
        }
        self.finish_epoch(outcome);
    }
}
