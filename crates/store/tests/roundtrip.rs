//! Many epochs of random changes, checked byte for byte against an in-memory model, plus
//! retention, coalescing, two-phase commit, cluster hooks and import.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufReader, Read, Seek, SeekFrom};

use eckpt_store::{parse_delta, Image, Options, PreparedEpoch, RetentionPolicy, Store, StoreError, XorBlock};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<String, Vec<u8>>;

/// Per-epoch facts the test tracks to predict retention.
#[derive(Clone, Copy, Debug)]
struct EpochFacts {
    full: bool,
    parent: Option<u64>,
    chain_len: u32,
}

fn random_bytes(rng: &mut StdRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}

/// Applies dirty blocks to `old` the way the store defines it: cut/zero-extend, overlay.
fn apply_dirty(old: &[u8], new_len: usize, bs: usize, blocks: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut v = old.to_vec();
    v.resize(new_len, 0);
    for (i, d) in blocks {
        let at = *i as usize * bs;
        v[at..at + d.len()].copy_from_slice(d);
    }
    v
}

/// Writes one random epoch and returns the new model.
fn write_random_epoch(
    store: &Store,
    rank: u32,
    epoch: u64,
    model: &Model,
    rng: &mut StdRng,
) -> (Model, bool, PreparedEpoch) {
    let mut w = store.writer(rank, epoch).unwrap();
    let full = w.is_full();
    let mut next = model.clone();
    for (name, old) in model {
        match rng.random_range(0..10) {
            0..=2 => {} // carried over unchanged
            3..=6 => {
                // Dirty blocks with a per-item block size, sometimes a new length.
                let bs = 64 + (name.len() % 3) * 100;
                let new_len = if rng.random_bool(0.3) {
                    rng.random_range(0..6000)
                } else {
                    old.len()
                };
                let count = new_len.div_ceil(bs) as u64;
                let mut blocks = Vec::new();
                for i in 0..count {
                    if rng.random_bool(0.2) {
                        let start = i as usize * bs;
                        let n = bs.min(new_len - start);
                        blocks.push((i, random_bytes(rng, n)));
                    }
                }
                // Growth without dirty blocks reads as zeros; make that visible too.
                let refs: Vec<(u64, &[u8])> = blocks.iter().map(|(i, d)| (*i, d.as_slice())).collect();
                w.put_dirty(name, bs as u32, new_len as u64, &refs).unwrap();
                next.insert(name.clone(), apply_dirty(old, new_len, bs, &blocks));
            }
            7..=8 => {
                // Full content with a few random edits: stored as a block diff.
                let mut v = old.clone();
                if rng.random_bool(0.3) {
                    v.resize(rng.random_range(0..6000), 7);
                }
                for _ in 0..rng.random_range(0..4) {
                    if !v.is_empty() {
                        let at = rng.random_range(0..v.len());
                        v[at] = v[at].wrapping_add(1);
                    }
                }
                w.put_full(name, &v).unwrap();
                next.insert(name.clone(), v);
            }
            _ => {
                w.remove(name).unwrap();
                next.remove(name);
            }
        }
    }
    if rng.random_bool(0.3) || next.is_empty() {
        let name = format!("item-{epoch}");
        let n = rng.random_range(0..5000);
        let v = random_bytes(rng, n);
        w.put_full(&name, &v).unwrap();
        next.insert(name, v);
    }
    (next, full, w.prepare().unwrap())
}

fn check_epoch(store: &Store, rank: u32, epoch: u64, want: &Model, rng: &mut StdRng) {
    let image = store.read_image(rank, epoch).unwrap();
    assert_eq!(&image.items, want, "image of epoch {epoch}");
    for (name, bytes) in want {
        let mut buf = vec![0xAAu8; bytes.len()];
        store.read_item_into(rank, epoch, name, &mut buf).unwrap();
        assert_eq!(&buf, bytes);
        // Streaming with an odd buffer size.
        let mut streamed = Vec::new();
        BufReader::with_capacity(333, store.item_reader(rank, epoch, name).unwrap())
            .read_to_end(&mut streamed)
            .unwrap();
        assert_eq!(&streamed, bytes);
        if !bytes.is_empty() {
            let a = rng.random_range(0..bytes.len());
            let b = rng.random_range(a..=bytes.len());
            let mut part = vec![0u8; b - a];
            store
                .read_item_range(rank, epoch, name, a as u64, &mut part)
                .unwrap();
            assert_eq!(&part[..], &bytes[a..b]);
            let mut r = store.item_reader(rank, epoch, name).unwrap();
            r.seek(SeekFrom::Start(a as u64)).unwrap();
            let mut tail = Vec::new();
            r.read_to_end(&mut tail).unwrap();
            assert_eq!(&tail[..], &bytes[a..]);
        }
    }
}

