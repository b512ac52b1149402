//! What an epoch's encode of one group will do, decided from the group's record, the
//! placement and the members' answers alone — no I/O — so that every decision (who holds
//! data, whether a stripe starts a chain, update or full encode, the chunk size, what is
//! recorded, whether the members' reports are well formed) is unit- and property-tested.
//! `epoch.rs` asks the agents and runs the tasks.

use std::collections::BTreeMap;

use eckpt_cluster_api::msg::{
    CodingTask, DescribeRequest, Group, GroupRecord, NodeInfo, ObjectKind, ObjectRecord, ShardInfo,
    ShardRecord, TaskReport, UpdateTask,
};
use eckpt_cluster_api::shard_layout::ShardLayout;
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::{CodingConfig, Mode};
use eckpt_coding::geometry::Geometry;
use eckpt_coding::policy::{chunk_size, update_is_cheaper};
use eckpt_coding::ObjectId;

use super::state::RanksByNode;

/// A group's encode, done but not yet committed.
#[derive(Debug, Clone)]
pub(super) struct Encoded {
    /// The group's record once committed.
    pub record: GroupRecord,
    /// `full`, `stripe`, `stripe-full` or `update`.
    pub kind: &'static str,
    /// Payload bytes each member sent.
    pub bytes_sent: BTreeMap<String, u64>,
    /// Padded data-shard bytes.
    pub shard_bytes: u64,
    /// What members commit: new prepared objects, or a staged update's version.
    pub commit: Vec<(ObjectId, Option<u64>)>,
}

/// One group's encode of one epoch, before its data members are asked to describe their
/// shards.
#[derive(Debug, Clone)]
pub(super) struct EncodePlan {
    /// Code and layout in force.
    pub coding: CodingConfig,
    /// The group's record as committed.
    pub record: GroupRecord,
    /// The epoch being encoded.
    pub epoch: u64,
    /// The object a full encode creates.
    pub id: ObjectId,
    /// Positions holding data, ascending: they are asked to describe their shards.
    pub data: Vec<usize>,
    /// Ranks hosted by each member, by position.
    pub ranks: Vec<Vec<u32>>,
    /// Stripe mode: whether this stripe starts a chain (complete images).
    pub complete: bool,
    /// Update mode: the committed image object an update would move forward.
    pub update_base: Option<ObjectRecord>,
}

/// What the members' answers decided.
#[derive(Debug, Clone)]
pub(super) enum Choice {
    /// Update the parity of the committed object in place.
    Update(UpdatePlan),
    /// Encode a new object (image or stripe).
    Full(FullPlan),
}

/// An update of the committed object to the plan's epoch.
#[derive(Debug, Clone)]
pub(super) struct UpdatePlan {
    /// The group.
    pub group: Group,
    /// The object being updated, as committed.
    pub base: ObjectRecord,
    /// The epoch the update brings it to.
    pub epoch: u64,
    /// Each member's layout at `epoch` (empty for parity-only members).
    pub layouts: Vec<ShardLayout>,
    /// Ranks hosted by each member, by position.
    pub ranks: Vec<Vec<u32>>,
    /// Positions holding data.
    pub data: Vec<usize>,
}

/// A full encode of a new object.
#[derive(Debug, Clone)]
pub(super) struct FullPlan {
    /// The group.
    pub group: Group,
    /// The object to encode (its CRCs come from the members' reports).
    pub object: ObjectRecord,
    /// The object's rows.
    pub geometry: Geometry,
    /// Objects kept before it (a stripe chain that goes on).
    pub chain: Vec<ObjectRecord>,
    /// `full`, `stripe` or `stripe-full`.
    pub label: &'static str,
}

/// The members of `group` as alive agents, by position; the first that is down is an error.
pub(super) fn participants(
    group: &Group,
    alive: &BTreeMap<String, NodeInfo>,
) -> Result<Vec<NodeInfo>, ClusterError> {
    group
        .members
        .iter()
        .map(|name| {
            alive.get(name).cloned().ok_or_else(|| ClusterError::Node {
                node: name.clone(),
                reason: "down: run `eckpt recover`".into(),
            })
        })
        .collect()
}

