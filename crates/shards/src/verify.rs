//! `eckpt verify`: check every block of every shard against the manifest and say, per shard,
//! what is damaged and whether the set can still be decoded. Writes nothing.

use std::path::Path;

use serde::Serialize;
use xxhash_rust::xxh3::Xxh3;

use crate::batch::stripes_per_batch;
use crate::error::ShardsError;
use crate::shard_set::ShardSet;

/// State of one shard file.
#[derive(Debug, Clone, Serialize)]
pub struct ShardReport {
    /// File name.
    pub file: String,
    /// `ok`, `missing` or `damaged`.
    pub status: &'static str,
    /// Actual file length (absent if missing).
    pub bytes: Option<u64>,
    /// Blocks whose checksum fails or that lie past the end of the file.
    pub bad_blocks: u64,
    /// First bad stripe, if any.
    pub first_bad_stripe: Option<u64>,
}

/// What `eckpt verify --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// Directory checked.
    pub dir: String,
    /// Data shards.
    pub k: usize,
    /// Parity shards.
    pub m: usize,
    /// Stripes in the set.
    pub stripes: u64,
    /// One entry per shard, data first.
    pub shards: Vec<ShardReport>,
    /// Stripes with at least one bad block.
    pub damaged_stripes: u64,
    /// Stripes with more than `m` bad blocks (cannot be decoded).
    pub unrecoverable_stripes: u64,
    /// Most bad blocks in any one stripe.
    pub worst_stripe_damage: usize,
    /// True when every block is intact.
    pub intact: bool,
    /// True when `eckpt decode` can rebuild the input.
    pub recoverable: bool,
    /// Whether the data shards, cut at the manifest's `input_len`, hash to its
    /// `input_xxh3`: `ok`, `mismatch` (the manifest does not describe these shards: a changed
    /// length or hash), or `unchecked` (a data block is damaged; decode checks it after
    /// rebuilding).
    pub input_hash: &'static str,
}

/// Reads every block of the set and reports the damage.
pub fn verify_dir(dir: &Path, progress: &(dyn Fn(u64) + Sync)) -> Result<VerifyReport, ShardsError> {
    let set = ShardSet::open(dir)?;
    let manifest = &set.manifest;
    let n = manifest.k + manifest.m;
    let per_batch = stripes_per_batch(manifest.k, manifest.block_size) as usize;
    let mut batch = set.new_batch(per_batch);
    let mut bad = vec![0u64; n];
    let mut first_bad = vec![None; n];
    let (mut damaged_stripes, mut unrecoverable, mut worst) = (0u64, 0u64, 0usize);
    // The input as the data shards hold it, hashed while every data block is intact.
    let mut input = Some((Xxh3::new(), 0u64));
    let mut first = 0u64;
    while first < manifest.stripes {
        let stripes = per_batch.min((manifest.stripes - first) as usize);
        set.reset_batch(&mut batch, first, stripes);
        for shard in 0..n {
            set.read_shard(&mut batch, shard)?;
        }
        for s in 0..stripes {
            let damaged = batch.damaged_in_stripe(s);
            for &i in &damaged {
                bad[i] += 1;
                first_bad[i].get_or_insert(first + s as u64);
            }
            if damaged.iter().any(|&i| i < manifest.k) {
                input = None;
            }
            if let Some((hasher, hashed)) = input.as_mut() {
                let block = manifest.block_size as usize;
                for shard in &batch.blocks[..manifest.k] {
                    let take = (block as u64).min(manifest.input_len - *hashed) as usize;
                    let bytes = &shard[s * block..(s + 1) * block];
                    hasher.update(&bytes[..take]);
                    *hashed += take as u64;
                    // Encode pads with zeros: data past the recorded length means the
                    // length was changed.
                    if bytes[take..].iter().any(|&b| b != 0) {
                        input = None;
                        break;
                    }
                }
            }
            damaged_stripes += u64::from(!damaged.is_empty());
            unrecoverable += u64::from(damaged.len() > manifest.m);
            worst = worst.max(damaged.len());
        }
        first += stripes as u64;
        progress((first * manifest.k as u64 * manifest.block_size).min(manifest.input_len));
    }
    let shards = (0..n)
        .map(|i| {
            let bytes = set.file_len(i);
            let status = match (bytes, bad[i]) {
                (None, _) => "missing",
                (Some(len), 0) if len == manifest.shard_len() => "ok",
                _ => "damaged",
            };
            ShardReport {
                file: manifest.shards[i].file.clone(),
                status,
                bytes,
                bad_blocks: bad[i],
                first_bad_stripe: first_bad[i],
            }
        })
        .collect::<Vec<_>>();
    // A missing shard of an empty set (no stripes) still counts toward the loss.
    let missing = shards.iter().filter(|s| s.status == "missing").count();
    let worst = worst.max(if manifest.stripes == 0 { missing } else { 0 });
    let input_hash = match input {
        Some((hasher, hashed))
            if hashed == manifest.input_len && format!("{:016x}", hasher.digest()) == manifest.input_xxh3 =>
        {
            "ok"
        }
        None if shards[..manifest.k].iter().any(|s| s.status != "ok") => "unchecked",
        _ => "mismatch",
    };
    let intact = shards.iter().all(|s| s.status == "ok") && input_hash == "ok";
    Ok(VerifyReport {
        dir: dir.display().to_string(),
        k: manifest.k,
        m: manifest.m,
        stripes: manifest.stripes,
        shards,
        damaged_stripes,
        unrecoverable_stripes: unrecoverable,
        worst_stripe_damage: worst,
        intact,
        recoverable: unrecoverable == 0 && worst <= manifest.m && input_hash != "mismatch",
        input_hash,
    })
}
