"""Arguments the binding refuses, and checkpoints that do not fit what is protected."""

import os
import shutil
import stat

import numpy as np
import pytest

import eckpt


def test_exception_classes():
    assert issubclass(eckpt.Error, RuntimeError)
    assert issubclass(eckpt.InvalidArgument, eckpt.Error)
    assert issubclass(eckpt.InvalidArgument, ValueError)
    assert (eckpt.APPEND, eckpt.SNAPSHOT, eckpt.INPUT) == ("append", "snapshot", "input")


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.zeros((10, 10))[:, ::2],
        lambda: np.zeros((10, 10), order="F"),
        lambda: np.zeros((10, 10)).T,
    ],
    ids=["strided", "fortran", "transposed"],
)
def test_non_contiguous_array_is_refused(store, make):
    ck = eckpt.Checkpointer(dir=store)
    with pytest.raises(ValueError, match="not C-contiguous") as failure:
        ck.protect("a", make())
    assert isinstance(failure.value, eckpt.InvalidArgument)
    assert ck.protected == []


def test_read_only_arrays_are_refused(store):
    ck = eckpt.Checkpointer(dir=store)
    a = np.zeros(10)
    a.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        ck.protect("a", a)
    with pytest.raises(ValueError, match="read-only"):
        ck.protect("b", np.frombuffer(b"0123456789", dtype=np.uint8))
    assert ck.protected == []


def test_protecting_a_name_twice_is_refused(store):
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("a", np.zeros(10))
    with pytest.raises(ValueError, match='"a" is already protected'):
        ck.protect("a", np.zeros(20))
    # The same memory under another name overlaps the first region.
    first = np.zeros(10)
    ck.protect("b", first)
    with pytest.raises(eckpt.Error, match="overlaps"):
        ck.protect("c", first)
    assert ck.protected == ["a", "b"]


def test_wrong_types_and_contents_are_refused(store):
    ck = eckpt.Checkpointer(dir=store)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        ck.protect("a", [1.0, 2.0])
    with pytest.raises(TypeError, match="numpy.ndarray"):
        ck.protect("a", bytearray(10))
    with pytest.raises(TypeError, match="Python objects"):
        ck.protect("a", np.array([object(), None]))
    with pytest.raises(ValueError, match="zero length"):
        ck.protect("a", np.zeros(0))


def test_bad_arguments_raise_value_errors(store, tmp_path):
    with pytest.raises(ValueError, match="rank"):
        eckpt.Checkpointer(dir=store, rank=-1)
    with pytest.raises(ValueError, match="track"):
        eckpt.Checkpointer(dir=store, track="soft-dirty")
    with pytest.raises(ValueError, match="block_size"):
        eckpt.Checkpointer(dir=store, block_size=0)
    ck = eckpt.Checkpointer(dir=store)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="file mode"):
        ck.protect_file(tmp_path / "f", "rewrite")
    with pytest.raises(ValueError, match="not a directory"):
        ck.protect_dir(tmp_path / "f")


def test_size_mismatch_at_restart_is_refused_and_changes_nothing(store):
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("a", np.arange(100, dtype=np.int32))
    ck.protect("b", np.ones(10))
    ck.checkpoint()

    bigger = np.full(101, 5, dtype=np.int32)
    b = np.zeros(10)
    del ck  # one checkpointer per rank at a time: it holds the rank until it is gone
    again = eckpt.Checkpointer(dir=store)
    again.protect("a", bigger)
    again.protect("b", b)
    with pytest.raises(eckpt.Error, match='region "a" is 404 bytes but epoch 1 saved 400') as failure:
        again.restart()
    assert failure.value.code < 0
    assert (bigger == 5).all() and (b == 0).all()

    del again
    unknown = eckpt.Checkpointer(dir=store)
    unknown.protect("c", np.zeros(10))
    with pytest.raises(eckpt.Error, match='region "c" is not in epoch 1'):
        unknown.restart()


def resize_smaller(a):
    a.resize(10, refcheck=False)


def resize_larger(a):
    a.resize(100_000, refcheck=False)


