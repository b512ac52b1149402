"""Protected files and directories: what the restored memory saw is what the files hold."""

import os

import numpy as np
import pytest

import eckpt


def test_append_file_is_cut_back_to_its_checkpointed_length(store, tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("line 1\nline 2\n")
    ck = eckpt.Checkpointer(dir=store)
    ck.protect_file(log, eckpt.APPEND)
    ck.checkpoint()
    with log.open("a") as f:
        f.write("line 3, after the checkpoint\n")
    del ck  # one checkpointer per rank at a time: it holds the rank until it is gone
    assert eckpt.Checkpointer(dir=store).restart() == 1  # protects nothing: files untouched
    assert log.read_text().count("\n") == 3

    again = eckpt.Checkpointer(dir=store)
    again.protect_file(str(log), "append")  # a path string and a mode string work too
    assert again.restart() == 1
    assert log.read_text() == "line 1\nline 2\n"


def test_snapshot_file_is_restored(store, tmp_path):
    state = tmp_path / "state.json"
    state.write_bytes(b'{"step": 10}')
    ck = eckpt.Checkpointer(dir=store)
    ck.protect_file(state, eckpt.SNAPSHOT)
    ck.checkpoint()
    state.write_bytes(b'{"step": 12, "more": "longer than before"}')
    assert ck.restart() == 1
    assert state.read_bytes() == b'{"step": 10}'
    # Deleted after the checkpoint: restored as well.
    state.unlink()
    del ck
    again = eckpt.Checkpointer(dir=store)
    again.protect_file(state, eckpt.SNAPSHOT)
    assert again.restart() == 1
    assert state.read_bytes() == b'{"step": 10}'


def test_changed_input_file_makes_restart_fail_and_change_nothing(store, tmp_path):
    data = tmp_path / "input.dat"
    data.write_bytes(b"mesh v1")
    log = tmp_path / "log.txt"
    log.write_text("before\n")
    a = np.arange(8.0)
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("a", a)
    ck.protect_file(data, eckpt.INPUT)
    ck.protect_file(log, eckpt.APPEND)
    ck.checkpoint()

    # Unchanged input: restart works.
    a[...] = 0
    assert ck.restart() == 1
    assert np.array_equal(a, np.arange(8.0))

    data.write_bytes(b"mesh v2")  # same length, other bytes
    a[...] = -1
    log.write_text("before\nafter\n")
    with pytest.raises(eckpt.Error, match="input file .*input.dat changed") as failure:
        ck.restart()
    assert not isinstance(failure.value, ValueError)
    assert failure.value.code < 0
    assert (a == -1).all()
    assert log.read_text() == "before\nafter\n"


def test_files_created_after_the_checkpoint_in_a_protected_dir_are_moved_aside(store, tmp_path):
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "kept.txt").write_text("from before")
    ck = eckpt.Checkpointer(dir=store)
    ck.protect_dir(out)
    ck.checkpoint()
    (out / "late.txt").write_text("written after the checkpoint")
    (out / "sub" / "late2.txt").write_text("also late")
    (out / "kept.txt").write_text("modified, but not new")

    assert ck.restart() == 1
    assert sorted(p.name for p in out.iterdir()) == [".eckpt-rollback", "kept.txt", "sub"]
    assert (out / "kept.txt").read_text() == "modified, but not new"
    aside = out / ".eckpt-rollback" / "epoch-1"
    assert (aside / "late.txt").read_text() == "written after the checkpoint"
    assert (aside / "sub" / "late2.txt").read_text() == "also late"
    assert not (out / "sub" / "late2.txt").exists()


def test_a_file_name_that_is_not_utf8_in_a_protected_dir_raises_no_panic(store, tmp_path):
    """Linux file names are bytes. Whatever eckpt makes of one that is not UTF-8, no Rust panic
    may reach Python as pyo3's PanicException, a BaseException that the `except Exception` of a
    program handling checkpoint errors does not catch; and the checkpointer goes on working."""
    out = tmp_path / "out"
    out.mkdir()
    ck = eckpt.Checkpointer(dir=store)
    ck.protect_dir(out)
    assert ck.checkpoint() == 1
    odd = os.path.join(os.fsencode(out), b"caf\xe9.txt")
    with open(odd, "wb") as f:
        f.write(b"written after epoch 1")
    try:
        epoch = ck.checkpoint()
    except Exception as e:  # PanicException, a BaseException, would go through
        assert isinstance(e, eckpt.Error), repr(e)
        os.unlink(odd)
        epoch = ck.checkpoint()
    assert epoch == 2
    assert ck.restart() == 2
