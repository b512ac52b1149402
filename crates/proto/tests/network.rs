//! Authentication and framing over real TCP and Unix sockets, for both transports.

mod common;

use std::time::Duration;

use common::*;
use eckpt_proto::{
    connect, listen, ClusterSecret, Connection, Endpoint, FrameError, FrameKind, Listener, ProtoError,
    TransportKind,
};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Msg {
    Put { rank: u32, epoch: u64, len: usize },
    Done,
}

/// A raw stream to the listener, for peers that misbehave.
enum Raw {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Raw {
    async fn connect(ep: &Endpoint) -> Raw {
        match ep {
            Endpoint::Tcp { host, port } => {
                Raw::Tcp(TcpStream::connect((host.as_str(), *port)).await.unwrap())
            }
            Endpoint::Unix(path) => Raw::Unix(UnixStream::connect(path).await.unwrap()),
        }
    }
}

macro_rules! with_raw {
    ($raw:expr, |$s:ident| $body:expr) => {
        match $raw {
            Raw::Tcp($s) => $body,
            Raw::Unix($s) => $body,
        }
    };
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `test` against a fresh listener of each transport kind.
fn for_each_transport<F, Fut>(test: F)
where
    F: Fn(Listener, TransportKind) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    for kind in [TransportKind::Tcp, TransportKind::Unix] {
        let ep = match kind {
            TransportKind::Tcp => "tcp://127.0.0.1:0".parse().unwrap(),
            TransportKind::Unix => Endpoint::Unix(dir.path().join("s.sock")),
        };
        rt().block_on(async {
            let listener = listen(&ep, &ClusterSecret::from_bytes(SECRET)).await.unwrap();
            test(listener, kind).await;
        });
    }
}

async fn accept_one(listener: &Listener) -> Result<Connection, ProtoError> {
    listener.accept().await.unwrap().authenticate().await
}

fn auth_reason(err: ProtoError) -> (String, String) {
    match err {
        ProtoError::Auth { peer, reason } => (peer, reason),
        other => panic!("expected an authentication error, got {other:?}"),
    }
}

#[test]
fn authenticated_peers_exchange_control_and_data_both_ways() {
    for_each_transport(|listener, kind| async move {
        let ep = listener.local_endpoint().clone();
        assert_eq!(ep.kind(), kind);
        let secret = ClusterSecret::from_bytes(SECRET);
        let (server, client) = tokio::join!(accept_one(&listener), connect(&ep, &secret));
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        assert_eq!(client.peer(), ep.to_string());

        let block: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        let put = Msg::Put {
            rank: 3,
            epoch: 7,
            len: block.len(),
        };
        client.send_control(&put).await.unwrap();
        // Larger than a socket buffer: send and receive concurrently.
        let mut buf = Vec::new();
        let (sent, got) = tokio::join!(client.send_data(&block), async {
            let msg: Msg = server.recv_control().await.unwrap();
            server.recv_data(&mut buf).await.unwrap();
            msg
        });
        sent.unwrap();
        assert_eq!(got, put);
        assert_eq!(buf, block);

        // Empty data frames are legal and distinct from control frames.
        server.send_data(&[]).await.unwrap();
        server.send_control(&Msg::Done).await.unwrap();
        let mut buf = vec![1, 2, 3];
        assert_eq!(client.recv_into(&mut buf).await.unwrap(), FrameKind::Data);
        assert!(buf.is_empty());
        assert_eq!(client.recv_into(&mut buf).await.unwrap(), FrameKind::Control);
        assert_eq!(serde_json::from_slice::<Msg>(&buf).unwrap(), Msg::Done);

        // Split halves work independently; a clean shutdown reads as Closed.
        let (mut reader, mut writer) = client.into_split();
        server.send_data(b"to client").await.unwrap();
        writer.send_data(b"to server").await.unwrap();
        writer.shutdown().await.unwrap();
        reader.recv_data(&mut buf).await.unwrap();
        assert_eq!(buf, b"to client");
        server.recv_data(&mut buf).await.unwrap();
        assert_eq!(buf, b"to server");
        assert!(matches!(
            server.recv_data(&mut buf).await,
            Err(ProtoError::Closed)
        ));

        // The wrong expected kind is an error, not a misparse.
        server.send_control(&Msg::Done).await.unwrap();
        let err = reader.recv_data(&mut buf).await.unwrap_err();
        assert!(matches!(
            err,
            ProtoError::UnexpectedFrame {
                expected: "data",
                found: FrameKind::Control
            }
        ));
    });
}

/// A connection kept between requests tells, without waiting, whether it can carry the
/// next one: open and quiet, yes; its peer gone, or bytes waiting that nobody asked for, no.
#[test]
fn a_kept_connection_is_spent_once_its_peer_closed_or_sent_unasked() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let secret = ClusterSecret::from_bytes(SECRET);
        let (server, client) = tokio::join!(accept_one(&listener), connect(&ep, &secret));
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        assert!(!client.is_spent(), "a quiet open connection is spent");
        // Checking leaves the connection as it was: an exchange follows as usual.
        client.send_control(&Msg::Done).await.unwrap();
        assert_eq!(server.recv_control::<Msg>().await.unwrap(), Msg::Done);
        server.send_control(&Msg::Done).await.unwrap();
        assert_eq!(client.recv_control::<Msg>().await.unwrap(), Msg::Done);
        assert!(!client.is_spent());

