//! Parallel erasure coding across the members of a group, as pure plans: what the
//! incremental-checkpoint papers compute, apart from the processes that run it (what redset
//! is to SCR). No I/O, no async runtime: the executor runs over two traits, so the same code
//! runs over sockets and files in the agent and over channels and vectors in tests.
//!
//! - [`config`]: the code, group shape, incremental mode, parity layout and topology.
//! - [`geometry`]: which member holds which shard of each row of a coded object.
//! - [`plan`]: the per-row steps of encode and decode under each topology.
//! - [`exec`]: one participant running its steps over links and local chunks.
//! - [`records`]: the wire format of `update` epochs' changed pieces.
//! - [`object`]: the name of a coded object (group, epoch).
//! - [`policy`]: how nodes form groups, the chunk size, update or full encode — decided
//!   here for the coordinator and predicted from here by the model.

#![warn(missing_docs)]

pub mod config;
mod error;
pub mod exec;
pub mod geometry;
pub mod object;
pub mod plan;
pub mod policy;
pub mod records;

pub use config::{CodingConfig, Layout, Mode, Topology};
pub use error::CodingError;
pub use object::ObjectId;
