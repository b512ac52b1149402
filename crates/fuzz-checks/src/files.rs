//! Files read back from disks and shared storage that may have damaged them, and the result
//! files `eckpt report` and `eckpt model` load.

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use eckpt_agent::parity_store::ParityStore;
use eckpt_coding::ObjectId;
use eckpt_flush::{FlushedJob, ItemEntry, Manifest};
use eckpt_model::{predict, Machine, Scenario};
use eckpt_report::predictions::Costs;

/// The shard-set manifest: what it accepts is safe to index by stripe and shard, and writes
/// back to itself.
pub fn shard_manifest(data: &[u8]) {
    if let Ok(manifest) = eckpt_shards::Manifest::parse(data) {
        for shard in 0..manifest.k + manifest.m {
            for stripe in 0..manifest.stripes.min(1024) {
                let _ = manifest.block_crc(shard, stripe);
            }
        }
        let _ = manifest.shard_len();
        let again = eckpt_shards::Manifest::parse(&manifest.to_json());
        assert_eq!(again.ok().as_ref(), Some(&manifest));
    }
}

/// The store's epoch manifest: what it accepts re-encodes to something it accepts again.
pub fn store_manifest(data: &[u8]) {
    if let Ok(manifest) = eckpt_store::parse_manifest(data) {
        let again =
            eckpt_store::parse_manifest(&manifest.encode()).expect("a parsed manifest re-encodes validly");
        assert_eq!(again.encode(), manifest.encode());
    }
}

/// The flushed-epoch manifest (read from shared storage after a disaster): what it accepts
/// is safe to index by rank, item and block, and writes back to the same manifest. Input that
/// is a manifest's JSON but for its checksum is also resealed, so the structural rules
/// behind the checksum are exercised too.
pub fn flush_manifest(data: &[u8]) {
    if let Ok(manifest) = Manifest::parse(data, Path::new("fuzz")) {
        exercise_flush_manifest(&manifest);
    }
    if let Ok(raw) = serde_json::from_slice::<Manifest>(data) {
        // A version 1 manifest (no job) is resealed as the job of ranks started by hand.
        let job = raw.job.unwrap_or(FlushedJob {
            id: None,
            command: None,
            nodes: 3,
            k: 2,
            m: 1,
        });
        if let Ok(resealed) = Manifest::new(raw.epoch, raw.world, raw.block_size, job, raw.ranks) {
            exercise_flush_manifest(&resealed);
        }
    }
}

fn exercise_flush_manifest(manifest: &Manifest) {
    for rank in 0..manifest.world {
        let entry = manifest.rank(rank).expect("every rank of the world is there");
        for item in &entry.items {
            for block in 0..ItemEntry::blocks(item.len, manifest.block_size).min(1024) {
                let _ = item.block_crc(block);
            }
        }
    }
    let _ = manifest.total_bytes();
    let again =
        Manifest::parse(&manifest.to_json(), Path::new("fuzz")).expect("a manifest writes back validly");
    assert_eq!(&again, manifest);
}

/// A parity holder's stage file (an update's redo log, read back at commit): applying it is
/// accepted or refused, and a refused stage leaves the parity exactly as it was.
pub fn parity_stage(data: &[u8]) {
    const ID: ObjectId = ObjectId { group: 1, epoch: 1 };
    const CHUNK: usize = 64;
    // One private scratch directory per process (created by tempfile, so nobody else's
    // directory is ever removed); each input starts from a fresh parity store inside it.
    static SCRATCH: OnceLock<tempfile::TempDir> = OnceLock::new();
    let scratch = SCRATCH.get_or_init(|| tempfile::tempdir().expect("a scratch directory"));
    let dir = scratch.path().join("coded");
    let _ = fs::remove_dir_all(&dir);
    let coded = ParityStore::open(&dir).expect("a parity store in the scratch directory");
    let mut writer = coded.parity_writer(ID, 4, CHUNK as u32, 1).expect("parity");
    for i in 0..4u8 {
        writer.write(u64::from(i), &[i; CHUNK], 1).expect("a chunk");
    }
    writer.finish().expect("parity written");
    coded.commit(ID).expect("committed");
    let object = dir.join(format!("obj-{ID}"));
    let before = fs::read(object.join("parity")).expect("parity bytes");
    fs::write(object.join("stage-2"), data).expect("the stage");
    if coded.apply_update(ID, 2).is_err() {
        assert_eq!(fs::read(object.join("parity")).expect("parity bytes"), before);
        let reader = coded.parity_reader(ID).expect("the parity still opens");
        assert_eq!(reader.version(), 1, "a refused stage records no new version");
    }
}

/// The result files `eckpt report` reads and the calibrations `eckpt model` loads: an
/// accepted result renders into a page, an accepted machine into a prediction, whatever
/// numbers they hold.
pub fn report_inputs(data: &[u8]) {
    if let Ok(input) = eckpt_report::inputs::parse("fuzz.json", data) {
        let costs = Costs {
            machine: Machine::reference(1e9),
            host_cores: 2.0,
        };
        let page = eckpt_report::report(&[("fuzz.json".into(), input)], &costs, "fuzz");
        assert!(page.ends_with("</html>\n"));
        assert!(!page.contains("<script"));
    }
    if let Ok(machine) = serde_json::from_slice::<Machine>(data) {
        if machine.validate().is_ok() {
            let scenario = Scenario {
                nodes: 6,
                coding: Default::default(),
                size_per_node: 64 << 20,
                dirty_fraction: 0.01,
            };
            let _ = predict(&scenario, &machine);
        }
    }
}
