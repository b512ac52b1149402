//! Crash safety under SIGKILL at random instants.
//!
//! This test binary has its own `main` (harness = false). Run normally it is the parent: it
//! repeatedly re-executes itself with `ECKPT_STORE_CRASH_CHILD=<dir>`, which makes the child
//! write epochs into the store at `<dir>` in an endless loop (sometimes pausing between
//! prepare and commit, sometimes coalescing), and SIGKILLs it after a random delay. After
//! each kill the parent opens the store and checks that the latest committed epoch — and
//! every other committed epoch still listed — reads back byte-exact with the content that
//! epoch is defined to have. Content is a pure function of the epoch number (each epoch's
//! changes are drawn from an RNG seeded by the epoch), so parent and child agree without
//! talking. The parent also records what state each kill left on disk, and requires that
//! kills landed mid-write and between prepare and commit several times.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use eckpt_store::{Options, RetentionPolicy, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CHILD_ENV: &str = "ECKPT_STORE_CRASH_CHILD";
const RANK: u32 = 7;
const ITEMS: [&str; 4] = ["stack", "heap", "file.dat", "extra"];

type Model = BTreeMap<String, Vec<u8>>;

enum Op {
    Dirty {
        name: &'static str,
        bs: u32,
        len: usize,
        blocks: Vec<(u64, Vec<u8>)>,
    },
    Full {
        name: &'static str,
        bytes: Vec<u8>,
    },
    Remove {
        name: &'static str,
    },
}

fn options() -> Options {
    Options {
        block_size: 512,
        retention: RetentionPolicy {
            keep_committed: 2,
            max_chain: 4,
            max_chain_ratio: 0.8,
        },
    }
}

