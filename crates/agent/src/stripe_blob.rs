//! Stripe blobs (mode `stripe`): a node's data shard for one stripe is the serialized deltas
//! of its ranks for the epoch — complete images for the first stripe of a chain — kept as a
//! file, so that the whole chain can be decoded after the store has moved on.
//!
//! ```text
//! "ECKSTRP1" | header length u32 | crc32c of the header u32 | header (JSON: where each
//! rank's delta sits in the body) | body: the ranks' serialized deltas, back to back
//! ```
//!
//! The blob is not built before the encode: describe only plans it ([`StripePlan`], whose
//! length follows from the store's manifests), and the encode writes it while it reads it
//! ([`BlobTee`]): a thread serializes the deltas from the store into the blob file, and the
//! encode reads each chunk from that file once the thread has written past it. Serializing
//! overlaps with the transfer, so the first stripe of a chain — complete images — costs
//! what a full encode costs, instead of a serialization pass before it.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use eckpt_cluster_api::{io_at, ClusterError};
use eckpt_coding::ObjectId;
use eckpt_cursor::Cursor;
use eckpt_store::{parse_delta_ref, Store};
use serde::{Deserialize, Serialize};

use crate::parity_store::ParityStore;

const BLOB_MAGIC: &[u8; 8] = b"ECKSTRP1";

/// Where each rank's delta sits in a stripe blob.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BlobHeader {
    /// `(rank, offset, len)` of each serialized delta after the header.
    ranks: Vec<(u32, u64, u64)>,
}

/// What a node's stripe blob for an epoch holds: planned at describe, written at encode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripePlan {
    /// The ranks whose deltas the blob carries, in order.
    pub ranks: Vec<u32>,
    /// The epoch.
    pub epoch: u64,
    /// Complete images (the first stripe of a chain) rather than deltas.
    pub complete: bool,
}

impl StripePlan {
    /// The blob's magic, header length, checksum and header, and the length of its body:
    /// from the store's manifests alone.
    fn head(&self, store: &Store) -> Result<(Vec<u8>, u64), ClusterError> {
        let mut header = BlobHeader { ranks: Vec::new() };
        let mut body = 0u64;
        for &rank in &self.ranks {
            let len = store.encoded_delta_len(rank, self.epoch, self.complete)?;
            header.ranks.push((rank, body, len));
            body += len;
        }
        // Cannot fail: a list of number triples (no map, no path, no serializer of its own),
        // written into a `Vec`.
        let header = serde_json::to_vec(&header).expect("a blob header always serializes");
        let mut head = Vec::with_capacity(16 + header.len());
        head.extend_from_slice(BLOB_MAGIC);
        head.extend_from_slice(&(header.len() as u32).to_le_bytes());
        head.extend_from_slice(&crc32c::crc32c(&header).to_le_bytes());
        head.extend_from_slice(&header);
        Ok((head, body))
    }

    /// The blob's length (what describe reports, so the group can pad to the largest).
    pub fn len(&self, store: &Store) -> Result<u64, ClusterError> {
        let (head, body) = self.head(store)?;
        Ok(head.len() as u64 + body)
    }

    /// Writes the blob to `out` (named `path` in errors; it needs no buffer), each rank's
    /// delta streamed from the store as it is read: memory bounded by the store's read
    /// window. Returns its length.
    pub fn write(&self, store: &Store, out: &mut impl Write, path: &Path) -> Result<u64, ClusterError> {
        let (head, body) = self.head(store)?;
        out.write_all(&head).map_err(io_at(path))?;
        for &rank in &self.ranks {
            store.write_delta(rank, self.epoch, self.complete, out, path)?;
        }
        Ok(head.len() as u64 + body)
    }
}