        server.send_control(&Msg::Done).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(client.is_spent(), "an answer nobody asked for waits");

        let (server, client) = tokio::join!(accept_one(&listener), connect(&ep, &secret));
        let (server, mut client) = (server.unwrap(), client.unwrap());
        drop(server);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(client.is_spent(), "the peer closed it");
    });
}

#[test]
fn client_with_wrong_secret_is_refused_and_refuses() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let wrong = ClusterSecret::from_bytes(OTHER_SECRET);
        let (server, client) = tokio::join!(accept_one(&listener), connect(&ep, &wrong));
        let (peer, reason) = auth_reason(client.unwrap_err());
        assert_eq!(peer, ep.to_string());
        assert!(reason.contains("does not match our cluster secret"), "{reason}");
        let (_, reason) = auth_reason(server.unwrap_err());
        assert!(
            reason.contains("server proof does not match the client's cluster secret"),
            "{reason}"
        );
    });
}

#[test]
fn server_with_wrong_secret_is_refused_by_the_client() {
    let dir = tempfile::tempdir().unwrap();
    for ep in [
        "tcp://127.0.0.1:0".parse().unwrap(),
        Endpoint::Unix(dir.path().join("w.sock")),
    ] {
        rt().block_on(async {
            let listener = listen(&ep, &ClusterSecret::from_bytes(OTHER_SECRET))
                .await
                .unwrap();
            let ep = listener.local_endpoint().clone();
            let right = ClusterSecret::from_bytes(SECRET);
            let (server, client) = tokio::join!(accept_one(&listener), connect(&ep, &right));
            let (_, reason) = auth_reason(client.unwrap_err());
            assert!(reason.contains("server's proof does not match"), "{reason}");
            assert!(server.is_err());
        });
    }
}

#[test]
fn refusal_is_logged_once_with_peer_address_and_reason() {
    let logs = LogCapture::default();
    let _guard = tracing::subscriber::set_default(logs.clone());
    rt().block_on(async {
        let listener = listen(
            &"tcp://127.0.0.1:0".parse().unwrap(),
            &ClusterSecret::from_bytes(SECRET),
        )
        .await
        .unwrap();
        let ep = listener.local_endpoint().clone();
        let mut raw = TcpStream::connect(ep.to_string().trim_start_matches("tcp://"))
            .await
            .unwrap();
        let local = raw.local_addr().unwrap().to_string();
        let (server, ()) = tokio::join!(accept_one(&listener), async {
            raw.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        });
        let (peer, reason) = auth_reason(server.unwrap_err());
        assert_eq!(peer, local);
        assert!(reason.contains("bad magic"), "{reason}");
    });
    let warnings: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("WARN"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let line = &warnings[0];
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains("peer=127.0.0.1:"), "{line}");
    assert!(line.contains("bad magic"), "{line}");
    assert!(line.contains("refused connection"), "{line}");
}

#[test]
fn reflected_server_proof_is_refused() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let attacker = async {
            let mut raw = Raw::connect(&ep).await;
            with_raw!(&mut raw, |s| {
                let mut hello = vec![HELLO];
                hello.extend_from_slice(&[0x42; 32]);
                send_raw(s, FrameKind::Auth, &hello).await;
                let (_, challenge) = recv_raw(s).await.unwrap();
                assert_eq!(challenge[0], CHALLENGE);
                // Echo the server's own proof back as ours.
                let mut reflected = vec![PROOF];
                reflected.extend_from_slice(&challenge[33..65]);
                send_raw(s, FrameKind::Auth, &reflected).await;
                recv_raw(s).await
            })
        };
        let (server, verdict) = tokio::join!(accept_one(&listener), attacker);
        let (_, reason) = auth_reason(server.unwrap_err());
        assert!(reason.contains("client's proof does not match"), "{reason}");
        let (kind, verdict) = verdict.unwrap();
        assert_eq!(kind, FrameKind::Auth);
        assert_eq!(verdict[0], REJECTED);
    });
}

