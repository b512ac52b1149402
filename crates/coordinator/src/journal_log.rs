//! The journal's changes since its last snapshot: an append-only log (etcd's write-ahead log
//! and snapshots are the model).
//!
//! Rewriting the whole journal for each decision costs what the cluster has, not what
//! changed: at 4,096 nodes a journal of megabytes, three times per commit. A commit instead
//! appends one record of what it changed — the small fields whole, the node entries, group
//! records and placement entries that differ, a group's new parity object as "the object it
//! had, with this id and version" when only those changed — to `journal.copy.log` and then
//! `journal.log`, each fsynced. A snapshot (`journal.json`, see `journal_file`) is written
//! when the log has grown past it and whenever a coordinator takes a new term; it starts
//! both logs again, each with a header naming the snapshot (the xxh3 of its bytes) and the
//! term.
//!
//! Each line is sealed (`eckpt_durable::sealed`). Loading replays, onto the snapshot it
//! names, the longer valid run of records of the two logs: a torn last line (a crash mid
//! append, a change never answered) ends a run; a damaged line with valid lines after it is
//! damage at rest, survived when the other log holds those records and refused otherwise
//! (the records after it are decisions agents may have acted on). A log naming another
//! snapshot is older than the snapshot loaded and is ignored.
//!
//! An append is fenced as a snapshot is: a log whose header names a newer term, or another
//! snapshot than the one this coordinator wrote last, belongs to a coordinator that took
//! the journal over.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use base64::prelude::{Engine, BASE64_STANDARD_NO_PAD};
use serde::{Deserialize, Serialize};

use super::job::JobRecord;
use super::state::{Journal, NodeEntry};
use eckpt_cluster_api::dirs::write_atomic;
use eckpt_cluster_api::msg::{GroupRecord, ObjectRecord, PaceStats};
use eckpt_cluster_api::ClusterError;
use eckpt_coding::CodingConfig;
use eckpt_durable::sealed;

/// The log beside journal `path`.
pub fn log_path(path: &Path) -> PathBuf {
    path.with_extension("log")
}

/// Its copy, appended to first.
pub fn copy_log_path(path: &Path) -> PathBuf {
    path.with_extension("copy.log")
}

/// A snapshot's name in its logs' headers: the xxh3 of its bytes.
pub fn snapshot_name(bytes: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// A log's first line.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    /// The snapshot the records apply to ([`snapshot_name`]).
    snapshot: String,
    /// The term of the coordinator that wrote the snapshot.
    term: u64,
}

/// Every field of a journal but its tables, whole: they are small.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Small {
    format: u32,
    coding: CodingConfig,
    world: Option<u32>,
    committed: u64,
    next_epoch: u64,
    next_group: u64,
    next_task: u64,
    pace: BTreeMap<u64, PaceStats>,
    job: JobRecord,
    term: u64,
}

impl Small {
    fn of(j: &Journal) -> Small {
        Small {
            format: j.format,
            coding: j.coding,
            world: j.world,
            committed: j.committed,
            next_epoch: j.next_epoch,
            next_group: j.next_group,
            next_task: j.next_task,
            pace: j.pace.clone(),
            job: j.job.clone(),
            term: j.term,
        }
    }

    fn apply(self, j: &mut Journal) {
        j.format = self.format;
        j.coding = self.coding;
        j.world = self.world;
        j.committed = self.committed;
        j.next_epoch = self.next_epoch;
        j.next_group = self.next_group;
        j.next_task = self.next_task;
        j.pace = self.pace;
        j.job = self.job;
        j.term = self.term;
    }
}

/// How a group's record changed.
#[derive(Debug, Serialize, Deserialize)]
enum GroupChange {
    /// A record of another group (or a new one).
    Whole(GroupRecord),
    /// The same group, its objects now these.
    Objects(Vec<ObjectChange>),
    /// The same group, its one object now of this version and of these checksums (`sums`
    /// of [`ObjectChange::Like`]): what an epoch records for nearly every group, in as few
    /// bytes as it takes.
    Parity(u64, String),
}

impl GroupChange {
    /// The change of a group whose objects are now `objects`, in the tersest spelling.
    fn objects(mut objects: Vec<ObjectChange>) -> GroupChange {
        if let [ObjectChange::Like {
            was: 0,
            version,
            epoch: None,
            sums: Some(sums),
            crcs,
        }] = objects.as_mut_slice()
        {
            if crcs.is_empty() {
                return GroupChange::Parity(*version, std::mem::take(sums));
            }
        }
        GroupChange::Objects(objects)
    }
}

