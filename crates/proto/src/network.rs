//! Where TCP byte streams come from: the operating system's sockets, unless a network of
//! another kind was installed for the whole process.
//!
//! The daemons always use the kernel's TCP. A deterministic simulator runs the same
//! coordinator and agent code as hosts of one process over a simulated network (virtual
//! time, seeded delays, partitions, crashes): it installs its [`Network`] once, before the
//! first connection, and from then on every [`crate::connect`] and [`crate::listen`] of a
//! TCP endpoint goes through it — with the same authentication, TLS and framing on top, so
//! what is simulated is only what the kernel would do. Unix-socket endpoints are not
//! simulated: simulated hosts are on different machines, and reach each other over TCP.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::OnceLock;

use tokio::io::{AsyncRead, AsyncWrite};

/// A connected byte stream, both directions.
pub trait ByteStream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> ByteStream for T {}

/// A future a [`Network`] returns (boxed, so that the trait is object safe).
pub type NetFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

/// A TCP network: connects to `host:port` and listens on one.
pub trait Network: Send + Sync + 'static {
    /// Connects to `host` (a name or an address) and `port`; unbounded (the caller bounds it).
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> NetFuture<'a, Box<dyn ByteStream>>;

    /// Listens on `host` and `port` (0: any free port).
    fn bind<'a>(&'a self, host: &'a str, port: u16) -> NetFuture<'a, Box<dyn Acceptor>>;
}

/// A listening socket of a [`Network`].
pub trait Acceptor: Send + Sync + 'static {
    /// The address peers connect to (the port chosen when bound to port 0).
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// The next connected peer and its address.
    fn accept(&self) -> NetFuture<'_, (Box<dyn ByteStream>, SocketAddr)>;
}

static INSTALLED: OnceLock<Box<dyn Network>> = OnceLock::new();

/// Makes `network` the TCP network of this process, for good. Refused when one was
/// installed already: connections made through the first would be left on another network.
pub fn install(network: Box<dyn Network>) -> Result<(), &'static str> {
    INSTALLED
        .set(network)
        .map_err(|_| "a network is installed in this process already")
}

/// The network installed in this process, if any (`None`: the kernel's TCP).
pub(crate) fn installed() -> Option<&'static dyn Network> {
    INSTALLED.get().map(|n| n.as_ref())
}
