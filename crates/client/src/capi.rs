//! The C ABI (`libeckpt.so`, `libeckpt.a`, declared in `include/eckpt.h`): one checkpointer
//! per process behind a mutex. Every function returns 0 or a positive result on success and
//! a negative `ECKPT_E*` code on failure; `eckpt_strerror` names the code and
//! `eckpt_last_error` gives the full message of this thread's last failure.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use crate::{Checkpointer, Config, Error, FileMode};

/// `eckpt_protect_file` mode: the file is only appended to; restart cuts it back.
pub const ECKPT_FILE_APPEND: c_int = 1;
/// `eckpt_protect_file` mode: the file's content is checkpointed and restored.
pub const ECKPT_FILE_SNAPSHOT: c_int = 2;
/// `eckpt_protect_file` mode: the file is only read; restart checks it is unchanged.
pub const ECKPT_FILE_INPUT: c_int = 3;

/// Success.
pub const ECKPT_OK: c_int = 0;
/// Invalid argument or configuration.
pub const ECKPT_EINVAL: c_int = -1;
/// Call out of order (not initialised, initialised twice).
pub const ECKPT_ESTATE: c_int = -2;
/// I/O error in the store or on a protected file.
pub const ECKPT_EIO: c_int = -3;
/// Stored data failed its checksum or does not parse, in this node's store or reached through
/// the cluster (never restored as wrong bytes).
pub const ECKPT_ECORRUPT: c_int = -4;
/// The checkpoint does not fit what is protected now (sizes, changed input files).
pub const ECKPT_EMISMATCH: c_int = -5;
/// Dirty tracking failed (memory registration, kernel tracking).
pub const ECKPT_ECAPTURE: c_int = -6;
/// Internal error (a bug: please report it with `eckpt_last_error()`).
pub const ECKPT_EINTERNAL: c_int = -7;
/// The cluster could not be reached, refused the request, or aborted the epoch.
pub const ECKPT_ECLUSTER: c_int = -8;
/// This process is not (or no longer) the job's writer: a rank of an attempt that a newer
/// one replaced, or a rank started by hand while `eckpt run` holds the job. A rank that
/// `eckpt run` started is terminated instead of getting this code (see `eckpt_checkpoint`).
pub const ECKPT_EFENCED: c_int = -9;
/// The device (GPU) memory could not be protected, scanned, copied or restored: no CUDA
/// driver on this machine, a pointer that is not device memory, or a driver failure.
pub const ECKPT_EDEVICE: c_int = -10;

static CHECKPOINTER: Mutex<Option<Checkpointer>> = Mutex::new(None);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `f` on the process's checkpointer, turning errors and panics into codes.
fn with_checkpointer(f: impl FnOnce(&mut Checkpointer) -> Result<c_int, Error>) -> c_int {
    guarded(|| {
        let mut guard = CHECKPOINTER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ck = guard
            .as_mut()
            .ok_or_else(|| Error::State("eckpt_init has not been called".into()))?;
        f(ck)
    })
}

