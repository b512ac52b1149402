//! Durability, implemented once for every crate of eckpt.
//!
//! - [`publish`] and [`write_atomic`]: crash-safe publication of a file. It is written under
//!   a temporary name unique to this process and call ([`temp_path`]), fsynced, renamed
//!   into place, and the directory is fsynced: after a crash at any instant a reader finds
//!   the old file or the complete new one, never a torn one, and two processes publishing
//!   the same name never write into each other's temporary file.
//! - [`sealed`]: the one self-checksummed JSON format (the journal, `parity.json`, blob
//!   plans): a flipped bit is refused as damage instead of being served as a decision.
//!
//! Other renames in eckpt (rollback moves, retirement of old epochs, trash) need no fsync
//! of their own: each says at its site why losing it in a crash is harmless.

#![warn(missing_docs)]

pub mod sealed;

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a temporary file's name contains, so that a listing can tell it from real files
/// (and a test can check none was left behind).
pub const TEMP_MARK: &str = ".eckpt-tmp-";

/// The temporary name `path` is written under before [`publish`] renames it into place:
/// hidden, in the same directory (a rename never crosses file systems), and unique to
/// this process and this call.
pub fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    path.with_file_name(format!(".{name}{TEMP_MARK}{}-{n}", std::process::id()))
}

/// Creates the temporary file for `path` ([`temp_path`]) exclusively: a name that exists
/// already — a symbolic link planted in a directory others can write, say — is never
/// opened, let alone written through.
pub fn create_temp(path: &Path) -> io::Result<(PathBuf, File)> {
    let temp = temp_path(path);
    let file = fs::OpenOptions::new().write(true).create_new(true).open(&temp)?;
    Ok((temp, file))
}

/// Makes the complete file `temp` the file `path`, durably: fsyncs `temp`, renames it and
/// fsyncs the directory. On failure `temp` is removed (it is this caller's own).
pub fn publish(temp: &Path, path: &Path) -> io::Result<()> {
    let done = File::open(temp)
        .and_then(|f| f.sync_all())
        .and_then(|()| rename_durably(temp, path));
    if done.is_err() {
        let _ = fs::remove_file(temp);
    }
    done
}

/// [`publish`] for a `temp` its writer has already fsynced (it wrote through the open file
/// and synced it before closing): renames it and fsyncs the directory.
pub fn rename_durably(temp: &Path, path: &Path) -> io::Result<()> {
    fs::rename(temp, path)?;
    sync_dir(parent(path))
}

/// Writes `bytes` to `path` crash-safely (see [`publish`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (temp, mut file) = create_temp(path)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    rename_durably(&temp, path).inspect_err(|_| {
        let _ = fs::remove_file(&temp);
    })
}

/// fsyncs directory `dir`, so that the names created, renamed or removed in it survive a
/// crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory a path's name lives in (`.` for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_publication_replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new contents").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new contents");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn temporary_names_are_unique_hidden_and_beside_the_file() {
        let path = Path::new("/d/parity.json");
        let (a, b) = (temp_path(path), temp_path(path));
        assert_ne!(a, b);
        assert_eq!(a.parent(), path.parent());
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with(".parity.json") && name.contains(TEMP_MARK),
            "{name}"
        );
    }

    #[test]
    fn a_failed_publication_keeps_the_old_file_and_removes_its_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        write_atomic(&path, b"committed").unwrap();
        let temp = temp_path(&path);
        fs::write(&temp, b"x").unwrap();
        // Renaming a file over a non-empty directory fails.
        let blocker = dir.path().join("blocked");
        fs::create_dir_all(blocker.join("inside")).unwrap();
        assert!(publish(&temp, &blocker).is_err());
        assert!(!temp.exists());
        assert_eq!(fs::read(&path).unwrap(), b"committed");
    }

    #[test]
    fn a_planted_link_at_the_temporary_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        fs::write(&target, b"untouched").unwrap();
        let path = dir.path().join("f");
        let next = temp_path(&path);
        let n: u64 = next
            .to_str()
            .unwrap()
            .rsplit('-')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        // The names the next calls will use (other tests of this process take some).
        let base = next
            .to_str()
            .unwrap()
            .trim_end_matches(&n.to_string())
            .to_string();
        for later in n + 1..n + 50 {
            std::os::unix::fs::symlink(&target, format!("{base}{later}")).unwrap();
        }
        assert!(create_temp(&path).is_err());
        assert_eq!(fs::read(&target).unwrap(), b"untouched");
    }

    #[test]
    fn a_bare_name_is_published_in_the_current_directory() {
        assert_eq!(parent(Path::new("f")), Path::new("."));
        assert_eq!(parent(Path::new("/a/f")), Path::new("/a"));
    }
}
