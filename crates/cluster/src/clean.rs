//! `eckpt clean --job J`: what a failed or killed job left on this host — its node stores,
//! and the cluster directory eckpt made for it — deleted by the rule `down --purge` follows:
//! only what eckpt made and recorded.
//!
//! - A node store is deleted when it says it is its node's (`node.json`, the identity its
//!   agent wrote, [`identity::owner_of`]) and no agent holds it (its lock); with it go its
//!   parity, and the directory holding both when the agent created that directory
//!   (`created_local`) and nothing else is in it ([`identity::purge`]). A user's directory
//!   given as `--store` stays, and so does anything else in it.
//! - The stores are found where the job's agents were told to store
//!   (`--node-store`, default [`DEFAULT_NODE_STORE`], `%j` the job and `%n` any node name)
//!   and, with `--dir D`, where `D`'s journal says this host's nodes registered them.
//! - The cluster directory goes only when its journal holds this job and no coordinator
//!   runs there (`launch::purge_cluster_dir`: eckpt's entries, then the directory if
//!   nothing else is in it).
//!
//! Node stores live where others can write (`/tmp`): each directory is checked before
//! anything in it is deleted ([`eckpt_private_dir::check_removable`]: a directory, not a
//! symbolic link, its owner's alone), and root — a Slurm epilog — deletes with the owner's
//! file-system identity ([`eckpt_private_dir::as_owner`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::launch::{self, Purged};
use eckpt_agent::identity;
use eckpt_cluster_api::dirs::{check_node_name, ClusterDir};
use eckpt_cluster_api::ClusterError;
use eckpt_coordinator::Journal;
use eckpt_daemon::owner_lock::OwnerLock;

/// Where `eckpt run --launcher srun` has each agent store by default (`%j`: the job id,
/// `%n`: the node's name).
pub const DEFAULT_NODE_STORE: &str = "/tmp/eckpt-job%j-%n";

/// What `eckpt clean` is asked to clean.
#[derive(Debug, Clone)]
pub struct CleanOptions {
    /// The job.
    pub job: String,
    /// The cluster directory eckpt made for it, if it is to go too.
    pub dir: Option<PathBuf>,
    /// Where the job's agents stored (`%j`, `%n` as in `eckpt run --node-store`).
    pub node_store: String,
}

/// What `eckpt clean` did.
#[derive(Debug, Default, Serialize)]
pub struct CleanReport {
    /// The job.
    pub job: String,
    /// What it deleted.
    pub removed: Vec<PathBuf>,
    /// What it left, and why.
    pub kept: Vec<Kept>,
}

/// Something left, and why.
#[derive(Debug, Serialize)]
pub struct Kept {
    /// What.
    pub path: PathBuf,
    /// Why it stays.
    pub why: String,
}

impl CleanReport {
    fn keep(&mut self, path: &Path, why: impl Into<String>) {
        self.kept.push(Kept {
            path: path.to_path_buf(),
            why: why.into(),
        });
    }
}

/// One node store's deletion from outside its agent.
#[derive(Debug, Default)]
pub struct StorePurge {
    /// The directories deleted.
    pub removed: Vec<PathBuf>,
    /// The directory that held the store, when it stays, and why.
    pub kept: Option<(PathBuf, String)>,
}

/// The owner expected of what this process deletes: this user; as root (a Slurm epilog,
/// cleaning up after a user's job), the job's user (`SLURM_JOB_UID`) where the batch system
/// says it, else each directory's owner, with whose identity it is then deleted.
pub fn owner_to_expect() -> Option<u32> {
    let me = eckpt_private_dir::euid();
    if me != 0 {
        return Some(me);
    }
    std::env::var("SLURM_JOB_UID")
        .ok()
        .and_then(|uid| uid.trim().parse().ok())
}

