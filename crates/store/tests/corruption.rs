//! Damaged stored state must produce a clear error naming what is damaged, never bytes.

use std::path::{Path, PathBuf};

use eckpt_store::{Options, RetentionPolicy, Store, StoreError};

/// Rank 2: epoch 1 full (item "heap" of 4 blocks of 64 bytes + "tail"), epoch 2 a delta
/// rewriting heap block 1 only.
fn two_epochs() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        block_size: 64,
        retention: RetentionPolicy::default(),
    };
    let store = Store::open_with(dir.path(), opts).unwrap();
    let mut w = store.writer(2, 1).unwrap();
    w.put_full("heap", &[1u8; 256]).unwrap();
    w.put_full("tail", b"tail bytes").unwrap();
    w.commit().unwrap();
    let mut w = store.writer(2, 2).unwrap();
    w.put_dirty("heap", 64, 256, &[(1, &[2u8; 64])]).unwrap();
    w.commit().unwrap();
    (dir, store)
}

fn epoch_file(dir: &Path, epoch: u64, file: &str) -> PathBuf {
    dir.join(format!("rank.2/epoch-{epoch}-0/{file}"))
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= 0x10;
    std::fs::write(path, b).unwrap();
}

#[test]
fn flipped_base_block_names_rank_epoch_item_block() {
    let (dir, store) = two_epochs();
    // Heap block 3 of epoch 1 (bytes 192..256 of its data) is still live in epoch 2.
    flip(&epoch_file(dir.path(), 1, "data"), 200);
    let err = store.read_image(2, 2).unwrap_err();
    match &err {
        StoreError::BlockChecksum {
            rank,
            epoch,
            item,
            block,
            stored_in,
        } => {
            assert_eq!(
                (*rank, *epoch, item.as_str(), *block, *stored_in),
                (2, 2, "heap", 3, 1)
            );
        }
        other => panic!("unexpected error {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("rank 2 epoch 2") && msg.contains("\"heap\" block 3"),
        "{msg}"
    );
    let mut buf = vec![0u8; 256];
    assert!(store.read_item_into(2, 2, "heap", &mut buf).is_err());
    // Reads that do not touch the damaged block still work and are exact.
    let mut first = vec![0u8; 128];
    store.read_item_range(2, 2, "heap", 0, &mut first).unwrap();
    assert_eq!(&first[..64], &[1u8; 64]);
    assert_eq!(&first[64..], &[2u8; 64]);
    // Streaming reports it too.
    let mut r = store.item_reader(2, 2, "heap").unwrap();
    let mut sink = Vec::new();
    assert!(std::io::Read::read_to_end(&mut r, &mut sink).is_err());
}

#[test]
fn flipped_delta_block_is_detected() {
    let (dir, store) = two_epochs();
    flip(&epoch_file(dir.path(), 2, "data"), 5);
    assert!(matches!(
        store.read_image(2, 2),
        Err(StoreError::BlockChecksum {
            block: 1,
            stored_in: 2,
            ..
        })
    ));
    assert!(store.dirty_xor(2, 2).is_err());
    assert!(store.padded_delta(2, 2, 10_000).is_err());
    // The parent epoch is untouched and still exact.
    assert_eq!(store.read_image(2, 1).unwrap().items["heap"], vec![1u8; 256]);
}

#[test]
fn any_flipped_manifest_byte_is_rejected() {
    let (dir, store) = two_epochs();
    let path = epoch_file(dir.path(), 1, "manifest");
    let good = std::fs::read(&path).unwrap();
    for at in 0..good.len() {
        let mut b = good.clone();
        b[at] ^= 0x04;
        std::fs::write(&path, &b).unwrap();
        let err = store.read_image(2, 2).unwrap_err();
        assert!(
            matches!(&err, StoreError::Corrupt { rank: 2, epoch: 1, detail } if detail.contains("manifest")),
            "byte {at}: {err}"
        );
    }
    std::fs::write(&path, &good).unwrap();
    assert_eq!(store.read_image(2, 2).unwrap().items["tail"], b"tail bytes");
}

#[test]
fn truncated_data_and_missing_parent_are_reported() {
    let (dir, store) = two_epochs();
    let data = epoch_file(dir.path(), 1, "data");
    let len = std::fs::metadata(&data).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len - 1)
        .unwrap();
    let err = store.read_image(2, 2).unwrap_err();
    assert!(err.to_string().contains("data file"), "{err}");
    std::fs::remove_dir_all(dir.path().join("rank.2/epoch-1-0")).unwrap();
    let err = store.read_image(2, 2).unwrap_err();
    assert!(err.to_string().contains("needs epoch 1"), "{err}");
    // A writer cannot build on a broken chain either.
    assert!(store.writer(2, 3).is_err());
}