/// The changes epoch `epoch` makes to `prev` (the image of the epoch before), and the result.
fn step(epoch: u64, prev: &Model) -> (Vec<Op>, Model) {
    let mut rng = StdRng::seed_from_u64(epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut next = prev.clone();
    let mut ops = Vec::new();
    for name in ITEMS {
        let old = prev.get(name);
        match (old, rng.random_range(0..8)) {
            (None, 0..=4) => {
                let mut bytes = vec![0u8; rng.random_range(0..20_000)];
                rng.fill(&mut bytes[..]);
                next.insert(name.into(), bytes.clone());
                ops.push(Op::Full { name, bytes });
            }
            (None, _) | (Some(_), 0) => {}
            (Some(_), 1) => {
                next.remove(name);
                ops.push(Op::Remove { name });
            }
            (Some(old), 2) => {
                let mut bytes = old.clone();
                bytes.resize(rng.random_range(0..20_000), epoch as u8);
                next.insert(name.into(), bytes.clone());
                ops.push(Op::Full { name, bytes });
            }
            (Some(old), _) => {
                let bs = 256usize;
                let len = if rng.random_bool(0.2) {
                    rng.random_range(0..20_000)
                } else {
                    old.len()
                };
                let mut v = old.clone();
                v.resize(len, 0);
                let mut blocks = Vec::new();
                for i in 0..len.div_ceil(bs) {
                    if rng.random_bool(0.15) {
                        let start = i * bs;
                        let mut b = vec![0u8; bs.min(len - start)];
                        rng.fill(&mut b[..]);
                        v[start..start + b.len()].copy_from_slice(&b);
                        blocks.push((i as u64, b));
                    }
                }
                next.insert(name.into(), v);
                ops.push(Op::Dirty {
                    name,
                    bs: bs as u32,
                    len,
                    blocks,
                });
            }
        }
    }
    (ops, next)
}

/// Images of epochs 1..=upto, memoized (index 0 is the empty image before epoch 1).
fn images_upto(cache: &mut Vec<Model>, upto: u64) -> &Model {
    if cache.is_empty() {
        cache.push(Model::new());
    }
    while (cache.len() as u64) <= upto {
        let e = cache.len() as u64;
        let next = step(e, &cache[cache.len() - 1]).1;
        cache.push(next);
    }
    &cache[upto as usize]
}

fn child(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let store = Store::open_with(dir, options())?;
    let mut rng = StdRng::seed_from_u64(u64::from(std::process::id()));
    let mut latest = store.latest_committed(RANK)?.unwrap_or(0);
    if let Some(&p) = store.prepared_epochs(RANK)?.last() {
        if rng.random_bool(0.5) {
            store.resume_prepared(RANK, p)?.commit()?;
            latest = p;
        }
    }
    let mut cache = Vec::new();
    let mut model = images_upto(&mut cache, latest).clone();
    let mut epoch = latest;
    loop {
        epoch += 1;
        let (ops, next) = step(epoch, &model);
        let mut w = store.writer(RANK, epoch)?;
        for op in &ops {
            match op {
                Op::Full { name, bytes } => w.put_full(name, bytes)?,
                Op::Remove { name } => w.remove(name)?,
                Op::Dirty {
                    name,
                    bs,
                    len,
                    blocks,
                } => {
                    let refs: Vec<(u64, &[u8])> = blocks.iter().map(|(i, b)| (*i, b.as_slice())).collect();
                    w.put_dirty(name, *bs, *len as u64, &refs)?;
                }
            }
        }
        if rng.random_bool(0.3) {
            let prepared = w.prepare()?;
            std::thread::sleep(Duration::from_micros(rng.random_range(0..3000)));
            prepared.commit()?;
        } else {
            w.commit()?;
        }
        if rng.random_bool(0.1) {
            store.coalesce(RANK)?;
        }
        model = next;
    }
}

#[derive(Default, Debug)]
struct Coverage {
    mid_write: u32,
    prepared: u32,
    mid_delete: u32,
    clean: u32,
}

fn parent() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = StdRng::seed_from_u64(0xC0FFEE);
    let mut cache = Vec::new();
    let mut cov = Coverage::default();
    let mut last_latest = 0u64;
    let started = Instant::now();
    let mut trials = 0u32;
    while trials < 150 || cov.mid_write < 5 || cov.prepared < 5 || last_latest <= 20 {
        assert!(
            trials < 600,
            "kills never landed where needed: {cov:?}, epoch {last_latest}"
        );
        trials += 1;
        let mut child = Command::new(&exe)
            .env(CHILD_ENV, dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_micros(rng.random_range(2_000..60_000)));
        if let Some(status) = child.try_wait().unwrap() {
            panic!("child exited by itself: {status}");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let rank_dir = dir.path().join(format!("rank.{RANK}"));
        let names: Vec<String> = std::fs::read_dir(&rank_dir)
            .map(|d| d.map(|e| e.unwrap().file_name().into_string().unwrap()).collect())
            .unwrap_or_default();
        let any = |p: &str| names.iter().any(|n| n.starts_with(p));
        if any("tmp-") {
            cov.mid_write += 1;
        }
        if any("prepared-") {
            cov.prepared += 1;
        }
        if any("trash-") {
            cov.mid_delete += 1;
        }
        if !any("tmp-") && !any("prepared-") && !any("trash-") {
            cov.clean += 1;
        }

        let store = Store::open_with(dir.path(), options()).unwrap();
        let Some(latest) = store.latest_committed(RANK).unwrap() else {
            continue;
        };
        assert!(
            latest >= last_latest,
            "committed epoch {last_latest} went back to {latest}"
        );
        last_latest = latest;
        for epoch in store.list_epochs(RANK).unwrap() {
            let image = store.read_image(RANK, epoch).unwrap_or_else(|e| {
                panic!(
                    "trial {trial}: epoch {epoch} unreadable: {e} (dir: {names:?})",
                    trial = trials
                )
            });
            assert_eq!(
                &image.items,
                images_upto(&mut cache, epoch),
                "trial {trials}: epoch {epoch} content"
            );
        }
    }
    assert!(
        last_latest > 20,
        "children made too little progress: {last_latest}"
    );
    println!(
        "crash: {trials} SIGKILL trials in {:.1}s, final epoch {last_latest}; kills left {cov:?}",
        started.elapsed().as_secs_f64()
    );
}

fn main() {
    match std::env::var_os(CHILD_ENV) {
        Some(dir) => {
            if let Err(e) = child(Path::new(&dir)) {
                eprintln!("crash child: {e}");
                std::process::exit(1);
            }
        }
        None => parent(),
    }
}
