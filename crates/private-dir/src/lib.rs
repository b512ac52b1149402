//! Directories only their owner can write.
//!
//! Checkpoints hold a job's memory, and eckpt keeps them in places other users can write
//! to: `/dev/shm`, `/tmp`, a scratch file system. A directory there that someone else
//! created first (or a symlink they planted) would let them read the job's state, move a
//! checkpoint away (the job silently starts fresh) or plant one (the job restores their
//! bytes into its memory). So every directory eckpt creates or adopts in such a place goes
//! through [`ensure`]:
//!
//! - a missing directory is created with mode 0700 (missing parents too, 0700);
//! - an existing one is opened with `O_NOFOLLOW | O_DIRECTORY` and checked with `fstat` on
//!   that descriptor (no window between the check and what is checked): it must be a
//!   directory, not a symlink, owned by this process's effective user, and not writable by
//!   group or others (someone else could have put files in it). Read or search bits for
//!   group and others are taken away (`fchmod` 0700): nobody else could have written in it,
//!   so what it holds is the owner's.
//!
//! - every directory above it must be one only root or this user can change: owned by one
//!   of them, and not writable by group or others unless sticky (OpenSSH's `StrictModes`).
//!   Whoever may write into a parent may rename the checked directory away and put one of
//!   their own in its place, after the check, and the daemon would go on writing the job's
//!   epochs into theirs. Both the path as given (symbolic links included, each owned by
//!   root or this user) and the path it resolves to are walked ([`check_ancestors`]).
//!
//! Anything else is refused with an error that names the directory and what is wrong.
//! After `ensure` succeeds, paths below the directory are safe to use by name: in a
//! sticky directory such as `/tmp` only its owner may rename or delete it, and nobody else
//! may create entries inside it.
//!
//! [`ensure_untouched`] is `ensure` for a directory that only holds directories eckpt
//! creates owner-only (an agent's `--store`): an existing one is checked the same way but
//! never changed, its mode being its owner's choice.

#![warn(missing_docs)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Why a directory cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    /// It exists but is not a directory this user alone controls.
    #[error("{path}: {why}; refusing to keep checkpoints there (remove it, or choose another directory)")]
    Untrusted {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// Creating, opening or changing it failed.
    #[error("{path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl PrivateDirError {
    /// What is wrong, without the path (for a line that names it already).
    pub fn why(&self) -> String {
        match self {
            PrivateDirError::Untrusted { why, .. } => why.clone(),
            PrivateDirError::Io { source, .. } => source.to_string(),
        }
    }
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> PrivateDirError + '_ {
    move |source| PrivateDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn untrusted(path: &Path, why: String) -> PrivateDirError {
    PrivateDirError::Untrusted {
        path: path.to_path_buf(),
        why,
    }
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Creates `path` owner-only (and any missing parents), or adopts an existing directory
/// after checking it (see the crate documentation). Returns whether it was created.
pub fn ensure(path: &Path) -> Result<bool, PrivateDirError> {
    ensure_with(path, Tighten::Yes)
}

/// [`ensure`] that never changes an existing directory: it is refused when others could
/// write into it, and group and others keep whatever read and search bits its owner gave
/// it. For a directory whose entries are all directories eckpt creates owner-only. Returns
/// whether it was created.
pub fn ensure_untouched(path: &Path) -> Result<bool, PrivateDirError> {
    ensure_with(path, Tighten::No)
}

/// Whether an adopted directory readable by group or others is made owner-only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tighten {
    Yes,
    No,
}

fn ensure_with(path: &Path, tighten: Tighten) -> Result<bool, PrivateDirError> {
    // Before anything is created below them.
    check_ancestors(path, euid())?;
    let created = match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(path)
                .map_err(io_at(path))?;
            true
        }
        Err(e) => return Err(io_at(path)(e)),
    };
    check_dir(path, tighten)?;
    Ok(created)
}

/// Checks an existing directory as [`ensure`] does, taking group and others' read and
/// search bits away.
pub fn check(path: &Path) -> Result<(), PrivateDirError> {
    check_ancestors(path, euid())?;
    check_dir(path, Tighten::Yes)
}

fn check_dir(path: &Path, tighten: Tighten) -> Result<(), PrivateDirError> {
    let fd = open_dir(path)?;
    let result = check_fd(path, fd, tighten);
    // SAFETY: `fd` is ours and open.
    unsafe { libc::close(fd) };
    result
}

/// Checks every directory above `path` (those that exist): owned by root or `owner`, and
/// not writable by group or others unless sticky; a symbolic link on the way must be
/// owned by root or `owner` too (only its owner may replace it in a sticky directory).
/// Walks the path as given and the path its deepest existing ancestor resolves to, so a
/// link to a place others control is refused as that place would be. Changes nothing.
pub fn check_ancestors(path: &Path, owner: u32) -> Result<(), PrivateDirError> {
    let absolute = std::path::absolute(path).map_err(io_at(path))?;
    let Some(parent) = absolute.parent() else {
        return Ok(());
    };
    check_chain(path, parent, owner)?;
    let Some(existing) = parent.ancestors().find(|a| std::fs::symlink_metadata(a).is_ok()) else {
        return Ok(());
    };
    let resolved = std::fs::canonicalize(existing).map_err(io_at(existing))?;
    if resolved != existing {
        check_chain(path, &resolved, owner)?;
    }
    Ok(())
}

