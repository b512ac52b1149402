//! The flush directory as a whole: which epochs are published, opening one, starting a new
//! one (clearing what interrupted flushes left), and retention.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{io_at, FlushError, Result};
use crate::read::FlushedEpoch;
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

fn parse_epoch_dir(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(EPOCH_PREFIX)?;
    let epoch: u64 = digits.parse().ok()?;
    (epoch > 0 && epoch.to_string() == digits).then_some(epoch)
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

/// A name no other staging or trash directory of this or another process uses.
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

    /// Published epochs, ascending (complete by construction; [`FlushDir::open`] checks).
    pub fn epochs(&self) -> Result<Vec<u64>> {
        let mut epochs: Vec<u64> = self.names()?.iter().filter_map(|n| parse_epoch_dir(n)).collect();
        epochs.sort_unstable();
        Ok(epochs)
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

    /// Starts flushing `epoch`: creates the directory if need be, removes what interrupted
    /// flushes and deletions left (`tmp-…`, `trash-…`), and a staging directory.
    pub fn stage(&self, epoch: u64) -> Result<Staging> {
        if self.epoch_dir(epoch).exists() {
            return Err(FlushError::Invalid(format!(
                "epoch {epoch} is already flushed in {}",
                self.root.display()
            )));
        }
        if !self.root.is_dir() {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.root)
                .map_err(io_at(&self.root))?;
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

    /// Removes every directory whose name starts with one of `prefixes`.
    fn remove_leftovers(&self, prefixes: &[&str]) -> Result<()> {
        for name in self.names()? {
            if prefixes.iter().any(|p| name.starts_with(p)) {
                let path = self.root.join(&name);
                match fs::remove_dir_all(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_at(&path)(e)),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}
