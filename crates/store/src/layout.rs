//! Directory naming, durability helpers and the per-rank writer lock.
//!
//! The names are the store's state machine: a directory's name says whether the epoch in
//! it is being written (`tmp-…`), durable but undecided (`prepared-E-G`), committed
//! (`epoch-E-G`) or being deleted (`trash-…`). Every transition is one `rename` followed by
//! an fsync of the rank directory, so a crash leaves each epoch in exactly one state.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{io_at, Result, StoreError};

/// Manifest file inside an epoch directory.
pub(crate) const MANIFEST_FILE: &str = "manifest";
/// Block data file inside an epoch directory.
pub(crate) const DATA_FILE: &str = "data";
const LOCK_FILE: &str = "lock";
/// The file a rank's live process holds ([`RankClaim`]).
const OWNER_FILE: &str = "owner";
const RANK_PREFIX: &str = "rank.";
const COMMITTED_PREFIX: &str = "epoch-";
const PREPARED_PREFIX: &str = "prepared-";
pub(crate) const TMP_PREFIX: &str = "tmp-";
const TRASH_PREFIX: &str = "trash-";
const PIN_PREFIX: &str = "pin-";

/// Directory of `rank` under the store root.
pub(crate) fn rank_dir(root: &Path, rank: u32) -> PathBuf {
    root.join(format!("{RANK_PREFIX}{rank}"))
}

/// Whether `name` is an entry the store makes in its root (a rank's directory, or one on
/// its way to deletion): what a purge of a node's store deletes there, and nothing else.
pub fn is_root_entry(name: &str) -> bool {
    parse_rank_dir(name).is_some() || name.starts_with(TRASH_PREFIX)
}

/// Rank of a directory named by [`rank_dir`].
pub(crate) fn parse_rank_dir(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(RANK_PREFIX)?;
    let rank: u32 = digits.parse().ok()?;
    (rank.to_string() == digits).then_some(rank)
}

/// Name of a committed (`prepared == false`) or prepared epoch directory.
pub(crate) fn epoch_dir_name(prepared: bool, epoch: u64, generation: u32) -> String {
    let prefix = if prepared {
        PREPARED_PREFIX
    } else {
        COMMITTED_PREFIX
    };
    format!("{prefix}{epoch}-{generation}")
}

/// The epoch of a pin file's name after its prefix (`<E>-<owner>`).
fn parse_pin(s: &str) -> Option<u64> {
    let (e, _) = s.split_once('-')?;
    let epoch: u64 = e.parse().ok()?;
    (epoch.to_string() == e && epoch > 0).then_some(epoch)
}

fn parse_epoch_gen(s: &str) -> Option<(u64, u32)> {
    let (e, g) = s.split_once('-')?;
    let epoch: u64 = e.parse().ok()?;
    let generation: u32 = g.parse().ok()?;
    (epoch.to_string() == e && generation.to_string() == g && epoch > 0).then_some((epoch, generation))
}

/// What a rank directory holds, by state.
#[derive(Debug, Default)]
pub(crate) struct RankScan {
    /// Committed epochs → their generations, ascending.
    pub committed: BTreeMap<u64, Vec<u32>>,
    /// Prepared epochs → their generations, ascending.
    pub prepared: BTreeMap<u64, Vec<u32>>,
    /// Leftovers of interrupted writes and deletions.
    pub garbage: Vec<String>,
    /// Epochs held by a [`Pin`] (retention keeps them and what they depend on).
    pub pinned: BTreeSet<u64>,
    /// The pin files themselves.
    pub pins: Vec<String>,
}

impl RankScan {
    /// Latest committed epoch.
    pub fn latest(&self) -> Option<u64> {
        self.committed.keys().next_back().copied()
    }

    /// Highest committed generation of `epoch`.
    pub fn committed_gen(&self, epoch: u64) -> Option<u32> {
        self.committed.get(&epoch).and_then(|g| g.last().copied())
    }

    /// Highest prepared generation of `epoch`.
    pub fn prepared_gen(&self, epoch: u64) -> Option<u32> {
        self.prepared.get(&epoch).and_then(|g| g.last().copied())
    }
}

