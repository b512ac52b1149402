//! TCP and Unix-socket transports behind one API: `connect`/`listen` on an [`Endpoint`],
//! both returning connections that are authenticated before they can carry a frame.
//! Agents on one host use Unix sockets (co-located processes switch to faster local IPC);
//! everything else uses TCP.

use std::fmt;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use crate::auth::{handshake, ClusterSecret, Role, AUTH_MAX_PAYLOAD, HANDSHAKE_TIMEOUT};
use crate::error::{io_ctx, ProtoError};
use crate::frame::{FrameKind, DEFAULT_MAX_PAYLOAD};
use crate::io::{BoxRead, BoxWrite, FrameReader, FrameWriter};
use crate::network::{self, Acceptor, ByteStream};

/// Socket buffer asked for on Unix connections. Linux's default (~208 KiB) lets only a few
/// 64 KiB skbs be in flight, so a MiB-sized frame costs dozens of sender/receiver wakeups
/// and the Unix socket ends up slower than TCP loopback (which autotunes to MiBs). The
/// kernel caps the value at `net.core.wmem_max` / `rmem_max`.
const UNIX_SOCKET_BUFFER: libc::c_int = 4 << 20;

/// How long a TCP connection to a peer whose host vanished (powered off, cut off) lives:
/// data unacknowledged this long closes it (`TCP_USER_TIMEOUT`), and an idle one is probed
/// after 10 s and every 5 s, four unanswered probes closing it (keepalive). The kernel's
/// defaults are about 15 minutes of retransmissions, and an idle connection for ever. A peer
/// process that is only stopped (SIGSTOP) still has its kernel acknowledging: the callers'
/// own deadlines bound a wait on it.
const DEAD_PEER: Duration = Duration::from_secs(30);

/// Longest Unix socket path the kernel accepts (`sun_path` is 108 bytes with the NUL).
const MAX_UNIX_PATH: usize = 107;

/// Which transport an endpoint uses; reported by benchmarks and used to pick one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// TCP, for peers on other hosts (or namespaces).
    Tcp,
    /// Unix domain stream sockets, for peers on the same host.
    Unix,
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Unix => "unix",
        })
    }
}

/// Where a node listens: `tcp://host:port` (IPv6 hosts in brackets) or `unix:///path`.
/// Parses from and displays as that string, and serializes as it, so configuration files,
/// status JSON and command lines all use one form.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A TCP address; `host` is a name or an IP literal (without brackets).
    Tcp {
        /// Host name or IP address.
        host: String,
        /// Port; 0 when listening means "any free port" (see [`Listener::local_endpoint`]).
        port: u16,
    },
    /// A Unix domain socket path.
    Unix(PathBuf),
}

impl Endpoint {
    /// The transport this endpoint uses.
    pub fn kind(&self) -> TransportKind {
        match self {
            Endpoint::Tcp { .. } => TransportKind::Tcp,
            Endpoint::Unix(_) => TransportKind::Unix,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "tcp://[{host}]:{port}"),
            Endpoint::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
        }
    }
}

impl FromStr for Endpoint {
    type Err = ProtoError;

