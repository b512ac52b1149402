//! Files and directories a rank registers, and the rule that what files saw must match the
//! memory a restart restores (I/O-view consistency):
//! - `Snapshot` files are stored in the checkpoint and put back at restart;
//! - `Append` files (logs, results) are cut back to their length at the checkpoint, so lines
//!   written after it are not duplicated when the rank runs that part again;
//! - `Input` files must be unchanged at restart (length and xxh3), else restart refuses;
//! - in a protected directory, files created after the checkpoint are moved aside into
//!   `.eckpt-rollback/epoch-E/` — never deleted.
//!
//! Checkpoints know a file or directory by its **key**: a relative path as given (without
//! `.` components), so a job restarted from another working directory with the same layout
//! finds its files; an absolute path as itself.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use eckpt_store::{EpochWriter, Store};
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::stored_path::StoredPath;
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

/// A protected file or directory: the key checkpoints know it by, and where it is for I/O
/// (a relative key resolved against the working directory at protect time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Protected {
    pub(crate) key: PathBuf,
    pub(crate) path: PathBuf,
}

impl Protected {
    /// Keys `path` and resolves it against the current working directory.
    pub(crate) fn new(path: &Path) -> Result<Protected, Error> {
        if path.as_os_str().is_empty() {
            return Err(Error::Invalid("an empty path names no file".into()));
        }
        let key = path.components().filter(|c| *c != Component::CurDir).collect();
        let path = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
        Ok(Protected { key, path })
    }
}

/// What an epoch recorded about one protected file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FileRecord {
    /// The file's key (see [`Protected`]).
    path: StoredPath,
    mode: FileMode,
    len: u64,
    /// xxh3 of an `Input` file's content.
    xxh3: Option<u64>,
}

/// What an epoch recorded about one protected directory: the files it held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct DirRecord {
    /// The directory's key (see [`Protected`]).
    path: StoredPath,
    entries: BTreeSet<StoredPath>,
}

/// The store item holding a snapshot file's content: `file/abs/path` for an absolute key,
/// `file:rel/path` for a relative one (the two never collide).
fn item_name(key: &Path) -> String {
    let text = StoredPath::text(key);
    if key.is_absolute() {
        format!("file{text}")
    } else {
        format!("file:{text}")
    }
}

/// Refuses to protect what restart could not put back as a file of that mode: a directory
/// or another non-file; a symbolic link as an append or snapshot file (restart would write
/// through it into whatever it points to then: protect the target instead). An input file may
/// be a link (it is only read); append and snapshot files may not exist yet.
pub(crate) fn check_protectable(file: &Protected, mode: FileMode) -> Result<(), Error> {
    let path = &file.path;
    match mode {
        FileMode::Input => match fs::metadata(path) {
            Ok(meta) if meta.is_file() => Ok(()),
            Ok(_) => Err(Error::Invalid(format!(
                "{} is not a regular file (protect_dir protects a directory)",
                path.display()
            ))),
            Err(e) => Err(Error::io(path, e)),
        },
        FileMode::Append | FileMode::Snapshot => {
            regular_file_len(path).map_err(|e| match e {
                Error::Mismatch(why) => Error::Invalid(match fs::read_link(path) {
                    Ok(target) => format!("{why}: protect the file it points to ({})", target.display()),
                    Err(_) => why,
                }),
                other => other,
            })?;
            Ok(())
        }
    }
}

