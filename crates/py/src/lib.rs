//! The `eckpt._eckpt` extension module: the eckpt client ([`eckpt::Checkpointer`]) for Python.
//!
//! numpy arrays are protected in place: the checkpointer records their data pointer, and
//! `restart()` writes the checkpointed bytes straight into them. That is only sound while the
//! memory stays where it is, so the Python object keeps a reference to every protected array
//! (numpy then refuses `ndarray.resize`, which would move it, unless called with
//! `refcheck=False`: checkpoint(), snapshot() and restart() check that every array still has
//! the pointer and length it had at protect, and refuse otherwise) and refuses arrays whose
//! bytes cannot be restored into: non-contiguous (the region would not be one range),
//! read-only, and object arrays (their bytes are pointers, meaningless in another process).
//! Each array's dtype and shape are recorded with every epoch (its layout, `<f4[4,4]`), so a
//! restart into an array of another dtype or shape is refused rather than reinterpreting bytes.
//!
//! GPU arrays are protected in place too: a torch tensor on a CUDA device, or any object with
//! `__cuda_array_interface__` (cupy, numba, …), is protected by its device pointer
//! ([`Checkpointer::protect_device`]); the same rules hold (contiguous, writeable, kept
//! referenced).
//!
//! Every method is safe to call from several Python threads (the calls take turns) and never
//! lets a Rust panic through: a bug in eckpt raises `eckpt.Error`, which `except Exception`
//! catches, where PyO3 would raise `PanicException`, which it does not.
//!
//! The pure-Python package `eckpt` (crates/py/python/eckpt) re-exports this module.

mod gpu;
mod mirror;

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use eckpt::{Checkpointer, Config, FileMode, TrackMode};
use numpy::npyffi::{self, NPY_ARRAY_WRITEABLE};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, PyOnceLock};
use pyo3::types::{IntoPyDict, PyBytes, PyDict, PyTuple, PyType};

create_exception!(
    eckpt,
    Error,
    PyRuntimeError,
    "A checkpoint or restart failed. The message is the eckpt client's own; `code` is the \
     negative ECKPT_E* code of the C API (eckpt.h)."
);

/// The C API's code for a bad argument (`ECKPT_EINVAL`): what [`invalid`] errors carry.
const EINVAL: i32 = eckpt::capi::ECKPT_EINVAL;

/// `eckpt.InvalidArgument`: it derives from both `eckpt.Error` and `ValueError`, so callers can
/// catch either; `create_exception!` takes only one base, so it is made by calling `type()`.
static INVALID_ARGUMENT: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// The `eckpt.InvalidArgument` class, made on first use (module import).
fn invalid_argument_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    let class = INVALID_ARGUMENT.get_or_try_init(py, || {
        let bases = PyTuple::new(py, [py.get_type::<Error>(), py.get_type::<PyValueError>()])?;
        let namespace = [
            ("__module__", "eckpt"),
            (
                "__doc__",
                "A bad argument: both an eckpt.Error (code ECKPT_EINVAL) and a ValueError.",
            ),
        ]
        .into_py_dict(py)?;
        let class = py
            .get_type::<PyType>()
            .call1(("InvalidArgument", bases, namespace))?;
        Ok::<_, PyErr>(class.cast_into::<PyType>()?.unbind())
    })?;
    Ok(class.bind(py))
}

/// `eckpt.InvalidArgument` with `message` and the `EINVAL` code.
fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    match invalid_argument_type(py) {
        Ok(class) => with_code(PyErr::from_type(class.clone(), message.into()), py, EINVAL),
        Err(e) => e,
    }
}

/// Sets the exception's `code` attribute to the C API's error code.
fn with_code(err: PyErr, py: Python<'_>, code: i32) -> PyErr {
    if let Err(e) = err.value(py).setattr("code", code) {
        return e;
    }
    err
}

/// A client error as a Python exception: `eckpt.InvalidArgument` for bad arguments, else
/// `eckpt.Error`; the message is the client error's Display.
fn to_py(py: Python<'_>, e: eckpt::Error) -> PyErr {
    let code = e.code();
    if code == EINVAL {
        return invalid(py, e.to_string());
    }
    with_code(Error::new_err(e.to_string()), py, code)
}

