//! The flush directory as a whole: taking a directory as one (its mark), which epochs are
//! published, opening one, starting a new one (clearing what interrupted flushes left), and
//! retention. What is eckpt's in it is decided by complete names, never by prefixes: an
//! epoch is `epoch-<E>` holding a valid manifest of epoch `E`, a leftover is
//! `tmp-<E>-<pid>-<nanos>-<n>` or `trash-epoch-<E>-<pid>-<nanos>-<n>`, each a directory, not a
//! link. Anything else — `epoch-90/model.pt`, `tmp-results/` — is someone else's: never
//! listed, retired or deleted.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{io_at, FlushError, Result};
use crate::job::JobFilter;
use crate::manifest::Manifest;
use crate::mark::{is_marked, mark, other_entries};
use crate::read::{read_manifest, FlushedEpoch};
use crate::write::Staging;

const EPOCH_PREFIX: &str = "epoch-";
const TMP_PREFIX: &str = "tmp-";
const TRASH_PREFIX: &str = "trash-";

/// The directory of published epoch `epoch`.
pub(crate) fn epoch_dir_name(epoch: u64) -> String {
    format!("{EPOCH_PREFIX}{epoch}")
}

/// The directory of rank `rank` inside an epoch.
pub(crate) fn rank_dir_name(rank: u32) -> String {
    format!("rank.{rank}")
}

/// A decimal number as eckpt writes one (no sign, no leading zero).
fn canonical(digits: &str) -> Option<u64> {
    let n: u64 = digits.parse().ok()?;
    (n.to_string() == digits).then_some(n)
}

fn parse_epoch_dir(name: &str) -> Option<u64> {
    canonical(name.strip_prefix(EPOCH_PREFIX)?).filter(|&e| e > 0)
}

/// Whether `name` is a staging (`tmp-<E>-<suffix>`) or trash (`trash-epoch-<E>-<suffix>`)
/// directory's name, exactly as [`unique_suffix`] makes them, with `prefix` one of both.
fn is_leftover_name(name: &str, prefix: &str) -> bool {
    let Some(rest) = name.strip_prefix(prefix) else {
        return false;
    };
    let rest = if prefix == TRASH_PREFIX {
        match rest.strip_prefix(EPOCH_PREFIX) {
            Some(r) => r,
            None => return false,
        }
    } else {
        rest
    };
    let parts: Vec<&str> = rest.split('-').collect();
    parts.len() == 4 && parts.iter().all(|p| canonical(p).is_some())
}

/// Whether `path` is a directory itself (not a link to one).
fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir())
}

/// Creates `dir` owner-only (0700): flushed checkpoints hold the job's memory.
pub(crate) fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().mode(0o700).create(dir).map_err(io_at(dir))
}

/// Makes the directory's entries durable.
pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    eckpt_durable::sync_dir(dir).map_err(io_at(dir))
}

/// A name no other staging or trash directory of this or another process uses (the wall
/// clock only tells names apart).
#[allow(clippy::disallowed_methods)]
fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A flush directory (`--flush-dir`): published epochs, staging and retention. One cluster
/// flushes into it at a time.
#[derive(Debug, Clone)]
pub struct FlushDir {
    root: PathBuf,
}

