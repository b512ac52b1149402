//! Which node an agent is. A node name has one owner: the store that first registered
//! under it. The store keeps the proof — `node.json`, with the node's name and a random
//! token made at the agent's first start on that store — and the coordinator journals the
//! token at the first registration. An agent started with a live node's name, or with
//! another node's store, is refused before anything of it is journaled; one whose store
//! is new (the node lost its disk) is accepted as that node, and the coordinator finds it
//! damaged until recovery rebuilds its data.
//!
//! The agent also holds `agent.lock` in the store for as long as it runs: a second agent
//! on the same store on this host is refused at once.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use eckpt_cluster_api::dirs::{is_temp_of, write_atomic, ClusterDir};
use eckpt_cluster_api::ClusterError;
use eckpt_daemon::owner_lock::OwnerLock;

/// The identity file in a node's store.
pub const IDENTITY_FILE: &str = "node.json";

/// The lock an agent holds on its store.
const LOCK_FILE: &str = "agent.lock";

/// `node.json`.
#[derive(Debug, Serialize, Deserialize)]
struct IdentityFile {
    format: u32,
    /// The node the store belongs to.
    name: String,
    /// Proof of it, 32 hex digits.
    token: String,
    /// The agent created the store's parent directory (`--store PATH`): `down --purge` may
    /// remove it once empty.
    created_local: bool,
}

/// The node an agent is, proven by its store.
#[derive(Debug)]
pub struct Identity {
    /// The node's token.
    pub token: String,
    /// The token was made now: the store was new or wiped.
    pub fresh: bool,
    /// The agent created the directory holding the store (see [`IdentityFile`]).
    pub created_local: bool,
    _lock: OwnerLock,
}

/// Whether `name` is a file the agent keeps in its store's root (its identity and lock).
pub fn is_entry(name: &str) -> bool {
    name == IDENTITY_FILE || name == LOCK_FILE || is_temp_of(name, IDENTITY_FILE)
}

/// Claims the store at `store` (a node's store root) for node `name`, creating it
/// owner-only: refused when another agent holds it, when it belongs to another node, or —
/// before anything in it is touched — when it holds no identity yet but files eckpt did
/// not make, there or in the parity directory beside it (a user's directory given as
/// `--store` that already has a `store` or `coded`: eckpt would write into it and a purge
/// would take it for its own). `created_local` says whether this agent just created the
/// store's parent directory (recorded on the first start).
pub fn claim(store: &Path, name: &str, created_local: bool) -> Result<Identity, ClusterError> {
    if !store.join(IDENTITY_FILE).exists() {
        refuse_foreign(store, crate::created::store_entry)?;
        refuse_foreign(&ClusterDir::coded_beside(store), crate::created::coded_entry)?;
    }
    eckpt_private_dir::ensure(store)?;
    let lock = OwnerLock::take(&store.join(LOCK_FILE), "agent")?;
    let path = store.join(IDENTITY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let file: IdentityFile = serde_json::from_slice(&bytes).map_err(|e| {
                ClusterError::Refused(format!(
                    "{}: unreadable node identity ({e}): refusing to guess whose store this is",
                    path.display()
                ))
            })?;
            if file.name != name {
                return Err(ClusterError::Fenced(format!(
                    "the store {} belongs to node {}, not {name}: refused",
                    store.display(),
                    file.name
                )));
            }
            Ok(Identity {
                token: file.token,
                fresh: false,
                created_local: file.created_local,
                _lock: lock,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut raw = [0u8; 16];
            eckpt_proto::random_bytes(&mut raw)?;
            let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            let file = IdentityFile {
                format: 1,
                name: name.to_string(),
                token: token.clone(),
                created_local,
            };
            // Cannot fail: `IdentityFile` is a struct of a number, strings and a bool (no map,
            // no path, no serializer of its own), and writing JSON into a `Vec` does no I/O.
            let bytes = serde_json::to_vec_pretty(&file).expect("node.json serializes");
            write_atomic(&path, &bytes)?;
            Ok(Identity {
                token,
                fresh: true,
                created_local,
                _lock: lock,
            })
        }
        Err(e) => Err(eckpt_cluster_api::io_at(&path)(e)),
    }
}

/// The node a store belongs to, if it says, and whether its agent created the directory
/// holding it (`kill-node --wipe` and `down --purge` check it before deleting).
pub fn owner_of(store: &Path) -> Option<(String, bool)> {
    let bytes = std::fs::read(store.join(IDENTITY_FILE)).ok()?;
    serde_json::from_slice::<IdentityFile>(&bytes)
        .ok()
        .map(|f| (f.name, f.created_local))
}

/// Refuses `dir` when it exists and holds an entry `made` does not name.
fn refuse_foreign(dir: &Path, made: fn(&str) -> Option<crate::created::Made>) -> Result<(), ClusterError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    let foreign: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().and_then(made).is_none())
        .map(|e| e.path())
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    Err(ClusterError::Refused(format!(
        "{} holds files eckpt did not create ({}): it is not a node's store; give the agent a new or empty --store",
        dir.display(),
        crate::created::listing(dir, &foreign)
    )))
}

