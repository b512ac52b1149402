//! An agent's coded objects: the parity it holds and the stripe blobs it keeps, per
//! object (`group`, `epoch`), with the same prepare/commit discipline as the store.
//!
//! ```text
//! coded/
//!   obj-g<G>-e<E>/          committed object: parity + parity.json, and/or blob
//!                           (prepared: blob.plan, then blob.tmp while the encode writes it)
//!     stage-<V>             update mode: new contents of the changed parity bytes for version V
//!                           (stage-<V>.work while the update folds its changes)
//!   prepared-g<G>-e<E>/     written by an encode, awaiting the coordinator's decision
//!   rebuild-*/              shards being decoded here
//! ```
//!
//! Committing is one rename of the object directory. An `update` epoch never touches the
//! committed parity before the decision: it stages the changed bytes' new contents (a redo
//! log, idempotent to apply), and applies them only once the epoch is committed, so an
//! aborted epoch leaves the parity exactly as it was.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use eckpt_coding::exec::xor_into;
use eckpt_coding::ObjectId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use eckpt_cluster_api::dirs::{fsync_dir, write_atomic};
use eckpt_cluster_api::io_at;
use eckpt_cluster_api::ClusterError;
use eckpt_durable::sealed;

use crate::chunk_crc::ChunkDifference;
use crate::chunk_io::write_checksummed;

/// What `parity.json` records.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ParityManifest {
    chunk: u32,
    /// CRC-32C of each chunk.
    crcs: Vec<u32>,
    /// The epoch whose state the parity describes (moves forward with `update` epochs).
    version: u64,
}

const PARITY: &str = "parity";
const PARITY_MANIFEST: &str = "parity.json";
const BLOB: &str = "blob";
const BLOB_PLAN: &str = "blob.plan";

/// The coded objects of one agent.
#[derive(Debug, Clone)]
pub struct ParityStore {
    dir: PathBuf,
}

