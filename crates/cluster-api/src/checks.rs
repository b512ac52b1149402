//! What an agent checks in a task before acting on it. A task comes from an authenticated
//! coordinator, but a bug there, a damaged journal or a hostile holder of the secret must
//! get an error answer, never a panic or an allocation sized by the message: every index
//! the agent will use (members, participants, rebuild targets, layouts) is checked against
//! the group, and every length against the object's geometry.

use std::collections::BTreeSet;

use eckpt_coding::config::CHUNK_RANGE;
use eckpt_coding::geometry::Geometry;
use eckpt_coding::CodingConfig;

use crate::msg::{CodingTask, Group, NodeInfo, ObjectKind, ObjectRecord, UpdateTask};
use crate::shard_layout::ShardLayout;
use crate::ClusterError;

/// A task no correct coordinator sends.
fn malformed<T>(why: String) -> Result<T, ClusterError> {
    Err(ClusterError::Protocol(why))
}

impl CodingTask {
    /// Checks the task against its own group and object and returns the object's geometry:
    /// the group's shape, the chunk, one shard record per member that fits the geometry,
    /// the members first among the participants (then at most one extra per rebuilt
    /// member), no node twice, and every rebuild target a participant. The members and
    /// rebuilt shards themselves are checked by [`eckpt_coding::plan::CodingPlan::new`].
    pub fn check(&self) -> Result<Geometry, ClusterError> {
        let geometry = object_geometry(&self.group, &self.coding, &self.object)?;
        let n = geometry.members();
        let extra = self.decode.as_ref().map_or(0, |d| d.rebuild.len());
        if self.participants.len() < n || self.participants.len() - n > extra {
            return malformed(format!(
                "task {} has {} participants for a group of {n} and {extra} rebuilt members",
                self.task,
                self.participants.len()
            ));
        }
        distinct(self.participants.iter().flatten())?;
        if let Some(spec) = &self.decode {
            for &(member, target) in &spec.rebuild {
                if !matches!(self.participants.get(target), Some(Some(_))) {
                    return malformed(format!(
                        "member {member} is rebuilt at participant {target}, which is none"
                    ));
                }
            }
        }
        Ok(geometry)
    }
}

impl UpdateTask {
    /// Checks the update against its own group and object and returns the object's
    /// geometry: an image object, one participant per member (no node twice), and one layout
    /// per member, each well formed and fitting the member's data chunks.
    pub fn check(&self) -> Result<Geometry, ClusterError> {
        let geometry = object_geometry(&self.group, &self.coding, &self.object)?;
        let n = geometry.members();
        if self.object.kind != ObjectKind::Image {
            return malformed(format!("update task {} of a stripe object", self.task));
        }
        if self.participants.len() != n || self.layouts.len() != n {
            return malformed(format!(
                "update task {} has {} participants and {} layouts for a group of {n}",
                self.task,
                self.participants.len(),
                self.layouts.len()
            ));
        }
        distinct(self.participants.iter())?;
        for (x, layout) in self.layouts.iter().enumerate() {
            check_shard(&geometry, self.object.chunk, x, layout.len(), layout)?;
        }
        Ok(geometry)
    }
}

/// The geometry of `object` coded by `group`, after checking the configuration, the group's
/// shape, the chunk and every member's shard record against it.
fn object_geometry(
    group: &Group,
    coding: &CodingConfig,
    object: &ObjectRecord,
) -> Result<Geometry, ClusterError> {
    let shape = |e: ClusterError| ClusterError::Protocol(e.to_string());
    coding.validate().map_err(|e| shape(e.into()))?;
    let geometry = Geometry::try_new(coding.layout, group.k, group.m, object.data_chunks)
        .map_err(|e| shape(e.into()))?;
    let n = geometry.members();
    if group.members.len() != n {
        return malformed(format!(
            "group {} of k={} m={} lists {} members",
            group.id,
            group.k,
            group.m,
            group.members.len()
        ));
    }
    let (lo, hi) = CHUNK_RANGE;
    if !(lo..=hi).contains(&object.chunk) {
        return malformed(format!(
            "object {} has {}-byte chunks, outside {lo}..={hi}",
            object.id, object.chunk
        ));
    }
    if object.shards.len() != n {
        return malformed(format!(
            "object {} has {} shard records for a group of {n}",
            object.id,
            object.shards.len()
        ));
    }
    for (x, shard) in object.shards.iter().enumerate() {
        check_shard(&geometry, object.chunk, x, shard.len, &shard.layout)?;
        if shard.crcs.len() as u64 > geometry.data_chunks(x) {
            return malformed(format!(
                "member {x} of object {} has {} chunk checksums for {} chunks",
                object.id,
                shard.crcs.len(),
                geometry.data_chunks(x)
            ));
        }
    }
    Ok(geometry)
}