/// One object of a group whose objects changed.
#[derive(Debug, Serialize, Deserialize)]
enum ObjectChange {
    /// The group's object at index `was` before, now of version `version` and of epoch
    /// `epoch` (its id's; `None`: the version), with new chunk checksums: `sums`, every
    /// shard's in shard order as little-endian bytes in base64, each shard as many as before;
    /// or `crcs`, by shard in hex (`None`, or past the list's end: as before), where a shard's
    /// count changed, and as logs written before `sums` have it. A new epoch's parity of
    /// shards laid out as before is what most epochs record for every group: spelled tersely,
    /// since at 4,096 nodes an epoch records it for 256 groups (about 100 bytes each as a
    /// [`GroupChange::Parity`], 420 with `crcs`).
    Like {
        #[serde(default, skip_serializing_if = "is_zero")]
        was: usize,
        version: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        epoch: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sums: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        crcs: Vec<Option<String>>,
    },
    Whole(ObjectRecord),
}

/// What one commit changed of the journal.
#[derive(Debug, Serialize, Deserialize)]
pub struct Record {
    small: Small,
    /// Node entries set (`Some`) or removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    nodes: BTreeMap<String, Option<NodeEntry>>,
    /// How many groups there are.
    groups: usize,
    /// Groups changed, by index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    changed_groups: BTreeMap<usize, GroupChange>,
    /// Placement entries set or removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    placement: BTreeMap<u32, Option<String>>,
}

/// What changed from `before` to `after`, entry by entry (keys and values compared, nothing
/// copied but what changed).
fn changed<K: Ord + Clone, V: PartialEq + Clone>(
    before: &BTreeMap<K, V>,
    after: &BTreeMap<K, V>,
) -> BTreeMap<K, Option<V>> {
    let mut out: BTreeMap<K, Option<V>> = after
        .iter()
        .filter(|(k, v)| before.get(k) != Some(v))
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect();
    out.extend(
        before
            .keys()
            .filter(|k| !after.contains_key(k))
            .map(|k| (k.clone(), None)),
    );
    out
}

/// Sets or removes `changes` in `map`.
fn apply_changed<K: Ord, V>(map: &mut BTreeMap<K, V>, changes: BTreeMap<K, Option<V>>) {
    for (k, v) in changes {
        match v {
            Some(v) => map.insert(k, v),
            None => map.remove(&k),
        };
    }
}

impl Record {
    /// The change from `before` to `after`.
    pub fn between(before: &Journal, after: &Journal) -> Record {
        let changed_groups = after
            .groups
            .iter()
            .enumerate()
            .filter_map(|(i, g)| match before.groups.get(i) {
                Some(b) if b == g => None,
                Some(b) if b.group == g.group => Some((i, GroupChange::objects(objects_between(b, g)))),
                _ => Some((i, GroupChange::Whole(g.clone()))),
            })
            .collect();
        Record {
            small: Small::of(after),
            nodes: changed(&before.nodes, &after.nodes),
            groups: after.groups.len(),
            changed_groups,
            placement: changed(&before.placement, &after.placement),
        }
    }

    /// Applies the change to `journal`; an error if it names what the journal lacks.
    fn apply(self, journal: &mut Journal) -> Result<(), String> {
        self.small.apply(journal);
        apply_changed(&mut journal.nodes, self.nodes);
        apply_changed(&mut journal.placement, self.placement);
        let mut before: Vec<Option<GroupRecord>> = std::mem::take(&mut journal.groups)
            .into_iter()
            .map(Some)
            .collect();
        let mut changes = self.changed_groups;
        for i in 0..self.groups {
            let group = match changes.remove(&i) {
                Some(GroupChange::Whole(g)) => g,
                Some(GroupChange::Objects(objects)) => changed_objects(i, &before, objects)?,
                Some(GroupChange::Parity(version, sums)) => {
                    let like = ObjectChange::Like {
                        was: 0,
                        version,
                        epoch: None,
                        sums: Some(sums),
                        crcs: Vec::new(),
                    };
                    changed_objects(i, &before, vec![like])?
                }
                None => before
                    .get_mut(i)
                    .and_then(Option::take)
                    .ok_or(format!("no group {i} to keep"))?,
            };
            journal.groups.push(group);
        }
        match changes.keys().next() {
            Some(i) => Err(format!(
                "a change of group {i}, beyond the {} groups",
                self.groups
            )),
            None => Ok(()),
        }
    }
}