    fn from_str(input: &str) -> Result<Endpoint, ProtoError> {
        let err = |reason: &str| ProtoError::Endpoint {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        if let Some(rest) = input.strip_prefix("tcp://") {
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| err("expected tcp://host:port"))?;
            let host = match host.strip_prefix('[') {
                Some(inner) => inner
                    .strip_suffix(']')
                    .ok_or_else(|| err("unclosed '[' in IPv6 host"))?,
                None if host.contains(':') => {
                    return Err(err("IPv6 hosts must be in brackets: tcp://[::1]:port"))
                }
                None => host,
            };
            if host.is_empty() {
                return Err(err("empty host"));
            }
            if host.contains(['/', '[', ']', ' ']) {
                return Err(err("invalid character in host"));
            }
            let port = port
                .parse::<u16>()
                .map_err(|_| err("port must be a number from 0 to 65535"))?;
            Ok(Endpoint::Tcp {
                host: host.to_string(),
                port,
            })
        } else if let Some(path) = input.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(err("expected an absolute path: unix:///path/to/socket"));
            }
            if path.len() > MAX_UNIX_PATH {
                return Err(err(&format!(
                    "socket path is {} bytes, the kernel allows at most {MAX_UNIX_PATH}",
                    path.len()
                )));
            }
            Ok(Endpoint::Unix(PathBuf::from(path)))
        } else {
            Err(err("expected tcp://host:port or unix:///path"))
        }
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Endpoint {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Endpoint, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// An authenticated connection: frames can be sent and received, and nothing else.
pub struct Connection {
    reader: FrameReader,
    writer: FrameWriter,
    peer: String,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Runs the handshake over the two halves of a stream. On failure it logs one line
    /// naming the peer and the reason, and returns [`ProtoError::Auth`].
    async fn establish(
        read: BoxRead,
        write: BoxWrite,
        role: Role,
        secret: &ClusterSecret,
        peer: String,
        timeout: Duration,
    ) -> Result<Connection, ProtoError> {
        let mut reader = FrameReader::new(read, AUTH_MAX_PAYLOAD);
        let mut writer = FrameWriter::new(write, AUTH_MAX_PAYLOAD);
        let outcome = tokio::time::timeout(timeout, handshake(&mut reader, &mut writer, secret, role))
            .await
            .unwrap_or_else(|_| Err(format!("handshake timed out after {timeout:?}")));
        if let Err(reason) = outcome {
            match role {
                Role::Server => tracing::warn!(%peer, %reason, "refused connection: authentication failed"),
                Role::Client => tracing::warn!(%peer, %reason, "refused server: authentication failed"),
            }
            return Err(ProtoError::Auth { peer, reason });
        }
        tracing::debug!(%peer, ?role, "connection authenticated");
        reader.set_max_payload(DEFAULT_MAX_PAYLOAD);
        writer.set_max_payload(DEFAULT_MAX_PAYLOAD);
        Ok(Connection { reader, writer, peer })
    }

    /// Whether the connection can carry no next exchange ([`FrameReader::is_spent`]).
    pub fn is_spent(&mut self) -> bool {
        self.reader.is_spent()
    }

    /// The peer's address as used in log lines (`host:port`, or the socket path and pid).
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Sets the payload limit for both directions (default [`DEFAULT_MAX_PAYLOAD`]).
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.reader.set_max_payload(max_payload);
        self.writer.set_max_payload(max_payload);
    }

    /// Sends a control message (JSON in a control frame).
    pub async fn send_control<T: Serialize>(&mut self, msg: &T) -> Result<(), ProtoError> {
        self.writer.send_control(msg).await
    }

    /// Sends raw bytes as one data frame.
    pub async fn send_data(&mut self, payload: &[u8]) -> Result<(), ProtoError> {
        self.writer.send_data(payload).await
    }

    /// Receives the next frame, which must be a control message of type `T`.
    pub async fn recv_control<T: DeserializeOwned>(&mut self) -> Result<T, ProtoError> {
        self.reader.recv_control().await
    }

    /// Receives the next frame, which must be data, into `buf` (capacity reused).
    pub async fn recv_data(&mut self, buf: &mut Vec<u8>) -> Result<(), ProtoError> {
        self.reader.recv_data(buf).await
    }

    /// Receives the next control or data frame into `buf` and says which it was.
    pub async fn recv_into(&mut self, buf: &mut Vec<u8>) -> Result<FrameKind, ProtoError> {
        self.reader.recv_into(buf).await
    }

    /// Shuts down the write direction so the peer reads a clean end of stream.
    pub async fn shutdown(&mut self) -> Result<(), ProtoError> {
        self.writer.shutdown().await
    }

    /// Splits into independently usable halves, so one task can receive while another
    /// sends (double buffering in the encode pipeline).
    pub fn into_split(self) -> (FrameReader, FrameWriter) {
        (self.reader, self.writer)
    }
}

/// Every TCP connection's options: no Nagle delay (control frames are small and awaited),
/// and a dead peer detected within [`DEAD_PEER`].
fn tune_tcp(stream: &TcpStream) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = socket2::SockRef::from(stream);
    socket.set_tcp_keepalive(
        &socket2::TcpKeepalive::new()
            .with_time(Duration::from_secs(10))
            .with_interval(Duration::from_secs(5))
            .with_retries(4),
    )?;
    socket.set_tcp_user_timeout(Some(DEAD_PEER))
}

