//! TLS around TCP connections (`ClusterTls`): what crosses the wire is unreadable, and a
//! peer without the cluster's TLS identity — a plaintext client, a server with another
//! certificate — gets nowhere. A relay between client and server records every byte.

mod common;

use std::sync::{Arc, Mutex};

use common::SECRET;
use eckpt_proto::{connect, listen, ClusterSecret, ClusterTls, Endpoint, Listener, ProtoError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The cluster secret, with a TLS identity made in `dir` under `name`.
fn secret_with_tls(dir: &std::path::Path, name: &str) -> ClusterSecret {
    let tls = ClusterTls::create_file(&dir.join(name)).unwrap();
    ClusterSecret::from_bytes(SECRET).with_tls(tls)
}

/// A relay on loopback to `to`, for one connection: every byte either way is copied there
/// and recorded.
async fn recording_relay(to: Endpoint) -> (Endpoint, Arc<Mutex<Vec<u8>>>) {
    let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = relay.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        let (client, _) = relay.accept().await.unwrap();
        let Endpoint::Tcp { host, port } = to else {
            unreachable!()
        };
        let server = TcpStream::connect((host.as_str(), port)).await.unwrap();
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        let copy = |mut from: tokio::net::tcp::OwnedReadHalf,
                    mut to: tokio::net::tcp::OwnedWriteHalf,
                    record: Arc<Mutex<Vec<u8>>>| async move {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                let n = from.read(&mut buf).await.unwrap_or(0);
                if n == 0 || to.write_all(&buf[..n]).await.is_err() {
                    let _ = to.shutdown().await;
                    return;
                }
                record.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        };
        let there = tokio::spawn(copy(cr, sw, record.clone()));
        copy(sr, cw, record).await;
        let _ = there.await;
    });
    (
        Endpoint::Tcp {
            host: "127.0.0.1".into(),
            port,
        },
        seen,
    )
}

async fn tcp_listener(secret: &ClusterSecret) -> Listener {
    listen(&"tcp://127.0.0.1:0".parse().unwrap(), secret)
        .await
        .unwrap()
}

/// Sends `payload` as a data frame from a client to a server through a recording relay;
/// the bytes the relay saw.
async fn through_relay(
    server_secret: &ClusterSecret,
    client_secret: &ClusterSecret,
    payload: &[u8],
) -> Vec<u8> {
    let listener = tcp_listener(server_secret).await;
    let (relay, seen) = recording_relay(listener.local_endpoint().clone()).await;
    let accept = async { listener.accept().await.unwrap().authenticate().await };
    let (server, client) = tokio::join!(accept, connect(&relay, client_secret));
    let (mut server, mut client) = (server.unwrap(), client.unwrap());
    let mut got = Vec::new();
    let (sent, received) = tokio::join!(client.send_data(payload), server.recv_data(&mut got));
    sent.unwrap();
    received.unwrap();
    assert_eq!(got, payload, "the payload arrives intact");
    drop((client, server));
    let seen = seen.lock().unwrap().clone();
    seen
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn with_tls_the_wire_carries_no_payload_byte_in_the_clear() {
    let dir = tempfile::tempdir().unwrap();
    let payload = b"rank 3 epoch 7: the checkpoint bytes nobody on the path may read".repeat(64);
    rt().block_on(async {
        let plain = ClusterSecret::from_bytes(SECRET);
        let seen = through_relay(&plain, &plain, &payload).await;
        assert!(
            contains(&seen, &payload[..64]),
            "the relay must see plaintext frames without TLS (else this test proves nothing)"
        );
        let tls = secret_with_tls(dir.path(), "tls.pem");
        let seen = through_relay(&tls, &tls, &payload).await;
        assert!(seen.len() > payload.len(), "the relay carried the session");
        assert!(
            !contains(&seen, &payload[..16]),
            "payload bytes crossed the wire in the clear"
        );
    });
}

#[test]
fn a_peer_without_the_clusters_tls_identity_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tls = secret_with_tls(dir.path(), "tls.pem");
    let other = secret_with_tls(dir.path(), "other.pem");
    let plain = ClusterSecret::from_bytes(SECRET);
    rt().block_on(async {
        // A plaintext client (right secret) to a TLS server: refused by the server.
        let listener = tcp_listener(&tls).await;
        let ep = listener.local_endpoint().clone();
        let accept = async { listener.accept().await.unwrap().authenticate().await };
        let (server, client) = tokio::join!(accept, connect(&ep, &plain));
        assert!(client.is_err());
        match server.unwrap_err() {
            ProtoError::Auth { reason, .. } => assert!(reason.starts_with("TLS: "), "{reason}"),
            e => panic!("expected a refusal, got {e}"),
        }
        // A server presenting another certificate: the client refuses it.
        let listener = tcp_listener(&other).await;
        let ep = listener.local_endpoint().clone();
        let accept = async { listener.accept().await.unwrap().authenticate().await };
        let (server, client) = tokio::join!(accept, connect(&ep, &tls));
        assert!(server.is_err());
        let e = client.unwrap_err().to_string();
        assert!(e.contains("TLS with") && e.contains("certificate"), "{e}");
    });
}

#[test]
fn the_tls_identity_file_is_owner_only_never_replaced_and_checked_when_loaded() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tls.pem");
    let made = ClusterTls::create_file(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(ClusterTls::load(&path).unwrap() == made);
    assert!(
        ClusterTls::create_file(&path).is_err(),
        "an existing identity is never replaced"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(matches!(
        ClusterTls::load(&path),
        Err(ProtoError::SecretPermissions { .. })
    ));
    std::fs::write(dir.path().join("junk.pem"), b"not pem").unwrap();
    std::fs::set_permissions(
        dir.path().join("junk.pem"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let e = ClusterTls::load(&dir.path().join("junk.pem"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no certificate"), "{e}");
}
