//! What a checkpoint costs, predicted: the time of an epoch's encode (full, stripe or
//! update), of a rank's local checkpoint and of a recovery, the storage overhead, and the
//! checkpoint interval that leaves a job the most useful time — for configurations a
//! machine can run and for ones it cannot (thousands of nodes, faster links).
//!
//! The model counts the work the agents do — bytes each member sends and receives,
//! messages, GF arithmetic, store reads and writes — from the coding crate's own plans, and
//! prices it with a machine's measured costs (`eckpt model --calibrate`). Pure computation:
//! no I/O.
//!
//! - [`scenario`]: the cluster, its coding and the job's checkpoint sizes.
//! - [`machine`]: link rate, hosts and per-unit costs.
//! - [`control`]: what the control plane adds to every epoch and recovery as the cluster
//!   grows, and its fit to measurements.
//! - [`work`]: the work of one group's encode, decode or update, member by member.
//! - [`time`]: seconds of that work on a machine.
//! - [`predict`]: a scenario's epochs, checkpoints, recovery and storage.
//! - [`interval`]: Young's and Daly's checkpoint interval and the job's efficiency.
//! - [`risk`]: the risk of a group losing more than `m` members before it is protected
//!   again.
//! - [`recommend`]: the best configuration under constraints.

#![warn(missing_docs)]

pub mod control;
pub mod interval;
pub mod machine;
pub mod predict;
pub mod recommend;
pub mod risk;
pub mod scenario;
pub mod time;
pub mod work;

pub use machine::{Cpu, Hosts, Machine};
pub use predict::{predict, Prediction};
pub use scenario::Scenario;

/// Why the model refuses a question.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A scenario, machine or constraint that cannot be predicted.
    #[error("{0}")]
    Invalid(String),
}
