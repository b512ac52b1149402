//! The Rust API restoring real data: memory regions filled in place, only changed blocks
//! stored, files put back by mode, and refusals that change nothing.

use std::fs;
use std::path::Path;

mod common;

use common::{config, fill};
use eckpt::{Checkpointer, Error, FileMode, TrackMode};
use eckpt_capture::AlignedBuf;

/// Blocks stored for a region's item in an epoch.
fn stored_blocks(dir: &Path, epoch: u64, region: &str) -> usize {
    let store = eckpt_store::Store::open(dir).unwrap();
    let manifest = store.manifest(3, epoch).unwrap();
    let item = manifest
        .items
        .iter()
        .find(|i| i.name == format!("mem/{region}"))
        .unwrap();
    item.blocks.len()
}

fn roundtrip(track: TrackMode) {
    let tmp = tempfile::tempdir().unwrap();
    let pages = 64;
    let mut a = AlignedBuf::new(pages * 4096).unwrap();
    let mut b = vec![0u8; 10_000]; // not page aligned: tracked by hashing under Auto
    fill(&mut a, 1);
    fill(&mut b, 2);
    let mut ck = Checkpointer::new(config(tmp.path(), track)).unwrap();
    unsafe {
        ck.protect("a", a.as_mut_ptr(), a.len()).unwrap();
        ck.protect("b", b.as_mut_ptr(), b.len()).unwrap();
    }
    assert_eq!(ck.restart().unwrap(), None, "fresh start");
    assert_eq!(ck.checkpoint().unwrap(), 1);
    // Epoch 2: three pages of `a` and one byte of `b` change.
    for page in [3usize, 17, 40] {
        a[page * 4096 + 5] ^= 0xFF;
    }
    b[9_999] ^= 1;
    assert_eq!(ck.checkpoint().unwrap(), 2);
    assert_eq!(
        stored_blocks(tmp.path(), 2, "a"),
        3,
        "only the written pages are stored"
    );
    assert_eq!(stored_blocks(tmp.path(), 2, "b"), 1);
    let expected_a = a.to_vec();
    let expected_b = b.clone();
    // Work after the checkpoint, then "crash": a new process restarts into fresh memory.
    fill(&mut a, 9);
    drop(ck);
    let mut a2 = AlignedBuf::new(pages * 4096).unwrap();
    let mut b2 = vec![0xEEu8; 10_000];
    let mut ck = Checkpointer::new(config(tmp.path(), track)).unwrap();
    unsafe {
        ck.protect("a", a2.as_mut_ptr(), a2.len()).unwrap();
        ck.protect("b", b2.as_mut_ptr(), b2.len()).unwrap();
    }
    assert_eq!(ck.restart().unwrap(), Some(2));
    assert!(a2[..] == expected_a[..]);
    assert_eq!(b2, expected_b);
    // Tracking restarts from the restored state: one more write, one more block.
    a2[5 * 4096] = 7;
    assert_eq!(ck.checkpoint().unwrap(), 3);
    assert_eq!(stored_blocks(tmp.path(), 3, "a"), 1);
    assert_eq!(stored_blocks(tmp.path(), 3, "b"), 0);
}

#[test]
fn regions_restore_in_place_with_kernel_tracking() {
    if let Err(why) = eckpt_capture::uffd_available() {
        eprintln!("SKIPPED: kernel write tracking unavailable: {why}");
        return;
    }
    roundtrip(TrackMode::Auto);
}

#[test]
fn regions_restore_in_place_with_hashing() {
    roundtrip(TrackMode::Hash);
}

#[test]
fn files_are_put_back_by_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    fs::create_dir_all(work.join("out/sub")).unwrap();
    let (log, state, input) = (
        work.join("log.txt"),
        work.join("state.bin"),
        work.join("input.dat"),
    );
    fs::write(&log, "step 1\nstep 2\n").unwrap();
    fs::write(&state, b"version one").unwrap();
    fs::write(&input, b"mesh").unwrap();
    fs::write(work.join("out/kept.txt"), b"k").unwrap();
    let mut counter = [0u8; 8];
    let mut ck = Checkpointer::new(config(&tmp.path().join("store"), TrackMode::Hash)).unwrap();
    unsafe { ck.protect("counter", counter.as_mut_ptr(), 8).unwrap() };
    ck.protect_file(&log, FileMode::Append).unwrap();
    ck.protect_file(&state, FileMode::Snapshot).unwrap();
    ck.protect_file(&input, FileMode::Input).unwrap();
    ck.protect_dir(work.join("out")).unwrap();
    counter[0] = 2;
    assert_eq!(ck.checkpoint().unwrap(), 1);

    // After the checkpoint the job goes on: appends, rewrites, creates files; then dies.
    counter[0] = 3;
    fs::write(&log, "step 1\nstep 2\nstep 3\n").unwrap();
    fs::write(&state, b"version two, longer").unwrap();
    fs::write(work.join("out/new.txt"), b"n").unwrap();
    fs::write(work.join("out/sub/deep.txt"), b"d").unwrap();
    assert_eq!(ck.restart().unwrap(), Some(1));
    assert_eq!(counter[0], 2);
    assert_eq!(fs::read_to_string(&log).unwrap(), "step 1\nstep 2\n");
    assert_eq!(fs::read(&state).unwrap(), b"version one");
    assert!(work.join("out/kept.txt").exists());
    assert!(!work.join("out/new.txt").exists());
    assert_eq!(
        fs::read(work.join("out/.eckpt-rollback/epoch-1/new.txt")).unwrap(),
        b"n"
    );
    assert_eq!(
        fs::read(work.join("out/.eckpt-rollback/epoch-1/sub/deep.txt")).unwrap(),
        b"d"
    );

    // A changed input file is refused before anything is touched.
    counter[0] = 9;
    fs::write(&log, "step 1\nstep 2\nstep 3\n").unwrap();
    fs::write(&input, b"MESH").unwrap();
    let err = ck.restart().unwrap_err();
    assert!(matches!(err, Error::Mismatch(_)), "{err}");
    assert!(err.to_string().contains("input.dat"), "{err}");
    assert_eq!(counter[0], 9, "memory untouched");
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "step 1\nstep 2\nstep 3\n",
        "files untouched"
    );
}