/// Parses a (possibly zero-padded, possibly decoded) stripe blob into its ranks' serialized
/// deltas, borrowed from `bytes` (a mapped file: nothing as large as an image is copied).
/// Treats the input as hostile: every offset is checked and every delta fully validated.
pub fn parse_stripe_blob(bytes: &[u8]) -> Result<Vec<(u32, &[u8])>, ClusterError> {
    let bad = |why: String| ClusterError::Corrupt(format!("stripe blob: {why}"));
    let mut cursor = Cursor::new(bytes);
    if cursor.array::<8>("magic").ok().as_ref() != Some(BLOB_MAGIC) {
        return Err(bad("bad magic".into()));
    }
    let header_len = cursor.u32("header length").map_err(|e| bad(e.to_string()))?;
    let crc = cursor.u32("header checksum").map_err(|e| bad(e.to_string()))?;
    let header = cursor
        .take(header_len.into(), "header")
        .map_err(|_| bad(format!("header of {header_len} bytes past the end")))?;
    if crc32c::crc32c(header) != crc {
        return Err(bad("header checksum mismatch".into()));
    }
    let header: BlobHeader = serde_json::from_slice(header).map_err(|e| bad(format!("header: {e}")))?;
    let body = cursor.rest();
    let mut deltas: Vec<(u32, &[u8])> = Vec::with_capacity(header.ranks.len());
    for (rank, offset, len) in header.ranks {
        let end = offset.checked_add(len).filter(|&e| e <= body.len() as u64);
        let end = end.ok_or_else(|| bad(format!("rank {rank} delta past the end")))?;
        let bytes = &body[offset as usize..end as usize];
        let delta = parse_delta_ref(bytes)?;
        if delta.rank != rank {
            return Err(bad(format!("entry for rank {rank} holds rank {}", delta.rank)));
        }
        if deltas.iter().any(|(r, _)| *r == rank) {
            return Err(bad(format!("rank {rank} twice")));
        }
        deltas.push((rank, bytes));
    }
    Ok(deltas)
}

/// Fills `buf` with the bytes of `file` (`len` long) from `offset`, zero past its end: a
/// blob read as a zero-padded shard.
fn read_padded(file: &File, len: u64, path: &Path, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
    let n = len.saturating_sub(offset).min(buf.len() as u64) as usize;
    file.read_exact_at(&mut buf[..n], offset).map_err(io_at(path))?;
    // Only the padding past the blob's end is zeroed: a chunk inside it is read over.
    buf[n..].fill(0);
    Ok(())
}

/// Reads a blob file as a zero-padded shard (a decode's survivors).
pub struct BlobShard {
    file: File,
    len: u64,
    path: PathBuf,
}

impl BlobShard {
    /// Opens a blob file.
    pub fn open(path: &Path) -> Result<BlobShard, ClusterError> {
        let file = File::open(path).map_err(io_at(path))?;
        let len = file.metadata().map_err(io_at(path))?.len();
        Ok(BlobShard {
            file,
            len,
            path: path.to_path_buf(),
        })
    }

    /// Fills `buf` with shard bytes from `offset` (zero past the blob's end).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        read_padded(&self.file, self.len, &self.path, offset, buf)
    }
}

/// How far the writing thread of a [`BlobTee`] has got.
#[derive(Default)]
struct Progress {
    /// Bytes in the file.
    written: u64,
    /// Set when the thread ends: its failure, if it failed.
    ended: Option<Option<String>>,
}

/// What the writing thread and the reader share.
#[derive(Default)]
struct Shared {
    progress: Mutex<Progress>,
    moved: Condvar,
    /// Set when the reader gives up: the thread stops at its next write.
    cancelled: AtomicBool,
}

/// The blob file as the writing thread writes it: counts what reached the file and wakes
/// the reader.
struct Counted {
    file: File,
    shared: Arc<Shared>,
}

impl Counted {
    fn advance(&self, n: usize) {
        eckpt_daemon::crash_only::lock(&self.shared.progress).written += n as u64;
        self.shared.moved.notify_all();
    }
}

impl Write for Counted {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.shared.cancelled.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the encode reading this blob ended"));
        }
        let n = self.file.write(bytes)?;
        self.advance(n);
        Ok(n)
    }

    fn write_vectored(&mut self, pieces: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        if self.shared.cancelled.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the encode reading this blob ended"));
        }
        let n = self.file.write_vectored(pieces)?;
        self.advance(n);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A stripe blob being written by a thread while the encode reads it as its data shard.
