//! GPU arrays as Python hands them over: the device range of a torch tensor on a CUDA device
//! (its `data_ptr()`; a tensor that requires grad refuses `__cuda_array_interface__`), or of
//! any object with `__cuda_array_interface__` (cupy, numba, …; versions 2 and 3 of the
//! protocol). The checks are the numpy path's: contiguous, writeable, non-empty.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::invalid;

/// `Some((device pointer, bytes))` when `object` is GPU memory, `None` when it is not a GPU
/// array (the caller tries numpy), an error when it is one that cannot be protected.
pub(crate) fn device_range(
    py: Python<'_>,
    name: &str,
    object: &Bound<'_, PyAny>,
) -> PyResult<Option<(u64, u64)>> {
    if is_torch_tensor(object)? {
        return torch_range(py, name, object);
    }
    match object.getattr_opt("__cuda_array_interface__")? {
        Some(interface) => interface_range(py, name, interface.cast::<PyDict>()?).map(Some),
        None => Ok(None),
    }
}

/// Whether `object` is a `torch.Tensor` (without importing torch).
fn is_torch_tensor(object: &Bound<'_, PyAny>) -> PyResult<bool> {
    let class = object.get_type();
    Ok(class.module()?.to_string().starts_with("torch")
        && object.hasattr("data_ptr")?
        && object.hasattr("is_cuda")?)
}

fn torch_range(py: Python<'_>, name: &str, tensor: &Bound<'_, PyAny>) -> PyResult<Option<(u64, u64)>> {
    if !tensor.getattr("is_cuda")?.extract::<bool>()? {
        return Err(PyTypeError::new_err(format!(
            "protect({name:?}): a torch tensor on the CPU; protect tensor.numpy(), which shares its memory"
        )));
    }
    if !tensor.call_method0("is_contiguous")?.extract::<bool>()? {
        return Err(invalid(
            py,
            format!("protect({name:?}): the tensor is not contiguous; protect a contiguous tensor"),
        ));
    }
    let elements: u64 = tensor.call_method0("numel")?.extract()?;
    let size: u64 = tensor.call_method0("element_size")?.extract()?;
    let ptr: u64 = tensor.call_method0("data_ptr")?.extract()?;
    nonempty(py, name, ptr, elements * size).map(Some)
}

fn interface_range(py: Python<'_>, name: &str, interface: &Bound<'_, PyDict>) -> PyResult<(u64, u64)> {
    let field = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        interface.get_item(key)?.ok_or_else(|| {
            PyTypeError::new_err(format!(
                "protect({name:?}): __cuda_array_interface__ has no {key:?}"
            ))
        })
    };
    if interface.get_item("mask")?.is_some_and(|mask| !mask.is_none()) {
        return Err(invalid(
            py,
            format!("protect({name:?}): masked GPU arrays are not supported"),
        ));
    }
    let (ptr, readonly): (u64, bool) = field("data")?.extract()?;
    if readonly {
        return Err(invalid(
            py,
            format!("protect({name:?}): the array is read-only; restart() could not fill it"),
        ));
    }
    let shape: Vec<u64> = field("shape")?.cast::<PyTuple>()?.extract()?;
    let typestr: String = field("typestr")?.extract()?;
    let itemsize: u64 = typestr
        .get(2..)
        .and_then(|digits| digits.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| PyTypeError::new_err(format!("protect({name:?}): unknown typestr {typestr:?}")))?;
    if let Some(strides) = interface.get_item("strides")?.filter(|s| !s.is_none()) {
        let strides: Vec<i64> = strides.extract()?;
        if !is_c_contiguous(&shape, &strides, itemsize) {
            return Err(invalid(
                py,
                format!("protect({name:?}): the array is not C-contiguous; protect a contiguous array"),
            ));
        }
    }
    nonempty(py, name, ptr, shape.iter().product::<u64>() * itemsize)
}

/// Whether `strides` are those of a C-contiguous array of `shape` (dimensions of one element
/// may have any stride).
fn is_c_contiguous(shape: &[u64], strides: &[i64], itemsize: u64) -> bool {
    let mut expected = itemsize as i64;
    for (&extent, &stride) in shape.iter().zip(strides).rev() {
        if extent > 1 && stride != expected {
            return false;
        }
        expected *= extent as i64;
    }
    shape.len() == strides.len()
}

fn nonempty(py: Python<'_>, name: &str, ptr: u64, len: u64) -> PyResult<(u64, u64)> {
    if len == 0 || ptr == 0 {
        return Err(invalid(py, format!("protect({name:?}): the array is empty")));
    }
    Ok((ptr, len))
}
