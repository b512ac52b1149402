//! One owner per place: a daemon holds an exclusive `flock(2)` on a lock file for as long
//! as it runs — the coordinator on its cluster directory, an agent on its store — so a
//! second one on the same host is refused at once instead of writing beside the first. The
//! lock dies with the process, however it ends. (Across hosts, where a shared file system
//! may not honour `flock`, the coordinator's registration checks stand in: node tokens and
//! one live session per name.)

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use eckpt_cluster_api::ClusterError;

/// A held lock; released when dropped or when the process exits.
#[derive(Debug)]
pub struct OwnerLock {
    _file: File,
}

impl OwnerLock {
    /// Takes the lock at `path` (created if missing, owner-only) for `what` (a name for the
    /// message), or says who holds it.
    pub fn take(path: &Path, what: &str) -> Result<OwnerLock, ClusterError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(eckpt_cluster_api::io_at(path))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let holder = std::fs::read_to_string(path).unwrap_or_default();
                return Err(ClusterError::Fenced(format!(
                    "another {what} is running on {} ({}): refused",
                    path.parent().unwrap_or(path).display(),
                    holder.trim().lines().next().unwrap_or("holder unknown")
                )));
            }
            return Err(eckpt_cluster_api::io_at(path)(e));
        }
        // Who holds it, for the message of the next one refused.
        let _ = file.set_len(0);
        let _ = std::io::Write::write_all(
            &mut &file,
            format!(
                "pid {} on {}\n",
                std::process::id(),
                eckpt_cluster_api::net::host_name()
            )
            .as_bytes(),
        );
        Ok(OwnerLock { _file: file })
    }

    /// The process on this host holding the lock at `path`, if one does: the pid its
    /// holder wrote there, believed only while the lock is held — a pid file outlives its
    /// process and the pid may be reused, a lock dies with its holder. How `down` finds the
    /// daemons of a cluster whose `cluster.json` is unreadable, and agents that hold their
    /// store but have not registered (no pid file yet).
    pub fn holder(path: &Path) -> Option<u32> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .ok()?;
        // SAFETY: flock on a descriptor we own. A shared lock is refused while an
        // exclusive one is held; taken, it is let go at once.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
            // SAFETY: as above.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
            return None;
        }
        let text = std::fs::read_to_string(path).ok()?;
        let (pid, host) = text.trim().strip_prefix("pid ")?.split_once(" on ")?;
        (host == eckpt_cluster_api::net::host_name())
            .then(|| pid.parse().ok())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_until_the_first_lets_go() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("lock");
        let first = OwnerLock::take(&path, "agent").unwrap();
        let e = OwnerLock::take(&path, "agent").unwrap_err();
        assert!(e.to_string().contains("another agent is running"), "{e}");
        assert!(
            e.to_string().contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        assert_eq!(OwnerLock::holder(&path), Some(std::process::id()));
        drop(first);
        assert_eq!(
            OwnerLock::holder(&path),
            None,
            "the pid it names is no holder now"
        );
        OwnerLock::take(&path, "agent").unwrap();
        assert_eq!(OwnerLock::holder(&tmp.path().join("none")), None);
    }
}
