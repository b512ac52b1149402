"""checkpoint() and restart() release the GIL: other Python threads keep running meanwhile, and
calls from several threads on one Checkpointer take turns."""

import sys
import threading
import time

import numpy as np
import pytest

import eckpt


def calls_this_thread_ran_during(call, at_least=0.2):
    """Runs `call` in a thread, again and again until `at_least` seconds have passed, while
    this thread records timestamps; returns (calls made, calls during which this thread took
    a timestamp). Taking one needs the GIL, and for the measure the GIL changes hands only
    when its holder lets go of it (the switch interval is raised; this thread lets go after
    each timestamp): a call that holds it from start to end never lets this thread in, however
    idle or busy the machine, and a call that releases it does."""
    spans = []

    def worker():
        first = time.monotonic()
        while True:
            start = time.monotonic()
            call()
            end = time.monotonic()
            spans.append((start, end))
            if end - first >= at_least:
                break

    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        thread = threading.Thread(target=worker)
        stamps = []
        thread.start()
        while thread.is_alive():
            stamps.append(time.monotonic())
            time.sleep(0)
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    ran = sum(1 for start, end in spans if any(start < t < end for t in stamps))
    return len(spans), ran


def test_checkpoint_and_restart_let_other_threads_run(store):
    big = np.random.default_rng(0).integers(0, 2**63, size=(128 << 20) // 8, dtype=np.int64)
    ck = eckpt.Checkpointer(dir=store, track="hash")
    ck.protect("big", big)
    # The first checkpoint copies all 128 MiB, the next ones hash them; a restart copies them.
    big[...] += 1
    for call in (ck.checkpoint, ck.restart):
        calls, ran = calls_this_thread_ran_during(call)
        assert ran > 0, f"{call.__name__}: this thread never ran during any of {calls} calls"


def test_the_measure_sees_a_call_that_holds_the_gil():
    """The check above is meaningful: calls that hold the GIL, each about as long as a
    restart() of 128 MiB, never let this thread run."""
    calls, ran = calls_this_thread_ran_during(lambda: sum(range(2_000_000)))
    assert calls > 1 and ran == 0, f"ran during {ran} of {calls} calls"


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
