//! What eckpt makes, known by name, and deleting that and nothing else.
//!
//! `down --purge`, `clean` and an agent's `Purge` delete directories eckpt created: the
//! cluster directory's entries, a node's store and parity. A user may still have put a
//! file in one of them (notes in the cluster directory, a run record's neighbour in
//! `runs/`, anything in a store given as `--store`): deleting such a directory whole would
//! take the file with it. So each directory eckpt makes has a description of its entries
//! ([`Made`], one function per kind of directory): what it names is deleted, what it does
//! not name stays, with the directories holding it, and is reported.

use std::path::{Path, PathBuf};

use eckpt_cluster_api::dirs::{
    check_node_name, is_created_entry, is_launch_id, is_temp_of, LAUNCH_HOSTFILE, LAUNCH_RSH_SCRIPT,
};
use eckpt_cluster_api::ClusterError;

use crate::identity;
use crate::parity_store::ParityStore;

/// What eckpt makes under one name in a directory of its own.
#[derive(Clone, Copy)]
pub enum Made {
    /// A file (or socket) of eckpt's.
    File,
    /// A directory only eckpt's daemons write into, deleted whole (the coordinator's and
    /// the fault injection's directories; a rank's directory in a store).
    Whole,
    /// A directory whose entries are described by the function.
    Dir(fn(&str) -> Option<Made>),
}

/// What a deletion removed, and what it left because eckpt did not make it.
#[derive(Debug, Default)]
pub struct Removal {
    /// Deleted, each given once: a directory emptied and removed stands for its entries.
    pub removed: Vec<PathBuf>,
    /// Left: entries eckpt did not make.
    pub foreign: Vec<PathBuf>,
}

/// Deletes the entries of `dir` that `made` names (recursing into [`Made::Dir`]s), then
/// `dir` itself when nothing is left in it. A missing `dir` is not an error. Returns
/// whether `dir` is gone.
pub fn remove_made(
    dir: &Path,
    made: fn(&str) -> Option<Made>,
    out: &mut Removal,
) -> Result<bool, ClusterError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(eckpt_cluster_api::io_at(dir)(e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(eckpt_cluster_api::io_at(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(eckpt_cluster_api::io_at(&path))?;
        let name = entry.file_name();
        let what = name.to_str().and_then(made);
        let gone = match what {
            // A name of eckpt's on something of another type is not eckpt's.
            Some(Made::File) if !kind.is_dir() => remove(std::fs::remove_file(&path), &path)?,
            Some(Made::Whole) if kind.is_dir() => remove(std::fs::remove_dir_all(&path), &path)?,
            Some(Made::Dir(inner)) if kind.is_dir() => {
                let mut below = Removal::default();
                let gone = remove_made(&path, inner, &mut below)?;
                out.foreign.append(&mut below.foreign);
                if !gone {
                    removed.append(&mut below.removed);
                }
                gone
            }
            _ => {
                out.foreign.push(path);
                continue;
            }
        };
        if gone {
            removed.push(path);
        }
    }
    let gone = match std::fs::remove_dir(dir) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => false,
        Err(e) => return Err(eckpt_cluster_api::io_at(dir)(e)),
    };
    if !gone {
        out.removed.append(&mut removed);
    }
    Ok(gone)
}

/// A deletion's result: done, or already gone (another deleter, a daemon exiting).
fn remove(result: std::io::Result<()>, path: &Path) -> Result<bool, ClusterError> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(eckpt_cluster_api::io_at(path)(e)),
    }
}

/// The entries of a cluster directory ([`is_created_entry`]).
pub fn cluster_entry(name: &str) -> Option<Made> {
    match name {
        "runs" => Some(Made::Dir(run_entry)),
        "nodes" => Some(Made::Dir(|node| {
            check_node_name(node).is_ok().then_some(Made::Dir(node_entry))
        })),
        "coordinator" | "debug" => Some(Made::Whole),
        _ => is_created_entry(name).then_some(Made::File),
    }
}

/// The entries of `runs/`: the run records `eckpt run` writes (`run-<time>-<pid>.json`),
/// and the scratch directories of launches whose supervisor died before removing them.
fn run_entry(name: &str) -> Option<Made> {
    if is_launch_id(name) {
        return Some(Made::Dir(launch_entry));
    }
    let record = |name: &str| name.starts_with("run-") && name.ends_with(".json");
    let temp = name
        .strip_prefix('.')
        .and_then(|rest| rest.split_once(eckpt_durable::TEMP_MARK))
        .is_some_and(|(base, _)| record(base));
    (record(name) || temp).then_some(Made::File)
}

