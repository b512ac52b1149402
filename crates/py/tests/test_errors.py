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
    again = eckpt.Checkpointer(dir=store)
    again.protect("a", bigger)
    again.protect("b", b)
    with pytest.raises(eckpt.Error, match='region "a" is 404 bytes but epoch 1 saved 400') as failure:
        again.restart()
    assert failure.value.code < 0
    assert (bigger == 5).all() and (b == 0).all()

    unknown = eckpt.Checkpointer(dir=store)
    unknown.protect("c", np.zeros(10))
    with pytest.raises(eckpt.Error, match='region "c" is not in epoch 1'):
        unknown.restart()


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