/// Epochs that must remain: the newest `keep` committed, plus their chains.
fn expected_retained(facts: &BTreeMap<u64, EpochFacts>, keep: usize) -> BTreeSet<u64> {
    let mut needed = BTreeSet::new();
    for &e in facts.keys().rev().take(keep) {
        let mut e = e;
        while needed.insert(e) {
            let f = facts[&e];
            if f.full {
                break;
            }
            e = f.parent.unwrap();
        }
    }
    needed
}

fn dir_entries(store: &Store, rank: u32) -> BTreeSet<String> {
    std::fs::read_dir(store.root().join(format!("rank.{rank}")))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn expected_xor(
    old: &Model,
    new: &Model,
    store: &Store,
    rank: u32,
    epoch: u64,
    parent: u64,
) -> Vec<XorBlock> {
    let m = store.manifest(rank, epoch).unwrap();
    let pm = store.manifest(rank, parent).unwrap();
    let mut out = Vec::new();
    let mut push = |name: &str, bs: u32, a: &[u8], b: &[u8]| {
        let span = a.len().max(b.len());
        let bsz = bs as usize;
        for idx in 0..span.div_ceil(bsz) {
            let start = idx * bsz;
            let end = (start + bsz).min(span);
            let bytes: Vec<u8> = (start..end)
                .map(|i| a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0))
                .collect();
            if bytes.iter().any(|&x| x != 0) {
                out.push(XorBlock {
                    item: name.to_string(),
                    block_size: bs,
                    index: idx as u64,
                    bytes,
                });
            }
        }
    };
    for item in &m.items {
        let o = old.get(&item.name).map(Vec::as_slice).unwrap_or(&[]);
        push(&item.name, item.block_size, o, &new[&item.name]);
    }
    for item in pm.items.iter().filter(|i| !new.contains_key(&i.name)) {
        push(&item.name, item.block_size, &old[&item.name], &[]);
    }
    out
}

fn sorted(mut v: Vec<XorBlock>) -> Vec<XorBlock> {
    v.sort_by(|a, b| (&a.item, a.index).cmp(&(&b.item, b.index)));
    v
}