/// Runs a method's `body`, turning a panic into `eckpt.Error` with the `ECKPT_EINTERNAL` code.
///
/// PyO3 would raise `pyo3_runtime.PanicException`, which derives from `BaseException`: the
/// `except Exception` of a program that handles checkpoint errors would not catch it, and a bug
/// in eckpt would end the job. Every method's whole body runs in here, `py.detach` closures
/// included (`detach` takes the GIL back as the panic unwinds out of it). The state the panic
/// interrupted stays usable: [`PyCheckpointer::state`] ignores the lock's poison.
fn guarded<T>(py: Python<'_>, body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    // Unwind safety: what a panic can leave half-updated is the state behind the mutex, which
    // later calls use as they would after a checkpoint that returned an error.
    catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|payload| Err(to_py(py, eckpt::Error::from_panic(payload.as_ref()))))
}

/// The modes a protected file can have, as the strings Python code passes.
const MODES: [(&str, FileMode); 3] = [
    ("append", FileMode::Append),
    ("snapshot", FileMode::Snapshot),
    ("input", FileMode::Input),
];

/// The file mode named by `text` (case-insensitive).
fn file_mode(text: &str) -> Result<FileMode, eckpt::Error> {
    MODES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(text))
        .map(|&(_, mode)| mode)
        .ok_or_else(|| {
            eckpt::Error::Invalid(format!(
                "file mode {text:?} (expected eckpt.APPEND, eckpt.SNAPSHOT or eckpt.INPUT)"
            ))
        })
}

/// One rank's protected arrays, files and directories, and its checkpoints.
///
/// ``Checkpointer(dir=None, rank=None, *, track=None, block_size=None, cluster=None,
/// world=None)``: ``dir`` is the node-local store root and ``rank`` this process's rank;
/// without ``dir`` or ``ECKPT_DIR`` the store is one per user and per batch job
/// (``/dev/shm/eckpt-<uid>/job-<id>``, the id from ``SLURM_JOB_ID``, ``PBS_JOBID`` or
/// ``LSB_JOBID``), and ValueError without a job id. What is not given comes from ``ECKPT_DIR``, ``ECKPT_RANK`` (or the MPI launcher's rank),
/// ``ECKPT_TRACK``, ``ECKPT_BLOCK_SIZE``, ``ECKPT_KEEP``, ``ECKPT_MAX_CHAIN``,
/// ``ECKPT_CLUSTER`` and ``ECKPT_WORLD``. ``track`` is ``"auto"``, ``"uffd"`` or ``"hash"``
/// (dirty-block detection); ``block_size`` the hashing block size. With ``cluster`` (the
/// directory of a running ``eckpt up``) and ``world`` (ranks in the job), epochs go to the
/// rank's node in that cluster and are erasure-coded across nodes; ``wait()`` returns when
/// the last one is committed. With ``background=True`` (``ECKPT_BACKGROUND=1``), checkpoint()
/// returns once GPU arrays are staged in host memory, and the epoch is written while the job
/// computes; the next call, wait() or restart() waits for it.
///
/// checkpoint() and restart() release the GIL: other threads run meanwhile, but must not
/// write protected arrays during checkpoint() (the copy could tear) nor use them during
/// restart(). Calls from several threads on this object take turns: a call waits, with the
/// GIL released, until the one in progress returns.
// Frozen: PyO3 keeps no borrow flag, whose exclusive `&mut self` borrows made a second thread's
// call fail with "Already borrowed" while the first had released the GIL; the mutable state
// is behind `state`'s lock instead.
#[pyclass(module = "eckpt", name = "Checkpointer", frozen)]
struct PyCheckpointer {
    /// Locked with [`PyCheckpointer::state`]. A pyclass must be `Sync`, and the checkpointer
    /// (raw region pointers) is only `Send`: the mutex makes it both.
    state: Mutex<State>,
    /// The standalone store root (`None` in cluster mode) and rank, for the getters.
    dir: Option<PathBuf>,
    rank: u32,
}

/// What a Python Checkpointer changes, under one lock.
struct State {
    /// Declared before `arrays` so it is dropped first: it stops tracking the memory before
    /// the arrays may be freed.
    checkpointer: Checkpointer,
    /// Name → protected array or tensor, kept alive as long as the checkpointer.
    arrays: BTreeMap<String, Protected>,
}

