//! The product's transport — `eckpt_proto::listen`, `connect`, the handshake and frames —
//! on the simulated network: it carries authenticated exchanges between simulated hosts,
//! its deadlines pass in virtual time, a partition cuts it, and a seed replays a run.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use eckpt_proto::{connect, listen, ClusterSecret, Endpoint, ProtoError, HANDSHAKE_TIMEOUT};

const PORT: u16 = 7000;

fn server_endpoint() -> Endpoint {
    Endpoint::Tcp {
        host: "server".into(),
        port: PORT,
    }
}

fn simulation<'a>(seed: u64) -> turmoil::Sim<'a> {
    eckpt_sim::network::install();
    turmoil::Builder::new()
        .rng_seed(seed)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(40))
        .simulation_duration(Duration::from_secs(600))
        .build()
}

/// A server that answers each message with it and the server's name, and records the
/// order messages arrived in.
fn serve(sim: &mut turmoil::Sim<'_>, secret: ClusterSecret, arrivals: Rc<RefCell<Vec<String>>>) {
    sim.host("server", move || {
        let (secret, arrivals) = (secret.clone(), arrivals.clone());
        async move {
            let listener = listen(&server_endpoint(), &secret).await?;
            assert_eq!(
                listener.local_endpoint().to_string(),
                format!("tcp://{}:{PORT}", turmoil::lookup("server")),
                "a listener advertises its host's address"
            );
            loop {
                let mut conn = listener.accept().await?.authenticate().await?;
                let message: String = conn.recv_control().await?;
                arrivals.borrow_mut().push(message.clone());
                conn.send_control(&format!("{message} from server")).await?;
            }
        }
    });
}

/// Clients `c0`… each sending their name; the order the server saw them in.
fn exchange(seed: u64, clients: usize) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::create_file(&dir.path().join("secret")).unwrap();
    let mut sim = simulation(seed);
    let arrivals = Rc::new(RefCell::new(Vec::new()));
    serve(&mut sim, secret.clone(), arrivals.clone());
    for c in 0..clients {
        let secret = secret.clone();
        sim.client(format!("c{c}"), async move {
            let mut conn = connect(&server_endpoint(), &secret).await?;
            conn.send_control(&format!("c{c}")).await?;
            let answer: String = conn.recv_control().await?;
            assert_eq!(answer, format!("c{c} from server"));
            Ok(())
        });
    }
    sim.run().unwrap();
    let seen = arrivals.borrow().clone();
    seen
}

#[test]
fn authenticated_exchanges_cross_the_simulated_network_and_a_seed_replays_them() {
    let first = exchange(7, 6);
    assert_eq!(first.len(), 6, "{first:?}");
    assert_eq!(exchange(7, 6), first, "the same seed, the same order of arrival");
    let orders: std::collections::BTreeSet<Vec<String>> = (0..8).map(|seed| exchange(seed, 6)).collect();
    assert!(
        orders.len() > 1,
        "seeds draw other delays, and other orders: {orders:?}"
    );
}

#[test]
fn a_held_link_waits_out_the_deadline_in_virtual_time_and_a_partition_refuses_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::create_file(&dir.path().join("secret")).unwrap();
    let mut sim = simulation(1);
    serve(&mut sim, secret.clone(), Rc::default());
    let real = Instant::now();
    sim.client("cut", async move {
        // A link whose packets go nowhere (a dead switch): the connection's own deadline.
        turmoil::hold("cut", "server");
        let began = tokio::time::Instant::now();
        let failed = connect(&server_endpoint(), &secret).await.unwrap_err();
        let waited = began.elapsed();
        assert!(
            waited >= HANDSHAKE_TIMEOUT && waited < HANDSHAKE_TIMEOUT + Duration::from_secs(1),
            "{waited:?}: {failed}"
        );
        turmoil::release("cut", "server");
        // A partition refuses at once, as a host unreachable does.
        turmoil::partition("cut", "server");
        let began = tokio::time::Instant::now();
        connect(&server_endpoint(), &secret).await.unwrap_err();
        assert!(began.elapsed() < Duration::from_secs(1), "{:?}", began.elapsed());
        turmoil::repair("cut", "server");
        let mut conn = connect(&server_endpoint(), &secret).await?;
        conn.send_control(&"again").await?;
        assert_eq!(conn.recv_control::<String>().await?, "again from server");
        Ok(())
    });
    sim.run().unwrap();
    assert!(
        real.elapsed() < HANDSHAKE_TIMEOUT / 2,
        "a deadline of {HANDSHAKE_TIMEOUT:?} took {:?} of real time",
        real.elapsed()
    );
}

#[test]
fn unix_sockets_are_not_part_of_the_simulated_network() {
    let dir = tempfile::tempdir().unwrap();
    let secret = ClusterSecret::create_file(&dir.path().join("secret")).unwrap();
    let socket = Endpoint::Unix(dir.path().join("agent.sock"));
    let mut sim = simulation(1);
    sim.client("local", async move {
        let listener = listen(&socket, &secret).await?;
        assert_eq!(listener.local_endpoint(), &socket);
        let refused = connect(&socket, &secret).await.unwrap_err();
        assert!(matches!(refused, ProtoError::Io { .. }), "{refused:?}");
        assert!(
            refused.to_string().contains("not part of the simulated network"),
            "{refused}"
        );
        Ok(())
    });
    sim.run().unwrap();
    assert!(!dir.path().join("agent.sock").exists(), "no socket file is made");
}
