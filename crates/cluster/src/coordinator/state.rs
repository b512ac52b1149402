//! The coordinator's durable state (its journal) and the decisions made from it alone:
//! forming groups and placing ranks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::job::JobRecord;
use eckpt_cluster_api::msg::{Group, GroupRecord, NodeInfo, ObjectKind, PaceStats};
use eckpt_cluster_api::ClusterError;
use eckpt_coding::config::CodingConfig;
use eckpt_coding::geometry::Geometry;
use eckpt_coding::ObjectId;

/// Journal format written by this version.
pub const JOURNAL_FORMAT: u32 = 1;

/// What the coordinator knows of a node across restarts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Last registration (`None` until the agent first connects).
    pub info: Option<NodeInfo>,
    /// Joined as a spare (or joined after the groups were formed).
    pub spare: bool,
    /// Lost and rebuilt elsewhere: holds nothing the cluster needs.
    pub removed: bool,
    /// The token its store proves it is this node with (set at its first registration).
    #[serde(default)]
    pub token: Option<String>,
    /// Its failure domain (a rack, a chassis, a power supply: `up --domain`), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// The coordinator's journal: rewritten atomically on every decision, so a restarted
/// coordinator resumes exactly where it stood. The commit point of an epoch is the write
/// of a journal with the higher `committed`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    /// Format version.
    pub format: u32,
    /// Coding configuration.
    pub coding: CodingConfig,
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeEntry>,
    /// Groups and the objects protecting their committed state.
    pub groups: Vec<GroupRecord>,
    /// Job size, once the first rank says.
    pub world: Option<u32>,
    /// Rank → node.
    pub placement: BTreeMap<u32, String>,
    /// Latest committed epoch (0: none).
    pub committed: u64,
    /// The epoch ranks write next.
    pub next_epoch: u64,
    /// Next group id.
    pub next_group: u64,
    /// Next task id.
    pub next_task: u64,
    /// The job's pace as every rank reported it with the latest decided epochs (a few), so
    /// that ranks opening the next epoch get the same figures even across a coordinator
    /// restart.
    #[serde(default)]
    pub pace: BTreeMap<u64, PaceStats>,
    /// The job: its id, lease holder and attempt generation (`job.rs`).
    #[serde(default)]
    pub job: JobRecord,
    /// The coordinator's term: every coordinator that starts on this journal takes the next
    /// one. Agents follow the newest term they have heard of and refuse an older one, and a
    /// coordinator finding a newer term on disk writes nothing more and stops: after a
    /// failover, the coordinator it replaced (cut off, not dead) decides nothing.
    #[serde(default)]
    pub term: u64,
}

/// How many epochs' pace figures the journal keeps.
const PACE_KEPT: usize = 4;

pub use eckpt_coding::policy::natural_key;

impl Journal {
    /// A fresh journal for `nodes` and `spares`, groups formed.
    pub fn new(coding: CodingConfig, nodes: &[String], spares: &[String]) -> Journal {
        Self::in_domains(coding, nodes, spares, &BTreeMap::new())
    }

    /// A fresh journal for `nodes` and `spares` in the failure domains `domains` (by node),
    /// groups formed across them.
    pub fn in_domains(
        coding: CodingConfig,
        nodes: &[String],
        spares: &[String],
        domains: &BTreeMap<String, String>,
    ) -> Journal {
        let mut journal = Journal {
            format: JOURNAL_FORMAT,
            coding,
            nodes: BTreeMap::new(),
            groups: Vec::new(),
            world: None,
            placement: BTreeMap::new(),
            committed: 0,
            next_epoch: 1,
            next_group: 1,
            next_task: 1,
            pace: BTreeMap::new(),
            job: JobRecord::default(),
            term: 0,
        };
        for (list, spare) in [(nodes, false), (spares, true)] {
            for name in list {
                journal.nodes.insert(
                    name.clone(),
                    NodeEntry {
                        info: None,
                        spare,
                        removed: false,
                        token: None,
                        domain: domains.get(name).cloned(),
                    },
                );
            }
        }
        journal.groups = journal.regroup(nodes);
        journal
    }

    /// The failure domain of `node`, if known.
    pub fn domain_of(&self, node: &str) -> Option<String> {
        self.nodes.get(node)?.domain.clone()
    }

    /// How `nodes` form groups of this journal's code, across their failure domains
    /// ([`eckpt_coding::policy::form_groups`]): `(data members, members)` per group.
    pub fn form_groups(&self, nodes: &[String]) -> Vec<(usize, Vec<String>)> {
        eckpt_coding::policy::form_groups(nodes, self.coding.k, self.coding.m, |n| self.domain_of(n))
    }

    /// The failure domain of which group `group` holds more than `m` members, and how many.
    pub fn overexposed(&self, group: &Group) -> Option<(String, usize)> {
        eckpt_coding::policy::overexposed(&group.members, group.m, |n| self.domain_of(n))
    }

    /// New groups (with fresh ids, no objects) over `nodes`.
    pub fn regroup(&mut self, nodes: &[String]) -> Vec<GroupRecord> {
        self.form_groups(nodes)
            .into_iter()
            .map(|(k, members)| {
                let id = self.next_group;
                self.next_group += 1;
                GroupRecord {
                    group: Group {
                        id,
                        k,
                        m: self.coding.m,
                        members,
                    },
                    objects: Vec::new(),
                }
            })
            .collect()
    }

    /// Loads a journal, checking its checksum (see `journal_file`: a damaged journal is
    /// replaced by the previous one only when that is safe, else this is an error).
    pub fn load(path: &Path) -> Result<Journal, ClusterError> {
        super::journal_file::load(path)
    }