/// Plans the encode of `epoch` for the group `record`. `force_full` starts over (recovery,
/// new groups): no update, and a stripe starts a new chain.
pub(super) fn plan_encode(
    coding: CodingConfig,
    record: &GroupRecord,
    placement: &RanksByNode,
    epoch: u64,
    force_full: bool,
) -> EncodePlan {
    let g = &record.group;
    let probe = Geometry::new(coding.layout, g.k, g.m, 1);
    let data = (0..g.k + g.m).filter(|&x| probe.holds_data(x)).collect();
    let ranks = g
        .members
        .iter()
        .map(|member| placement.on(member).to_vec())
        .collect();
    let current = record.objects.last().filter(|_| !force_full);
    let complete = match coding.mode {
        Mode::Stripe => current.is_none() || record.objects.len() >= coding.max_stripes as usize,
        _ => false,
    };
    let update_base = current
        .filter(|o| coding.mode == Mode::Update && o.kind == ObjectKind::Image)
        .cloned();
    EncodePlan {
        coding,
        record: record.clone(),
        epoch,
        id: ObjectId { group: g.id, epoch },
        data,
        ranks,
        complete,
        update_base,
    }
}

impl EncodePlan {
    /// The `Describe` request for each data member, by position.
    pub fn describe(&self) -> Vec<(usize, DescribeRequest)> {
        self.data
            .iter()
            .map(|&x| {
                let request = DescribeRequest {
                    epoch: self.epoch,
                    ranks: self.ranks[x].clone(),
                    mode: self.coding.mode,
                    object: self.id,
                    complete: self.complete,
                    update_from: self
                        .update_base
                        .as_ref()
                        .map(|o| (o.shards[x].layout.clone(), o.version)),
                };
                (x, request)
            })
            .collect()
    }

    /// Decides the encode from the data members' answers (in the order of [`Self::describe`]):
    /// an update when there is a base, every member can update and it is cheaper; a full
    /// encode otherwise.
    pub fn choose(&self, shards: &[ShardInfo]) -> Result<Choice, ClusterError> {
        if shards.len() != self.data.len() {
            return Err(ClusterError::Protocol(format!(
                "{} shard descriptions for {} data members",
                shards.len(),
                self.data.len()
            )));
        }
        let changed: u64 = shards.iter().map(|s| s.changed).sum();
        let longest = shards.iter().map(|s| s.len).max().unwrap_or(0);
        let updatable = shards.iter().all(|s| s.updatable);
        match &self.update_base {
            Some(base) if updatable && update_is_cheaper(changed, self.record.group.m, longest) => {
                Ok(Choice::Update(self.update(base, shards)))
            }
            _ => Ok(Choice::Full(self.full(shards, longest))),
        }
    }

    fn update(&self, base: &ObjectRecord, shards: &[ShardInfo]) -> UpdatePlan {
        let g = &self.record.group;
        let mut layouts = vec![ShardLayout::default(); g.k + g.m];
        for (&x, s) in self.data.iter().zip(shards) {
            layouts[x] = s.layout.clone();
        }
        UpdatePlan {
            group: g.clone(),
            base: base.clone(),
            epoch: self.epoch,
            layouts,
            ranks: self.ranks.clone(),
            data: self.data.clone(),
        }
    }