/// Group `i` of `before` with its objects changed as `objects` say.
fn changed_objects(
    i: usize,
    before: &[Option<GroupRecord>],
    objects: Vec<ObjectChange>,
) -> Result<GroupRecord, String> {
    let was = before
        .get(i)
        .and_then(Option::as_ref)
        .ok_or(format!("no group {i} to change"))?;
    let objects = objects
        .into_iter()
        .map(|o| match o {
            ObjectChange::Whole(o) => Ok(o),
            ObjectChange::Like {
                was: at,
                version,
                epoch,
                sums,
                crcs,
            } => {
                let mut o = was
                    .objects
                    .get(at)
                    .ok_or(format!("no object {at} in group {i}"))?
                    .clone();
                (o.id.epoch, o.version) = (epoch.unwrap_or(version), version);
                if let Some(sums) = sums {
                    set_sums(&mut o, &sums).ok_or(format!("bad checksums {sums:?} in group {i}"))?;
                }
                if crcs.len() > o.shards.len() {
                    return Err(format!("more checksums than shards in group {i}'s object {at}"));
                }
                for (shard, crcs) in o.shards.iter_mut().zip(crcs) {
                    if let Some(hex) = crcs {
                        shard.crcs = from_hex(&hex).ok_or(format!("bad checksums {hex:?} in group {i}"))?;
                    }
                }
                Ok(o)
            }
        })
        .collect::<Result<_, String>>()?;
    Ok(GroupRecord {
        group: was.group.clone(),
        objects,
    })
}

