//! What callers of the library get when encode, decode or verify fail: an error of the kind
//! that happened, with the message naming the paths, stripes and shards concerned.

use std::fs;
use std::path::{Path, PathBuf};

use eckpt_codec::{CodeKind, CodecError};
use eckpt_shards::{decode_dir, encode_file, verify_dir, Damage, EncodeOptions, ShardsError};

fn options(k: usize, m: usize, block_size: u64) -> EncodeOptions {
    EncodeOptions {
        kind: CodeKind::Cauchy,
        k,
        m,
        block_size,
        threads: 2,
    }
}

/// Writes `len` bytes to `dir/input` and encodes them into `dir/shards`.
fn encoded(dir: &Path, len: usize, opts: &EncodeOptions) -> PathBuf {
    let input = dir.join("input");
    fs::write(&input, (0..len).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>()).unwrap();
    let shards = dir.join("shards");
    encode_file(&input, &shards, opts, &|_| {}).unwrap();
    shards
}

fn shard(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("shard.{i:03}"))
}

/// The callback runs on the writer thread: its panic crashes a worker, which is a bug to
/// report, not a bad argument, and leaves no shard or manifest behind.
#[test]
fn a_panicking_worker_thread_is_an_internal_error_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    fs::write(&input, vec![7u8; 100_000]).unwrap();
    let out = tmp.path().join("shards");
    let err = encode_file(&input, &out, &options(3, 2, 4096), &|_| {
        panic!("progress callback failed")
    })
    .unwrap_err();
    assert!(matches!(err, ShardsError::Internal(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "internal error: the writer thread panicked: progress callback failed"
    );
    assert_eq!(
        fs::read_dir(&out).unwrap().count(),
        0,
        "no temporary shard or manifest left"
    );
}

#[test]
fn out_of_range_arguments_are_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input");
    fs::write(&input, b"abc").unwrap();
    let out = tmp.path().join("shards");
    let err = encode_file(&input, &out, &options(200, 100, 4096), &|_| {}).unwrap_err();
    assert!(
        matches!(&err, ShardsError::Invalid(m) if m.contains("k + m")),
        "{err:?}"
    );
    let err = encode_file(&input, &out, &options(2, 1, 0), &|_| {}).unwrap_err();
    assert!(
        matches!(&err, ShardsError::Invalid(m) if m.contains("block size")),
        "{err:?}"
    );
    let err = encode_file(Path::new("/dev/zero"), &out, &options(2, 1, 4096), &|_| {}).unwrap_err();
    assert!(matches!(err, ShardsError::Invalid(_)), "{err:?}");
}

#[test]
fn a_missing_input_is_an_io_error_at_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let err = encode_file(
        Path::new("/no/such/file"),
        &tmp.path().join("s"),
        &options(2, 1, 4096),
        &|_| {},
    )
    .unwrap_err();
    match &err {
        ShardsError::Io { action, path, source } => {
            assert_eq!((*action, path.as_path()), ("open", Path::new("/no/such/file")));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().starts_with("cannot open /no/such/file: "),
        "{err}"
    );
}

#[test]
fn a_bad_manifest_is_a_manifest_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = encoded(tmp.path(), 10_000, &options(2, 1, 1024));
    let manifest = shards.join("manifest.json");
    fs::write(&manifest, b"{\"format\": \"eckpt-shards\"").unwrap();
    for err in [
        verify_dir(&shards, &|_| {}).unwrap_err(),
        decode_dir(&shards, &tmp.path().join("out"), 1, &|_| {}).unwrap_err(),
    ] {
        assert!(
            matches!(&err, ShardsError::Manifest { path, .. } if *path == manifest),
            "{err:?}"
        );
        assert!(err.to_string().contains("invalid manifest"), "{err}");
    }
}

#[test]
fn too_many_missing_files_name_them_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = encoded(tmp.path(), 50_000, &options(4, 2, 4096));
    for i in [0, 1, 4] {
        fs::remove_file(shard(&shards, i)).unwrap();
    }
    let out = tmp.path().join("out");
    let err = decode_dir(&shards, &out, 2, &|_| {}).unwrap_err();
    match &err {
        ShardsError::MissingShards { files, m, .. } => {
            assert_eq!(files, &["shard.000", "shard.001", "shard.004"]);
            assert_eq!(*m, 2);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string().contains("shard.000, shard.001, shard.004"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn a_stripe_beyond_repair_names_the_stripe_and_each_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = encoded(tmp.path(), 200_000, &options(4, 2, 4096));
    fs::remove_file(shard(&shards, 1)).unwrap();
    fs::remove_file(shard(&shards, 4)).unwrap();
    let path = shard(&shards, 3);
    let mut bytes = fs::read(&path).unwrap();
    bytes[4096 * 5 + 1] ^= 0x5a;
    fs::write(&path, bytes).unwrap();
    let out = tmp.path().join("out");
    let err = decode_dir(&shards, &out, 2, &|_| {}).unwrap_err();
    match &err {
        ShardsError::DamagedStripe {
            stripe,
            input_bytes,
            damaged,
            source,
            ..
        } => {
            assert_eq!(*stripe, 5);
            assert_eq!(*input_bytes, 5 * 4 * 4096..6 * 4 * 4096);
            assert_eq!(
                damaged,
                &[
                    ("shard.001".to_string(), Damage::Missing),
                    ("shard.003".to_string(), Damage::ChecksumMismatch),
                    ("shard.004".to_string(), Damage::Missing),
                ]
            );
            assert_eq!(*source, CodecError::TooManyErasures { erased: 3, m: 2 });
        }
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());
}

/// A manifest whose recorded hash was changed: every block checks out, so only the output
/// hash can catch it, and the output is discarded.
#[test]
fn a_decoded_file_that_does_not_hash_to_the_manifest_is_discarded() {
    let tmp = tempfile::tempdir().unwrap();
    let shards = encoded(tmp.path(), 30_000, &options(3, 1, 4096));
    let manifest = shards.join("manifest.json");
    let json: serde_json::Value = serde_json::from_slice(&fs::read(&manifest).unwrap()).unwrap();
    let recorded = json["input_xxh3"].as_str().unwrap().to_string();
    let changed = format!("{:016x}", u64::from_str_radix(&recorded, 16).unwrap() ^ 1);
    fs::write(
        &manifest,
        fs::read_to_string(&manifest)
            .unwrap()
            .replace(&recorded, &changed),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let err = decode_dir(&shards, &out, 2, &|_| {}).unwrap_err();
    match &err {
        ShardsError::OutputMismatch { decoded, expected } => {
            assert_eq!((decoded, expected), (&recorded, &changed));
        }
        other => panic!("{other:?}"),
    }
    assert!(!out.exists());
}
