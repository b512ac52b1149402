//! File deltas: byte-exact roundtrips through files, size bound, and safe failure.

use std::fs;
use std::path::Path;

use eckpt_capture::{delta_files, patch_file, CaptureError, DeltaError};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

fn random_bytes(rng: &mut StdRng, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    rng.fill_bytes(&mut out);
    out
}

/// Bytes of 4 KiB blocks of `new` that differ from `old` (independent of the library).
fn changed_4k(old: &[u8], new: &[u8]) -> u64 {
    new.chunks(4096)
        .enumerate()
        .filter(|(i, nb)| {
            let s = i * 4096;
            old.get(s..(s + nb.len()).min(old.len())).unwrap_or(&[]) != *nb
        })
        .map(|(_, nb)| nb.len() as u64)
        .sum()
}

fn roundtrip(dir: &Path, old: &[u8], new: &[u8]) {
    let (b, n, d, o) = (
        dir.join("base"),
        dir.join("new"),
        dir.join("delta"),
        dir.join("out"),
    );
    fs::write(&b, old).unwrap();
    fs::write(&n, new).unwrap();
    let ds = delta_files(&b, &n, &d, 4096).unwrap();
    let want = changed_4k(old, new);
    assert_eq!(ds.bytes_changed, want);
    assert_eq!(ds.base_bytes, old.len() as u64);
    assert_eq!(ds.new_bytes, new.len() as u64);
    assert_eq!(ds.delta_bytes, fs::metadata(&d).unwrap().len());
    if want > 0 {
        assert!(
            ds.delta_bytes as f64 <= 1.1 * want as f64,
            "delta {} for {} changed bytes",
            ds.delta_bytes,
            want
        );
    }
    let ps = patch_file(&b, &d, &o).unwrap();
    assert_eq!(ps.bytes_patched, want);
    assert_eq!(ps.new_bytes, new.len() as u64);
    assert!(fs::read(&o).unwrap() == new, "patched file differs");
    let leftovers: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(eckpt_durable::TEMP_MARK))
        .collect();
    assert!(leftovers.is_empty(), "temp files left behind");
}

#[test]
fn roundtrip_random_changes_and_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    // Sizes straddle the 4 MiB read chunk; lengths grow, shrink, stay, hit zero.
    let cases: [(usize, i64); 9] = [
        (0, 0),
        (0, 5000),
        (5000, -5000),
        (4096 * 3, 0),
        (10_001, 777),
        (10_001, -4100),
        ((4 << 20) + 12_345, 0),
        ((4 << 20) - 100, 9000),
        ((9 << 20) + 1, -(5 << 20)),
    ];
    for (len, grow) in cases {
        let old = random_bytes(&mut rng, len);
        let mut new = old.clone();
        let edits = (rng.random::<u64>() % 40) as usize;
        for _ in 0..edits {
            if new.is_empty() {
                break;
            }
            let at = (rng.random::<u64>() % new.len() as u64) as usize;
            let run = ((rng.random::<u64>() % 9000) as usize).min(new.len() - at);
            for x in &mut new[at..at + run] {
                *x = x.wrapping_add(1);
            }
        }
        if len > (4 << 20) {
            // A change spanning the chunk boundary.
            new[(4 << 20) - 10] ^= 1;
            new[(4 << 20) + 10] ^= 1;
        }
        let target = (len as i64 + grow) as usize;
        let tail = random_bytes(&mut rng, target.saturating_sub(new.len()));
        new.truncate(target);
        new.extend_from_slice(&tail);
        roundtrip(dir.path(), &old, &new);
    }
}

#[test]
fn identical_files_give_a_tiny_delta() {
    let dir = tempfile::tempdir().unwrap();
    let data = random_bytes(&mut StdRng::seed_from_u64(5), 1 << 20);
    fs::write(dir.path().join("a"), &data).unwrap();
    let s = delta_files(
        &dir.path().join("a"),
        &dir.path().join("a"),
        &dir.path().join("d"),
        4096,
    )
    .unwrap();
    assert_eq!((s.blocks_changed, s.bytes_changed), (0, 0));
    assert_eq!(s.delta_bytes, 32 + 21);
}

#[test]
fn corrupt_delta_or_wrong_base_leaves_output_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let mut rng = StdRng::seed_from_u64(9);
    let old = random_bytes(&mut rng, 100_000);
    let mut new = old.clone();
    new[50_000] ^= 0xff;
    fs::write(p("base"), &old).unwrap();
    fs::write(p("new"), &new).unwrap();
    delta_files(&p("base"), &p("new"), &p("delta"), 4096).unwrap();
    fs::write(p("out"), b"previous contents").unwrap();

    let mut bad = fs::read(p("delta")).unwrap();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x10;
    fs::write(p("bad"), &bad).unwrap();
    let e = patch_file(&p("base"), &p("bad"), &p("out")).unwrap_err();
    assert!(matches!(e, CaptureError::Delta(DeltaError::Crc { .. })), "{e}");
    assert_eq!(fs::read(p("out")).unwrap(), b"previous contents");

    fs::write(p("short"), &old[..99_999]).unwrap();
    let e = patch_file(&p("short"), &p("delta"), &p("out")).unwrap_err();
    assert!(
        matches!(e, CaptureError::Delta(DeltaError::BaseLength { .. })),
        "{e}"
    );
    assert_eq!(fs::read(p("out")).unwrap(), b"previous contents");

    // The good delta replaces the existing output.
    patch_file(&p("base"), &p("delta"), &p("out")).unwrap();
    assert!(fs::read(p("out")).unwrap() == new);
    assert!(delta_files(&p("base"), &p("missing"), &p("d2"), 4096)
        .unwrap_err()
        .to_string()
        .contains("missing"));
}

/// A named pipe at `path` that a thread fills with `bytes` once opened.
fn fifo(path: &Path, bytes: Vec<u8>) -> std::thread::JoinHandle<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let path = path.to_path_buf();
    std::thread::spawn(move || fs::write(path, bytes).unwrap())
}

#[test]
fn pipes_are_read_like_files() {
    // A checkpointer writing its dump into a pipe, and a delta arriving through one.
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let mut rng = StdRng::seed_from_u64(21);
    let old = random_bytes(&mut rng, (5 << 20) + 123);
    let mut new = old.clone();
    for at in [0, 4096 * 7 + 5, 3 << 20] {
        new[at] ^= 0x5a;
    }
    new.extend_from_slice(&random_bytes(&mut rng, 10_000));
    fs::write(p("base"), &old).unwrap();
    fs::write(p("new.file"), &new).unwrap();
    delta_files(&p("base"), &p("new.file"), &p("expected"), 4096).unwrap();

    let writer = fifo(&p("new.pipe"), new.clone());
    let stats = delta_files(&p("base"), &p("new.pipe"), &p("delta"), 4096).unwrap();
    writer.join().unwrap();
    assert_eq!(stats.new_bytes, new.len() as u64);
    assert!(fs::read(p("delta")).unwrap() == fs::read(p("expected")).unwrap());

    let writer = fifo(&p("delta.pipe"), fs::read(p("delta")).unwrap());
    patch_file(&p("base"), &p("delta.pipe"), &p("out")).unwrap();
    writer.join().unwrap();
    assert!(fs::read(p("out")).unwrap() == new);
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let expected = [
        "base",
        "delta",
        "delta.pipe",
        "expected",
        "new.file",
        "new.pipe",
        "out",
    ];
    assert_eq!(names, expected, "no spool or temp file is left");
}
