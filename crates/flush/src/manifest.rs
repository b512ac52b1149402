//! `manifest.json` of a flushed epoch. Parsed strictly — it is read after a disaster, from
//! storage that may be damaged — and every field is checked before it sizes a buffer, a
//! loop, or a path: the checksum first, then the format, then each rule of
//! [`Manifest::validate`].

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{FlushError, Result};
use crate::job::FlushedJob;
use crate::names::item_file_name;

/// The manifest's file name inside an epoch directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Value of the `format` field.
pub const FORMAT: &str = "eckpt-flush";
/// Format version written: 2 names the epoch's job ([`FlushedJob`]).
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version read: 1, which records no job (restored only when told, see
/// [`crate::JobFilter`]).
const OLDEST_VERSION: u32 = 1;
/// Largest manifest accepted, so a bogus file cannot exhaust memory.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 30;
/// Most ranks a job may have.
const MAX_WORLD: u32 = 1 << 24;
/// Largest block size accepted.
const MAX_BLOCK_SIZE: u64 = 1 << 30;
/// Longest item name accepted (the store's limit).
const MAX_ITEM_NAME: usize = 4096;

/// A flushed epoch: every rank of the job and its items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`FORMAT_VERSION`].
    pub version: u32,
    /// The cluster epoch flushed.
    pub epoch: u64,
    /// Ranks of the job: `ranks` holds each of `0 … world-1` exactly once.
    pub world: u32,
    /// The job the epoch belongs to: always there from version 2, never in version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<FlushedJob>,
    /// Bytes each `crc32c` entry covers (the last block of an item may be short).
    pub block_size: u64,
    /// One entry per rank, ascending.
    pub ranks: Vec<RankEntry>,
    /// CRC-32C (8 hex digits) of the compact JSON of this manifest with `checksum` empty.
    pub checksum: String,
}

/// One rank's flushed image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankEntry {
    /// The rank.
    pub rank: u32,
    /// Its items, each in a file of its own under `rank.<R>/`.
    pub items: Vec<ItemEntry>,
}

/// One item of a rank: a file holding exactly its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemEntry {
    /// The item's name in the rank's checkpoint.
    pub name: String,
    /// Its file in `rank.<R>/`: always [`item_file_name`] of `name`.
    pub file: String,
    /// Bytes.
    pub len: u64,
    /// xxh3-64 of the bytes, 16 lowercase hex digits.
    pub xxh3: String,
    /// CRC-32C of each `block_size` block, 8 lowercase hex digits each.
    pub crc32c: String,
}

impl ItemEntry {
    /// Number of checksummed blocks of an item of `len` bytes.
    pub fn blocks(len: u64, block_size: u64) -> u64 {
        len.div_ceil(block_size)
    }

    /// The recorded CRC-32C of block `index` (validated at parse time: `index` must be below
    /// the item's block count).
    pub fn block_crc(&self, index: u64) -> u32 {
        let at = index as usize * 8;
        u32::from_str_radix(&self.crc32c[at..at + 8], 16).expect("validated at parse time")
    }
}

impl Manifest {
    /// A sealed manifest of `epoch` of `job`, of `world` ranks (`ranks` in any order).
    pub fn new(
        epoch: u64,
        world: u32,
        block_size: u64,
        job: FlushedJob,
        mut ranks: Vec<RankEntry>,
    ) -> Result<Manifest> {
        ranks.sort_by_key(|r| r.rank);
        let mut manifest = Manifest {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            epoch,
            world,
            job: Some(job),
            block_size,
            ranks,
            checksum: String::new(),
        };
        manifest.checksum = format!("{:08x}", manifest.content_crc());
        manifest
            .validate()
            .map_err(|why| FlushError::Invalid(format!("epoch {epoch} cannot be flushed: {why}")))?;
        Ok(manifest)
    }

    /// The manifest as format version 1 wrote it (no job), sealed: what an older eckpt left.
    #[cfg(test)]
    pub(crate) fn into_version_1(mut self) -> Manifest {
        self.version = OLDEST_VERSION;
        self.job = None;
        self.checksum = format!("{:08x}", self.content_crc());
        self
    }