impl ParityStore {
    /// Whether `name` is an entry a parity store makes in its directory (an object,
    /// committed or prepared, or a decode's scratch): what a purge deletes there.
    pub fn is_entry(name: &str) -> bool {
        ["obj-", "prepared-", "rebuild-", "tmp-"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
    }

    /// Opens (creating) the directory and removes what interrupted decodes left.
    pub fn open(dir: &Path) -> Result<ParityStore, ClusterError> {
        fs::create_dir_all(dir).map_err(io_at(dir))?;
        for entry in fs::read_dir(dir).map_err(io_at(dir))? {
            let entry = entry.map_err(io_at(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("rebuild-") || name.starts_with("tmp-") {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
        Ok(ParityStore {
            dir: dir.to_path_buf(),
        })
    }

    fn committed_dir(&self, id: ObjectId) -> PathBuf {
        self.dir.join(format!("obj-{id}"))
    }

    fn prepared_dir(&self, id: ObjectId) -> PathBuf {
        self.dir.join(format!("prepared-{id}"))
    }

    /// The object's directory: committed, else prepared.
    fn existing_dir(&self, id: ObjectId) -> Result<PathBuf, ClusterError> {
        [self.committed_dir(id), self.prepared_dir(id)]
            .into_iter()
            .find(|d| d.is_dir())
            .ok_or_else(|| ClusterError::NotFound(format!("object {id} is not held here")))
    }

    /// A directory for decoding into, removed when the agent next starts.
    pub fn scratch(&self, name: &str) -> Result<PathBuf, ClusterError> {
        let dir = self.dir.join(format!("rebuild-{name}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        Ok(dir)
    }

    fn prepared_dir_created(&self, id: ObjectId) -> Result<PathBuf, ClusterError> {
        let dir = self.prepared_dir(id);
        fs::create_dir_all(&dir).map_err(io_at(&dir))?;
        Ok(dir)
    }

    /// Records what this node's stripe blob for `id` will hold (prepared): describe plans
    /// it, the encode writes it.
    pub fn put_blob_plan(&self, id: ObjectId, plan: &impl Serialize) -> Result<(), ClusterError> {
        let path = self.prepared_dir_created(id)?.join(BLOB_PLAN);
        write_atomic(&path, &sealed::seal(plan))
    }

    /// The blob plan of `id`, if describe made one here.
    pub fn blob_plan<T: DeserializeOwned>(&self, id: ObjectId) -> Result<T, ClusterError> {
        let path = self.existing_dir(id)?.join(BLOB_PLAN);
        read_sealed(&path)
    }

    /// Whether a blob for `id` is planned here and not yet written.
    pub fn has_blob_plan(&self, id: ObjectId) -> bool {
        self.prepared_dir(id).join(BLOB_PLAN).is_file()
    }

    /// Where the blob of `id` is written before [`ParityStore::publish_blob`].
    pub fn blob_temp(&self, id: ObjectId) -> Result<PathBuf, ClusterError> {
        Ok(self.prepared_dir_created(id)?.join(format!("{BLOB}.tmp")))
    }

    /// Makes the written (and fsynced) blob of `id` the object's blob, durably, and drops
    /// its plan.
    pub fn publish_blob(&self, id: ObjectId) -> Result<(), ClusterError> {
        let dir = self.prepared_dir(id);
        let (tmp, path) = (dir.join(format!("{BLOB}.tmp")), dir.join(BLOB));
        // The blob's writer fsynced it; the plan's removal is made durable with the rename.
        fs::rename(&tmp, &path).map_err(io_at(&path))?;
        let plan = dir.join(BLOB_PLAN);
        fs::remove_file(&plan).map_err(io_at(&plan))?;
        fsync_dir(&dir)
    }

    /// The blob file of `id`.
    pub fn blob_path(&self, id: ObjectId) -> Result<PathBuf, ClusterError> {
        let path = self.existing_dir(id)?.join(BLOB);
        if path.is_file() {
            Ok(path)
        } else {
            Err(ClusterError::NotFound(format!("object {id} has no blob here")))
        }
    }

    /// Starts writing the parity of `id` (prepared): `chunks` chunks of `chunk` bytes.
    pub fn parity_writer(
        &self,
        id: ObjectId,
        chunks: u64,
        chunk: u32,
        version: u64,
    ) -> Result<ParityWriter, ClusterError> {
        let dir = self.prepared_dir_created(id)?;
        let path = dir.join(PARITY);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .read(true)
            .open(&path)
            .map_err(io_at(&path))?;
        file.set_len(chunks * u64::from(chunk)).map_err(io_at(&path))?;
        Ok(ParityWriter {
            file,
            path,
            dir,
            manifest: ParityManifest {
                chunk,
                crcs: vec![crc32c::crc32c(&vec![0u8; chunk as usize]); chunks as usize],
                version,
            },
        })
    }

    /// Opens the parity of `id` (committed, else prepared) for reading.
    pub fn parity_reader(&self, id: ObjectId) -> Result<ParityReader, ClusterError> {
        let dir = self.existing_dir(id)?;
        ParityReader::open(&dir, id)
    }

    /// Makes a prepared object committed. A no-op when it already is.
    pub fn commit(&self, id: ObjectId) -> Result<(), ClusterError> {
        let from = self.prepared_dir(id);
        let to = self.committed_dir(id);
        if from.is_dir() {
            if to.is_dir() {
                fs::remove_dir_all(&to).map_err(io_at(&to))?;
            }
            fs::rename(&from, &to).map_err(io_at(&to))?;
            fsync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Starts staging the update of `id` from version `parent` (the object's committed
    /// version, as the coordinator's task says) to `version`: the changes are folded into a
    /// work file, not into memory ([`StagedUpdate`]). The parity must be at `parent`: a
    /// committed update not applied yet (its commit did not reach this node) is applied
    /// first, and a parity at any other version is refused as damage — folding changes
    /// into another version's parity would make parity that decodes to neither.
    pub fn stage(&self, id: ObjectId, parent: u64, version: u64) -> Result<StagedUpdate, ClusterError> {
        let dir = self.committed_dir(id);
        let mut reader = ParityReader::open(&dir, id)?;
        if reader.version() < parent && self.staged_versions(id).contains(&parent) {
            self.apply_update(id, parent)?;
            reader = ParityReader::open(&dir, id)?;
        }
        if reader.version() != parent {
            return Err(ClusterError::Corrupt(format!(
                "the parity of object {id} here is at version {}, and the update to {version} builds on version {parent}",
                reader.version()
            )));
        }
        let work_path = dir.join(format!("stage-{version}.work"));
        let work = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&work_path)
            .map_err(io_at(&work_path))?;
        // Sparse: a chunk's slot reads as zeros (no change) until a change is folded in.
        work.set_len(reader.chunks() * reader.chunk() as u64)
            .map_err(io_at(&work_path))?;
        Ok(StagedUpdate {
            reader,
            work,
            work_path,
            path: dir.join(format!("stage-{version}")),
            ranges: BTreeMap::new(),
            buf: Vec::new(),
        })
    }

    /// Versions with a staged update, ascending.
    pub fn staged_versions(&self, id: ObjectId) -> Vec<u64> {
        let mut v: Vec<u64> = fs::read_dir(self.committed_dir(id))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("stage-")?.parse().ok())
            .collect();
        v.sort_unstable();
        v
    }

    /// Applies the staged update of `version` to the committed parity (idempotent: it
    /// writes new contents, not differences), then records the new version. Reads the stage
    /// a record at a time, twice: a damaged record refuses the stage before anything is
    /// written.
    pub fn apply_update(&self, id: ObjectId, version: u64) -> Result<(), ClusterError> {
        let dir = self.committed_dir(id);
        let stage_path = dir.join(format!("stage-{version}"));
        let stage = File::open(&stage_path).map_err(io_at(&stage_path))?;
        let stage_len = stage.metadata().map_err(io_at(&stage_path))?.len();
        let mpath = dir.join(PARITY_MANIFEST);
        let mut manifest = read_manifest(&mpath)?;
        let chunk = manifest.chunk as usize;
        let ppath = dir.join(PARITY);
        let parity = OpenOptions::new()
            .write(true)
            .open(&ppath)
            .map_err(io_at(&ppath))?;
        let records = || StageRecords {
            file: &stage,
            path: &stage_path,
            at: 0,
            len: stage_len,
            chunk,
            chunks: manifest.crcs.len(),
        };
        // Every record is checked before any is applied: a damaged stage changes nothing.
        for record in records() {
            record?;
        }
        for record in records() {
            let record = record?;
            let base = record.index * chunk as u64;
            for (offset, bytes) in record.pieces() {
                parity
                    .write_all_at(bytes, base + u64::from(offset))
                    .map_err(io_at(&ppath))?;
            }
            manifest.crcs[record.index as usize] = record.crc;
        }
        parity.sync_all().map_err(io_at(&ppath))?;
        manifest.version = version;
        write_atomic(&mpath, &sealed::seal(&manifest))?;
        fs::remove_file(&stage_path).map_err(io_at(&stage_path))?;
        fsync_dir(&dir)
    }

    /// Brings `id` to its committed `version`: the staged update of that version is applied
    /// if it is here (its commit was decided), and every older staged update is dropped.
    /// Those are of epochs that were aborted — one whose task reached this node only after
    /// the abort, or after the node resolved its store, is staged all the same — and never
    /// apply: a stage holds new contents, and applied over a later version it would put an
    /// aborted epoch's parity back. A newer stage is left to its own decision: the next
    /// epoch's may be staged already when this commit arrives late.
    pub fn settle(&self, id: ObjectId, version: u64) -> Result<(), ClusterError> {
        for staged in self.staged_versions(id) {
            if staged == version {
                self.apply_update(id, staged)?;
            } else if staged < version {
                self.drop_update(id, staged)?;
            }
        }
        Ok(())
    }

    /// Drops a staged update (the epoch was aborted).
    pub fn drop_update(&self, id: ObjectId, version: u64) -> Result<(), ClusterError> {
        let stage = self.committed_dir(id).join(format!("stage-{version}"));
        match fs::remove_file(&stage) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_at(&stage)(e)),
            _ => Ok(()),
        }
    }

    /// Removes every object not in `keep`, committed or prepared.
    pub fn retain(&self, keep: &[ObjectId]) -> Result<(), ClusterError> {
        for (id, dir) in self.objects()? {
            if !keep.contains(&id) {
                fs::remove_dir_all(&dir).map_err(io_at(&dir))?;
            }
        }
        fsync_dir(&self.dir)
    }

    /// Removes the prepared object `id` (an aborted encode).
    pub fn abort(&self, id: ObjectId) -> Result<(), ClusterError> {
        let dir = self.prepared_dir(id);
        if dir.is_dir() {
            fs::remove_dir_all(&dir).map_err(io_at(&dir))?;
        }
        Ok(())
    }

    /// The committed objects here (what a registration reports it holds).
    pub fn committed_objects(&self) -> Result<Vec<ObjectId>, ClusterError> {
        Ok(self
            .objects()?
            .into_iter()
            .map(|(id, _)| id)
            .filter(|&id| self.committed_dir(id).is_dir())
            .collect())
    }

    /// Every object here with its directory.
    pub fn objects(&self) -> Result<Vec<(ObjectId, PathBuf)>, ClusterError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_at(&self.dir))? {
            let entry = entry.map_err(io_at(&self.dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let id = name
                .strip_prefix("obj-")
                .or_else(|| name.strip_prefix("prepared-"))
                .and_then(ObjectId::parse);
            if let Some(id) = id {
                out.push((id, entry.path()));
            }
        }
        Ok(out)
    }

    /// Checks every parity chunk and blob of committed object `id`; describes damage.
    pub fn scrub(&self, id: ObjectId) -> Result<Option<String>, ClusterError> {
        let dir = self.committed_dir(id);
        if !dir.is_dir() {
            return Ok(Some(format!("object {id} is missing")));
        }
        if dir.join(PARITY_MANIFEST).is_file() {
            let reader = match ParityReader::open(&dir, id) {
                Ok(r) => r,
                Err(e) => return Ok(Some(e.to_string())),
            };
            let mut buf = vec![0u8; reader.chunk()];
            for c in 0..reader.chunks() {
                if let Err(e) = reader.read(c, &mut buf) {
                    return Ok(Some(e.to_string()));
                }
            }
        }
        Ok(None)
    }
}

fn read_manifest(path: &Path) -> Result<ParityManifest, ClusterError> {
    read_sealed(path)
}

/// Reads a sealed file: a damaged one (its checksum does not match) is corrupt, never
/// served.
fn read_sealed<T: DeserializeOwned>(path: &Path) -> Result<T, ClusterError> {
    let bytes = fs::read(path).map_err(io_at(path))?;
    sealed::unseal(&bytes).map_err(|e| ClusterError::Corrupt(format!("{}: {e}", path.display())))
}

/// Writes one object's parity chunk by chunk.
pub struct ParityWriter {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    manifest: ParityManifest,
}

impl ParityWriter {
    /// Writes chunk `index`, in byte ranges on up to `threads` threads.
    pub fn write(&mut self, index: u64, data: &[u8], threads: usize) -> Result<(), ClusterError> {
        let chunk = self.manifest.chunk as usize;
        if data.len() != chunk || index as usize >= self.manifest.crcs.len() {
            return Err(ClusterError::Protocol(format!(
                "parity chunk {index} of {} bytes does not fit {} chunks of {chunk}",
                data.len(),
                self.manifest.crcs.len()
            )));
        }
        let (file, path, at) = (&self.file, &self.path, index * chunk as u64);
        self.manifest.crcs[index as usize] = write_checksummed(data, threads, |offset, part| {
            file.write_all_at(part, at + offset as u64).map_err(io_at(path))
        })?;
        Ok(())
    }

    /// Makes the parity durable (still prepared).
    pub fn finish(self) -> Result<(), ClusterError> {
        self.file.sync_all().map_err(io_at(&self.path))?;
        write_atomic(&self.dir.join(PARITY_MANIFEST), &sealed::seal(&self.manifest))
    }
}

/// Reads one object's parity, verifying every chunk.
pub struct ParityReader {
    file: File,
    path: PathBuf,
    manifest: ParityManifest,
    id: ObjectId,
}

impl ParityReader {
    fn open(dir: &Path, id: ObjectId) -> Result<ParityReader, ClusterError> {
        let manifest = read_manifest(&dir.join(PARITY_MANIFEST))?;
        let path = dir.join(PARITY);
        let file = File::open(&path).map_err(io_at(&path))?;
        Ok(ParityReader {
            file,
            path,
            manifest,
            id,
        })
    }

    /// Bytes per chunk.
    pub fn chunk(&self) -> usize {
        self.manifest.chunk as usize
    }

    /// Chunks held.
    pub fn chunks(&self) -> u64 {
        self.manifest.crcs.len() as u64
    }

    /// The epoch whose state the parity describes.
    pub fn version(&self) -> u64 {
        self.manifest.version
    }

    /// The recorded CRC-32C of chunk `index`.
    fn recorded_crc(&self, index: u64) -> Result<u32, ClusterError> {
        self.manifest.crcs.get(index as usize).copied().ok_or_else(|| {
            ClusterError::Protocol(format!("parity chunk {index} of object {} out of range", self.id))
        })
    }

    /// Reads bytes from `offset` of chunk `index` into `buf`, unverified: a part cannot be
    /// checked against its chunk's CRC. (An update built on damaged bytes carries the damage
    /// into a chunk whose recorded CRC, taken from the changes, then fails.)
    fn read_part(&self, index: u64, offset: usize, buf: &mut [u8]) -> Result<(), ClusterError> {
        self.read_at(index, buf, index * self.manifest.chunk as u64 + offset as u64)
    }

    /// Reads `buf` from `at`, within chunk `index`. A file that ends before is damaged (cut
    /// short: a write its disk did not keep), as a chunk that fails its checksum is, so
    /// that the node is marked for repair rather than failing every epoch on it.
    fn read_at(&self, index: u64, buf: &mut [u8], at: u64) -> Result<(), ClusterError> {
        self.file.read_exact_at(buf, at).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => ClusterError::Corrupt(format!(
                "parity of object {} ({}) ends before its chunk {index}: cut short",
                self.id,
                self.path.display()
            )),
            _ => io_at(&self.path)(e),
        })
    }

    /// Reads chunk `index` into `buf` (one chunk) and checks its CRC.
    pub fn read(&self, index: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        if buf.len() != self.chunk() {
            return Err(ClusterError::Protocol(format!(
                "a {}-byte chunk asked of object {}, whose parity has {}-byte chunks",
                buf.len(),
                self.id,
                self.chunk()
            )));
        }
        let expected = self.recorded_crc(index)?;
        self.read_at(index, buf, index * self.manifest.chunk as u64)?;
        if crc32c::crc32c(buf) != expected {
            return Err(ClusterError::Corrupt(format!(
                "parity chunk {index} of object {} ({}) fails its checksum",
                self.id,
                self.path.display()
            )));
        }
        Ok(())
    }
}

/// The staged update of one object. While the update folds its changes, each changed
/// parity chunk's difference (`new ⊕ old`) accumulates in the chunk's slot of a sparse work
/// file, and the byte ranges changed are noted; memory holds only those ranges however much
/// the update touches. [`StagedUpdate::seal`] turns the differences into a redo log of the
/// changed bytes' new contents with each chunk's new CRC ([`StageRecord`]), which
/// [`ParityStore::apply_update`] applies at commit.
///
/// Only changed bytes are read, staged and written back: a 2 % update scatters its pages
/// over most 64 KiB chunks, and staging whole chunks moved ten times the changes through
/// the stage. The new CRC comes from the recorded one by linearity (CRC-32C is affine:
/// `crc(old ⊕ d) = crc(old) ⊕ crc(d) ⊕ crc(0…0)`), so damaged parity is never blessed: the
/// damage stays in a chunk whose recorded CRC then fails. Dropped unsealed, the update
/// leaves the parity as it was.
pub struct StagedUpdate {
    reader: ParityReader,
    work: File,
    work_path: PathBuf,
    path: PathBuf,
    /// The byte ranges `(offset, len)` changed in each touched chunk, as folded (they may
    /// overlap).
    ranges: BTreeMap<u64, Vec<(u32, u32)>>,
    /// Scratch for one change.
    buf: Vec<u8>,
}

impl StagedUpdate {
    /// Lets `change` XOR into bytes `offset..offset + len` of parity chunk `index`'s
    /// difference (zero until a change): the bytes `change` is given are what the update
    /// has added to them so far.
    pub fn modify(
        &mut self,
        index: u64,
        offset: usize,
        len: usize,
        change: impl FnOnce(&mut [u8]) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        let chunk = self.reader.chunk();
        if offset.checked_add(len).is_none_or(|end| end > chunk) || index >= self.reader.chunks() {
            return Err(ClusterError::Protocol(format!(
                "bytes {offset}+{len} of parity chunk {index}, of {} chunks of {chunk} bytes",
                self.reader.chunks()
            )));
        }
        let at = index * chunk as u64 + offset as u64;
        self.buf.resize(len, 0);
        let bytes = &mut self.buf[..len];
        self.work
            .read_exact_at(bytes, at)
            .map_err(io_at(&self.work_path))?;
        change(bytes)?;
        self.work
            .write_all_at(bytes, at)
            .map_err(io_at(&self.work_path))?;
        self.ranges
            .entry(index)
            .or_default()
            .push((offset as u32, len as u32));
        Ok(())
    }

    /// Parity chunks changed so far.
    pub fn touched(&self) -> usize {
        self.ranges.len()
    }

    /// Writes the redo log: for each changed chunk its new CRC and the new contents of its
    /// changed bytes (`old ⊕ difference`); makes it durable and publishes it.
    pub fn seal(self) -> Result<(), ClusterError> {
        let chunk = self.reader.chunk();
        let (tmp, mut out) = eckpt_durable::create_temp(&self.path).map_err(io_at(&self.path))?;
        let mut difference = ChunkDifference::new(chunk);
        let mut record = Vec::new();
        for (&index, ranges) in &self.ranges {
            let ranges = merged(ranges);
            let mut pieces = Vec::with_capacity(ranges.len());
            for &(offset, len) in &ranges {
                let (o, n) = (offset as usize, len as usize);
                let changed = &mut difference.bytes_mut()[o..o + n];
                self.work
                    .read_exact_at(changed, index * chunk as u64 + u64::from(offset))
                    .map_err(io_at(&self.work_path))?;
                let mut new = vec![0u8; n];
                self.reader.read_part(index, o, &mut new)?;
                xor_into(&mut new, changed);
                pieces.push((offset, new));
            }
            let crc = self.reader.recorded_crc(index)? ^ difference.take_move();
            StageRecord::encode(index, crc, &pieces, &mut record);
            out.write_all(&record).map_err(io_at(&tmp))?;
        }
        out.sync_all().map_err(io_at(&tmp))?;
        eckpt_durable::rename_durably(&tmp, &self.path).map_err(io_at(&self.path))
    }
}

impl Drop for StagedUpdate {
    /// The work file is scratch, sealed or not.
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.work_path);
    }
}

/// `ranges` sorted, with overlapping and adjacent ones joined.
fn merged(ranges: &[(u32, u32)]) -> Vec<(u32, u32)> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::with_capacity(sorted.len());
    for (offset, len) in sorted {
        match out.last_mut() {
            Some((o, l)) if offset <= *o + *l => *l = (*l).max(offset + len - *o),
            _ => out.push((offset, len)),
        }
    }
    out
}

/// Bytes of a stage record's head: its checksum (u32, over the rest of the record), the
/// chunk's index (u64), the chunk's new CRC (u32) and the number of pieces (u32).
const RECORD_HEAD: usize = 4 + 8 + 4 + 4;
/// Bytes of a piece's place in a record: offset in the chunk and length (u32 each).
const PIECE_HEAD: usize = 8;

/// The records of a stage file, read one at a time; the first damaged one ends it.
struct StageRecords<'a> {
    file: &'a File,
    path: &'a Path,
    at: u64,
    len: u64,
    chunk: usize,
    chunks: usize,
}

