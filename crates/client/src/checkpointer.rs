//! [`Checkpointer`]: one rank's protected state and its checkpoint/restart.

use std::collections::BTreeMap;
use std::path::Path;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::baseline::Baseline;
use crate::cluster_mode::ClusterLink;
use crate::pacing::{Decision, Pacer, Policy};

use eckpt_capture::{MemoryMap, Tracker};
use eckpt_cluster_api::msg::{PaceReport, PaceStats, RankReport};
use eckpt_gpu::{stage_changes, Changes, Cuda, Device, DeviceRegion, Staged};
use eckpt_store::{EpochWriter, Options, RankClaim, Store};
use serde::{Deserialize, Serialize};

use crate::files::{self, DirRecord, FileMode, FileRecord, Protected};
use crate::{capi, Config, Error};
use eckpt_cluster_api::ClusterError;

mod items;
pub use items::Items;

/// The store item holding an epoch's [`Meta`].
const META_ITEM: &str = "eckpt/meta";

/// Store item name of a memory region.
fn region_item(name: &str) -> String {
    format!("mem/{name}")
}

/// Store item name of a device (GPU) memory region.
fn device_item(name: &str) -> String {
    format!("gpu/{name}")
}

/// A registered memory region.
struct Region {
    /// Tracker id.
    id: u32,
    ptr: *mut u8,
    len: usize,
    /// What the bytes are, as the binding that protected them describes it (a numpy dtype and
    /// shape, `<f4[16]`): a restart into another layout of the same length is refused.
    layout: Option<String>,
}

/// What an epoch records besides the contents: enough to check at restart that the rank
/// protects the same things, and to put files back.
#[derive(Default, Serialize, Deserialize)]
struct Meta {
    /// Region name → length.
    regions: BTreeMap<String, u64>,
    /// Device region name → length (absent in epochs of versions without device memory).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    device_regions: BTreeMap<String, u64>,
    /// Region name → layout, for regions protected with one ([`Checkpointer::protect_typed`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    layouts: BTreeMap<String, String>,
    files: Vec<FileRecord>,
    dirs: Vec<DirRecord>,
}

/// An epoch as captured while the job waited: the store writer holding the host regions and
/// files, and what each device region staged.
struct Capture {
    writer: EpochWriter,
    staged: Vec<(String, Staged)>,
    /// The epoch's [`Meta`], serialised.
    meta: Vec<u8>,
}

/// What completes a captured epoch once the job may go on: the device regions' staged bytes
/// into the store, the metadata, prepare, then commit (standalone) or the ready report to the
/// coordinator (cluster mode). Runs on the caller's thread, or on a thread of its own with
/// [`Config::background`].
struct Completion {
    rank: u32,
    epoch: u64,
    capture: Capture,
    /// Cluster mode: the rank's node and its pace report, for the ready report.
    ready: Option<(String, Option<PaceReport>)>,
}

impl Completion {
    fn run(
        self,
        devices: &mut BTreeMap<String, Box<dyn DeviceRegion>>,
        link: Option<&ClusterLink>,
    ) -> Result<(), Error> {
        let Capture {
            mut writer,
            staged,
            meta,
        } = self.capture;
        for (name, staged) in &staged {
            let region = devices.get(name).expect("a staged region is protected");
            let item = device_item(name);
            match staged.changes(region.as_ref()) {
                Changes::Full(image) => {
                    writer.put_full_in_blocks(&item, region.block_size() as u32, image)?
                }
                Changes::Blocks { block_size, blocks } => {
                    writer.put_dirty(&item, block_size as u32, region.size(), &blocks)?
                }
            }
        }
        writer.put_full(META_ITEM, &meta)?;
        let prepared = writer.prepare()?;
        let sizes = prepared.sizes();
        match (link, self.ready) {
            (Some(link), Some((node, pace))) => {
                // Releasing the prepared epoch leaves it durable for the node's agent to commit.
                drop(prepared);
                let report = RankReport {
                    image_bytes: sizes.image_bytes,
                    stored_bytes: sizes.stored_bytes,
                    pace,
                };
                link.ready(self.rank, self.epoch, &node, report)?;
            }
            _ => prepared.commit()?,
        }
        Ok(())
    }
}

/// A background completion's outcome, with the device regions it borrowed.
struct Completed {
    epoch: u64,
    devices: BTreeMap<String, Box<dyn DeviceRegion>>,
    result: Result<(), Error>,
}

