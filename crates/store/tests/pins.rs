//! Pins and self-contained images: what a flush and a restore from a flush need of the
//! node-local store.

use eckpt_store::{Options, RetentionPolicy, Store, StoreError};

fn store(dir: &std::path::Path) -> Store {
    let options = Options {
        block_size: 4,
        retention: RetentionPolicy {
            keep_committed: 1,
            // Full, delta, full, delta, …: each delta depends on the epoch before it.
            max_chain: 1,
            max_chain_ratio: 100.0,
        },
    };
    Store::open_with(dir, options).unwrap()
}

fn commit(store: &Store, epoch: u64, content: &[u8]) {
    let mut w = store.writer(0, epoch).unwrap();
    w.put_full("mem/a", content).unwrap();
    w.commit().unwrap();
}

#[test]
fn a_pinned_epoch_and_its_chain_outlive_retention_until_released() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    commit(&s, 1, b"aaaabbbb");
    commit(&s, 2, b"aaaaBBBB");
    let pin = s.pin(0, 2).unwrap();
    assert_eq!(pin.epoch(), 2);
    // Epoch 2 is a delta on 1: both stay while 3 (full), 4 (delta) and 5 (full) commit,
    // though only the newest is kept otherwise.
    commit(&s, 3, b"AAAABBBB");
    commit(&s, 4, b"AAAAbbbb");
    commit(&s, 5, b"ccccbbbb");
    assert_eq!(s.list_epochs(0).unwrap(), vec![1, 2, 5]);
    assert_eq!(s.read_image(0, 2).unwrap().items["mem/a"], b"aaaaBBBB");
    drop(pin);
    commit(&s, 6, b"xxxxbbbb");
    assert_eq!(
        s.list_epochs(0).unwrap(),
        vec![5, 6],
        "released: retired by the next commit"
    );
}

#[test]
fn only_committed_epochs_pin_and_a_dead_owners_pins_can_be_cleared() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    assert!(matches!(
        s.pin(0, 1),
        Err(StoreError::NoEpoch { rank: 0, epoch: 1 })
    ));
    commit(&s, 1, b"12345678");
    let pin = s.pin(0, 1).unwrap();
    std::mem::forget(pin); // as if its process was killed
    commit(&s, 2, b"87654321");
    commit(&s, 3, b"00000000");
    assert_eq!(s.list_epochs(0).unwrap(), vec![1, 3], "a stale pin still holds");
    s.clear_pins().unwrap();
    commit(&s, 4, b"00001111");
    assert_eq!(s.list_epochs(0).unwrap(), vec![3, 4]);
}

#[test]
fn an_image_writer_carries_nothing_over_and_follows_only_newer_epochs() {
    let tmp = tempfile::tempdir().unwrap();
    let s = store(tmp.path());
    let mut w = s.writer(0, 3).unwrap();
    w.put_full("mem/a", b"old-a").unwrap();
    w.put_full("mem/b", b"old-b").unwrap();
    w.commit().unwrap();
    assert!(s.image_writer(0, 3).is_err(), "not newer than committed epoch 3");
    let mut w = s.image_writer(0, 7).unwrap();
    assert!(w.is_full() && w.parent().is_none());
    w.put_full("mem/a", b"flushed").unwrap();
    let prepared = w.prepare().unwrap();
    assert_eq!(s.prepared_epochs(0).unwrap(), vec![7]);
    prepared.commit().unwrap();
    let image = s.read_image(0, 7).unwrap();
    assert_eq!(image.items.len(), 1, "mem/b was not carried over: {image:?}");
    assert_eq!(image.items["mem/a"], b"flushed");
    let m = s.manifest(0, 7).unwrap();
    assert!(m.full && m.parent.is_none());
}