/// Lists a rank directory; a missing directory is an empty rank.
pub(crate) fn scan_rank(dir: &Path) -> Result<RankScan> {
    let mut scan = RankScan::default();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(scan),
        Err(e) => return Err(io_at(dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_at(dir))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if let Some(rest) = name.strip_prefix(COMMITTED_PREFIX) {
            if let Some((e, g)) = parse_epoch_gen(rest) {
                scan.committed.entry(e).or_default().push(g);
            }
        } else if let Some(rest) = name.strip_prefix(PREPARED_PREFIX) {
            if let Some((e, g)) = parse_epoch_gen(rest) {
                scan.prepared.entry(e).or_default().push(g);
            }
        } else if name.starts_with(TMP_PREFIX) || name.starts_with(TRASH_PREFIX) {
            scan.garbage.push(name);
        } else if let Some(epoch) = name.strip_prefix(PIN_PREFIX).and_then(parse_pin) {
            scan.pinned.insert(epoch);
            scan.pins.push(name);
        }
    }
    for gens in scan.committed.values_mut().chain(scan.prepared.values_mut()) {
        gens.sort_unstable();
    }
    Ok(scan)
}

/// Creates `dir` and any missing parents owner-only (0700): checkpoints hold the job's memory.
pub(crate) fn create_private_dir(dir: &Path, recursive: bool) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(recursive)
        .mode(0o700)
        .create(dir)
        .map_err(io_at(dir))
}

/// Makes the directory's entries (creations, renames, removals) durable.
pub(crate) fn fsync_dir(dir: &Path) -> Result<()> {
    eckpt_durable::sync_dir(dir).map_err(io_at(dir))
}

/// A name no other writer, in this process or another, is using.
pub(crate) fn unique_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

/// Deletes an epoch directory so that a crash mid-way never leaves a half-deleted epoch
/// under a committed or prepared name: rename to `trash-…`, fsync, then remove.
pub(crate) fn remove_epoch_dir(rank_dir: &Path, name: &str) -> Result<()> {
    let from = rank_dir.join(name);
    let to = rank_dir.join(format!("{TRASH_PREFIX}{name}-{}", unique_suffix()));
    fs::rename(&from, &to).map_err(io_at(&from))?;
    fsync_dir(rank_dir)?;
    fs::remove_dir_all(&to).map_err(io_at(&to))
}

/// Deletes a whole rank directory: renamed to `trash-…` in the store root (fsynced), then
/// removed.
pub(crate) fn remove_rank_dir(root: &Path, dir: &Path) -> Result<()> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let to = root.join(format!("{TRASH_PREFIX}{name}-{}", unique_suffix()));
    fs::rename(dir, &to).map_err(io_at(dir))?;
    fsync_dir(root)?;
    fs::remove_dir_all(&to).map_err(io_at(&to))
}

/// Removes the `trash-…` rank directories a crash left in the store root.
pub(crate) fn remove_root_garbage(root: &Path) -> Result<()> {
    for entry in fs::read_dir(root).map_err(io_at(root))? {
        let name = entry.map_err(io_at(root))?.file_name();
        if let Some(name) = name.to_str().filter(|n| n.starts_with(TRASH_PREFIX)) {
            remove_garbage(root, name)?;
        }
    }
    Ok(())
}

/// Removes a `tmp-…` or `trash-…` leftover (never a committed or prepared epoch).
pub(crate) fn remove_garbage(rank_dir: &Path, name: &str) -> Result<()> {
    let path = rank_dir.join(name);
    match fs::remove_dir_all(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(&path)(e)),
    }
}

/// Exclusive `flock` on a rank's lock file: one writer (or cleaner) per rank across all
/// processes. Released when dropped, and by the kernel when the holder dies, so a
/// SIGKILLed writer never wedges the rank.
#[derive(Debug)]
pub(crate) struct RankLock {
    _file: File,
}

