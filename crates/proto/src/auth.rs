//! The per-cluster secret and the mutual HMAC-SHA256 challenge-response handshake.
//!
//! # Handshake (all messages are `Auth` frames, payload limit 256 bytes)
//!
//! ```text
//! client -> server  [1] nc(32)                    ClientHello: client nonce
//! server -> client  [2] ns(32) Ms(32)             ServerChallenge: server nonce + server proof
//! client -> server  [3] Mc(32)                    ClientProof
//! server -> client  [4]                           Accepted
//! either direction  [5] reason(UTF-8, <= 200)     Rejected (then the connection is closed)
//!
//! Ms = HMAC-SHA256(secret, "eckpt-proto-v1-auth" || "server" || nc || ns)
//! Mc = HMAC-SHA256(secret, "eckpt-proto-v1-auth" || "client" || nc || ns)
//! ```
//!
//! Both sides prove knowledge of the secret over both nonces, so neither proof can be
//! replayed on another connection. The role label makes a server's proof useless as a
//! client's proof (and vice versa): echoing a challenge or a proof back — a reflection
//! attack — fails. A side that receives its own nonce back refuses at once. Proofs are
//! compared in constant time (`hmac`'s `verify_slice`).
//!
//! This authenticates the peers; it does not encrypt or MAC the frames that follow, so it
//! does not protect against an active man-in-the-middle that relays the handshake and then
//! alters traffic. Cluster traffic is expected on a trusted network; frames carry CRC-32C
//! against corruption, not against forgery.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{io_ctx, ProtoError};
use crate::frame::FrameKind;
use crate::io::{FrameReader, FrameWriter};
use crate::tls::ClusterTls;

/// Length of the cluster secret in bytes (256 bits, HMAC-SHA256's block-size-safe key).
pub const SECRET_LEN: usize = 32;

/// How long a handshake may take before the peer is refused, so a silent or slow client
/// cannot hold a listener's task forever.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Payload limit while unauthenticated: the largest handshake message is 201 bytes, and an
/// anonymous peer must not be able to make us allocate more.
pub(crate) const AUTH_MAX_PAYLOAD: u32 = 256;

const NONCE_LEN: usize = 32;
const MAC_LEN: usize = 32;
const MAX_REASON: usize = 200;
const MAC_CONTEXT: &[u8] = b"eckpt-proto-v1-auth";

type HmacSha256 = Hmac<Sha256>;

/// The shared secret every node of a cluster holds; knowing it is what admits a peer.
/// `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterSecret {
    key: [u8; SECRET_LEN],
    /// TLS for connections over TCP, in clusters made with it (`eckpt up --tls`).
    tls: Option<Arc<ClusterTls>>,
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(<redacted>)")
    }
}

impl ClusterSecret {
    /// Wraps existing key material (e.g. from a configuration system).
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> ClusterSecret {
        ClusterSecret {
            key: bytes,
            tls: None,
        }
    }

    /// This secret, with `tls` wrapped around its TCP connections.
    pub fn with_tls(self, tls: ClusterTls) -> ClusterSecret {
        ClusterSecret {
            tls: Some(Arc::new(tls)),
            ..self
        }
    }

    /// The cluster's TLS, if it has one.
    pub fn tls(&self) -> Option<&ClusterTls> {
        self.tls.as_deref()
    }

    /// A fresh secret from the operating system's CSPRNG.
    pub fn generate() -> Result<ClusterSecret, ProtoError> {
        let mut bytes = [0u8; SECRET_LEN];
        random_bytes(&mut bytes)?;
        Ok(ClusterSecret::from_bytes(bytes))
    }

    /// Creates a new secret file at `path` (mode 0600, 32 random bytes) and returns the
    /// secret. Crash-safe: the bytes are written and fsync'd under a temporary name, then
    /// hard-linked to `path` and the directory fsync'd, so `path` either does not exist or
    /// holds a complete secret. The link (unlike `rename`) fails if `path` already exists,
    /// so two processes racing to create it never end up with different secrets, and an
    /// existing secret is never replaced.
    pub fn create_file(path: &Path) -> Result<ClusterSecret, ProtoError> {
        let secret = ClusterSecret::generate()?;
        create_private_file(path, &secret.key)?;
        Ok(secret)
    }

