"""GPU arrays as the binding receives them, on a machine without a GPU: objects with
``__cuda_array_interface__`` are recognised and checked like numpy arrays (contiguous,
writeable, non-empty), and one that passes the checks reaches the device layer, which says
that there is no CUDA driver. The GPU path itself is checked by scripts/gpu-check.sh, on a
machine with a GPU, with torch tensors and cupy arrays."""

import ctypes

import pytest

import eckpt

ECKPT_EDEVICE = -10


def cuda_driver_present():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


class FakeGpuArray:
    """What cupy and numba expose, without a GPU behind it."""

    def __init__(self, shape=(4, 8), typestr="<f4", strides=None, readonly=False, ptr=0x7F0000000000):
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, readonly),
            "strides": strides,
            "stream": None,
        }


@pytest.mark.skipif(cuda_driver_present(), reason="this machine has a CUDA driver (scripts/gpu-check.sh)")
def test_a_gpu_array_without_a_driver_is_refused_with_the_device_code(store):
    ck = eckpt.Checkpointer(dir=store)
    with pytest.raises(eckpt.Error, match="no CUDA device: .*libcuda.so.1") as failure:
        ck.protect("w", FakeGpuArray())
    assert failure.value.code == ECKPT_EDEVICE
    assert ck.protected == []


@pytest.mark.parametrize(
    "array, message",
    [
        (FakeGpuArray(readonly=True), "read-only"),
        (FakeGpuArray(strides=(4, 16)), "not C-contiguous"),
        (FakeGpuArray(shape=(0, 8)), "empty"),
    ],
    ids=["read-only", "strided", "empty"],
)
def test_gpu_arrays_that_cannot_be_restored_into_are_refused(store, array, message):
    ck = eckpt.Checkpointer(dir=store)
    with pytest.raises(eckpt.InvalidArgument, match=message):
        ck.protect("w", array)
    assert ck.protected == []


def test_contiguous_strides_given_explicitly_are_accepted_as_contiguous(store):
    # (4, 8) float32 in C order: strides (32, 4). The check passes, so the refusal (without a
    # driver) or the acceptance (with one, at a bogus pointer: refused as not CUDA memory) comes
    # from the device layer.
    ck = eckpt.Checkpointer(dir=store)
    with pytest.raises(eckpt.Error) as failure:
        ck.protect("w", FakeGpuArray(strides=(32, 4)))
    assert failure.value.code == ECKPT_EDEVICE


def test_other_objects_are_a_type_error(store):
    ck = eckpt.Checkpointer(dir=store)
    with pytest.raises(TypeError, match="numpy.ndarray, a CUDA torch.Tensor"):
        ck.protect("w", [1, 2, 3])
