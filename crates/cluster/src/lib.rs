//! The eckpt cluster: node agents protect the checkpoints ranks keep in node-local stores
//! with Reed-Solomon codes computed in parallel across the nodes of a group, and rebuild
//! the data of lost nodes from the survivors.
//!
//! - [`config`]: the code, group shape, incremental mode, parity layout and topology.
//! - [`geometry`]: which member holds which shard of each row of a coded object.
//! - [`plan`]: the per-row steps of encode and decode under each topology.
//! - [`exec`]: one participant running its steps over links and local chunks.
//! - [`shard`], [`coded`]: a node's data shards (from its store) and its parity.
//! - [`agent`], [`coordinator`]: the two processes; [`msg`] what they say, [`net`] how.
//! - [`launch`], [`netns`], [`client`]: `eckpt up/down/join/kill-node`, emulated hosts,
//!   and what commands do against a running cluster.

#![warn(missing_docs)]

pub mod agent;
pub mod client;
pub mod coded;
pub mod config;
pub mod coordinator;
pub mod debug;
pub mod dirs;
mod error;
pub mod exec;
pub mod geometry;
pub mod launch;
pub mod msg;
pub mod net;
pub mod netns;
pub mod plan;
pub mod records;
pub mod shard;

pub use config::{CodingConfig, Layout, Mode, Topology};
pub use error::{io_at, ClusterError};