/// Rot in bytes a newer epoch overwrote is not damage to it: epoch 2 rewrote heap block 1,
/// so a flip in epoch 1's copy of it fails reads of epoch 1 only.
#[test]
fn a_flipped_block_that_a_newer_epoch_overwrote_does_not_fail_its_reads() {
    let (dir, store) = two_epochs();
    flip(&epoch_file(dir.path(), 1, "data"), 70);
    let mut heap = vec![1u8; 256];
    heap[64..128].fill(2);
    let image = store.read_image(2, 2).unwrap();
    assert_eq!(image.items["heap"], heap);
    let mut middle = vec![0u8; 100];
    store.read_item_range(2, 2, "heap", 50, &mut middle).unwrap();
    assert_eq!(middle, heap[50..150]);
    assert!(matches!(
        store.read_image(2, 1),
        Err(StoreError::BlockChecksum {
            block: 1,
            stored_in: 1,
            ..
        })
    ));
}

/// Rot in a committed epoch must not fail every later checkpoint of the rank: a write
/// whose content is known in full stores anew every block it could not compare with, and
/// the new epoch reads back exact without the damaged one.
#[test]
fn a_full_write_over_a_damaged_epoch_stores_its_blocks_anew() {
    let (dir, store) = two_epochs();
    // Heap block 3 of epoch 1, still live in epoch 2.
    flip(&epoch_file(dir.path(), 1, "data"), 200);
    let mut heap = vec![1u8; 256];
    heap[64..128].fill(2);
    heap[0] = 9;
    let mut w = store.writer(2, 3).unwrap();
    w.put_full("heap", &heap).unwrap();
    w.commit().unwrap();
    // All four heap blocks were stored, not only the one that changed.
    let stored = std::fs::metadata(epoch_file(dir.path(), 3, "data"))
        .unwrap()
        .len();
    assert_eq!(stored, 256);
    let mut buf = vec![0u8; 256];
    store.read_item_into(2, 3, "heap", &mut buf).unwrap();
    assert_eq!(buf, heap);
    let mut tail = vec![0u8; 10];
    store.read_item_into(2, 3, "tail", &mut tail).unwrap();
    assert_eq!(&tail, b"tail bytes", "the tail is carried over");
    assert!(store.read_image(2, 2).is_err(), "epoch 2 is still damaged");
}

/// A writer of every item (the rank library's) over a committed epoch whose manifest fails
/// its seal, or whose data file was cut short, starts a full epoch of its own: the rank's
/// checkpoints go on, and the new epoch reads back without the damaged one. A plain
/// writer, which would carry items over, refuses instead: it cannot know what to carry.
#[test]
fn a_writer_of_every_item_over_a_damaged_manifest_or_data_file_starts_a_full_epoch() {
    for file in ["manifest", "data"] {
        let (dir, store) = two_epochs();
        let path = epoch_file(dir.path(), 2, file);
        match file {
            "manifest" => flip(&path, std::fs::read(&path).unwrap().len() / 2),
            _ => std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .and_then(|f| f.set_len(10))
                .unwrap(),
        }
        let err = store.writer(2, 3).map(|_| ()).unwrap_err();
        assert!(err.is_damage(), "{file}: {err}");
        let mut w = store.writer_of_every_item(2, 3).unwrap();
        assert!(
            w.is_full() && w.parent().is_none(),
            "{file}: a full epoch of its own"
        );
        w.put_full("heap", &[7u8; 256]).unwrap();
        w.commit().unwrap();
        let mut buf = vec![0u8; 256];
        store.read_item_into(2, 3, "heap", &mut buf).unwrap();
        assert_eq!(buf, [7u8; 256], "{file}");
        let image = store.read_image(2, 3).unwrap();
        assert_eq!(
            image.items.len(),
            1,
            "{file}: nothing carried over from the damage"
        );
        let mut w = store.writer_of_every_item(2, 4).unwrap();
        assert_eq!(
            w.parent(),
            Some(3),
            "{file}: the next epoch builds on the new one"
        );
        w.put_dirty("heap", 64, 256, &[(0, &[8u8; 64])]).unwrap();
        w.commit().unwrap();
        store.read_item_into(2, 4, "heap", &mut buf).unwrap();
        assert_eq!((buf[0], buf[64]), (8, 7), "{file}");
    }
}
