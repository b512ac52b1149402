//! What a node's disk and the coordinator's do wrong without saying so: a bit of a stored
//! file flipped (rot), a file's tail lost at a crash although the disk had said it was
//! written (a torn write, an `fsync` that lied), a journal log's last record half written or
//! half lost. Only the files a checkpoint lives in are struck on nodes — a rank's epoch
//! (`…/epoch-*/data`, its `manifest`) and a coded object (`…/obj-*/parity`, its
//! `parity.json`) — where rot is likeliest by size and where the stores' checksums and
//! seals must catch it; every such file of the node is a candidate, whatever its epoch.
//!
//! And the time a disk takes: in one seed of four, each blocking piece of the daemons' work
//! (a journal write, a store's write and sync, a parity fold) reaches its caller up to a
//! drawn latency late in virtual time ([`latency`]), so that a fault can land inside it.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use eckpt_daemon::worker::Latency;

/// The latency of the run of `seed` whose disks answer within `most`: each worker's result
/// late by a time drawn evenly up to it, from a stream of the seed's own.
pub fn latency(seed: u64, most: Duration) -> Latency {
    use rand::{Rng, SeedableRng};
    let mut draws = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xD15C_0A17);
    let most = most.as_micros() as u64;
    Box::new(move || Duration::from_micros(draws.random_range(0..=most)))
}

