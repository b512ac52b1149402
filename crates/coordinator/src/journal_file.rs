//! The journal on disk: a checksummed snapshot with the previous one kept beside it, and
//! the log of the changes since (`journal_log`: what a commit writes, a [`Writer`] decides).
//!
//! `journal.json` is the journal sealed (`eckpt_durable::sealed`): its JSON plus a
//! `checksum` key, so one flipped bit (`"committed": 11` → `10`, a placement `n4` → `n5`) is
//! caught instead of served.
//!
//! Each snapshot first rotates the journal as it stands (the current snapshot and its log's
//! records) to `journal.prev.json` (atomically, with its own checksum), then writes the new
//! one (atomically) twice: to `journal.copy.json`, then to `journal.json`, and starts the
//! logs again. A bit flipped at rest in one of them is thus survived: the copy is
//! never older than the journal (a crash between the two writes leaves the copy one save
//! ahead, with a decision nobody was told yet — resuming from it is resuming from a save
//! that completed an instant later; a journal write that fails removes the copy, since the
//! change it carries is refused). When both are damaged, the previous journal is used
//! only when that is safe, and the previous journal is *older*:
//! if the last save was a decision — an epoch committed or aborted, a rank placed, a
//! recovery, a node added — the agents may already act on it (they drop the parity and the
//! images of older epochs once a newer one is committed), so resuming from before it could
//! serve an epoch whose data is gone or place a rank where its data is not. The rotated
//! file therefore records whether its successor changed anything but what is refreshed
//! anyway (agents' addresses, which they send again when they register, and the task
//! counter and the coordinator's term, which it also records): only then is it used, and
//! otherwise the coordinator refuses to start — as it does when the log holds records,
//! decisions made after the damaged snapshot.
//!
//! A save is refused when the journal on disk is of a newer coordinator term than the one
//! saved: another coordinator has taken the journal over (a failover while this one was cut
//! off), and what this one decides would overwrite that one's decisions.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::journal_log;
use super::state::{Journal, JOURNAL_FORMAT};
use eckpt_cluster_api::dirs::write_atomic;
use eckpt_cluster_api::ClusterError;
use eckpt_durable::sealed;

const SUCCESSOR: &str = "successor";

/// What a rotated journal records of the journal that replaced it.
#[derive(Debug, Serialize, Deserialize)]
struct Successor {
    /// The successor differs only in agents' addresses and the task counter.
    same_state: bool,
    /// The successor's task counter (task ids are never reused).
    next_task: u64,
    /// The successor's coordinator term (terms are never reused either).
    #[serde(default)]
    term: u64,
}

/// The previous journal, kept beside `path`.
pub fn prev_path(path: &Path) -> PathBuf {
    path.with_extension("prev.json")
}

/// The second copy of the journal, written just before it.
pub fn copy_path(path: &Path) -> PathBuf {
    path.with_extension("copy.json")
}

/// Where a damaged journal is moved when a save replaces it (kept for inspection).
fn damaged_path(path: &Path) -> PathBuf {
    path.with_extension("damaged.json")
}

/// `value` (the journal or what is sealed beside it) as JSON. Its maps have string or
/// integer keys, but a journal holds paths (each node's store), which JSON refuses unless they
/// are UTF-8: deserialized ones always are, so a failure here is a bug, answered as one.
fn to_value<T: Serialize>(value: &T) -> Result<Value, ClusterError> {
    serde_json::to_value(value)
        .map_err(|e| ClusterError::Internal(format!("the journal does not serialize: {e}")))
}

/// The file contents: `value` sealed ([`eckpt_durable::sealed`]).
fn seal(value: Value) -> Vec<u8> {
    sealed::seal_value(value)
}

/// Reads `path` and checks its checksum; its contents without the checksum, and its name
/// in the logs' headers ([`journal_log::snapshot_name`]).
fn open_named(path: &Path) -> Result<(Value, String), ClusterError> {
    let bytes = std::fs::read(path).map_err(eckpt_cluster_api::io_at(path))?;
    let value = sealed::unseal_value(&bytes)
        .map_err(|e| ClusterError::Corrupt(format!("{}: journal {e}", path.display())))?;
    Ok((value, journal_log::snapshot_name(&bytes)))
}