    /// Writes the journal crash-safely with its checksum, keeping the previous one.
    pub fn save(&self, path: &Path) -> Result<(), ClusterError> {
        super::journal_file::save(self, path)
    }

    /// Refuses `rank` of a job of `world` ranks: when the job has `w` ranks, `mismatch(w)`
    /// says why (permanent: the user's to resolve, not the cluster's); a rank outside the
    /// job is bad input.
    pub fn check_rank(
        &self,
        rank: u32,
        world: u32,
        mismatch: impl FnOnce(u32) -> String,
    ) -> Result<(), ClusterError> {
        if let Some(w) = self.world.filter(|&w| w != world) {
            return Err(ClusterError::Mismatch(mismatch(w)));
        }
        if rank >= world {
            return Err(ClusterError::Invalid(format!(
                "rank {rank} outside a job of {world} ranks"
            )));
        }
        Ok(())
    }

    /// Records the pace every rank reported with `epoch` (when all did), keeping the last
    /// few epochs'.
    pub fn record_pace(&mut self, epoch: u64, pace: Option<PaceStats>) {
        if let Some(pace) = pace {
            self.pace.insert(epoch, pace);
        }
        while self.pace.len() > PACE_KEPT {
            self.pace.pop_first();
        }
    }

    /// A fresh task id.
    pub fn task_id(&mut self) -> u64 {
        let t = self.next_task;
        self.next_task += 1;
        t
    }

    /// The group a node is a member of, with its position.
    pub fn group_of(&self, node: &str) -> Option<(usize, usize)> {
        self.groups
            .iter()
            .enumerate()
            .find_map(|(g, rec)| rec.group.members.iter().position(|m| m == node).map(|p| (g, p)))
    }

    /// Whether `node` can host ranks: a group member whose position holds data.
    pub fn holds_data(&self, node: &str) -> bool {
        self.group_of(node).is_some_and(|(g, pos)| {
            let group = &self.groups[g].group;
            Geometry::new(self.coding.layout, group.k, group.m, 1).holds_data(pos)
        })
    }

    /// Ranks placed on `node`, ascending.
    pub fn ranks_on(&self, node: &str) -> Vec<u32> {
        self.placement
            .iter()
            .filter(|(_, n)| n.as_str() == node)
            .map(|(r, _)| *r)
            .collect()
    }

    /// The node with the fewest ranks per core among `candidates` (natural order breaks
    /// ties): per-process relocation, placing by free cores rather than moving whole nodes.
    pub fn least_loaded<'a>(
        &self,
        candidates: impl IntoIterator<Item = &'a String>,
        extra: &BTreeMap<String, usize>,
    ) -> Option<String> {
        candidates
            .into_iter()
            .map(|name| {
                let cores = self.nodes[name].info.as_ref().map_or(1, |i| i.cores.max(1)) as f64;
                let load = (self.ranks_on(name).len() + extra.get(name).copied().unwrap_or(0)) as f64 / cores;
                (load, natural_key(name), name.clone())
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
            .map(|(_, _, name)| name)
    }

    /// Objects each node keeps (every object of its group's chain).
    pub fn keep_of(&self, node: &str) -> Vec<ObjectId> {
        self.group_of(node)
            .map(|(g, _)| self.groups[g].objects.iter().map(|o| o.id).collect())
            .unwrap_or_default()
    }

    /// The committed objects `node` holds something of: parity at its position, or (stripe
    /// mode) the blob of its data shard. What a scrub checks and a registration must find.
    pub fn held_objects(&self, node: &str) -> Vec<ObjectId> {
        let Some((g, pos)) = self.group_of(node) else {
            return Vec::new();
        };
        let rec = &self.groups[g];
        rec.objects
            .iter()
            .filter(|o| {
                let geometry = Geometry::new(self.coding.layout, rec.group.k, rec.group.m, o.data_chunks);
                geometry.parity_chunks(pos) > 0
                    || (matches!(o.kind, ObjectKind::Stripe { .. }) && geometry.holds_data(pos))
            })
            .map(|o| o.id)
            .collect()
    }

    /// Committed versions of each object a node keeps.
    pub fn versions_of(&self, node: &str) -> Vec<(ObjectId, u64)> {
        self.group_of(node)
            .map(|(g, _)| self.groups[g].objects.iter().map(|o| (o.id, o.version)).collect())
            .unwrap_or_default()
    }

    /// Members of every group.
    pub fn members(&self) -> BTreeSet<String> {
        self.groups
            .iter()
            .flat_map(|g| g.group.members.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    /// A journal holding times (a finished job, a lease holder's start) loads back after a
    /// save: its checksum covers the values as read, so every float must survive the trip
    /// through JSON exactly.
    #[test]
    fn a_journal_with_times_loads_back_after_a_save() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mut j = Journal::new(CodingConfig::default(), &names(3), &[]);
            j.job.finished_unix = Some(1.7e9 + (state % 100_000_000) as f64 / 997.0);
            j.save(&path).unwrap();
            let back = Journal::load(&path).unwrap();
            assert_eq!(back.job.finished_unix, j.job.finished_unix);
        }
    }

    #[test]
    fn placement_balances_ranks_per_core() {
        let mut j = Journal::new(CodingConfig::default(), &names(6), &[]);
        let data: Vec<String> = names(6).into_iter().filter(|n| j.holds_data(n)).collect();
        assert_eq!(data, names(4), "dedicated parity members host no ranks");
        for rank in 0..8 {
            let node = j.least_loaded(&data, &BTreeMap::new()).unwrap();
            j.placement.insert(rank, node);
        }
        for n in &data {
            assert_eq!(j.ranks_on(n).len(), 2);
        }
    }
}