/// A protected array or tensor, and for a numpy array where its bytes were when protected.
struct Protected {
    /// The reference that keeps the memory allocated.
    object: Py<PyAny>,
    /// A numpy array's data pointer and length in bytes at protect, which the checkpointer
    /// reads and writes: checked before each use (see [`State::check_arrays`]). `None` for GPU
    /// memory, which is not checked.
    host: Option<(usize, usize)>,
}

#[pymethods]
impl PyCheckpointer {
    #[new]
    // The keywords are the Python interface (`Checkpointer(dir, rank, *, track=…, …)`): one
    // parameter each is what PyO3 turns into them.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (dir=None, rank=None, *, track=None, block_size=None, cluster=None, world=None, interval=None, mtbf=None, background=None))]
    fn new(
        py: Python<'_>,
        dir: Option<PathBuf>,
        rank: Option<i64>,
        track: Option<&str>,
        block_size: Option<i64>,
        cluster: Option<PathBuf>,
        world: Option<i64>,
        interval: Option<&str>,
        mtbf: Option<&str>,
        background: Option<bool>,
    ) -> PyResult<Self> {
        guarded(py, || {
            // Keyword settings go through the same parser as `eckpt_init`'s string.
            let mut text = String::new();
            for (key, value) in [("interval", interval), ("mtbf", mtbf)] {
                if let Some(value) = value {
                    text.push_str(&format!("{key}={value};"));
                }
            }
            let mut config = Config::from_env_and(&text).map_err(|e| to_py(py, e))?;
            if let Some(dir) = dir {
                config.dir = Some(dir);
            }
            if let Some(background) = background {
                config.background = background;
            }
            if let Some(cluster) = cluster {
                config.cluster = Some(cluster);
            }
            if let Some(world) = world {
                config.world = Some(
                    u32::try_from(world)
                        .ok()
                        .filter(|&w| w > 0)
                        .ok_or_else(|| invalid(py, format!("world {world} is not in 1..2**32")))?,
                );
            }
            if let Some(rank) = rank {
                config.rank = u32::try_from(rank)
                    .map_err(|_| invalid(py, format!("rank {rank} is not in 0..2**32")))?;
            }
            if let Some(track) = track {
                config.track = match track {
                    "auto" => TrackMode::Auto,
                    "uffd" => TrackMode::Uffd,
                    "hash" => TrackMode::Hash,
                    _ => {
                        return Err(invalid(
                            py,
                            format!("track {track:?} (expected 'auto', 'uffd' or 'hash')"),
                        ))
                    }
                };
            }
            if let Some(size) = block_size {
                config.hash_block_size = usize::try_from(size)
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| invalid(py, format!("block_size {size} is not positive")))?;
            }
            let dir = match config.cluster {
                Some(_) => None,
                None => Some(config.store_root().map_err(|e| to_py(py, e))?),
            };
            let rank = config.rank;
            let state = State {
                checkpointer: Checkpointer::new(config).map_err(|e| to_py(py, e))?,
                arrays: BTreeMap::new(),
            };
            Ok(PyCheckpointer {
                state: Mutex::new(state),
                dir,
                rank,
            })
        })
    }

    /// The store root this checkpointer writes to (a pathlib.Path); None in cluster mode,
    /// where each rank writes to its node's store.
    #[getter]
    fn dir(&self, py: Python<'_>) -> PyResult<Option<PathBuf>> {
        guarded(py, || Ok(self.dir.clone()))
    }

    /// This process's rank.
    #[getter]
    fn rank(&self, py: Python<'_>) -> PyResult<u32> {
        guarded(py, || Ok(self.rank))
    }

    /// Names of the protected arrays, sorted.
    #[getter]
    fn protected(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        guarded(py, || Ok(self.state(py).arrays.keys().cloned().collect()))
    }

    /// protect(name, array): checkpoints save ``array``'s bytes under ``name``; restart()
    /// writes them back into the same array, in place. ``array`` is a numpy array, a torch
    /// tensor on a CUDA device, or a GPU array with ``__cuda_array_interface__`` (cupy); GPU
    /// arrays are fingerprinted on the GPU and only changed blocks are copied to the host. Any
    /// dtype but object; the array must be C-contiguous, writeable and non-empty, and stays
    /// referenced by this checkpointer. A numpy array's dtype and shape are saved with it:
    /// restart() refuses an array of another dtype or shape under the same name.
    fn protect(&self, py: Python<'_>, name: &str, array: &Bound<'_, PyAny>) -> PyResult<()> {
        guarded(py, || {
            // The object is inspected before the lock is taken: its attributes may run Python
            // code, which could call this checkpointer again.
            if let Some((ptr, len)) = gpu::device_range(py, name, array)? {
                let mut state = self.state(py);
                state.check_unused(py, name)?;
                // SAFETY: `device_range` checked that the object's `len` bytes at `ptr` are one
                // contiguous, writeable range of device memory; the reference stored in
                // `arrays` keeps them allocated until the checkpointer is dropped, which
                // happens first.
                unsafe { state.checkpointer.protect_device(name, ptr, len) }.map_err(|e| to_py(py, e))?;
                state.arrays.insert(
                    name.to_string(),
                    Protected {
                        object: array.clone().unbind(),
                        host: None,
                    },
                );
                return Ok(());
            }
            let array = array.cast::<PyUntypedArray>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "protect({name:?}): expected a numpy.ndarray, a CUDA torch.Tensor or an object \
                     with __cuda_array_interface__, got {}",
                    array.get_type()
                ))
            })?;
            let dtype = array.dtype();
            if dtype.has_object() {
                return Err(PyTypeError::new_err(format!(
                    "protect({name:?}): dtype {dtype} holds Python objects, whose bytes are \
                     pointers that a restarted process cannot use"
                )));
            }
            let (data, len) = host_range(array).map_err(|unfit| {
                let advice = match unfit {
                    Unfit::NotContiguous => {
                        "protect a contiguous array (numpy.ascontiguousarray makes a copy, which is \
                         then the one to keep using)"
                    }
                    Unfit::ReadOnly => "restart() could not fill it",
                };
                invalid(py, format!("protect({name:?}): the array {unfit}; {advice}"))
            })?;
            let layout = layout(array)?;
            let mut state = self.state(py);
            state.check_unused(py, name)?;
            // SAFETY: a C-contiguous array's `len` bytes start at `data`; the reference stored
            // in `arrays` keeps them allocated until the checkpointer is dropped, which happens
            // first, and `check_arrays` makes sure before each use that they are still there.
            unsafe {
                state
                    .checkpointer
                    .protect_typed(name, data as *mut u8, len, &layout)
            }
            .map_err(|e| to_py(py, e))?;
            state.arrays.insert(
                name.to_string(),
                Protected {
                    object: array.clone().into_any().unbind(),
                    host: Some((data, len)),
                },
            );
            Ok(())
        })
    }

    /// protect_file(path, mode): ``eckpt.APPEND`` (restart cuts the file back to its
    /// checkpointed length), ``eckpt.SNAPSHOT`` (its content is saved and restored) or
    /// ``eckpt.INPUT`` (restart refuses if it changed); the strings "append", "snapshot",
    /// "input" are the same constants.
    fn protect_file(&self, py: Python<'_>, path: PathBuf, mode: &str) -> PyResult<()> {
        self.call(py, None, |ck| ck.protect_file(path, file_mode(mode)?))
    }

    /// protect_dir(path): at restart, files created in ``path`` after the checkpoint are moved
    /// aside into ``path/.eckpt-rollback/`` (never deleted).
    fn protect_dir(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.call(py, None, |ck| ck.protect_dir(path))
    }

    /// checkpoint() -> int: saves a new epoch (what changed since the previous one) and returns
    /// its number. The GIL is released while it copies. Raises eckpt.InvalidArgument, saving
    /// nothing, when a protected numpy array was moved (``resize(..., refcheck=False)``) or
    /// made read-only since protect().
    fn checkpoint(&self, py: Python<'_>) -> PyResult<u64> {
        self.call(py, Some("checkpoint()"), Checkpointer::checkpoint)
    }

    /// snapshot() -> int | None: call once per step; checkpoints when the interval
    /// (``interval=``, ``ECKPT_INTERVAL``: "30s", or "auto" with ``mtbf``) has elapsed and
    /// returns the epoch, else None. Every rank of a cluster job decides the same at the same
    /// call. The GIL is released while it checkpoints. Refuses moved arrays as checkpoint().
    fn snapshot(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.call(py, Some("snapshot()"), Checkpointer::snapshot)
    }

    /// restart() -> int | None: restores the latest epoch into the protected arrays (in place)
    /// and files, and returns its number; None when there is no checkpoint (a fresh start).
    /// When the checkpoint does not fit what is protected now (an array's size, dtype or
    /// shape, a changed input file, an array moved since protect()), raises eckpt.Error before
    /// changing anything. The GIL is released meanwhile.
    fn restart(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.call(py, Some("restart()"), Checkpointer::restart)
    }

    /// wait() -> int | None: waits until the last checkpoint is decided and returns its
    /// epoch (None if none was taken). In cluster mode an epoch commits once every rank is in
    /// and the parity is durable; an aborted epoch raises eckpt.Error.
    fn wait(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.call(py, None, Checkpointer::wait)
    }

    /// save_items(items) -> int: saves ``items`` — (name, bytes-like) pairs: bytes, or a
    /// C-contiguous buffer of bytes such as a numpy uint8 array — as this rank's next epoch,
    /// exactly these items, and returns its number. Only the blocks that changed since the
    /// rank's previous epoch are written. Standalone the epoch is committed on return; in
    /// cluster mode it is reported, and wait() waits until the cluster commits it. The GIL is
    /// released while it writes: no other thread may change the buffers meanwhile. Raises
    /// eckpt.Error on a checkpointer that protects arrays or files.
    fn save_items(&self, py: Python<'_>, items: Vec<(String, Bound<'_, PyAny>)>) -> PyResult<u64> {
        let mut buffers = Vec::with_capacity(items.len());
        for (name, object) in items {
            let buffer = PyBuffer::<u8>::get(&object)
                .map_err(|e| invalid(py, format!("item {name:?}: not a buffer of bytes: {e}")))?;
            if !buffer.is_c_contiguous() {
                return Err(invalid(
                    py,
                    format!("item {name:?}: the buffer is not C-contiguous"),
                ));
            }
            buffers.push((name, buffer));
        }
        // SAFETY: each buffer is held (and its object kept alive) until the call returns; the
        // bytes are only read.
        let views: Vec<(&str, &[u8])> = buffers
            .iter()
            .map(|(name, b)| {
                (name.as_str(), unsafe {
                    std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes())
                })
            })
            .collect();
        self.call(py, None, move |checkpointer| checkpointer.save_items(&views))
    }

    /// read_items(rank, epoch=None, names=None) -> (int, dict[str, bytes]): the items rank
    /// ``rank`` saved at committed ``epoch`` (default: the latest committed one), all of them
    /// or those in ``names``, and the epoch. Standalone they are read from the store, every
    /// block verified; in cluster mode from the node that holds the rank now, or decoded from
    /// its group when that node is gone. Raises eckpt.Error when there is no such epoch.
    #[pyo3(signature = (rank, epoch=None, names=None))]
    fn read_items<'py>(
        &self,
        py: Python<'py>,
        rank: u32,
        epoch: Option<u64>,
        names: Option<Vec<String>>,
    ) -> PyResult<(u64, Bound<'py, PyDict>)> {
        let wanted = move |name: &str| names.as_ref().is_none_or(|names| names.iter().any(|n| n == name));
        let (epoch, items) = self.call(py, None, move |checkpointer| {
            checkpointer.read_items(rank, epoch, &wanted)
        })?;
        let dict = PyDict::new(py);
        for (name, bytes) in items {
            dict.set_item(name, PyBytes::new(py, &bytes))?;
        }
        Ok((epoch, dict))
    }

    /// latest_epoch() -> int | None: the newest committed epoch of this rank.
    fn latest_epoch(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.call(py, None, Checkpointer::latest_epoch)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        guarded(py, || {
            Ok(format!(
                "eckpt.Checkpointer(dir={}, rank={}, arrays={:?})",
                self.dir.as_ref().map_or("None".to_string(), |d| format!("{d:?}")),
                self.rank,
                self.protected(py)?
            ))
        })
    }
}

