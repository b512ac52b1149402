//! Crash-safe node-local checkpoint store.
//!
//! A rank's checkpoint state is a set of named **items** (memory regions, files), each a
//! byte string. The store keeps, per rank, a sequence of **epochs** (numbered from 1): the
//! first is a full image, later ones are **block deltas** against the previous committed
//! epoch, until the retention policy ([`RetentionPolicy`]) says the chain is long enough
//! and the next epoch (or a [`Store::coalesce`] call) stores a full image again — libckpt's
//! `maxfiles` coalescing. Every stored block carries a CRC-32C, every epoch a checksummed
//! [`Manifest`]; reading verifies both and fails naming rank, epoch, item and block rather
//! than returning wrong bytes.
//!
//! # On-disk layout
//!
//! ```text
//! <root>/                      default_root(job): /dev/shm/eckpt-<uid>/job-<id> on tmpfs, else a state dir
//!                              (every directory the store creates is 0700)
//!   rank.<R>/                  one directory per rank R (decimal)
//!     lock                     flock(2) target: one writer per rank across processes
//!     epoch-<E>-<G>/           committed epoch E, generation G
//!       manifest               checksummed header line + JSON (see `manifest` docs)
//!       data                   the blocks this epoch stores, item by item, ascending
//!     prepared-<E>-<G>/        durable, awaiting commit or abort (two-phase commit)
//!     pin-<E>-<owner>          epoch E is being copied elsewhere (a flush): retention keeps it
//!     tmp-<E>-<G>-<pid>-<n>/   being written; removed at the next open or write
//!     trash-<name>-<pid>-<n>/  being deleted; removed at the next open or write
//! ```
//!
//! The directory name is the epoch's state and every state change is one `rename` plus an
//! fsync of `rank.<R>/`, after the files inside were fsync'd. Committing is the rename
//! `prepared-E-G` → `epoch-E-G`. Hence a crash (SIGKILL, power loss) at any instant leaves
//! every epoch either committed and complete, or not committed; the last committed epoch is
//! always readable. Generations exist so an epoch can be rewritten in place (coalescing to
//! a full image, repair by [`Store::import_image`]): the highest committed generation is
//! the one read, and lower ones are removed only after the higher one is committed.
//!
//! # Content semantics
//!
//! An item of epoch E is its content in the parent epoch, cut to E's length (bytes past the
//! parent's length are zero), with E's stored blocks written over it. Items a writer does
//! not mention are carried over unchanged; removed items are absent from E's manifest.
//! When the caller hands full content for a delta epoch, the writer compares it with the
//! previous image block by block and stores only blocks that differ.
//!
//! # Cluster hooks
//!
//! [`Store::dirty_xor`] gives the parity-update input (old ⊕ new per changed block),
//! [`Store::padded_delta`] / [`Store::delta_len`] the zero-padded serialized delta, and
//! [`Store::write_delta`] / [`Store::encoded_delta_len`] the same (or a complete image as a
//! delta) streamed to a file, that the group erasure-codes; [`parse_delta`] /
//! [`Store::apply_delta`] the inverse after decode,
//! and [`Store::import_image`] installs a decoded image on a spare node. The first three
//! accept a prepared epoch, since the cluster encodes before it commits.

#![warn(missing_docs)]

mod coding_inputs;
mod delta;
mod error;
mod layout;
mod manifest;
mod parallel_read;
mod read;
mod write;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use coding_inputs::XorBlock;
pub use delta::{parse_delta, parse_delta_ref, Delta, DeltaItem, DELTA_FORMAT};
pub use error::{Result, StoreError};
pub use manifest::{
    parse_manifest, BlockEntry, ItemManifest, Manifest, MANIFEST_FORMAT, MAX_BLOCK_SIZE, MAX_ITEM_NAME,
};
pub use read::ItemReader;
pub use write::{EpochSizes, EpochWriter, PreparedEpoch};

use error::io_at;
pub use layout::{is_root_entry, Pin, RankClaim};

use layout::{parse_rank_dir, rank_dir, scan_rank, RankLock};
use read::{locate, Chain};
use write::{cleanup_rank, Plan};