fn run_history(seed: u64, policy: RetentionPolicy, epochs: u64) {
    let dir = tempfile::tempdir().unwrap();
    let replica_dir = tempfile::tempdir().unwrap();
    let opts = Options {
        block_size: 256,
        retention: policy,
    };
    let store = Store::open_with(dir.path(), opts).unwrap();
    let replica = Store::open(replica_dir.path()).unwrap();
    let rank = 3;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut history: BTreeMap<u64, Model> = BTreeMap::new();
    let mut facts: BTreeMap<u64, EpochFacts> = BTreeMap::new();
    let mut model = Model::new();
    let mut epoch = 0;
    for _ in 0..epochs {
        // Epoch numbers need not be consecutive.
        let parent = (epoch > 0).then_some(epoch);
        epoch += rng.random_range(1..3);
        let (next, full, prepared) = write_random_epoch(&store, rank, epoch, &model, &mut rng);
        let chain_len = match parent {
            None => 0,
            Some(p) if full => {
                let _ = p;
                0
            }
            Some(p) => facts[&p].chain_len + 1,
        };
        if let Some(p) = parent {
            if facts[&p].chain_len >= policy.max_chain {
                assert!(
                    full,
                    "epoch {epoch} should be full after a chain of {}",
                    facts[&p].chain_len
                );
            }
        } else {
            assert!(full, "first epoch must be full");
        }
        assert!(chain_len <= policy.max_chain);
        let m = store.manifest(rank, epoch).unwrap();
        assert_eq!((m.full, m.parent, m.chain_len), (full, parent, chain_len));
        facts.insert(
            epoch,
            EpochFacts {
                full,
                parent,
                chain_len,
            },
        );
        history.insert(epoch, next.clone());

        // Cluster hooks on the prepared epoch, as the cluster runs them before commit.
        if let Some(p) = parent {
            let got = sorted(store.dirty_xor(rank, epoch).unwrap());
            assert_eq!(
                got,
                sorted(expected_xor(&model, &next, &store, rank, epoch, p)),
                "xor of {epoch}"
            );
        }
        let dlen = store.delta_len(rank, epoch).unwrap();
        let padded = store
            .padded_delta(rank, epoch, dlen + rng.random_range(0..100))
            .unwrap();
        assert!(matches!(
            store.padded_delta(rank, epoch, dlen - 1),
            Err(StoreError::DeltaTooLarge { .. })
        ));
        let parsed = parse_delta(&padded).unwrap();
        assert_eq!(parsed.encode().unwrap().len() as u64, dlen);
        assert_eq!(parsed.parent, if full { None } else { parent });
        assert_eq!(replica.apply_delta(rank, &padded).unwrap(), epoch);
        assert_eq!(replica.read_image(rank, epoch).unwrap().items, next);
        // Streamed, the delta is the same bytes as built in memory.
        let out = std::path::Path::new("delta");
        let mut streamed = Vec::new();
        let n = store.write_delta(rank, epoch, false, &mut streamed, out).unwrap();
        assert_eq!((n, streamed.as_slice()), (dlen, &padded[..dlen as usize]));
        // The complete image as a parentless delta (the first stripe of a chain) rebuilds
        // the epoch on a store that has nothing of the rank.
        let mut complete = Vec::new();
        let n = store.write_delta(rank, epoch, true, &mut complete, out).unwrap();
        assert_eq!(n, store.encoded_delta_len(rank, epoch, true).unwrap());
        assert_eq!(parse_delta(&complete).unwrap().parent, None);
        let fresh_dir = tempfile::tempdir().unwrap();
        let fresh = Store::open(fresh_dir.path()).unwrap();
        fresh.apply_delta(rank, &complete).unwrap();
        assert_eq!(fresh.read_image(rank, epoch).unwrap().items, next);

        prepared.commit().unwrap();
        model = next;
        if rng.random_bool(0.15) {
            if let Some(e) = store.coalesce(rank).unwrap() {
                assert_eq!(e, epoch);
                let f = facts.get_mut(&e).unwrap();
                f.full = true;
                f.chain_len = 0;
                assert!(store.manifest(rank, e).unwrap().full);
            }
        }
        let want = expected_retained(&facts, policy.keep_committed);
        let listed: BTreeSet<u64> = store.list_epochs(rank).unwrap().into_iter().collect();
        assert_eq!(listed, want, "retained epochs after {epoch}");
        // Nothing but the lock and one directory per retained epoch remains.
        let entries = dir_entries(&store, rank);
        assert_eq!(entries.len(), want.len() + 1, "{entries:?}");
        facts.retain(|e, _| want.contains(e));
        assert_eq!(store.latest_committed(rank).unwrap(), Some(epoch));
        for &e in &want {
            check_epoch(&store, rank, e, &history[&e], &mut rng);
        }
    }
    // A fresh open sees the same.
    let reopened = Store::open_with(dir.path(), opts).unwrap();
    check_epoch(&reopened, rank, epoch, &history[&epoch], &mut rng);
}

#[test]
fn long_history_default_policy() {
    run_history(1, RetentionPolicy::default(), 40);
}

#[test]
fn short_chains_keep_three() {
    run_history(
        2,
        RetentionPolicy {
            keep_committed: 3,
            max_chain: 2,
            max_chain_ratio: 10.0,
        },
        40,
    );
}

#[test]
fn every_epoch_full_keep_one() {
    run_history(
        3,
        RetentionPolicy {
            keep_committed: 1,
            max_chain: 0,
            max_chain_ratio: 1.0,
        },
        15,
    );
}