/// Deletes a node's node-local data: what eckpt made in its store (identity included) and
/// in its parity directory, each directory once nothing else is in it, and the directory
/// holding them when the agent created it and it is empty then. What was deleted, and the
/// files eckpt did not make, which stay.
pub fn purge(store: &Path, created_local: bool) -> Result<crate::created::Removal, ClusterError> {
    use crate::created::{remove_made, Removal};
    let mut out = Removal::default();
    for (dir, made) in [
        (
            ClusterDir::coded_beside(store),
            crate::created::coded_entry as fn(&str) -> _,
        ),
        (store.to_path_buf(), crate::created::store_entry),
    ] {
        let existed = dir.exists();
        if remove_made(&dir, made, &mut out)? && existed {
            out.removed.push(dir);
        }
    }
    if let Some(local) = store.parent().filter(|_| created_local) {
        if std::fs::remove_dir(local).is_ok() {
            out.removed.push(local.to_path_buf());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_proves_one_node_and_admits_one_agent() {
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        std::fs::create_dir(&store).unwrap();
        let first = claim(&store, "n0", false).unwrap();
        assert!(first.fresh);
        let e = claim(&store, "n0", false).unwrap_err().to_string();
        assert!(e.contains("another agent is running"), "{e}");
        let token = first.token.clone();
        drop(first);
        let again = claim(&store, "n0", false).unwrap();
        assert!(!again.fresh);
        assert_eq!(again.token, token, "the token stays with the store");
        drop(again);
        let e = claim(&store, "n1", false).unwrap_err();
        assert!(e.to_string().contains("belongs to node n0, not n1"), "{e}");
        assert_eq!(owner_of(&store), Some(("n0".to_string(), false)));
    }

    #[test]
    fn a_users_store_or_parity_directory_is_refused_and_left_as_it_was() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        std::fs::create_dir(&store).unwrap();
        std::fs::write(store.join("mine.txt"), b"x").unwrap();
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = claim(&store, "n0", false).unwrap_err().to_string();
        assert!(e.contains("holds files eckpt did not create (mine.txt)"), "{e}");
        let mode = std::fs::metadata(&store).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "not changed");
        std::fs::remove_file(store.join("mine.txt")).unwrap();

        let coded = tmp.path().join("coded");
        std::fs::create_dir(&coded).unwrap();
        std::fs::write(coded.join("thesis.tex"), b"x").unwrap();
        let e = claim(&store, "n0", false).unwrap_err().to_string();
        assert!(
            e.contains("coded holds files eckpt did not create (thesis.tex)"),
            "{e}"
        );
        assert!(!store.join(IDENTITY_FILE).exists());

        std::fs::remove_file(coded.join("thesis.tex")).unwrap();
        let identity = claim(&store, "n0", false).unwrap();
        std::fs::create_dir(store.join("rank.0")).unwrap();
        std::fs::write(store.join("notes"), b"x").unwrap();
        let out = purge(&store, false).unwrap();
        assert_eq!(out.foreign, [store.join("notes")]);
        assert!(
            out.removed.contains(&coded) && !out.removed.contains(&store),
            "{out:?}"
        );
        let left: Vec<_> = std::fs::read_dir(&store)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, ["notes"]);
        drop(identity);
    }
}
