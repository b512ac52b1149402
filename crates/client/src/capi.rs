//! The C ABI (`libeckpt.so`, `libeckpt.a`, declared in `include/eckpt.h`): one checkpointer
//! per process behind a mutex. Every function returns 0 or a positive result on success and
//! a negative `ECKPT_E*` code on failure; `eckpt_strerror` names the code and
//! `eckpt_last_error` gives the full message of this thread's last failure.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{compiler_fence, Ordering};
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
    /// Whether this thread is inside an eckpt call: a second call on the same thread can only
    /// come from a signal handler that interrupted the first, and waiting for the lock the
    /// first holds would never end. Const-initialised, so reading it allocates nothing.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread's last failed call was refused for being made inside another: its
    /// message is [`REENTRANT_CALL`], which needs no allocation (a handler that interrupted
    /// `malloc` must not call it again).
    static LAST_WAS_REENTRANT: Cell<bool> = const { Cell::new(false) };
}

/// The message of a call refused for being made inside another on the same thread.
const REENTRANT_CALL: &CStr = c"an eckpt call was made while this thread was inside another (from a signal handler?): eckpt functions are not async-signal-safe; set a flag in the handler and call eckpt from the program's own loop";

/// Marks this thread inside an eckpt call for as long as it lives (unwinding included).
struct InCall;

impl InCall {
    /// `None` when this thread is already inside a call.
    fn enter() -> Option<InCall> {
        let entered = !IN_CALL.replace(true);
        // The compiler sees no reader of the flag between this store and the one at the
        // call's end, and would drop this one; a signal handler is that reader.
        compiler_fence(Ordering::SeqCst);
        // Not `then_some(InCall)`: that would build the guard either way, and dropping an
        // unused one would clear the flag of the call this one is inside.
        if entered {
            Some(InCall)
        } else {
            None
        }
    }
}

impl Drop for InCall {
    fn drop(&mut self) {
        compiler_fence(Ordering::SeqCst);
        IN_CALL.set(false);
    }
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

/// Runs `f`, recording the message of an error or panic for `eckpt_last_error`. No panic
/// crosses the C boundary: it becomes `ECKPT_EINTERNAL` with its message, and the
/// checkpointer stays usable (its next checkpoint compares everything). A call made while
/// this thread is inside another (from a signal handler) is refused at once, never waited on.
fn guarded(f: impl FnOnce() -> Result<c_int, Error>) -> c_int {
    let Some(in_call) = InCall::enter() else {
        // Nothing that allocates or locks: this may run in a handler that interrupted either.
        LAST_WAS_REENTRANT.set(true);
        return ECKPT_ESTATE;
    };
    let error = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => return code,
        Ok(Err(e)) => e,
        Err(panic) => Error::from_panic(panic.as_ref()),
    };
    let message = CString::new(error.to_string().replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
    LAST_WAS_REENTRANT.set(false);
    drop(in_call);
    error.code()
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
/// The process holds its rank from here to `eckpt_finalize` (or its exit): a second live
/// process initialising the same rank of the same store fails with `ECKPT_ESTATE`, naming
/// the first. A child made by `fork()` must not use its parent's eckpt: every call there
/// fails with `ECKPT_ESTATE`; the child may call `eckpt_init` for a rank of its own.
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
        // A forked child's inherited checkpointer is its parent's: the child starts its own.
        if guard.as_ref().is_some_and(Checkpointer::forked) {
            *guard = None;
        }
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

/// Protects an array of `count` elements of `elem_size` bytes at `ptr` as region `id`, as
/// `eckpt_protect(id, ptr, elem_size * count)` would, for language bindings that hold arrays
/// by descriptor and can tell whether one is contiguous (the Fortran module's typed
/// `eckpt_protect(id, x)`). Fails with `ECKPT_EINVAL` and protects nothing when:
/// - `contiguous` is 0: a strided section such as Fortran's `a(1::2)` or `m(1,:)`, whose
///   elements are not the bytes at `ptr` (and a contiguous copy of it would be restored into
///   the copy, not into the array);
/// - `elem_size * count` exceeds `PTRDIFF_MAX`, as when a binding reports an unknown size
///   (Fortran's `size` of an assumed-size array `b(*)` is -1, which arrives as `SIZE_MAX`).
///
/// # Safety
/// When `contiguous` is not 0, as `eckpt_protect` for `elem_size * count` bytes at `ptr`.
#[no_mangle]
pub unsafe extern "C" fn eckpt_protect_array(
    id: c_int,
    ptr: *mut c_void,
    elem_size: usize,
    count: usize,
    contiguous: c_int,
) -> c_int {
    with_checkpointer(|ck| {
        let name = id.to_string();
        if contiguous == 0 {
            return Err(Error::Invalid(format!(
                "region {name:?}: the array is not contiguous (an array section such as a(1::2) or \
                 m(1,:)?): protect the whole array"
            )));
        }
        let len = elem_size
            .checked_mul(count)
            .filter(|&len| isize::try_from(len).is_ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "region {name:?}: {count} elements of {elem_size} bytes are more than memory holds \
                     (an assumed-size array such as b(*), whose size is unknown?)"
                ))
            })?;
        // SAFETY: forwarded from this function's contract (the array is contiguous).
        unsafe { ck.protect(&name, ptr.cast(), len) }.map(|_| ECKPT_OK)
    })
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
/// error; on error the previous epoch stays intact, and the next checkpoint compares every
/// block instead of trusting the changes tracked since.
///
/// Not async-signal-safe, like every eckpt function: from a signal handler (SIGTERM before
/// a job's time runs out), set a flag and checkpoint from the program's loop. A call made
/// from a handler that interrupted another eckpt call on the same thread returns
/// `ECKPT_ESTATE` at once instead of deadlocking.
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
/// restored, 0 when there is nothing to restore, or a negative error. Everything that can be
/// checked first is, before any memory or file is changed: a checkpoint that does not fit
/// (`ECKPT_EMISMATCH`: other regions, sizes or layouts than protected now, an input file
/// changed, an append file shorter, gone, or replaced by a link, a protected directory gone)
/// or memory no longer mapped writable (`ECKPT_ESTATE`). Stored data failing its checksum
/// (`ECKPT_ECORRUPT`) is never copied, but regions read before it was found are already
/// restored.
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
    if LAST_WAS_REENTRANT.get() {
        return REENTRANT_CALL.as_ptr();
    }
    // Borrowed only while a call records its error, which a signal handler may interrupt.
    LAST_ERROR.with(|last| last.try_borrow().map_or(c"".as_ptr(), |last| last.as_ptr()))
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

    /// A call from a signal handler that interrupted another call on the same thread is
    /// refused at once: the outer call holds the lock it would wait for.
    #[test]
    fn a_call_inside_a_call_on_one_thread_is_refused_not_waited_on() {
        let inner = std::cell::Cell::new(0);
        let outer = guarded(|| {
            inner.set(guarded(|| Ok(7)));
            Ok(1)
        });
        assert_eq!((outer, inner.get()), (1, ECKPT_ESTATE));
        assert!(last_error().contains("signal handler"), "{}", last_error());
        assert_eq!(guarded(|| Ok(2)), 2, "the thread is no longer inside a call");
    }

    /// A crashed thread is a bug in eckpt, not a bad argument: the caller gets
    /// `ECKPT_EINTERNAL`, and the process goes on.
    #[test]
    fn a_panic_is_an_internal_error() {
        assert_eq!(guarded(|| panic!("worker thread crashed")), ECKPT_EINTERNAL);
        assert_eq!(
            last_error(),
            "internal error in eckpt (please report it): panic: worker thread crashed"
        );
    }
}