#[test]
fn ratio_forces_full_image() {
    let dir = tempfile::tempdir().unwrap();
    let policy = RetentionPolicy {
        keep_committed: 1,
        max_chain: 100,
        max_chain_ratio: 0.5,
    };
    let store = Store::open_with(
        dir.path(),
        Options {
            block_size: 100,
            retention: policy,
        },
    )
    .unwrap();
    let mut w = store.writer(0, 1).unwrap();
    w.put_full("a", &[1u8; 1000]).unwrap();
    w.commit().unwrap();
    // Each delta rewrites 3 of 10 blocks: 300 bytes, then 600 > 0.5 × 1000.
    let mut fulls = Vec::new();
    for e in 2..=5u64 {
        let mut w = store.writer(0, e).unwrap();
        fulls.push(w.is_full());
        let blocks: Vec<(u64, Vec<u8>)> = (0..3).map(|i| (i, vec![e as u8; 100])).collect();
        let refs: Vec<(u64, &[u8])> = blocks.iter().map(|(i, d)| (*i, d.as_slice())).collect();
        w.put_dirty("a", 100, 1000, &refs).unwrap();
        w.commit().unwrap();
    }
    assert_eq!(fulls, [false, false, true, false]);
    // Epoch 4 is full and keep_committed is 1: after epoch 5, only 4 and 5 remain.
    assert_eq!(store.list_epochs(0).unwrap(), [4, 5]);
    let img = store.read_image(0, 5).unwrap();
    let mut want = vec![5u8; 300];
    want.extend_from_slice(&[1u8; 700]);
    assert_eq!(img.items["a"], want);
}

#[test]
fn writer_rejects_bad_requests() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(store.writer(0, 0).is_err());
    let mut w = store.writer(0, 5).unwrap();
    w.put_full("a", b"abc").unwrap();
    assert!(w.put_full("a", b"abc").is_err(), "duplicate item");
    assert!(
        w.put_dirty("b", 4, 10, &[(1, b"1234"), (0, b"1234")]).is_err(),
        "unordered"
    );
    assert!(
        w.put_dirty("b", 4, 10, &[(2, b"1234")]).is_err(),
        "short last block is 2 bytes"
    );
    assert!(w.put_dirty("b", 4, 10, &[(3, b"12")]).is_err(), "past the end");
    assert!(w.put_dirty("b", 0, 10, &[]).is_err(), "zero block size");
    w.commit().unwrap();
    assert!(store.writer(0, 5).is_err(), "not newer than committed");
    assert!(store.writer(0, 4).is_err(), "older than committed");
    assert!(matches!(
        store.read_image(0, 4),
        Err(StoreError::NoEpoch { rank: 0, epoch: 4 })
    ));
    assert!(matches!(
        store.read_item_into(0, 5, "zzz", &mut []),
        Err(StoreError::NoItem { .. })
    ));
    let mut small = [0u8; 2];
    assert!(
        store.read_item_into(0, 5, "a", &mut small).is_err(),
        "wrong buffer size"
    );
    let mut two = [0u8; 2];
    assert!(
        store.read_item_range(0, 5, "a", 2, &mut two).is_err(),
        "range past end"
    );
    assert!(Store::open_with(
        dir.path(),
        Options {
            block_size: 4096,
            retention: RetentionPolicy {
                keep_committed: 0,
                ..Default::default()
            }
        }
    )
    .is_err());
}

#[test]
fn import_installs_and_repairs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut image = Image::default();
    image
        .items
        .insert("mem".into(), (0..10_000u32).map(|i| (i % 251) as u8).collect());
    image.items.insert("file".into(), b"hello".to_vec());
    // A spare node receives epoch 7 straight away.
    store.import_image(4, 7, &image).unwrap();
    assert_eq!(store.read_image(4, 7).unwrap(), image);
    assert!(store.manifest(4, 7).unwrap().parent.is_none());
    // And continues with deltas on top.
    let mut w = store.writer(4, 8).unwrap();
    assert!(!w.is_full());
    w.put_dirty("mem", 4096, 10_000, &[(1, &[9u8; 4096])]).unwrap();
    w.commit().unwrap();
    let mut want8 = image.clone();
    want8.items.get_mut("mem").unwrap()[4096..8192].fill(9);
    assert_eq!(store.read_image(4, 8).unwrap(), want8);

    // Damage epoch 7's data, then repair it by importing the same epoch again.
    let d7 = dir.path().join("rank.4/epoch-7-0/data");
    let mut bytes = std::fs::read(&d7).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&d7, bytes).unwrap();
    assert!(matches!(
        store.read_image(4, 8),
        Err(StoreError::BlockChecksum { .. })
    ));
    store.import_image(4, 7, &image).unwrap();
    assert_eq!(store.manifest(4, 7).unwrap().generation, 1);
    assert!(
        !dir.path().join("rank.4/epoch-7-0").exists(),
        "superseded generation removed"
    );
    assert_eq!(store.read_image(4, 8).unwrap(), want8);
    assert!(
        store.import_image(4, 6, &image).is_err(),
        "older than latest, not present"
    );
}