/// Runs `f`, recording the message of an error or panic for `eckpt_last_error`.
fn guarded(f: impl FnOnce() -> Result<c_int, Error>) -> c_int {
    let (code, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => return code,
        Ok(Err(e)) => (e.code(), e.to_string()),
        Err(_) => (ECKPT_EINTERNAL, "internal error (panic)".to_string()),
    };
    LAST_ERROR.with(|last| *last.borrow_mut() = CString::new(message.replace('\0', " ")).unwrap_or_default());
    code
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `s` must be null or a NUL-terminated string.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, Error> {
    if s.is_null() {
        return Err(Error::Invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| Error::Invalid(format!("{what} is not UTF-8")))
}

/// Initialises eckpt for this process. `config` is NULL (use `ECKPT_DIR`, `ECKPT_RANK`, …
/// from the environment) or `"key=value;…"` overriding them (`dir`, `rank`, `track`,
/// `block_size`, `keep`, `max_chain`). Returns 0 or a negative error.
///
/// Without `ECKPT_DIR` or `dir`, the store is per user and per batch job, so that no job
/// resumes another's state: `/dev/shm/eckpt-<uid>/job-<id>` (or under
/// `~/.local/state/eckpt/` without a tmpfs), the id from `SLURM_JOB_ID`, `PBS_JOBID` or
/// `LSB_JOBID`, which stay the same when the job is relaunched in its allocation. With no
/// job id there is no safe default and this fails with `ECKPT_EINVAL`. The store creates its
/// directories owner-only (0700).
///
/// # Safety
/// `config` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eckpt_init(config: *const c_char) -> c_int {
    guarded(|| {
        let config = if config.is_null() {
            Config::from_env()?
        } else {
            // SAFETY: forwarded from this function's contract.
            Config::from_env_and(unsafe { text(config, "config") }?)?
        };
        let mut guard = CHECKPOINTER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if guard.is_some() {
            return Err(Error::State(
                "eckpt_init called twice without eckpt_finalize".into(),
            ));
        }
        *guard = Some(Checkpointer::new(config)?);
        Ok(ECKPT_OK)
    })
}

/// Protects `len` bytes at `ptr` as region `id`. Restart fills them in place. Page-aligned
/// memory (posix_memalign, mmap) is tracked by the kernel: only written pages are saved.
///
/// # Safety
/// The memory must stay valid until `eckpt_finalize`.
#[no_mangle]
pub unsafe extern "C" fn eckpt_protect(id: c_int, ptr: *mut c_void, len: usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    with_checkpointer(|ck| unsafe { ck.protect(&id.to_string(), ptr.cast(), len) }.map(|_| ECKPT_OK))
}

/// Protects `len` bytes of GPU memory at `devptr` (a CUDA device pointer, as `cudaMalloc`
/// returns) as region `id`. Checkpoints find the changed blocks on the GPU and copy only
/// those to the host; restart fills the memory in place. Fails with `ECKPT_EDEVICE` when this
/// machine has no CUDA driver or `devptr` is not device memory of `len` bytes.
///
/// # Safety
/// The memory must stay allocated until `eckpt_finalize`.
#[no_mangle]
pub unsafe extern "C" fn eckpt_protect_device(id: c_int, devptr: *mut c_void, len: usize) -> c_int {
    // SAFETY: forwarded from this function's contract.
    with_checkpointer(|ck| {
        unsafe { ck.protect_device(&id.to_string(), devptr as u64, len as u64) }.map(|_| ECKPT_OK)
    })
}

/// Protects a file: `ECKPT_FILE_APPEND`, `ECKPT_FILE_SNAPSHOT` or `ECKPT_FILE_INPUT`.
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eckpt_protect_file(path: *const c_char, mode: c_int) -> c_int {
    with_checkpointer(|ck| {
        let mode = match mode {
            ECKPT_FILE_APPEND => FileMode::Append,
            ECKPT_FILE_SNAPSHOT => FileMode::Snapshot,
            ECKPT_FILE_INPUT => FileMode::Input,
            other => return Err(Error::Invalid(format!("file mode {other}"))),
        };
        // SAFETY: forwarded from this function's contract.
        ck.protect_file(unsafe { text(path, "path") }?, mode)
            .map(|_| ECKPT_OK)
    })
}

/// Protects a directory: at restart, files created in it after the checkpoint are moved
/// into its `.eckpt-rollback/` folder (never deleted).
///
/// # Safety
/// `path` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn eckpt_protect_dir(path: *const c_char) -> c_int {
    // SAFETY: forwarded from this function's contract.
    with_checkpointer(|ck| ck.protect_dir(unsafe { text(path, "path") }?).map(|_| ECKPT_OK))
}

/// Checkpoints every protected region and file. Returns the new epoch (≥ 1) or a negative
/// error; on error the previous epoch stays intact.
#[no_mangle]
pub extern "C" fn eckpt_checkpoint() -> c_int {
    with_checkpointer(|ck| {
        let epoch = ck.checkpoint()?;
        c_int::try_from(epoch).map_err(|_| Error::State(format!("epoch {epoch} does not fit a C int")))
    })
}