/// [`check_ancestors`] of one chain: `dir` and every directory above it, as they are
/// named (not followed).
fn check_chain(path: &Path, dir: &Path, owner: u32) -> Result<(), PrivateDirError> {
    use std::os::unix::fs::MetadataExt;
    for ancestor in dir.ancestors() {
        let meta = match std::fs::symlink_metadata(ancestor) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_at(ancestor)(e)),
        };
        if meta.uid() != 0 && meta.uid() != owner {
            return Err(untrusted(
                path,
                format!(
                    "{} above it is owned by user {}, not by root or user {owner} (its owner could swap what is below it)",
                    ancestor.display(),
                    meta.uid()
                ),
            ));
        }
        let mode = meta.mode() & 0o7777;
        if !meta.file_type().is_symlink() && mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(untrusted(
                path,
                format!(
                    "others can write into {} above it (mode {mode:04o}, not sticky: they could swap what is below it)",
                    ancestor.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Who owns a directory [`check_removable`] found fit to delete from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

/// Checks a directory before deleting from it, in a place others may write to (`/tmp`):
/// opened with `O_NOFOLLOW | O_DIRECTORY` and checked with `fstat` on that descriptor, it
/// must be a directory, not a symbolic link, not writable by group or others, and owned by
/// `owner` — by default this user; root (cleaning up after another user's job) may pass
/// the job's user, or `None` to take the directory's owner, and then deletes [`as_owner`].
/// The directories above it are checked as [`check_ancestors`] does, for that owner.
/// Changes nothing. Returns the owner.
pub fn check_removable(path: &Path, owner: Option<u32>) -> Result<Owner, PrivateDirError> {
    let fd = open_dir(path)?;
    let result = stat_fd(path, fd).and_then(|st| {
        let me = euid();
        let wanted = owner.or((me != 0).then_some(me));
        if let Some(uid) = wanted.filter(|&uid| uid != st.st_uid) {
            return Err(untrusted(
                path,
                format!("it is owned by user {}, not by user {uid}", st.st_uid),
            ));
        }
        let mode = st.st_mode & 0o7777;
        if mode & 0o022 != 0 {
            return Err(untrusted(
                path,
                format!("others can write into it (mode {mode:04o})"),
            ));
        }
        check_ancestors(path, st.st_uid)?;
        Ok(Owner {
            uid: st.st_uid,
            gid: st.st_gid,
        })
    });
    // SAFETY: `fd` is ours and open.
    unsafe { libc::close(fd) };
    result
}

/// Runs `f` with `owner`'s file-system identity when this process is root (`setfsuid` and
/// `setfsgid`, on this thread only, restored after): what root deletes in a directory of a
/// user's is then only what that user could delete, even if the user swapped a checked
/// directory for a symbolic link meanwhile. Anyone else just runs `f`. `f` must do its
/// file-system work on this thread.
pub fn as_owner<T>(owner: Owner, f: impl FnOnce() -> T) -> T {
    if euid() != 0 || owner.uid == 0 {
        return f();
    }
    // SAFETY: setfsuid/setfsgid change only this thread's file-system identity; root may
    // set any and set them back (CAP_SETUID and CAP_SETGID are kept).
    let (uid, gid) = unsafe {
        let gid = libc::setfsgid(owner.gid);
        (libc::setfsuid(owner.uid), gid)
    };
    let result = f();
    // SAFETY: as above, back to what they were.
    unsafe {
        libc::setfsuid(uid as u32);
        libc::setfsgid(gid as u32);
    }
    result
}

/// Opens a directory without following a symbolic link at its last component.
fn open_dir(path: &Path) -> Result<libc::c_int, PrivateDirError> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| untrusted(path, "the path holds a NUL byte".into()))?;
    // SAFETY: a valid NUL-terminated path; the caller closes the descriptor.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        // With O_DIRECTORY a symlink may fail as ENOTDIR rather than ELOOP: look at it.
        let symlink = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        return Err(match e.raw_os_error() {
            _ if symlink => untrusted(path, "it is a symbolic link".into()),
            Some(libc::ENOTDIR) => untrusted(path, "it is not a directory".into()),
            _ => io_at(path)(e),
        });
    }
    Ok(fd)
}

fn stat_fd(path: &Path, fd: libc::c_int) -> Result<libc::stat, PrivateDirError> {
    // SAFETY: an all-zero `stat` is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is writable.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io_at(path)(std::io::Error::last_os_error()));
    }
    Ok(st)
}