    /// Loads the secret from `path`, refusing a file that group or others could access
    /// (a secret others can read admits anyone), one that is not a regular file, or one
    /// that is not exactly [`SECRET_LEN`] bytes.
    pub fn load(path: &Path) -> Result<ClusterSecret, ProtoError> {
        let bytes = read_private_file(path)?;
        let key = <[u8; SECRET_LEN]>::try_from(bytes.as_slice()).map_err(|_| ProtoError::SecretInvalid {
            path: path.to_path_buf(),
            reason: format!("{} bytes long, expected {SECRET_LEN}", bytes.len()),
        })?;
        Ok(ClusterSecret::from_bytes(key))
    }

    /// Loads `path`, creating it first if it does not exist; what `eckpt up` and every
    /// agent call, so whichever process comes first creates the one secret all share.
    pub fn load_or_create(path: &Path) -> Result<ClusterSecret, ProtoError> {
        match ClusterSecret::load(path) {
            Err(ProtoError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                match ClusterSecret::create_file(path) {
                    Err(ProtoError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::AlreadyExists =>
                    {
                        ClusterSecret::load(path)
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    fn proof(
        &self,
        role: Role,
        client_nonce: &[u8; NONCE_LEN],
        server_nonce: &[u8; NONCE_LEN],
    ) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(MAC_CONTEXT);
        mac.update(role.label());
        mac.update(client_nonce);
        mac.update(server_nonce);
        mac
    }
}

/// Creates `path` holding `bytes`, readable by its owner only. Crash-safe: the bytes are
/// written and fsync'd under a temporary name, then hard-linked to `path` and the directory
/// fsync'd, so `path` either does not exist or is complete. The link (unlike `rename`)
/// fails if `path` already exists, so two processes racing to create it never end up with
/// different contents, and an existing file is never replaced.
pub(crate) fn create_private_file(path: &Path, bytes: &[u8]) -> Result<(), ProtoError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| ProtoError::SecretInvalid {
        path: path.to_path_buf(),
        reason: "path has no file name".into(),
    })?;
    let mut tag = [0u8; 8];
    random_bytes(&mut tag)?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{:016x}",
        name.to_string_lossy(),
        std::process::id(),
        u64::from_le_bytes(tag)
    ));
    let result = write_new_file(&tmp, bytes).and_then(|()| {
        fs::hard_link(&tmp, path).map_err(io_ctx(format!("creating cluster secret {}", path.display())))
    });
    // The temporary name is removed whether or not the link succeeded.
    let _ = fs::remove_file(&tmp);
    result?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_ctx(format!("fsync of directory {}", dir.display())))
}

