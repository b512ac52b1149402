//! The flushed layout end to end on real files: written rank by rank, published last,
//! read back byte-exact by the crate and by plain JSON and file reads (the layout is for
//! users too); damage, interrupted flushes and retention.

use std::io::Cursor;
use std::path::Path;

use eckpt_flush::{
    item_file_name, FlushDir, FlushedJob, Manifest, Pacer, RankWriter, BLOCK_SIZE, MANIFEST_FILE, MARK_FILE,
};

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Rank r's items: a region spanning several checksum blocks, and a small one.
fn image(rank: u32, epoch: u64) -> Vec<(String, Vec<u8>)> {
    let seed = u64::from(rank) * 100 + epoch;
    vec![
        ("mem/grid".into(), bytes(2 * BLOCK_SIZE as usize + 12345, seed)),
        ("eckpt/meta".into(), format!("{{\"rank\":{rank}}}").into_bytes()),
        ("file:out/log".into(), Vec::new()),
    ]
}

/// The job the tests' epochs belong to.
fn job() -> FlushedJob {
    FlushedJob {
        id: Some("job-1".into()),
        command: Some("./app".into()),
        nodes: 3,
        k: 2,
        m: 1,
    }
}

/// Flushes `world` ranks of `epoch` into `dir` and publishes them.
fn flush(dir: &FlushDir, epoch: u64, world: u32) {
    let staging = dir.stage(epoch).unwrap();
    let mut ranks = Vec::new();
    for rank in (0..world).rev() {
        let mut w = RankWriter::create(staging.path(), rank).unwrap();
        let mut pacer = Pacer::new(None);
        for (name, data) in image(rank, epoch) {
            w.item(&name, data.len() as u64, &mut Cursor::new(&data), &mut pacer)
                .unwrap();
        }
        ranks.push(w.finish().unwrap());
    }
    let manifest = Manifest::new(epoch, world, BLOCK_SIZE, job(), ranks).unwrap();
    staging.publish(&manifest).unwrap();
}

#[test]
fn a_flushed_epoch_reads_back_byte_exact_with_and_without_the_crate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = FlushDir::new(tmp.path().join("flush"));
    flush(&dir, 4, 3);
    assert_eq!(dir.epochs().unwrap(), vec![4]);
    let epoch = dir.open(4).unwrap();
    assert_eq!(epoch.manifest().world, 3);
    for rank in 0..3 {
        for (name, data) in image(rank, 4) {
            assert!(
                epoch.read_item(rank, &name).unwrap() == data,
                "rank {rank} {name}"
            );
            // By hand, as a user would: the manifest is JSON and the file is the bytes.
            let root = dir.epoch_dir(4);
            let json: serde_json::Value =
                serde_json::from_slice(&std::fs::read(root.join(MANIFEST_FILE)).unwrap()).unwrap();
            let entry = json["ranks"][rank as usize]["items"]
                .as_array()
                .unwrap()
                .iter()
                .find(|i| i["name"] == name.as_str())
                .unwrap();
            assert_eq!(entry["file"], item_file_name(&name).as_str());
            let file = root.join(format!("rank.{rank}")).join(item_file_name(&name));
            assert!(std::fs::read(file).unwrap() == data);
            let xxh3 = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&data));
            assert_eq!(entry["xxh3"], xxh3.as_str());
        }
    }
    let missing = epoch.read_item(0, "mem/other").unwrap_err().to_string();
    assert!(
        missing.contains("no item \"mem/other\"") && missing.contains("mem/grid"),
        "{missing}"
    );
    assert!(epoch
        .read_item(3, "mem/grid")
        .unwrap_err()
        .to_string()
        .contains("3 ranks"));
}

fn flip(path: &Path, at: usize) {
    let mut data = std::fs::read(path).unwrap();
    data[at] ^= 0x20;
    std::fs::write(path, data).unwrap();
}

#[test]
fn damage_is_an_error_naming_what_never_wrong_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = FlushDir::new(tmp.path());
    flush(&dir, 1, 2);
    let file = dir.epoch_dir(1).join("rank.1").join("mem%2Fgrid");
    flip(&file, BLOCK_SIZE as usize + 7);
    let epoch = dir.open(1).unwrap();
    let mut out = Vec::new();
    let e = epoch.copy_item(1, "mem/grid", &mut out).unwrap_err();
    assert!(e.is_corrupt());
    let text = e.to_string();
    assert!(
        text.contains("epoch 1 rank 1 item \"mem/grid\"") && text.contains("block 1"),
        "{text}"
    );
    assert_eq!(out.len(), BLOCK_SIZE as usize, "only verified blocks went out");
    assert!(
        epoch.read_item(0, "mem/grid").is_ok(),
        "other ranks are unaffected"
    );

    // A truncated file, a missing one, a damaged manifest: the epoch does not open.
    let short = dir.epoch_dir(1).join("rank.0").join("eckpt%2Fmeta");
    std::fs::write(&short, b"{").unwrap();
    assert!(dir
        .open(1)
        .unwrap_err()
        .to_string()
        .contains("bytes, the manifest says"));
    std::fs::remove_file(&short).unwrap();
    assert!(dir.open(1).unwrap_err().to_string().contains("is missing"));
    flip(&dir.epoch_dir(1).join(MANIFEST_FILE), 40);
    assert!(dir.open(1).unwrap_err().is_corrupt());
}

