//! Reading a published epoch back: every block checked against its CRC-32C before its bytes
//! are handed out, every item against its xxh3 at its end.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::dir::rank_dir_name;
use crate::error::{io_at, FlushError, Result};
use crate::manifest::{ItemEntry, Manifest, MANIFEST_FILE, MAX_MANIFEST_BYTES};

/// The manifest of epoch directory `dir`, checked, and describing epoch `epoch`.
pub(crate) fn read_manifest(dir: &Path, epoch: u64) -> Result<Manifest> {
    let path = dir.join(MANIFEST_FILE);
    let file = File::open(&path).map_err(io_at(&path))?;
    let mut bytes = Vec::new();
    file.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_at(&path))?;
    let manifest = Manifest::parse(&bytes, &path)?;
    if manifest.epoch != epoch {
        return Err(FlushError::Manifest {
            path,
            why: format!("it describes epoch {}, not {epoch}", manifest.epoch),
        });
    }
    Ok(manifest)
}

/// A published flushed epoch, its manifest checked and its files present.
#[derive(Debug, Clone)]
pub struct FlushedEpoch {
    dir: PathBuf,
    manifest: Manifest,
}

impl FlushedEpoch {
    pub(crate) fn open(dir: PathBuf, epoch: u64) -> Result<FlushedEpoch> {
        let manifest = read_manifest(&dir, epoch)?;
        let flushed = FlushedEpoch { dir, manifest };
        for rank in &flushed.manifest.ranks {
            for item in &rank.items {
                let file = flushed.file_of(rank.rank, item);
                let len = match std::fs::metadata(&file) {
                    Ok(m) => m.len(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Err(flushed.corrupt(
                            rank.rank,
                            item,
                            format!("{} is missing", file.display()),
                        ))
                    }
                    Err(e) => return Err(io_at(&file)(e)),
                };
                if len != item.len {
                    return Err(flushed.corrupt(
                        rank.rank,
                        item,
                        format!(
                            "{} is {len} bytes, the manifest says {}",
                            file.display(),
                            item.len
                        ),
                    ));
                }
            }
        }
        Ok(flushed)
    }

    /// Its manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.manifest.epoch
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file_of(&self, rank: u32, item: &ItemEntry) -> PathBuf {
        self.dir.join(rank_dir_name(rank)).join(&item.file)
    }

    fn corrupt(&self, rank: u32, item: &ItemEntry, detail: String) -> FlushError {
        FlushError::Corrupt {
            epoch: self.manifest.epoch,
            rank,
            item: item.name.clone(),
            detail,
        }
    }

    /// The entry of item `name` of rank `rank`.
    pub fn item(&self, rank: u32, name: &str) -> Result<&ItemEntry> {
        let entry = self.manifest.rank(rank).ok_or_else(|| {
            FlushError::Missing(format!(
                "flushed epoch {} has no rank {rank} (the job had {} ranks)",
                self.manifest.epoch, self.manifest.world
            ))
        })?;
        entry.items.iter().find(|i| i.name == name).ok_or_else(|| {
            let names: Vec<&str> = entry.items.iter().map(|i| i.name.as_str()).collect();
            FlushError::Missing(format!(
                "flushed epoch {} rank {rank} has no item {name:?} (it has {})",
                self.manifest.epoch,
                names.join(", ")
            ))
        })
    }

    /// Streams item `name` of rank `rank` to `out`, each block verified before it is
    /// written; the whole item's xxh3 is checked at the end (the caller publishes what it
    /// wrote only on success). The bytes written.
    pub fn copy_item(&self, rank: u32, name: &str, out: &mut dyn Write) -> Result<u64> {
        let item = self.item(rank, name)?;
        let path = self.file_of(rank, item);
        let mut file = File::open(&path).map_err(io_at(&path))?;
        let bs = self.manifest.block_size;
        let mut buf = Vec::with_capacity(item.len.min(bs) as usize);
        let mut hasher = Xxh3::new();
        let mut done = 0u64;
        let mut block = 0u64;
        while done < item.len {
            let n = (item.len - done).min(bs) as usize;
            buf.resize(n, 0);
            file.read_exact(&mut buf).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    self.corrupt(
                        rank,
                        item,
                        format!("{} is shorter than the manifest says", path.display()),
                    )
                } else {
                    io_at(&path)(e)
                }
            })?;
            if crc32c::crc32c(&buf) != item.block_crc(block) {
                return Err(self.corrupt(
                    rank,
                    item,
                    format!(
                        "block {block} (bytes {done}..{}) of {} fails its checksum",
                        done + n as u64,
                        path.display()
                    ),
                ));
            }
            hasher.update(&buf);
            out.write_all(&buf).map_err(|e| FlushError::Io {
                path: PathBuf::from("<output>"),
                source: e,
            })?;
            done += n as u64;
            block += 1;
        }
        let digest = format!("{:016x}", hasher.digest());
        if digest != item.xxh3 {
            return Err(self.corrupt(
                rank,
                item,
                format!(
                    "{} hashes to {digest}, the manifest says {}",
                    path.display(),
                    item.xxh3
                ),
            ));
        }
        Ok(done)
    }

    /// Item `name` of rank `rank`, verified, in memory.
    pub fn read_item(&self, rank: u32, name: &str) -> Result<Vec<u8>> {
        // The length was checked against the file at open: no larger than what is on disk.
        let mut out = Vec::with_capacity(self.item(rank, name)?.len as usize);
        self.copy_item(rank, name, &mut out)?;
        Ok(out)
    }
}