#[test]
fn refusals_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut small = vec![1u8; 100];
    {
        let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
        unsafe { ck.protect("x", small.as_mut_ptr(), small.len()).unwrap() };
        let err = unsafe { ck.protect("x", small.as_mut_ptr(), 1) }.unwrap_err();
        assert!(matches!(err, Error::Invalid(_)));
        ck.checkpoint().unwrap();
    }
    let mut bigger = vec![5u8; 200];
    let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
    unsafe { ck.protect("x", bigger.as_mut_ptr(), bigger.len()).unwrap() };
    let err = ck.restart().unwrap_err();
    assert!(
        err.to_string().contains("200 bytes but epoch 1 saved 100"),
        "{err}"
    );
    assert!(bigger.iter().all(|&b| b == 5));
    // One checkpointer per rank at a time: the process's claim on the rank goes with it.
    drop(ck);

    let mut other = vec![0u8; 100];
    let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
    unsafe { ck.protect("y", other.as_mut_ptr(), other.len()).unwrap() };
    assert!(ck
        .restart()
        .unwrap_err()
        .to_string()
        .contains("region \"y\" is not in epoch 1"));
    assert!(ck.protect_dir(tmp.path().join("missing")).is_err());
}

#[test]
fn corrupted_store_is_reported_never_restored_silently() {
    let tmp = tempfile::tempdir().unwrap();
    let mut data = vec![0u8; 3 * 4096];
    fill(&mut data, 4);
    let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
    unsafe { ck.protect("d", data.as_mut_ptr(), data.len()).unwrap() };
    ck.checkpoint().unwrap();
    drop(ck);
    // Flip one byte in the epoch's data file.
    let rank_dir = tmp.path().join("rank.3");
    let epoch_dir = fs::read_dir(&rank_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("epoch-1-"));
    let data_file = epoch_dir.unwrap().join("data");
    let mut bytes = fs::read(&data_file).unwrap();
    bytes[4100] ^= 1;
    fs::write(&data_file, bytes).unwrap();
    let mut fresh = vec![0u8; 3 * 4096];
    let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
    unsafe { ck.protect("d", fresh.as_mut_ptr(), fresh.len()).unwrap() };
    let err = ck.restart().unwrap_err();
    assert_eq!(err.code(), eckpt::capi::ECKPT_ECORRUPT, "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
}

/// Rot in the newest committed epoch's manifest (or its data file cut short) must not fail
/// every later checkpoint of the rank: the next one is stored whole, its own full epoch,
/// and a restart reads it back exact.
#[test]
fn a_checkpoint_after_its_previous_epoch_was_damaged_is_stored_whole_and_restores() {
    for file in ["manifest", "data"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut data = vec![0u8; 3 * 4096];
        fill(&mut data, 4);
        let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
        unsafe { ck.protect("d", data.as_mut_ptr(), data.len()).unwrap() };
        assert_eq!(ck.checkpoint().unwrap(), 1);
        let epoch_dir = fs::read_dir(tmp.path().join("rank.3"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("epoch-1-"))
            .unwrap();
        let path = epoch_dir.join(file);
        let mut bytes = fs::read(&path).unwrap();
        match file {
            "manifest" => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x08;
            }
            _ => bytes.truncate(bytes.len() / 2),
        }
        fs::write(&path, bytes).unwrap();
        data[5] ^= 0xFF;
        assert_eq!(ck.checkpoint().unwrap(), 2, "{file}: the checkpoint goes on");
        assert_eq!(stored_blocks(tmp.path(), 2, "d"), 3, "{file}: stored whole");
        let expected = data.clone();
        drop(ck);
        let mut fresh = vec![0u8; 3 * 4096];
        let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Hash)).unwrap();
        unsafe { ck.protect("d", fresh.as_mut_ptr(), fresh.len()).unwrap() };
        assert_eq!(ck.restart().unwrap(), Some(2), "{file}");
        assert!(fresh == expected, "{file}: epoch 2 restored exact");
    }
}
