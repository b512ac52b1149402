"""Fresh processes killed with SIGKILL at random moments and rerun: examples/python/heat.py
must end with the same state as an uninterrupted run, its APPEND log holding every line once."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HEAT = Path(__file__).resolve().parents[3] / "examples" / "python" / "heat.py"
STEPS = 300
ARGS = ["--steps", str(STEPS), "--size", "96", "--every", "7", "--sleep", "0.003"]


def heat_command(tmp, name):
    """The command line of one run whose store and log live under `tmp/name`."""
    run = tmp / name
    return [sys.executable, str(HEAT), *ARGS, "--dir", str(run / "store"), "--log", str(run / "heat.log")]


def run_to_completion(command):
    """Runs `command`, returns (first line, sha256 line) of its output."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("sha256 "), done.stdout
    return lines[0], lines[-1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run: its final checksum and log."""
    tmp = tmp_path_factory.mktemp("heat-reference")
    first, checksum = run_to_completion(heat_command(tmp, "run"))
    assert first == "fresh start"
    log = (tmp / "run" / "heat.log").read_text()
    assert log.count("\n") == STEPS
    return checksum, log


@pytest.mark.parametrize("seed", range(4))
def test_killed_and_rerun_matches_an_uninterrupted_run(tmp_path, reference, seed):
    rng = random.Random(seed)
    command = heat_command(tmp_path, "run")
    (tmp_path / "run").mkdir()
    kills = rng.randint(1, 3)
    for _ in range(kills):
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # A run takes about a second (startup included); most kills land mid-run.
        time.sleep(rng.uniform(0.1, 1.0))
        if process.poll() is not None:
            assert process.returncode == 0, process.stderr.read()
            break
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait() == -signal.SIGKILL
        process.stderr.close()

    first, checksum = run_to_completion(command)
    assert checksum == reference[0], f"seed {seed}: {first}"
    log = (tmp_path / "run" / "heat.log").read_text()
    # Same lines, same order, each once: the killed runs' extra lines were cut back.
    assert log == reference[1], f"seed {seed}: {first}"


def test_some_rerun_resumes_mid_run(tmp_path, reference):
    """Guards the test above against passing vacuously: a kill after a few checkpoints makes
    the rerun resume from a checkpointed step, not start afresh or find the run finished."""
    command = heat_command(tmp_path, "run")
    (tmp_path / "run").mkdir()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    # Wait for the first checkpoints (the log grows a line per step), then kill.
    log = tmp_path / "run" / "heat.log"
    deadline = time.monotonic() + 60
    while (not log.exists() or log.read_text().count("\n") < 50) and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stdout.close()

    first, checksum = run_to_completion(command)
    resumed = first.split()
    assert resumed[:3] == ["resumed", "from", "epoch"], first
    step = int(resumed[-1])
    assert 49 <= step < STEPS and step % 7 == 0, first
    assert checksum == reference[0]
    assert log.read_text() == reference[1]