/// The contents of `path`, refusing a file that group or others could access (a secret
/// others can read admits anyone) or one that is not a regular file.
pub(crate) fn read_private_file(path: &Path) -> Result<Vec<u8>, ProtoError> {
    let mut file = File::open(path).map_err(io_ctx(format!("opening cluster secret {}", path.display())))?;
    let meta = file
        .metadata()
        .map_err(io_ctx(format!("stat of cluster secret {}", path.display())))?;
    if !meta.is_file() {
        return Err(ProtoError::SecretInvalid {
            path: path.to_path_buf(),
            reason: "not a regular file".into(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(ProtoError::SecretPermissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    // A secret is small: a file that is not (a device, a swapped file) is not read whole.
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAX_SECRET_FILE)
        .read_to_end(&mut bytes)
        .map_err(io_ctx(format!("reading cluster secret {}", path.display())))?;
    if bytes.len() as u64 >= MAX_SECRET_FILE {
        return Err(ProtoError::SecretInvalid {
            path: path.to_path_buf(),
            reason: format!("larger than {MAX_SECRET_FILE} bytes"),
        });
    }
    Ok(bytes)
}

/// The largest secret file read (the TLS identity, a certificate and a key in PEM, is ~1 KiB).
const MAX_SECRET_FILE: u64 = 64 * 1024;

fn write_new_file(path: &Path, bytes: &[u8]) -> Result<(), ProtoError> {
    let ctx = || format!("writing {}", path.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_ctx(ctx()))?;
    // The umask can only clear bits; make the mode exactly 0600 regardless.
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io_ctx(ctx()))?;
    file.write_all(bytes).map_err(io_ctx(ctx()))?;
    file.sync_all().map_err(io_ctx(ctx()))
}

/// Fills `buf` from the operating system's random number generator (secrets, nonces, node
/// tokens).
pub fn random_bytes(buf: &mut [u8]) -> Result<(), ProtoError> {
    getrandom::fill(buf).map_err(|e| ProtoError::Io {
        context: "reading the OS random number generator".into(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Which side of the handshake this process plays; part of the MAC input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Client,
    Server,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Client => b"client",
            Role::Server => b"server",
        }
    }
}

/// Handshake messages, with the strict fixed-size binary encoding of the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AuthMsg {
    ClientHello {
        nonce: [u8; NONCE_LEN],
    },
    ServerChallenge {
        nonce: [u8; NONCE_LEN],
        proof: [u8; MAC_LEN],
    },
    ClientProof {
        proof: [u8; MAC_LEN],
    },
    Accepted,
    Rejected(String),
}

impl AuthMsg {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + NONCE_LEN + MAC_LEN);
        match self {
            AuthMsg::ClientHello { nonce } => {
                out.push(1);
                out.extend_from_slice(nonce);
            }
            AuthMsg::ServerChallenge { nonce, proof } => {
                out.push(2);
                out.extend_from_slice(nonce);
                out.extend_from_slice(proof);
            }
            AuthMsg::ClientProof { proof } => {
                out.push(3);
                out.extend_from_slice(proof);
            }
            AuthMsg::Accepted => out.push(4),
            AuthMsg::Rejected(reason) => {
                out.push(5);
                let mut end = reason.len().min(MAX_REASON);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                out.extend_from_slice(&reason.as_bytes()[..end]);
            }
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<AuthMsg, String> {
        let bad = || format!("malformed handshake message ({} bytes)", bytes.len());
        let (&tag, body) = bytes.split_first().ok_or_else(bad)?;
        let msg = match tag {
            1 => AuthMsg::ClientHello {
                nonce: body.try_into().map_err(|_| bad())?,
            },
            2 if body.len() == NONCE_LEN + MAC_LEN => {
                let (nonce, proof) = body.split_at(NONCE_LEN);
                AuthMsg::ServerChallenge {
                    nonce: nonce.try_into().map_err(|_| bad())?,
                    proof: proof.try_into().map_err(|_| bad())?,
                }
            }
            3 => AuthMsg::ClientProof {
                proof: body.try_into().map_err(|_| bad())?,
            },
            4 if body.is_empty() => AuthMsg::Accepted,
            5 if body.len() <= MAX_REASON => AuthMsg::Rejected(String::from_utf8_lossy(body).into_owned()),
            _ => return Err(bad()),
        };
        Ok(msg)
    }
}

async fn send_auth(writer: &mut FrameWriter, msg: &AuthMsg) -> Result<(), String> {
    writer
        .send_frame(FrameKind::Auth, &msg.encode())
        .await
        .map_err(|e| e.to_string())
}

async fn recv_auth(reader: &mut FrameReader) -> Result<AuthMsg, String> {
    let mut buf = Vec::new();
    match reader.recv_raw(&mut buf).await {
        Ok(FrameKind::Auth) => match AuthMsg::decode(&buf)? {
            AuthMsg::Rejected(reason) => Err(format!("peer refused the handshake: {reason}")),
            msg => Ok(msg),
        },
        Ok(kind) => Err(format!(
            "unauthenticated {kind} frame before authentication completed"
        )),
        Err(ProtoError::Closed) => Err("peer closed the connection during the handshake".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Sends a rejection (best effort: the peer may be gone) and returns the reason.
async fn refuse(writer: &mut FrameWriter, told: &str, reason: String) -> String {
    let _ = send_auth(writer, &AuthMsg::Rejected(told.to_string())).await;
    reason
}

/// Runs this side of the handshake; `Err` is the one-line reason the peer is refused.
pub(crate) async fn handshake(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    secret: &ClusterSecret,
    role: Role,
) -> Result<(), String> {
    let mut own_nonce = [0u8; NONCE_LEN];
    random_bytes(&mut own_nonce).map_err(|e| e.to_string())?;
    match role {
        Role::Client => {
            let nc = own_nonce;
            send_auth(writer, &AuthMsg::ClientHello { nonce: nc }).await?;
            let (ns, server_proof) = match recv_auth(reader).await? {
                AuthMsg::ServerChallenge { nonce, proof } => (nonce, proof),
                other => {
                    return Err(format!(
                        "expected the server's challenge, got {}",
                        msg_name(&other)
                    ))
                }
            };
            if ns == nc {
                return Err(refuse(
                    writer,
                    "nonce reflected",
                    "server echoed our nonce (reflection)".into(),
                )
                .await);
            }
            if secret
                .proof(Role::Server, &nc, &ns)
                .verify_slice(&server_proof)
                .is_err()
            {
                return Err(refuse(
                    writer,
                    "server proof does not match the client's cluster secret",
                    "server's proof does not match our cluster secret (different secrets?)".into(),
                )
                .await);
            }
            let proof = secret
                .proof(Role::Client, &nc, &ns)
                .finalize()
                .into_bytes()
                .into();
            send_auth(writer, &AuthMsg::ClientProof { proof }).await?;
            match recv_auth(reader).await? {
                AuthMsg::Accepted => Ok(()),
                other => Err(format!("expected the server's verdict, got {}", msg_name(&other))),
            }
        }
        Role::Server => {
            let ns = own_nonce;
            let nc = match recv_auth(reader).await? {
                AuthMsg::ClientHello { nonce } => nonce,
                other => return Err(format!("expected a client hello, got {}", msg_name(&other))),
            };
            if nc == ns {
                return Err(refuse(
                    writer,
                    "nonce reflected",
                    "client sent our nonce (reflection)".into(),
                )
                .await);
            }
            let proof = secret
                .proof(Role::Server, &nc, &ns)
                .finalize()
                .into_bytes()
                .into();
            send_auth(writer, &AuthMsg::ServerChallenge { nonce: ns, proof }).await?;
            let client_proof = match recv_auth(reader).await? {
                AuthMsg::ClientProof { proof } => proof,
                other => return Err(format!("expected the client's proof, got {}", msg_name(&other))),
            };
            if secret
                .proof(Role::Client, &nc, &ns)
                .verify_slice(&client_proof)
                .is_err()
            {
                return Err(refuse(
                    writer,
                    "client proof does not match the server's cluster secret",
                    "client's proof does not match our cluster secret (wrong secret or replayed proof)"
                        .into(),
                )
                .await);
            }
            send_auth(writer, &AuthMsg::Accepted).await
        }
    }
}

fn msg_name(msg: &AuthMsg) -> &'static str {
    match msg {
        AuthMsg::ClientHello { .. } => "a client hello",
        AuthMsg::ServerChallenge { .. } => "a server challenge",
        AuthMsg::ClientProof { .. } => "a client proof",
        AuthMsg::Accepted => "an acceptance",
        AuthMsg::Rejected(_) => "a rejection",
    }
}

/// Path of the secret file inside a cluster directory, so every component agrees on it.
pub fn secret_path(cluster_dir: &Path) -> PathBuf {
    cluster_dir.join("secret")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_messages_roundtrip_and_are_strict() {
        let msgs = [
            AuthMsg::ClientHello { nonce: [1; 32] },
            AuthMsg::ServerChallenge {
                nonce: [2; 32],
                proof: [3; 32],
            },
            AuthMsg::ClientProof { proof: [4; 32] },
            AuthMsg::Accepted,
            AuthMsg::Rejected("no".into()),
        ];
        for msg in msgs {
            let bytes = msg.encode();
            assert!(bytes.len() <= AUTH_MAX_PAYLOAD as usize);
            assert_eq!(AuthMsg::decode(&bytes).unwrap(), msg);
            if msg != AuthMsg::Rejected("no".into()) {
                // One byte more or less is refused, not truncated or padded.
                let mut longer = bytes.clone();
                longer.push(0);
                assert!(AuthMsg::decode(&longer).is_err(), "{msg:?}");
                assert!(AuthMsg::decode(&bytes[..bytes.len() - 1]).is_err(), "{msg:?}");
            }
        }
        assert!(AuthMsg::decode(&[]).is_err());
        assert!(AuthMsg::decode(&[9]).is_err());
    }

    #[test]
    fn long_rejection_reasons_are_cut_on_a_char_boundary() {
        let reason = "é".repeat(150); // 300 bytes
        let bytes = AuthMsg::Rejected(reason).encode();
        assert_eq!(bytes.len(), 1 + MAX_REASON);
        assert_eq!(
            AuthMsg::decode(&bytes).unwrap(),
            AuthMsg::Rejected("é".repeat(100))
        );
    }

    #[test]
    fn proofs_depend_on_role_nonces_and_secret() {
        let a = ClusterSecret::from_bytes([7; 32]);
        let b = ClusterSecret::from_bytes([8; 32]);
        let p = |s: &ClusterSecret, role, nc: u8, ns: u8| {
            s.proof(role, &[nc; 32], &[ns; 32]).finalize().into_bytes()
        };
        let base = p(&a, Role::Server, 1, 2);
        assert_eq!(base, p(&a, Role::Server, 1, 2));
        assert_ne!(base, p(&a, Role::Client, 1, 2));
        assert_ne!(base, p(&a, Role::Server, 2, 1));
        assert_ne!(base, p(&b, Role::Server, 1, 2));
    }

    #[test]
    fn debug_does_not_leak_the_secret() {
        let s = ClusterSecret::from_bytes([0xab; 32]);
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("171") && !shown.to_lowercase().contains("ab, "),
            "{shown}"
        );
    }
}