/// One rank's checkpointing state: protected regions, files and directories, the dirty
/// tracker and the node-local store.
///
/// In cluster mode ([`Config::cluster`]) the store is the one of the node the coordinator
/// placed the rank on, epochs are only prepared locally and committed by the cluster once
/// every rank is in and the parity is durable.
pub struct Checkpointer {
    config: Config,
    /// The process that made this checkpointer. A forked child inherits it — the tracker's
    /// userfaultfd and pagemap descriptors, which still act on the parent's memory, and the
    /// parent's store claim — and must not use it: every call checks.
    pid: u32,
    /// Standalone: this process's claim on its rank in the store, held until drop.
    _claim: Option<RankClaim>,
    /// The store in use (standalone: `config.store_root()`; cluster mode: the rank's node's, opened
    /// when first needed and re-opened when the rank moves).
    store: Option<Store>,
    /// Cluster mode: the link to the coordinator, shared with a background completion.
    cluster: Option<Arc<ClusterLink>>,
    /// Cluster mode: the last epoch this rank handed to the cluster.
    last_epoch: Option<u64>,
    tracker: Tracker,
    regions: BTreeMap<String, Region>,
    /// Host regions by start address → name: finds an overlap in O(log n) and names it.
    by_address: BTreeMap<usize, String>,
    /// The process's mappings as last read: a new region inside a writable mapping seen
    /// before is accepted without reading `/proc/self/maps` again (a rank may protect 100,000
    /// regions); one outside it reads them anew. Checkpoints and restarts read them afresh.
    memory_map: Option<MemoryMap>,
    /// The tracker id the next protected region gets (ids are never reused).
    next_region_id: u32,
    /// Protected device memory, by name: fingerprints on the device, staging on the host.
    devices: BTreeMap<String, Box<dyn DeviceRegion>>,
    files: Vec<(Protected, FileMode)>,
    dirs: Vec<Protected>,
    /// Append files' lengths at protect time: what a fresh start cuts them back to.
    baseline: Baseline,
    /// Set when dirty information was consumed by a failed checkpoint: the next one must
    /// compare every block with the previous epoch instead of trusting the tracker.
    resync: bool,
    /// `snapshot()`'s schedule, from its first call.
    pacer: Option<Pacer>,
    /// The epoch being completed in the background ([`Config::background`]); it holds the
    /// device regions meanwhile.
    background: Option<JoinHandle<Completed>>,
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
                (None, Some(Arc::new(link)), Baseline::new(dir, config.rank))
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
        let claim = store.as_ref().map(|s| s.claim_rank(config.rank)).transpose()?;
        let tracker = Tracker::new(config.track, config.hash_block_size)?;
        Ok(Checkpointer {
            config,
            pid: std::process::id(),
            _claim: claim,
            store,
            cluster,
            last_epoch: None,
            tracker,
            regions: BTreeMap::new(),
            by_address: BTreeMap::new(),
            memory_map: None,
            next_region_id: 0,
            devices: BTreeMap::new(),
            files: Vec::new(),
            dirs: Vec::new(),
            baseline,
            resync: false,
            pacer: None,
            background: None,
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

    /// The latest committed epoch of this rank, if any (after the epoch being completed in
    /// the background, if any, is done).
    pub fn latest_epoch(&mut self) -> Result<Option<u64>, Error> {
        self.join_background()?;
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
        // SAFETY: forwarded from this function's contract.
        unsafe { self.protect_region(name, ptr, len, None) }
    }

    /// [`Checkpointer::protect`] with a description of what the bytes are (`layout`, any
    /// string: a numpy dtype and shape such as `<f4[4,4]`): it is recorded with every epoch,
    /// and a restart whose region has another layout is refused as a mismatch before anything
    /// is changed, even when the lengths agree (float32[16] is not float64[8]).
    ///
    /// # Safety
    /// As [`Checkpointer::protect`].
    pub unsafe fn protect_typed(
        &mut self,
        name: &str,
        ptr: *mut u8,
        len: usize,
        layout: &str,
    ) -> Result<(), Error> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.protect_region(name, ptr, len, Some(layout.to_string())) }
    }

