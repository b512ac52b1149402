//! The `eckpt._eckpt` extension module: the eckpt client ([`eckpt::Checkpointer`]) for Python.
//!
//! numpy arrays are protected in place: the checkpointer records their data pointer, and
//! `restart()` writes the checkpointed bytes straight into them. That is only sound while the
//! memory stays where it is, so the Python object keeps a reference to every protected array
//! (numpy then also refuses `ndarray.resize`, which would move it) and refuses arrays whose
//! bytes cannot be restored into: non-contiguous (the region would not be one range),
//! read-only, and object arrays (their bytes are pointers, meaningless in another process).
//!
//! GPU arrays are protected in place too: a torch tensor on a CUDA device, or any object with
//! `__cuda_array_interface__` (cupy, numba, …), is protected by its device pointer
//! ([`Checkpointer::protect_device`]); the same rules hold (contiguous, writeable, kept
//! referenced).
//!
//! The pure-Python package `eckpt` (crates/py/python/eckpt) re-exports this module.

mod gpu;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use eckpt::{Checkpointer, Config, FileMode, TrackMode};
use numpy::npyffi::{self, NPY_ARRAY_WRITEABLE};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{IntoPyDict, PyTuple, PyType};

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

/// The modes a protected file can have, as the strings Python code passes.
const MODES: [(&str, FileMode); 3] = [
    ("append", FileMode::Append),
    ("snapshot", FileMode::Snapshot),
    ("input", FileMode::Input),
];

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
/// restart(); calling this object from another thread meanwhile raises RuntimeError.
#[pyclass(module = "eckpt", name = "Checkpointer")]
struct PyCheckpointer {
    /// Declared before `arrays` so it is dropped first: it stops tracking the memory before
    /// the arrays may be freed. A pyclass must be `Sync` and the checkpointer (raw region
    /// pointers) is only `Send`; the mutex is never locked: every use goes through `&mut self`
    /// (PyO3's borrow flag makes that exclusive) and [`Mutex::get_mut`].
    inner: Mutex<Checkpointer>,
    /// The standalone store root (`None` in cluster mode) and rank, for the getters (which
    /// only borrow `&self`).
    dir: Option<PathBuf>,
    rank: u32,
    /// Name → protected array or tensor, kept alive (and unmovable) as long as the
    /// checkpointer.
    arrays: BTreeMap<String, Py<PyAny>>,
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
            config.rank =
                u32::try_from(rank).map_err(|_| invalid(py, format!("rank {rank} is not in 0..2**32")))?;
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
        let inner = Checkpointer::new(config).map_err(|e| to_py(py, e))?;
        Ok(PyCheckpointer {
            inner: Mutex::new(inner),
            dir,
            rank,
            arrays: BTreeMap::new(),
        })
    }

    /// The store root this checkpointer writes to (a pathlib.Path); None in cluster mode,
    /// where each rank writes to its node's store.
    #[getter]
    fn dir(&self) -> Option<PathBuf> {
        self.dir.clone()
    }

    /// This process's rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.rank
    }

    /// Names of the protected arrays, sorted.
    #[getter]
    fn protected(&self) -> Vec<String> {
        self.arrays.keys().cloned().collect()
    }

    /// protect(name, array): checkpoints save ``array``'s bytes under ``name``; restart()
    /// writes them back into the same array, in place. ``array`` is a numpy array, a torch
    /// tensor on a CUDA device, or a GPU array with ``__cuda_array_interface__`` (cupy); GPU
    /// arrays are fingerprinted on the GPU and only changed blocks are copied to the host. Any
    /// dtype but object; the array must be C-contiguous, writeable and non-empty, and stays
    /// referenced by this checkpointer.
    fn protect(&mut self, py: Python<'_>, name: &str, array: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.arrays.contains_key(name) {
            return Err(invalid(
                py,
                format!("an array named {name:?} is already protected"),
            ));
        }
        if let Some((ptr, len)) = gpu::device_range(py, name, array)? {
            // SAFETY: `device_range` checked that the object's `len` bytes at `ptr` are one
            // contiguous, writeable range of device memory; the reference stored in
            // `self.arrays` keeps them allocated until `self.inner` is dropped, which happens
            // first.
            unsafe { self.checkpointer().protect_device(name, ptr, len) }.map_err(|e| to_py(py, e))?;
            self.arrays.insert(name.to_string(), array.clone().unbind());
            return Ok(());
        }
        let array = array.cast::<PyUntypedArray>().map_err(|_| {
            PyTypeError::new_err(format!(
                "protect({name:?}): expected a numpy.ndarray, a CUDA torch.Tensor or an object with \
                 __cuda_array_interface__, got {}",
                array.get_type()
            ))
        })?;
        let dtype = array.dtype();
        if dtype.has_object() {
            return Err(PyTypeError::new_err(format!(
                "protect({name:?}): dtype {dtype} holds Python objects, whose bytes are pointers \
                 that a restarted process cannot use"
            )));
        }
        if !array.is_c_contiguous() {
            return Err(invalid(
                py,
                format!(
                    "protect({name:?}): the array is not C-contiguous; protect a contiguous array \
                     (numpy.ascontiguousarray makes a copy, which is then the one to keep using)"
                ),
            ));
        }
        // SAFETY: `array` is a live ndarray and the GIL is held.
        let fields = unsafe { &*npyffi::_PyArray_GET_ITEM_DATA(array.as_array_ptr()) };
        if fields.flags & NPY_ARRAY_WRITEABLE == 0 {
            return Err(invalid(
                py,
                format!("protect({name:?}): the array is read-only; restart() could not fill it"),
            ));
        }
        let len = array.len() * dtype.itemsize();
        // SAFETY: a C-contiguous array's `len` bytes start at `data`; the reference stored in
        // `self.arrays` keeps them allocated and in place (numpy will not resize an array with
        // other references) until `self.inner` is dropped, which happens first.
        unsafe { self.checkpointer().protect(name, fields.data.cast(), len) }.map_err(|e| to_py(py, e))?;
        self.arrays
            .insert(name.to_string(), array.clone().into_any().unbind());
        Ok(())
    }

    /// protect_file(path, mode): ``eckpt.APPEND`` (restart cuts the file back to its
    /// checkpointed length), ``eckpt.SNAPSHOT`` (its content is saved and restored) or
    /// ``eckpt.INPUT`` (restart refuses if it changed); the strings "append", "snapshot",
    /// "input" are the same constants.
    fn protect_file(&mut self, py: Python<'_>, path: PathBuf, mode: &str) -> PyResult<()> {
        let mode = MODES
            .iter()
            .find(|(text, _)| text.eq_ignore_ascii_case(mode))
            .map(|&(_, m)| m)
            .ok_or_else(|| {
                invalid(
                    py,
                    format!("file mode {mode:?} (expected eckpt.APPEND, eckpt.SNAPSHOT or eckpt.INPUT)"),
                )
            })?;
        self.checkpointer()
            .protect_file(path, mode)
            .map_err(|e| to_py(py, e))
    }

    /// protect_dir(path): at restart, files created in ``path`` after the checkpoint are moved
    /// aside into ``path/.eckpt-rollback/`` (never deleted).
    fn protect_dir(&mut self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.checkpointer().protect_dir(path).map_err(|e| to_py(py, e))
    }

    /// checkpoint() -> int: saves a new epoch (what changed since the previous one) and returns
    /// its number. The GIL is released while it copies.
    fn checkpoint(&mut self, py: Python<'_>) -> PyResult<u64> {
        let inner = self.checkpointer();
        py.detach(|| inner.checkpoint()).map_err(|e| to_py(py, e))
    }

    /// snapshot() -> int | None: call once per step; checkpoints when the interval
    /// (``interval=``, ``ECKPT_INTERVAL``: "30s", or "auto" with ``mtbf``) has elapsed and
    /// returns the epoch, else None. Every rank of a cluster job decides the same at the same
    /// call. The GIL is released while it checkpoints.
    fn snapshot(&mut self, py: Python<'_>) -> PyResult<Option<u64>> {
        let inner = self.checkpointer();
        py.detach(|| inner.snapshot()).map_err(|e| to_py(py, e))
    }

    /// restart() -> int | None: restores the latest epoch into the protected arrays (in place)
    /// and files, and returns its number; None when there is no checkpoint (a fresh start).
    /// When the checkpoint does not fit what is protected now (an array's size, a changed input
    /// file), raises eckpt.Error before changing anything. The GIL is released meanwhile.
    fn restart(&mut self, py: Python<'_>) -> PyResult<Option<u64>> {
        let inner = self.checkpointer();
        py.detach(|| inner.restart()).map_err(|e| to_py(py, e))
    }

    /// wait() -> int | None: waits until the last checkpoint is decided and returns its
    /// epoch (None if none was taken). In cluster mode an epoch commits once every rank is in
    /// and the parity is durable; an aborted epoch raises eckpt.Error.
    fn wait(&mut self, py: Python<'_>) -> PyResult<Option<u64>> {
        let ck = self.checkpointer();
        py.detach(move || ck.wait()).map_err(|e| to_py(py, e))
    }

    /// latest_epoch() -> int | None: the newest committed epoch of this rank.
    fn latest_epoch(&mut self, py: Python<'_>) -> PyResult<Option<u64>> {
        self.checkpointer().latest_epoch().map_err(|e| to_py(py, e))
    }

    fn __repr__(&self) -> String {
        format!(
            "eckpt.Checkpointer(dir={}, rank={}, arrays={:?})",
            self.dir.as_ref().map_or("None".to_string(), |d| format!("{d:?}")),
            self.rank,
            self.protected()
        )
    }
}

impl PyCheckpointer {
    /// The checkpointer, through the exclusive borrow (no locking; see `inner`).
    fn checkpointer(&mut self) -> &mut Checkpointer {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymodule]
fn _eckpt(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyCheckpointer>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InvalidArgument", invalid_argument_type(py)?)?;
    for (text, _) in MODES {
        m.add(text.to_ascii_uppercase().as_str(), text)?;
    }
    Ok(())
}
