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
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use eckpt_coding::ObjectId;
use eckpt_cursor::{Cursor, Truncated};
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

    /// Writes the staged new contents of changed parity chunks for `version`.
    pub fn stage_update(
        &self,
        id: ObjectId,
        version: u64,
        chunks: &BTreeMap<u64, Vec<u8>>,
    ) -> Result<(), ClusterError> {
        let dir = self.committed_dir(id);
        let path = dir.join(format!("stage-{version}"));
        let tmp = dir.join(format!("stage-{version}.tmp"));
        let mut out = std::io::BufWriter::new(File::create(&tmp).map_err(io_at(&tmp))?);
        for (index, bytes) in chunks {
            out.write_all(&index.to_le_bytes()).map_err(io_at(&tmp))?;
            out.write_all(&crc32c::crc32c(bytes).to_le_bytes())
                .map_err(io_at(&tmp))?;
            out.write_all(bytes).map_err(io_at(&tmp))?;
        }
        let file = out.into_inner().map_err(|e| io_at(&tmp)(e.into_error()))?;
        file.sync_all().map_err(io_at(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_at(&path))?;
        fsync_dir(&dir)
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
    /// writes new contents, not differences), then records the new version.
    pub fn apply_update(&self, id: ObjectId, version: u64) -> Result<(), ClusterError> {
        let dir = self.committed_dir(id);
        let stage = dir.join(format!("stage-{version}"));
        let mut bytes = Vec::new();
        File::open(&stage)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(io_at(&stage))?;
        let mpath = dir.join(PARITY_MANIFEST);
        let mut manifest = read_manifest(&mpath)?;
        let chunk = manifest.chunk as usize;
        let ppath = dir.join(PARITY);
        let parity = OpenOptions::new()
            .write(true)
            .open(&ppath)
            .map_err(io_at(&ppath))?;
        let mut cursor = Cursor::new(&bytes);
        let truncated = |e: Truncated| ClusterError::Corrupt(format!("{}: truncated: {e}", stage.display()));
        while !cursor.is_empty() {
            let index = cursor.u64("chunk index").map_err(truncated)?;
            let crc = cursor.u32("chunk checksum").map_err(truncated)?;
            let data = cursor.take(chunk as u64, "chunk").map_err(truncated)?;
            if crc32c::crc32c(data) != crc || index as usize >= manifest.crcs.len() {
                return Err(ClusterError::Corrupt(format!("{}: bad record", stage.display())));
            }
            parity
                .write_all_at(data, index * chunk as u64)
                .map_err(io_at(&ppath))?;
            manifest.crcs[index as usize] = crc;
        }
        parity.sync_all().map_err(io_at(&ppath))?;
        manifest.version = version;
        write_atomic(
            &mpath,
            &serde_json::to_vec(&manifest).expect("manifest serializes"),
        )?;
        fs::remove_file(&stage).map_err(io_at(&stage))?;
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
        let staged = BTreeMap::from([(1u64, vec![9u8; 512])]);
        coded.stage_update(ID, 8, &staged).unwrap();
        assert_eq!(coded.staged_versions(ID), vec![8]);
        let reader = coded.parity_reader(ID).unwrap();
        let mut buf = vec![0u8; 512];
        reader.read(1, &mut buf).unwrap();
        assert_eq!(buf, [0u8; 512], "staging leaves the parity alone");
        coded.drop_update(ID, 8).unwrap();
        coded.stage_update(ID, 9, &staged).unwrap();
        coded.apply_update(ID, 9).unwrap();
        let reader = coded.parity_reader(ID).unwrap();
        assert_eq!(reader.version(), 9);
        reader.read(1, &mut buf).unwrap();
        assert_eq!(buf, [9u8; 512]);
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
