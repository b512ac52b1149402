//! Crash-only daemons. A panic in a coordinator or agent thread must not leave a zombie
//! behind — a process that still answers heartbeats while a poisoned lock or a dead task
//! refuses every real request. So a daemon aborts on any panic, after the panic message is
//! printed to its log: whoever restarts it (`eckpt up`, the batch system) goes through the
//! same path as after a crash, which is the path the journal and the stores are built for.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`. A lock is poisoned only by a panic while it was held, and in a daemon
/// that panic aborted the process ([`install`]), so daemon code never meets a poisoned lock:
/// this is not a crash point.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes every later panic in this process print its message and abort the process.
pub fn install() {
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        print(info);
        eprintln!("eckpt: a panic in a daemon is a crash: aborting (crash-only; restart it to recover)");
        std::process::abort();
    }));
}

#[cfg(test)]
mod tests {
    /// Runs only as the child the test below starts: installs the hook and panics on a
    /// runtime worker, where a panic would otherwise end that task and nothing else.
    #[test]
    fn crash_only_child() {
        if std::env::var_os("ECKPT_CRASH_ONLY_CHILD").is_none() {
            return;
        }
        super::install();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let _ = tokio::spawn(async { panic!("injected panic") }).await;
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        });
        // Reached only if the panic did not abort the process.
        std::process::exit(0);
    }

    #[test]
    fn a_panic_in_a_task_aborts_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "crash_only::tests::crash_only_child", "--nocapture"])
            .env("ECKPT_CRASH_ONLY_CHILD", "1")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{err}");
        assert!(
            err.contains("injected panic") && err.contains("crash-only"),
            "{err}"
        );
    }
}