    fn full(&self, shards: &[ShardInfo], longest: u64) -> FullPlan {
        let (g, coding) = (&self.record.group, &self.coding);
        let chunk = chunk_size(coding.layout, g.k, g.m, longest, coding.chunk);
        let data_chunks = longest.div_ceil(u64::from(chunk));
        let mut records = vec![ShardRecord::default(); g.k + g.m];
        for (&x, s) in self.data.iter().zip(shards) {
            records[x] = ShardRecord {
                layout: s.layout.clone(),
                ranks: self.ranks[x].clone(),
                len: s.len,
                crcs: Vec::new(),
            };
        }
        let (kind, label) = match coding.mode {
            Mode::Stripe if self.complete => (ObjectKind::Stripe { complete: true }, "stripe-full"),
            Mode::Stripe => (ObjectKind::Stripe { complete: false }, "stripe"),
            Mode::Update | Mode::Full => (ObjectKind::Image, "full"),
        };
        let chain = match kind {
            ObjectKind::Stripe { complete: false } => self.record.objects.clone(),
            _ => Vec::new(),
        };
        FullPlan {
            group: g.clone(),
            object: ObjectRecord {
                id: self.id,
                kind,
                version: self.epoch,
                chunk,
                data_chunks,
                shards: records,
            },
            geometry: Geometry::new(coding.layout, g.k, g.m, data_chunks),
            chain,
            label,
        }
    }
}

/// One answer per member, in position order.
fn check_count(group: &Group, answers: &[TaskReport]) -> Result<(), ClusterError> {
    if answers.len() == group.members.len() {
        return Ok(());
    }
    Err(ClusterError::Protocol(format!(
        "{} task reports for {} members",
        answers.len(),
        group.members.len()
    )))
}

impl UpdatePlan {
    /// The task every member runs.
    pub fn task(&self, task: u64, coding: CodingConfig, participants: &[NodeInfo]) -> UpdateTask {
        UpdateTask {
            task,
            group: self.group.clone(),
            coding,
            object: self.base.clone(),
            epoch: self.epoch,
            participants: participants.to_vec(),
            layouts: self.layouts.clone(),
        }
    }

    /// The group's record after the update, from the members' answers by position: the
    /// object moves to the new version, data members get their new layouts, and each
    /// changed chunk its CRC (a chunk outside the shard is a protocol error).
    pub fn fold(&self, answers: Vec<TaskReport>) -> Result<Encoded, ClusterError> {
        check_count(&self.group, &answers)?;
        let mut object = self.base.clone();
        object.version = self.epoch;
        let mut bytes_sent = BTreeMap::new();
        for (x, report) in answers.into_iter().enumerate() {
            bytes_sent.insert(self.group.members[x].clone(), report.bytes_sent);
            let shard = object
                .shards
                .get_mut(x)
                .ok_or_else(|| ClusterError::Protocol(format!("the updated object has no member {x}")))?;
            if self.data.contains(&x) {
                shard.layout = self.layouts[x].clone();
                shard.len = self.layouts[x].len();
                shard.ranks = self.ranks[x].clone();
            }
            for (q, crc) in report.crcs {
                let slot = shard.crcs.get_mut(q as usize).ok_or_else(|| {
                    ClusterError::Protocol(format!("update reported chunk {q} of member {x} out of range"))
                })?;
                *slot = crc;
            }
        }
        let shard_bytes = object.data_chunks * u64::from(object.chunk);
        Ok(Encoded {
            record: GroupRecord {
                group: self.group.clone(),
                objects: vec![object],
            },
            kind: "update",
            bytes_sent,
            shard_bytes,
            commit: vec![(self.base.id, Some(self.epoch))],
        })
    }
}

impl FullPlan {
    /// The task every member runs (participants pause halfway for fault injection).
    pub fn task(&self, task: u64, coding: CodingConfig, participants: &[NodeInfo]) -> CodingTask {
        CodingTask {
            task,
            group: self.group.clone(),
            coding,
            object: self.object.clone(),
            participants: participants.iter().cloned().map(Some).collect(),
            decode: None,
        }
    }

    /// The group's record after the encode, from the members' answers by position: each
    /// data member must report the CRC of every chunk of its shard, once and in order.
    pub fn fold(&self, answers: Vec<TaskReport>) -> Result<Encoded, ClusterError> {
        check_count(&self.group, &answers)?;
        let mut object = self.object.clone();
        let mut bytes_sent = BTreeMap::new();
        for (x, report) in answers.into_iter().enumerate() {
            bytes_sent.insert(self.group.members[x].clone(), report.bytes_sent);
            if self.geometry.holds_data(x) {
                object.shards[x].crcs = self.shard_crcs(x, report.crcs)?;
            }
        }
        let mut objects = self.chain.clone();
        objects.push(object);
        let first_data = (0..self.group.members.len())
            .find(|&x| self.geometry.holds_data(x))
            .unwrap_or(0);
        Ok(Encoded {
            record: GroupRecord {
                group: self.group.clone(),
                objects,
            },
            kind: self.label,
            bytes_sent,
            shard_bytes: self.geometry.data_chunks(first_data) * u64::from(self.object.chunk),
            commit: vec![(self.object.id, None)],
        })
    }

