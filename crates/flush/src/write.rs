//! Writing a flushed epoch: a staging directory under a temporary name, one [`RankWriter`]
//! per rank (possibly on many hosts at once, into the same shared directory), and
//! [`Staging::publish`], which writes the manifest and renames the directory into place as
//! the very last step.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::Xxh3;

use crate::dir::{create_private_dir, fsync_dir, rank_dir_name};
use crate::error::{io_at, FlushError, Result};
use crate::manifest::{ItemEntry, Manifest, RankEntry, MANIFEST_FILE};
use crate::names::item_file_name;
use crate::pace::Pacer;
use crate::write_behind::WriteBehind;

/// Bytes per checksummed block, and per read and write of a flush.
pub const BLOCK_SIZE: u64 = 1 << 20;

/// A flushed epoch being written: `tmp-<E>-…` until [`Staging::publish`] renames it.
#[derive(Debug)]
pub struct Staging {
    root: PathBuf,
    dir: PathBuf,
    epoch: u64,
}

impl Staging {
    pub(crate) fn new(root: PathBuf, dir: PathBuf, epoch: u64) -> Staging {
        Staging { root, dir, epoch }
    }

    /// The staging directory: rank writers write under it.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The epoch being flushed.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Completes the epoch: checks that every file `manifest` names is there with its
    /// length, writes and fsyncs the manifest, then renames the directory to `epoch-<E>`
    /// and fsyncs the flush directory. Before the rename a crash leaves nothing published;
    /// a failure removes what was staged.
    pub fn publish(self, manifest: &Manifest) -> Result<()> {
        let result = self.try_publish(manifest);
        if result.is_err() && self.dir.exists() {
            let _ = fs::remove_dir_all(&self.dir);
        }
        result
    }

    fn try_publish(&self, manifest: &Manifest) -> Result<()> {
        if manifest.epoch != self.epoch {
            return Err(FlushError::Invalid(format!(
                "a manifest of epoch {} for the flush of epoch {}",
                manifest.epoch, self.epoch
            )));
        }
        for rank in &manifest.ranks {
            let dir = self.dir.join(rank_dir_name(rank.rank));
            for item in &rank.items {
                let path = dir.join(&item.file);
                let len = fs::metadata(&path).map_err(io_at(&path))?.len();
                if len != item.len {
                    return Err(FlushError::Corrupt {
                        epoch: self.epoch,
                        rank: rank.rank,
                        item: item.name.clone(),
                        detail: format!("{} is {len} bytes, not {}", path.display(), item.len),
                    });
                }
            }
        }
        let path = self.dir.join(MANIFEST_FILE);
        let mut file = File::create(&path).map_err(io_at(&path))?;
        file.write_all(&manifest.to_json()).map_err(io_at(&path))?;
        file.sync_all().map_err(io_at(&path))?;
        drop(file);
        fsync_dir(&self.dir)?;
        let target = self.root.join(crate::dir::epoch_dir_name(self.epoch));
        if target.exists() {
            return Err(FlushError::Invalid(format!(
                "epoch {} is already flushed ({})",
                self.epoch,
                target.display()
            )));
        }
        eckpt_durable::rename_durably(&self.dir, &target).map_err(io_at(&target))
    }

    /// Removes what was written (a failed flush).
    pub fn abandon(self) -> Result<()> {
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&self.dir)(e)),
            _ => Ok(()),
        }
    }
}

/// Writes one rank's items into a staging directory, checksumming as it goes.
#[derive(Debug)]
pub struct RankWriter {
    dir: PathBuf,
    rank: u32,
    items: Vec<ItemEntry>,
}

impl RankWriter {
    /// Starts rank `rank`'s directory in the staging directory `staging` (a path the flush's
    /// coordinator handed out, seen alike by every host).
    pub fn create(staging: &Path, rank: u32) -> Result<RankWriter> {
        if !staging.is_dir() {
            return Err(FlushError::Missing(format!(
                "{}: no such staging directory (the flush was abandoned, or the flush directory is not shared with this host)",
                staging.display()
            )));
        }
        let dir = staging.join(rank_dir_name(rank));
        create_private_dir(&dir)?;
        Ok(RankWriter {
            dir,
            rank,
            items: Vec::new(),
        })
    }

    /// Copies item `name` (`len` bytes from `source`) into its file, at most at the pace
    /// `pacer` allows; the file is fsynced before this returns.
    pub fn item(&mut self, name: &str, len: u64, source: &mut dyn Read, pacer: &mut Pacer) -> Result<()> {
        let file_name = item_file_name(name);
        let path = self.dir.join(&file_name);
        let mut file = WriteBehind::new(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(io_at(&path))?,
        );
        let mut buf = vec![0u8; len.min(BLOCK_SIZE) as usize];
        let mut hasher = Xxh3::new();
        let mut crcs = String::with_capacity(ItemEntry::blocks(len, BLOCK_SIZE) as usize * 8);
        while file.written() < len {
            let n = (len - file.written()).min(BLOCK_SIZE) as usize;
            source
                .read_exact(&mut buf[..n])
                .map_err(|source| FlushError::Source {
                    rank: self.rank,
                    item: name.to_string(),
                    source,
                })?;
            hasher.update(&buf[..n]);
            crcs.push_str(&format!("{:08x}", crc32c::crc32c(&buf[..n])));
            pacer.take(n as u64);
            file.write_all(&buf[..n]).map_err(io_at(&path))?;
        }
        file.sync().map_err(io_at(&path))?;
        self.items.push(ItemEntry {
            name: name.to_string(),
            file: file_name,
            len,
            xxh3: format!("{:016x}", hasher.digest()),
            crc32c: crcs,
        });
        Ok(())
    }

    /// Makes the rank's directory durable; its entry for the manifest.
    pub fn finish(self) -> Result<RankEntry> {
        fsync_dir(&self.dir)?;
        Ok(RankEntry {
            rank: self.rank,
            items: self.items,
        })
    }
}