/// Member `x`'s shard of `len` bytes laid out by `layout` is well formed and within its data
/// chunks.
fn check_shard(
    geometry: &Geometry,
    chunk: u32,
    x: usize,
    len: u64,
    layout: &ShardLayout,
) -> Result<(), ClusterError> {
    layout.check()?;
    // At most 2^24 chunks of at most 2^24 bytes: no overflow.
    let room = geometry.data_chunks(x) * u64::from(chunk);
    let longest = len.max(layout.len());
    if longest > room {
        return malformed(format!(
            "member {x}'s shard of {longest} bytes does not fit its {} chunks of {chunk} bytes",
            geometry.data_chunks(x)
        ));
    }
    Ok(())
}

/// No node is named twice among the participants.
fn distinct<'a>(nodes: impl Iterator<Item = &'a NodeInfo>) -> Result<(), ClusterError> {
    let mut seen = BTreeSet::new();
    for node in nodes {
        if !seen.insert(node.name.as_str()) {
            return malformed(format!("node {} takes part twice", node.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{DecodeSpec, ShardRecord};
    use eckpt_coding::ObjectId;

    fn node(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            spare: false,
            tcp: eckpt_proto::Endpoint::Unix("/nonexistent".into()),
            unix: eckpt_proto::Endpoint::Unix("/nonexistent".into()),
            host: String::new(),
            cores: 1,
            store: "/nonexistent".into(),
            pid: 0,
        }
    }

    fn decode_task() -> CodingTask {
        let names: Vec<String> = (0..6).map(|i| format!("n{i}")).collect();
        let shard = ShardRecord {
            len: 3 * 4096,
            crcs: vec![0; 3],
            ..ShardRecord::default()
        };
        let mut shards = vec![shard; 4];
        shards.extend([ShardRecord::default(), ShardRecord::default()]);
        let mut participants: Vec<Option<NodeInfo>> = names.iter().map(|n| Some(node(n))).collect();
        participants[1] = None;
        participants.push(Some(node("s0")));
        CodingTask {
            task: 1,
            group: Group {
                id: 1,
                k: 4,
                m: 2,
                members: names,
            },
            coding: CodingConfig::default(),
            object: ObjectRecord {
                id: ObjectId { group: 1, epoch: 1 },
                kind: ObjectKind::Image,
                version: 1,
                chunk: 4096,
                data_chunks: 3,
                shards,
            },
            participants,
            decode: Some(DecodeSpec {
                unavailable: vec![1],
                rebuild: vec![(1, 6)],
            }),
        }
    }

    #[test]
    fn malformed_coding_tasks_are_refused() {
        assert!(decode_task().check().is_ok());
        type Spoil = fn(&mut CodingTask);
        let cases: Vec<(&str, Spoil)> = vec![
            ("k=0", |t| t.group.k = 0),
            ("members", |t| {
                t.group.members.pop();
            }),
            ("chunk", |t| t.object.chunk = 0),
            ("huge chunk", |t| t.object.chunk = u32::MAX),
            ("data chunks", |t| t.object.data_chunks = u64::MAX),
            ("shard records", |t| t.object.shards.truncate(5)),
            ("long shard", |t| t.object.shards[0].len = 3 * 4096 + 1),
            ("checksums", |t| t.object.shards[0].crcs.push(0)),
            ("few participants", |t| t.participants.truncate(5)),
            ("extra participants", |t| t.participants.push(Some(node("s1")))),
            ("node twice", |t| t.participants[6] = Some(node("n0"))),
            ("target out of range", |t| {
                t.decode.as_mut().unwrap().rebuild[0].1 = 9
            }),
            ("target without node", |t| {
                t.decode.as_mut().unwrap().rebuild[0].1 = 1
            }),
        ];
        for (what, spoil) in cases {
            let mut task = decode_task();
            spoil(&mut task);
            assert!(
                matches!(task.check(), Err(ClusterError::Protocol(_))),
                "{what} accepted"
            );
        }
    }
}
