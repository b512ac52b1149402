//! [`Checkpointer`]: one rank's protected state and its checkpoint/restart.

use std::collections::BTreeMap;
use std::path::Path;

use std::time::Instant;

use crate::baseline::Baseline;
use crate::cluster_mode::ClusterLink;
use crate::pacing::{Decision, Pacer, Policy};

use eckpt_capture::Tracker;
use eckpt_cluster_api::msg::{PaceReport, PaceStats, RankReport};
use eckpt_store::{EpochSizes, Options, Store};
use serde::{Deserialize, Serialize};

use crate::files::{self, DirRecord, FileMode, FileRecord, Protected};
use crate::{capi, Config, Error};
use eckpt_cluster_api::ClusterError;

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
///
/// In cluster mode ([`Config::cluster`]) the store is the one of the node the coordinator
/// placed the rank on, epochs are only prepared locally and committed by the cluster once
/// every rank is in and the parity is durable.
pub struct Checkpointer {
    config: Config,
    /// The store in use (standalone: `config.store_root()`; cluster mode: the rank's node's, opened
    /// when first needed and re-opened when the rank moves).
    store: Option<Store>,
    cluster: Option<ClusterLink>,
    /// Cluster mode: the last epoch this rank handed to the cluster.
    last_epoch: Option<u64>,
    tracker: Tracker,
    regions: BTreeMap<String, Region>,
    files: Vec<(Protected, FileMode)>,
    dirs: Vec<Protected>,
    /// Append files' lengths at protect time: what a fresh start cuts them back to.
    baseline: Baseline,
    /// Set when dirty information was consumed by a failed checkpoint: the next one must
    /// compare every block with the previous epoch instead of trusting the tracker.
    resync: bool,
    /// `snapshot()`'s schedule, from its first call.
    pacer: Option<Pacer>,
}

// SAFETY: the raw region pointers are only dereferenced inside `&mut self` methods, and the
// caller of `protect` promised the memory stays valid; the C API serialises access.
unsafe impl Send for Checkpointer {}

impl Checkpointer {
    /// Opens the store for `config.rank` (cleaning what a crash left), or in cluster mode
    /// checks the cluster is there, and a dirty tracker.
    pub fn new(config: Config) -> Result<Checkpointer, Error> {
        let (store, cluster, baseline) = match &config.cluster {
            Some(dir) => {
                let world = config.world.ok_or_else(|| {
                    Error::Invalid("cluster mode needs the job size: world=N or ECKPT_WORLD".into())
                })?;
                let link = ClusterLink::new(dir, world, config.generation)?;
                (None, Some(link), Baseline::new(dir, config.rank))
            }
            None => {
                let root = config.store_root()?;
                (
                    Some(Self::open_store(&config, &root)?),
                    None,
                    Baseline::new(&root, config.rank),
                )
            }
        };
        let tracker = Tracker::new(config.track, config.hash_block_size)?;
        Ok(Checkpointer {
            config,
            store,
            cluster,
            last_epoch: None,
            tracker,
            regions: BTreeMap::new(),
            files: Vec::new(),
            dirs: Vec::new(),
            baseline,
            resync: false,
            pacer: None,
        })
    }

    fn open_store(config: &Config, root: &Path) -> Result<Store, Error> {
        let options = Options {
            retention: config.retention,
            ..Options::default()
        };
        Ok(Store::open_with(root, options)?)
    }

    /// Uses the store at `root` (cluster mode: the rank's current node).
    fn use_store(&mut self, root: &Path) -> Result<(), Error> {
        if self.store.as_ref().is_none_or(|s| s.root() != root) {
            self.store = Some(Self::open_store(&self.config, root)?);
        }
        Ok(())
    }

    fn store(&self) -> Result<&Store, Error> {
        self.store
            .as_ref()
            .ok_or_else(|| Error::State("no checkpoint taken or restored yet".into()))
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The latest committed epoch of this rank, if any.
    pub fn latest_epoch(&self) -> Result<Option<u64>, Error> {
        match &self.cluster {
            Some(link) => Ok(link.locate(self.config.rank)?.map(|(_, epoch)| epoch)),
            None => Ok(self.store()?.latest_committed(self.config.rank)?),
        }
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

    /// Protects a file with the given mode (see [`FileMode`]). A relative path is relative
    /// to the working directory now, and a restart finds the file by that relative path from
    /// whatever directory the job is started in. An append file's length now is recorded
    /// durably (once per rank): a fresh start cuts it back to that, so a run killed before
    /// its first checkpoint leaves no lines behind.
    pub fn protect_file(&mut self, path: impl AsRef<Path>, mode: FileMode) -> Result<(), Error> {
        let file = Protected::new(path.as_ref())?;
        if self
            .files
            .iter()
            .any(|(p, _)| p.key == file.key || p.path == file.path)
        {
            return Err(Error::Invalid(format!(
                "{} is already protected",
                file.path.display()
            )));
        }
        if mode == FileMode::Append {
            self.baseline.record(&file)?;
        }
        self.files.push((file, mode));
        Ok(())
    }

    /// Protects a directory: files created in it after a checkpoint are moved aside (into
    /// `.eckpt-rollback/`) when restarting from that checkpoint.
    /// Relative paths are treated as in [`Checkpointer::protect_file`].
    pub fn protect_dir(&mut self, path: impl AsRef<Path>) -> Result<(), Error> {
        let dir = Protected::new(path.as_ref())?;
        if !dir.path.is_dir() {
            return Err(Error::Invalid(format!(
                "{} is not a directory",
                dir.path.display()
            )));
        }
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir);
        }
        Ok(())
    }

