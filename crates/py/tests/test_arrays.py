"""numpy arrays protected in place: exact bytes back after restart, epochs, references."""

import gc
import weakref

import numpy as np
import pytest

import eckpt

POINT = np.dtype([("x", np.float32), ("id", np.int16), ("tag", "S3")])


def make_arrays(seed):
    """Arrays of several dtypes and shapes, filled from `seed` (zero: all zero)."""
    rng = np.random.default_rng(seed)
    arrays = {
        "grid": np.zeros((300, 200)),
        "counts": np.zeros(1001, dtype=np.int32),
        "bytes": np.zeros(777, dtype=np.uint8),
        "waves": np.zeros((17, 3), dtype=np.complex128),
        "points": np.zeros(50, dtype=POINT),
    }
    if seed:
        arrays["grid"][...] = rng.standard_normal((300, 200))
        arrays["grid"][0, 0] = np.nan
        arrays["counts"][...] = rng.integers(-(2**31), 2**31, 1001, dtype=np.int32)
        arrays["bytes"][...] = rng.integers(0, 256, 777, dtype=np.uint8)
        arrays["waves"][...] = rng.standard_normal((17, 3)) + 1j * rng.standard_normal((17, 3))
        arrays["points"]["x"] = rng.standard_normal(50)
        arrays["points"]["id"] = np.arange(50)
        arrays["points"]["tag"] = [b"a%02d" % i for i in range(50)]
    return arrays


@pytest.mark.parametrize("track", ["auto", "hash"])
def test_every_dtype_comes_back_byte_exact_in_a_new_checkpointer(store, track):
    arrays = make_arrays(seed=1)
    ck = eckpt.Checkpointer(dir=store, rank=0, track=track)
    for name, array in arrays.items():
        ck.protect(name, array)
    assert ck.restart() is None
    assert ck.checkpoint() == 1
    saved = {name: array.tobytes() for name, array in arrays.items()}
    for array in arrays.values():
        array.view(np.uint8)[...] ^= 0xFF
    del ck

    # As a restarted process would: new arrays, a new checkpointer, then restart().
    fresh = make_arrays(seed=0)
    ck = eckpt.Checkpointer(dir=store, rank=0, track=track)
    for name, array in fresh.items():
        ck.protect(name, array)
    assert ck.restart() == 1
    for name, array in fresh.items():
        assert array.tobytes() == saved[name], name
    assert fresh["points"]["tag"][7] == b"a07"


def test_restart_without_a_checkpoint_changes_nothing(store):
    a = np.arange(10.0)
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("a", a)
    assert ck.latest_epoch() is None
    assert ck.restart() is None
    assert np.array_equal(a, np.arange(10.0))


def test_epochs_with_few_changes_restore_the_latest_and_store_only_changes(store):
    def store_bytes():
        return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())

    big = np.zeros(1 << 20)  # 8 MiB
    small = np.zeros(4, dtype=np.int64)
    ck = eckpt.Checkpointer(dir=store, track="hash", block_size=4096)
    ck.protect("big", big)
    ck.protect("small", small)
    assert ck.checkpoint() == 1
    full = store_bytes()
    assert full >= big.nbytes

    for epoch in range(2, 7):
        big[epoch * 100_000] = epoch
        small[0] = epoch
        assert ck.checkpoint() == epoch
    assert ck.latest_epoch() == 6
    # Five epochs touching one 4 KiB block each store those blocks and metadata, not the
    # 8 MiB image again (a few KiB per epoch today; 256 KiB leaves room for metadata).
    assert store_bytes() - full < 256 << 10
    expected = big.copy(), small.copy()

    big[...] = -1
    small[...] = -1
    assert ck.restart() == 6
    assert np.array_equal(big, expected[0]) and np.array_equal(small, expected[1])

    restored = np.empty_like(big), np.empty_like(small)
    del ck  # one checkpointer per rank at a time: it holds the rank until it is gone
    again = eckpt.Checkpointer(dir=store, track="hash", block_size=4096)
    again.protect("big", restored[0])
    again.protect("small", restored[1])
    assert again.restart() == 6
    assert restored[0].tobytes() == expected[0].tobytes()
    assert restored[1].tobytes() == expected[1].tobytes()
    # The next epoch continues the numbering.
    assert again.checkpoint() == 7


def test_ranks_sharing_a_store_are_independent(store):
    values = {}
    for rank in (0, 3):
        a = np.full(100, rank, dtype=np.int32)
        ck = eckpt.Checkpointer(dir=store, rank=rank)
        ck.protect("a", a)
        ck.checkpoint()
        values[rank] = a
    values[0][...] = 9
    del ck  # rank 3's first checkpointer, which still holds the rank
    ck = eckpt.Checkpointer(dir=store, rank=3)
    b = np.zeros(100, dtype=np.int32)
    ck.protect("a", b)
    assert ck.restart() == 1
    assert (b == 3).all()


def test_dir_and_rank_default_to_the_environment(store, monkeypatch):
    monkeypatch.setenv("ECKPT_DIR", str(store))
    monkeypatch.setenv("ECKPT_RANK", "5")
    ck = eckpt.Checkpointer()
    assert ck.dir == store and ck.rank == 5
    # Arguments win over the environment.
    ck = eckpt.Checkpointer(dir=store / "other", rank=2)
    assert ck.dir == store / "other" and ck.rank == 2


def test_protected_arrays_live_as_long_as_the_checkpointer(store):
    ck = eckpt.Checkpointer(dir=store)
    a = np.zeros(1000)
    ck.protect("a", a)
    assert ck.protected == ["a"]
    alive = weakref.ref(a)
    del a
    gc.collect()
    assert alive() is not None
    # The reference also stops numpy from moving the data.
    with pytest.raises(ValueError):
        alive().resize(2000)
    alive()[...] = 7
    ck.checkpoint()
    alive()[...] = 0
    ck.restart()
    assert (alive() == 7).all()
    del ck
    gc.collect()
    assert alive() is None


def test_a_view_of_a_larger_array_is_restored_in_place(store):
    base = np.arange(100, dtype=np.int64)
    window = base[10:20]
    ck = eckpt.Checkpointer(dir=store)
    ck.protect("window", window)
    ck.checkpoint()
    base[...] = -1
    ck.restart()
    assert np.array_equal(base[10:20], np.arange(10, 20))
    assert (base[:10] == -1).all() and (base[20:] == -1).all()
