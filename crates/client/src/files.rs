//! Files and directories a rank registers, and seed 003's rule that what files saw must match
//! the memory a restart restores:
//! - `Snapshot` files are stored in the checkpoint and put back at restart;
//! - `Append` files (logs, results) are cut back to their length at the checkpoint, so lines
//!   written after it are not duplicated when the rank runs that part again;
//! - `Input` files must be unchanged at restart (length and xxh3), else restart refuses;
//! - in a protected directory, files created after the checkpoint are moved aside into
//!   `.eckpt-rollback/epoch-E/` — never deleted.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use eckpt_store::{EpochWriter, Store};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::Error;

/// Where files moved aside at restart go, inside each protected directory.
pub const ROLLBACK_DIR: &str = ".eckpt-rollback";

/// How a protected file is treated at checkpoint and restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileMode {
    /// Only ever appended to: restart truncates it to the checkpointed length.
    Append,
    /// Rewritten freely: its content is checkpointed and restored.
    Snapshot,
    /// Read only: restart verifies it is unchanged.
    Input,
}

/// What an epoch recorded about one protected file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FileRecord {
    path: PathBuf,
    mode: FileMode,
    len: u64,
    /// xxh3 of an `Input` file's content.
    xxh3: Option<u64>,
}

/// What an epoch recorded about one protected directory: the files it held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DirRecord {
    path: PathBuf,
    entries: BTreeSet<PathBuf>,
}

/// The store item holding a snapshot file's content.
fn item_name(path: &Path) -> String {
    format!("file{}", path.display())
}

/// Absolute form of `path` (the rank may change directory between checkpoint and restart).
pub(crate) fn absolute(path: &Path) -> Result<PathBuf, Error> {
    std::path::absolute(path).map_err(|e| Error::io(path, e))
}

/// Records every protected file (storing snapshot contents in `writer`) and directory.
pub(crate) fn checkpoint(
    files: &[(PathBuf, FileMode)],
    dirs: &[PathBuf],
    writer: &mut EpochWriter,
) -> Result<(Vec<FileRecord>, Vec<DirRecord>), Error> {
    let mut records = Vec::with_capacity(files.len());
    for (path, mode) in files {
        let record = match mode {
            FileMode::Snapshot => {
                let content = fs::read(path).map_err(|e| Error::io(path, e))?;
                writer.put_full(&item_name(path), &content)?;
                FileRecord {
                    path: path.clone(),
                    mode: *mode,
                    len: content.len() as u64,
                    xxh3: None,
                }
            }
            FileMode::Append => {
                let len = fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
                FileRecord {
                    path: path.clone(),
                    mode: *mode,
                    len,
                    xxh3: None,
                }
            }
            FileMode::Input => {
                let (len, hash) = hash_file(path)?;
                FileRecord {
                    path: path.clone(),
                    mode: *mode,
                    len,
                    xxh3: Some(hash),
                }
            }
        };
        records.push(record);
    }
    let dirs = dirs
        .iter()
        .map(|d| {
            Ok(DirRecord {
                path: d.clone(),
                entries: list_files(d)?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((records, dirs))
}

/// Fails, changing nothing, if a file protected now disagrees with the checkpoint in a way
/// restart cannot mend: an input file that changed, an append file now shorter than
/// checkpointed, or a file the checkpoint does not know.
pub(crate) fn check_restorable(files: &[(PathBuf, FileMode)], records: &[FileRecord]) -> Result<(), Error> {
    for (path, mode) in files {
        let record = records
            .iter()
            .find(|r| &r.path == path && r.mode == *mode)
            .ok_or_else(|| {
                Error::Mismatch(format!("{} ({mode:?}) is not in the checkpoint", path.display()))
            })?;
        match mode {
            FileMode::Input => {
                let (len, hash) = hash_file(path)?;
                if len != record.len || Some(hash) != record.xxh3 {
                    return Err(Error::Mismatch(format!(
                        "input file {} changed since the checkpoint",
                        path.display()
                    )));
                }
            }
            FileMode::Append => {
                let len = fs::metadata(path).map_err(|e| Error::io(path, e))?.len();
                if len < record.len {
                    return Err(Error::Mismatch(format!(
                        "append file {} has {len} bytes, fewer than the {} checkpointed",
                        path.display(),
                        record.len
                    )));
                }
            }
            FileMode::Snapshot => {}
        }
    }
    Ok(())
}

/// Puts files back as `epoch` saw them: snapshot contents restored, append files truncated,
/// files created since in protected directories moved aside.
pub(crate) fn restore(
    store: &Store,
    rank: u32,
    epoch: u64,
    files: &[(PathBuf, FileMode)],
    records: &[FileRecord],
    dirs: &[DirRecord],
) -> Result<(), Error> {
    for record in records
        .iter()
        .filter(|r| files.iter().any(|(p, m)| p == &r.path && *m == r.mode))
    {
        let path = &record.path;
        match record.mode {
            FileMode::Snapshot => {
                let mut content = vec![0u8; record.len as usize];
                store.read_item_into(rank, epoch, &item_name(path), &mut content)?;
                let temp = PathBuf::from(format!("{}.eckpt-restore", path.display()));
                fs::write(&temp, &content).map_err(|e| Error::io(&temp, e))?;
                fs::File::open(&temp)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| Error::io(&temp, e))?;
                fs::rename(&temp, path).map_err(|e| Error::io(path, e))?;
            }
            FileMode::Append => {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| Error::io(path, e))?;
                file.set_len(record.len)
                    .and_then(|_| file.sync_all())
                    .map_err(|e| Error::io(path, e))?;
            }
            FileMode::Input => {}
        }
    }
    for dir in dirs {
        let now = list_files(&dir.path)?;
        for extra in now.difference(&dir.entries) {
            move_aside(&dir.path, extra, epoch)?;
        }
    }
    Ok(())
}

/// Moves `dir/relative` to `dir/.eckpt-rollback/epoch-E/relative` (suffixing `.N` if taken).
fn move_aside(dir: &Path, relative: &Path, epoch: u64) -> Result<(), Error> {
    let from = dir.join(relative);
    let base = dir
        .join(ROLLBACK_DIR)
        .join(format!("epoch-{epoch}"))
        .join(relative);
    let mut to = base.clone();
    let mut n = 1;
    while to.exists() {
        to = PathBuf::from(format!("{}.{n}", base.display()));
        n += 1;
    }
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    fs::rename(&from, &to).map_err(|e| Error::io(&from, e))
}

/// Relative paths of every non-directory entry under `dir`, skipping the rollback folder.
fn list_files(dir: &Path) -> Result<BTreeSet<PathBuf>, Error> {
    let mut out = BTreeSet::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let here = dir.join(&relative);
        for entry in fs::read_dir(&here).map_err(|e| Error::io(&here, e))? {
            let entry = entry.map_err(|e| Error::io(&here, e))?;
            let name = relative.join(entry.file_name());
            if name.as_os_str() == ROLLBACK_DIR {
                continue;
            }
            let kind = entry.file_type().map_err(|e| Error::io(&entry.path(), e))?;
            if kind.is_dir() {
                pending.push(name);
            } else {
                out.insert(name);
            }
        }
    }
    Ok(out)
}

/// Length and xxh3 of a file's content, streamed.
fn hash_file(path: &Path) -> Result<(u64, u64), Error> {
    let mut file = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Xxh3::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            return Ok((len, hasher.digest()));
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
}