/// Deletes node `name`'s node-local data at `store` (a store root, `ClusterDir::local_store`
/// of the directory an agent was given) without its agent: after checking that the
/// directory holding it and the store itself are directories `owner` alone may write
/// (not symbolic links), that the store says it is `name`'s, and that no agent holds it.
/// Root deletes with the owner's file-system identity. Why nothing was deleted, if so.
pub fn purge_unheld(store: &Path, name: &str, owner: Option<u32>) -> Result<StorePurge, String> {
    let local = store
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", store.display()))?;
    let held = eckpt_private_dir::check_removable(local, owner).map_err(|e| e.why())?;
    eckpt_private_dir::as_owner(held, || {
        eckpt_private_dir::check_removable(store, Some(held.uid)).map_err(|e| e.why())?;
        let created_local = match identity::owner_of(store) {
            Some((node, created_local)) if node == name => created_local,
            Some((node, _)) => return Err(format!("it belongs to node {node}, not {name}")),
            None => return Err("it holds no node identity (node.json): eckpt did not make it".into()),
        };
        // An agent holds its store's lock for as long as it runs; taking it keeps one that
        // starts now off the store until it is gone.
        let _lock = OwnerLock::take(&store.join("agent.lock"), "agent").map_err(|e| match e {
            ClusterError::Fenced(_) => "its agent is running".to_string(),
            other => other.to_string(),
        })?;
        let purged = identity::purge(store, created_local).map_err(|e| e.to_string())?;
        let kept = std::fs::symlink_metadata(local).is_ok().then(|| {
            let why = if !purged.foreign.is_empty() {
                format!(
                    "it holds files eckpt did not create ({})",
                    eckpt_agent::created::listing(local, &purged.foreign)
                )
            } else if created_local {
                format!("it holds files eckpt did not create ({})", listing(local))
            } else {
                "eckpt did not create it (the agent was given it as its store)".to_string()
            };
            (local.to_path_buf(), why)
        });
        Ok(StorePurge {
            removed: purged.removed,
            kept,
        })
    })
}

/// Up to three names in `dir`, for a message.
fn listing(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let more = names.len() > 3;
    names.truncate(3);
    format!("{}{}", names.join(", "), if more { ", …" } else { "" })
}

/// A job id goes into a path: the characters of batch systems' ids and eckpt's own.
fn check_job_id(job: &str) -> Result<(), ClusterError> {
    let fine = !job.is_empty()
        && !job.starts_with('.')
        && job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    if fine {
        Ok(())
    } else {
        Err(ClusterError::Invalid(format!(
            "--job {job:?}: a job id is letters, digits, '-', '_', '.' and '+'"
        )))
    }
}

/// `eckpt clean`: see the module documentation. A cluster directory that holds another
/// job, is not eckpt's, or whose coordinator runs is refused before anything is deleted.
pub fn clean(options: &CleanOptions) -> Result<CleanReport, ClusterError> {
    check_job_id(&options.job)?;
    let owner = owner_to_expect();
    let mut report = CleanReport {
        job: options.job.clone(),
        ..CleanReport::default()
    };
    let mut seen = BTreeSet::new();
    if let Some(dir) = &options.dir {
        clean_cluster_dir(
            &ClusterDir::new(dir)?,
            &options.job,
            owner,
            &mut seen,
            &mut report,
        )?;
    }
    clean_node_stores(&options.node_store, &options.job, owner, &seen, &mut report)?;
    Ok(report)
}

/// The cluster directory of job `job` and the node stores its journal records on this
/// host; the directories of the stores it handled go to `seen`.
fn clean_cluster_dir(
    dir: &ClusterDir,
    job: &str,
    owner: Option<u32>,
    seen: &mut BTreeSet<PathBuf>,
    report: &mut CleanReport,
) -> Result<(), ClusterError> {
    let root = dir.root();
    if std::fs::symlink_metadata(root).is_err() {
        return Ok(());
    }
    let refused = |why: String| ClusterError::Refused(format!("{}: {why}; nothing deleted", root.display()));
    let held = eckpt_private_dir::check_removable(root, owner).map_err(|e| refused(e.why()))?;
    eckpt_private_dir::as_owner(held, || {
        if !dir.cluster_file().exists() {
            return Err(refused(
                "no cluster.json: it is not an eckpt cluster directory".into(),
            ));
        }
        if let Some(pid) = launch::running(&dir.coordinator()) {
            return Err(refused(format!(
                "its coordinator is running (pid {pid}): the job is not over (`eckpt down --dir {}` stops it)",
                root.display()
            )));
        }
        if launch::status_now(dir).is_some() {
            return Err(refused(format!(
                "its coordinator answers: the job is not over (`eckpt down --dir {}` stops it)",
                root.display()
            )));
        }
        let journal = Journal::load(&dir.journal()).map_err(|e| {
            refused(format!(
                "its journal is unreadable ({e}): which job it holds is unknown"
            ))
        })?;
        match &journal.job.id {
            Some(id) if id == job => {}
            Some(id) => return Err(refused(format!("it holds job {id}, not {job}"))),
            None => {
                return Err(refused(format!(
                    "it holds no job (no run claimed one): `eckpt down --dir {} --purge` deletes a cluster",
                    root.display()
                )))
            }
        }
        let here = eckpt_cluster_api::net::host_name();
        let mut agents = Vec::new();
        for (name, entry) in &journal.nodes {
            if let Some(pid) = launch::running(&dir.node(name)) {
                agents.push(format!("{name} (pid {pid})"));
            }
            let Some(info) = &entry.info else { continue };
            if info.store.starts_with(root) || std::fs::symlink_metadata(&info.store).is_err() {
                continue;
            }
            if let Some(local) = info.store.parent() {
                seen.insert(local.to_path_buf());
            }
            let host = info.host.split('/').next().unwrap_or_default();
            let result = if host != here {
                Err(format!(
                    "it is on host {host} (`eckpt clean --job {job}` there deletes it)"
                ))
            } else {
                purge_unheld(&info.store, name, owner)
            };
            record(report, &info.store, name, result);
        }
        if !agents.is_empty() {
            report.keep(
                root,
                format!("agents of it still run here: {}", agents.join(", ")),
            );
            return Ok(());
        }
        let mut out = Purged::default();
        let kept = launch::purge_cluster_dir(dir, &mut out)?;
        report.removed.extend(out.removed);
        if let Some(why) = kept {
            report.keep(root, why);
        }
        Ok(())
    })
}