/// A group's objects after a change, each as an object it had before when only the id, the
/// version and chunk checksums differ.
fn objects_between(before: &GroupRecord, after: &GroupRecord) -> Vec<ObjectChange> {
    let laid_out_alike = |b: &ObjectRecord, o: &ObjectRecord| {
        (b.id.group, b.kind, b.chunk, b.data_chunks, b.shards.len())
            == (o.id.group, o.kind, o.chunk, o.data_chunks, o.shards.len())
            && b.shards
                .iter()
                .zip(&o.shards)
                .all(|(b, o)| (&b.layout, &b.ranks, b.len) == (&o.layout, &o.ranks, o.len))
    };
    after
        .objects
        .iter()
        .map(
            |o| match before.objects.iter().position(|b| laid_out_alike(b, o)) {
                Some(was) => {
                    let shards = before.objects[was].shards.iter().zip(&o.shards);
                    let unchanged = shards.clone().all(|(b, o)| b.crcs == o.crcs);
                    let counted_alike = shards.clone().all(|(b, o)| b.crcs.len() == o.crcs.len());
                    let sums = (!unchanged && counted_alike).then(|| to_sums(o));
                    let mut crcs: Vec<Option<String>> = Vec::new();
                    if !counted_alike {
                        crcs = shards
                            .map(|(b, o)| (b.crcs != o.crcs).then(|| to_hex(&o.crcs)))
                            .collect();
                        while crcs.last().is_some_and(Option::is_none) {
                            crcs.pop();
                        }
                    }
                    ObjectChange::Like {
                        was,
                        version: o.version,
                        epoch: (o.id.epoch != o.version).then_some(o.id.epoch),
                        sums,
                        crcs,
                    }
                }
                None => ObjectChange::Whole(o.clone()),
            },
        )
        .collect()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Every shard's chunk checksums of `object`, in shard order, as little-endian bytes in
/// base64.
fn to_sums(object: &ObjectRecord) -> String {
    let bytes: Vec<u8> = object
        .shards
        .iter()
        .flat_map(|shard| shard.crcs.iter().flat_map(|c| c.to_le_bytes()))
        .collect();
    BASE64_STANDARD_NO_PAD.encode(bytes)
}

/// [`to_sums`] read back into `object`, each shard taking as many checksums as it has;
/// `None` if `sums` is not the output of [`to_sums`] for an object laid out so.
fn set_sums(object: &mut ObjectRecord, sums: &str) -> Option<()> {
    let bytes = BASE64_STANDARD_NO_PAD.decode(sums).ok()?;
    let count: usize = object.shards.iter().map(|shard| shard.crcs.len()).sum();
    if bytes.len() != 4 * count {
        return None;
    }
    let mut words = bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    for shard in &mut object.shards {
        for crc in &mut shard.crcs {
            *crc = words.next()?;
        }
    }
    Some(())
}

/// Checksums as hex, 8 digits each.
fn to_hex(crcs: &[u32]) -> String {
    crcs.iter().map(|c| format!("{c:08x}")).collect()
}

/// [`to_hex`] read back; `None` if `hex` is not its output.
fn from_hex(hex: &str) -> Option<Vec<u32>> {
    if !hex.len().is_multiple_of(8) || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(8)
        .map(|at| u32::from_str_radix(&hex[at..at + 8], 16).ok())
        .collect()
}

fn header_line(snapshot: &str, term: u64) -> Vec<u8> {
    sealed::seal_line(&Header {
        snapshot: snapshot.to_string(),
        term,
    })
}

/// Starts both logs of journal `path` again, empty, for the snapshot `snapshot` of `term`
/// just written.
pub fn reset(path: &Path, snapshot: &str, term: u64) -> Result<(), ClusterError> {
    let header = header_line(snapshot, term);
    write_atomic(&copy_log_path(path), &header)?;
    write_atomic(&log_path(path), &header)
}

/// Appends `record` to both logs of journal `path` — the copy first, each fsynced — after
/// checking each names snapshot `snapshot` of `term`; the bytes written. A log of another
/// snapshot or a newer term is refused as fenced: another coordinator took the journal
/// over. An append that fails is taken back from both logs (the change it carries is
/// refused, and must not be resumed from); should that fail too, the log ends in a torn or
/// refused line, which the caller's next write, a snapshot, makes irrelevant.
pub fn append(path: &Path, snapshot: &str, term: u64, record: &Record) -> Result<u64, ClusterError> {
    let line = sealed::seal_line(record);
    let copy = append_to(&copy_log_path(path), snapshot, term, &line)?;
    if let Err(e) = append_to(&log_path(path), snapshot, term, &line) {
        let _ = copy.set_len(
            copy.metadata()
                .map_or(0, |m| m.len())
                .saturating_sub(line.len() as u64),
        );
        return Err(e);
    }
    Ok(2 * line.len() as u64)
}

/// Appends `line` to `log` once its header is checked; the log, open.
fn append_to(log: &Path, snapshot: &str, term: u64, line: &[u8]) -> Result<File, ClusterError> {
    let io = || eckpt_cluster_api::io_at(log);
    let mut file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(log)
        .map_err(io())?;
    let header = read_header(&file, log)?;
    if header.term > term || header.snapshot != snapshot {
        return Err(ClusterError::Fenced(format!(
            "{}: the coordinator of term {} has taken this journal over (this one is of term {term}): it decides nothing more",
            log.display(),
            header.term
        )));
    }
    let before = file.metadata().map_err(io())?.len();
    if let Err(e) = file.write_all(line).and_then(|()| file.sync_data()) {
        let _ = file.set_len(before);
        return Err(io()(e));
    }
    Ok(file)
}

fn read_header(file: &File, log: &Path) -> Result<Header, ClusterError> {
    let mut first = Vec::new();
    BufReader::new(file)
        .read_until(b'\n', &mut first)
        .map_err(eckpt_cluster_api::io_at(log))?;
    sealed::unseal(&first).map_err(|e| ClusterError::Corrupt(format!("{}: header {e}", log.display())))
}

/// A log as read: its records for the snapshot loaded, and whether a damaged line came
/// before valid ones.
struct Read {
    records: Vec<Record>,
    damaged_inside: Option<String>,
}

/// Reads `log`'s records if it names `snapshot` (none if it is missing or names another).
fn read(log: &Path, snapshot: &str) -> Result<Read, ClusterError> {
    let bytes = match std::fs::read(log) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(eckpt_cluster_api::io_at(log)(e)),
    };
    let mut empty = Read {
        records: Vec::new(),
        damaged_inside: None,
    };
    // Complete lines only: a last one without its newline is a torn append.
    let mut lines = bytes
        .split_inclusive(|b| *b == b'\n')
        .filter(|l| l.ends_with(b"\n"));
    let header = match lines.next().map(sealed::unseal::<Header>) {
        Some(Ok(header)) => header,
        // A damaged header before records hides whose records they are.
        Some(Err(e)) if lines.next().is_some() => {
            empty.damaged_inside = Some(format!("{}: header {e}", log.display()));
            return Ok(empty);
        }
        _ => return Ok(empty),
    };
    if header.snapshot != snapshot {
        return Ok(empty);
    }
    let lines: Vec<&[u8]> = lines.collect();
    for (i, line) in lines.iter().enumerate() {
        match sealed::unseal::<Record>(line) {
            Ok(record) => empty.records.push(record),
            Err(e) => {
                if i + 1 < lines.len() {
                    empty.damaged_inside = Some(format!("{}: record {} {e}", log.display(), i + 1));
                }
                break;
            }
        }
    }
    Ok(empty)
}

