//! `eckpt._eckpt.Mirror`: copies of CPU tensors kept current by copying only the blocks written
//! since the previous refresh ([`eckpt::Mirror`]): the staging area of `eckpt.torch`'s
//! `async_save`, whose stall is then the copy of what changed instead of the whole state.
//!
//! A mirrored pair holds references to both tensors, so neither is freed while mirrored; a
//! refresh first checks that every source still has the data pointer and size it was added
//! with (`Tensor.set_`, `Storage.resize_` and friends move a tensor's memory) and refuses
//! otherwise, before any byte is read.

use std::collections::BTreeMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::PyDict;

use crate::{guarded, invalid, to_py};

/// A mirrored pair: the tensors (kept alive) and where the source was when added.
struct Pair {
    source: Py<PyAny>,
    _copy: Py<PyAny>,
    address: u64,
    len: u64,
}

struct State {
    mirror: eckpt::Mirror,
    pairs: BTreeMap<u32, Pair>,
}

/// Copies of CPU tensors, each kept equal to its source as of the last `refresh()`.
#[pyclass(name = "Mirror", module = "eckpt._eckpt")]
pub struct PyMirror {
    state: Mutex<State>,
}

/// A contiguous CPU tensor's data pointer and size in bytes; `what` names it in errors.
fn cpu_range(py: Python<'_>, what: &str, tensor: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
    let device: String = tensor.getattr("device")?.getattr("type")?.extract()?;
    if device != "cpu" {
        return Err(invalid(
            py,
            format!("Mirror: the {what} is on {device}, not the CPU"),
        ));
    }
    if !tensor.call_method0("is_contiguous")?.extract::<bool>()? {
        return Err(invalid(py, format!("Mirror: the {what} is not contiguous")));
    }
    let elements: u64 = tensor.call_method0("numel")?.extract()?;
    let size: u64 = tensor.call_method0("element_size")?.extract()?;
    Ok((tensor.call_method0("data_ptr")?.extract()?, elements * size))
}

#[pymethods]
impl PyMirror {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        guarded(py, || {
            let mirror = eckpt::Mirror::new().map_err(|e| to_py(py, e.into()))?;
            Ok(PyMirror {
                state: Mutex::new(State {
                    mirror,
                    pairs: BTreeMap::new(),
                }),
            })
        })
    }

    /// Mirrors CPU tensor `source` into `copy` (contiguous, the same size in bytes) and
    /// returns the pair's id; the next refresh copies all of it.
    fn add(&self, py: Python<'_>, source: Bound<'_, PyAny>, copy: Bound<'_, PyAny>) -> PyResult<u32> {
        guarded(py, || {
            let (address, len) = cpu_range(py, "source", &source)?;
            let (copy_address, copy_len) = cpu_range(py, "copy", &copy)?;
            if len != copy_len {
                return Err(invalid(
                    py,
                    format!("Mirror: the source has {len} bytes, the copy {copy_len}"),
                ));
            }
            if len == 0 {
                return Err(invalid(py, "Mirror: the source is empty"));
            }
            let mut state = self.state.lock_py_attached(py).unwrap_or_else(|e| e.into_inner());
            // SAFETY: the pair keeps both tensors referenced until removed, and refresh checks
            // that the source has not moved before reading it; a tensor's memory is plain
            // process memory the tensor owns.
            let id = unsafe {
                state
                    .mirror
                    .add(address as *const u8, copy_address as *mut u8, len as usize)
            }
            .map_err(|e| to_py(py, e.into()))?;
            state.pairs.insert(
                id,
                Pair {
                    source: source.unbind(),
                    _copy: copy.unbind(),
                    address,
                    len,
                },
            );
            Ok(id)
        })
    }

    /// Stops mirroring pair `id` and lets go of its tensors.
    fn remove(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        guarded(py, || {
            let mut state = self.state.lock_py_attached(py).unwrap_or_else(|e| e.into_inner());
            state.mirror.remove(id).map_err(|e| to_py(py, e.into()))?;
            state.pairs.remove(&id);
            Ok(())
        })
    }

    /// Copies what was written since the previous refresh into the copies; returns
    /// `{"copied": bytes copied, "mirrored": bytes now current, "kernel_tracked": of those,
    /// bytes whose writes the kernel tracks, "copied_by_pair": {pair: bytes copied}}`.
    fn refresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guarded(py, || {
            let mut state = self.state.lock_py_attached(py).unwrap_or_else(|e| e.into_inner());
            for (id, pair) in &state.pairs {
                let now = cpu_range(py, "source", pair.source.bind(py))?;
                if now != (pair.address, pair.len) {
                    return Err(invalid(
                        py,
                        format!(
                            "Mirror: the source of pair {id} moved ({} bytes at {:#x}, now {} at {:#x}); \
                             remove it and add it again",
                            pair.len, pair.address, now.1, now.0
                        ),
                    ));
                }
            }
            // With the GIL held: no Python thread may move a source while it is read.
            let done = state.mirror.refresh().map_err(|e| to_py(py, e.into()))?;
            let out = PyDict::new(py);
            out.set_item("copied", done.copied)?;
            out.set_item("mirrored", done.mirrored)?;
            out.set_item("kernel_tracked", done.kernel_tracked)?;
            out.set_item("copied_by_pair", done.copied_by_range)?;
            Ok(out)
        })
    }
}