    /// Member `x`'s chunk CRCs in chunk order, checked to be one per chunk of its shard.
    fn shard_crcs(&self, x: usize, mut crcs: Vec<(u64, u32)>) -> Result<Vec<u32>, ClusterError> {
        crcs.sort_unstable();
        let expected = self.geometry.data_chunks(x);
        if crcs.len() as u64 != expected || crcs.iter().enumerate().any(|(i, (q, _))| *q != i as u64) {
            return Err(ClusterError::Protocol(format!(
                "member {} read {} data chunks, expected {expected}",
                self.group.members[x],
                crcs.len(),
            )));
        }
        Ok(crcs.into_iter().map(|(_, c)| c).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::config::Layout;
    use proptest::prelude::*;

    fn coding(k: usize, m: usize, layout: Layout, mode: Mode) -> CodingConfig {
        CodingConfig {
            k,
            m,
            layout,
            mode,
            chunk: 1 << 20,
            max_stripes: 3,
            ..CodingConfig::default()
        }
    }

    /// A group of `k + m` members `n0…`, no objects yet, and one rank per data member.
    fn group(c: &CodingConfig) -> (GroupRecord, BTreeMap<u32, String>) {
        let members: Vec<String> = (0..c.k + c.m).map(|i| format!("n{i}")).collect();
        let probe = Geometry::new(c.layout, c.k, c.m, 1);
        let placement = (0..c.k + c.m)
            .filter(|&x| probe.holds_data(x))
            .map(|x| (x as u32, members[x].clone()))
            .collect();
        let record = GroupRecord {
            group: Group {
                id: 7,
                k: c.k,
                m: c.m,
                members,
            },
            objects: Vec::new(),
        };
        (record, placement)
    }

    fn object(record: &GroupRecord, epoch: u64, kind: ObjectKind) -> ObjectRecord {
        let n = record.group.members.len();
        ObjectRecord {
            id: ObjectId {
                group: record.group.id,
                epoch,
            },
            kind,
            version: epoch,
            chunk: 4096,
            data_chunks: 2,
            shards: vec![
                ShardRecord {
                    crcs: vec![0; 2],
                    ..ShardRecord::default()
                };
                n
            ],
        }
    }

    fn shard(len: u64, changed: u64, updatable: bool) -> ShardInfo {
        ShardInfo {
            len,
            layout: ShardLayout::default(),
            updatable,
            changed,
        }
    }

    fn report(bytes_sent: u64, crcs: Vec<(u64, u32)>) -> TaskReport {
        TaskReport {
            bytes_sent,
            crcs,
            ..TaskReport::default()
        }
    }

    /// An update-mode plan of epoch 2 over a committed image of epoch 1.
    fn update_plan(force_full: bool) -> EncodePlan {
        let c = coding(2, 1, Layout::Dedicated, Mode::Update);
        let (mut record, placement) = group(&c);
        record.objects.push(object(&record, 1, ObjectKind::Image));
        plan_encode(c, &record, &RanksByNode::of(&placement), 2, force_full)
    }

    fn is_protocol(e: &ClusterError) -> bool {
        matches!(e, ClusterError::Protocol(_))
    }

    #[test]
    fn only_data_members_describe_their_shards_with_their_ranks() {
        let plan = update_plan(false);
        let asked = plan.describe();
        assert_eq!(asked.iter().map(|(x, _)| *x).collect::<Vec<_>>(), [0, 1]);
        for (x, d) in &asked {
            assert_eq!(d.ranks, [*x as u32]);
            assert_eq!(d.object, ObjectId { group: 7, epoch: 2 });
            assert_eq!(d.update_from.as_ref().map(|u| u.1), Some(1));
        }
        assert_eq!(
            plan.ranks[2],
            Vec::<u32>::new(),
            "the parity member hosts no rank"
        );
        let c = coding(2, 1, Layout::Rotated, Mode::Full);
        let (record, placement) = group(&c);
        let asked = plan_encode(c, &record, &RanksByNode::of(&placement), 1, false).describe();
        assert_eq!(asked.len(), 3, "rotated: every member holds data");
        assert!(asked.iter().all(|(_, d)| d.update_from.is_none()));
    }

    #[test]
    fn an_update_is_chosen_when_cheaper_and_every_member_can() {
        let plan = update_plan(false);
        let Choice::Update(u) = plan
            .choose(&[shard(8192, 4096, true), shard(8192, 0, true)])
            .unwrap()
        else {
            panic!("expected an update");
        };
        assert_eq!(u.base.version, 1);
        let e = u
            .fold(vec![
                report(10, vec![(1, 0xab)]),
                report(20, vec![]),
                report(0, vec![(0, 0xcd)]),
            ])
            .unwrap();
        assert_eq!(e.kind, "update");
        assert_eq!(e.commit, [(ObjectId { group: 7, epoch: 1 }, Some(2))]);
        let o = &e.record.objects[0];
        assert_eq!((o.version, o.id.epoch), (2, 1));
        assert_eq!(o.shards[0].crcs, [0, 0xab]);
        assert_eq!(o.shards[2].crcs, [0xcd, 0]);
        assert_eq!(o.shards[1].ranks, [1]);
        assert_eq!(e.bytes_sent["n1"], 20);
        assert_eq!(e.shard_bytes, 2 * 4096);
    }

    #[test]
    fn an_update_is_refused_when_dearer_not_updatable_without_base_or_forced() {
        let plan = update_plan(false);
        // m·longest = 8192: changing as much as that is a full encode.
        let dear = plan
            .choose(&[shard(8192, 4096, true), shard(8192, 4096, true)])
            .unwrap();
        assert!(matches!(dear, Choice::Full(ref f) if f.label == "full"));
        let stuck = plan
            .choose(&[shard(8192, 0, true), shard(8192, 0, false)])
            .unwrap();
        assert!(matches!(stuck, Choice::Full(_)));
        let forced = update_plan(true);
        assert!(forced.update_base.is_none());
        assert!(matches!(
            forced
                .choose(&[shard(8192, 0, true), shard(8192, 0, true)])
                .unwrap(),
            Choice::Full(_)
        ));
        let c = coding(2, 1, Layout::Dedicated, Mode::Update);
        let (record, placement) = group(&c);
        let fresh = plan_encode(c, &record, &RanksByNode::of(&placement), 1, false);
        assert!(
            fresh.update_base.is_none(),
            "no committed object, nothing to update"
        );
        let mut stripe = record.clone();
        stripe
            .objects
            .push(object(&record, 1, ObjectKind::Stripe { complete: true }));
        assert!(plan_encode(c, &stripe, &RanksByNode::of(&placement), 2, false)
            .update_base
            .is_none());
    }

    #[test]
    fn a_stripe_chain_goes_on_until_max_stripes_then_starts_over() {
        let c = coding(2, 1, Layout::Dedicated, Mode::Stripe);
        let (mut record, placement) = group(&c);
        let describe = [shard(100, 0, false), shard(5000, 0, false)];
        let first = plan_encode(c, &record, &RanksByNode::of(&placement), 1, false);
        assert!(first.complete);
        let Choice::Full(f) = first.choose(&describe).unwrap() else {
            panic!()
        };
        assert_eq!(
            (f.label, f.object.kind),
            ("stripe-full", ObjectKind::Stripe { complete: true })
        );
        assert!(f.chain.is_empty());
        record.objects.push(f.object.clone());
        for count in 1..=c.max_stripes as u64 {
            let plan = plan_encode(c, &record, &RanksByNode::of(&placement), count + 1, false);
            assert_eq!(
                plan.complete,
                count == u64::from(c.max_stripes),
                "after {count} stripes"
            );
            let Choice::Full(f) = plan.choose(&describe).unwrap() else {
                panic!()
            };
            assert_eq!(
                f.chain.len(),
                if plan.complete { 0 } else { record.objects.len() }
            );
            record.objects.push(f.object.clone());
        }
        assert!(
            plan_encode(c, &record, &RanksByNode::of(&placement), 9, true).complete,
            "forced: a new chain"
        );
    }

    #[test]
    fn malformed_reports_are_protocol_errors() {
        let plan = update_plan(false);
        let describe = [shard(10_000, 0, true), shard(4096, 0, true)];
        let Choice::Update(u) = plan.choose(&describe).unwrap() else {
            panic!()
        };
        let out_of_range = u.fold(vec![
            report(0, vec![(2, 1)]),
            report(0, vec![]),
            report(0, vec![]),
        ]);
        assert!(is_protocol(&out_of_range.unwrap_err()));
        let too_few = u.fold(vec![report(0, vec![]), report(0, vec![])]);
        assert!(is_protocol(&too_few.unwrap_err()));
        assert!(is_protocol(&plan.choose(&describe[..1]).unwrap_err()));

        let Choice::Full(f) = update_plan(true).choose(&describe).unwrap() else {
            panic!()
        };
        // 10 000 bytes in 12 KiB chunks: one chunk per data member.
        assert_eq!((f.object.chunk, f.object.data_chunks), (12_288, 1));
        let good = f
            .fold(vec![
                report(1, vec![(0, 5)]),
                report(2, vec![(0, 6)]),
                report(3, vec![]),
            ])
            .unwrap();
        assert_eq!(good.record.objects[0].shards[1].crcs, [6]);
        assert_eq!((good.kind, good.shard_bytes), ("full", 12_288));
        assert_eq!(good.commit, [(ObjectId { group: 7, epoch: 2 }, None)]);
        for bad in [vec![], vec![(0, 5), (0, 5)], vec![(1, 5)]] {
            let e = f
                .fold(vec![report(0, bad), report(0, vec![(0, 6)]), report(0, vec![])])
                .unwrap_err();
            assert!(is_protocol(&e) && e.to_string().contains("member n0 read"), "{e}");
        }
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        prop_oneof![Just(Layout::Dedicated), Just(Layout::Rotated)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn every_data_member_is_covered_by_page_multiple_chunks(
            k in 1usize..8,
            m in 1usize..4,
            layout in layouts(),
            stripe in any::<bool>(),
            configured in (8u32..=4096).prop_map(|c| c * 4096),
            lens in proptest::collection::vec(0u64..(64 << 20), 11),
        ) {
            let mode = if stripe { Mode::Stripe } else { Mode::Full };
            let c = CodingConfig { chunk: configured, ..coding(k, m, layout, mode) };
            let (record, placement) = group(&c);
            let plan = plan_encode(c, &record, &RanksByNode::of(&placement), 1, false);
            let shards: Vec<ShardInfo> = plan.data.iter().map(|&x| shard(lens[x], 0, false)).collect();
            let Choice::Full(f) = plan.choose(&shards).unwrap() else { panic!("no base, no update") };
            let chunk = u64::from(f.object.chunk);
            prop_assert!(chunk % eckpt_coding::policy::CHUNK_ROUND == 0 && chunk <= u64::from(configured));
            let longest = shards.iter().map(|s| s.len).max().unwrap_or(0);
            prop_assert!(f.object.data_chunks * chunk >= longest);
            for (&x, s) in plan.data.iter().zip(&shards) {
                prop_assert!(f.geometry.data_chunks(x) * chunk >= s.len, "member {} not covered", x);
                prop_assert_eq!(&f.object.shards[x].ranks, &plan.ranks[x]);
                prop_assert_eq!(f.object.shards[x].len, s.len);
            }
        }
    }
}
