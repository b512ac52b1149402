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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Last registration (`None` until the agent first connects).
    pub info: Option<NodeInfo>,
    /// Joined as a spare (or joined after the groups were formed).
    pub spare: bool,
    /// Lost and rebuilt elsewhere: holds nothing the cluster needs. Until it comes back and
    /// discards what it held: then it is a spare again (`State::rejoin_as_spare`).
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

/// Where every node is in a journal ([`Journal::node_index`]).
pub struct NodeIndex<'a> {
    /// Each member's group (by index) and position, and whether the position holds data.
    positions: BTreeMap<&'a str, ((usize, usize), bool)>,
    ranks: BTreeMap<&'a str, Vec<u32>>,
}

impl NodeIndex<'_> {
    /// [`Journal::group_of`], looked up.
    pub fn group_of(&self, node: &str) -> Option<(usize, usize)> {
        self.positions.get(node).map(|(at, _)| *at)
    }

    /// [`Journal::holds_data`], looked up.
    pub fn holds_data(&self, node: &str) -> bool {
        self.positions.get(node).is_some_and(|(_, data)| *data)
    }

    /// [`Journal::ranks_on`], looked up.
    pub fn ranks_on(&self, node: &str) -> &[u32] {
        self.ranks.get(node).map_or(&[], Vec::as_slice)
    }
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

    /// Which positions of a group of `k` data members out of `size` hold data.
    fn data_positions(&self, k: usize, size: usize) -> Vec<bool> {
        let geometry = Geometry::new(self.coding.layout, k, size - k, 1);
        (0..size).map(|x| geometry.holds_data(x)).collect()
    }

    /// How `nodes` form groups across their failure domains ([`Journal::form_groups`]) with
    /// every node of `hosting` (those hosting ranks, at most as many as the data positions)
    /// at a data position: `(data members, members by position)` per group. A group given
    /// more hosting nodes than it has data positions trades the extra ones for nodes hosting
    /// nothing of a group with room, of the same failure domain where there is one, so the
    /// spread over the domains survives the trade. `None` when the hosting nodes outnumber
    /// the data positions.
    pub fn seat(&self, nodes: &[String], hosting: &BTreeSet<String>) -> Option<Vec<(usize, Vec<String>)>> {
        let mut groups = self.form_groups(nodes);
        let room = |groups: &[(usize, Vec<String>)], g: usize| -> isize {
            let (k, members) = &groups[g];
            let slots = self
                .data_positions(*k, members.len())
                .iter()
                .filter(|d| **d)
                .count();
            slots as isize - members.iter().filter(|n| hosting.contains(*n)).count() as isize
        };
        while let Some(over) = (0..groups.len()).find(|&g| room(&groups, g) < 0) {
            let (x, y) = groups[over]
                .1
                .iter()
                .filter(|n| hosting.contains(*n))
                .flat_map(|x| {
                    let groups = &groups;
                    (0..groups.len())
                        .filter(move |&g| room(groups, g) > 0)
                        .flat_map(move |g| {
                            groups[g]
                                .1
                                .iter()
                                .filter(|n| !hosting.contains(*n))
                                .map(move |y| (x, g, y))
                        })
                })
                .min_by_key(|(x, g, y)| {
                    let (dx, dy) = (self.domain_of(x), self.domain_of(y));
                    (
                        dx.is_none() || dx != dy,
                        self.alike(&groups[*g].1, &dx),
                        self.alike(&groups[over].1, &dy),
                        natural_key(x),
                        natural_key(y),
                    )
                })
                .map(|(x, _, y)| (x.clone(), y.clone()))?;
            for (_, members) in groups.iter_mut() {
                for member in members.iter_mut() {
                    if *member == x {
                        *member = y.clone();
                    } else if *member == y {
                        *member = x.clone();
                    }
                }
            }
        }
        let seated = groups
            .into_iter()
            .map(|(k, members)| {
                let data = self.data_positions(k, members.len());
                let (mut first, mut rest): (Vec<String>, Vec<String>) =
                    members.into_iter().partition(|n| hosting.contains(n));
                first.sort_by_key(|n| natural_key(n));
                rest.sort_by_key(|n| natural_key(n));
                let (mut first, mut rest) = (first.into_iter(), rest.into_iter());
                let seated = data
                    .iter()
                    .map(|&is_data| {
                        let next = if is_data {
                            first.next().or_else(|| rest.next())
                        } else {
                            rest.next()
                        };
                        // The loop above left no group with negative room: its non-hosting
                        // members (`rest`) cover its parity positions, and there are as many
                        // positions as members, so neither list runs out first.
                        next.expect("as many positions as members")
                    })
                    .collect();
                (k, seated)
            })
            .collect();
        Some(seated)
    }

    /// How many of `members` are in failure domain `domain` (none when it is unknown: a node
    /// without a domain is a domain of its own).
    fn alike(&self, members: &[String], domain: &Option<String>) -> usize {
        domain.as_ref().map_or(0, |d| {
            members
                .iter()
                .filter(|n| self.domain_of(n).as_ref() == Some(d))
                .count()
        })
    }

    /// Takes from `spares` the one to join a group whose members are `staying`: of the
    /// failure domain with the fewest of them (a spare in the domain of most of the group
    /// would put more of it at the mercy of one rack), the first by name among equals.
    pub fn take_spare(&self, spares: &mut Vec<String>, staying: &[String]) -> Option<String> {
        let at = (0..spares.len()).min_by_key(|&i| {
            let domain = self.domain_of(&spares[i]);
            (self.alike(staying, &domain), natural_key(&spares[i]))
        })?;
        Some(spares.remove(at))
    }

    /// Before anything is coded, forms the groups anew over the same members, across the
    /// failure domains as they are known now (agents say theirs as they register, often
    /// after the groups were formed), keeping the nodes that host ranks at data positions;
    /// whether the groups changed. Once an object is coded the groups stay: a recovery is
    /// the next regrouping.
    pub fn spread_before_coding(&mut self) -> bool {
        if self.committed > 0 || self.groups.iter().any(|g| !g.objects.is_empty()) {
            return false;
        }
        let mut members: Vec<String> = self.members().into_iter().collect();
        members.sort_by_key(|n| natural_key(n));
        let hosting: BTreeSet<String> = self.placement.values().cloned().collect();
        let Some(seated) = self.seat(&members, &hosting) else {
            return false;
        };
        let same = seated.len() == self.groups.len()
            && seated
                .iter()
                .zip(&self.groups)
                .all(|((k, members), g)| *k == g.group.k && *members == g.group.members);
        if same {
            return false;
        }
        self.groups = self.numbered(seated);
        true
    }

    /// Groups of the given members (`(data members, members by position)`) with fresh ids
    /// and no objects.
    pub fn numbered(&mut self, groups: Vec<(usize, Vec<String>)>) -> Vec<GroupRecord> {
        groups
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

    /// The failure domain of which group `group` holds more than `m` members, and how many.
    pub fn overexposed(&self, group: &Group) -> Option<(String, usize)> {
        eckpt_coding::policy::overexposed(&group.members, group.m, |n| self.domain_of(n))
    }

    /// New groups (with fresh ids, no objects) over `nodes`.
    pub fn regroup(&mut self, nodes: &[String]) -> Vec<GroupRecord> {
        let groups = self.form_groups(nodes);
        self.numbered(groups)
    }

    /// Loads a journal, checking its checksum (see `journal_file`: a damaged journal is
    /// replaced by the previous one only when that is safe, else this is an error).
    pub fn load(path: &Path) -> Result<Journal, ClusterError> {
        super::journal_file::load(path)
    }

    /// Writes the journal crash-safely with its checksum, keeping the previous one, as a
    /// snapshot that starts its log again.
    pub fn save(&self, path: &Path) -> Result<(), ClusterError> {
        super::journal_file::save(self, path).map(|_| ())
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

    /// Every node's group position and ranks, found in one pass over the groups and the
    /// placement: what a loop over every node asks instead of [`Journal::group_of`] and
    /// [`Journal::ranks_on`], each of which scans, which made such loops quadratic.
    pub fn node_index(&self) -> NodeIndex<'_> {
        let mut ranks: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (&rank, node) in &self.placement {
            ranks.entry(node.as_str()).or_default().push(rank);
        }
        let mut positions = BTreeMap::new();
        for (g, rec) in self.groups.iter().enumerate() {
            let geometry = Geometry::new(self.coding.layout, rec.group.k, rec.group.m, 1);
            for (pos, member) in rec.group.members.iter().enumerate() {
                positions.insert(member.as_str(), ((g, pos), geometry.holds_data(pos)));
            }
        }
        NodeIndex { positions, ranks }
    }

    /// Ranks placed on `node`, ascending.
    pub fn ranks_on(&self, node: &str) -> Vec<u32> {
        self.placement
            .iter()
            .filter(|(_, n)| n.as_str() == node)
            .map(|(r, _)| *r)
            .collect()
    }

    /// The members that can host ranks (their position in their group holds data), in one
    /// pass over the groups.
    pub fn data_members(&self) -> impl Iterator<Item = &String> {
        self.groups.iter().flat_map(|rec| {
            let group = &rec.group;
            let geometry = Geometry::new(self.coding.layout, group.k, group.m, 1);
            group
                .members
                .iter()
                .enumerate()
                .filter(move |(pos, _)| geometry.holds_data(*pos))
                .map(|(_, name)| name)
        })
    }

    /// The node with the fewest ranks per core among `candidates` (natural order breaks
    /// ties): per-process relocation, placing by free cores rather than moving whole nodes.
    /// One pass over the placement, then one per candidate.
    pub fn least_loaded<'a>(
        &self,
        candidates: impl IntoIterator<Item = &'a String>,
        extra: &BTreeMap<String, usize>,
    ) -> Option<String> {
        let mut placed: BTreeMap<&str, usize> = BTreeMap::new();
        for node in self.placement.values() {
            *placed.entry(node.as_str()).or_default() += 1;
        }
        self.least_loaded_by(candidates, |name| {
            placed.get(name).copied().unwrap_or(0) + extra.get(name).copied().unwrap_or(0)
        })
    }

    /// [`Journal::least_loaded`] with the ranks on each node counted by the caller (`ranks`),
    /// who keeps the counts as it moves ranks: one pass per candidate, none over the placement.
    pub fn least_loaded_by<'a>(
        &self,
        candidates: impl IntoIterator<Item = &'a String>,
        ranks: impl Fn(&str) -> usize,
    ) -> Option<String> {
        candidates
            .into_iter()
            .map(|name| {
                let cores = self.nodes[name].info.as_ref().map_or(1, |i| i.cores.max(1)) as f64;
                (ranks(name) as f64 / cores, natural_key(name), name)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
            .map(|(_, _, name)| name.clone())
    }

    /// Each member's group (by index), in one pass over the groups.
    pub fn group_index(&self) -> BTreeMap<&str, usize> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(g, rec)| rec.group.members.iter().map(move |m| (m.as_str(), g)))
            .collect()
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
        self.group_of(node)
            .map(|at| self.held_objects_at(at))
            .unwrap_or_default()
    }

    /// [`Journal::held_objects`] of the member at position `pos` of group `g` (by index).
    pub fn held_objects_at(&self, (g, pos): (usize, usize)) -> Vec<ObjectId> {
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

/// Each node's ranks, ascending: a placement inverted once, so that a group's or a node's
/// ranks are a lookup rather than a scan of the whole placement each (which made an epoch
/// cost nodes × ranks).
#[derive(Debug, Default, Clone)]
pub struct RanksByNode(BTreeMap<String, Vec<u32>>);

impl RanksByNode {
    /// `placement` (rank → node) inverted.
    pub fn of(placement: &BTreeMap<u32, String>) -> RanksByNode {
        let mut by_node: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for (&rank, node) in placement {
            by_node.entry(node.clone()).or_default().push(rank);
        }
        RanksByNode(by_node)
    }

    /// The ranks placed on `node`, ascending.
    pub fn on(&self, node: &str) -> &[u32] {
        self.0.get(node).map_or(&[], Vec::as_slice)
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

    /// A journal of `n` nodes of a `k`+`m` code, node `i` in failure domain `d(i/per)`
    /// (said after the groups were formed, in name order).
    fn in_racks(n: usize, k: usize, m: usize, per: usize) -> Journal {
        let coding = CodingConfig {
            k,
            m,
            ..CodingConfig::default()
        };
        let mut j = Journal::new(coding, &names(n), &[]);
        for i in 0..n {
            j.nodes.get_mut(&format!("n{i}")).unwrap().domain = Some(format!("d{}", i / per));
        }
        j
    }

    /// No group holds more than `m` members of one domain.
    fn assert_spread(j: &Journal) {
        for g in &j.groups {
            assert_eq!(j.overexposed(&g.group), None, "{:?}", g.group.members);
        }
    }

    /// Agents registering with their racks after `up` formed the groups in name order (12
    /// nodes, 4 racks of 3, k=4 m=2: `[n0..n5] [n6..n11]` hold whole racks): before
    /// anything is coded the groups are formed anew, with the nodes hosting ranks still at
    /// data positions; once an object is coded they stay.
    #[test]
    fn groups_spread_over_the_domains_agents_register_with_before_anything_is_coded() {
        let mut j = in_racks(12, 4, 2, 3);
        j.placement = (0..8).map(|r| (r, format!("n{}", r / 4 * 6 + r % 4))).collect();
        assert!(
            j.overexposed(&j.groups[0].group).is_some(),
            "formed in name order"
        );
        assert!(j.spread_before_coding());
        assert_spread(&j);
        for node in j.placement.values() {
            assert!(j.holds_data(node), "{node} hosts ranks at a parity position");
        }
        assert!(!j.spread_before_coding(), "spread already: nothing changes");

        let mut coded = in_racks(12, 4, 2, 6);
        coded.committed = 1;
        let before = coded.groups.clone();
        assert!(!coded.spread_before_coding());
        assert_eq!(
            serde_json::to_value(&coded.groups).unwrap(),
            serde_json::to_value(&before).unwrap()
        );
    }

    /// Four racks of two, k=3 m=1: groups `[n0 n2 n4 n6] [n1 n3 n5 n7]`, one node per rack.
    /// Hosting n0, n2, n4 and n6 (more than the first group's three data positions), it
    /// trades one with the node of the same rack in the other group: still one per rack.
    #[test]
    fn seating_trades_a_hosting_node_within_its_rack() {
        let j = in_racks(8, 3, 1, 2);
        let hosting: BTreeSet<String> = ["n0", "n2", "n4", "n6", "n1"].map(String::from).into();
        let seated = j.seat(&names(8), &hosting).unwrap();
        for (k, members) in &seated {
            assert_eq!(
                eckpt_coding::policy::overexposed(members, 1, |n| j.domain_of(n)),
                None,
                "{members:?}"
            );
            assert!(
                members[..*k].iter().filter(|n| hosting.contains(*n)).count()
                    == members.iter().filter(|n| hosting.contains(*n)).count(),
                "{members:?}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever nodes host ranks (no more than the data positions): each at a data
        /// position, every node in exactly one group of the sizes `form_groups` gives, and,
        /// with nobody hosting, the groups `form_groups` forms.
        #[test]
        fn seating_puts_hosting_nodes_at_data_positions(
            n in 2usize..30,
            k in 1usize..6,
            m in 1usize..3,
            per in 1usize..5,
            pick in proptest::collection::vec(proptest::bool::ANY, 30),
        ) {
            let j = in_racks(n, k, m, per);
            let nodes = names(n);
            let formed = j.form_groups(&nodes);
            let slots: usize = formed.iter().map(|(gk, g)| j.data_positions(*gk, g.len()).iter().filter(|d| **d).count()).sum();
            let hosting: BTreeSet<String> = nodes.iter().zip(&pick).filter(|(_, p)| **p).map(|(n, _)| n.clone()).take(slots).collect();
            let seated = j.seat(&nodes, &hosting).unwrap();
            let mut all: Vec<String> = seated.iter().flat_map(|(_, g)| g.clone()).collect();
            all.sort_by_key(|n| natural_key(n));
            if !formed.is_empty() {
                proptest::prop_assert_eq!(&all, &nodes);
            }
            for ((gk, members), (fk, formed)) in seated.iter().zip(&formed) {
                proptest::prop_assert_eq!((gk, members.len()), (fk, formed.len()));
                let data = j.data_positions(*gk, members.len());
                for (x, node) in members.iter().enumerate() {
                    proptest::prop_assert!(data[x] || !hosting.contains(node), "{} at parity position {}", node, x);
                }
            }
            if hosting.is_empty() {
                proptest::prop_assert_eq!(seated, formed);
            }
        }

        /// The one-pass index answers as the per-node lookups do, for every node and for a
        /// name that is none.
        #[test]
        fn the_node_index_answers_as_the_lookups_do(
            n in 2usize..40,
            k in 1usize..6,
            m in 1usize..3,
            places in proptest::collection::vec(0usize..50, 0..60),
        ) {
            let mut j = in_racks(n, k, m, 1);
            j.placement = places.iter().enumerate().map(|(r, &at)| (r as u32, format!("n{}", at % n))).collect();
            let index = j.node_index();
            for node in names(n).iter().map(String::as_str).chain(["nobody"]) {
                proptest::prop_assert_eq!(index.group_of(node), j.group_of(node));
                proptest::prop_assert_eq!(index.ranks_on(node).to_vec(), j.ranks_on(node));
                proptest::prop_assert_eq!(index.holds_data(node), j.holds_data(node));
                if let Some(at) = index.group_of(node) {
                    proptest::prop_assert_eq!(j.held_objects_at(at), j.held_objects(node));
                }
            }
        }
    }

    /// A spare replacing a lost member comes from the domain the group holds fewest of.
    #[test]
    fn a_spare_of_another_domain_replaces_a_lost_member() {
        let mut j = in_racks(3, 2, 1, 1);
        for (name, domain) in [("s0", "d1"), ("s1", "d0"), ("s2", "d7")] {
            j.nodes.insert(
                name.into(),
                NodeEntry {
                    info: None,
                    spare: true,
                    removed: false,
                    token: None,
                    domain: Some(domain.into()),
                },
            );
        }
        let mut spares = vec!["s0".to_string(), "s1".to_string(), "s2".to_string()];
        // n0 (d0) lost: n1 (d1) and n2 (d2) stay; s0 would put two of d1 in the group.
        let staying = ["n1".to_string(), "n2".to_string()];
        assert_eq!(j.take_spare(&mut spares, &staying).as_deref(), Some("s1"));
        assert_eq!(spares, ["s0", "s2"]);
        let staying = ["n1".to_string(), "s1".to_string()];
        assert_eq!(j.take_spare(&mut spares, &staying).as_deref(), Some("s2"));
        assert_eq!(j.take_spare(&mut spares, &staying).as_deref(), Some("s0"));
        assert_eq!(j.take_spare(&mut spares, &staying), None);
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