pub struct BlobTee {
    id: ObjectId,
    reader: File,
    path: PathBuf,
    len: u64,
    shared: Arc<Shared>,
    writer: Option<JoinHandle<Result<(), ClusterError>>>,
}

impl BlobTee {
    /// Starts writing the blob `describe` planned for object `id` into its temporary file.
    pub fn start(store: &Store, coded: &ParityStore, id: ObjectId) -> Result<BlobTee, ClusterError> {
        let plan: StripePlan = coded.blob_plan(id)?;
        let len = plan.len(store)?;
        let path = coded.blob_temp(id)?;
        let file = File::create(&path).map_err(io_at(&path))?;
        let reader = File::open(&path).map_err(io_at(&path))?;
        let shared = Arc::new(Shared::default());
        let (store, thread_shared, thread_path) = (store.clone(), shared.clone(), path.clone());
        let writer = std::thread::Builder::new()
            .name(format!("blob-{id}"))
            .spawn(move || {
                let mut out = Counted {
                    file,
                    shared: thread_shared.clone(),
                };
                let result = plan
                    .write(&store, &mut out, &thread_path)
                    .and_then(|_| out.file.sync_all().map_err(io_at(&thread_path)));
                let mut progress = eckpt_daemon::crash_only::lock(&thread_shared.progress);
                progress.ended = Some(result.as_ref().err().map(|e| e.to_string()));
                thread_shared.moved.notify_all();
                result
            })
            .map_err(|e| ClusterError::Internal(format!("starting the blob writer: {e}")))?;
        Ok(BlobTee {
            id,
            reader,
            path,
            len,
            shared,
            writer: Some(writer),
        })
    }

    /// Fills `buf` with shard bytes from `offset` (zero past the blob's end), once the
    /// writing thread has written them.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClusterError> {
        let need = (offset + buf.len() as u64).min(self.len);
        let mut progress = eckpt_daemon::crash_only::lock(&self.shared.progress);
        while progress.written < need {
            if let Some(ended) = &progress.ended {
                return Err(ClusterError::Internal(format!(
                    "the stripe blob {} ended at {} of {} bytes: {}",
                    self.path.display(),
                    progress.written,
                    self.len,
                    ended.as_deref().unwrap_or("no error")
                )));
            }
            progress = self
                .shared
                .moved
                .wait(progress)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        drop(progress);
        read_padded(&self.reader, self.len, &self.path, offset, buf)
    }

    /// Waits for the thread, checks the blob has its planned length and publishes it in the
    /// (prepared) object.
    pub fn finish(mut self, coded: &ParityStore) -> Result<(), ClusterError> {
        // Set when the tee is made; taken only here, which consumes the tee, and by `drop`.
        let writer = self.writer.take().expect("finished once");
        writer
            .join()
            .map_err(|_| ClusterError::Internal("the blob writer panicked".into()))??;
        let written = eckpt_daemon::crash_only::lock(&self.shared.progress).written;
        if written != self.len {
            return Err(ClusterError::Internal(format!(
                "the stripe blob {} has {written} bytes, {} planned",
                self.path.display(),
                self.len
            )));
        }
        coded.publish_blob(self.id)
    }
}

