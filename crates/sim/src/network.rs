//! The product's transport over turmoil's simulated TCP ([`SimulatedNetwork`]).
//!
//! Installed once per process ([`install`]); from then on every TCP endpoint the daemons
//! connect to or listen on is a simulated host's. A simulated host is named by the DNS
//! of the simulation (`tcp://n3:7000`), and a daemon listens on its host's name — turmoil
//! binds the host's every address, and the endpoint a daemon advertises must be one its
//! peers can reach.

use std::io;
use std::net::{IpAddr, SocketAddr};

use eckpt_proto::network::{Acceptor, ByteStream, NetFuture, Network};

/// turmoil's network as the product's.
pub struct SimulatedNetwork;

/// Makes turmoil's network this process's; a second call is a no-op, so that every test
/// of a binary may call it.
pub fn install() {
    let _ = eckpt_proto::network::install(Box::new(SimulatedNetwork));
}

impl Network for SimulatedNetwork {
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> NetFuture<'a, Box<dyn ByteStream>> {
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((host, port)).await?;
            Ok(Box::new(stream) as Box<dyn ByteStream>)
        })
    }

    fn bind<'a>(&'a self, host: &'a str, port: u16) -> NetFuture<'a, Box<dyn Acceptor>> {
        Box::pin(async move {
            let address = host_address(host).await?;
            let listener = turmoil::net::TcpListener::bind((IpAddr::from([0, 0, 0, 0]), port)).await?;
            let port = listener.local_addr()?.port();
            Ok(Box::new(SimulatedListener {
                listener,
                local: SocketAddr::new(address, port),
            }) as Box<dyn Acceptor>)
        })
    }
}

/// The simulated host named `host`: a daemon listens on its host's name, not an address
/// (turmoil has no way to tell a host its own).
async fn host_address(host: &str) -> io::Result<IpAddr> {
    let not_a_host = || {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{host:?} is not the name of a simulated host"),
        )
    };
    if host.parse::<IpAddr>().is_ok() {
        return Err(not_a_host());
    }
    let mut addresses = turmoil::net::lookup_host((host, 0))
        .await
        .map_err(|_| not_a_host())?;
    addresses.next().map(|a| a.ip()).ok_or_else(not_a_host)
}

/// A listener on every address of a simulated host, advertising the host's address.
struct SimulatedListener {
    listener: turmoil::net::TcpListener,
    local: SocketAddr,
}

impl Acceptor for SimulatedListener {
    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn accept(&self) -> NetFuture<'_, (Box<dyn ByteStream>, SocketAddr)> {
        Box::pin(async move {
            let (stream, peer) = self.listener.accept().await?;
            Ok((Box::new(stream) as Box<dyn ByteStream>, peer))
        })
    }
}