    /// # Safety
    /// As [`Checkpointer::protect`].
    unsafe fn protect_region(
        &mut self,
        name: &str,
        ptr: *mut u8,
        len: usize,
        layout: Option<String>,
    ) -> Result<(), Error> {
        self.check_unused(name)?;
        if ptr.is_null() || len == 0 {
            return Err(Error::Invalid(format!(
                "region {name:?}: null pointer or zero length"
            )));
        }
        let start = ptr as usize;
        if let Some(other) = self.overlapping(start, len) {
            return Err(Error::Invalid(format!(
                "region {name:?} overlaps region {other:?}: protect each byte once"
            )));
        }
        self.check_writable(name, start, len)?;
        let id = self.next_region_id;
        self.next_region_id = id
            .checked_add(1)
            .ok_or_else(|| Error::Invalid("more than 2^32 regions protected".into()))?;
        // SAFETY: forwarded from this function's contract.
        unsafe { self.tracker.add_region(id, ptr, len)? };
        self.regions
            .insert(name.to_string(), Region { id, ptr, len, layout });
        self.by_address.insert(start, name.to_string());
        Ok(())
    }

    /// Protects `len` bytes of GPU memory at the CUDA device pointer `ptr` under `name`:
    /// checkpoints fingerprint its blocks on the GPU ([`Config::hash_block_size`] bytes each)
    /// and copy only the changed ones to the host, restart fills it in place. Fails with
    /// [`Error::Device`] on a machine without a CUDA driver, or when the range is not device
    /// memory of one allocation.
    ///
    /// # Safety
    /// The memory must stay allocated, and not be moved, until the checkpointer is dropped.
    pub unsafe fn protect_device(&mut self, name: &str, ptr: u64, len: u64) -> Result<(), Error> {
        let cuda = Cuda::open()?;
        // SAFETY: forwarded from this function's contract.
        unsafe { self.protect_on(cuda, name, ptr, len) }
    }

    /// [`Checkpointer::protect_device`] on the given device (for instance
    /// [`eckpt_gpu::HostMemory`], which tracks host memory by the same path).
    ///
    /// # Safety
    /// As [`Checkpointer::protect_device`], for memory of `device`.
    pub unsafe fn protect_on(
        &mut self,
        device: &dyn Device,
        name: &str,
        ptr: u64,
        len: u64,
    ) -> Result<(), Error> {
        self.check_unused(name)?;
        let end = ptr.saturating_add(len);
        if let Some((other, _)) = self
            .devices
            .iter()
            .find(|(_, r)| ptr < r.address() + r.size() && r.address() < end)
        {
            return Err(Error::Invalid(format!(
                "device region {name:?} overlaps region {other:?}: protect each byte once"
            )));
        }
        // SAFETY: forwarded from this function's contract.
        let mut region = unsafe { device.attach(ptr, len, self.config.hash_block_size as u64) }?;
        // The staging buffer now: page-locking gigabytes takes seconds, which must not fall
        // into a checkpoint's stall.
        region.staging_mut()?;
        self.devices.insert(name.to_string(), region);
        Ok(())
    }

    /// The name of a protected host region that shares a byte with `[start, start + len)`:
    /// only the regions starting just before and at or after `start` can.
    fn overlapping(&self, start: usize, len: usize) -> Option<&str> {
        let end = start.saturating_add(len);
        let before = self.by_address.range(..=start).next_back();
        let after = self.by_address.range(start..).next();
        [before, after].into_iter().flatten().find_map(|(&other, name)| {
            let other_end = other.saturating_add(self.regions[name].len);
            (other < end && start < other_end).then_some(name.as_str())
        })
    }

    /// Refuses memory a restart could not write back: unmapped (a bogus pointer, a length
    /// running past the allocation) or read-only (a `const` global, `PROT_READ`). The
    /// mappings read last serve while they vouch for the range; else they are read anew.
    fn check_writable(&mut self, name: &str, start: usize, len: usize) -> Result<(), Error> {
        if self
            .memory_map
            .as_ref()
            .is_some_and(|map| map.unwritable(start, len).is_none())
        {
            return Ok(());
        }
        let map =
            MemoryMap::holding([(start, len)]).map_err(|e| Error::io(Path::new("/proc/self/maps"), e))?;
        let refusal = map.unwritable(start, len);
        self.memory_map = Some(map);
        match refusal {
            None => Ok(()),
            Some(why) => Err(Error::Invalid(format!("region {name:?}: {why}"))),
        }
    }