/// Adds one store's deletion to the report.
fn record(report: &mut CleanReport, store: &Path, name: &str, result: Result<StorePurge, String>) {
    match result {
        Ok(purge) => {
            report.removed.extend(purge.removed);
            if let Some((path, why)) = purge.kept {
                report.keep(&path, why);
            }
        }
        Err(why) => report.keep(store, format!("node {name}'s store: {why}")),
    }
}

/// The node stores of job `job` where its agents were told to store them (`pattern`, as
/// `--node-store`), except those in `seen`.
fn clean_node_stores(
    pattern: &str,
    job: &str,
    owner: Option<u32>,
    seen: &BTreeSet<PathBuf>,
    report: &mut CleanReport,
) -> Result<(), ClusterError> {
    let path = PathBuf::from(pattern.replace("%j", job));
    let path = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(eckpt_cluster_api::io_at(&path))?
            .join(path)
    };
    let bad = |why: &str| ClusterError::Invalid(format!("--node-store {pattern}: {why}"));
    let (Some(parent), Some(last)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(bad("not a directory's path"));
    };
    if parent.to_string_lossy().contains("%n") {
        return Err(bad(
            "%n (the node's name) may only be in the last part of the path",
        ));
    }
    // Each candidate: the directory an agent was given, and the node it was for (any
    // node, when the path does not name it).
    let mut candidates: Vec<(PathBuf, Option<String>)> = Vec::new();
    match last.split_once("%n") {
        None => candidates.push((path.clone(), None)),
        Some((prefix, suffix)) => {
            let Ok(entries) = std::fs::read_dir(parent) else {
                return Ok(());
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let node = name
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_suffix(suffix))
                    .filter(|node| check_node_name(node).is_ok());
                if let Some(node) = node {
                    candidates.push((entry.path(), Some(node.to_string())));
                }
            }
        }
    }
    candidates.sort();
    for (local, node) in candidates {
        if seen.contains(&local) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&local) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            report.keep(&local, "it is a symbolic link");
            continue;
        }
        if !meta.is_dir() {
            report.keep(&local, "it is not a directory");
            continue;
        }
        let store = ClusterDir::local_store(&local);
        let coded = ClusterDir::coded_beside(&store);
        if std::fs::symlink_metadata(&store).is_err() && std::fs::symlink_metadata(&coded).is_err() {
            report.keep(
                &local,
                "it holds no node store: eckpt did not make it, or it is empty",
            );
            continue;
        }
        let node = match node {
            Some(node) => node,
            None => match identity::owner_of(&store) {
                Some((node, _)) => node,
                None => {
                    report.keep(&local, "its store holds no node identity (node.json)");
                    continue;
                }
            },
        };
        record(report, &store, &node, purge_unheld(&store, &node, owner));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_path_safe() {
        for id in ["1234", "1234_7", "77.batch-host", "65f0a1-4242", "a+b"] {
            check_job_id(id).unwrap();
        }
        for id in ["", "../x", "a/b", ".", "..", "x y", "a%n"] {
            assert!(check_job_id(id).is_err(), "{id:?}");
        }
    }
}