impl PyCheckpointer {
    /// The state, locked. Waiting for another thread's call to return happens with the GIL
    /// released (`lock_py_attached`), or that call could never take the GIL back to return.
    /// A panic in an earlier call poisons the lock; the state is used anyway (see [`guarded`])
    /// rather than failing every later call.
    fn state(&self, py: Python<'_>) -> MutexGuard<'_, State> {
        self.state
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `call` on the checkpointer, locked, with the GIL released, and its error as a
    /// Python exception. With `arrays_used_by` (the Python call, for the message), `call` reads
    /// or writes the protected arrays, which are first checked to still be where they were.
    fn call<T: Send>(
        &self,
        py: Python<'_>,
        arrays_used_by: Option<&str>,
        call: impl FnOnce(&mut Checkpointer) -> Result<T, eckpt::Error> + Send,
    ) -> PyResult<T> {
        guarded(py, || {
            let mut state = self.state(py);
            if let Some(operation) = arrays_used_by {
                state.check_arrays(py, operation)?;
            }
            let checkpointer = &mut state.checkpointer;
            py.detach(|| call(checkpointer)).map_err(|e| to_py(py, e))
        })
    }
}

impl State {
    /// Refuses a name already given to an array (the client would too, less clearly).
    fn check_unused(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        if self.arrays.contains_key(name) {
            return Err(invalid(
                py,
                format!("an array named {name:?} is already protected"),
            ));
        }
        Ok(())
    }

    /// Refuses, before `operation` touches any memory, a numpy array whose bytes are no longer
    /// the ones protected: `ndarray.resize(..., refcheck=False)` frees them (the checkpoint
    /// would save, the restart overwrite, freed memory), `setflags(write=False)` forbids
    /// writing them.
    fn check_arrays(&self, py: Python<'_>, operation: &str) -> PyResult<()> {
        for (name, protected) in &self.arrays {
            let Some((data, len)) = protected.host else {
                continue;
            };
            let array = protected.object.bind(py).cast::<PyUntypedArray>()?;
            let change = match host_range(array) {
                Ok(now) if now == (data, len) => continue,
                Ok((now_data, now_len)) => format!(
                    "was moved or resized since protect() ({len} bytes at {data:#x} then, \
                     {now_len} bytes at {now_data:#x} now: ndarray.resize(refcheck=False)?)"
                ),
                Err(unfit) => format!("{unfit} now, unlike at protect()"),
            };
            return Err(invalid(
                py,
                format!("{operation}: the array {name:?} {change}; nothing was saved or restored"),
            ));
        }
        Ok(())
    }
}

/// Why restart() could not fill a numpy array in place; displayed as what the array is.
#[derive(Clone, Copy)]
enum Unfit {
    /// Its bytes are not one range.
    NotContiguous,
    /// numpy forbids writing its bytes.
    ReadOnly,
}

impl fmt::Display for Unfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unfit::NotContiguous => "is not C-contiguous",
            Unfit::ReadOnly => "is read-only",
        })
    }
}

