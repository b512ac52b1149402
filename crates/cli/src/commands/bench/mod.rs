//! `eckpt bench …`: throughput measured next to references taken in the same run.

use anyhow::Result;

mod capture;
mod cgroup;
mod cluster;
mod codec;
pub(crate) mod control;
mod flush;
mod klauspost;
mod ranks;
mod recover;
mod regions;
mod restore;
pub mod stats;
pub mod transport;
mod workload;

#[derive(clap::Subcommand)]
pub enum Bench {
    /// GF kernels: encode, one-shard parity update and decode, vs memcpy, the system ISA-L
    /// and klauspost/reedsolomon (when its harness is built).
    Codec(codec::Args),
    /// Incremental capture: dirty tracking + copy vs xdelta3 and `eckpt delta`, same images.
    Capture(capture::Args),
    /// A local cluster encodes rank images (full, then incremental): encode time, bytes sent
    /// per node and efficiency against the link bandwidth measured in the same run; with
    /// `--recover`, m nodes die and the parallel decode is measured against the link too.
    Cluster(cluster::Args),
    /// The control plane as the cluster grows: the real coordinator and N real agents (many
    /// per process) checkpoint small images; coordinator CPU, calls, journal bytes and commit
    /// latency per epoch, then detection, recovery and every rank's restart after losses.
    Control(control::Args),
    /// Some ranks of `bench control`'s job, checkpointing on request (started by it).
    #[command(hide = true)]
    ControlRanks(control::RanksArgs),
    /// Frames over loopback TCP vs a Unix socket (agents on one host use Unix sockets).
    Transport(transport::Args),
    /// Flushes to shared storage: throughput vs the directory's write speed measured in the
    /// same run, and the ranks' checkpoint latency with and without a flush running.
    Flush(flush::Args),
    /// A restart's read of its images out of the node store (full epoch + deltas, verified,
    /// by a pool of threads) vs pread of the data file and memcpy with as many threads.
    Restore(restore::Args),
    /// The rank library's bookkeeping with many small regions: protect, checkpoint, an
    /// incremental checkpoint, protect again and restart (verified), vs memcpy of the bytes.
    Regions(regions::Args),
}

pub fn run(bench: Bench) -> Result<i32> {
    match bench {
        Bench::Codec(args) => codec::run(args),
        Bench::Capture(args) => capture::run(args),
        Bench::Cluster(args) => cluster::run(args),
        Bench::Control(args) => control::run(args),
        Bench::ControlRanks(args) => control::run_ranks(args),
        Bench::Transport(args) => transport::run(args),
        Bench::Flush(args) => flush::run(args),
        Bench::Restore(args) => restore::run(args),
        Bench::Regions(args) => regions::run(args),
    }
}