/// Fills a window of an item being imported: `(item name, offset, window)`.
pub type ImageFill<'a, E> = dyn FnMut(&str, u64, &mut [u8]) -> std::result::Result<(), E> + 'a;

/// Bytes [`Store::verify`] reads at a time.
const VERIFY_WINDOW: u64 = 4 << 20;

/// When to start a new full image and which epochs to keep (libckpt's `maxfiles`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetentionPolicy {
    /// Newest committed epochs kept readable (at least 1); older ones are deleted once no
    /// kept epoch depends on them.
    pub keep_committed: usize,
    /// Longest delta chain: an epoch whose parent already ends `max_chain` deltas is stored
    /// full. 0 stores every epoch full.
    pub max_chain: u32,
    /// An epoch is stored full when the deltas of its parent's chain together store more
    /// than this fraction of the parent's image size.
    pub max_chain_ratio: f64,
}

impl Default for RetentionPolicy {
    fn default() -> Self {
        RetentionPolicy {
            keep_committed: 2,
            max_chain: 8,
            max_chain_ratio: 1.0,
        }
    }
}

impl RetentionPolicy {
    /// Whether an epoch following `parent` must be a full image.
    fn wants_full(&self, parent: &Manifest) -> bool {
        parent.chain_len >= self.max_chain
            || (parent.chain_len > 0
                && parent.chain_bytes as f64 > self.max_chain_ratio * parent.image_len() as f64)
    }
}

/// Store configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Options {
    /// Block size for items given as full content ([`EpochWriter::put_full`]).
    pub block_size: u32,
    /// Coalescing and retention.
    pub retention: RetentionPolicy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            block_size: 4096,
            retention: RetentionPolicy::default(),
        }
    }
}

/// All items of one epoch, fully reconstructed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Image {
    /// Item name → content.
    pub items: BTreeMap<String, Vec<u8>>,
}

/// One epoch of one rank opened for random reads ([`Store::view`]).
#[derive(Debug)]
pub struct EpochView {
    chain: Chain,
}

impl EpochView {
    /// The epoch's manifest: its items and their lengths.
    pub fn manifest(&self) -> &Manifest {
        &self.chain.target().manifest
    }

    /// Fills `buf` with bytes `offset..offset + buf.len()` of item `name`; bytes past the
    /// item's end (or of an absent item) read as zero. Every block read is verified.
    pub fn read_padded(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.chain.read_padded(name, offset, buf)
    }
}

/// Where the checkpoints of batch job `job` live by default: per user and per job, so that
/// neither another user nor another job of the same user ever resumes them.
/// `/dev/shm/eckpt-<uid>/job-<job>` when `/dev/shm` is a tmpfs (fastest, survives the
/// process but not the node), else `job-<job>` under `$XDG_STATE_HOME/eckpt`, else under
/// `~/.local/state/eckpt`, else under `eckpt-<uid>` in the temporary directory. Characters
/// of `job` other than ASCII letters, digits, `.`, `-` and `_` become `_`.
///
/// The per-user directory is created owner-only, or adopted only when it is this user's,
/// not a symlink and not writable by others (`eckpt-private-dir`): another user who made
/// `/dev/shm/eckpt-<uid>` first could otherwise move a job's checkpoint away or plant one.
pub fn default_root(job: &str) -> Result<PathBuf> {
    let shm = Path::new("/dev/shm");
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let job: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let user_root = pick_root(
        is_tmpfs(shm).then_some(shm),
        std::env::var_os("XDG_STATE_HOME"),
        std::env::var_os("HOME"),
        uid,
    );
    eckpt_private_dir::ensure(&user_root)?;
    Ok(user_root.join(format!("job-{job}")))
}

/// The per-user directory under which [`default_root`] puts each job's store.
fn pick_root(tmpfs: Option<&Path>, xdg_state: Option<OsString>, home: Option<OsString>, uid: u32) -> PathBuf {
    if let Some(t) = tmpfs {
        return t.join(format!("eckpt-{uid}"));
    }
    // The XDG spec says relative values are invalid and must be ignored.
    if let Some(x) = xdg_state.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return x.join("eckpt");
    }
    if let Some(h) = home.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return h.join(".local/state/eckpt");
    }
    std::env::temp_dir().join(format!("eckpt-{uid}"))
}