#[test]
fn client_refuses_a_server_that_echoes_its_nonce() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    rt().block_on(async {
        // A fake server: it cannot compute a proof, so it tries to get away with reflection.
        let fake = tokio::net::UnixListener::bind(&path).unwrap();
        let secret = ClusterSecret::from_bytes(SECRET);
        let fake_ep = Endpoint::Unix(path.clone());
        let (client, ()) = tokio::join!(connect(&fake_ep, &secret), async {
            let (mut s, _) = fake.accept().await.unwrap();
            let (_, hello) = recv_raw(&mut s).await.unwrap();
            let mut challenge = vec![CHALLENGE];
            challenge.extend_from_slice(&hello[1..33]);
            challenge.extend_from_slice(&[0; 32]);
            send_raw(&mut s, FrameKind::Auth, &challenge).await;
            // The client says why and sends no proof.
            let (_, verdict) = recv_raw(&mut s).await.unwrap();
            assert_eq!(verdict[0], REJECTED);
            assert!(recv_raw(&mut s).await.is_none());
        });
        let (_, reason) = auth_reason(client.unwrap_err());
        assert!(reason.contains("echoed our nonce"), "{reason}");
    });
}

#[test]
fn proof_for_another_server_nonce_is_refused() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let mut raw = Raw::connect(&ep).await;
        let (server, ()) = tokio::join!(accept_one(&listener), async {
            with_raw!(&mut raw, |s| {
                let mut hello = vec![HELLO];
                hello.extend_from_slice(&[0x42; 32]);
                send_raw(s, FrameKind::Auth, &hello).await;
                let (_, challenge) = recv_raw(s).await.unwrap();
                // Right secret, but the proof of an earlier session (other server nonce).
                assert_ne!(&challenge[1..33], &[0x99; 32]);
                let mut p = vec![PROOF];
                p.extend_from_slice(&proof(&SECRET, "client", &[0x42; 32], &[0x99; 32]));
                send_raw(s, FrameKind::Auth, &p).await;
            })
        });
        let (_, reason) = auth_reason(server.unwrap_err());
        assert!(reason.contains("client's proof does not match"), "{reason}");
    });
}

#[test]
fn the_documented_handshake_is_accepted() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let mut raw = Raw::connect(&ep).await;
        let (server, verdict) = tokio::join!(accept_one(&listener), async {
            with_raw!(&mut raw, |s| raw_client_handshake(s, &SECRET).await)
        });
        verdict.unwrap();
        server.unwrap();
    });
}

#[test]
fn frames_before_authentication_are_refused() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let cases: [(FrameKind, Vec<u8>, &str); 4] = [
            (
                FrameKind::Control,
                br#"{"Put":{"rank":0,"epoch":1,"len":0}}"#.to_vec(),
                "unauthenticated control frame",
            ),
            (FrameKind::Data, vec![7; 100], "unauthenticated data frame"),
            (
                FrameKind::Data,
                vec![7; 1 << 20],
                "1048576 bytes exceeds the limit of 256 bytes",
            ),
            (FrameKind::Auth, vec![PROOF; 33], "expected a client hello"),
        ];
        for (kind, payload, why) in cases {
            let mut raw = Raw::connect(&ep).await;
            let (server, reply) = tokio::join!(accept_one(&listener), async {
                with_raw!(&mut raw, |s| {
                    // The peer may close before reading it all; that is part of refusing.
                    let _ = s
                        .write_all(&eckpt_proto::encode_frame(kind, &payload).unwrap())
                        .await;
                    recv_raw(s).await
                })
            });
            let (_, reason) = auth_reason(server.unwrap_err());
            assert!(reason.contains(why), "{kind}: {reason}");
            assert!(reply.is_none(), "nothing is answered to {kind}: {reply:?}");
        }
    });
}

#[test]
fn other_protocol_versions_are_refused_naming_the_version() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let mut frame = eckpt_proto::encode_frame(FrameKind::Auth, &[HELLO; 33]).unwrap();
        frame[4] = 2;
        let mut raw = Raw::connect(&ep).await;
        // Only the first five bytes: the version is judged without waiting for the rest.
        let (server, ()) = tokio::join!(accept_one(&listener), async {
            with_raw!(&mut raw, |s| s.write_all(&frame[..5]).await.unwrap())
        });
        let (_, reason) = auth_reason(server.unwrap_err());
        assert!(reason.contains("unsupported protocol version 2"), "{reason}");
        assert!(reason.contains("version 1"), "{reason}");
    });
}

#[test]
fn silent_peer_is_refused_after_the_handshake_timeout() {
    for_each_transport(|mut listener, _| async move {
        listener.set_handshake_timeout(Duration::from_millis(200));
        let ep = listener.local_endpoint().clone();
        let _raw = Raw::connect(&ep).await;
        let (_, reason) = auth_reason(accept_one(&listener).await.unwrap_err());
        assert!(reason.contains("timed out"), "{reason}");
    });
}

