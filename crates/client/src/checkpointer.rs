//! [`Checkpointer`]: one rank's protected state and its checkpoint/restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use eckpt_capture::Tracker;
use eckpt_store::{Options, Store};
use serde::{Deserialize, Serialize};

use crate::files::{self, DirRecord, FileMode, FileRecord};
use crate::{Config, Error};

/// The store item holding an epoch's [`Meta`].
const META_ITEM: &str = "eckpt/meta";

/// Store item name of a memory region.
fn region_item(name: &str) -> String {
    format!("mem/{name}")
}

/// A registered memory region.
struct Region {
    /// Tracker id.
    id: u32,
    ptr: *mut u8,
    len: usize,
}

/// What an epoch records besides the contents: enough to check at restart that the rank
/// protects the same things, and to put files back.
#[derive(Serialize, Deserialize)]
struct Meta {
    /// Region name → length.
    regions: BTreeMap<String, u64>,
    files: Vec<FileRecord>,
    dirs: Vec<DirRecord>,
}

/// One rank's checkpointing state: protected regions, files and directories, the dirty
/// tracker and the node-local store.
pub struct Checkpointer {
    config: Config,
    store: Store,
    tracker: Tracker,
    regions: BTreeMap<String, Region>,
    files: Vec<(PathBuf, FileMode)>,
    dirs: Vec<PathBuf>,
    /// Set when dirty information was consumed by a failed checkpoint: the next one must
    /// compare every block with the previous epoch instead of trusting the tracker.
    resync: bool,
}

// SAFETY: the raw region pointers are only dereferenced inside `&mut self` methods, and the
// caller of `protect` promised the memory stays valid; the C API serialises access.
unsafe impl Send for Checkpointer {}