impl RankLock {
    /// Takes the lock without waiting; [`StoreError::Busy`] if someone holds it.
    pub(crate) fn try_acquire(root: &Path, rank: u32) -> Result<RankLock> {
        let dir = rank_dir(root, rank);
        if !dir.is_dir() {
            create_private_dir(&dir, true)?;
            fsync_dir(root)?;
        }
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_at(&path))?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return Err(if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                StoreError::Busy { rank }
            } else {
                io_at(&path)(err)
            });
        }
        Ok(RankLock { _file: file })
    }

    /// Takes the lock, waiting up to `wait` while someone else holds it:
    /// [`StoreError::Busy`] if it is still held then.
    pub(crate) fn acquire(root: &Path, rank: u32, wait: Duration) -> Result<RankLock> {
        let started = Instant::now();
        loop {
            match RankLock::try_acquire(root, rank) {
                Err(StoreError::Busy { .. }) if started.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return other,
            }
        }
    }
}

/// A process's claim on a rank for as long as it lives: an exclusive `flock` on the rank's
/// `owner` file, which names the holder. Per-operation [`RankLock`]s serialise writers of
/// one epoch at a time; they cannot stop two live processes that both believe they are rank
/// R (a forgotten `ECKPT_RANK`, a duplicated instance) from taking turns, so that each epoch
/// is a delta on the other's memory and a restore mixes both. A rank's process holds its
/// claim from start to end; the kernel drops it when the process dies, however it dies.
#[derive(Debug)]
pub struct RankClaim {
    _file: File,
}

impl RankClaim {
    /// Claims `rank`, or fails with [`StoreError::Claimed`] naming the process that holds it.
    pub(crate) fn acquire(root: &Path, rank: u32) -> Result<RankClaim> {
        use std::io::{Read, Seek, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let dir = rank_dir(root, rank);
        if !dir.is_dir() {
            create_private_dir(&dir, true)?;
            fsync_dir(root)?;
        }
        let path = dir.join(OWNER_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_at(&path))?;
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_at(&path)(err));
            }
            let mut holder = String::new();
            // The holder wrote its name right after locking: an empty read is a holder that
            // has not written it yet.
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StoreError::Claimed {
                rank,
                holder: if holder.is_empty() {
                    "another process".into()
                } else {
                    holder.to_string()
                },
            });
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let name = format!("process {} on {}", std::process::id(), host.trim());
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(name.as_bytes()))
            .map_err(io_at(&path))?;
        Ok(RankClaim { _file: file })
    }
}

/// Keeps a committed epoch of a rank — and every epoch its content depends on — from
/// retention while it lives: a durable `pin-<E>-<owner>` file in the rank's directory that
/// [`crate::Store`]'s retention reads. Dropping it removes the file; a pin left by a crashed
/// process stays until its owner clears it ([`crate::Store::clear_pins`]).
#[derive(Debug)]
pub struct Pin {
    path: PathBuf,
    epoch: u64,
}

impl Pin {
    /// Pins committed `epoch` of the rank in `dir`.
    pub(crate) fn create(dir: &Path, rank: u32, epoch: u64) -> Result<Pin> {
        if scan_rank(dir)?.committed_gen(epoch).is_none() {
            return Err(StoreError::NoEpoch { rank, epoch });
        }
        let path = dir.join(format!("{PIN_PREFIX}{epoch}-{}", unique_suffix()));
        File::create(&path)
            .and_then(|f| f.sync_all())
            .map_err(io_at(&path))?;
        let pin = Pin { path, epoch };
        fsync_dir(dir)?;
        // Retention that decided before the pin existed may have retired the epoch since.
        if scan_rank(dir)?.committed_gen(epoch).is_none() {
            return Err(StoreError::NoEpoch { rank, epoch });
        }
        Ok(pin)
    }

    /// The pinned epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path) {
            tracing::warn!(pin = %self.path.display(), error = %e, "could not remove a pin");
        }
    }
}

/// Removes every pin file of the rank in `dir` (their owner is gone).
pub(crate) fn clear_pins(dir: &Path) -> Result<()> {
    for name in scan_rank(dir)?.pins {
        let path = dir.join(name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_at(&path)(e)),
            _ => {}
        }
    }
    Ok(())
}