impl Drop for BlobTee {
    fn drop(&mut self) {
        // An encode that failed: stop the thread (the prepared object goes with the abort).
        self.shared.cancelled.store(true, Ordering::Relaxed);
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_blobs_are_refused() {
        assert!(parse_stripe_blob(b"short").is_err());
        let mut blob = Vec::new();
        blob.extend_from_slice(BLOB_MAGIC);
        let header = br#"{"ranks":[[0,0,1000]]}"#;
        blob.extend_from_slice(&(header.len() as u32).to_le_bytes());
        blob.extend_from_slice(&crc32c::crc32c(header).to_le_bytes());
        blob.extend_from_slice(header);
        let err = parse_stripe_blob(&blob).unwrap_err().to_string();
        assert!(err.contains("past the end"), "{err}");
        blob[20] ^= 1;
        assert!(parse_stripe_blob(&blob)
            .unwrap_err()
            .to_string()
            .contains("checksum"));
    }

    /// A store with two ranks whose epoch 2 changed a little since epoch 1.
    fn two_ranks(dir: &Path) -> Store {
        let store = Store::open(dir).unwrap();
        for rank in [3u32, 5] {
            let mut image: Vec<u8> = (0..300_000u32)
                .map(|i| (i.wrapping_mul(rank + 7) >> 3) as u8)
                .collect();
            let mut w = store.writer(rank, 1).unwrap();
            w.put_full("mem/a", &image).unwrap();
            w.commit().unwrap();
            image[70_000] ^= 1;
            let mut w = store.writer(rank, 2).unwrap();
            w.put_full("mem/a", &image).unwrap();
            w.put_full("file/b", b"a small file").unwrap();
            drop(w.prepare().unwrap());
        }
        store
    }

    #[test]
    fn the_tee_reads_what_it_writes_and_publishes_the_planned_blob() {
        let tmp = tempfile::tempdir().unwrap();
        let store = two_ranks(&tmp.path().join("store"));
        let coded = ParityStore::open(&tmp.path().join("coded")).unwrap();
        for (epoch, complete) in [(2, true), (2, false)] {
            let id = ObjectId {
                group: 0,
                epoch: epoch + u64::from(complete),
            };
            let plan = StripePlan {
                ranks: vec![3, 5],
                epoch,
                complete,
            };
            let mut expected = Vec::new();
            let len = plan.write(&store, &mut expected, Path::new("memory")).unwrap();
            assert_eq!((len, plan.len(&store).unwrap()), (expected.len() as u64, len));
            coded.put_blob_plan(id, &plan).unwrap();
            let tee = BlobTee::start(&store, &coded, id).unwrap();
            // Chunks in any order, the last one padded with zeros past the blob.
            let chunk = 64 * 1024;
            let chunks = (len as usize).div_ceil(chunk);
            // Stale bytes in the buffer: the padding past the blob must be zeroed by the read.
            let mut read = vec![0xa5u8; chunks * chunk];
            for q in (0..chunks).rev() {
                tee.read((q * chunk) as u64, &mut read[q * chunk..(q + 1) * chunk])
                    .unwrap();
            }
            tee.finish(&coded).unwrap();
            assert!(read[..len as usize] == expected[..] && read[len as usize..].iter().all(|&b| b == 0));
            let on_disk = std::fs::read(coded.blob_path(id).unwrap()).unwrap();
            assert!(on_disk == expected);
            let parents: Vec<(u32, Option<u64>)> = parse_stripe_blob(&on_disk)
                .unwrap()
                .into_iter()
                .map(|(rank, bytes)| (rank, parse_delta_ref(bytes).unwrap().parent))
                .collect();
            assert_eq!(
                parents,
                [(3, (!complete).then_some(1)), (5, (!complete).then_some(1))]
            );
        }
    }

    #[test]
    fn a_failed_writer_fails_the_read_instead_of_hanging() {
        let tmp = tempfile::tempdir().unwrap();
        let store = two_ranks(&tmp.path().join("store"));
        let coded = ParityStore::open(&tmp.path().join("coded")).unwrap();
        let id = ObjectId { group: 0, epoch: 9 };
        let plan = StripePlan {
            ranks: vec![3, 5],
            epoch: 2,
            complete: true,
        };
        coded.put_blob_plan(id, &plan).unwrap();
        let len = plan.len(&store).unwrap();
        // Rank 5's image is damaged on disk: the writer stops at the bad block.
        let data = tmp.path().join("store/rank.5/epoch-1-0/data");
        let mut bytes = std::fs::read(&data).unwrap();
        bytes[1000] ^= 1;
        std::fs::write(&data, bytes).unwrap();
        let tee = BlobTee::start(&store, &coded, id).unwrap();
        let mut buf = vec![0u8; 4096];
        let err = tee.read(len - 4096, &mut buf).unwrap_err().to_string();
        assert!(err.contains("checksum"), "{err}");
        assert!(tee.finish(&coded).is_err());
        assert!(coded.blob_path(id).is_err(), "no blob is published");
    }
}
