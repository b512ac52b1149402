//! The client's error type, with the numeric codes the C API returns.
//!
//! The code is chosen by the kind of failure, down to the variants of the store's and the
//! cluster's errors, so that a C caller can tell "the data is damaged" (`ECKPT_ECORRUPT`)
//! from "the cluster is unreachable" (`ECKPT_ECLUSTER`) whichever layer found it.

use eckpt_cluster_api::{ClusterError, ErrorKind};
use eckpt_codec::CodecError;
use eckpt_store::StoreError;

use crate::capi;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad argument or configuration.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The call is not allowed now (e.g. protecting after restart, or no init).
    #[error("{0}")]
    State(String),
    /// What the checkpoint holds does not fit what is protected now (a region's size changed,
    /// an input file was modified, an append file lost data).
    #[error("checkpoint does not match: {0}")]
    Mismatch(String),
    /// Dirty tracking failed.
    #[error(transparent)]
    Capture(#[from] eckpt_capture::CaptureError),
    /// The store failed (I/O, or a checksum mismatch: never wrong bytes).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The cluster could not be reached or refused (cluster mode), in the client's own words
    /// (an aborted epoch).
    #[error("cluster: {0}")]
    Cluster(String),
    /// A call into the cluster layer failed (cluster mode); kept whole so that its kind picks
    /// the code: a corrupt block reached through the cluster is corruption, not a generic
    /// cluster error.
    #[error("cluster: {0}")]
    ClusterCall(#[from] ClusterError),
    /// Device (GPU) memory could not be protected, scanned, copied or restored.
    #[error(transparent)]
    Device(#[from] eckpt_gpu::GpuError),
    /// A bug in eckpt (a panic caught at the API, a state that should not occur): the call
    /// failed and the next checkpoint compares everything, but please report it.
    #[error("internal error in eckpt (please report it): {0}")]
    Internal(String),
    /// A file operation on a protected file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The negative code the C API returns for this error (`ECKPT_E*` in `eckpt.h`).
    pub fn code(&self) -> i32 {
        match self {
            Error::Invalid(_) => capi::ECKPT_EINVAL,
            Error::State(_) => capi::ECKPT_ESTATE,
            Error::Mismatch(_) => capi::ECKPT_EMISMATCH,
            // A region or setting the tracker refuses is the caller's argument, not a failure
            // of tracking.
            Error::Capture(
                eckpt_capture::CaptureError::InvalidRegion { .. }
                | eckpt_capture::CaptureError::InvalidConfig(_),
            ) => capi::ECKPT_EINVAL,
            Error::Capture(_) => capi::ECKPT_ECAPTURE,
            Error::Device(_) => capi::ECKPT_EDEVICE,
            Error::Store(e) => store_code(e),
            Error::Io { .. } => capi::ECKPT_EIO,
            Error::Cluster(_) => capi::ECKPT_ECLUSTER,
            Error::ClusterCall(e) => cluster_code(e),
            Error::Internal(_) => capi::ECKPT_EINTERNAL,
        }
    }

    /// The error a caught panic of eckpt's becomes at an API boundary (C, Python): an
    /// internal error carrying what the panic said, when it said it as text.
    pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Error {
        let said = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
        Error::Internal(match said {
            Some(text) => format!("panic: {text}"),
            None => "panic".into(),
        })
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Error {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// The code of a store failure, wherever the store ran (this process, or a node agent whose
/// error the cluster passed on). Every variant is named, so a new one must be given a code.
fn store_code(e: &StoreError) -> i32 {
    match e {
        // Stored or received bytes that fail their checksum or do not parse: never returned.
        StoreError::BlockChecksum { .. }
        | StoreError::Corrupt { .. }
        | StoreError::Manifest(_)
        | StoreError::Delta(_) => capi::ECKPT_ECORRUPT,
        // A request against the rules, or a directory that is not this user's alone.
        StoreError::Invalid(_) | StoreError::Untrusted(_) => capi::ECKPT_EINVAL,
        // A second live process on one rank: a call this process must not make.
        StoreError::Claimed { .. } => capi::ECKPT_ESTATE,
        // The store could not do the work: a file operation failed, what should be there is
        // not, another writer holds the rank, or a delta does not fit its slot.
        StoreError::Io { .. }
        | StoreError::NoEpoch { .. }
        | StoreError::NoItem { .. }
        | StoreError::Busy { .. }
        | StoreError::DeltaTooLarge { .. } => capi::ECKPT_EIO,
    }
}

/// The code of a cluster failure. Every variant is named, so a new one must be given a code.
fn cluster_code(e: &ClusterError) -> i32 {
    match e {
        ClusterError::Corrupt(_) => capi::ECKPT_ECORRUPT,
        ClusterError::Fenced(_) => capi::ECKPT_EFENCED,
        ClusterError::Mismatch(_) => capi::ECKPT_EMISMATCH,
        ClusterError::Store(e) => store_code(e),
        ClusterError::Io { .. } => capi::ECKPT_EIO,
        // A group that cannot rebuild its data: too many members lost, or (rs codes) a
        // survivor pattern whose decode matrix is singular.
        ClusterError::Unrecoverable(_)
        | ClusterError::Codec(CodecError::TooManyErasures { .. } | CodecError::SingularMatrix) => {
            capi::ECKPT_ECLUSTER
        }
        // The cluster layer shapes every buffer it hands the codec: a refusal is a bug.
        ClusterError::Codec(CodecError::Shape(_)) => capi::ECKPT_EINTERNAL,
        // An ECKPT_ISA this CPU cannot run: a setting to fix.
        ClusterError::Codec(CodecError::Kernel(_)) => capi::ECKPT_EINVAL,
        // Refusals, unreachable nodes and broken connections.
        ClusterError::Invalid(_)
        | ClusterError::NotFound(_)
        | ClusterError::Refused(_)
        | ClusterError::Protocol(_)
        | ClusterError::Node { .. }
        | ClusterError::Unreachable(_)
        | ClusterError::NoAnswer(_)
        | ClusterError::Link(_)
        | ClusterError::Proto(_) => capi::ECKPT_ECLUSTER,
        ClusterError::Internal(_) => capi::ECKPT_EINTERNAL,
        // A flushed epoch read back: by the kind it has on the wire.
        ClusterError::Flush(_) => match e.kind() {
            ErrorKind::Corrupt => capi::ECKPT_ECORRUPT,
            ErrorKind::Io => capi::ECKPT_EIO,
            _ => capi::ECKPT_ECLUSTER,
        },
        // Another process's failure keeps the code of its kind: a corrupt block an agent
        // found is as corrupt as one found here.
        ClusterError::Remote { kind, .. } => match kind {
            ErrorKind::Corrupt => capi::ECKPT_ECORRUPT,
            ErrorKind::Io => capi::ECKPT_EIO,
            ErrorKind::Internal => capi::ECKPT_EINTERNAL,
            ErrorKind::Fenced => capi::ECKPT_EFENCED,
            ErrorKind::Mismatch => capi::ECKPT_EMISMATCH,
            ErrorKind::Invalid
            | ErrorKind::NotFound
            | ErrorKind::Refused
            | ErrorKind::Protocol
            | ErrorKind::Node
            | ErrorKind::Link
            | ErrorKind::Unrecoverable => capi::ECKPT_ECLUSTER,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capi::{
        ECKPT_ECAPTURE, ECKPT_ECLUSTER, ECKPT_ECORRUPT, ECKPT_EINTERNAL, ECKPT_EINVAL, ECKPT_EIO,
        ECKPT_EMISMATCH, ECKPT_ESTATE,
    };

    fn os_error() -> std::io::Error {
        std::io::Error::from_raw_os_error(28) // ENOSPC
    }

    fn block_checksum() -> StoreError {
        StoreError::BlockChecksum {
            rank: 3,
            epoch: 7,
            item: "mem/state".into(),
            block: 40,
            stored_in: 6,
        }
    }

    fn store_corrupt() -> StoreError {
        StoreError::Corrupt {
            rank: 3,
            epoch: 7,
            detail: "data file truncated".into(),
        }
    }

    /// Every store variant, with the code it must map to.
    fn store_cases() -> Vec<(StoreError, i32)> {
        vec![
            (block_checksum(), ECKPT_ECORRUPT),
            (store_corrupt(), ECKPT_ECORRUPT),
            (StoreError::Manifest("not JSON".into()), ECKPT_ECORRUPT),
            (StoreError::Delta("bad magic".into()), ECKPT_ECORRUPT),
            (StoreError::Invalid("block size 0".into()), ECKPT_EINVAL),
            (
                StoreError::Io {
                    path: "/store/rank.3".into(),
                    source: os_error(),
                },
                ECKPT_EIO,
            ),
            (StoreError::NoEpoch { rank: 3, epoch: 7 }, ECKPT_EIO),
            (
                StoreError::NoItem {
                    rank: 3,
                    epoch: 7,
                    item: "mem/state".into(),
                },
                ECKPT_EIO,
            ),
            (StoreError::Busy { rank: 3 }, ECKPT_EIO),
            (
                StoreError::Claimed {
                    rank: 3,
                    holder: "process 4242 on n7".into(),
                },
                ECKPT_ESTATE,
            ),
            (
                StoreError::DeltaTooLarge {
                    rank: 3,
                    epoch: 7,
                    needed: 10,
                    len: 5,
                },
                ECKPT_EIO,
            ),
        ]
    }

    #[test]
    fn client_errors_map_to_their_codes() {
        let cases = [
            (Error::Invalid("file mode 9".into()), ECKPT_EINVAL),
            (
                Error::State("eckpt_init has not been called".into()),
                ECKPT_ESTATE,
            ),
            (
                Error::Mismatch("region \"a\" changed size".into()),
                ECKPT_EMISMATCH,
            ),
            (
                Error::Capture(eckpt_capture::CaptureError::UffdUnavailable(
                    "no kernel support".into(),
                )),
                ECKPT_ECAPTURE,
            ),
            (
                Error::io(std::path::Path::new("/data/out.log"), os_error()),
                ECKPT_EIO,
            ),
            (Error::Cluster("epoch 4 aborted".into()), ECKPT_ECLUSTER),
            (
                Error::Capture(eckpt_capture::CaptureError::InvalidConfig(
                    "hash block size must be in 1..=1GiB, got 2147483648".into(),
                )),
                ECKPT_EINVAL,
            ),
            (
                Error::Internal("panic: index out of bounds".into()),
                ECKPT_EINTERNAL,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(error.code(), code, "{error}");
        }
    }

    #[test]
    fn store_errors_map_by_kind() {
        for (error, code) in store_cases() {
            let error = Error::Store(error);
            assert_eq!(error.code(), code, "{error}");
        }
    }

    /// The same store failure means the same thing to the caller whether the rank's own store
    /// or a node agent found it.
    #[test]
    fn store_errors_through_the_cluster_map_like_local_ones() {
        for (error, code) in store_cases() {
            let error = Error::from(ClusterError::Store(error));
            assert_eq!(error.code(), code, "{error}");
        }
    }

    #[test]
    fn a_corrupt_block_reached_through_the_cluster_is_corrupt_not_a_cluster_error() {
        for error in [
            ClusterError::Corrupt("obj-5 member 2: chunk 9 fails its crc32c".into()),
            ClusterError::Store(block_checksum()),
            ClusterError::Store(store_corrupt()),
        ] {
            let error = Error::from(error);
            assert_eq!(error.code(), ECKPT_ECORRUPT, "{error}");
        }
    }

    #[test]
    fn cluster_errors_map_by_kind() {
        let cases = [
            (
                ClusterError::Refused("rank 3's node n1 is down".into()),
                ECKPT_ECLUSTER,
            ),
            (
                ClusterError::Protocol("the coordinator answered Status with Ok".into()),
                ECKPT_ECLUSTER,
            ),
            (
                // The coordinator's answer to a restart with another number of ranks.
                ClusterError::from_coordinator(eckpt_cluster_api::WireError {
                    kind: ErrorKind::Mismatch,
                    message: "the job was checkpointed with 3 ranks but restarts with 4".into(),
                }),
                ECKPT_EMISMATCH,
            ),
            (
                ClusterError::Link("node n2: stream ended early".into()),
                ECKPT_ECLUSTER,
            ),
            (
                ClusterError::Internal("coding thread: panicked".into()),
                ECKPT_EINTERNAL,
            ),
            (
                // A corrupt block an agent found while serving this rank.
                ClusterError::remote(
                    "n2",
                    eckpt_cluster_api::WireError {
                        kind: ErrorKind::Corrupt,
                        message: "epoch 4 rank 1 mem/a block 3 fails its checksum".into(),
                    },
                ),
                ECKPT_ECORRUPT,
            ),
            (
                ClusterError::from_coordinator(eckpt_cluster_api::WireError {
                    kind: ErrorKind::Io,
                    message: "/c/journal.json: No space left on device".into(),
                }),
                ECKPT_EIO,
            ),
            (
                ClusterError::Node {
                    node: "n1".into(),
                    reason: "connection refused".into(),
                },
                ECKPT_ECLUSTER,
            ),
            (
                ClusterError::Unrecoverable("group 0 lost 3 members, m=2".into()),
                ECKPT_ECLUSTER,
            ),
            (
                ClusterError::Codec(CodecError::TooManyErasures { erased: 3, m: 2 }),
                ECKPT_ECLUSTER,
            ),
            (ClusterError::Codec(CodecError::SingularMatrix), ECKPT_ECLUSTER),
            (
                ClusterError::Codec(CodecError::Shape("2 inputs for k=3".into())),
                ECKPT_EINTERNAL,
            ),
            (
                ClusterError::Io {
                    path: "/cluster/cluster.json".into(),
                    source: os_error(),
                },
                ECKPT_EIO,
            ),
            (
                ClusterError::Proto(eckpt_proto::ProtoError::Closed),
                ECKPT_ECLUSTER,
            ),
        ];
        for (error, code) in cases {
            let error = Error::from(error);
            assert_eq!(error.code(), code, "{error}");
        }
    }

    #[test]
    fn cluster_errors_keep_their_message() {
        let error = Error::from(ClusterError::Refused(
            "rank 3's node n1 is down: run `eckpt recover`".into(),
        ));
        assert_eq!(
            error.to_string(),
            "cluster: rank 3's node n1 is down: run `eckpt recover`"
        );
    }
}