/// Items larger than the writer's 4 MiB working window, with a block size that does not
/// divide it: full writes, sparse deltas, a policy-forced full image built from dirty
/// blocks over the parent, and full content diffed against the parent, all window-crossing.
#[test]
fn large_items_cross_write_windows() {
    let dir = tempfile::tempdir().unwrap();
    let policy = RetentionPolicy {
        keep_committed: 4,
        max_chain: 1,
        max_chain_ratio: 100.0,
    };
    let store = Store::open_with(
        dir.path(),
        Options {
            block_size: 3000,
            retention: policy,
        },
    )
    .unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let len = 10_000_000usize;
    let bs = 3000usize;
    let mut v = random_bytes(&mut rng, len);
    let mut w = store.writer(0, 1).unwrap();
    w.put_full("big", &v).unwrap();
    w.commit().unwrap();

    // Epoch 2: delta of scattered blocks on both sides of the window boundaries, growing.
    let grown = len + 5001; // last block of 1 byte
    let picks = [
        0u64,
        1397,
        1398,
        1399,
        2796,
        2797,
        3333,
        (grown.div_ceil(bs) - 1) as u64,
    ];
    let blocks: Vec<(u64, Vec<u8>)> = picks
        .iter()
        .map(|&i| (i, random_bytes(&mut rng, bs.min(grown - i as usize * bs))))
        .collect();
    let refs: Vec<(u64, &[u8])> = blocks.iter().map(|(i, d)| (*i, d.as_slice())).collect();
    let mut w = store.writer(0, 2).unwrap();
    assert!(!w.is_full());
    w.put_dirty("big", bs as u32, grown as u64, &refs).unwrap();
    w.commit().unwrap();
    v = apply_dirty(&v, grown, bs, &blocks);
    assert_eq!(store.read_image(0, 2).unwrap().items["big"], v);
    assert_eq!(
        store.manifest(0, 2).unwrap().data_len,
        7 * 3000 + (grown % bs) as u64
    );

    // Epoch 3: chain limit reached, so the dirty blocks are merged into a full image.
    let blocks = vec![(1400u64, random_bytes(&mut rng, bs))];
    let refs: Vec<(u64, &[u8])> = blocks.iter().map(|(i, d)| (*i, d.as_slice())).collect();
    let mut w = store.writer(0, 3).unwrap();
    assert!(w.is_full());
    w.put_dirty("big", bs as u32, grown as u64, &refs).unwrap();
    w.commit().unwrap();
    v = apply_dirty(&v, grown, bs, &blocks);
    assert_eq!(store.manifest(0, 3).unwrap().data_len, grown as u64);

    // Epoch 4: full content with edits in two windows: only those blocks are stored.
    v[5] ^= 1;
    v[9_000_000] ^= 1;
    let mut w = store.writer(0, 4).unwrap();
    w.put_full("big", &v).unwrap();
    w.commit().unwrap();
    let m = store.manifest(0, 4).unwrap();
    let stored: Vec<u64> = m.items[0].blocks.iter().map(|b| b.index).collect();
    assert_eq!(stored, [0, 3000]);
    let mut streamed = Vec::new();
    BufReader::with_capacity(1 << 20, store.item_reader(0, 4, "big").unwrap())
        .read_to_end(&mut streamed)
        .unwrap();
    assert_eq!(streamed, v);
}