fn is_tmpfs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type == libc::TMPFS_MAGIC
}

/// A node-local checkpoint store rooted at one directory. Cheap to clone; any number of
/// `Store` values (and processes) may read concurrently, while writes to a rank are
/// serialized by the rank's lock ([`StoreError::Busy`] for a second writer).
///
/// Readers take no lock: an epoch deleted by retention while being opened reads as an
/// error, never as wrong bytes; once opened, an [`ItemReader`] keeps its files.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    options: Options,
    /// How long operations wait for a rank's lock held by someone else: [`DEFAULT_LOCK_WAIT`]
    /// (the unit tests set zero, to see a refusal at once).
    lock_wait: Duration,
    read_threads: usize,
}

/// How long [`Store`] operations wait for a rank's lock by default. Its holders other than a
/// second writer keep it for milliseconds — an agent applying the cluster's commit or abort
/// decision, another process of the node opening the store (which tidies every rank under
/// its lock) — and failing at once on them made a relaunched rank's checkpoint, or an
/// agent's commit, fail at random. A second writer that keeps the lock is still refused.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(10);

/// The most threads [`Store::read_items_into`] reads with by default (fewer when the machine
/// has fewer cores).
pub const DEFAULT_MAX_READ_THREADS: usize = 16;

impl Store {
    /// Opens (creating if needed) the store at `root` with default [`Options`].
    pub fn open(root: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(root, Options::default())
    }