fn check_fd(path: &Path, fd: libc::c_int, tighten: Tighten) -> Result<(), PrivateDirError> {
    let st = stat_fd(path, fd)?;
    let me = euid();
    if st.st_uid != me {
        return Err(untrusted(
            path,
            format!("it is owned by user {}, not by this user ({me})", st.st_uid),
        ));
    }
    let mode = st.st_mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(untrusted(
            path,
            format!("others can write into it (mode {mode:04o}; it must be 0700)"),
        ));
    }
    if mode & 0o077 != 0 && tighten == Tighten::Yes {
        // SAFETY: `fd` is open; fchmod on our own directory.
        if unsafe { libc::fchmod(fd, 0o700) } != 0 {
            return Err(io_at(path)(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn creates_owner_only_with_parents() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b/c");
        assert!(ensure(&dir).unwrap());
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert!(!ensure(&dir).unwrap(), "the second time it is adopted");
    }

    #[test]
    fn an_own_readable_directory_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ck");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn symlinks_files_and_writable_directories_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = ensure(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link") && e.contains("link"), "{e}");

        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(ensure(&file).unwrap_err().to_string().contains("not a directory"));

        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ensure(&open).unwrap_err().to_string();
        assert!(e.contains("others can write") && e.contains("0777"), "{e}");
        assert_eq!(mode(&open), 0o777, "a refused directory is left as it was");
    }

    #[test]
    fn an_untouched_directory_keeps_its_mode_and_is_refused_when_others_can_write_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("scratch");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!ensure_untouched(&dir).unwrap());
        assert_eq!(mode(&dir), 0o755, "an adopted directory is not changed");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = ensure_untouched(&dir).unwrap_err().to_string();
        assert!(e.contains("others can write into it (mode 0775"), "{e}");
        assert!(ensure_untouched(&tmp.path().join("new")).unwrap());
        assert_eq!(mode(&tmp.path().join("new")), 0o700);
    }

    #[test]
    fn a_parent_others_can_write_is_refused_unless_sticky() {
        let tmp = tempfile::tempdir().unwrap();
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let store = open.join("a/store");
        let e = ensure(&store).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "others can write into {} above it (mode 0777, not sticky",
                open.display()
            )),
            "{e}"
        );
        assert!(!open.join("a").exists(), "nothing is created under it");

        // The same directory named through a link of this user's in a safe place.
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        let e = ensure(&link.join("store")).unwrap_err().to_string();
        assert!(
            e.contains("others can write into") && e.contains("not sticky"),
            "{e}"
        );

        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(ensure(&store).unwrap(), "a sticky parent is fine, as /tmp is");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check(&store).is_err(), "an adopted one is checked the same way");
        assert!(check_removable(&store, None).is_err());
    }

    #[test]
    fn a_parent_another_user_owns_is_refused() {
        if euid() != 0 {
            return; // only root can make a directory owned by someone else
        }
        let tmp = tempfile::tempdir().unwrap();
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = CString::new(theirs.as_os_str().as_bytes()).unwrap();
        // SAFETY: chown of a directory this test created.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        let e = ensure(&theirs.join("store")).unwrap_err().to_string();
        assert!(e.contains("is owned by user 65534, not by root or user 0"), "{e}");
        check_ancestors(&theirs.join("store"), 65534).expect("fine for its owner");
    }

    #[test]
    fn a_directory_to_delete_from_is_checked_and_left_as_it_was() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("store");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let owner = check_removable(&dir, None).unwrap();
        assert_eq!(owner.uid, euid());
        assert_eq!(mode(&dir), 0o755, "nothing changed");
        let e = check_removable(&dir, Some(euid() + 1)).unwrap_err();
        assert!(e.why().contains(&format!("not by user {}", euid() + 1)), "{e}");

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert_eq!(
            check_removable(&link, None).unwrap_err().why(),
            "it is a symbolic link"
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = check_removable(&dir, None).unwrap_err();
        assert!(e.why().contains("others can write into it (mode 1777)"), "{e}");
    }

    #[test]
    fn root_deletes_as_the_owner() {
        if euid() != 0 {
            return; // only root can act as another user
        }
        let tmp = tempfile::tempdir().unwrap();
        let mine = tmp.path().join("root-only");
        std::fs::create_dir(&mine).unwrap();
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
        let nobody = Owner {
            uid: 65534,
            gid: 65534,
        };
        let denied = as_owner(nobody, || std::fs::write(mine.join("f"), b"x"));
        assert_eq!(denied.unwrap_err().kind(), std::io::ErrorKind::PermissionDenied);
        std::fs::write(mine.join("f"), b"x").expect("root again afterwards");
    }

    #[test]
    fn another_users_directory_is_refused() {
        if euid() != 0 {
            return; // only root can make a directory owned by someone else
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("theirs");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: chown of a directory this test created.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        let e = ensure(&dir).unwrap_err().to_string();
        assert!(e.contains("owned by user 65534"), "{e}");
    }
}