impl Iterator for StageRecords<'_> {
    type Item = Result<StageRecord, ClusterError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.len {
            return None;
        }
        let record = StageRecord::read(self.file, self.at, self.len, self.chunk, self.chunks);
        // After a damaged record nothing is where its length says: stop there.
        self.at = record.as_ref().map_or(self.len, |r| self.at + r.len);
        Some(record.map_err(|why| ClusterError::Corrupt(format!("{}: {why}", self.path.display()))))
    }
}

/// One record of a stage file: a changed parity chunk's new CRC and the new contents of its
/// changed bytes, in pieces (sorted, disjoint). Written by [`StagedUpdate::seal`], read back
/// by [`ParityStore::apply_update`] as a file that may be damaged.
struct StageRecord {
    index: u64,
    crc: u32,
    places: Vec<(u32, u32)>,
    bytes: Vec<u8>,
    /// Bytes the record takes in the file.
    len: u64,
}

impl StageRecord {
    /// Encodes the record of chunk `index` into `out`.
    fn encode(index: u64, crc: u32, pieces: &[(u32, Vec<u8>)], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&index.to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(pieces.len() as u32).to_le_bytes());
        for (offset, bytes) in pieces {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        }
        for (_, bytes) in pieces {
            out.extend_from_slice(bytes);
        }
        let checksum = crc32c::crc32c(&out[4..]);
        out[..4].copy_from_slice(&checksum.to_le_bytes());
    }

    /// Reads the record at `at` of a `file_len`-byte stage whose parity has `chunks` chunks
    /// of `chunk` bytes; why it is not a whole, valid record.
    fn read(file: &File, at: u64, file_len: u64, chunk: usize, chunks: usize) -> Result<StageRecord, String> {
        let read = |len: usize, from: u64| -> Result<Vec<u8>, String> {
            if (len as u64) > file_len - from {
                return Err("truncated record".into());
            }
            let mut buf = vec![0u8; len];
            file.read_exact_at(&mut buf, from).map_err(|e| e.to_string())?;
            Ok(buf)
        };
        let head = read(RECORD_HEAD, at)?;
        // `head` is `RECORD_HEAD` (20) bytes, read just above: the slices below (at 0, 4..12,
        // 12 and 16) are of the lengths asked.
        let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let index = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
        let (checksum, crc, count) = (word(0), word(12), word(16) as usize);
        if index as usize >= chunks || count > chunk {
            return Err(format!("bad record for chunk {index}"));
        }
        let place_bytes = read(count * PIECE_HEAD, at + RECORD_HEAD as u64)?;
        let mut places = Vec::with_capacity(count);
        let mut end = 0usize;
        for place in place_bytes.chunks_exact(PIECE_HEAD) {
            // `chunks_exact` gives `PIECE_HEAD` (8) bytes: two halves of 4.
            let offset = u32::from_le_bytes(place[..4].try_into().expect("4 bytes"));
            let len = u32::from_le_bytes(place[4..].try_into().expect("4 bytes"));
            if (offset as usize) < end || offset as usize + len as usize > chunk {
                return Err(format!("bad piece in the record for chunk {index}"));
            }
            end = offset as usize + len as usize;
            places.push((offset, len));
        }
        let total: usize = places.iter().map(|&(_, len)| len as usize).sum();
        let body_at = at + (RECORD_HEAD + place_bytes.len()) as u64;
        let bytes = read(total, body_at)?;
        let covered = crc32c::crc32c_append(crc32c::crc32c(&head[4..]), &place_bytes);
        if crc32c::crc32c_append(covered, &bytes) != checksum {
            return Err(format!("the record for chunk {index} fails its checksum"));
        }
        Ok(StageRecord {
            index,
            crc,
            places,
            bytes,
            len: (RECORD_HEAD + place_bytes.len() + total) as u64,
        })
    }

    /// Each piece's offset in the chunk and new contents.
    fn pieces(&self) -> impl Iterator<Item = (u32, &[u8])> {
        let mut at = 0usize;
        self.places.iter().map(move |&(offset, len)| {
            let bytes = &self.bytes[at..at + len as usize];
            at += len as usize;
            (offset, bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: ObjectId = ObjectId { group: 3, epoch: 7 };

    #[test]
    fn parity_is_prepared_then_committed_and_verified() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let mut w = coded.parity_writer(ID, 3, 512, 7).unwrap();
        w.write(1, &[5u8; 512], 1).unwrap();
        assert!(w.write(3, &[0u8; 512], 1).is_err());
        w.finish().unwrap();
        let mut buf = vec![0u8; 512];
        coded.parity_reader(ID).unwrap().read(1, &mut buf).unwrap();
        assert_eq!(buf, [5u8; 512]);
        coded.commit(ID).unwrap();
        assert!(tmp.path().join("obj-g3-e7/parity").is_file());
        // A flipped byte is reported, never returned.
        let path = tmp.path().join("obj-g3-e7/parity");
        let mut bytes = fs::read(&path).unwrap();
        bytes[600] ^= 1;
        fs::write(&path, bytes).unwrap();
        let err = coded.parity_reader(ID).unwrap().read(1, &mut buf).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        assert!(coded.scrub(ID).unwrap().is_some());
    }

    /// Chunks written in ranges by several threads land whole, and their recorded CRCs are
    /// what a verified read checks them against.
    #[test]
    fn chunks_written_on_several_threads_read_back_verified() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let chunk = (1 << 20) + 4096;
        let parity: Vec<u8> = (0..2 * chunk).map(|i| (i % 253) as u8).collect();
        let mut w = coded.parity_writer(ID, 2, chunk as u32, 7).unwrap();
        for (i, c) in parity.chunks(chunk).enumerate() {
            w.write(i as u64, c, 3).unwrap();
        }
        w.finish().unwrap();
        coded.commit(ID).unwrap();
        assert_eq!(parity_of(&coded), parity);
    }

    /// A parity file cut short (a write its disk acknowledged and lost, found by the
    /// simulator's torn writes) is damage, as a flipped byte is: every epoch that read it
    /// failed on an I/O error that marked nothing for repair.
    #[test]
    fn a_parity_file_cut_short_is_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        committed(&coded, 512, &[3u8; 1024]);
        let path = tmp.path().join("obj-g3-e7/parity");
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(700)
            .unwrap();
        let reader = coded.parity_reader(ID).unwrap();
        let mut buf = vec![0u8; 512];
        reader.read(0, &mut buf).unwrap();
        let err = reader.read(1, &mut buf).unwrap_err();
        assert!(
            matches!(err, ClusterError::Corrupt(_)) && err.to_string().contains("cut short"),
            "{err}"
        );
    }

    /// `parity.json`'s version decides whether a staged update is applied: a flipped
    /// version is refused as damage, never served as another version.
    #[test]
    fn a_damaged_parity_manifest_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        committed(&coded, 512, &[3u8; 1024]);
        let path = tmp.path().join("obj-g3-e7/parity.json");
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"version\": 7"), "{text}");
        fs::write(&path, text.replace("\"version\": 7", "\"version\": 6")).unwrap();
        let Err(err) = coded.parity_reader(ID) else {
            panic!("a damaged parity.json was read")
        };
        assert!(
            matches!(err, ClusterError::Corrupt(_)) && err.to_string().contains("damaged"),
            "{err}"
        );
    }

    /// Stages the update of the committed object from `parent` to `version` that XORs
    /// `fill` into the first 8 bytes of chunk 1.
    fn staged(coded: &ParityStore, parent: u64, version: u64, fill: u8) {
        let mut staged = coded.stage(ID, parent, version).unwrap();
        staged
            .modify(1, 0, 8, |bytes| {
                bytes.fill(fill);
                Ok(())
            })
            .unwrap();
        staged.seal().unwrap();
    }

    /// An update of an aborted epoch whose task reached a node after the abort (its coordinator
    /// link stalled, the node registered again) is staged all the same. Found by the
    /// simulator: the node restarted later, and its resolve applied that stage over the
    /// committed version as if it had been committed, putting the aborted epoch's contents
    /// back into chunks the next update then folded its changes into — parity that decoded
    /// to neither epoch, under a status that called the group protected.
    #[test]
    fn a_stage_of_an_aborted_epoch_never_applies() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let before = vec![3u8; 1024];
        committed(&coded, 512, &before);
        // Epoch 8, aborted, staged late; epoch 9 staged and committed.
        staged(&coded, 7, 8, 0xA8);
        staged(&coded, 7, 9, 0xA9);
        coded.settle(ID, 9).unwrap();
        let mut expected = before.clone();
        expected[512..520].fill(3 ^ 0xA9);
        assert_eq!(parity_of(&coded), expected);
        assert_eq!(coded.parity_reader(ID).unwrap().version(), 9);
        assert!(coded.staged_versions(ID).is_empty(), "the stale stage is gone");
        // Epoch 10 staged before epoch 9's commit arrives again: left to its own decision.
        staged(&coded, 9, 10, 0xB0);
        coded.settle(ID, 9).unwrap();
        assert_eq!(parity_of(&coded), expected);
        assert_eq!(coded.staged_versions(ID), vec![10]);
    }

    /// An update builds on the version its task names: a committed update whose commit did
    /// not reach the node is applied first; a parity at any other version is damage.
    #[test]
    fn an_update_builds_only_on_the_version_its_task_names() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        committed(&coded, 512, &[3u8; 1024]);
        let Err(err) = coded.stage(ID, 6, 8) else {
            panic!("an update was staged on another version")
        };
        assert!(
            matches!(err, ClusterError::Corrupt(_)) && err.to_string().contains("at version 7"),
            "{err}"
        );
        staged(&coded, 7, 8, 0xA8);
        // Epoch 8 committed, its commit lost: epoch 9's task says the parity is at 8.
        staged(&coded, 8, 9, 0xA9);
        assert_eq!(coded.parity_reader(ID).unwrap().version(), 8);
        assert_eq!(coded.staged_versions(ID), vec![9]);
    }

    /// A committed object of `chunks` chunks of `chunk` bytes holding `parity`.
    fn committed(coded: &ParityStore, chunk: usize, parity: &[u8]) {
        let mut w = coded
            .parity_writer(ID, (parity.len() / chunk) as u64, chunk as u32, 7)
            .unwrap();
        for (i, c) in parity.chunks(chunk).enumerate() {
            w.write(i as u64, c, 2).unwrap();
        }
        w.finish().unwrap();
        coded.commit(ID).unwrap();
    }

    fn parity_of(coded: &ParityStore) -> Vec<u8> {
        let reader = coded.parity_reader(ID).unwrap();
        let mut out = vec![0u8; reader.chunk() * reader.chunks() as usize];
        for (i, c) in out.chunks_mut(reader.chunk()).enumerate() {
            reader.read(i as u64, c).unwrap();
        }
        out
    }

    #[test]
    fn updates_apply_only_when_committed_and_idempotently() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let before: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
        committed(&coded, 512, &before);
        let stage = |version| {
            let mut staged = coded.stage(ID, 7, version).unwrap();
            staged
                .modify(1, 100, 12, |bytes| {
                    assert_eq!(bytes, [0; 12], "a difference starts at zero");
                    bytes.fill(9);
                    Ok(())
                })
                .unwrap();
            staged
                .modify(1, 108, 8, |bytes| {
                    assert_eq!(bytes[..4], [9; 4], "a second change sees the first");
                    bytes.iter_mut().for_each(|b| *b ^= 7);
                    Ok(())
                })
                .unwrap();
            assert_eq!(staged.touched(), 1);
            staged.seal().unwrap();
        };
        stage(8);
        assert_eq!(coded.staged_versions(ID), vec![8]);
        assert_eq!(parity_of(&coded), before, "staging leaves the parity alone");
        coded.drop_update(ID, 8).unwrap();
        stage(9);
        let mut expected = before.clone();
        expected[512 + 100..512 + 108].iter_mut().for_each(|b| *b ^= 9);
        expected[512 + 108..512 + 112]
            .iter_mut()
            .for_each(|b| *b ^= 9 ^ 7);
        expected[512 + 112..512 + 116].iter_mut().for_each(|b| *b ^= 7);
        // Applied twice (a crash after the writes, before the stage was removed): the same.
        let stage_file = tmp.path().join("obj-g3-e7/stage-9");
        let copy = fs::read(&stage_file).unwrap();
        coded.apply_update(ID, 9).unwrap();
        fs::write(&stage_file, copy).unwrap();
        coded.apply_update(ID, 9).unwrap();
        assert_eq!(coded.parity_reader(ID).unwrap().version(), 9);
        assert_eq!(
            parity_of(&coded),
            expected,
            "every chunk verifies against its new CRC"
        );
        assert!(coded.staged_versions(ID).is_empty());
        let names: Vec<_> = fs::read_dir(tmp.path().join("obj-g3-e7"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            !names.iter().any(|n| n.to_string_lossy().starts_with("stage-")),
            "{names:?}"
        );
    }

    #[test]
    fn a_damaged_stage_is_refused_and_damaged_parity_is_not_blessed() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        committed(&coded, 256, &[3u8; 1024]);
        let mut staged = coded.stage(ID, 7, 8).unwrap();
        for index in [2, 0] {
            staged
                .modify(index, 10, 20, |bytes| {
                    bytes.fill(1);
                    Ok(())
                })
                .unwrap();
        }
        staged.seal().unwrap();
        let stage_file = tmp.path().join("obj-g3-e7/stage-8");
        let good = fs::read(&stage_file).unwrap();
        for damage in [good.len() - 1, 30] {
            let mut bad = good.clone();
            bad[damage] ^= 0x40;
            fs::write(&stage_file, &bad).unwrap();
            let err = coded.apply_update(ID, 8).unwrap_err();
            assert!(err.to_string().contains("stage-8"), "{err}");
        }
        fs::write(&stage_file, &good[..good.len() - 3]).unwrap();
        assert!(coded
            .apply_update(ID, 8)
            .unwrap_err()
            .to_string()
            .contains("truncated"));
        // (The last byte is in the second record: the first, valid, is not applied either.)
        assert_eq!(parity_of(&coded), [3u8; 1024], "a refused stage changes nothing");

        // A flipped parity byte outside the changed ones stays a checksum failure.
        let path = tmp.path().join("obj-g3-e7/parity");
        let mut bytes = fs::read(&path).unwrap();
        bytes[2 * 256 + 200] ^= 1;
        fs::write(&path, bytes).unwrap();
        let mut staged = coded.stage(ID, 7, 9).unwrap();
        staged
            .modify(2, 10, 20, |bytes| {
                bytes.fill(1);
                Ok(())
            })
            .unwrap();
        staged.seal().unwrap();
        coded.apply_update(ID, 9).unwrap();
        let mut buf = vec![0u8; 256];
        let err = coded.parity_reader(ID).unwrap().read(2, &mut buf).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    proptest::proptest! {
        /// Staging any changes and applying them gives the parity that XORing them into
        /// whole chunks gives, every chunk verified against its new CRC.
        #[test]
        fn a_staged_update_is_the_changes_xored_in(
            chunk in 1usize..300,
            seed in proptest::prelude::any::<u8>(),
            changes in proptest::collection::vec(
                (0u64..4, proptest::prelude::any::<proptest::sample::Index>(), proptest::collection::vec(proptest::prelude::any::<u8>(), 1..100)),
                0..12,
            ),
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let coded = ParityStore::open(tmp.path()).unwrap();
            let before: Vec<u8> = (0..4 * chunk).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            committed(&coded, chunk, &before);
            let mut expected = before.clone();
            let mut staged = coded.stage(ID, 7, 8).unwrap();
            for (index, at, bytes) in &changes {
                let at = at.index(chunk);
                let bytes = &bytes[..bytes.len().min(chunk - at)];
                xor_into(&mut expected[*index as usize * chunk + at..][..bytes.len()], bytes);
                staged.modify(*index, at, bytes.len(), |target| {
                    xor_into(target, bytes);
                    Ok(())
                }).unwrap();
            }
            staged.seal().unwrap();
            coded.apply_update(ID, 8).unwrap();
            proptest::prop_assert_eq!(parity_of(&coded), expected);
        }
    }

    #[test]
    fn retain_keeps_only_what_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let other = ObjectId { group: 1, epoch: 2 };
        for id in [ID, other] {
            coded.put_blob_plan(id, &serde_json::json!({"plan": 1})).unwrap();
            fs::write(coded.blob_temp(id).unwrap(), b"blob").unwrap();
            coded.publish_blob(id).unwrap();
            assert!(!coded.has_blob_plan(id));
        }
        coded.commit(other).unwrap();
        coded.retain(&[ID]).unwrap();
        assert!(coded.blob_path(ID).is_ok());
        assert!(coded.blob_path(other).is_err());
    }
}
