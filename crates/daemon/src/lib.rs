//! What both eckpt daemons — the node agent and the coordinator — are made of besides their
//! own work: crash-only failure ([`crash_only`]: a panic aborts, the restart path is the
//! recovery path), one daemon per directory ([`owner_lock`]), pause points for the
//! fault-injection tests ([`debug`]), and where blocking or background work runs off the
//! async runtime ([`worker`], [`blocking`], [`background`]).

#![warn(missing_docs)]

pub mod crash_only;
pub mod debug;
pub mod owner_lock;
pub mod worker;

/// Runs file I/O or computation on a blocking thread, off the async runtime whose workers
/// serve connections and heartbeats.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, eckpt_cluster_api::ClusterError> + Send + 'static,
) -> Result<T, eckpt_cluster_api::ClusterError> {
    worker::spawn(f).join().await?
}

/// The nice value of [`background`] threads: under contention such a thread gets about a
/// tenth of a core's share (CFS weights 110 against 1024), never nothing.
pub const BACKGROUND_NICE: i32 = 10;

/// Runs `f` on a thread of its own at CPU priority [`BACKGROUND_NICE`]: work that may take
/// seconds and must leave the node's cores to the ranks and the encode when they want
/// them — a flush. A thread of its own because a thread cannot raise its priority back
/// without privileges, and the runtime's blocking pool reuses its threads.
pub async fn background<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, eckpt_cluster_api::ClusterError> + Send + 'static,
) -> Result<T, eckpt_cluster_api::ClusterError> {
    worker::spawn_thread("eckpt-background".into(), |_| lower_this_threads_priority(), f)?
        .join()
        .await?
}

/// Raises the calling thread's nice value to [`BACKGROUND_NICE`] unless it is already as
/// nice (Linux: per thread). A failure only costs the application some speed, so it is
/// logged and the work goes on.
fn lower_this_threads_priority() {
    // SAFETY: plain system calls on this thread's own id.
    let changed = unsafe {
        let tid = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now >= BACKGROUND_NICE {
            return;
        }
        libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE)
    };
    if changed != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "could not lower a background thread's priority"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn background_work_runs_at_low_priority_and_the_caller_keeps_its_own() {
        // SAFETY: plain system calls on this thread's own id.
        let nice = || unsafe {
            *libc::__errno_location() = 0;
            libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t)
        };
        let caller = nice();
        let inside = background(move || Ok(nice())).await.unwrap();
        assert_eq!(inside, BACKGROUND_NICE.max(caller));
        assert_eq!(nice(), caller);
        let failed =
            background(|| -> Result<(), _> { Err(eckpt_cluster_api::ClusterError::Invalid("no".into())) })
                .await;
        assert!(failed.unwrap_err().to_string().contains("no"));
    }
}
