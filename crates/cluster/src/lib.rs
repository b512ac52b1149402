//! The eckpt cluster's daemons: node agents protect the checkpoints ranks keep in
//! node-local stores with Reed-Solomon codes computed in parallel across the nodes of a
//! group (the plans come from `eckpt-coding`), and rebuild the data of lost nodes from the
//! survivors; the coordinator runs epochs, liveness and recovery. What ranks and commands
//! send them lives in `eckpt-cluster-api`.
//!
//! - [`shard`], [`stripe_blob`], [`parity_store`]: a node's data shards (from its store, or
//!   the stripe blobs written as they are encoded) and its parity.
//! - [`agent`], [`coordinator`]: the two processes.
//! - [`launch`], [`netns`]: `eckpt up/down/join/kill-node` and emulated hosts.
//! - [`debug`]: pause points for fault-injection tests.

#![warn(missing_docs)]

pub mod agent;
pub mod coordinator;
pub mod debug;
pub mod launch;
pub mod netns;
pub mod parity_store;
pub mod shard;
pub mod stripe_blob;

/// Runs file I/O or computation on a blocking thread, off the async runtime whose workers
/// serve connections and heartbeats.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, eckpt_cluster_api::ClusterError> + Send + 'static,
) -> Result<T, eckpt_cluster_api::ClusterError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| eckpt_cluster_api::ClusterError::Internal(format!("worker thread: {e}")))?
}
