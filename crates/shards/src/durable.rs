//! Crash-safe file publication: write under a temporary name, fsync, rename, fsync the
//! directory. A reader sees the old state or the complete new one, never a torn file.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

/// The temporary name a file is written under before [`publish`] renames it into place.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".eckpt-tmp");
    path.with_file_name(name)
}

/// fsyncs `temp`, renames it to `path` and fsyncs the directory.
pub fn publish(temp: &Path, path: &Path) -> io::Result<()> {
    File::open(temp)?.sync_all()?;
    fs::rename(temp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes `bytes` to `path` atomically (temp, fsync, rename, fsync directory).
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = temp_path(path);
    fs::write(&temp, bytes)?;
    publish(&temp, path)
}

/// fsyncs a directory so a rename inside it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)?.sync_all()
}
