//! A parity holder's stage file (an update's redo log, read back at commit from a disk that
//! may have damaged it) on arbitrary bytes: applying it is accepted or refused, never a
//! panic, and a refused stage leaves the parity exactly as it was.
#![no_main]

use std::fs;

use eckpt_cluster::parity_store::ParityStore;
use eckpt_coding::ObjectId;
use libfuzzer_sys::fuzz_target;

const ID: ObjectId = ObjectId { group: 1, epoch: 1 };
const CHUNK: usize = 64;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("eckpt-fuzz-stage-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    let coded = ParityStore::open(&dir).expect("a scratch directory");
    let mut writer = coded.parity_writer(ID, 4, CHUNK as u32, 1).expect("parity");
    for i in 0..4u8 {
        writer.write(u64::from(i), &[i; CHUNK]).expect("a chunk");
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
});