impl Checkpointer {
    /// Opens the store for `config.rank` (cleaning what a crash left) and a dirty tracker.
    pub fn new(config: Config) -> Result<Checkpointer, Error> {
        let options = Options {
            retention: config.retention,
            ..Options::default()
        };
        let store = Store::open_with(&config.dir, options)?;
        let tracker = Tracker::new(config.track, config.hash_block_size)?;
        Ok(Checkpointer {
            config,
            store,
            tracker,
            regions: BTreeMap::new(),
            files: Vec::new(),
            dirs: Vec::new(),
            resync: false,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The latest committed epoch of this rank, if any.
    pub fn latest_epoch(&self) -> Result<Option<u64>, Error> {
        Ok(self.store.latest_committed(self.config.rank)?)
    }

    /// Protects the memory `[ptr, ptr + len)` under `name`: checkpoints save it, restart
    /// fills it in place. Page-aligned private memory is tracked by the kernel (only written
    /// pages are saved); other memory by hashing.
    ///
    /// # Safety
    /// The memory must stay valid, readable and writable, and not be moved or freed until the
    /// checkpointer is dropped.
    pub unsafe fn protect(&mut self, name: &str, ptr: *mut u8, len: usize) -> Result<(), Error> {
        if self.regions.contains_key(name) {
            return Err(Error::Invalid(format!("region {name:?} is already protected")));
        }
        if ptr.is_null() || len == 0 {
            return Err(Error::Invalid(format!(
                "region {name:?}: null pointer or zero length"
            )));
        }
        let id = self.regions.values().map(|r| r.id + 1).max().unwrap_or(0);
        // SAFETY: forwarded from this function's contract.
        unsafe { self.tracker.add_region(id, ptr, len)? };
        self.regions.insert(name.to_string(), Region { id, ptr, len });
        Ok(())
    }

    /// Protects a file with the given mode (see [`FileMode`]).
    pub fn protect_file(&mut self, path: impl AsRef<Path>, mode: FileMode) -> Result<(), Error> {
        let path = files::absolute(path.as_ref())?;
        if self.files.iter().any(|(p, _)| p == &path) {
            return Err(Error::Invalid(format!("{} is already protected", path.display())));
        }
        self.files.push((path, mode));
        Ok(())
    }

    /// Protects a directory: files created in it after a checkpoint are moved aside (into
    /// `.eckpt-rollback/`) when restarting from that checkpoint.
    pub fn protect_dir(&mut self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = files::absolute(path.as_ref())?;
        if !path.is_dir() {
            return Err(Error::Invalid(format!("{} is not a directory", path.display())));
        }
        if !self.dirs.contains(&path) {
            self.dirs.push(path);
        }
        Ok(())
    }

    /// Saves a new epoch: the blocks of protected memory written since the previous one, the
    /// protected files' state, committed crash-safely. Returns the epoch number (≥ 1).
    pub fn checkpoint(&mut self) -> Result<u64, Error> {
        let epoch = self.latest_epoch()?.map_or(1, |e| e + 1);
        match self.write_epoch(epoch) {
            Ok(()) => {
                self.resync = false;
                Ok(epoch)
            }
            Err(e) => {
                self.resync = true;
                Err(e)
            }
        }
    }

    fn write_epoch(&mut self, epoch: u64) -> Result<(), Error> {
        let rank = self.config.rank;
        let dirty = self.tracker.collect_dirty()?;
        let mut writer = self.store.writer(rank, epoch)?;
        let compare_everything = writer.is_full() || self.resync;
        let mut meta = Meta {
            regions: BTreeMap::new(),
            files: Vec::new(),
            dirs: Vec::new(),
        };
        for (name, region) in &self.regions {
            let changes = dirty
                .iter()
                .find(|d| d.id == region.id)
                .expect("every region is tracked");
            // SAFETY: `protect`'s contract keeps the region valid; the rank is inside this call.
            let memory = unsafe { std::slice::from_raw_parts(region.ptr, region.len) };
            let item = region_item(name);
            if compare_everything {
                writer.put_full(&item, memory)?;
            } else {
                let block = changes.block_size as usize;
                let blocks: Vec<(u64, &[u8])> = changes
                    .blocks
                    .iter()
                    .map(|&b| {
                        let start = b as usize * block;
                        (b, &memory[start..(start + block).min(memory.len())])
                    })
                    .collect();
                writer.put_dirty(&item, block as u32, region.len as u64, &blocks)?;
            }
            meta.regions.insert(name.clone(), region.len as u64);
        }
        (meta.files, meta.dirs) = files::checkpoint(&self.files, &self.dirs, &mut writer)?;
        let meta = serde_json::to_vec(&meta).expect("metadata always serialises");
        writer.put_full(META_ITEM, &meta)?;
        writer.commit()?;
        Ok(())
    }

    /// Restores the latest committed epoch: fills every protected region in place and puts
    /// protected files and directories back as that epoch saw them. Returns the epoch, or
    /// `None` when there is no checkpoint (a fresh start). Nothing is changed if the
    /// checkpoint does not fit what is protected now.
    pub fn restart(&mut self) -> Result<Option<u64>, Error> {
        let rank = self.config.rank;
        let Some(epoch) = self.latest_epoch()? else {
            return Ok(None);
        };
        let manifest = self.store.manifest(rank, epoch)?;
        let meta_len = manifest
            .items
            .iter()
            .find(|i| i.name == META_ITEM)
            .ok_or_else(|| Error::Mismatch(format!("epoch {epoch} was not written by an eckpt client")))?
            .len;
        let mut meta = vec![0u8; meta_len as usize];
        self.store.read_item_into(rank, epoch, META_ITEM, &mut meta)?;
        let meta: Meta = serde_json::from_slice(&meta)
            .map_err(|e| Error::Mismatch(format!("epoch {epoch}: unreadable metadata: {e}")))?;

        for (name, region) in &self.regions {
            match meta.regions.get(name) {
                Some(&len) if len == region.len as u64 => {}
                Some(&len) => {
                    return Err(Error::Mismatch(format!(
                        "region {name:?} is {} bytes but epoch {epoch} saved {len}",
                        region.len
                    )))
                }
                None => {
                    return Err(Error::Mismatch(format!(
                        "region {name:?} is not in epoch {epoch}"
                    )))
                }
            }
        }
        files::check_restorable(&self.files, &meta.files)?;

        for (name, region) in &self.regions {
            // SAFETY: `protect`'s contract; the rank is inside this call.
            let memory = unsafe { std::slice::from_raw_parts_mut(region.ptr, region.len) };
            self.store
                .read_item_into(rank, epoch, &region_item(name), memory)?;
        }
        files::restore(&self.store, rank, epoch, &self.files, &meta.files, &meta.dirs)?;
        // The restored memory is the baseline the next epoch's delta is taken against.
        self.tracker.collect_dirty()?;
        self.resync = false;
        Ok(Some(epoch))
    }
}