    /// Saves a new epoch: the blocks of protected memory written since the previous one, the
    /// protected files' state, committed crash-safely. Returns the epoch number (≥ 1).
    ///
    /// In cluster mode the epoch is made durable on the rank's node and reported; the call
    /// returns then, while the agents encode. The next call first waits for the previous
    /// epoch's decision; [`Checkpointer::wait`] waits for it explicitly.
    pub fn checkpoint(&mut self) -> Result<u64, Error> {
        Ok(self.checkpoint_reporting(None)?.0)
    }

    /// Called once per step: checkpoints when the configured interval ([`Config::interval`])
    /// has elapsed, and returns the epoch then (`None` otherwise). In cluster mode every
    /// rank takes the same decision at the same call — the schedule is fixed in calls from
    /// the job's pace, which the coordinator aggregates from every rank (see
    /// `pacing`) — so call it the same number of times on every rank, and do not mix it
    /// with [`Checkpointer::checkpoint`].
    pub fn snapshot(&mut self) -> Result<Option<u64>, Error> {
        if self.pacer.is_none() {
            self.pacer = Some(Pacer::new(Policy::new(self.config.interval, self.config.mtbf)?));
        }
        let pacer = self.pacer.as_mut().expect("pacer set above");
        let result = match pacer.tick() {
            Decision::Skip => return Ok(None),
            Decision::Pace(report) => self.pace_point(report).map(|()| None),
            Decision::Checkpoint(report) => {
                let started = Instant::now();
                let alone = Pacer::alone(&report);
                self.checkpoint_reporting(Some(report)).map(|(epoch, pace)| {
                    // A standalone rank is the whole job: its own figures are the job's.
                    let pace = if self.cluster.is_some() { pace } else { Some(alone) };
                    let pacer = self.pacer.as_mut().expect("pacer set above");
                    let news = pacer.checkpointed(started.elapsed(), pace.as_ref());
                    self.say_interval(news);
                    Some(epoch)
                })
            }
        };
        if result.is_err() {
            self.pacer.as_mut().expect("pacer set above").failed();
        }
        result
    }

    /// A pace point: meets the other ranks (cluster mode) and fixes the next checkpoint.
    fn pace_point(&mut self, report: PaceReport) -> Result<(), Error> {
        let pacer = self.pacer.as_ref().expect("pace points come from the pacer");
        let pace = match &self.cluster {
            Some(link) => link.pace(self.config.rank, &self.config.launch, pacer.round(), report)?,
            None => Pacer::alone(&report),
        };
        let news = self.pacer.as_mut().expect("pacer set").paced(&pace);
        self.say_interval(news);
        Ok(())
    }

    /// Rank 0 says why `snapshot()`'s interval is what it is (every rank computes the same).
    fn say_interval(&self, news: Option<String>) {
        if let (Some(line), 0) = (news, self.config.rank) {
            eprintln!("eckpt: {line}");
        }
    }

    /// [`Checkpointer::checkpoint`] with the rank's pace report (from `snapshot()`); also
    /// returns the job's pace as of the previous epoch when the coordinator knows it.
    fn checkpoint_reporting(&mut self, pace: Option<PaceReport>) -> Result<(u64, Option<PaceStats>), Error> {
        let rank = self.config.rank;
        let (epoch, node, job_pace) = match &self.cluster {
            Some(link) => {
                let (epoch, node, job_pace) = link.open_epoch(rank, self.config.launched_on())?;
                (epoch, Some(node), job_pace)
            }
            None => (self.latest_epoch()?.map_or(1, |e| e + 1), None, None),
        };
        if let Some(node) = &node {
            self.use_store(&node.store)?;
            // An aborted previous epoch consumed dirty information the store never kept.
            if self.last_epoch.is_some() && self.store()?.latest_committed(rank)? != self.last_epoch {
                self.resync = true;
            }
        }
        let sizes = match self.write_epoch(epoch, node.is_none()) {
            Ok(sizes) => {
                self.resync = false;
                sizes
            }
            Err(e) => {
                self.resync = true;
                return Err(e);
            }
        };
        if let (Some(link), Some(node)) = (&self.cluster, &node) {
            let report = RankReport {
                image_bytes: sizes.image_bytes,
                stored_bytes: sizes.stored_bytes,
                pace,
            };
            link.ready(rank, epoch, &node.name, report)?;
            self.last_epoch = Some(epoch);
        }
        Ok((epoch, job_pace))
    }