/// The snapshot at `path`, parsed, and its name.
fn open_snapshot(path: &Path) -> Result<(Journal, String), ClusterError> {
    let (value, name) = open_named(path)?;
    Ok((parse(path, value)?, name))
}

/// [`open_named`], without the name.
fn open(path: &Path) -> Result<Value, ClusterError> {
    open_named(path).map(|(value, _)| value)
}

fn parse(path: &Path, value: Value) -> Result<Journal, ClusterError> {
    let journal: Journal = serde_json::from_value(value)
        .map_err(|e| ClusterError::Corrupt(format!("{}: {e}", path.display())))?;
    if journal.format != JOURNAL_FORMAT {
        return Err(ClusterError::Refused(format!(
            "{}: journal format {} (this eckpt reads {JOURNAL_FORMAT})",
            path.display(),
            journal.format
        )));
    }
    Ok(journal)
}

/// The journal's decisions, of a journal serialized as `value`: everything but agents'
/// addresses, the task counter and the coordinator's term.
fn state(mut value: Value) -> Value {
    // A journal is a struct, which serializes to a JSON object.
    let object = value.as_object_mut().expect("the journal is an object");
    object.remove("next_task");
    object.remove("term");
    if let Some(Value::Object(nodes)) = object.get_mut("nodes") {
        for node in nodes.values_mut().filter_map(Value::as_object_mut) {
            node.remove("info");
        }
    }
    value
}

/// Loads the journal at `path` — its snapshot and the records of its logs since — or if the
/// snapshot is damaged, its copy; if both are, the previous journal when that is safe (see
/// the module documentation), else an error saying why the coordinator cannot start.
pub fn load(path: &Path) -> Result<Journal, ClusterError> {
    let replayed = |(mut journal, snapshot): (Journal, String)| {
        journal_log::replay(path, &snapshot, &mut journal)?;
        Ok(journal)
    };
    let mut damage = match open_snapshot(path) {
        Ok(snapshot) => return replayed(snapshot),
        Err(e @ (ClusterError::Io { .. } | ClusterError::Refused(_))) => return Err(e),
        Err(ClusterError::Corrupt(why)) => why,
        Err(e) => e.to_string(),
    };
    let copy = copy_path(path);
    match open_snapshot(&copy) {
        Ok(snapshot) => {
            tracing::warn!(%damage, copy = %copy.display(), "journal damaged: resuming from its copy");
            return replayed(snapshot);
        }
        Err(e) => damage = format!("{damage}; its copy: {e}"),
    }
    let prev = prev_path(path);
    let fallback = open(&prev).and_then(|mut value| {
        let successor = value
            .as_object_mut()
            .and_then(|o| o.remove(SUCCESSOR))
            .and_then(|s| serde_json::from_value::<Successor>(s).ok());
        Ok((parse(&prev, value)?, successor))
    });
    match fallback {
        Ok((journal, _)) if journal_log::holds_records(path) => Err(ClusterError::Corrupt(format!(
            "{damage}; refusing to start: the journal's log holds decisions made after it, which {} (committed epoch {}) predates",
            prev.display(),
            journal.committed
        ))),
        Ok((mut journal, Some(successor))) if successor.same_state => {
            journal.next_task = journal.next_task.max(successor.next_task);
            journal.term = journal.term.max(successor.term);
            tracing::warn!(%damage, previous = %prev.display(), "journal damaged: resuming from the previous journal, which holds the same decisions");
            Ok(journal)
        }
        Ok((journal, _)) => Err(ClusterError::Corrupt(format!(
            "{damage}; refusing to start: {} predates the last decision (it has committed epoch {}), and agents may already have dropped the data it refers to",
            prev.display(),
            journal.committed
        ))),
        Err(e) => Err(ClusterError::Corrupt(format!(
            "{damage}; refusing to start: no usable previous journal ({e})"
        ))),
    }
}

