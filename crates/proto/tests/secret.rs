//! The cluster secret file: created 0600 and crash-safely, never replaced, and refused
//! when others could read it.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use eckpt_proto::{secret_path, ClusterSecret, ProtoError, SECRET_LEN};

fn mode(path: &std::path::Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn created_file_is_0600_32_random_bytes_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_path(dir.path());
    let created = ClusterSecret::create_file(&path).unwrap();
    assert_eq!(mode(&path), 0o600);
    let bytes = fs::read(&path).unwrap();
    assert_eq!(bytes.len(), SECRET_LEN);
    assert_ne!(bytes, vec![0u8; SECRET_LEN]);
    assert_eq!(ClusterSecret::load(&path).unwrap(), created);
    // Nothing but the secret is left in the directory (no temporary files).
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("secret")]);

    // Two secrets are different.
    let other = ClusterSecret::create_file(&dir.path().join("other")).unwrap();
    assert_ne!(other, created);
}

#[test]
fn an_existing_secret_is_never_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    let first = ClusterSecret::create_file(&path).unwrap();
    let err = ClusterSecret::create_file(&path).unwrap_err();
    assert!(
        matches!(&err, ProtoError::Io { source, .. } if source.kind() == std::io::ErrorKind::AlreadyExists),
        "{err:?}"
    );
    assert_eq!(ClusterSecret::load(&path).unwrap(), first);
    assert_eq!(
        fs::read_dir(dir.path()).unwrap().count(),
        1,
        "temporary file removed after the failure"
    );
}

#[test]
fn load_refuses_files_accessible_by_group_or_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    ClusterSecret::create_file(&path).unwrap();
    for bad in [0o640, 0o604, 0o660, 0o644, 0o602, 0o610] {
        fs::set_permissions(&path, fs::Permissions::from_mode(bad)).unwrap();
        let err = ClusterSecret::load(&path).unwrap_err();
        assert!(
            matches!(err, ProtoError::SecretPermissions { mode, .. } if mode == bad),
            "{bad:o}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&format!("{bad:04o}")), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("chmod 600"), "{msg}");
    }
    for good in [0o600, 0o400] {
        fs::set_permissions(&path, fs::Permissions::from_mode(good)).unwrap();
        ClusterSecret::load(&path).unwrap();
    }
}

#[test]
fn load_refuses_wrong_sizes_directories_and_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short");
    fs::write(&path, [1u8; 31]).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let err = ClusterSecret::load(&path).unwrap_err();
    assert!(err.to_string().contains("31 bytes long, expected 32"), "{err}");

    let sub = dir.path().join("sub");
    fs::create_dir(&sub).unwrap();
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o700)).unwrap();
    let err = ClusterSecret::load(&sub).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");

    let err = ClusterSecret::load(&dir.path().join("missing")).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn concurrent_load_or_create_agrees_on_one_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    let secrets: Vec<ClusterSecret> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| ClusterSecret::load_or_create(&path).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(secrets.iter().all(|s| *s == secrets[0]));
    assert_eq!(ClusterSecret::load(&path).unwrap(), secrets[0]);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}