    /// Waits until the last checkpoint is decided: its epoch if committed (`None` when none
    /// was taken); in cluster mode an error if the cluster aborted it. Standalone
    /// checkpoints are committed when [`Checkpointer::checkpoint`] returns.
    pub fn wait(&self) -> Result<Option<u64>, Error> {
        let Some(link) = &self.cluster else {
            return self.latest_epoch();
        };
        let Some(epoch) = self.last_epoch else {
            return Ok(None);
        };
        let outcome = link.wait(self.config.rank, epoch)?;
        if outcome.committed {
            Ok(Some(epoch))
        } else {
            Err(Error::Cluster(format!(
                "epoch {epoch} was aborted: {}",
                outcome.reason.unwrap_or_default()
            )))
        }
    }

    /// Writes `epoch`; committed at once when `commit`, else left prepared for the cluster.
    fn write_epoch(&mut self, epoch: u64, commit: bool) -> Result<EpochSizes, Error> {
        let rank = self.config.rank;
        let dirty = self.tracker.collect_dirty()?;
        let mut writer = self.store()?.writer(rank, epoch)?;
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
        let prepared = writer.prepare()?;
        let sizes = prepared.sizes();
        if commit {
            prepared.commit()?;
        }
        // Otherwise releasing the prepared epoch leaves it durable for the node's agent to
        // commit.
        Ok(sizes)
    }

    /// Restores the latest committed epoch: fills every protected region in place and puts
    /// protected files and directories back as that epoch saw them. Returns the epoch, or
    /// `None` when there is no checkpoint (a fresh start: append files are cut back to their
    /// length when first protected). Nothing is changed if the checkpoint does not fit what
    /// is protected now. In cluster mode a rank whose committed epoch cannot be read (its
    /// node is down, the job size changed) gets an error, never a fresh start.
    pub fn restart(&mut self) -> Result<Option<u64>, Error> {
        let rank = self.config.rank;
        if let Some((node, epoch)) = self
            .cluster
            .as_ref()
            .map(|l| l.locate(rank))
            .transpose()?
            .flatten()
        {
            if let Some(launched) = self.config.launched_on().filter(|l| *l != node.name) {
                return Err(Error::Cluster(format!(
                    "rank {rank} was started on node {launched}, but its checkpoint lives on {}: relaunch it there",
                    node.name
                )));
            }
            self.use_store(&node.store)?;
            self.last_epoch = Some(epoch);
            if self.store()?.latest_committed(rank)?.is_none() {
                return Err(Error::Cluster(format!(
                    "rank {rank}'s node holds none of its epochs though the cluster committed epoch {epoch}: run `eckpt recover`"
                )));
            }
        }
        let Some(epoch) = self
            .store
            .as_ref()
            .map(|s| s.latest_committed(rank))
            .transpose()?
            .flatten()
        else {
            self.baseline.cut_back(&self.files)?;
            return Ok(None);
        };
        match self.restore_epoch(epoch) {
            // The node's copy is damaged but its group holds parity for it: say how to
            // rebuild it rather than only that a block is bad.
            Err(e) if self.cluster.is_some() && e.code() == capi::ECKPT_ECORRUPT => {
                Err(Error::ClusterCall(ClusterError::Corrupt(format!(
                    "{e}; rank {rank}'s copy on its node is damaged: run `eckpt recover` to rebuild it from its group"
                ))))
            }
            result => result.map(Some),
        }
    }

    /// Fills the regions and puts files and directories back from committed `epoch` of
    /// the store in use.
    fn restore_epoch(&mut self, epoch: u64) -> Result<u64, Error> {
        let rank = self.config.rank;
        let store = self.store()?.clone();
        let manifest = store.manifest(rank, epoch)?;
        let meta_len = manifest
            .items
            .iter()
            .find(|i| i.name == META_ITEM)
            .ok_or_else(|| Error::Mismatch(format!("epoch {epoch} was not written by an eckpt client")))?
            .len;
        let mut meta = vec![0u8; meta_len as usize];
        store.read_item_into(rank, epoch, META_ITEM, &mut meta)?;
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
            store.read_item_into(rank, epoch, &region_item(name), memory)?;
        }
        files::restore(
            &store,
            rank,
            epoch,
            &self.files,
            &meta.files,
            &self.dirs,
            &meta.dirs,
        )?;
        // The restored memory is the baseline the next epoch's delta is taken against.
        self.tracker.collect_dirty()?;
        self.resync = false;
        Ok(epoch)
    }
}