/// Connects to `endpoint` and authenticates both sides with `secret`. Connecting and the
/// handshake are each bounded by [`HANDSHAKE_TIMEOUT`].
pub async fn connect(endpoint: &Endpoint, secret: &ClusterSecret) -> Result<Connection, ProtoError> {
    let peer = endpoint.to_string();
    let (read, write): (BoxRead, BoxWrite) = match (endpoint, network::installed()) {
        (Endpoint::Tcp { host, port }, None) => {
            // Bounded, so an unreachable host fails in seconds rather than after the
            // kernel's SYN retries (minutes).
            let stream = within_handshake(TcpStream::connect((host.as_str(), *port)))
                .await
                .map_err(io_ctx(format!("connecting to {peer}")))?;
            tune_tcp(&stream).map_err(io_ctx(format!("setting the TCP options of {peer}")))?;
            match secret.tls() {
                Some(tls) => client_tls(tls, stream, &peer).await?,
                None => {
                    let (r, w) = stream.into_split();
                    (Box::new(r), Box::new(w))
                }
            }
        }
        (Endpoint::Tcp { host, port }, Some(network)) => {
            let stream = within_handshake(network.connect(host, *port))
                .await
                .map_err(io_ctx(format!("connecting to {peer}")))?;
            match secret.tls() {
                Some(tls) => client_tls(tls, stream, &peer).await?,
                None => {
                    let (r, w) = tokio::io::split(stream);
                    (Box::new(r), Box::new(w))
                }
            }
        }
        (Endpoint::Unix(path), None) => {
            let stream = UnixStream::connect(path)
                .await
                .map_err(io_ctx(format!("connecting to {peer}")))?;
            widen_buffers(&stream).map_err(io_ctx(format!("setting socket buffers on {peer}")))?;
            let (r, w) = stream.into_split();
            (Box::new(r), Box::new(w))
        }
        (Endpoint::Unix(_), Some(_)) => {
            return Err(io_ctx(format!("connecting to {peer}"))(not_simulated()));
        }
    };
    Connection::establish(read, write, Role::Client, secret, peer, HANDSHAKE_TIMEOUT).await
}

/// `connect` bounded by [`HANDSHAKE_TIMEOUT`].
async fn within_handshake<T>(
    connect: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connect)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// The client side of a TLS session over `stream`, split into halves.
async fn client_tls<S: ByteStream>(
    tls: &crate::ClusterTls,
    stream: S,
    peer: &str,
) -> Result<(BoxRead, BoxWrite), ProtoError> {
    let session = within_handshake(tls.connect(stream))
        .await
        .map_err(io_ctx(format!("TLS with {peer}")))?;
    let (r, w) = tokio::io::split(session);
    Ok((Box::new(r), Box::new(w)))
}

/// What connecting to or listening on a Unix socket fails with in a simulated network:
/// its hosts are machines of their own, which reach each other over TCP only.
fn not_simulated() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "Unix sockets are not part of the simulated network",
    )
}

/// Listens on `endpoint`; accepted peers must prove they hold `secret`. For a Unix path a
/// stale socket file left by a dead listener is replaced; a live listener or a file that is
/// not a socket is an error (nothing else is ever deleted).
pub async fn listen(endpoint: &Endpoint, secret: &ClusterSecret) -> Result<Listener, ProtoError> {
    let local_of = |addr: std::net::SocketAddr| Endpoint::Tcp {
        host: addr.ip().to_string(),
        port: addr.port(),
    };
    let (inner, local) = match (endpoint, network::installed()) {
        (Endpoint::Tcp { host, port }, None) => {
            let listener = TcpListener::bind((host.as_str(), *port))
                .await
                .map_err(io_ctx(format!("listening on {endpoint}")))?;
            let addr = listener
                .local_addr()
                .map_err(io_ctx(format!("address of {endpoint}")))?;
            (Inner::Tcp(listener), local_of(addr))
        }
        (Endpoint::Tcp { host, port }, Some(network)) => {
            let listener = network
                .bind(host, *port)
                .await
                .map_err(io_ctx(format!("listening on {endpoint}")))?;
            let addr = listener
                .local_addr()
                .map_err(io_ctx(format!("address of {endpoint}")))?;
            (Inner::Simulated(listener), local_of(addr))
        }
        // Nobody can connect to it (see `connect`); the daemon listening on it goes on, as
        // with a socket nobody on its machine uses.
        (Endpoint::Unix(_), Some(_)) => (Inner::Unreachable, endpoint.clone()),
        (Endpoint::Unix(path), None) => {
            let listener = bind_unix(path)
                .await
                .map_err(io_ctx(format!("listening on {endpoint}")))?;
            let meta = std::fs::metadata(path).map_err(io_ctx(format!("stat of {}", path.display())))?;
            (
                Inner::Unix {
                    listener,
                    path: path.clone(),
                    dev: meta.dev(),
                    ino: meta.ino(),
                },
                endpoint.clone(),
            )
        }
    };
    Ok(Listener {
        inner,
        local,
        secret: secret.clone(),
        handshake_timeout: HANDSHAKE_TIMEOUT,
    })
}

