"""checkpoint() and restart() release the GIL: other Python threads keep running meanwhile, and
calls from several threads on one Checkpointer take turns."""

import threading
import time

import numpy as np
import pytest

import eckpt


def blocked_during(call, at_least=0.2):
    """Runs `call` in a thread, again and again until `at_least` seconds have passed, while this
    thread records timestamps; returns (duration of the calls, total of the gaps over 10 ms
    between timestamps taken meanwhile): the time this thread could not run, besides the GIL's
    normal 5 ms turns and brief scheduling delays. Repeating makes the duration independent of
    how fast this machine makes one call."""
    span = []

    def worker():
        span.append(time.monotonic())
        while True:
            call()
            if time.monotonic() - span[0] >= at_least:
                break
        span.append(time.monotonic())

    thread = threading.Thread(target=worker)
    stamps = []
    thread.start()
    while thread.is_alive():
        stamps.append(time.monotonic())
    thread.join()
    start, end = span
    inside = [start] + [t for t in stamps if start < t < end] + [end]
    return end - start, sum(b - a for a, b in zip(inside, inside[1:]) if b - a > 0.01)


def test_checkpoint_and_restart_let_other_threads_run(store):
    big = np.random.default_rng(0).integers(0, 2**63, size=(128 << 20) // 8, dtype=np.int64)
    ck = eckpt.Checkpointer(dir=store, track="hash")
    ck.protect("big", big)

    def rewrite_everything():
        """Makes the next checkpoint copy all 128 MiB again, not an empty delta."""
        big[...] += 1

    for call, prepare in ((ck.checkpoint, rewrite_everything), (ck.restart, lambda: None)):
        # Holding the GIL would block this thread for each whole call (one pass over 128 MiB
        # takes longer than the 10 ms gaps counted); released, this thread runs through them.
        # Three tries, so that a busy machine descheduling this thread does not fail the test.
        tries = []
        for _ in range(3):
            prepare()
            duration, blocked = blocked_during(call)
            tries.append(f"blocked {blocked:.3f}s of {duration:.3f}s")
            if blocked < duration / 2:
                break
        else:
            pytest.fail(f"{call.__name__}: " + ", ".join(tries))


def test_the_measure_sees_a_call_that_holds_the_gil():
    """The check above is meaningful: calls that hold the GIL, each as short as a restart()
    of 128 MiB on a fast machine, show up as blocked time."""
    duration, blocked = blocked_during(lambda: sum(range(2_000_000)))
    assert blocked > duration / 2


def test_calls_from_several_threads_take_turns(store):
    """While one thread's checkpoint() runs without the GIL, another thread's call waits for
    it (without the GIL either) instead of failing with "Already borrowed"."""
    a = np.zeros(1 << 16)
    ck = eckpt.Checkpointer(dir=store, track="hash")
    ck.protect("a", a)
    start = threading.Barrier(2)
    epochs, errors = [], []

    def checkpoint_repeatedly():
        start.wait()
        try:
            for _ in range(20):
                epochs.append(ck.checkpoint())
                assert ck.protected == ["a"] and ck.latest_epoch() >= 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=checkpoint_repeatedly) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(epochs) == list(range(1, 41))
