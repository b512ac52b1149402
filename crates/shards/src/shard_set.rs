//! Reading a shard directory: the manifest, whichever shard files exist, and batches of
//! blocks with each block checked against its recorded crc32c. A block is usable only if its
//! file exists, is long enough and the checksum matches; anything else is an erasure.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::ShardsError;
use crate::manifest::{Manifest, MANIFEST_FILE};

/// Why a block cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Damage {
    /// The shard file does not exist or cannot be opened.
    Missing,
    /// The shard file ends before this block.
    Truncated,
    /// The block's bytes do not match its checksum.
    ChecksumMismatch,
}

impl Damage {
    /// Short description for error lines.
    pub fn describe(self) -> &'static str {
        match self {
            Damage::Missing => "missing",
            Damage::Truncated => "truncated",
            Damage::ChecksumMismatch => "checksum mismatch",
        }
    }
}

/// An opened shard directory.
pub struct ShardSet {
    /// The validated manifest.
    pub manifest: Manifest,
    dir: PathBuf,
    files: Vec<Option<(File, u64)>>,
}

/// Blocks of one batch of stripes, for some shards, with their state.
pub struct BlockBatch {
    /// First stripe of the batch.
    pub first_stripe: u64,
    /// Stripes in the batch.
    pub stripes: usize,
    /// Per shard: `stripes · block_size` bytes (contents undefined where damaged or unread).
    pub blocks: Vec<Vec<u8>>,
    /// Per shard per stripe: `None` if the block is good, else the damage. Shards not read
    /// in this batch are marked `Missing` until read.
    pub damage: Vec<Vec<Option<Damage>>>,
    /// Which shards were read for this batch.
    pub read: Vec<bool>,
}

impl ShardSet {
    /// Opens `dir`, parses its manifest and opens every shard file that exists.
    pub fn open(dir: &Path) -> Result<ShardSet, ShardsError> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = std::fs::read(&path).map_err(ShardsError::io("read", &path))?;
        let manifest = Manifest::parse(&bytes).map_err(|source| ShardsError::Manifest { path, source })?;
        let files = manifest
            .shards
            .iter()
            .map(|s| {
                let file = File::open(dir.join(&s.file)).ok()?;
                let len = file.metadata().ok()?.len();
                Some((file, len))
            })
            .collect();
        Ok(ShardSet {
            manifest,
            dir: dir.to_path_buf(),
            files,
        })
    }

    /// The directory read.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Shards whose file is absent.
    pub fn missing_shards(&self) -> Vec<usize> {
        (0..self.files.len())
            .filter(|&i| self.files[i].is_none())
            .collect()
    }

    /// Actual length of shard `i`'s file, if it exists.
    pub fn file_len(&self, shard: usize) -> Option<u64> {
        self.files[shard].as_ref().map(|(_, len)| *len)
    }

    /// An empty batch buffer sized for `stripes` stripes.
    pub fn new_batch(&self, stripes: usize) -> BlockBatch {
        let n = self.files.len();
        let block = self.manifest.block_size as usize;
        BlockBatch {
            first_stripe: 0,
            stripes: 0,
            blocks: vec![vec![0; stripes * block]; n],
            damage: vec![Vec::with_capacity(stripes); n],
            read: vec![false; n],
        }
    }

    /// Starts a batch at `first_stripe` covering `stripes` stripes, with nothing read yet.
    pub fn reset_batch(&self, batch: &mut BlockBatch, first_stripe: u64, stripes: usize) {
        batch.first_stripe = first_stripe;
        batch.stripes = stripes;
        for (damage, read) in batch.damage.iter_mut().zip(batch.read.iter_mut()) {
            damage.clear();
            damage.resize(stripes, Some(Damage::Missing));
            *read = false;
        }
    }

    /// Reads shard `shard`'s blocks for the batch and checks each against the manifest.
    pub fn read_shard(&self, batch: &mut BlockBatch, shard: usize) -> Result<(), ShardsError> {
        let block = self.manifest.block_size as usize;
        batch.read[shard] = true;
        let Some((file, len)) = &self.files[shard] else {
            return Ok(()); // stays Missing
        };
        let start = batch.first_stripe * block as u64;
        let available = len.saturating_sub(start).min((batch.stripes * block) as u64) as usize;
        let buf = &mut batch.blocks[shard][..available];
        file.read_exact_at(buf, start).map_err(|source| ShardsError::Io {
            action: "read",
            path: self.dir.join(&self.manifest.shards[shard].file),
            source,
        })?;
        for s in 0..batch.stripes {
            let (from, to) = (s * block, (s + 1) * block);
            batch.damage[shard][s] = if to > available {
                Some(Damage::Truncated)
            } else if crc32c::crc32c(&batch.blocks[shard][from..to])
                != self.manifest.block_crc(shard, batch.first_stripe + s as u64)
            {
                Some(Damage::ChecksumMismatch)
            } else {
                None
            };
        }
        Ok(())
    }
}

impl BlockBatch {
    /// Shards whose block of local stripe `s` is damaged (among those read, and unread ones).
    pub fn damaged_in_stripe(&self, s: usize) -> Vec<usize> {
        (0..self.damage.len())
            .filter(|&i| self.damage[i][s].is_some())
            .collect()
    }
}