fn widen_buffers(stream: &UnixStream) -> std::io::Result<()> {
    let fd = stream.as_raw_fd();
    for option in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        let value = UNIX_SOCKET_BUFFER;
        // SAFETY: `fd` is an open socket owned by `stream`, and `value` is a live c_int whose
        // size is passed alongside it, as setsockopt(2) requires.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

async fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    match UnixListener::bind(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let is_socket = std::fs::symlink_metadata(path)
                .map(|m| m.file_type().is_socket())
                .unwrap_or(false);
            let refused = matches!(
                UnixStream::connect(path).await,
                Err(ref c) if c.kind() == std::io::ErrorKind::ConnectionRefused
            );
            if !(is_socket && refused) {
                return Err(e);
            }
            tracing::info!(path = %path.display(), "removing stale socket left by a dead listener");
            std::fs::remove_file(path)?;
            UnixListener::bind(path)
        }
        other => other,
    }
}

enum Inner {
    Tcp(TcpListener),
    /// A listener of the network installed in this process ([`network::install`]).
    Simulated(Box<dyn Acceptor>),
    /// A Unix socket in a simulated network: no peer can reach it.
    Unreachable,
    Unix {
        listener: UnixListener,
        path: PathBuf,
        dev: u64,
        ino: u64,
    },
}

/// A listening socket. [`Listener::accept`] yields peers that still have to authenticate,
/// so a server can run each handshake in its own task and a slow peer delays no other.
pub struct Listener {
    inner: Inner,
    local: Endpoint,
    secret: ClusterSecret,
    handshake_timeout: Duration,
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// The endpoint peers should connect to (with the real port when listening on port 0).
    pub fn local_endpoint(&self) -> &Endpoint {
        &self.local
    }

    /// How long an accepted peer gets to authenticate (default [`HANDSHAKE_TIMEOUT`]).
    pub fn set_handshake_timeout(&mut self, timeout: Duration) {
        self.handshake_timeout = timeout;
    }

    /// Waits for the next peer. Call [`Incoming::authenticate`] on it before anything else.
    pub async fn accept(&self) -> Result<Incoming, ProtoError> {
        let (stream, peer): (Accepted, String) = match &self.inner {
            Inner::Tcp(listener) => {
                let (stream, addr) = listener
                    .accept()
                    .await
                    .map_err(io_ctx(format!("accepting on {}", self.local)))?;
                tune_tcp(&stream).map_err(io_ctx(format!("setting the TCP options of {addr}")))?;
                if self.secret.tls().is_some() {
                    (Accepted::Tls(Box::new(stream)), addr.to_string())
                } else {
                    let (r, w) = stream.into_split();
                    (Accepted::Open(Box::new(r), Box::new(w)), addr.to_string())
                }
            }
            Inner::Unreachable => std::future::pending().await,
            Inner::Simulated(listener) => {
                let (stream, addr) = listener
                    .accept()
                    .await
                    .map_err(io_ctx(format!("accepting on {}", self.local)))?;
                if self.secret.tls().is_some() {
                    (Accepted::Tls(stream), addr.to_string())
                } else {
                    let (r, w) = tokio::io::split(stream);
                    (Accepted::Open(Box::new(r), Box::new(w)), addr.to_string())
                }
            }
            Inner::Unix { listener, .. } => {
                let (stream, _) = listener
                    .accept()
                    .await
                    .map_err(io_ctx(format!("accepting on {}", self.local)))?;
                widen_buffers(&stream)
                    .map_err(io_ctx(format!("setting socket buffers on {}", self.local)))?;
                let peer = match stream.peer_cred().ok().and_then(|c| c.pid()) {
                    Some(pid) => format!("{} (pid {pid})", self.local),
                    None => self.local.to_string(),
                };
                let (r, w) = stream.into_split();
                (Accepted::Open(Box::new(r), Box::new(w)), peer)
            }
        };
        Ok(Incoming {
            stream,
            peer,
            secret: self.secret.clone(),
            timeout: self.handshake_timeout,
        })
    }
}