/// Saves `journal` at `path` (and its copy) crash-safely, rotating the current one (or its
/// copy, if it is damaged: moved aside) to the previous journal first; when both are
/// damaged the previous journal stays the one the coordinator resumed from. Refused when the current journal is of a newer
/// coordinator term (fenced). Starts the logs again after it (`journal_log::reset`).
pub fn save(journal: &Journal, path: &Path) -> Result<Saved, ClusterError> {
    // First: a journal that does not serialize leaves every file as it was.
    let value = to_value(journal)?;
    let copy = copy_path(path);
    let main = open_snapshot(path);
    if main.is_err() && path.exists() {
        let aside = damaged_path(path);
        // Made durable by the writes below, which fsync the directory.
        std::fs::rename(path, &aside).map_err(eckpt_cluster_api::io_at(&aside))?;
    }
    let mut written = 0;
    // The journal as it stands, its log's records included: what the previous journal
    // holds, so that it is the whole state before this save.
    let current = main
        .or_else(|_| open_snapshot(&copy))
        .and_then(|(mut current, name)| {
            journal_log::replay(path, &name, &mut current)?;
            Ok(current)
        });
    match current {
        Ok(current) if current.term > journal.term => {
            return Err(ClusterError::Fenced(format!(
                "{}: the coordinator of term {} has taken this journal over (this one is of term {}): it decides nothing more",
                path.display(),
                current.term,
                journal.term
            )))
        }
        Ok(current) => {
            let mut previous = to_value(&current)?;
            let successor = Successor {
                same_state: state(previous.clone()) == state(value.clone()),
                next_task: journal.next_task,
                term: journal.term,
            };
            let successor = to_value(&successor)?;
            previous
                .as_object_mut()
                // A journal is a struct, which serializes to a JSON object.
                .expect("the journal is an object")
                .insert(SUCCESSOR.into(), successor);
            let previous = seal(previous);
            write_atomic(&prev_path(path), &previous)?;
            written += previous.len() as u64;
        }
        // Both damaged (or the log): the previous journal stays the one the coordinator
        // resumed from.
        Err(_) => {}
    }
    let sealed = seal(value);
    write_atomic(&copy, &sealed)?;
    write_atomic(path, &sealed).inspect_err(|_| {
        // The change is refused (nothing it carried is decided): a copy holding it must not
        // be resumed from if the journal is damaged later.
        let _ = std::fs::remove_file(&copy);
    })?;
    let snapshot = journal_log::snapshot_name(&sealed);
    journal_log::reset(path, &snapshot, journal.term)?;
    Ok(Saved {
        bytes: written + 2 * sealed.len() as u64,
        size: sealed.len() as u64,
        snapshot,
    })
}

/// A snapshot written.
pub struct Saved {
    /// Bytes written, every file together.
    pub bytes: u64,
    /// The snapshot's own size.
    pub size: u64,
    /// Its name in its logs' headers.
    pub snapshot: String,
}

/// How a coordinator writes its journal: a record of each commit's change appended to the
/// log, and a snapshot instead when the log has grown past the last one, when the term
/// changed, and after an append failed (a torn line must not be buried by the next).
pub struct Writer {
    path: PathBuf,
    /// The snapshot this coordinator wrote last, and its size (`None`: none yet).
    snapshot: Option<(String, u64)>,
    /// Bytes appended to both logs together since.
    logged: u64,
}

/// The log may grow to this before a snapshot replaces it however small the snapshot.
const LOG_BEFORE_SNAPSHOT: u64 = 1 << 20;

impl Writer {
    /// A writer of the journal at `path`; its first write is a snapshot.
    pub fn new(path: PathBuf) -> Writer {
        Writer {
            path,
            snapshot: None,
            logged: 0,
        }
    }