/// Call once per step: checkpoints when the interval (`ECKPT_INTERVAL`, `interval=` in
/// `eckpt_init`: `30s`, or `auto` with `ECKPT_MTBF`) has elapsed. Returns the new epoch (≥ 1)
/// when it checkpointed, 0 when not, or a negative error. Every rank of a cluster job takes
/// the same decision at the same call, so call it the same number of times on every rank.
#[no_mangle]
pub extern "C" fn eckpt_snapshot() -> c_int {
    with_checkpointer(|ck| {
        let epoch = ck.snapshot()?.unwrap_or(0);
        c_int::try_from(epoch).map_err(|_| Error::State(format!("epoch {epoch} does not fit a C int")))
    })
}

/// Restores the latest checkpoint into the protected regions and files. Returns the epoch
/// restored, 0 when there is nothing to restore, or a negative error. A checkpoint that does
/// not fit (`ECKPT_EMISMATCH`) is refused before anything is changed; stored data failing its
/// checksum (`ECKPT_ECORRUPT`) is never copied, but regions read before it was found are
/// already restored.
#[no_mangle]
pub extern "C" fn eckpt_restart() -> c_int {
    with_checkpointer(|ck| match ck.restart()? {
        None => Ok(0),
        Some(epoch) => {
            c_int::try_from(epoch).map_err(|_| Error::State(format!("epoch {epoch} does not fit a C int")))
        }
    })
}

/// Waits until the last checkpoint is committed (cluster mode: once every rank is in and the
/// parity is durable; standalone: at once). Returns that epoch (0 if none was taken), or
/// `ECKPT_ECLUSTER` if the cluster aborted it.
#[no_mangle]
pub extern "C" fn eckpt_wait() -> c_int {
    with_checkpointer(|ck| {
        let epoch = ck.wait()?.unwrap_or(0);
        c_int::try_from(epoch).map_err(|_| Error::State(format!("epoch {epoch} does not fit a C int")))
    })
}

/// Releases eckpt's resources; the process may call `eckpt_init` again afterwards.
#[no_mangle]
pub extern "C" fn eckpt_finalize() -> c_int {
    guarded(|| {
        let mut guard = CHECKPOINTER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard
            .take()
            .ok_or_else(|| Error::State("eckpt_finalize without eckpt_init".into()))?;
        Ok(ECKPT_OK)
    })
}

/// A static description of an error code.
#[no_mangle]
pub extern "C" fn eckpt_strerror(code: c_int) -> *const c_char {
    let text: &'static CStr = match code {
        c if c >= 0 => c"success",
        ECKPT_EINVAL => c"invalid argument",
        ECKPT_ESTATE => c"call out of order",
        ECKPT_EIO => c"I/O error",
        ECKPT_ECORRUPT => c"checkpoint data corrupt (checksum mismatch)",
        ECKPT_EMISMATCH => c"checkpoint does not match what is protected",
        ECKPT_ECAPTURE => c"dirty tracking failed",
        ECKPT_EINTERNAL => c"internal error",
        ECKPT_ECLUSTER => c"cluster unreachable, request refused, or epoch aborted",
        ECKPT_EFENCED => c"not the job's writer (superseded attempt or job run elsewhere)",
        ECKPT_EDEVICE => c"device (GPU) memory unusable, or no GPU driver",
        _ => c"unknown error",
    };
    text.as_ptr()
}

/// The full message of this thread's last failed call ("" if none); valid until the next
/// failing call on this thread.
#[no_mangle]
pub extern "C" fn eckpt_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> String {
        // SAFETY: `eckpt_last_error` returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(eckpt_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn an_error_returns_its_kinds_code_and_keeps_the_message() {
        let code = guarded(|| {
            Err(eckpt_cluster_api::ClusterError::Corrupt("chunk 9 fails its crc32c".into()).into())
        });
        assert_eq!(code, ECKPT_ECORRUPT);
        assert_eq!(last_error(), "cluster: corrupt: chunk 9 fails its crc32c");
    }

    /// A crashed thread is a bug in eckpt, not a bad argument: the caller gets
    /// `ECKPT_EINTERNAL`, and the process goes on.
    #[test]
    fn a_panic_is_an_internal_error() {
        assert_eq!(guarded(|| panic!("worker thread crashed")), ECKPT_EINTERNAL);
        assert_eq!(last_error(), "internal error (panic)");
    }
}