/// A numpy array's bytes, `(data pointer, length)`, when restart() can fill them in place.
fn host_range(array: &Bound<'_, PyUntypedArray>) -> Result<(usize, usize), Unfit> {
    if !array.is_c_contiguous() {
        return Err(Unfit::NotContiguous);
    }
    // SAFETY: `array` is a live ndarray and the GIL is held.
    let fields = unsafe { &*npyffi::_PyArray_GET_ITEM_DATA(array.as_array_ptr()) };
    if fields.flags & NPY_ARRAY_WRITEABLE == 0 {
        return Err(Unfit::ReadOnly);
    }
    Ok((fields.data as usize, array.len() * array.dtype().itemsize()))
}

/// What a numpy array's bytes are, for [`Checkpointer::protect_typed`]: the dtype's `str` and
/// the shape, `<f4[4,4]` (`<f8[]` for a 0-d array). Byte order is part of it: `>f4` bytes read
/// as `<f4` are other numbers.
fn layout(array: &Bound<'_, PyUntypedArray>) -> PyResult<String> {
    let dtype: String = array.dtype().getattr("str")?.extract()?;
    let shape: Vec<String> = array.shape().iter().map(usize::to_string).collect();
    Ok(format!("{dtype}[{}]", shape.join(",")))
}

#[pymodule]
fn _eckpt(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyCheckpointer>()?;
    m.add_class::<mirror::PyMirror>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InvalidArgument", invalid_argument_type(py)?)?;
    for (text, _) in MODES {
        m.add(text.to_ascii_uppercase().as_str(), text)?;
    }
    Ok(())
}