impl FlushDir {
    /// The flush directory at `root` (it need not exist yet).
    pub fn new(root: impl Into<PathBuf>) -> FlushDir {
        FlushDir { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of published epoch `epoch`.
    pub fn epoch_dir(&self, epoch: u64) -> PathBuf {
        self.root.join(epoch_dir_name(epoch))
    }

    fn names(&self) -> Result<Vec<String>> {
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_at(&self.root)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_at(&self.root))?;
            if let Some(name) = entry.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    /// Takes the directory as a flush directory: creates it (owner-only) if need be, and
    /// marks it when it is new, empty, or an older eckpt's (nothing in it but published
    /// epochs). A non-empty directory without the mark is refused, naming what it holds:
    /// eckpt never housekeeps a directory that may be someone else's.
    pub fn claim(&self) -> Result<()> {
        if !self.root.is_dir() {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)
                .map_err(io_at(&self.root))?;
        }
        if is_marked(&self.root)? {
            return Ok(());
        }
        let names = self.names()?;
        let others = other_entries(&self.root, usize::MAX)?;
        let older_eckpts = others.len() == names.len()
            && names.iter().all(|n| {
                parse_epoch_dir(n)
                    .is_some_and(|e| is_real_dir(&self.epoch_dir(e)) && self.manifest(e).is_ok())
            });
        if !others.is_empty() && !older_eckpts {
            let shown = &others[..others.len().min(3)];
            return Err(FlushError::Invalid(format!(
                "{} is not empty and is not an eckpt flush directory (it has {}{}): give --flush-dir a new or empty directory",
                self.root.display(),
                shown.join(", "),
                if others.len() > 3 { ", …" } else { "" }
            )));
        }
        mark(&self.root)
    }

    /// Published epochs, ascending: directories named `epoch-<E>` whose manifest is valid and
    /// describes `E` (their files are checked by [`FlushDir::open`]).
    pub fn epochs(&self) -> Result<Vec<u64>> {
        let mut epochs: Vec<u64> = self
            .names()?
            .iter()
            .filter_map(|n| parse_epoch_dir(n))
            .filter(|&e| is_real_dir(&self.epoch_dir(e)) && self.manifest(e).is_ok())
            .collect();
        epochs.sort_unstable();
        Ok(epochs)
    }

    /// The checked manifest of published epoch `epoch` (its files are not looked at).
    pub fn manifest(&self, epoch: u64) -> Result<Manifest> {
        read_manifest(&self.epoch_dir(epoch), epoch)
    }

    /// Refuses the directory to a cluster whose job `filter` describes when its newest
    /// published epoch is another job's (see [`JobFilter::admits`]).
    pub fn check_job(&self, filter: &JobFilter) -> Result<()> {
        let Some(&newest) = self.epochs()?.last() else {
            return Ok(());
        };
        filter
            .admits(&self.manifest(newest)?, &self.root)
            .map_err(FlushError::Invalid)
    }

    /// Opens published epoch `epoch`: its manifest checked, its files present with their
    /// lengths (their contents are checked as they are read).
    pub fn open(&self, epoch: u64) -> Result<FlushedEpoch> {
        let dir = self.epoch_dir(epoch);
        if !dir.is_dir() {
            let have = self.epochs()?;
            return Err(FlushError::Missing(format!(
                "{} holds no flushed epoch {epoch} (flushed epochs: {})",
                self.root.display(),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
                }
            )));
        }
        FlushedEpoch::open(dir, epoch)
    }

    /// The newest published epoch that opens, with why each newer one did not.
    pub fn newest(&self) -> Result<(FlushedEpoch, Vec<(u64, FlushError)>)> {
        let mut skipped = Vec::new();
        for epoch in self.epochs()?.into_iter().rev() {
            match self.open(epoch) {
                Ok(e) => return Ok((e, skipped)),
                Err(e) => skipped.push((epoch, e)),
            }
        }
        let why: Vec<String> = skipped.iter().map(|(_, e)| e.to_string()).collect();
        Err(FlushError::Missing(format!(
            "{} holds no complete flushed epoch{}",
            self.root.display(),
            if why.is_empty() {
                String::new()
            } else {
                format!(" ({})", why.join("; "))
            }
        )))
    }

    /// Starts flushing `epoch`: takes the directory ([`FlushDir::claim`]), removes what
    /// interrupted flushes and deletions left (`tmp-…`, `trash-…`), and makes a staging
    /// directory.
    pub fn stage(&self, epoch: u64) -> Result<Staging> {
        self.claim()?;
        let target = self.epoch_dir(epoch);
        if self.manifest(epoch).is_ok() {
            return Err(FlushError::Invalid(format!(
                "epoch {epoch} is already flushed in {}",
                self.root.display()
            )));
        }
        if fs::symlink_metadata(&target).is_ok() {
            return Err(FlushError::Invalid(format!(
                "epoch {epoch} cannot be flushed: {} exists and is not a flushed epoch (eckpt leaves it alone; move it away)",
                target.display()
            )));
        }
        self.remove_leftovers(&[TMP_PREFIX, TRASH_PREFIX])?;
        let dir = self.root.join(format!("{TMP_PREFIX}{epoch}-{}", unique_suffix()));
        create_private_dir(&dir)?;
        fsync_dir(&self.root)?;
        Ok(Staging::new(self.root.clone(), dir, epoch))
    }