/// Applies the records both logs of journal `path` hold for snapshot `snapshot` to
/// `journal`, loaded from it (see the module documentation).
pub fn replay(path: &Path, snapshot: &str, journal: &mut Journal) -> Result<(), ClusterError> {
    let main = read(&log_path(path), snapshot)?;
    let copy = read(&copy_log_path(path), snapshot)?;
    let rank = |r: &Read| (r.records.len(), r.damaged_inside.is_none());
    let longer = if rank(&copy) > rank(&main) { copy } else { main };
    if let Some(damage) = longer.damaged_inside {
        return Err(ClusterError::Corrupt(format!(
            "{damage}; refusing to start: the records after it are decisions agents may have acted on, and neither log holds them intact"
        )));
    }
    for (i, record) in longer.records.into_iter().enumerate() {
        record.apply(journal).map_err(|e| {
            ClusterError::Corrupt(format!("{}: record {}: {e}", log_path(path).display(), i + 1))
        })?;
    }
    Ok(())
}

/// Whether either log of journal `path` holds a record, for whichever snapshot: a journal
/// resumed from an older snapshot than theirs would lose them.
pub fn holds_records(path: &Path) -> bool {
    [log_path(path), copy_log_path(path)].iter().any(|log| {
        std::fs::read(log).is_ok_and(|bytes| bytes.split_inclusive(|b| *b == b'\n').nth(1).is_some())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_cluster_api::msg::{ObjectKind, ShardRecord};
    use eckpt_coding::CodingConfig;

    /// Groups of 14 data and 2 parity members.
    fn journal(nodes: usize) -> Journal {
        let names: Vec<String> = (0..nodes).map(|i| format!("n{i:04}")).collect();
        let coding = CodingConfig {
            k: 14,
            m: 2,
            ..CodingConfig::default()
        };
        let mut j = Journal::new(coding, &names, &[]);
        j.term = 1;
        j
    }

    /// Every group protected by an object of `epoch` (a data shard of one chunk per member
    /// that holds data), each shard's checksum from `seed`.
    fn encoded(j: &mut Journal, epoch: u64, seed: u32) {
        for g in &mut j.groups {
            let shards = (0..g.group.members.len())
                .map(|p| match p < g.group.k {
                    true => ShardRecord {
                        ranks: vec![p as u32],
                        len: 4096,
                        crcs: vec![seed.wrapping_mul(2_654_435_761) ^ p as u32],
                        ..ShardRecord::default()
                    },
                    false => ShardRecord::default(),
                })
                .collect();
            g.objects = vec![ObjectRecord {
                id: eckpt_coding::ObjectId {
                    group: g.group.id,
                    epoch,
                },
                kind: ObjectKind::Image,
                version: epoch,
                chunk: 1 << 20,
                data_chunks: 1,
                shards,
            }];
        }
        j.committed = epoch;
        j.next_epoch = epoch + 1;
    }

    fn same(a: &Journal, b: &Journal) -> bool {
        serde_json::to_value(a).unwrap() == serde_json::to_value(b).unwrap()
    }

    /// Every kind of change a commit makes comes back from its record: node entries set and
    /// removed, groups re-encoded, replaced and dropped, placement moved, the small fields.
    #[test]
    fn a_record_applied_to_the_journal_before_gives_the_journal_after() {
        let mut before = journal(64);
        encoded(&mut before, 3, 7);
        before.placement = (0..20).map(|r| (r, format!("n{r:04}"))).collect();
        let mut after = before.clone();
        encoded(&mut after, 4, 9);
        after.nodes.get_mut("n0001").unwrap().info =
            Some(super::super::test_cluster::TestCluster::info("n0001"));
        after.nodes.remove("n0063");
        after.groups[1].group.members.swap(0, 1);
        after.groups.pop();
        after.placement.insert(3, "n0040".into());
        after.placement.remove(&19);
        after.job.generation = 5;
        let record = Record::between(&before, &after);
        let mut replayed = before.clone();
        record.apply(&mut replayed).unwrap();
        assert!(same(&replayed, &after));
    }

    /// An epoch's record at 4,096 nodes without a membership change: each group's new parity
    /// as its old one with a new id and checksums, in a few KiB however large the journal.
    #[test]
    fn an_epoch_logs_kilobytes_at_four_thousand_nodes() {
        let mut before = journal(4096);
        encoded(&mut before, 10, 1);
        let mut after = before.clone();
        encoded(&mut after, 11, 2);
        let record = sealed::seal_line(&Record::between(&before, &after));
        let snapshot = sealed::seal(&after);
        // 256 groups of 14 checksums: about 100 bytes a group (420 in hex), and the
        // coordinator writes it to both logs.
        assert!(record.len() < 28 << 10, "{} bytes", record.len());
        assert!(
            record.len() * 20 < snapshot.len(),
            "{} of {}",
            record.len(),
            snapshot.len()
        );
    }

    /// A group's checksums go in one base64 string while each shard has as many as before,
    /// and by shard in hex where a count changed; records of logs written in hex alone (before
    /// base64) still replay.
    #[test]
    fn checksums_replay_in_base64_in_hex_and_as_logs_written_before_base64_have_them() {
        let mut before = journal(64);
        encoded(&mut before, 3, 7);
        let mut after = before.clone();
        encoded(&mut after, 4, 9);
        let record = Record::between(&before, &after);
        let line = serde_json::to_string(&record).unwrap();
        assert!(
            line.contains("\"Parity\"") && !line.contains("\"crcs\""),
            "{line}"
        );
        let mut replayed = before.clone();
        record.apply(&mut replayed).unwrap();
        assert!(same(&replayed, &after));

        // The same change spelled as before base64: by shard, in hex.
        let mut value: serde_json::Value = serde_json::from_str(&line).unwrap();
        for (g, change) in value["changed_groups"].as_object_mut().unwrap() {
            let group = &after.groups[g.parse::<usize>().unwrap()];
            let version = change["Parity"][0].clone();
            let crcs: Vec<_> = group.objects[0]
                .shards
                .iter()
                .map(|shard| (!shard.crcs.is_empty()).then(|| to_hex(&shard.crcs)))
                .collect();
            *change = serde_json::json!({"Objects": [{"Like": {"version": version, "crcs": crcs}}]});
        }
        let old: Record = serde_json::from_value(value).unwrap();
        let mut replayed = before.clone();
        old.apply(&mut replayed).unwrap();
        assert!(same(&replayed, &after));

        // A shard with one chunk more: its count changed, so hex.
        let mut grown = after.clone();
        grown.groups[0].objects[0].shards[0].crcs.push(5);
        grown.groups[0].objects[0].shards[0].len = 8192;
        grown.groups[0].objects[0].data_chunks = 2;
        let mut grown_crcs = grown.clone();
        grown_crcs.groups[0].objects[0].shards[0].crcs.push(6);
        for (from, to) in [(&grown, &grown_crcs), (&before, &grown)] {
            let record = Record::between(from, to);
            let mut replayed = from.clone();
            record.apply(&mut replayed).unwrap();
            assert!(same(&replayed, to));
        }
        let mut bad = serde_json::to_value(Record::between(&before, &after)).unwrap();
        bad["changed_groups"]["0"]["Parity"][1] = "AAAA".into();
        let bad: Record = serde_json::from_value(bad).unwrap();
        let err = bad.apply(&mut before.clone()).unwrap_err();
        assert!(err.contains("bad checksums"), "{err}");
    }

    /// A journal written by a writer over many commits loads as the last one, from the
    /// snapshot and its log; the snapshot is not rewritten by the commits.
    #[test]
    fn commits_append_to_the_log_and_load_back_with_the_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut writer = super::super::journal_file::Writer::new(path.clone());
        let mut j = journal(64);
        writer.write(&j, &j).unwrap();
        let snapshot = std::fs::read(&path).unwrap();
        for epoch in 1..=5 {
            let mut next = j.clone();
            encoded(&mut next, epoch, epoch as u32);
            writer.write(&j, &next).unwrap();
            j = next;
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            snapshot,
            "the snapshot was rewritten"
        );
        assert!(same(&Journal::load(&path).unwrap(), &j));
    }

    /// Writes a snapshot and three epochs' records; the journal after each.
    fn three_epochs(path: &Path) -> Vec<Journal> {
        let mut writer = super::super::journal_file::Writer::new(path.to_path_buf());
        let mut j = journal(16);
        writer.write(&j, &j).unwrap();
        let mut all = vec![j.clone()];
        for epoch in 1..=3 {
            let mut next = j.clone();
            encoded(&mut next, epoch, epoch as u32);
            writer.write(&j, &next).unwrap();
            j = next;
            all.push(j.clone());
        }
        all
    }

    fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
        let mut bytes = std::fs::read(path).unwrap();
        f(&mut bytes);
        std::fs::write(path, bytes).unwrap();
    }

    /// The byte offset of line `n` (0: the header) of a log.
    fn line_start(bytes: &[u8], n: usize) -> usize {
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(n - 1)
            .map_or(0, |(i, _)| i + 1)
    }

    /// A crash mid-append leaves a torn last line: the change it carried was never answered,
    /// and the journal loads as before it. Torn in one log only, the other has it.
    #[test]
    fn a_torn_last_record_is_the_change_never_answered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let all = three_epochs(&path);
        edit(&log_path(&path), |b| b.truncate(b.len() - 5));
        assert!(same(&Journal::load(&path).unwrap(), &all[3]), "the copy holds it");
        edit(&copy_log_path(&path), |b| b.truncate(b.len() - 5));
        assert!(same(&Journal::load(&path).unwrap(), &all[2]));
    }

    /// A bit flipped at rest inside one log: the other holds those records. Inside both,
    /// the decisions after it are lost, and the coordinator refuses to start.
    #[test]
    fn a_record_damaged_inside_a_log_is_read_from_the_other_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let all = three_epochs(&path);
        let flip = |b: &mut Vec<u8>| {
            let at = (line_start(b, 1) + line_start(b, 2)) / 2;
            b[at] ^= 0x01;
        };
        edit(&log_path(&path), flip);
        assert!(same(&Journal::load(&path).unwrap(), &all[3]));
        edit(&copy_log_path(&path), flip);
        let e = Journal::load(&path).unwrap_err();
        assert!(e.to_string().contains("refusing to start"), "{e}");
    }

    /// A coordinator of a newer term writes its snapshot: the older one's next append is
    /// refused, and leaves the newer one's logs as they were.
    #[test]
    fn an_append_after_another_coordinator_took_the_journal_over_is_fenced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut old = super::super::journal_file::Writer::new(path.clone());
        let j = journal(16);
        old.write(&j, &j).unwrap();
        let mut newer = Journal::load(&path).unwrap();
        newer.term = 2;
        newer.save(&path).unwrap();
        let logs = (
            std::fs::read(log_path(&path)).unwrap(),
            std::fs::read(copy_log_path(&path)).unwrap(),
        );
        let mut next = j.clone();
        encoded(&mut next, 1, 1);
        let e = old.write(&j, &next).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Fenced, "{e}");
        assert_eq!(
            logs,
            (
                std::fs::read(log_path(&path)).unwrap(),
                std::fs::read(copy_log_path(&path)).unwrap()
            )
        );
        assert_eq!(Journal::load(&path).unwrap().term, 2);
    }

    /// Both snapshots damaged: the previous journal predates what the log records, and the
    /// coordinator refuses to start rather than forget it.
    #[test]
    fn the_previous_snapshot_is_not_resumed_from_past_a_log_with_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let j = journal(16);
        j.save(&path).unwrap();
        let mut writer = super::super::journal_file::Writer::new(path.clone());
        writer.write(&j, &j).unwrap();
        let mut next = j.clone();
        encoded(&mut next, 1, 1);
        writer.write(&j, &next).unwrap();
        for file in [path.clone(), super::super::journal_file::copy_path(&path)] {
            edit(&file, |b| {
                let at = b.len() / 2;
                b[at] ^= 0x01;
            });
        }
        let e = Journal::load(&path).unwrap_err();
        assert!(e.to_string().contains("the journal's log holds decisions"), "{e}");
    }
}
