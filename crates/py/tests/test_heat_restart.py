"""Fresh processes killed with SIGKILL at exact steps (heat.py --kill-at) and rerun:
examples/python/heat.py must end with the same state as an uninterrupted run, its APPEND log
holding every line once. The kill points are fixed, so every run checks the same cases: kills
before the first checkpoint, right after one, and several in a row mid-run."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

HEAT = Path(__file__).resolve().parents[3] / "examples" / "python" / "heat.py"
STEPS = 300
EVERY = 7
ARGS = ["--steps", str(STEPS), "--size", "96", "--every", str(EVERY)]


def heat_command(tmp, name):
    """The command line of one run whose store and log live under `tmp/name`."""
    run = tmp / name
    return [sys.executable, str(HEAT), *ARGS, "--dir", str(run / "store"), "--log", str(run / "heat.log")]


def run_killed_at(command, step):
    """Runs `command` until it kills itself once step `step` is logged."""
    done = subprocess.run([*command, "--kill-at", str(step)], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.splitlines()[0]


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


# Each run is killed at the next step of its schedule (after resuming from the checkpoint at
# or before the previous kill). The first two never reach a checkpoint before dying.
KILL_SCHEDULES = {
    "before-the-first-checkpoint": [3],
    "twice-before-the-first-checkpoint": [5, 2],
    "right-after-a-checkpoint-then-mid-run": [EVERY, 130],
    "thrice-mid-run": [50, 51, STEPS - 1],
}


@pytest.mark.parametrize("kills", KILL_SCHEDULES.values(), ids=KILL_SCHEDULES.keys())
def test_killed_and_rerun_matches_an_uninterrupted_run(tmp_path, reference, kills):
    command = heat_command(tmp_path, "run")
    (tmp_path / "run").mkdir()
    for step in kills:
        run_killed_at(command, step)

    first, checksum = run_to_completion(command)
    assert checksum == reference[0], f"kills at {kills}: {first}"
    log = (tmp_path / "run" / "heat.log").read_text()
    # Same lines, same order, each once: the killed runs' extra lines were cut back.
    assert log == reference[1], f"kills at {kills}: {first}"


def test_a_run_killed_before_its_first_checkpoint_leaves_no_lines(tmp_path):
    """The rerun starts afresh with the log as it was when the killed run protected it."""
    command = heat_command(tmp_path, "run")
    (tmp_path / "run").mkdir()
    log = tmp_path / "run" / "heat.log"
    log.write_text("kept: written before the job\n")
    assert run_killed_at(command, EVERY - 1) == "fresh start"
    assert log.read_text().count("\n") == EVERY
    # The rerun dies too, still before a checkpoint: the rollback point stays the first one.
    assert run_killed_at(command, 2) == "fresh start"
    assert log.read_text().count("\n") == 3
    lines = log.read_text().splitlines()
    assert lines[0] == "kept: written before the job"
    assert [line.split()[1] for line in lines[1:]] == ["1", "2"]


def test_some_rerun_resumes_mid_run(tmp_path, reference):
    """Guards the test above against passing vacuously: a kill after a few checkpoints makes
    the rerun resume from a checkpointed step, not start afresh or find the run finished."""
    command = heat_command(tmp_path, "run")
    (tmp_path / "run").mkdir()
    log = tmp_path / "run" / "heat.log"
    # Killed after the first checkpoints (the log has a line per step).
    run_killed_at(command, 50)

    first, checksum = run_to_completion(command)
    resumed = first.split()
    assert resumed[:3] == ["resumed", "from", "epoch"], first
    step = int(resumed[-1])
    assert 49 <= step < STEPS and step % 7 == 0, first
    assert checksum == reference[0]
    assert log.read_text() == reference[1]