    /// Unpublishes the oldest published epochs beyond the newest `keep` (at least 1 is
    /// always kept) by renaming each to `trash-…`: from then on no reader sees them, and a
    /// crash leaves nothing half-deleted under an epoch's name. Cheap (renames); the bytes
    /// go with [`FlushDir::purge_trash`], which a flusher runs once the new epoch is
    /// reported. The epochs retired.
    pub fn retire(&self, keep: usize) -> Result<Vec<u64>> {
        let epochs = self.epochs()?;
        let drop = epochs.len().saturating_sub(keep.max(1));
        for &epoch in &epochs[..drop] {
            let from = self.epoch_dir(epoch);
            let to = self.root.join(format!(
                "{TRASH_PREFIX}{}-{}",
                epoch_dir_name(epoch),
                unique_suffix()
            ));
            fs::rename(&from, &to).map_err(io_at(&from))?;
        }
        if drop > 0 {
            fsync_dir(&self.root)?;
        }
        Ok(epochs[..drop].to_vec())
    }

    /// Deletes retired epochs (`trash-…`). Not while another process stages into or purges
    /// this directory: one flusher at a time.
    pub fn purge_trash(&self) -> Result<()> {
        self.remove_leftovers(&[TRASH_PREFIX])
    }

    /// Removes every staging or trash directory (of eckpt's naming) of the kinds `prefixes`
    /// name.
    fn remove_leftovers(&self, prefixes: &[&str]) -> Result<()> {
        for name in self.names()? {
            let path = self.root.join(&name);
            if prefixes.iter().any(|p| is_leftover_name(&name, p)) && is_real_dir(&path) {
                match fs::remove_dir_all(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_at(&path)(e)),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::FlushedJob;
    use crate::manifest::{RankEntry, MANIFEST_FILE};
    use crate::mark::MARK_FILE;

    /// Epoch `epoch` as an eckpt of format version 1 published it (its manifest; no ranks'
    /// files are needed to list it).
    fn old_epoch(root: &Path, epoch: u64) {
        let job = FlushedJob {
            id: None,
            command: None,
            nodes: 3,
            k: 2,
            m: 1,
        };
        let ranks = vec![RankEntry {
            rank: 0,
            items: Vec::new(),
        }];
        let manifest = Manifest::new(epoch, 1, 16, job, ranks).unwrap().into_version_1();
        let dir = root.join(epoch_dir_name(epoch));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(MANIFEST_FILE), manifest.to_json()).unwrap();
    }

    #[test]
    fn an_older_eckpts_flush_directory_is_taken_and_anything_more_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        old_epoch(tmp.path(), 3);
        old_epoch(tmp.path(), 4);
        let dir = FlushDir::new(tmp.path());
        dir.claim().unwrap();
        assert!(tmp.path().join(MARK_FILE).is_file());
        assert_eq!(dir.epochs().unwrap(), vec![3, 4]);

        let tmp = tempfile::tempdir().unwrap();
        old_epoch(tmp.path(), 3);
        fs::create_dir(tmp.path().join("epoch-9")).unwrap();
        let e = FlushDir::new(tmp.path()).claim().unwrap_err().to_string();
        assert!(e.contains("not an eckpt flush directory (it has epoch-"), "{e}");
        assert!(!tmp.path().join(MARK_FILE).exists());
    }

    #[test]
    fn leftovers_are_recognised_by_their_complete_names() {
        let suffix = unique_suffix();
        assert!(is_leftover_name(&format!("tmp-3-{suffix}"), TMP_PREFIX));
        assert!(is_leftover_name(&format!("trash-epoch-3-{suffix}"), TRASH_PREFIX));
        for name in [
            "tmp-results",
            "tmp-3",
            "tmp-3-1-2",
            "tmp-03-1-2-3",
            "tmp-3-1-2-3-4",
            "tmp--1-2-3",
        ] {
            assert!(!is_leftover_name(name, TMP_PREFIX), "{name}");
        }
        for name in [
            "trash-can",
            "trash-3-1-2-3",
            "trash-epoch-3-1-2",
            "trash-epoch-x-1-2-3",
        ] {
            assert!(!is_leftover_name(name, TRASH_PREFIX), "{name}");
        }
    }
}
