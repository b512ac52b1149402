//! Deterministic simulation of an eckpt cluster. The daemons' own code runs as hosts of one
//! process on [turmoil](https://docs.rs/turmoil): a single thread polls every host in turn,
//! time is virtual (a simulated hour passes in seconds, and a deadline of minutes costs
//! nothing to wait out), and the network is simulated — its delays drawn from a seeded
//! generator, its links partitioned, held and repaired, its hosts crashed and restarted —
//! so that one seed always replays one run.
//!
//! [`install`] makes the process a simulation's: [`network`] puts the product's transport
//! ([`eckpt_proto::connect`], [`eckpt_proto::listen`]) on turmoil's network, and the
//! daemons' worker threads hand control back and forth with the simulation's thread
//! ([`eckpt_daemon::worker`]), so that their work happens at one point of the run.

#![warn(missing_docs)]

pub mod cluster;
pub mod disk;
pub mod faults;
pub mod invariants;
pub mod lease;
pub mod network;
pub mod outages;
pub mod ranks;
pub mod run;
pub mod trace;

/// Makes this process a simulation's, for good (a second call does nothing).
pub fn install() {
    network::install();
    eckpt_daemon::worker::simulate();
}