/// The files of the store under `local` a fault may strike, in a fixed order.
fn checkpoint_files(local: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut dirs = vec![local.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let entry = entry?;
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(path);
            } else if kind.is_file() && holds_a_checkpoint(&path) && entry.metadata()?.len() > 0 {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Whether `path` is a committed rank epoch's data or manifest, or a coded object's parity
/// or its description.
fn holds_a_checkpoint(path: &Path) -> bool {
    let parent = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    (matches!(name, "data" | "manifest") && parent.starts_with("epoch-"))
        || (matches!(name, "parity" | "parity.json") && parent.starts_with("obj-"))
}

/// The file under `local` `pick` chooses, and its length; `None` when the node stores no
/// checkpoint yet.
fn chosen(local: &Path, pick: u64) -> Result<Option<(PathBuf, u64)>> {
    let files = checkpoint_files(local)?;
    if files.is_empty() {
        return Ok(None);
    }
    let path = files[(pick % files.len() as u64) as usize].clone();
    let len = std::fs::metadata(&path)
        .with_context(|| format!("{}", path.display()))?
        .len();
    Ok(Some((path, len)))
}

/// Flips one bit of one checkpoint file under `local`, chosen by `pick` (file, then byte,
/// then bit). Returns the file and the byte, or `None` when the node stores none yet.
pub fn flip(local: &Path, pick: u64) -> Result<Option<(PathBuf, u64)>> {
    let Some((path, len)) = chosen(local, pick)? else {
        return Ok(None);
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("{}", path.display()))?;
    let at = (pick >> 16) % len;
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(&mut byte)?;
    byte[0] ^= 1 << (pick >> 61);
    file.seek(SeekFrom::Start(at))?;
    file.write_all(&byte)?;
    Ok(Some((path, at)))
}

/// Loses the tail of one checkpoint file under `local`, chosen by `pick` (file, then the
/// length kept, shorter than the file): what a crash leaves of a write the disk had
/// acknowledged. Returns the file and the bytes kept, or `None` when the node stores none.
pub fn tear(local: &Path, pick: u64) -> Result<Option<(PathBuf, u64)>> {
    let Some((path, len)) = chosen(local, pick)? else {
        return Ok(None);
    };
    let kept = (pick >> 16) % len;
    OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(kept))
        .with_context(|| format!("{}", path.display()))?;
    Ok(Some((path, kept)))
}

/// Tears the last line of one of the two logs beside the coordinator's `journal`, chosen by
/// `pick`: either a record being appended when the coordinator crashed, half written after
/// it (a prefix of the last line, no newline: an append nobody was answered for), or the
/// last record half lost (the disk of that one log lied) — only while the other log holds
/// that record whole, since the journal keeps two logs to survive one of them lying, not
/// both. Returns what it did, or `None` when that log has no line to tear.
pub fn tear_log(journal: &Path, pick: u64) -> Result<Option<String>> {
    let name = journal.file_stem().and_then(|n| n.to_str()).unwrap_or("journal");
    let logs = [format!("{name}.log"), format!("{name}.copy.log")].map(|f| journal.with_file_name(f));
    let read = |log: &Path| match std::fs::read(log) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("{}", log.display())),
    };
    let (log, other) = (&logs[(pick & 1) as usize], &logs[1 - (pick & 1) as usize]);
    let bytes = read(log)?;
    let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
    let Some(last) = lines.last().filter(|l| l.len() > 2 && l.ends_with(b"\n")) else {
        return Ok(None);
    };
    // Strictly inside the line, its newline excluded.
    let cut = 1 + (pick >> 16) % (last.len() as u64 - 2);
    let file = log.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let lose = pick & 2 != 0 && lines.len() > 1 && read(other)?.ends_with(last);
    if !lose {
        let mut appended = OpenOptions::new()
            .append(true)
            .open(log)
            .with_context(|| format!("{}", log.display()))?;
        appended.write_all(&last[..cut as usize])?;
        return Ok(Some(format!(
            "{file} ends in a record half appended ({cut} bytes)"
        )));
    }
    let kept = bytes.len() as u64 - last.len() as u64 + cut;
    OpenOptions::new()
        .write(true)
        .open(log)
        .and_then(|f| f.set_len(kept))
        .with_context(|| format!("{}", log.display()))?;
    Ok(Some(format!(
        "{file} lost the tail of its last record ({cut} of {} bytes kept)",
        last.len()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with one committed epoch and one coded object, each file filled with one
    /// byte, and files no fault strikes beside them.
    fn store(local: &Path) -> (PathBuf, PathBuf) {
        let epoch = local.join("store/rank.0/epoch-3-1");
        let object = local.join("coded/obj-g1-e3");
        let prepared = local.join("store/rank.0/prepared-4-1");
        for dir in [&epoch, &object, &prepared] {
            std::fs::create_dir_all(dir).unwrap();
        }
        for (path, fill) in [
            (epoch.join("data"), 0x11u8),
            (epoch.join("manifest"), 0x22),
            (object.join("parity"), 0x33),
            (object.join("parity.json"), 0x44),
            (prepared.join("data"), 0x55),
            (local.join("store/lock"), 0x66),
        ] {
            std::fs::write(path, vec![fill; 1000]).unwrap();
        }
        (epoch, object)
    }

    #[test]
    fn a_flip_changes_one_bit_of_a_checkpoint_file_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let local = root.path();
        let (epoch, object) = store(local);
        let files = checkpoint_files(local).unwrap();
        assert_eq!(
            files,
            [
                object.join("parity"),
                object.join("parity.json"),
                epoch.join("data"),
                epoch.join("manifest")
            ]
        );
        for pick in [0u64, 1, 2, 3, 0xDEAD_BEEF_0000_0001, u64::MAX] {
            let (path, at) = flip(local, pick).unwrap().expect("a checkpoint file");
            assert_eq!(path, files[(pick % 4) as usize]);
            let bytes = std::fs::read(&path).unwrap();
            let fill = bytes[(at as usize + 1) % bytes.len()];
            let changed: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != fill).collect();
            assert_eq!(changed, [at as usize], "{}", path.display());
            assert_eq!((bytes[at as usize] ^ fill).count_ones(), 1);
            std::fs::write(&path, vec![fill; 1000]).unwrap();
        }
        for untouched in ["store/rank.0/prepared-4-1/data", "store/lock"] {
            let bytes = std::fs::read(local.join(untouched)).unwrap();
            assert!(bytes.iter().all(|&b| b == bytes[0]), "{untouched} changed");
        }
        assert!(flip(root.path().join("empty").as_path(), 7).unwrap().is_none());
    }

    #[test]
    fn a_tear_keeps_a_shorter_prefix_of_one_checkpoint_file() {
        let root = tempfile::tempdir().unwrap();
        let local = root.path();
        let (epoch, _) = store(local);
        let (path, kept) = tear(local, 2 | 700 << 16).unwrap().expect("a checkpoint file");
        assert_eq!((path.clone(), kept), (epoch.join("data"), 700));
        assert_eq!(std::fs::read(&path).unwrap(), vec![0x11; 700]);
        let (path, kept) = tear(local, 3 | 1000 << 16).unwrap().unwrap();
        assert_eq!((path.clone(), kept), (epoch.join("manifest"), 0));
        assert!(tear(root.path().join("empty").as_path(), 7).unwrap().is_none());
    }

    #[test]
    fn a_torn_log_ends_in_half_a_record_appended_or_lost_and_its_twin_is_whole() {
        let root = tempfile::tempdir().unwrap();
        let journal = root.path().join("journal.json");
        let log = root.path().join("journal.log");
        let copy = root.path().join("journal.copy.log");
        let whole = b"header\nrecord one\nrecord two\n".to_vec();
        for path in [&log, &copy] {
            std::fs::write(path, &whole).unwrap();
        }
        // Bit 0 picks the log, bit 1 appended or lost, the rest where the line is cut.
        let done = tear_log(&journal, 3 << 16).unwrap().unwrap();
        assert!(done.contains("half appended"), "{done}");
        assert_eq!(
            std::fs::read(&log).unwrap(),
            b"header\nrecord one\nrecord two\nreco"
        );
        std::fs::write(&log, &whole).unwrap();
        let done = tear_log(&journal, 3 | 5 << 16).unwrap().unwrap();
        assert!(done.contains("journal.copy.log lost"), "{done}");
        assert_eq!(std::fs::read(&copy).unwrap(), b"header\nrecord one\nrecord");
        assert_eq!(std::fs::read(&log).unwrap(), whole);
        // The record is whole in the copy no more: the log keeps it, half an append after.
        let done = tear_log(&journal, 2 | 5 << 16).unwrap().unwrap();
        assert!(
            done.contains("journal.log ends in a record half appended"),
            "{done}"
        );
        assert!(std::fs::read(&log).unwrap().starts_with(&whole));
        std::fs::write(&copy, b"header\n").unwrap();
        let done = tear_log(&journal, 3).unwrap().unwrap();
        assert!(
            done.contains("half appended"),
            "no record to lose, but half a one to add: {done}"
        );
        assert!(
            tear_log(&journal, 3).unwrap().is_none(),
            "a half-appended copy has no line to tear"
        );
        std::fs::remove_file(&copy).unwrap();
        assert!(tear_log(&journal, 1).unwrap().is_none());
    }
}