/// Records every protected file (storing snapshot contents in `writer`) and directory.
pub(crate) fn checkpoint(
    files: &[(Protected, FileMode)],
    dirs: &[Protected],
    writer: &mut EpochWriter,
) -> Result<(Vec<FileRecord>, Vec<DirRecord>), Error> {
    let mut records = Vec::with_capacity(files.len());
    for (Protected { key, path }, mode) in files {
        let record = match mode {
            FileMode::Snapshot => {
                let content = fs::read(path).map_err(|e| Error::io(path, e))?;
                writer.put_full(&item_name(key), &content)?;
                FileRecord {
                    path: StoredPath(key.clone()),
                    mode: *mode,
                    len: content.len() as u64,
                    xxh3: None,
                }
            }
            FileMode::Append => {
                let len = regular_file_len(path)?
                    .ok_or_else(|| Error::io(path, std::io::ErrorKind::NotFound.into()))?;
                FileRecord {
                    path: StoredPath(key.clone()),
                    mode: *mode,
                    len,
                    xxh3: None,
                }
            }
            FileMode::Input => {
                let (len, hash) = hash_file(path)?;
                FileRecord {
                    path: StoredPath(key.clone()),
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
                path: StoredPath(d.key.clone()),
                entries: list_files(&d.path)?,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((records, dirs))
}

/// Fails, changing nothing, if a file protected now disagrees with the checkpoint in a way
/// restart cannot mend: an input file that changed, an append file now shorter than
/// checkpointed, missing, or no longer a regular file, a snapshot file that became a link or
/// a directory (restart writes no file through a link), a protected directory that is gone,
/// or a file the checkpoint does not know.
pub(crate) fn check_restorable(
    files: &[(Protected, FileMode)],
    records: &[FileRecord],
    protected_dirs: &[Protected],
    dirs: &[DirRecord],
) -> Result<(), Error> {
    for (Protected { key, path }, mode) in files {
        let record = records
            .iter()
            .find(|r| &r.path.0 == key && r.mode == *mode)
            .ok_or_else(|| {
                Error::Mismatch(format!("{} ({mode:?}) is not in the checkpoint", key.display()))
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
                let len = regular_file_len(path)?.ok_or_else(|| {
                    Error::Mismatch(format!(
                        "append file {} is gone; the checkpoint had {} bytes of it",
                        path.display(),
                        record.len
                    ))
                })?;
                if len < record.len {
                    return Err(Error::Mismatch(format!(
                        "append file {} has {len} bytes, fewer than the {} checkpointed",
                        path.display(),
                        record.len
                    )));
                }
            }
            FileMode::Snapshot => {
                regular_file_len(path)?;
                let parent = path.parent().unwrap_or(Path::new("/"));
                if !parent.is_dir() {
                    return Err(Error::Mismatch(format!(
                        "snapshot file {} cannot be restored: {} is not a directory",
                        path.display(),
                        parent.display()
                    )));
                }
            }
        }
    }
    for record in dirs {
        let dir = dir_path(protected_dirs, record)?;
        if !dir.is_dir() {
            return Err(Error::Mismatch(format!(
                "protected directory {} is gone or no longer a directory",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// The length of the regular file at `path`, `None` if there is none. A symbolic link, a
/// directory or any other kind of file is a mismatch: what restart writes (an append file cut
/// back, a snapshot restored) must be the file the checkpoint saw, never a link's target.
pub(crate) fn regular_file_len(path: &Path) -> Result<Option<u64>, Error> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(Some(meta.len()));
    }
    let what = if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    };
    Err(Error::Mismatch(format!(
        "{} is {what}; eckpt only writes back the regular file it protected",
        path.display()
    )))
}

/// Where a directory the checkpoint recorded is now: the protected one with its key, else its
/// key resolved against the current working directory.
fn dir_path(protected_dirs: &[Protected], record: &DirRecord) -> Result<PathBuf, Error> {
    match protected_dirs.iter().find(|d| d.key == record.path.0) {
        Some(d) => Ok(d.path.clone()),
        None => Ok(Protected::new(&record.path.0)?.path),
    }
}

/// Puts files back as `epoch` saw them: snapshot contents restored, append files truncated,
/// files created since in protected directories moved aside (a directory the rank does not
/// protect now is found by resolving its key against the current working directory).
pub(crate) fn restore(
    store: &Store,
    rank: u32,
    epoch: u64,
    files: &[(Protected, FileMode)],
    records: &[FileRecord],
    protected_dirs: &[Protected],
    dirs: &[DirRecord],
) -> Result<(), Error> {
    for (Protected { path, .. }, record) in files.iter().filter_map(|(p, m)| {
        records
            .iter()
            .find(|r| r.path.0 == p.key && r.mode == *m)
            .map(|r| (p, r))
    }) {
        match record.mode {
            FileMode::Snapshot => {
                let mut content = vec![0u8; record.len as usize];
                store.read_item_into(rank, epoch, &item_name(&record.path.0), &mut content)?;
                eckpt_durable::write_atomic(path, &content).map_err(|e| Error::io(path, e))?;
            }
            FileMode::Append => cut(path, record.len)?,
            FileMode::Input => {}
        }
    }
    for record in dirs {
        let dir = dir_path(protected_dirs, record)?;
        let now = list_files(&dir)?;
        for extra in now.difference(&record.entries) {
            move_aside(&dir, &extra.0, epoch)?;
        }
    }
    Ok(())
}

/// Cuts an append file back to `len` bytes, durably. A symbolic link at `path` is refused
/// (`O_NOFOLLOW`), not followed: a file swapped for a link to another must not be cut.
pub(crate) fn cut(path: &Path, len: u64) -> Result<(), Error> {
    let file = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    file.set_len(len)
        .and_then(|_| file.sync_all())
        .map_err(|e| Error::io(path, e))
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
    // Not fsynced: this moves a file of the program's, not checkpoint data; a crash that
    // loses the move leaves the file where it was, and the restore run again moves it.
    fs::rename(&from, &to).map_err(|e| Error::io(&from, e))
}

/// Relative paths of every non-directory entry under `dir`, skipping the rollback folder.
fn list_files(dir: &Path) -> Result<BTreeSet<StoredPath>, Error> {
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
                out.insert(StoredPath(name));
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