    /// Checks, against the mappings read now, that every protected region is still mapped
    /// writable: memory freed or unmapped since `protect` is refused before a checkpoint reads
    /// it (a crash) or a restart writes it (a write into someone else's memory).
    fn check_regions_mapped(&mut self) -> Result<(), Error> {
        let regions = self.regions.values().map(|r| (r.ptr as usize, r.len));
        let map = MemoryMap::holding(regions).map_err(|e| Error::io(Path::new("/proc/self/maps"), e))?;
        for (name, region) in &self.regions {
            if let Some(why) = map.unwritable(region.ptr as usize, region.len) {
                return Err(Error::State(format!(
                    "region {name:?}: {why} (freed or unmapped since it was protected?)"
                )));
            }
        }
        self.memory_map = Some(map);
        Ok(())
    }

    /// Refuses any use of this checkpointer by a process other than the one that made it: a
    /// forked child would act on its parent's dirty tracking and store.
    fn same_process(&self) -> Result<(), Error> {
        if std::process::id() == self.pid {
            return Ok(());
        }
        Err(Error::State(format!(
            "this process was forked from process {}, whose checkpointer it must not use: initialise one of its own (eckpt_init; in Python a new Checkpointer), for another rank",
            self.pid
        )))
    }

    /// Whether this is a forked child's copy of its parent's checkpointer.
    pub(crate) fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// Refuses a region name already in use (host or device); first waits for a background
    /// completion, which holds the device regions.
    fn check_unused(&mut self, name: &str) -> Result<(), Error> {
        self.join_background()?;
        if self.regions.contains_key(name) || self.devices.contains_key(name) {
            return Err(Error::Invalid(format!("region {name:?} is already protected")));
        }
        Ok(())
    }

