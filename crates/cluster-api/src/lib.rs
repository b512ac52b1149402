//! The side of an eckpt cluster that ranks and commands see, apart from the daemons that
//! serve it: a rank library links this crate, never agent or coordinator code.
//!
//! - [`dirs`]: the cluster directory (configuration, secret, sockets, journal paths).
//! - [`msg`]: what agents and the coordinator understand; [`call`]: which answer each
//!   request gets; [`net`]: connecting and calling.
//! - [`commands`]: what `eckpt` commands and ranks do against a running cluster
//!   (status, checkpoints, exports, imports).
//! - [`rank_env`]: where a rank finds its number and the job's size in its environment.
//! - [`shard_layout`]: where each rank's items sit in a node's image shard.
//! - [`ClusterError`]: every failure of the cluster layer, in one line.

#![warn(missing_docs)]

pub mod call;
mod checks;
pub mod commands;
pub mod dirs;
mod error;
pub mod msg;
pub mod net;
pub mod rank_env;
pub mod shard_layout;

pub use eckpt_coding::{CodingConfig, Layout, Mode, Topology};
pub use error::{io_at, ClusterError, ErrorKind, WireError};