    /// Opens (creating if needed) the store at `root`, and removes what crashes left behind
    /// in every rank no writer currently holds: temporary and trash directories, prepared
    /// epochs that can no longer be committed, superseded generations. Prepared epochs newer
    /// than the latest committed one are kept for [`Store::resume_prepared`].
    pub fn open_with(root: impl AsRef<Path>, options: Options) -> Result<Store> {
        let r = &options.retention;
        if r.keep_committed == 0 {
            return Err(StoreError::Invalid("keep_committed must be at least 1".into()));
        }
        if !(r.max_chain_ratio.is_finite() && r.max_chain_ratio >= 0.0) {
            return Err(StoreError::Invalid(format!(
                "max_chain_ratio {}",
                r.max_chain_ratio
            )));
        }
        if options.block_size == 0 || options.block_size > MAX_BLOCK_SIZE {
            return Err(StoreError::Invalid(format!("block size {}", options.block_size)));
        }
        let root = root.as_ref().to_path_buf();
        // Owner-only, and refused when someone else could have put epochs in it.
        if eckpt_private_dir::ensure(&root)? {
            // Make the new root's own entry durable, or a power loss could take it (and
            // every epoch committed under it) away.
            if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
                layout::fsync_dir(parent)?;
            }
        }
        let store = Store {
            root,
            options,
            lock_wait: DEFAULT_LOCK_WAIT,
            read_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(DEFAULT_MAX_READ_THREADS),
        };
        layout::remove_root_garbage(&store.root)?;
        for rank in store.ranks()? {
            match RankLock::try_acquire(&store.root, rank) {
                Ok(_lock) => cleanup_rank(&rank_dir(&store.root, rank), false)?,
                Err(StoreError::Busy { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(store)
    }

    /// Claims `rank` for this process while the returned [`RankClaim`] lives: another process
    /// claiming it meanwhile gets [`StoreError::Claimed`] naming this one. The rank library
    /// holds it from init to finalize, so that two live processes never write one rank.
    pub fn claim_rank(&self, rank: u32) -> Result<RankClaim> {
        RankClaim::acquire(&self.root, rank)
    }

    /// The store, with [`Store::read_items_into`] reading with `threads` threads (default:
    /// one per core, up to [`DEFAULT_MAX_READ_THREADS`]).
    pub fn with_read_threads(mut self, threads: usize) -> Store {
        self.read_threads = threads.max(1);
        self
    }

    /// Root directory of the store.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    fn rank_dir(&self, rank: u32) -> PathBuf {
        rank_dir(&self.root, rank)
    }

    /// Ranks that have a directory in the store, ascending.
    pub fn ranks(&self) -> Result<Vec<u32>> {
        let mut ranks = Vec::new();
        for entry in fs::read_dir(&self.root).map_err(io_at(&self.root))? {
            let entry = entry.map_err(io_at(&self.root))?;
            if let Some(r) = entry.file_name().to_str().and_then(parse_rank_dir) {
                ranks.push(r);
            }
        }
        ranks.sort_unstable();
        Ok(ranks)
    }

    /// Committed epochs of `rank`, ascending.
    pub fn list_epochs(&self, rank: u32) -> Result<Vec<u64>> {
        Ok(scan_rank(&self.rank_dir(rank))?.committed.into_keys().collect())
    }

    /// The newest committed epoch of `rank`: what a restart uses.
    pub fn latest_committed(&self, rank: u32) -> Result<Option<u64>> {
        Ok(scan_rank(&self.rank_dir(rank))?.latest())
    }

    /// Prepared epochs of `rank` that can still be committed (newer than the latest
    /// committed one), ascending.
    pub fn prepared_epochs(&self, rank: u32) -> Result<Vec<u64>> {
        let scan = scan_rank(&self.rank_dir(rank))?;
        let latest = scan.latest().unwrap_or(0);
        Ok(scan.prepared.into_keys().filter(|&e| e > latest).collect())
    }

    /// The manifest of a committed (or else prepared) epoch.
    pub fn manifest(&self, rank: u32, epoch: u64) -> Result<Manifest> {
        let dir = self.rank_dir(rank);
        let scan = scan_rank(&dir)?;
        Ok(locate(&dir, &scan, rank, epoch, true)?.manifest)
    }

    fn chain(&self, rank: u32, epoch: u64) -> Result<Chain> {
        Chain::open(&self.rank_dir(rank), rank, epoch, false)
    }

    /// Verifies every block of every item of a committed epoch, a window at a time (a
    /// scrub: nothing is kept).
    pub fn verify(&self, rank: u32, epoch: u64) -> Result<()> {
        let chain = self.chain(rank, epoch)?;
        let mut window = Vec::new();
        for item in &chain.target().manifest.items {
            let mut offset = 0;
            while offset < item.len {
                window.resize((item.len - offset).min(VERIFY_WINDOW) as usize, 0);
                chain.read_padded(&item.name, offset, &mut window)?;
                offset += window.len() as u64;
            }
        }
        Ok(())
    }

    /// Reconstructs every item of a committed epoch, verifying every block read.
    pub fn read_image(&self, rank: u32, epoch: u64) -> Result<Image> {
        let chain = self.chain(rank, epoch)?;
        let mut image = Image::default();
        for item in &chain.target().manifest.items {
            let len = usize::try_from(item.len)
                .map_err(|_| StoreError::Invalid(format!("item {:?} too large", item.name)))?;
            let mut buf = vec![0u8; len];
            chain.read_padded(&item.name, 0, &mut buf)?;
            image.items.insert(item.name.clone(), buf);
        }
        Ok(image)
    }

    /// Fills `buf` (the item's length) with item `name` of committed `epoch`, every block
    /// verified, with the threads of [`Store::read_items_into`].
    pub fn read_item_into(&self, rank: u32, epoch: u64, name: &str, buf: &mut [u8]) -> Result<()> {
        self.read_items_into(rank, epoch, vec![(name, buf)], &mut |_, _| {
            Ok::<(), StoreError>(())
        })
    }

    /// Fills each buffer of `items` (name, buffer of the item's length) with that item of
    /// committed `epoch`, every block verified: the epoch's chain is opened once, and the
    /// items' pieces (16 MiB) are read by a pool of threads ([`Store::with_read_threads`]).
    /// `landed(i, range)` is called on the calling thread for each piece of `items[i]` as soon
    /// as it is in place — a restart starts moving it on (to a GPU) while the rest is read;
    /// the ranges of an item cover it once, in no set order. The first error, a read's or
    /// `landed`'s, ends the call once the pieces under way are done.
    pub fn read_items_into<E: From<StoreError>>(
        &self,
        rank: u32,
        epoch: u64,
        items: Vec<(&str, &mut [u8])>,
        landed: &mut dyn FnMut(usize, std::ops::Range<usize>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let chain = self.chain(rank, epoch)?;
        for (name, buf) in &items {
            let len = chain.item_len(name)?;
            if buf.len() as u64 != len {
                return Err(StoreError::Invalid(format!(
                    "buffer of {} bytes for item {name:?} of {len} bytes",
                    buf.len()
                ))
                .into());
            }
        }
        parallel_read::read_items(&chain, items, self.read_threads, landed)
    }

    /// Fills `buf` with bytes `offset..offset + buf.len()` of an item at a committed epoch;
    /// the range must lie inside the item.
    pub fn read_item_range(
        &self,
        rank: u32,
        epoch: u64,
        name: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        self.chain(rank, epoch)?.read_exact(name, offset, buf)
    }

    /// Opens an epoch for random reads — committed or, failing that, prepared (the cluster
    /// encodes an epoch before it commits). The view keeps the epoch's files open, so it
    /// stays readable while retention removes the directories.
    pub fn view(&self, rank: u32, epoch: u64) -> Result<EpochView> {
        Ok(EpochView {
            chain: Chain::open(&self.rank_dir(rank), rank, epoch, true)?,
        })
    }

    /// Streams an item of a committed epoch.
    pub fn item_reader(&self, rank: u32, epoch: u64, name: &str) -> Result<ItemReader> {
        ItemReader::new(self.chain(rank, epoch)?, name)
    }

    /// Deletes every epoch of `rank`, committed or not, and the rank's directory (a job
    /// that starts over). Under the rank's lock; crash-safe: the directory is renamed away
    /// first, so a crash leaves either the rank whole or a `trash-` leftover that the next
    /// open removes.
    pub fn remove_rank(&self, rank: u32) -> Result<()> {
        let dir = self.rank_dir(rank);
        if !dir.is_dir() {
            return Ok(());
        }
        let lock = RankLock::acquire(&self.root, rank, self.lock_wait)?;
        layout::remove_rank_dir(&self.root, &dir)?;
        drop(lock);
        Ok(())
    }

    /// Takes the rank's lock and removes crash leftovers, including every prepared epoch
    /// when `discard_prepared` (a new epoch supersedes undecided ones).
    fn lock_rank(&self, rank: u32, discard_prepared: bool) -> Result<RankLock> {
        let lock = RankLock::acquire(&self.root, rank, self.lock_wait)?;
        cleanup_rank(&self.rank_dir(rank), discard_prepared)?;
        Ok(lock)
    }

    fn begin(&self, lock: RankLock, plan: Plan) -> Result<EpochWriter> {
        EpochWriter::begin(
            &self.root,
            lock,
            plan,
            self.options.block_size,
            self.options.retention,
        )
    }

    /// Plan for a new epoch following committed epoch `parent` (or none).
    fn plan_after(&self, rank: u32, epoch: u64, parent: Option<u64>) -> Result<Plan> {
        let source = parent.map(|p| self.chain(rank, p)).transpose()?;
        let full = source
            .as_ref()
            .is_none_or(|c| self.options.retention.wants_full(&c.target().manifest));
        Ok(Plan {
            rank,
            epoch,
            generation: 0,
            parent,
            source,
            full,
        })
    }

    /// Starts writing `epoch` of `rank`, which must be newer than the latest committed
    /// epoch. Prepared but uncommitted epochs of the rank are discarded. Fails when the
    /// latest committed epoch cannot be read (a damaged chain) rather than silently
    /// dropping carried-over items; [`Store::import_image`] can then write a
    /// self-contained full epoch.
    pub fn writer(&self, rank: u32, epoch: u64) -> Result<EpochWriter> {
        self.writer_after(rank, epoch, false)
    }

    /// [`Store::writer`] for a caller that writes every item it keeps in each epoch, as the
    /// rank library does: when the latest committed epoch cannot be read — a manifest that
    /// fails its seal, a data file cut short, a broken chain — the epoch starts full and
    /// self-contained (no parent, nothing carried over) instead of failing, so that rot in
    /// one committed epoch does not fail every later checkpoint of the rank. The damaged
    /// epoch is left as it is, for the cluster to repair or retention to drop.
    pub fn writer_of_every_item(&self, rank: u32, epoch: u64) -> Result<EpochWriter> {
        self.writer_after(rank, epoch, true)
    }

    fn writer_after(&self, rank: u32, epoch: u64, whole_over_damage: bool) -> Result<EpochWriter> {
        if epoch == 0 {
            return Err(StoreError::Invalid("epochs start at 1".into()));
        }
        let lock = self.lock_rank(rank, true)?;
        let latest = self.latest_committed(rank)?;
        if let Some(l) = latest.filter(|&l| l >= epoch) {
            return Err(StoreError::Invalid(format!(
                "rank {rank} epoch {epoch} is not newer than committed epoch {l}"
            )));
        }
        let plan = match self.plan_after(rank, epoch, latest) {
            Err(e) if whole_over_damage && e.is_damage() => {
                tracing::warn!(rank, epoch, error = %e, "the epoch before is damaged: this one is stored whole");
                Plan::self_contained(rank, epoch)
            }
            plan => plan?,
        };
        self.begin(lock, plan)
    }

    /// Starts a self-contained full image of `rank` as `epoch`, with no parent: unlike
    /// [`Store::writer`], items not written are absent, nothing is carried over. Restoring a
    /// flushed image prepares it this way, to be committed on the cluster's decision.
    /// `epoch` must be newer than the latest committed epoch; prepared epochs of the rank
    /// are discarded.
    pub fn image_writer(&self, rank: u32, epoch: u64) -> Result<EpochWriter> {
        if epoch == 0 {
            return Err(StoreError::Invalid("epochs start at 1".into()));
        }
        let lock = self.lock_rank(rank, true)?;
        if let Some(l) = self.latest_committed(rank)?.filter(|&l| l >= epoch) {
            return Err(StoreError::Invalid(format!(
                "rank {rank} epoch {epoch} is not newer than committed epoch {l}"
            )));
        }
        self.begin(lock, Plan::self_contained(rank, epoch))
    }

    /// Keeps committed `epoch` of `rank` (and what it depends on) from retention until the
    /// [`Pin`] is dropped, so that it can be copied out (flushed) while the rank checkpoints
    /// on. An error if the epoch is not (or no longer) committed.
    pub fn pin(&self, rank: u32, epoch: u64) -> Result<Pin> {
        Pin::create(&self.rank_dir(rank), rank, epoch)
    }

    /// Removes every pin of every rank: called by the pins' owner when it starts, since any
    /// pin it finds was left by a process of its that died.
    pub fn clear_pins(&self) -> Result<()> {
        for rank in self.ranks()? {
            layout::clear_pins(&self.rank_dir(rank))?;
        }
        Ok(())
    }

    /// Takes up a prepared epoch left by an earlier (possibly crashed) process, to commit
    /// or abort it as the cluster decided.
    pub fn resume_prepared(&self, rank: u32, epoch: u64) -> Result<PreparedEpoch> {
        let lock = self.lock_rank(rank, false)?;
        let dir = self.rank_dir(rank);
        let scan = scan_rank(&dir)?;
        let generation = scan
            .prepared_gen(epoch)
            .ok_or(StoreError::NoEpoch { rank, epoch })?;
        // Everything the epoch depends on must be intact before it may be committed.
        let chain = Chain::open(&dir, rank, epoch, true)?;
        let manifest = &chain.target().manifest;
        debug_assert_eq!(manifest.generation, generation);
        Ok(PreparedEpoch::resume(
            &self.root,
            lock,
            manifest,
            self.options.retention,
        ))
    }

    /// Rewrites the latest committed epoch of `rank` as a full image (a new generation),
    /// so the delta chain behind it can be retired. Returns the epoch, or `None` when there
    /// is nothing to do (no epoch, or already full).
    pub fn coalesce(&self, rank: u32) -> Result<Option<u64>> {
        let lock = self.lock_rank(rank, false)?;
        let dir = self.rank_dir(rank);
        let scan = scan_rank(&dir)?;
        let Some(latest) = scan.latest() else {
            return Ok(None);
        };
        let chain = self.chain(rank, latest)?;
        let m = &chain.target().manifest;
        if m.full {
            return Ok(None);
        }
        let (generation, parent) = (m.generation + 1, m.parent);
        let plan = Plan {
            rank,
            epoch: latest,
            generation,
            parent,
            source: Some(chain),
            full: true,
        };
        self.begin(lock, plan)?.commit()?;
        Ok(Some(latest))
    }

    /// Installs `image` as committed epoch `epoch` of `rank` (a full image), with the same
    /// crash-safe protocol as any write: recovery uses it to place a decoded image on a
    /// spare node. If `epoch` is already committed the image replaces it as a new
    /// generation (repair of a damaged epoch); otherwise `epoch` must be newer than the
    /// latest committed epoch. Prepared epochs of the rank are discarded.
    pub fn import_image(&self, rank: u32, epoch: u64, image: &Image) -> Result<()> {
        let items: Vec<(String, u64)> = image
            .items
            .iter()
            .map(|(name, content)| (name.clone(), content.len() as u64))
            .collect();
        self.import_image_from(rank, epoch, &items, &mut |name, offset, window| {
            let content = &image.items[name];
            window.copy_from_slice(&content[offset as usize..offset as usize + window.len()]);
            Ok::<(), StoreError>(())
        })
    }

    /// [`Store::import_image`] of an image too large to hold: `items` are its items' names
    /// and lengths, and `fill(name, offset, window)` gives their bytes window by window
    /// (each item in turn, ascending offsets), so memory stays at one window. A failure of
    /// `fill` is returned as it is, and nothing is installed.
    pub fn import_image_from<E: From<StoreError>>(
        &self,
        rank: u32,
        epoch: u64,
        items: &[(String, u64)],
        fill: &mut ImageFill<'_, E>,
    ) -> std::result::Result<(), E> {
        let mut failure = None;
        let mut fill = |name: &str, offset: u64, window: &mut [u8]| {
            fill(name, offset, window).map_err(|e| {
                failure = Some(e);
                StoreError::Invalid(format!("the source of rank {rank}'s image failed"))
            })
        };
        let installed = self.import_windows(rank, epoch, items, &mut fill);
        match failure {
            Some(e) => Err(e),
            None => Ok(installed?),
        }
    }

    fn import_windows(
        &self,
        rank: u32,
        epoch: u64,
        items: &[(String, u64)],
        fill: &mut ImageFill<'_, StoreError>,
    ) -> Result<()> {
        if epoch == 0 {
            return Err(StoreError::Invalid("epochs start at 1".into()));
        }
        let lock = self.lock_rank(rank, true)?;
        let dir = self.rank_dir(rank);
        let scan = scan_rank(&dir)?;
        let (generation, parent) = match scan.committed_gen(epoch) {
            // Keep the recorded parent when the damaged manifest still says it.
            Some(g) => (
                g + 1,
                locate(&dir, &scan, rank, epoch, false)
                    .ok()
                    .and_then(|d| d.manifest.parent),
            ),
            None => match scan.latest() {
                Some(l) if l > epoch => {
                    return Err(StoreError::Invalid(format!(
                        "rank {rank} epoch {epoch} is older than committed epoch {l}"
                    )))
                }
                _ => (0, None),
            },
        };
        let plan = Plan {
            rank,
            epoch,
            generation,
            parent,
            source: None,
            full: true,
        };
        let mut writer = self.begin(lock, plan)?;
        for (name, len) in items {
            writer.put_full_from(name, *len, &mut |offset, window| fill(name, offset, window))?;
        }
        writer.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_choice_prefers_tmpfs_then_xdg_then_home() {
        let shm = Path::new("/dev/shm");
        let xdg = Some(OsString::from("/x/state"));
        let home = Some(OsString::from("/home/u"));
        assert_eq!(
            pick_root(Some(shm), xdg.clone(), home.clone(), 1000),
            PathBuf::from("/dev/shm/eckpt-1000")
        );
        assert_eq!(
            pick_root(None, xdg, home.clone(), 1000),
            PathBuf::from("/x/state/eckpt")
        );
        assert_eq!(
            pick_root(None, Some(OsString::from("relative")), home, 1000),
            PathBuf::from("/home/u/.local/state/eckpt")
        );
        assert_eq!(
            pick_root(None, None, None, 1000),
            std::env::temp_dir().join("eckpt-1000")
        );
    }

    #[test]
    fn default_root_is_per_job_and_never_escapes() {
        let root = default_root("4242.pbs/../x").unwrap();
        assert_eq!(root.file_name().unwrap(), "job-4242.pbs_.._x");
        assert_ne!(default_root("1").unwrap(), default_root("2").unwrap());
    }

    #[test]
    fn created_directories_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("a/b");
        let store = Store::open(&root).unwrap();
        let mut w = store.writer(0, 1).unwrap();
        w.put_full("x", b"x").unwrap();
        w.commit().unwrap();
        let epoch = fs::read_dir(root.join("rank.0"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap();
        for dir in [tmp.path().join("a"), root.clone(), root.join("rank.0"), epoch] {
            let mode = fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
    }

    #[test]
    fn retention_decides_full_by_chain_length_and_ratio() {
        let policy = RetentionPolicy {
            keep_committed: 1,
            max_chain: 3,
            max_chain_ratio: 0.5,
        };
        let mut m = Manifest {
            format: MANIFEST_FORMAT,
            rank: 0,
            epoch: 4,
            generation: 0,
            parent: Some(3),
            full: false,
            chain_len: 2,
            chain_bytes: 40,
            data_len: 0,
            items: vec![ItemManifest {
                name: "a".into(),
                len: 100,
                block_size: 10,
                blocks: vec![],
            }],
        };
        assert!(!policy.wants_full(&m));
        m.chain_bytes = 51;
        assert!(policy.wants_full(&m));
        m.chain_bytes = 10;
        m.chain_len = 3;
        assert!(policy.wants_full(&m));
    }

    #[test]
    fn two_phase_prepare_resume_abort() {
        let dir = tempfile::tempdir().unwrap();
        // Refused at once rather than after the default wait for the lock (a unit test, to set
        // the wait that no caller of the library needs to change).
        let mut store = Store::open(dir.path()).unwrap();
        store.lock_wait = Duration::ZERO;
        let mut w = store.writer(1, 1).unwrap();
        w.put_full("x", b"first").unwrap();
        w.commit().unwrap();

        let mut w = store.writer(1, 2).unwrap();
        w.put_full("x", b"second").unwrap();
        let prepared = w.prepare().unwrap();
        assert_eq!(prepared.epoch(), 2);
        // While prepared: locked, not committed, but the cluster can already diff it.
        assert!(matches!(store.writer(1, 3), Err(StoreError::Busy { rank: 1 })));
        assert_eq!(store.latest_committed(1).unwrap(), Some(1));
        let xor = store.dirty_xor(1, 2).unwrap();
        assert_eq!(xor.len(), 1);
        let want: Vec<u8> = b"first\0".iter().zip(b"second").map(|(a, b)| a ^ b).collect();
        assert_eq!(xor[0].bytes, want);
        drop(prepared); // as if the process died between prepare and commit

        let reopened = Store::open(dir.path()).unwrap();
        assert_eq!(reopened.prepared_epochs(1).unwrap(), [2]);
        assert_eq!(reopened.ranks().unwrap(), [1]);
        assert_eq!(reopened.latest_committed(1).unwrap(), Some(1));
        assert!(
            reopened.read_image(1, 2).is_err(),
            "prepared epochs are not readable as committed"
        );
        reopened.resume_prepared(1, 2).unwrap().commit().unwrap();
        assert_eq!(reopened.latest_committed(1).unwrap(), Some(2));
        assert_eq!(reopened.read_image(1, 2).unwrap().items["x"], b"second");

        let mut w = reopened.writer(1, 3).unwrap();
        w.put_full("x", b"third").unwrap();
        w.prepare().unwrap().abort().unwrap();
        assert!(reopened.prepared_epochs(1).unwrap().is_empty());
        assert_eq!(reopened.latest_committed(1).unwrap(), Some(2));

        // A new writer discards an undecided prepared epoch.
        let mut w = reopened.writer(1, 3).unwrap();
        w.put_full("x", b"third").unwrap();
        drop(w.prepare().unwrap());
        let w = reopened.writer(1, 4).unwrap();
        assert!(reopened.prepared_epochs(1).unwrap().is_empty());
        drop(w); // abandoned: leaves nothing behind
        let entries = fs::read_dir(reopened.root().join("rank.1")).unwrap().count();
        assert_eq!(entries, 3, "lock + epochs 1 and 2");
    }
}