    /// Writes `after`, the journal that `before` (the one written last) became; the bytes
    /// written.
    pub fn write(&mut self, before: &Journal, after: &Journal) -> Result<u64, ClusterError> {
        if let Some((snapshot, size)) = &self.snapshot {
            // Each log holds half of what was appended.
            if after.term == before.term && self.logged / 2 < (*size).max(LOG_BEFORE_SNAPSHOT) {
                let record = journal_log::Record::between(before, after);
                let appended = journal_log::append(&self.path, snapshot, after.term, &record);
                match &appended {
                    Ok(bytes) => self.logged += bytes,
                    Err(_) => self.snapshot = None,
                }
                return appended;
            }
        }
        let saved = save(after, &self.path)?;
        self.snapshot = Some((saved.snapshot, saved.size));
        self.logged = 0;
        Ok(saved.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use eckpt_coding::CodingConfig;

    fn journal(term: u64) -> Journal {
        let nodes: Vec<String> = (0..3).map(|i| format!("n{i}")).collect();
        let mut j = Journal::new(CodingConfig::default(), &nodes, &[]);
        j.term = term;
        j
    }

    /// After a failover the replaced coordinator may still run (cut off, not dead): its
    /// next save is refused and leaves the newer coordinator's journal as it was.
    #[test]
    fn a_save_of_an_older_term_is_refused_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut old = journal(1);
        old.save(&path).unwrap();
        let mut new = Journal::load(&path).unwrap();
        new.term = 2;
        new.committed = 5;
        new.save(&path).unwrap();
        let on_disk = std::fs::read(&path).unwrap();

        old.committed = 4;
        let e = old.save(&path).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Fenced, "{e}");
        assert!(
            e.to_string().contains("term 2 has taken this journal over"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            on_disk,
            "the journal was rewritten"
        );
        assert_eq!(Journal::load(&path).unwrap().committed, 5);
        // The same term saves (a coordinator's own later decisions), a newer one too.
        new.committed = 6;
        new.save(&path).unwrap();
    }

    /// A journal JSON cannot hold (a node's store path that is not UTF-8: no agent can
    /// register one, so only a bug makes it) is refused as an internal error, not a crash
    /// of the coordinator, and the journal on disk stays as it was.
    #[test]
    fn a_journal_that_does_not_serialize_is_an_error_and_changes_nothing() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut j = journal(1);
        j.save(&path).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        let mut info = super::super::test_cluster::TestCluster::info("n0");
        info.store = PathBuf::from(std::ffi::OsStr::from_bytes(b"/store/\xff"));
        j.nodes.get_mut("n0").unwrap().info = Some(info);
        j.committed = 3;
        let e = j.save(&path).unwrap_err();
        assert_eq!(e.kind(), eckpt_cluster_api::ErrorKind::Internal, "{e}");
        assert!(e.to_string().contains("the journal does not serialize"), "{e}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            on_disk,
            "the journal was rewritten"
        );
        assert!(!prev_path(&path).exists(), "the journal was rotated");
    }

    fn flip_a_bit(path: &Path) {
        let mut bytes = std::fs::read(path).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0x01;
        std::fs::write(path, bytes).unwrap();
    }

    /// One bit flipped at rest in the journal, after a decision the previous journal does
    /// not hold: its copy has it, and the coordinator resumes with it.
    #[test]
    fn a_damaged_journal_resumes_from_its_copy_and_both_damaged_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        let mut j = journal(1);
        j.save(&path).unwrap();
        j.committed = 7;
        j.save(&path).unwrap();
        flip_a_bit(&path);
        assert_eq!(Journal::load(&path).unwrap().committed, 7);
        // The next save keeps the damaged file aside and rotates the copy.
        j.committed = 8;
        j.save(&path).unwrap();
        assert!(damaged_path(&path).is_file());
        assert_eq!(Journal::load(&path).unwrap().committed, 8);
        assert_eq!(Journal::load(&prev_path(&path)).unwrap().committed, 7);
        flip_a_bit(&path);
        flip_a_bit(&copy_path(&path));
        let e = Journal::load(&path).unwrap_err();
        assert!(e.to_string().contains("predates the last decision"), "{e}");
    }

    /// A journal damaged right after a coordinator took its term falls back to the
    /// previous one (the same decisions) without giving the term back: the next
    /// coordinator's term is above every term ever handed out.
    #[test]
    fn the_fallback_to_the_previous_journal_keeps_the_newest_term() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.json");
        journal(3).save(&path).unwrap();
        journal(4).save(&path).unwrap();
        flip_a_bit(&path);
        flip_a_bit(&copy_path(&path));
        assert_eq!(Journal::load(&path).unwrap().term, 4);
    }
}