#[test]
fn an_interrupted_flush_publishes_nothing_and_the_next_one_clears_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = FlushDir::new(tmp.path());
    flush(&dir, 2, 2);
    // A flush of epoch 3 that stops after one rank, as if its processes were killed.
    let staging = dir.stage(3).unwrap();
    let mut w = RankWriter::create(staging.path(), 0).unwrap();
    let data = bytes(1000, 1);
    w.item("mem/grid", 1000, &mut Cursor::new(&data), &mut Pacer::new(None))
        .unwrap();
    let leftover = staging.path().to_path_buf();
    drop(staging);
    assert_eq!(dir.epochs().unwrap(), vec![2]);
    let (newest, skipped) = dir.newest().unwrap();
    assert_eq!((newest.epoch(), skipped.len()), (2, 0));
    // A manifest that lacks a rank cannot even be made: nothing incomplete is published.
    assert!(Manifest::new(3, 2, BLOCK_SIZE, job(), vec![w.finish().unwrap()]).is_err());
    flush(&dir, 5, 2);
    assert!(!leftover.exists(), "the next flush removed the interrupted one");
    assert_eq!(dir.epochs().unwrap(), vec![2, 5]);
    assert!(dir.stage(5).unwrap_err().to_string().contains("already flushed"));
}

#[test]
fn retention_keeps_the_newest_and_newest_skips_damaged_epochs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = FlushDir::new(tmp.path());
    for epoch in [1, 3, 6, 9] {
        flush(&dir, epoch, 1);
    }
    assert_eq!(dir.retire(2).unwrap(), vec![1, 3]);
    assert_eq!(dir.epochs().unwrap(), vec![6, 9]);
    let trash = |dir: &FlushDir| {
        std::fs::read_dir(dir.root())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("trash-")
            })
            .count()
    };
    assert_eq!(trash(&dir), 2, "retired epochs wait, unpublished, for the purge");
    dir.purge_trash().unwrap();
    assert_eq!(trash(&dir), 0);
    assert_eq!(dir.retire(0).unwrap(), vec![6], "at least one is always kept");
    assert_eq!(dir.retire(1).unwrap(), Vec::<u64>::new());
    flush(&dir, 10, 1);
    std::fs::remove_file(dir.epoch_dir(10).join("rank.0").join("eckpt%2Fmeta")).unwrap();
    let (newest, skipped) = dir.newest().unwrap();
    assert_eq!(newest.epoch(), 9);
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].0, 10);
    let empty = FlushDir::new(tmp.path().join("none"));
    assert!(empty.epochs().unwrap().is_empty());
    assert!(empty
        .newest()
        .unwrap_err()
        .to_string()
        .contains("no complete flushed epoch"));
}

/// Every entry name under `root`, sorted.
fn listing(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_directory_holding_someone_elses_files_is_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("flush");
    for d in ["tmp-results", "trash-can", "mydata"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        std::fs::write(root.join(d).join("x"), d).unwrap();
    }
    let dir = FlushDir::new(&root);
    let e = dir.stage(1).unwrap_err().to_string();
    assert!(
        e.contains("is not empty and is not an eckpt flush directory (it has ") && e.contains("mydata"),
        "{e}"
    );
    assert_eq!(listing(&root), ["mydata", "tmp-results", "trash-can"]);
    // A file under the mark's name that is not eckpt's mark is not taken either.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join(MARK_FILE), "mine\n").unwrap();
    let e = FlushDir::new(&other).claim().unwrap_err().to_string();
    assert!(e.contains("is not eckpt's mark"), "{e}");
    assert_eq!(std::fs::read_to_string(other.join(MARK_FILE)).unwrap(), "mine\n");
}

#[test]
fn in_its_own_directory_eckpt_lists_retires_and_deletes_only_entries_of_its_naming() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("flush");
    let dir = FlushDir::new(&root);
    flush(&dir, 1, 1);
    assert!(root.join(MARK_FILE).is_file(), "a new directory is marked");
    // The user puts things of their own there, some with names close to eckpt's.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("keep"), "k").unwrap();
    let theirs = [
        "tmp-results/a",
        "trash-can/b",
        "epoch-90/model.pt",
        "tmp-3-x/c",
        "trash-epoch-1-7/d",
        "epoch-007/e",
    ];
    for path in theirs {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "theirs").unwrap();
    }
    std::fs::create_dir(root.join("epoch-7")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join("trash-epoch-1-1-2-3")).unwrap();
    assert_eq!(
        dir.epochs().unwrap(),
        vec![1],
        "epoch-90 and epoch-7 hold no manifest of eckpt's"
    );
    // A flush clears eckpt's leftovers only, and retention retires the older of eckpt's
    // own epochs — not the new one as "older than 90".
    flush(&dir, 2, 1);
    assert_eq!(dir.retire(1).unwrap(), vec![1]);
    dir.purge_trash().unwrap();
    assert_eq!(dir.epochs().unwrap(), vec![2]);
    assert_eq!(dir.newest().unwrap().0.epoch(), 2);
    for path in theirs {
        assert_eq!(
            std::fs::read_to_string(root.join(path)).unwrap(),
            "theirs",
            "{path}"
        );
    }
    assert!(root.join("epoch-7").is_dir());
    assert!(elsewhere.join("keep").is_file(), "a link is never followed");
    assert!(root.join("trash-epoch-1-1-2-3").exists());
    // A directory of eckpt's naming that holds no epoch of eckpt's blocks that epoch's
    // flush, in one line, and stays.
    let e = dir.stage(7).unwrap_err().to_string();
    assert!(e.contains("epoch-7 exists and is not a flushed epoch"), "{e}");
    assert!(root.join("epoch-7").is_dir());
    // Taken again (a restarted cluster): the mark says it is eckpt's.
    dir.claim().unwrap();
}
