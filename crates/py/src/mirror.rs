//! `eckpt._eckpt.Mirror`: copies of tensors kept current by copying only the blocks written
//! since the previous refresh — the staging area of `eckpt.torch`'s `async_save`, whose stall
//! is then the copy of what changed instead of the whole state. A CPU tensor is mirrored by
//! [`eckpt::Mirror`] (the kernel tracks the pages written), a GPU tensor by
//! [`eckpt::DeviceMirror`] (its blocks fingerprinted on the GPU, the changed ones copied over
//! the bus straight into the copy).
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

use crate::{gpu, guarded, invalid, to_py};

/// The blocks in which a GPU source is fingerprinted and copied: small enough that a sparse
/// change copies little more than itself, large enough that the fingerprints and change flags
/// (9 bytes a block) stay small; the size the client's device regions use by default.
const DEVICE_BLOCK: u64 = 64 << 10;

/// Which mirror keeps a pair, and its id there.
#[derive(Clone, Copy)]
enum Kept {
    Host(u32),
    Device(u32),
}

/// A mirrored pair: the tensors (kept alive), where the source was when added, and its mirror.
struct Pair {
    source: Py<PyAny>,
    _copy: Py<PyAny>,
    address: u64,
    len: u64,
    kept: Kept,
}

struct State {
    host: eckpt::Mirror,
    /// Made at the first GPU source (it opens the CUDA driver).
    device: Option<eckpt::DeviceMirror>,
    pairs: BTreeMap<u32, Pair>,
    next: u32,
}

/// Copies of CPU and GPU tensors, each kept equal to its source as of the last `refresh()`.
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

/// A source tensor's data pointer and size in bytes, and whether it is on a GPU.
fn source_range(py: Python<'_>, tensor: &Bound<'_, PyAny>) -> PyResult<(u64, u64, bool)> {
    let device: String = tensor.getattr("device")?.getattr("type")?.extract()?;
    if device == "cuda" {
        let (address, len) = gpu::device_range(py, "Mirror source", tensor)?
            .ok_or_else(|| invalid(py, "Mirror: the source is not a CUDA tensor"))?;
        return Ok((address, len, true));
    }
    let (address, len) = cpu_range(py, "source", tensor)?;
    Ok((address, len, false))
}

#[pymethods]
impl PyMirror {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        guarded(py, || {
            let host = eckpt::Mirror::new().map_err(|e| to_py(py, e.into()))?;
            Ok(PyMirror {
                state: Mutex::new(State {
                    host,
                    device: None,
                    pairs: BTreeMap::new(),
                    next: 0,
                }),
            })
        })
    }

    /// Mirrors tensor `source` (contiguous, on the CPU or a CUDA GPU) into CPU tensor `copy`
    /// (contiguous, the same size in bytes; page-locked for a GPU source, so that its copies
    /// run at the bus's speed) and returns the pair's id; the next refresh copies all of it.
    fn add(&self, py: Python<'_>, source: Bound<'_, PyAny>, copy: Bound<'_, PyAny>) -> PyResult<u32> {
        guarded(py, || {
            let (address, len, on_device) = source_range(py, &source)?;
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
            let kept = if on_device {
                if state.device.is_none() {
                    let cuda = eckpt::Cuda::open().map_err(|e| to_py(py, e.into()))?;
                    state.device = Some(eckpt::DeviceMirror::new(cuda, DEVICE_BLOCK));
                }
                let device = state.device.as_mut().expect("made above");
                // SAFETY: the pair keeps both tensors referenced until removed, and refresh
                // checks that the source has not moved before reading it.
                let id = unsafe { device.add(address, copy_address as *mut u8, len) }
                    .map_err(|e| to_py(py, e.into()))?;
                Kept::Device(id)
            } else {
                // SAFETY: as above; a CPU tensor's memory is plain process memory it owns.
                let id = unsafe {
                    state
                        .host
                        .add(address as *const u8, copy_address as *mut u8, len as usize)
                }
                .map_err(|e| to_py(py, e.into()))?;
                Kept::Host(id)
            };
            let id = state.next;
            state.next += 1;
            state.pairs.insert(
                id,
                Pair {
                    source: source.unbind(),
                    _copy: copy.unbind(),
                    address,
                    len,
                    kept,
                },
            );
            Ok(id)
        })
    }

    /// Stops mirroring pair `id` and lets go of its tensors.
    fn remove(&self, py: Python<'_>, id: u32) -> PyResult<()> {
        guarded(py, || {
            let mut state = self.state.lock_py_attached(py).unwrap_or_else(|e| e.into_inner());
            let kept = state
                .pairs
                .get(&id)
                .map(|pair| pair.kept)
                .ok_or_else(|| invalid(py, format!("Mirror: no pair {id}")))?;
            let removed = match kept {
                Kept::Host(inner) => state.host.remove(inner).map_err(eckpt::Error::from),
                Kept::Device(inner) => state
                    .device
                    .as_mut()
                    .expect("a GPU pair's mirror was made when it was added")
                    .remove(inner)
                    .map_err(eckpt::Error::from),
            };
            removed.map_err(|e| to_py(py, e))?;
            state.pairs.remove(&id);
            Ok(())
        })
    }

    /// Copies what was written since the previous refresh into the copies; returns
    /// `{"copied": bytes copied, "mirrored": bytes now current, "kernel_tracked": of those,
    /// bytes of CPU tensors whose writes the kernel tracks, "device_tracked": bytes of GPU
    /// tensors, "copied_by_pair": {pair: bytes copied}}`.
    fn refresh<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guarded(py, || {
            let mut state = self.state.lock_py_attached(py).unwrap_or_else(|e| e.into_inner());
            for (id, pair) in &state.pairs {
                let (address, len, _) = source_range(py, pair.source.bind(py))?;
                if (address, len) != (pair.address, pair.len) {
                    return Err(invalid(
                        py,
                        format!(
                            "Mirror: the source of pair {id} moved ({} bytes at {:#x}, now {len} at {address:#x}); \
                             remove it and add it again",
                            pair.len, pair.address
                        ),
                    ));
                }
            }
            // With the GIL held: no Python thread may move a source while it is read.
            let host = state.host.refresh().map_err(|e| to_py(py, e.into()))?;
            let device = match state.device.as_mut() {
                Some(device) => device.refresh().map_err(|e| to_py(py, e.into()))?,
                None => eckpt::DeviceRefreshed::default(),
            };
            let copied_by_pair = PyDict::new(py);
            for (id, pair) in &state.pairs {
                let copied = match pair.kept {
                    Kept::Host(inner) => host.copied_by_range.get(&inner),
                    Kept::Device(inner) => device.copied_by_pair.get(&inner),
                };
                if let Some(copied) = copied {
                    copied_by_pair.set_item(id, copied)?;
                }
            }
            let out = PyDict::new(py);
            out.set_item("copied", host.copied + device.copied)?;
            out.set_item("mirrored", host.mirrored + device.mirrored)?;
            out.set_item("kernel_tracked", host.kernel_tracked)?;
            out.set_item("device_tracked", device.mirrored)?;
            out.set_item("copied_by_pair", copied_by_pair)?;
            Ok(out)
        })
    }
}