#[test]
fn after_authentication_bad_frames_are_errors_and_the_limit_holds() {
    for_each_transport(|listener, _| async move {
        let ep = listener.local_endpoint().clone();
        let mut raw = Raw::connect(&ep).await;
        let (server, verdict) = tokio::join!(accept_one(&listener), async {
            with_raw!(&mut raw, |s| raw_client_handshake(s, &SECRET).await)
        });
        verdict.unwrap();
        let mut server = server.unwrap();
        let mut buf = Vec::new();

        // A handshake frame after authentication.
        with_raw!(&mut raw, |s| send_raw(s, FrameKind::Auth, &[HELLO; 33]).await);
        let err = server.recv_into(&mut buf).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProtoError::UnexpectedFrame {
                    found: FrameKind::Auth,
                    ..
                }
            ),
            "{err:?}"
        );

        // A data frame corrupted in transit.
        let mut frame = eckpt_proto::encode_frame(FrameKind::Data, &[9; 4096]).unwrap();
        frame[1000] ^= 0x10;
        with_raw!(&mut raw, |s| s.write_all(&frame).await.unwrap());
        let err = server.recv_data(&mut buf).await.unwrap_err();
        assert!(
            matches!(err, ProtoError::Frame(FrameError::PayloadChecksum { .. })),
            "{err:?}"
        );

        // A large frame arrives in many reads, each checksummed as it lands: a flip in its
        // last piece is still found, and the next frame is received whole.
        let payload: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
        let mut frame = eckpt_proto::encode_frame(FrameKind::Data, &payload).unwrap();
        let last = frame.len() - 7;
        frame[last] ^= 0x01;
        let good = eckpt_proto::encode_frame(FrameKind::Data, &payload).unwrap();
        for (frame, intact) in [(frame, false), (good, true)] {
            let sent = async {
                for piece in frame.chunks(100_000) {
                    with_raw!(&mut raw, |s| s.write_all(piece).await.unwrap());
                }
            };
            let (_, got) = tokio::join!(sent, server.recv_data(&mut buf));
            if intact {
                got.unwrap();
                assert!(buf == payload, "the frame after a damaged one differs");
            } else {
                assert!(
                    matches!(got, Err(ProtoError::Frame(FrameError::PayloadChecksum { .. }))),
                    "{got:?}"
                );
            }
        }

        // The limit is configurable and enforced on the header.
        server.set_max_payload(1000);
        let frame = eckpt_proto::encode_frame(FrameKind::Data, &[9; 1001]).unwrap();
        with_raw!(&mut raw, |s| s.write_all(&frame[..20]).await.unwrap());
        let err = server.recv_data(&mut buf).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProtoError::Frame(FrameError::Oversize { len: 1001, max: 1000 })
            ),
            "{err:?}"
        );
        // ... and on the sending side, before anything is written.
        let err = server.send_data(&[0; 1001]).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProtoError::Frame(FrameError::Oversize { len: 1001, max: 1000 })
            ),
            "{err:?}"
        );

        // The peer dies mid-frame.
        let frame = eckpt_proto::encode_frame(FrameKind::Data, &[9; 500]).unwrap();
        with_raw!(raw, |s| {
            let mut s = s;
            s.write_all(&frame[..300]).await.unwrap();
            s.shutdown().await.unwrap();
        });
        let err = server.recv_data(&mut buf).await.unwrap_err();
        assert!(
            matches!(
                err,
                ProtoError::Truncated {
                    got: 300,
                    expected: 520
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("300 of 520"), "{err}");
    });
}

#[test]
fn unix_listener_replaces_only_stale_sockets_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n0.sock");
    let ep = Endpoint::Unix(path.clone());
    let secret = ClusterSecret::from_bytes(SECRET);
    rt().block_on(async {
        let live = listen(&ep, &secret).await.unwrap();
        let err = listen(&ep, &secret).await.unwrap_err();
        assert!(err.to_string().contains("listening on unix://"), "{err}");
        drop(live);
        assert!(!path.exists(), "socket file removed when the listener is dropped");

        // A dead listener's socket file (std does not remove it) is replaced.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let replaced = listen(&ep, &secret).await.unwrap();
        let (server, client) = tokio::join!(accept_one(&replaced), connect(&ep, &secret));
        server.unwrap();
        client.unwrap();
        drop(replaced);

        // A regular file is never deleted.
        std::fs::write(&path, b"precious").unwrap();
        assert!(listen(&ep, &secret).await.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    });
}
