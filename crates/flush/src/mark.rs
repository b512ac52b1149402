//! The mark a flush directory carries: a file eckpt writes into a directory when it takes it
//! as a flush directory — a new one, an empty one, or one an older eckpt filled with nothing
//! but published epochs. A non-empty directory without it is refused, so a user's directory
//! given by mistake is never housekept; inside a marked one, eckpt still treats as its own
//! only entries of its own complete naming (and, for epochs, a valid manifest).

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{io_at, FlushError, Result};

/// The mark's file name in the flush directory.
pub const MARK_FILE: &str = "eckpt-flush-dir";

/// The mark's whole contents.
const MARK_TEXT: &str =
    "eckpt flush directory, format 1: eckpt writes epoch-<E>/, tmp-<E>-…/ and trash-epoch-<E>-…/ here\n";

/// Whether `root` carries the mark; a file of that name that is not eckpt's mark (a link,
/// other contents) is refused rather than taken or replaced.
pub(crate) fn is_marked(root: &Path) -> Result<bool> {
    let path = root.join(MARK_FILE);
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(not_the_mark(&path, &e.to_string())),
    };
    let regular = file.metadata().map_err(io_at(&path))?.is_file();
    let mut text = String::new();
    if !regular
        || (&mut file)
            .take(MARK_TEXT.len() as u64 + 1)
            .read_to_string(&mut text)
            .is_err()
        || text != MARK_TEXT
    {
        return Err(not_the_mark(&path, "its contents are not eckpt's"));
    }
    Ok(true)
}

fn not_the_mark(path: &Path, why: &str) -> FlushError {
    FlushError::Invalid(format!(
        "{} is not eckpt's mark of a flush directory ({why}): refusing to use the directory",
        path.display()
    ))
}

/// Writes the mark into `root` (never over an existing file) and makes it durable.
pub(crate) fn mark(root: &Path) -> Result<()> {
    let path = root.join(MARK_FILE);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(io_at(&path))?;
    file.write_all(MARK_TEXT.as_bytes()).map_err(io_at(&path))?;
    file.sync_all().map_err(io_at(&path))?;
    eckpt_durable::sync_dir(root).map_err(io_at(root))
}

/// Up to `n` entry names of `root` other than the mark (lossy: for a message).
pub(crate) fn other_entries(root: &Path, n: usize) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(root).map_err(io_at(root))? {
        let name = entry.map_err(io_at(root))?.file_name();
        if name != MARK_FILE {
            names.push(name.to_string_lossy().into_owned());
            if names.len() == n {
                break;
            }
        }
    }
    Ok(names)
}