    /// Protects a file with the given mode (see [`FileMode`]). A relative path is relative
    /// to the working directory now, and a restart finds the file by that relative path from
    /// whatever directory the job is started in. An append file's length now is recorded
    /// durably (once per rank): a fresh start cuts it back to that, so a run killed before
    /// its first checkpoint leaves no lines behind.
    pub fn protect_file(&mut self, path: impl AsRef<Path>, mode: FileMode) -> Result<(), Error> {
        self.same_process()?;
        let file = Protected::new(path.as_ref())?;
        files::check_protectable(&file, mode)?;
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
        self.same_process()?;
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
        self.same_process()?;
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
        // The previous epoch's failure, if it was completed in the background, is this call's.
        self.join_background()?;
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
        let completion = Completion {
            rank,
            epoch,
            capture: self.capture_epoch(epoch)?,
            ready: node.map(|n| (n.name, pace)),
        };
        if self.config.background && !self.devices.is_empty() {
            let mut devices = std::mem::take(&mut self.devices);
            let link = self.cluster.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("eckpt-epoch-{epoch}"))
                .spawn(move || {
                    let result = completion.run(&mut devices, link.as_deref());
                    Completed {
                        epoch,
                        devices,
                        result,
                    }
                });
            match spawned {
                Ok(thread) => self.background = Some(thread),
                // The closure, and with it the regions and the link, is gone with the failed
                // spawn: the checkpointer cannot go on.
                Err(e) => panic!("cannot start the thread that completes epoch {epoch}: {e}"),
            }
        } else {
            let result = completion.run(&mut self.devices, self.cluster.as_deref());
            self.completed(epoch, result)?;
        }
        Ok((epoch, job_pace))
    }

    /// Records the outcome of completing `epoch`: the next delta may build on it, or must
    /// compare everything (the dirty information it consumed is in no committed epoch).
    fn completed(&mut self, epoch: u64, result: Result<(), Error>) -> Result<(), Error> {
        match result {
            Ok(()) => {
                self.resync = false;
                if self.cluster.is_some() {
                    self.last_epoch = Some(epoch);
                }
                Ok(())
            }
            Err(e) => {
                self.resync = true;
                Err(e)
            }
        }
    }

    /// Waits for the epoch being completed in the background, if any, and takes back its
    /// device regions; its failure is returned. Every call that touches the tracker or the
    /// store passes through here first, so this is also where a forked child is refused.
    fn join_background(&mut self) -> Result<(), Error> {
        self.same_process()?;
        let Some(thread) = self.background.take() else {
            return Ok(());
        };
        let done = thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        self.devices = done.devices;
        self.completed(done.epoch, done.result)
    }

    /// Waits until the last checkpoint is decided: its epoch if committed (`None` when none
    /// was taken); in cluster mode an error if the cluster aborted it. Standalone
    /// checkpoints are committed when [`Checkpointer::checkpoint`] returns.
    pub fn wait(&mut self) -> Result<Option<u64>, Error> {
        self.join_background()?;
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

    /// Captures `epoch` while the job waits: host regions and files into the store, device
    /// regions into their staging buffers. What remains is a [`Completion`].
    fn capture_epoch(&mut self, epoch: u64) -> Result<Capture, Error> {
        let rank = self.config.rank;
        self.check_regions_mapped()?;
        // From here on the tracker's dirty information is being consumed: until an epoch holding
        // it commits, the next checkpoint must compare every block — whether this one fails,
        // returns an error, or panics half way ([`Checkpointer::completed`] clears it).
        let resync = std::mem::replace(&mut self.resync, true);
        // The tracker reports regions by ascending id; looked up by id for each region below.
        let dirty: BTreeMap<u32, _> = self
            .tracker
            .collect_dirty()?
            .into_iter()
            .map(|d| (d.id, d))
            .collect();
        let mut writer = self.store()?.writer_of_every_item(rank, epoch)?;
        let compare_everything = writer.is_full() || resync;
        let mut meta = Meta {
            regions: BTreeMap::new(),
            device_regions: BTreeMap::new(),
            layouts: BTreeMap::new(),
            files: Vec::new(),
            dirs: Vec::new(),
        };
        for (name, region) in &self.regions {
            let changes = dirty
                .get(&region.id)
                .ok_or_else(|| Error::Internal(format!("region {name:?} is not tracked")))?;
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
            if let Some(layout) = &region.layout {
                meta.layouts.insert(name.clone(), layout.clone());
            }
        }
        let mut staged = Vec::with_capacity(self.devices.len());
        for (name, region) in &mut self.devices {
            staged.push((name.clone(), stage_changes(region.as_mut(), compare_everything)?));
            meta.device_regions.insert(name.clone(), region.size());
        }
        (meta.files, meta.dirs) = files::checkpoint(&self.files, &self.dirs, &mut writer)?;
        Ok(Capture {
            writer,
            staged,
            meta: serde_json::to_vec(&meta)
                .map_err(|e| Error::Internal(format!("epoch {epoch}'s metadata does not serialise: {e}")))?,
        })
    }

    /// Restores the latest committed epoch: fills every protected region in place and puts
    /// protected files and directories back as that epoch saw them. Returns the epoch, or
    /// `None` when there is no checkpoint (a fresh start: append files are cut back to their
    /// length when first protected). Nothing is changed if the checkpoint does not fit what
    /// is protected now. In cluster mode a rank whose committed epoch cannot be read (its
    /// node is down, the job size changed) gets an error, never a fresh start.
    pub fn restart(&mut self) -> Result<Option<u64>, Error> {
        self.join_background()?;
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
        match (self.restore_epoch(epoch), &self.cluster) {
            // The node's copy is damaged but its group holds parity for it: the coordinator
            // checks the copy and marks the node damaged, so that `eckpt run` rebuilds it
            // before it relaunches; the error says how to rebuild it rather than only that a
            // block is bad.
            (Err(e), Some(link)) if e.code() == capi::ECKPT_ECORRUPT => {
                let checked = match link.check_copy(rank) {
                    Ok(Some(_)) => "its node is marked damaged".to_string(),
                    Ok(None) => "its node's agent reads it back sound, though".to_string(),
                    Err(check) => format!("the coordinator could not check it: {check}"),
                };
                Err(Error::ClusterCall(ClusterError::Corrupt(format!(
                    "{e}; rank {rank}'s copy on its node is damaged ({checked}): `eckpt run` rebuilds it from its group, or run `eckpt recover`"
                ))))
            }
            (result, _) => result.map(Some),
        }
    }

    /// Refuses, changing nothing, an epoch whose regions are not exactly the ones protected
    /// now: one missing from either side (a region left out would be lost at the next
    /// checkpoint), another length, or another layout.
    fn check_regions_fit(&self, epoch: u64, meta: &Meta) -> Result<(), Error> {
        let host = self.regions.iter().map(|(name, r)| (name, r.len as u64));
        let device = self.devices.iter().map(|(name, r)| (name, r.size()));
        for (kind, now, saved) in [
            ("region", host.collect::<BTreeMap<_, _>>(), &meta.regions),
            ("device region", device.collect(), &meta.device_regions),
        ] {
            for (name, len) in &now {
                match saved.get(*name) {
                    Some(saved) if saved == len => {}
                    Some(saved) => {
                        return Err(Error::Mismatch(format!(
                            "{kind} {name:?} is {len} bytes but epoch {epoch} saved {saved}"
                        )))
                    }
                    None => {
                        return Err(Error::Mismatch(format!(
                            "{kind} {name:?} is not in epoch {epoch}"
                        )))
                    }
                }
            }
            if let Some(name) = saved.keys().find(|name| !now.contains_key(name)) {
                return Err(Error::Mismatch(format!(
                    "epoch {epoch} saved {kind} {name:?}, which is not protected now: protect every region the checkpoint holds before restart"
                )));
            }
        }
        for (name, region) in &self.regions {
            let saved = meta.layouts.get(name);
            if let (Some(now), Some(saved)) = (&region.layout, saved) {
                if now != saved {
                    return Err(Error::Mismatch(format!(
                        "region {name:?} is {now} but epoch {epoch} saved {saved}"
                    )));
                }
            }
        }
        Ok(())
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

        // Everything restart can foresee is checked before memory or a file is changed.
        self.check_regions_fit(epoch, &meta)?;
        self.check_regions_mapped()?;
        files::check_restorable(&self.files, &meta.files, &self.dirs, &meta.dirs)?;
        // A restore that fails half way leaves memory the tracker has not seen as written.
        self.resync = true;

        // One read of every region's image, by a pool of threads: host regions in place, each
        // device region's into its staging buffer, every piece of which starts its copy to the
        // device as soon as it is read, while the rest is still being read.
        let mut names = Vec::with_capacity(self.regions.len() + self.devices.len());
        let mut buffers: Vec<&mut [u8]> = Vec::with_capacity(names.capacity());
        for (name, region) in &self.regions {
            names.push(region_item(name));
            // SAFETY: `protect`'s contract; the rank is inside this call.
            buffers.push(unsafe { std::slice::from_raw_parts_mut(region.ptr, region.len) });
        }
        let first_device = names.len();
        let mut devices: Vec<&mut Box<dyn DeviceRegion>> = Vec::with_capacity(self.devices.len());
        for (name, region) in &mut self.devices {
            names.push(device_item(name));
            let staging = region.staging_mut()?;
            // SAFETY: the staging buffer lives as long as its region, which is neither dropped
            // nor staged before the read below ends; the read's threads write disjoint pieces
            // of it, and each piece is handed to `start_restore` only once it is written.
            buffers.push(unsafe { std::slice::from_raw_parts_mut(staging.as_mut_ptr(), staging.len()) });
            devices.push(region);
        }
        let items = names.iter().map(String::as_str).zip(buffers).collect();
        let read = store.read_items_into(rank, epoch, items, &mut |item, range| {
            match item.checked_sub(first_device) {
                // SAFETY: the piece was just read into the staging buffer, and no thread
                // writes it again during this restore.
                Some(device) => Ok(unsafe { devices[device].start_restore(range) }?),
                None => Ok::<(), Error>(()),
            }
        });
        // The copies started are waited for even when the read failed: none may still be
        // reading a staging buffer when the call returns.
        let mut outcome = read;
        for region in self.devices.values_mut() {
            // Waits for the copies; the restored memory is the baseline of the next delta.
            let waited = region.changed_blocks(true);
            outcome = outcome.and(waited.map(drop).map_err(Error::from));
        }
        outcome?;
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

impl Drop for Checkpointer {
    /// Completes the epoch being written in the background: a job that ends right after its
    /// last `checkpoint()` still gets that epoch.
    fn drop(&mut self) {
        if self.forked() {
            // A forked child's copy: the background thread is its parent's (there is none to
            // join here), and device regions would free the parent's CUDA allocations. Their
            // memory is leaked in the child; descriptors are closed, which leaves the parent's
            // open and its claim and tracking intact.
            std::mem::forget(self.background.take());
            std::mem::forget(std::mem::take(&mut self.devices));
            return;
        }
        if let Err(e) = self.join_background() {
            eprintln!("eckpt: rank {}: the last epoch failed: {e}", self.config.rank);
        }
    }
}
