//! The journal on disk: checksummed, with the previous journal kept beside it.
//!
//! `journal.json` is the journal sealed (`eckpt_durable::sealed`): its JSON plus a
//! `checksum` key, so one flipped bit (`"committed": 11` → `10`, a placement `n4` → `n5`) is
//! caught instead of served.
//!
//! Each save first rotates the current journal to `journal.prev.json` (atomically, with its
//! own checksum), then writes the new one (atomically). A damaged `journal.json` is only
//! replaced by the previous journal when that is safe, and the previous journal is *older*:
//! if the last save was a decision — an epoch committed or aborted, a rank placed, a
//! recovery, a node added — the agents may already act on it (they drop the parity and the
//! images of older epochs once a newer one is committed), so resuming from before it could
//! serve an epoch whose data is gone or place a rank where its data is not. The rotated
//! file therefore records whether its successor changed anything but what is refreshed
//! anyway (agents' addresses, which they send again when they register, and the task
//! counter, which it also records): only then is it used, and otherwise the coordinator
//! refuses to start.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
}

/// The previous journal, kept beside `path`.
pub fn prev_path(path: &Path) -> PathBuf {
    path.with_extension("prev.json")
}

/// Where a damaged journal is moved when a save replaces it (kept for inspection).
fn damaged_path(path: &Path) -> PathBuf {
    path.with_extension("damaged.json")
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("the journal serializes")
}

/// The file contents: `value` sealed ([`eckpt_durable::sealed`]).
fn seal(value: Value) -> Vec<u8> {
    sealed::seal_value(value)
}

/// Reads `path` and checks its checksum; its contents without the checksum.
fn open(path: &Path) -> Result<Value, ClusterError> {
    let bytes = std::fs::read(path).map_err(eckpt_cluster_api::io_at(path))?;
    sealed::unseal_value(&bytes)
        .map_err(|e| ClusterError::Corrupt(format!("{}: journal {e}", path.display())))
}

fn parse(path: &Path, value: Value) -> Result<Journal, ClusterError> {
    let journal: Journal = serde_json::from_value(value)
        .map_err(|e| ClusterError::Corrupt(format!("{}: {e}", path.display())))?;
    if journal.format != JOURNAL_FORMAT {
        return Err(ClusterError::Invalid(format!(
            "{}: journal format {} (this eckpt reads {JOURNAL_FORMAT})",
            path.display(),
            journal.format
        )));
    }
    Ok(journal)
}

/// The journal's decisions: everything but agents' addresses and the task counter.
fn state(journal: &Journal) -> Value {
    let mut value = to_value(journal);
    let object = value.as_object_mut().expect("the journal is an object");
    object.remove("next_task");
    if let Some(Value::Object(nodes)) = object.get_mut("nodes") {
        for node in nodes.values_mut().filter_map(Value::as_object_mut) {
            node.remove("info");
        }
    }
    value
}

/// Loads the journal at `path`; if it is damaged, the previous journal when that is safe
/// (see the module documentation), else an error saying why the coordinator cannot start.
pub fn load(path: &Path) -> Result<Journal, ClusterError> {
    let damage = match open(path).and_then(|v| parse(path, v)) {
        Ok(journal) => return Ok(journal),
        Err(e @ (ClusterError::Io { .. } | ClusterError::Invalid(_))) => return Err(e),
        Err(e) => e,
    };
    let prev = prev_path(path);
    let fallback = open(&prev).and_then(|mut value| {
        let successor = value
            .as_object_mut()
            .and_then(|o| o.remove(SUCCESSOR))
            .and_then(|s| serde_json::from_value::<Successor>(s).ok());
        Ok((parse(&prev, value)?, successor))
    });
    match fallback {
        Ok((mut journal, Some(successor))) if successor.same_state => {
            journal.next_task = journal.next_task.max(successor.next_task);
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

/// Saves `journal` at `path` crash-safely, rotating the current one to the previous
/// journal first; a damaged current journal is moved aside instead (the previous journal
/// then stays the one it was resumed from).
pub fn save(journal: &Journal, path: &Path) -> Result<(), ClusterError> {
    match open(path).and_then(|v| parse(path, v)) {
        Ok(current) => {
            let successor = Successor {
                same_state: state(&current) == state(journal),
                next_task: journal.next_task,
            };
            let mut value = to_value(&current);
            value
                .as_object_mut()
                .expect("the journal is an object")
                .insert(SUCCESSOR.into(), to_value(&successor));
            write_atomic(&prev_path(path), &seal(value))?;
        }
        Err(_) if path.exists() => {
            let aside = damaged_path(path);
            // Made durable by the write below, which fsyncs the directory.
            std::fs::rename(path, &aside).map_err(eckpt_cluster_api::io_at(&aside))?;
        }
        Err(_) => {}
    }
    write_atomic(path, &seal(to_value(journal)))
}