def make_read_only(a):
    a.setflags(write=False)


@pytest.mark.parametrize(
    "change, message",
    [
        (resize_smaller, r"was moved or resized since protect\(\) \(8000 bytes at .* then, 80 bytes"),
        (resize_larger, r"was moved or resized since protect\(\) \(8000 bytes at .* then, 800000 bytes"),
        (make_read_only, r"is read-only now"),
    ],
    ids=["smaller", "larger", "read-only"],
)
def test_an_array_changed_in_place_after_protect_is_refused(store, change, message):
    """resize(refcheck=False) frees the bytes the checkpointer was given: checkpointing them
    would save freed memory, restarting into them would overwrite it. Every call that uses the
    arrays refuses, naming the array, and the epoch before stays the latest and intact."""
    a = np.arange(1000.0)
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("other", np.ones(10))
    ck.protect("a", a)
    assert ck.checkpoint() == 1
    change(a)
    for call in ("checkpoint", "snapshot", "restart"):
        refused = rf'{call}\(\): the array "a" {message}'
        with pytest.raises(eckpt.InvalidArgument, match=refused) as failure:
            getattr(ck, call)()
        assert failure.value.code == -1
    assert ck.latest_epoch() == 1
    del ck  # a store's rank is one process's at a time

    fresh = np.zeros(1000)
    again = eckpt.Checkpointer(dir=store)
    again.protect("other", np.zeros(10))
    again.protect("a", fresh)
    assert again.restart() == 1
    assert np.array_equal(fresh, np.arange(1000.0))


@pytest.mark.parametrize(
    "make, layout",
    [
        (lambda: np.zeros(8), r"<f8\[8\]"),
        (lambda: np.zeros((4, 4), dtype=np.float32), r"<f4\[4,4\]"),
        (lambda: np.zeros(16, dtype=">f4"), r">f4\[16\]"),
    ],
    ids=["dtype", "shape", "byte-order"],
)
def test_another_dtype_or_shape_at_restart_is_refused_and_changes_nothing(store, make, layout):
    """float32[16] and float64[8] are both 64 bytes: restoring one into the other would hand
    the program other numbers without an error."""
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("a", np.arange(16, dtype=np.float32))
    ck.checkpoint()
    del ck  # a store's rank is one process's at a time

    other = make()
    other[...] = 7
    again = eckpt.Checkpointer(dir=store)
    again.protect("a", other)
    with pytest.raises(eckpt.Error, match=rf'"a" is {layout} but epoch 1 saved <f4\[16\]') as failure:
        again.restart()
    assert failure.value.code == -5
    assert (other == 7).all()
    del again

    # The same dtype and shape, 0-d arrays included, restore as before.
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("a", np.arange(16, dtype=np.float32))
    ck.protect("scalar", np.full((), 2.5))
    assert ck.checkpoint() == 2
    del ck
    same, zero = np.zeros(16, dtype=np.float32), np.zeros(())
    again = eckpt.Checkpointer(dir=store)
    again.protect("a", same)
    again.protect("scalar", zero)
    assert again.restart() == 2
    assert np.array_equal(same, np.arange(16)) and zero == 2.5


def test_the_default_store_is_per_user_and_per_job(monkeypatch):
    """No directory and no batch job id: an error, not a store shared with other jobs."""
    with pytest.raises(ValueError, match="ECKPT_DIR"):
        eckpt.Checkpointer()
    job = f"eckpt-test-{os.getpid()}"
    monkeypatch.setenv("SLURM_JOB_ID", job)
    ck = eckpt.Checkpointer()
    monkeypatch.setenv("SLURM_JOB_ID", job + "-other")
    other = eckpt.Checkpointer()
    try:
        assert ck.dir.name == f"job-{job}"
        assert ck.dir.parent.name in (f"eckpt-{os.getuid()}", "eckpt")
        assert stat.S_IMODE(ck.dir.stat().st_mode) == 0o700
        assert other.dir.parent == ck.dir.parent and other.dir != ck.dir
    finally:
        shutil.rmtree(ck.dir)
        shutil.rmtree(other.dir)
