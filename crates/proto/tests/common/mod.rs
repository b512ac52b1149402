//! Test helpers: a hand-written peer that speaks the documented wire format byte by byte
//! (so tests can misbehave in ways the library never would), and a log capture.

#![allow(dead_code)] // each test binary uses a different subset

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use eckpt_proto::{decode_frame, encode_frame, Decoded, FrameKind};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

pub const SECRET: [u8; 32] = [0x5a; 32];
pub const OTHER_SECRET: [u8; 32] = [0xa5; 32];

pub const HELLO: u8 = 1;
pub const CHALLENGE: u8 = 2;
pub const PROOF: u8 = 3;
pub const ACCEPTED: u8 = 4;
pub const REJECTED: u8 = 5;

/// HMAC-SHA256 proof exactly as the module docs of `auth` define it.
pub fn proof(secret: &[u8; 32], role: &str, nc: &[u8], ns: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(b"eckpt-proto-v1-auth");
    mac.update(role.as_bytes());
    mac.update(nc);
    mac.update(ns);
    mac.finalize().into_bytes().into()
}

pub async fn send_raw<S: AsyncWrite + Unpin>(s: &mut S, kind: FrameKind, payload: &[u8]) {
    s.write_all(&encode_frame(kind, payload).unwrap()).await.unwrap();
}

/// Reads one frame; `None` if the peer closed the connection first.
pub async fn recv_raw<S: AsyncRead + Unpin>(s: &mut S) -> Option<(FrameKind, Vec<u8>)> {
    let mut buf = Vec::new();
    loop {
        match decode_frame(&buf, 1 << 20).unwrap() {
            Decoded::Frame { kind, payload, .. } => return Some((kind, payload.to_vec())),
            Decoded::NeedMore { at_least } => {
                let start = buf.len();
                buf.resize(at_least, 0);
                match s.read_exact(&mut buf[start..]).await {
                    Ok(_) => {}
                    Err(_) => return None,
                }
            }
        }
    }
}

/// Client side of the handshake done by hand with `secret`; returns the server's verdict
/// (`Ok` on acceptance, `Err(reason)` on rejection or close).
pub async fn raw_client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    secret: &[u8; 32],
) -> Result<(), String> {
    let nc = [0x11u8; 32];
    let mut hello = vec![HELLO];
    hello.extend_from_slice(&nc);
    send_raw(s, FrameKind::Auth, &hello).await;
    let (kind, msg) = recv_raw(s).await.ok_or("closed after hello")?;
    assert_eq!(kind, FrameKind::Auth);
    assert_eq!(msg[0], CHALLENGE, "{msg:?}");
    let ns = &msg[1..33];
    assert_eq!(
        &msg[33..65],
        &proof(secret, "server", &nc, ns),
        "server proof per the documented formula"
    );
    let mut p = vec![PROOF];
    p.extend_from_slice(&proof(secret, "client", &nc, ns));
    send_raw(s, FrameKind::Auth, &p).await;
    match recv_raw(s).await {
        Some((FrameKind::Auth, v)) if v == [ACCEPTED] => Ok(()),
        Some((FrameKind::Auth, v)) if v[0] == REJECTED => Err(String::from_utf8_lossy(&v[1..]).into_owned()),
        other => Err(format!("unexpected verdict {other:?}")),
    }
}

/// Collects formatted `tracing` events (level, message and fields, one line each).
#[derive(Clone, Default)]
pub struct LogCapture(pub Arc<Mutex<Vec<String>>>);

impl LogCapture {
    pub fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

struct LineVisitor<'a>(&'a mut String);

impl tracing::field::Visit for LineVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl tracing::Subscriber for LogCapture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = event.metadata().level().to_string();
        event.record(&mut LineVisitor(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
