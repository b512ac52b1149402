//! An agent's coded objects: the parity it holds and the stripe blobs it keeps, per
//! object (`group`, `epoch`), with the same prepare/commit discipline as the store.
//!
//! ```text
//! coded/
//!   obj-g<G>-e<E>/          committed object: parity + parity.json, and/or blob
//!                           (prepared: blob.plan, then blob.tmp while the encode writes it)
//!     stage-<V>             update mode: new contents of changed parity chunks for version V
//!   prepared-g<G>-e<E>/     written by an encode, awaiting the coordinator's decision
//!   rebuild-*/              shards being decoded here
//! ```
//!
//! Committing is one rename of the object directory. An `update` epoch never touches the
//! committed parity before the decision: it stages the changed chunks' new contents (a redo
//! log, idempotent to apply), and applies them only once the epoch is committed, so an
//! aborted epoch leaves the parity exactly as it was.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use eckpt_coding::ObjectId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use eckpt_cluster_api::dirs::{fsync_dir, write_atomic};
use eckpt_cluster_api::io_at;
use eckpt_cluster_api::ClusterError;

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
            .ok_or_else(|| ClusterError::Invalid(format!("object {id} is not held here")))
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
        write_atomic(&path, &serde_json::to_vec(plan).expect("a plan serializes"))
    }

    /// The blob plan of `id`, if describe made one here.
    pub fn blob_plan<T: DeserializeOwned>(&self, id: ObjectId) -> Result<T, ClusterError> {
        let path = self.existing_dir(id)?.join(BLOB_PLAN);
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        serde_json::from_slice(&bytes).map_err(|e| ClusterError::Corrupt(format!("{}: {e}", path.display())))
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
            Err(ClusterError::Invalid(format!("object {id} has no blob here")))
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

    /// Starts staging the update of `id` to `version`: the changed chunks' new contents
    /// go to a stage file as they are folded, not into memory ([`StagedUpdate`]).
    pub fn stage(&self, id: ObjectId, version: u64) -> Result<StagedUpdate, ClusterError> {
        let dir = self.committed_dir(id);
        let reader = ParityReader::open(&dir, id)?;
        let tmp = dir.join(format!("stage-{version}.tmp"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&tmp)
            .map_err(io_at(&tmp))?;
        Ok(StagedUpdate {
            buf: vec![0u8; reader.chunk()],
            reader,
            file,
            path: dir.join(format!("stage-{version}")),
            tmp,
            dir,
            at: BTreeMap::new(),
            end: 0,
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
    /// a chunk at a time.
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
        let bad = |why: &str| ClusterError::Corrupt(format!("{}: {why}", stage_path.display()));
        let mut record = vec![0u8; RECORD_HEAD + chunk];
        let mut at = 0u64;
        while at < stage_len {
            if stage_len - at < record.len() as u64 {
                return Err(bad("truncated record"));
            }
            stage.read_exact_at(&mut record, at).map_err(io_at(&stage_path))?;
            let (head, data) = record.split_at(RECORD_HEAD);
            let index = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
            let crc = u32::from_le_bytes(head[8..].try_into().expect("4 bytes"));
            if crc32c::crc32c(data) != crc || index as usize >= manifest.crcs.len() {
                return Err(bad("bad record"));
            }
            parity
                .write_all_at(data, index * chunk as u64)
                .map_err(io_at(&ppath))?;
            manifest.crcs[index as usize] = crc;
            at += record.len() as u64;
        }
        parity.sync_all().map_err(io_at(&ppath))?;
        manifest.version = version;
        write_atomic(
            &mpath,
            &serde_json::to_vec(&manifest).expect("manifest serializes"),
        )?;
        fs::remove_file(&stage_path).map_err(io_at(&stage_path))?;
        fsync_dir(&dir)
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
    let bytes = fs::read(path).map_err(io_at(path))?;
    serde_json::from_slice(&bytes).map_err(|e| ClusterError::Corrupt(format!("{}: {e}", path.display())))
}

/// Writes one object's parity chunk by chunk.
pub struct ParityWriter {
    file: File,
    path: PathBuf,
    dir: PathBuf,
    manifest: ParityManifest,
}

impl ParityWriter {
    /// Writes chunk `index`.
    pub fn write(&mut self, index: u64, data: &[u8]) -> Result<(), ClusterError> {
        let chunk = self.manifest.chunk as usize;
        if data.len() != chunk || index as usize >= self.manifest.crcs.len() {
            return Err(ClusterError::Invalid(format!(
                "parity chunk {index} of {} bytes does not fit {} chunks of {chunk}",
                data.len(),
                self.manifest.crcs.len()
            )));
        }
        self.file
            .write_all_at(data, index * chunk as u64)
            .map_err(io_at(&self.path))?;
        self.manifest.crcs[index as usize] = crc32c::crc32c(data);
        Ok(())
    }

    /// Makes the parity durable (still prepared).
    pub fn finish(self) -> Result<(), ClusterError> {
        self.file.sync_all().map_err(io_at(&self.path))?;
        write_atomic(
            &self.dir.join(PARITY_MANIFEST),
            &serde_json::to_vec(&self.manifest).expect("manifest serializes"),
        )
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

    /// Reads chunk `index` into `buf` (one chunk) and checks its CRC.
    pub fn read(&self, index: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        if buf.len() != self.chunk() {
            return Err(ClusterError::Invalid(format!(
                "a {}-byte chunk asked of object {}, whose parity has {}-byte chunks",
                buf.len(),
                self.id,
                self.chunk()
            )));
        }
        let expected = *self.manifest.crcs.get(index as usize).ok_or_else(|| {
            ClusterError::Invalid(format!("parity chunk {index} of object {} out of range", self.id))
        })?;
        self.file
            .read_exact_at(buf, index * self.manifest.chunk as u64)
            .map_err(io_at(&self.path))?;
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

/// Bytes before a chunk's contents in a stage record: its index (u64) and checksum (u32).
const RECORD_HEAD: usize = 12;

/// The staged update of one object: for every parity chunk it changes, a record (index,
/// checksum, new contents) in the stage file. A chunk is copied there from the committed
/// parity on first touch and changed in place after, so memory is one chunk however much
/// the update touches; [`StagedUpdate::seal`] writes the checksums and publishes the stage
/// (a redo log [`ParityStore::apply_update`] applies at commit). Dropped unsealed, it
/// leaves only a temporary file the next stage of the version replaces.
pub struct StagedUpdate {
    reader: ParityReader,
    file: File,
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    /// Stage-file offset of each touched chunk's record.
    at: BTreeMap<u64, u64>,
    end: u64,
    buf: Vec<u8>,
}

impl StagedUpdate {
    /// Lets `change` modify bytes `offset..offset + len` of parity chunk `index`'s new
    /// contents (the committed contents until a change).
    pub fn modify(
        &mut self,
        index: u64,
        offset: usize,
        len: usize,
        change: impl FnOnce(&mut [u8]) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        let chunk = self.reader.chunk();
        if offset.checked_add(len).is_none_or(|end| end > chunk) {
            return Err(ClusterError::Invalid(format!(
                "bytes {offset}+{len} of a {chunk}-byte parity chunk"
            )));
        }
        let record = match self.at.get(&index) {
            Some(&at) => at,
            None => {
                self.buf.resize(chunk, 0);
                self.reader.read(index, &mut self.buf)?;
                let at = self.end;
                let mut head = [0u8; RECORD_HEAD];
                head[..8].copy_from_slice(&index.to_le_bytes());
                self.file.write_all_at(&head, at).map_err(io_at(&self.tmp))?;
                self.file
                    .write_all_at(&self.buf, at + RECORD_HEAD as u64)
                    .map_err(io_at(&self.tmp))?;
                self.at.insert(index, at);
                self.end += (RECORD_HEAD + chunk) as u64;
                at
            }
        };
        let bytes_at = record + (RECORD_HEAD + offset) as u64;
        let bytes = &mut self.buf[..len];
        self.file
            .read_exact_at(bytes, bytes_at)
            .map_err(io_at(&self.tmp))?;
        change(bytes)?;
        self.file.write_all_at(bytes, bytes_at).map_err(io_at(&self.tmp))
    }

    /// Parity chunks changed so far.
    pub fn touched(&self) -> usize {
        self.at.len()
    }

    /// Writes each record's checksum, makes the stage durable and publishes it.
    pub fn seal(mut self) -> Result<(), ClusterError> {
        let chunk = self.reader.chunk();
        self.buf.resize(chunk, 0);
        for &at in self.at.values() {
            self.file
                .read_exact_at(&mut self.buf, at + RECORD_HEAD as u64)
                .map_err(io_at(&self.tmp))?;
            self.file
                .write_all_at(&crc32c::crc32c(&self.buf).to_le_bytes(), at + 8)
                .map_err(io_at(&self.tmp))?;
        }
        self.file.sync_all().map_err(io_at(&self.tmp))?;
        fs::rename(&self.tmp, &self.path).map_err(io_at(&self.path))?;
        fsync_dir(&self.dir)
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
        w.write(1, &[5u8; 512]).unwrap();
        assert!(w.write(3, &[0u8; 512]).is_err());
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

    #[test]
    fn updates_apply_only_when_committed_and_idempotently() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let mut w = coded.parity_writer(ID, 2, 512, 7).unwrap();
        w.write(0, &[1u8; 512]).unwrap();
        w.finish().unwrap();
        coded.commit(ID).unwrap();
        let stage = |version| {
            let mut staged = coded.stage(ID, version).unwrap();
            staged
                .modify(1, 100, 12, |bytes| {
                    bytes.fill(9);
                    Ok(())
                })
                .unwrap();
            staged
                .modify(1, 108, 8, |bytes| {
                    assert_eq!(bytes[..4], [9; 4], "a second change sees the first");
                    bytes.fill(7);
                    Ok(())
                })
                .unwrap();
            assert_eq!(staged.touched(), 1);
            staged.seal().unwrap();
        };
        stage(8);
        assert_eq!(coded.staged_versions(ID), vec![8]);
        let reader = coded.parity_reader(ID).unwrap();
        let mut buf = vec![0u8; 512];
        reader.read(1, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 512], "staging leaves the parity alone");
        coded.drop_update(ID, 8).unwrap();
        stage(9);
        coded.apply_update(ID, 9).unwrap();
        let reader = coded.parity_reader(ID).unwrap();
        assert_eq!(reader.version(), 9);
        reader.read(1, &mut buf).unwrap();
        let mut expected = [0u8; 512];
        expected[100..108].fill(9);
        expected[108..116].fill(7);
        assert_eq!(buf, expected);
        assert!(coded.staged_versions(ID).is_empty());
    }

    #[test]
    fn retain_keeps_only_what_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let coded = ParityStore::open(tmp.path()).unwrap();
        let other = ObjectId { group: 1, epoch: 2 };
        for id in [ID, other] {
            coded.put_blob_plan(id, &"plan").unwrap();
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
