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

use crate::owner_lock::OwnerLock;
use eckpt_cluster_api::dirs::write_atomic;
use eckpt_cluster_api::ClusterError;

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

/// Claims the store at `store` (a node's store root) for node `name`: refused when another
/// agent holds it, or when it belongs to another node. `created_local` says whether this
/// agent just created the store's parent directory (recorded on the first start).
pub fn claim(store: &Path, name: &str, created_local: bool) -> Result<Identity, ClusterError> {
    let lock = OwnerLock::take(&store.join(LOCK_FILE), "agent")?;
    let path = store.join(IDENTITY_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let file: IdentityFile = serde_json::from_slice(&bytes).map_err(|e| {
                ClusterError::Invalid(format!(
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
            write_atomic(&path, &serde_json::to_vec_pretty(&file).expect("serializes"))?;
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

/// Deletes a node's node-local data: its store (identity included) and its parity, and the
/// directory holding them when the agent created it and nothing else is left there. The
/// directories deleted.
pub fn purge(store: &Path, created_local: bool) -> Result<Vec<PathBuf>, ClusterError> {
    let coded = eckpt_cluster_api::dirs::ClusterDir::coded_beside(store);
    let mut deleted = Vec::new();
    for dir in [coded, store.to_path_buf()] {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(eckpt_cluster_api::io_at(&dir))?;
            deleted.push(dir);
        }
    }
    if let Some(local) = store.parent().filter(|_| created_local) {
        if std::fs::remove_dir(local).is_ok() {
            deleted.push(local.to_path_buf());
        }
    }
    Ok(deleted)
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
}