    /// CRC-32C of the compact JSON with `checksum` empty.
    fn content_crc(&self) -> u32 {
        let unsealed = Manifest {
            checksum: String::new(),
            ..self.clone()
        };
        crc32c::crc32c(&serde_json::to_vec(&unsealed).expect("a manifest always serializes"))
    }

    /// Parses and checks manifest bytes read from `path` (for the error message).
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let refuse = |why: String| FlushError::Manifest {
            path: path.to_path_buf(),
            why,
        };
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(refuse(format!(
                "{} bytes is larger than any manifest",
                bytes.len()
            )));
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| refuse(format!("not valid JSON: {e}")))?;
        let actual = format!("{:08x}", manifest.content_crc());
        if manifest.checksum != actual {
            return Err(refuse(format!(
                "checksum {:?} does not match its contents ({actual}): the manifest was damaged",
                manifest.checksum
            )));
        }
        manifest.validate().map_err(refuse)?;
        Ok(manifest)
    }

    /// Pretty JSON, as written to disk.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest always serializes");
        out.push(b'\n');
        out
    }

    /// The entry of `rank`.
    pub fn rank(&self, rank: u32) -> Option<&RankEntry> {
        self.ranks
            .binary_search_by_key(&rank, |r| r.rank)
            .ok()
            .map(|i| &self.ranks[i])
    }

    /// Bytes of every item of every rank.
    pub fn total_bytes(&self) -> u64 {
        self.ranks
            .iter()
            .flat_map(|r| &r.items)
            .map(|i| i.len)
            .fold(0u64, u64::saturating_add)
    }

    /// Every structural rule; the reason of the first one broken.
    fn validate(&self) -> std::result::Result<(), String> {
        if self.format != FORMAT {
            return Err(format!("format is {:?}, expected {FORMAT:?}", self.format));
        }
        if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&self.version) {
            return Err(format!(
                "format version {} is not supported (this eckpt reads {OLDEST_VERSION} to {FORMAT_VERSION})",
                self.version
            ));
        }
        match (&self.job, self.version) {
            (None, OLDEST_VERSION) => {}
            (Some(job), FORMAT_VERSION) => job.validate().map_err(|why| format!("job: {why}"))?,
            (Some(_), _) => return Err(format!("format version {} records no job", self.version)),
            (None, _) => return Err(format!("format version {} names the epoch's job", self.version)),
        }
        if self.epoch == 0 {
            return Err("epoch 0 (epochs start at 1)".into());
        }
        if self.world == 0 || self.world > MAX_WORLD {
            return Err(format!("world {} out of range", self.world));
        }
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(format!("block size {} out of range", self.block_size));
        }
        if self.ranks.len() != self.world as usize
            || self.ranks.iter().enumerate().any(|(i, r)| r.rank as usize != i)
        {
            return Err(format!(
                "the ranks are not exactly 0 … {} (an incomplete flush is never published)",
                self.world - 1
            ));
        }
        for rank in &self.ranks {
            let mut names = HashSet::new();
            let mut files = HashSet::new();
            for item in &rank.items {
                let at = format!("rank {} item {:?}", rank.rank, item.name);
                if item.name.is_empty() || item.name.len() > MAX_ITEM_NAME {
                    return Err(format!(
                        "rank {}: item name of {} bytes",
                        rank.rank,
                        item.name.len()
                    ));
                }
                if !names.insert(item.name.as_str()) {
                    return Err(format!("{at} appears twice"));
                }
                if item.file != item_file_name(&item.name) || !files.insert(item.file.as_str()) {
                    return Err(format!("{at}: file {:?} is not the item's file name", item.file));
                }
                if item.xxh3.len() != 16 || !is_lower_hex(&item.xxh3) {
                    return Err(format!("{at}: xxh3 is not 16 hex digits"));
                }
                let crc_len = ItemEntry::blocks(item.len, self.block_size).checked_mul(8);
                if crc_len != Some(item.crc32c.len() as u64) || !is_lower_hex(&item.crc32c) {
                    return Err(format!(
                        "{at}: the block checksums do not cover {} bytes",
                        item.len
                    ));
                }
            }
        }
        Ok(())
    }
}

