//! What a node's disk does wrong without saying so: a bit of a stored file flipped. Only
//! the files bulk data lives in are struck — a rank's epoch (`…/epoch-*/data`) and a coded
//! object (`…/obj-*/parity`) — where rot is likeliest by size and where the stores' block
//! checksums must catch it; every such file of the node is a candidate, whatever its epoch.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The files of the store under `local` a flip may strike, in a fixed order.
fn bulk_files(local: &Path) -> Result<Vec<PathBuf>> {
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
            } else if kind.is_file() && is_bulk(&path) && entry.metadata()?.len() > 0 {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Whether `path` holds bulk data: a rank epoch's `data` or a coded object's `parity`.
fn is_bulk(path: &Path) -> bool {
    let parent = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    (name == "data" && parent.starts_with("epoch-")) || (name == "parity" && parent.starts_with("obj-"))
}

/// Flips one bit of one bulk file under `local`, chosen by `pick` (file, then byte, then
/// bit). Returns the file and the byte, or `None` when the node stores no bulk data yet.
pub fn flip(local: &Path, pick: u64) -> Result<Option<(PathBuf, u64)>> {
    let files = bulk_files(local)?;
    if files.is_empty() {
        return Ok(None);
    }
    let path = files[(pick % files.len() as u64) as usize].clone();
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .with_context(|| format!("{}", path.display()))?;
    let len = file.metadata()?.len();
    let at = (pick >> 16) % len;
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(&mut byte)?;
    byte[0] ^= 1 << (pick >> 61);
    file.seek(SeekFrom::Start(at))?;
    file.write_all(&byte)?;
    Ok(Some((path, at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flip_changes_one_bit_of_a_bulk_file_and_nothing_else() {
        let root = tempfile::tempdir().unwrap();
        let local = root.path();
        let epoch = local.join("store/rank.0/epoch-3-1");
        let object = local.join("coded/obj-g1-e3");
        std::fs::create_dir_all(&epoch).unwrap();
        std::fs::create_dir_all(&object).unwrap();
        for (path, fill) in [
            (epoch.join("data"), 0x11u8),
            (epoch.join("manifest"), 0x22),
            (object.join("parity"), 0x33),
            (object.join("parity.json"), 0x44),
        ] {
            std::fs::write(path, vec![fill; 1000]).unwrap();
        }
        let files = bulk_files(local).unwrap();
        assert_eq!(files, [object.join("parity"), epoch.join("data")]);
        for pick in [0u64, 1, 0xDEAD_BEEF_0000_0001, u64::MAX] {
            let (path, at) = flip(local, pick).unwrap().expect("a bulk file");
            let bytes = std::fs::read(&path).unwrap();
            let fill = bytes[(at as usize + 1) % bytes.len()];
            let changed: Vec<usize> = (0..bytes.len()).filter(|&i| bytes[i] != fill).collect();
            assert_eq!(changed, [at as usize], "{}", path.display());
            assert_eq!((bytes[at as usize] ^ fill).count_ones(), 1);
            std::fs::write(&path, vec![fill; 1000]).unwrap();
        }
        for untouched in ["manifest", "parity.json"] {
            let dir = if untouched == "manifest" { &epoch } else { &object };
            let bytes = std::fs::read(dir.join(untouched)).unwrap();
            assert!(bytes.iter().all(|&b| b == bytes[0]), "{untouched} changed");
        }
        assert!(flip(root.path().join("empty").as_path(), 7).unwrap().is_none());
    }
}