/// Several items read at once by a pool of threads — pieces of a delta chain whose block
/// sizes do not all divide a piece — read back exactly, each piece reported once as it lands,
/// and a damaged block in any piece is still an error naming it.
#[test]
fn items_are_read_in_parallel_pieces_exactly_and_still_verified() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap().with_read_threads(3);
    let mut rng = StdRng::seed_from_u64(7);
    // (name, length, block size): larger than several pieces, with a short last block; a
    // block size that does not divide a piece; the store's default blocks; a tiny item.
    let shapes: [(&str, usize, usize); 4] = [
        ("gpu/w", (40 << 20) + 12_345, 64 << 10),
        ("gpu/odd", (33 << 20) + 8, 24 << 10),
        ("heap", (20 << 20) + 7, 4096),
        ("meta", 100, 4096),
    ];
    let mut images: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(_, len, _)| random_bytes(&mut rng, len))
        .collect();
    let mut w = store.writer(0, 1).unwrap();
    for (&(name, _, bs), image) in shapes.iter().zip(&images) {
        w.put_full_in_blocks(name, bs as u32, image).unwrap();
    }
    w.commit().unwrap();
    // Epochs 2 and 3 rewrite blocks spread over every piece.
    for epoch in 2..=3 {
        let mut w = store.writer(0, epoch).unwrap();
        for (&(name, len, bs), image) in shapes.iter().zip(images.iter_mut()) {
            let count = len.div_ceil(bs) as u64;
            let blocks: Vec<(u64, Vec<u8>)> = (0..count)
                .filter(|i| (i * 7 + epoch) % 23 == 0 || *i == count - 1)
                .map(|i| (i, random_bytes(&mut rng, (len - i as usize * bs).min(bs))))
                .collect();
            let views: Vec<(u64, &[u8])> = blocks.iter().map(|(i, d)| (*i, &d[..])).collect();
            w.put_dirty(name, bs as u32, len as u64, &views).unwrap();
            *image = apply_dirty(image, len, bs, &blocks);
        }
        w.commit().unwrap();
    }

    let read_all = |buffers: &mut [Vec<u8>]| {
        let items: Vec<(&str, &mut [u8])> = shapes
            .iter()
            .zip(buffers.iter_mut())
            .map(|(&(name, _, _), buf)| (name, &mut buf[..]))
            .collect();
        let mut landed: Vec<Vec<std::ops::Range<usize>>> = vec![Vec::new(); shapes.len()];
        let result = store.read_items_into(0, 3, items, &mut |item, range| {
            landed[item].push(range);
            Ok::<(), StoreError>(())
        });
        result.map(|()| landed)
    };
    let mut buffers: Vec<Vec<u8>> = shapes.iter().map(|&(_, len, _)| vec![0xa5; len]).collect();
    let landed = read_all(&mut buffers).unwrap();
    for (((name, len, _), buf), (image, mut ranges)) in
        shapes.iter().zip(&buffers).zip(images.iter().zip(landed))
    {
        assert!(buf == image, "{name} differs from the model");
        ranges.sort_by_key(|r| r.start);
        let mut at = 0;
        for r in ranges {
            assert_eq!(r.start, at, "{name}: pieces must cover the item once");
            at = r.end;
        }
        assert_eq!(at, *len, "{name}: pieces must cover the item once");
    }

    // A flipped byte near the end of epoch 1's data (in "heap", read in pieces) is reported.
    let data = dir.path().join("rank.0/epoch-1-0/data");
    let mut bytes = std::fs::read(&data).unwrap();
    let at = bytes.len() - 5_000;
    bytes[at] ^= 1;
    std::fs::write(&data, bytes).unwrap();
    let err = read_all(&mut buffers).unwrap_err();
    assert!(
        matches!(err, StoreError::BlockChecksum { stored_in: 1, .. }),
        "{err}"
    );
    let mut one = vec![0; shapes[2].1];
    let err = store.read_item_into(0, 3, "heap", &mut one).unwrap_err();
    assert!(
        matches!(err, StoreError::BlockChecksum { ref item, .. } if item == "heap"),
        "{err}"
    );
}

