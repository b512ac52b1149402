//! Epochs of named byte items (what `eckpt.torch` saves DCP write items as): exactly the items
//! of each save, only changed blocks stored, any rank's items read back, and refusals.

mod common;

use common::{config, fill};
use eckpt::{Checkpointer, Error, TrackMode};

/// The blocks an epoch of rank 3 stored, per stored item name.
fn stored_blocks(dir: &std::path::Path, epoch: u64) -> Vec<(String, usize)> {
    let store = eckpt_store::Store::open(dir).unwrap();
    let manifest = store.manifest(3, epoch).unwrap();
    manifest
        .items
        .iter()
        .map(|i| (i.name.clone(), i.blocks.len()))
        .collect()
}

#[test]
fn a_save_holds_exactly_its_items_and_stores_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Auto)).unwrap();
    let mut weights = vec![0u8; 1 << 20];
    fill(&mut weights, 1);
    let step = b"step 1".to_vec();
    assert_eq!(
        ck.save_items(&[("weights", &weights), ("step", &step)]).unwrap(),
        1
    );

    // Epoch 2: one byte of the weights changes, the step item goes, another comes.
    weights[300_000] ^= 0xFF;
    let extra = vec![7u8; 5000];
    assert_eq!(
        ck.save_items(&[("weights", &weights), ("extra", &extra)])
            .unwrap(),
        2
    );
    let blocks = stored_blocks(tmp.path(), 2);
    let weights_blocks = blocks.iter().find(|(n, _)| n == "items/weights").unwrap().1;
    assert_eq!(
        weights_blocks, 1,
        "only the changed block of the weights is stored: {blocks:?}"
    );

    let (epoch, items) = ck.read_items(3, None, &|_| true).unwrap();
    assert_eq!(epoch, 2);
    let names: Vec<&str> = items.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["extra", "weights"], "exactly the items of the last save");
    assert_eq!(items[1].1, weights);
    assert_eq!(items[0].1, extra);

    // The first epoch is still readable as it was saved, and a filter keeps what it names.
    let (epoch, items) = ck.read_items(3, Some(1), &|name| name == "step").unwrap();
    assert_eq!((epoch, items), (1, vec![("step".to_string(), step)]));
}

#[test]
fn another_ranks_items_are_read_from_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let mut writer = Checkpointer::new(config(tmp.path(), TrackMode::Auto)).unwrap();
    writer.save_items(&[("shard", b"of rank three")]).unwrap();
    let mut other = config(tmp.path(), TrackMode::Auto);
    other.rank = 5;
    let mut reader = Checkpointer::new(other).unwrap();
    let (epoch, items) = reader.read_items(3, None, &|_| true).unwrap();
    assert_eq!(
        (epoch, items),
        (1, vec![("shard".to_string(), b"of rank three".to_vec())])
    );
    match reader.read_items(4, None, &|_| true) {
        Err(Error::State(why)) => assert!(why.contains("rank 4 has no committed epoch"), "{why}"),
        other => panic!("a rank with no epoch: {other:?}"),
    }
}

#[test]
fn refusals_save_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let mut ck = Checkpointer::new(config(tmp.path(), TrackMode::Auto)).unwrap();
    assert!(matches!(
        ck.save_items(&[("a", b"1"), ("a", b"2")]),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(ck.save_items(&[("", b"1")]), Err(Error::Invalid(_))));
    let mut region = vec![0u8; 4096];
    unsafe { ck.protect("region", region.as_mut_ptr(), region.len()).unwrap() };
    assert!(matches!(ck.save_items(&[("a", b"1")]), Err(Error::State(_))));
    assert_eq!(ck.latest_epoch().unwrap(), None);
}