/// The entries of a launch's scratch directory.
fn launch_entry(name: &str) -> Option<Made> {
    [LAUNCH_HOSTFILE, LAUNCH_RSH_SCRIPT]
        .contains(&name)
        .then_some(Made::File)
}

/// The entries of a node's directory in the cluster directory: its process files, and its
/// store and parity unless the agent was given `--store`.
fn node_entry(name: &str) -> Option<Made> {
    match name {
        "store" => Some(Made::Dir(store_entry)),
        "coded" => Some(Made::Dir(coded_entry)),
        "log" | "pid" | "agent.sock" => Some(Made::File),
        _ => is_temp_of(name, "pid").then_some(Made::File),
    }
}

/// The entries of a node's store: the store's ranks and the node's identity.
pub fn store_entry(name: &str) -> Option<Made> {
    if eckpt_store::is_root_entry(name) {
        return Some(Made::Whole);
    }
    identity::is_entry(name).then_some(Made::File)
}

/// The entries of a node's parity directory.
pub fn coded_entry(name: &str) -> Option<Made> {
    ParityStore::is_entry(name).then_some(Made::Whole)
}

/// `paths`, relative to `root` where they are below it, for a one-line message (at most
/// five, then how many more).
pub fn listing(root: &Path, paths: &[PathBuf]) -> String {
    let mut names: Vec<String> = paths
        .iter()
        .map(|p| p.strip_prefix(root).unwrap_or(p).display().to_string())
        .collect();
    names.sort();
    let more = names.len().saturating_sub(5);
    names.truncate(5);
    let mut text = names.join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn only_entries_eckpt_names_are_deleted_and_the_rest_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cluster");
        for dir in [
            "coordinator",
            "runs/66f1c2a0-4242-1",
            "runs/66f1c2a0-4242-2",
            "nodes/n0/store/rank.0",
            "nodes/n1/coded/obj-1",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [
            "cluster.json",
            "coordinator/journal.json",
            "runs/run-1-2.json",
            "runs/mine.txt",
            "runs/66f1c2a0-4242-1/hostfile",
            "runs/66f1c2a0-4242-1/ssh",
            "runs/66f1c2a0-4242-2/hostfile",
            "runs/66f1c2a0-4242-2/notes",
            "nodes/n0/log",
            "nodes/n0/store/node.json",
            "nodes/n0/store/rank.0/x",
            "nodes/n0/store/thesis.tex",
            "nodes/n1/coded/obj-1/parity",
        ] {
            std::fs::write(root.join(file), b"x").unwrap();
        }
        // A name of eckpt's on a directory it would have made a file.
        std::fs::create_dir(root.join("secret")).unwrap();
        let mut out = Removal::default();
        assert!(!remove_made(&root, cluster_entry, &mut out).unwrap());
        assert_eq!(
            listing(&root, &out.foreign),
            "nodes/n0/store/thesis.tex, runs/66f1c2a0-4242-2/notes, runs/mine.txt, secret"
        );
        assert_eq!(names(&root), ["nodes", "runs", "secret"]);
        assert_eq!(names(&root.join("runs")), ["66f1c2a0-4242-2", "mine.txt"]);
        assert_eq!(names(&root.join("runs/66f1c2a0-4242-2")), ["notes"]);
        assert_eq!(names(&root.join("nodes")), ["n0"]);
        assert_eq!(names(&root.join("nodes/n0")), ["store"]);
        assert_eq!(names(&root.join("nodes/n0/store")), ["thesis.tex"]);
        for gone in [
            "cluster.json",
            "coordinator",
            "runs/run-1-2.json",
            "runs/66f1c2a0-4242-1",
            "nodes/n1",
        ] {
            assert!(
                out.removed.contains(&root.join(gone)),
                "{gone} in {:?}",
                out.removed
            );
        }
        assert!(!out.removed.contains(&root.join("runs")), "it stays");

        std::fs::remove_file(root.join("runs/mine.txt")).unwrap();
        std::fs::remove_file(root.join("runs/66f1c2a0-4242-2/notes")).unwrap();
        std::fs::remove_file(root.join("nodes/n0/store/thesis.tex")).unwrap();
        std::fs::remove_dir(root.join("secret")).unwrap();
        let mut out = Removal::default();
        assert!(remove_made(&root, cluster_entry, &mut out).unwrap());
        assert!(!root.exists());
        assert!(out.foreign.is_empty());
        assert!(
            remove_made(&root, cluster_entry, &mut out).unwrap(),
            "gone already"
        );
    }
}