/// The caller's refusal of a landed piece ends the read: it is the call's error, and no piece
/// is reported after it.
#[test]
fn a_refused_piece_ends_the_read_with_the_callers_error() {
    #[derive(Debug)]
    enum Failure {
        Store(StoreError),
        Refused,
    }
    impl From<StoreError> for Failure {
        fn from(e: StoreError) -> Failure {
            Failure::Store(e)
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let image = random_bytes(&mut StdRng::seed_from_u64(3), 100 << 20);
    let mut w = store.writer(0, 1).unwrap();
    w.put_full("big", &image).unwrap();
    w.commit().unwrap();
    let mut buf = vec![0u8; image.len()];
    // By a pool of threads, and by the calling thread alone.
    for threads in [2, 1] {
        let store = store.clone().with_read_threads(threads);
        let mut calls = 0;
        let result = store.read_items_into(0, 1, vec![("big", &mut buf[..])], &mut |_, _| {
            calls += 1;
            Err(Failure::Refused)
        });
        assert!(matches!(result, Err(Failure::Refused)), "{result:?}");
        assert_eq!(calls, 1, "{threads} threads");
    }
    // A buffer of another length than the item's is refused before anything is read.
    let mut short = [0u8; 10];
    let result = store.read_items_into(0, 1, vec![("big", &mut short[..])], &mut |_, _| {
        Ok::<(), Failure>(())
    });
    assert!(
        matches!(result, Err(Failure::Store(StoreError::Invalid(_)))),
        "{result:?}"
    );
}

/// Thousands of small items (a rank protecting many regions), through a chain whose links
/// list them in different orders — a delta's manifest puts the items written first, then
/// the ones carried over; items come and go — each read back by name exactly, and the
/// parity-update input naming exactly the blocks that changed.
#[test]
fn many_small_items_are_found_by_name_in_every_link() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap().with_read_threads(2);
    let mut rng = StdRng::seed_from_u64(11);
    let mut model: Model = (0..3000)
        .map(|i| (format!("mem/r{i}"), random_bytes(&mut rng, 64)))
        .collect();
    let mut w = store.writer(0, 1).unwrap();
    for (name, bytes) in &model {
        w.put_full(name, bytes).unwrap();
    }
    w.commit().unwrap();
    let mut changed_in_3 = BTreeSet::new();
    for epoch in 2..=3u64 {
        let mut w = store.writer(0, epoch).unwrap();
        // Every 97th item changes, every 499th goes, and a few new ones come.
        let names: Vec<String> = model.keys().cloned().collect();
        for (i, name) in names.iter().enumerate() {
            if (i as u64 + epoch).is_multiple_of(499) {
                w.remove(name).unwrap();
                model.remove(name);
            } else if (i as u64 + epoch).is_multiple_of(97) {
                let bytes = random_bytes(&mut rng, 64);
                w.put_dirty(name, 4096, 64, &[(0, &bytes[..])]).unwrap();
                model.insert(name.clone(), bytes);
                if epoch == 3 {
                    changed_in_3.insert(name.clone());
                }
            }
        }
        for k in 0..5 {
            let name = format!("mem/new-{epoch}-{k}");
            let bytes = random_bytes(&mut rng, 64);
            w.put_full(&name, &bytes).unwrap();
            model.insert(name.clone(), bytes);
            if epoch == 3 {
                changed_in_3.insert(name);
            }
        }
        w.commit().unwrap();
    }

    let mut buffers: Vec<(String, Vec<u8>)> = model.keys().rev().map(|n| (n.clone(), vec![0; 64])).collect();
    let items = buffers
        .iter_mut()
        .map(|(n, b)| (n.as_str(), &mut b[..]))
        .collect();
    store
        .read_items_into(0, 3, items, &mut |_, _| Ok::<(), StoreError>(()))
        .unwrap();
    for (name, buf) in &buffers {
        assert!(*buf == model[name], "{name} differs from the model");
    }
    let xor: BTreeSet<String> = store
        .dirty_xor(0, 3)
        .unwrap()
        .into_iter()
        .map(|b| b.item)
        .collect();
    let removed_in_3: BTreeSet<String> = store
        .manifest(0, 2)
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.name)
        .filter(|n| !model.contains_key(n))
        .collect();
    let want: BTreeSet<String> = changed_in_3.union(&removed_in_3).cloned().collect();
    assert_eq!(xor, want);
}