fn is_lower_hex(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(name: &str, len: u64) -> ItemEntry {
        ItemEntry {
            name: name.into(),
            file: item_file_name(name),
            len,
            xxh3: "0123456789abcdef".into(),
            crc32c: "deadbeef".repeat(ItemEntry::blocks(len, 16) as usize),
        }
    }

    fn job() -> FlushedJob {
        FlushedJob {
            id: Some("j1".into()),
            command: Some("./app".into()),
            nodes: 4,
            k: 2,
            m: 1,
        }
    }

    fn sample() -> Manifest {
        let ranks = vec![
            RankEntry {
                rank: 1,
                items: vec![item("mem/a", 40)],
            },
            RankEntry {
                rank: 0,
                items: vec![item("mem/a", 33), item("eckpt/meta", 0)],
            },
        ];
        Manifest::new(7, 2, 16, job(), ranks).unwrap()
    }

    fn reparse(m: &Manifest) -> Result<Manifest> {
        Manifest::parse(&m.to_json(), Path::new("m"))
    }

    fn resealed(mut m: Manifest) -> Result<Manifest> {
        m.checksum = format!("{:08x}", m.content_crc());
        reparse(&m)
    }

    #[test]
    fn roundtrip_and_lookup() {
        let m = sample();
        assert_eq!(reparse(&m).unwrap(), m);
        assert_eq!(m.rank(1).unwrap().items[0].len, 40);
        assert_eq!(m.rank(0).unwrap().items[0].block_crc(2), 0xdeadbeef);
        assert!(m.rank(2).is_none());
        assert_eq!(m.total_bytes(), 73);
    }

    /// A manifest as format version 1 wrote it (no job), byte for byte: still read.
    #[test]
    fn version_1_manifests_are_read() {
        let v1 = sample().into_version_1();
        let json = String::from_utf8(v1.to_json()).unwrap();
        assert!(!json.contains("\"job\""), "{json}");
        let back = reparse(&v1).unwrap();
        assert_eq!((back.version, back.job), (1, None));
    }

    #[test]
    fn a_flipped_byte_fails_the_checksum() {
        let json = String::from_utf8(sample().to_json()).unwrap();
        let bad = json.replacen("\"len\": 40", "\"len\": 41", 1);
        let e = Manifest::parse(bad.as_bytes(), Path::new("m"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn broken_rules_are_refused_even_with_a_good_checksum() {
        let mut m = sample();
        m.ranks.pop();
        assert!(resealed(m).unwrap_err().to_string().contains("incomplete"));
        let mut m = sample();
        m.ranks[0].items[0].file = "../../etc/passwd".into();
        assert!(resealed(m).unwrap_err().to_string().contains("file name"));
        let mut m = sample();
        m.ranks[0].items[1].name = "mem/a".into();
        m.ranks[0].items[1].file = item_file_name("mem/a");
        assert!(resealed(m).unwrap_err().to_string().contains("twice"));
        let mut m = sample();
        m.ranks[1].items[0].len = 100;
        assert!(resealed(m).unwrap_err().to_string().contains("cover"));
        let mut m = sample();
        m.version = 3;
        assert!(resealed(m).unwrap_err().to_string().contains("version 3"));
        let mut m = sample();
        m.job = None;
        assert!(resealed(m)
            .unwrap_err()
            .to_string()
            .contains("names the epoch's job"));
        let mut m = sample();
        m.version = 1;
        assert!(resealed(m).unwrap_err().to_string().contains("records no job"));
        let mut m = sample();
        m.job.as_mut().unwrap().id = Some(String::new());
        assert!(resealed(m).unwrap_err().to_string().contains("job id"));
        let mut m = sample();
        m.block_size = 0;
        assert!(resealed(m).is_err());
        let mut m = sample();
        m.epoch = 0;
        assert!(resealed(m).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Manifest::parse(&bytes, Path::new("m"));
        }

        #[test]
        fn whatever_parses_is_safe_to_index(pos in any::<usize>(), byte in any::<u8>()) {
            let mut json = sample().to_json();
            let p = pos % json.len();
            json[p] = byte;
            if let Ok(m) = Manifest::parse(&json, Path::new("m")) {
                for r in &m.ranks {
                    for i in &r.items {
                        for b in 0..ItemEntry::blocks(i.len, m.block_size) {
                            let _ = i.block_crc(b);
                        }
                    }
                }
            }
        }
    }
}