impl Drop for Listener {
    /// Removes the socket file, but only if it is still the one this listener created.
    fn drop(&mut self) {
        if let Inner::Unix { path, dev, ino, .. } = &self.inner {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if meta.dev() == *dev && meta.ino() == *ino {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
    }
}

/// An accepted peer's stream, before authentication.
enum Accepted {
    Open(BoxRead, BoxWrite),
    /// A TCP connection of a cluster with TLS: the TLS session comes first.
    Tls(Box<dyn ByteStream>),
}

/// An accepted but not yet authenticated peer; it exposes no way to read or write frames.
pub struct Incoming {
    stream: Accepted,
    peer: String,
    secret: ClusterSecret,
    timeout: Duration,
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl Incoming {
    /// The peer's address, for logging before authentication.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Runs the server side of the handshake. A peer that fails (wrong secret, sends data
    /// first, reflects a challenge, times out, speaks another protocol) is refused with one
    /// `warn` log line naming its address and the reason, and an error is returned.
    /// In a cluster with TLS, the TLS session is set up first, within the same wait.
    pub async fn authenticate(self) -> Result<Connection, ProtoError> {
        let started = tokio::time::Instant::now();
        let (read, write): (BoxRead, BoxWrite) = match self.stream {
            Accepted::Open(read, write) => (read, write),
            Accepted::Tls(stream) => {
                let tls = self.secret.tls().expect("a TLS stream is accepted only with TLS");
                let session = tokio::time::timeout(self.timeout, tls.accept(stream))
                    .await
                    .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()));
                match session {
                    Ok(session) => {
                        let (r, w) = tokio::io::split(session);
                        (Box::new(r), Box::new(w))
                    }
                    Err(e) => {
                        let reason = format!("TLS: {e}");
                        tracing::warn!(peer = %self.peer, %reason, "refused connection: authentication failed");
                        return Err(ProtoError::Auth {
                            peer: self.peer,
                            reason,
                        });
                    }
                }
            }
        };
        let left = self.timeout.saturating_sub(started.elapsed());
        Connection::establish(read, write, Role::Server, &self.secret, self.peer, left).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends of a TCP connection find a peer whose host vanished within `DEAD_PEER`,
    /// not the kernel's quarter of an hour.
    #[test]
    fn tcp_connections_bound_how_long_a_vanished_peer_holds_them() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            for stream in [&client, &server] {
                tune_tcp(stream).unwrap();
                let socket = socket2::SockRef::from(stream);
                assert!(socket.keepalive().unwrap());
                assert_eq!(socket.tcp_user_timeout().unwrap(), Some(DEAD_PEER));
                let probing = socket.tcp_keepalive_time().unwrap()
                    + socket.tcp_keepalive_interval().unwrap() * socket.tcp_keepalive_retries().unwrap();
                assert!(probing <= DEAD_PEER, "{probing:?}");
                assert!(stream.nodelay().unwrap());
            }
        });
    }

    #[test]
    fn endpoints_parse_and_display_roundtrip() {
        for s in [
            "tcp://127.0.0.1:7000",
            "tcp://node-3.cluster:0",
            "tcp://[::1]:65535",
            "unix:///run/eckpt/n0.sock",
        ] {
            let ep: Endpoint = s.parse().unwrap();
            assert_eq!(ep.to_string(), s);
            let json = serde_json::to_string(&ep).unwrap();
            assert_eq!(serde_json::from_str::<Endpoint>(&json).unwrap(), ep);
        }
        assert_eq!(
            "tcp://[::1]:9".parse::<Endpoint>().unwrap(),
            Endpoint::Tcp {
                host: "::1".into(),
                port: 9
            }
        );
        assert_eq!(
            "unix:///a/b".parse::<Endpoint>().unwrap(),
            Endpoint::Unix("/a/b".into())
        );
        assert_eq!(
            "unix:///a/b".parse::<Endpoint>().unwrap().kind(),
            TransportKind::Unix
        );
    }

    #[test]
    fn bad_endpoints_are_refused_with_a_reason() {
        for (s, why) in [
            ("tcp://host", "host:port"),
            ("tcp://host:99999", "port"),
            ("tcp://:80", "empty host"),
            ("tcp://::1:80", "brackets"),
            ("tcp://[::1:80", "unclosed"),
            ("unix://relative/path", "absolute"),
            ("http://x:1", "expected tcp://"),
            ("127.0.0.1:80", "expected tcp://"),
        ] {
            let err = s.parse::<Endpoint>().unwrap_err().to_string();
            assert!(err.contains(why), "{s}: {err}");
            assert!(err.contains(s), "{s}: {err}");
        }
        let long = format!("unix:///{}", "x".repeat(120));
        assert!(long
            .parse::<Endpoint>()
            .unwrap_err()
            .to_string()
            .contains("at most 107"));
        assert!(serde_json::from_str::<Endpoint>("\"ftp://x\"").is_err());
    }
}
