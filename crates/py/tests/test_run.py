"""`eckpt run` of Python ranks: examples/python/heat.py checkpointing by time (snapshot())
through node losses, and ranks of different speeds that must take every checkpoint decision
at the same call."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ECKPT = Path(os.environ.get("ECKPT_BIN", REPO / "target" / "release" / "eckpt"))
HEAT = REPO / "examples" / "python" / "heat.py"
HEAT_ARGS = ["--steps", "240", "--size", "96", "--snapshot", "--sleep", "0.002"]


def eckpt_run(cwd, *args, timeout=300):
    # --kill-at: a build with fault injection, as `make test` leaves in target/release.
    build = "cargo build --release -p eckpt --features fault-injection"
    assert ECKPT.exists(), f"{ECKPT} is missing: build it with `{build}`"
    return subprocess.run(
        [str(ECKPT), "run", *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def rank_lines(stdout, rank):
    prefix = f"[{rank}] "
    return [line[len(prefix) :] for line in stdout.splitlines() if line.startswith(prefix)]


def heat_reference(tmp_path, args):
    """A failure-free standalone run of heat.py: its last line (the checksum) and its log."""
    reference = tmp_path / "reference"
    reference.mkdir()
    done = subprocess.run(
        [sys.executable, str(HEAT), *args, "--dir", reference / "store", "--rank", "0", "--log", "ref.log"],
        cwd=reference,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()[-1], (reference / "ref.log").read_text()


def test_heat_survives_node_losses_with_the_failure_free_result(tmp_path):
    expected, expected_log = heat_reference(tmp_path, HEAT_ARGS)

    work = tmp_path / "job"
    work.mkdir()
    run = eckpt_run(
        work,
        *["--nodes", 6, "--spares", 1, "--k", 3, "--m", 2, "--mode", "update", "--block-size", "16KiB"],
        *["--interval", "60ms", "--kill-at", "2:1,recovery:1,5:1", "-n", 3],
        "--",
        sys.executable,
        HEAT,
        *HEAT_ARGS,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("eckpt run: lost") == 3, run.stderr
    assert "recovered epoch" in run.stderr, run.stderr
    for rank in range(3):
        assert rank_lines(run.stdout, rank)[-1] == expected, run.stdout
        assert (work / f"heat.{rank}.log").read_text() == expected_log, f"rank {rank}'s log"


DECIDE = """
import sys, time
import numpy as np
import eckpt

ck = eckpt.Checkpointer()
state = np.zeros(4096)
ck.protect("state", state)
ck.restart()
with open(f"{sys.argv[1]}/decisions.{ck.rank}", "w") as out:
    for call in range(1, 241):
        state[call % 4096] += 1
        time.sleep(0.001 * (1 + 2 * ck.rank))
        epoch = ck.snapshot()
        if epoch:
            out.write(f"{call} {epoch}\\n")
            out.flush()
ck.wait()
"""


@pytest.mark.parametrize("interval", [["--interval", "100ms"], ["--interval", "auto", "--mtbf", "100ms"]])
def test_ranks_of_different_speeds_decide_alike(tmp_path, interval):
    script = tmp_path / "decide.py"
    script.write_text(DECIDE)
    run = eckpt_run(
        tmp_path,
        *["--nodes", 4, "--k", 2, "--m", 2, "--block-size", "16KiB", *interval, "-n", 3],
        "--",
        sys.executable,
        script,
        tmp_path,
    )
    assert run.returncode == 0, run.stderr
    decisions = [(tmp_path / f"decisions.{r}").read_text() for r in range(3)]
    assert decisions[0] == decisions[1] == decisions[2], decisions
    calls = [int(line.split()[0]) for line in decisions[0].splitlines()]
    assert len(calls) >= 5, decisions[0]
    if interval[1] == "100ms":
        # The slowest rank (5 ms a step or more) sets the pace: 100 ms is at most 20 of its
        # calls, where the fastest rank alone would have waited 100.
        gaps = [b - a for a, b in zip(calls[1:], calls[2:])]
        assert max(gaps) <= 25, calls
    else:
        # Rank 0 says the interval it chose and why, once measured again.
        said = [line for line in run.stderr.splitlines() if "eckpt: interval auto: a checkpoint every" in line]
        assert said and all(line.startswith("[0] ") for line in said), run.stderr
        assert "MTBF 0.1 s), Young/Daly" in said[-1] and "measured" in said[-1], said


def test_ranks_killed_by_a_signal_are_relaunched_from_the_last_checkpoint(tmp_path):
    """Every rank SIGKILLs itself once, right after the checkpoint of step 40: no node is lost,
    so no recovery — the ranks are relaunched, resume and finish as if nothing happened."""
    args = ["--steps", "120", "--size", "64", "--every", "10"]
    expected, expected_log = heat_reference(tmp_path, args)
    work = tmp_path / "job"
    work.mkdir()
    run = eckpt_run(
        work,
        *["--nodes", 4, "--k", 2, "--m", 2, "--block-size", "16KiB", "-n", 2],
        "--",
        sys.executable,
        HEAT,
        *args,
        "--kill-at",
        40,
    )
    assert run.returncode == 0, run.stderr
    assert "killed by signal 9: restarting from the last committed epoch" in run.stderr, run.stderr
    assert "recovered" not in run.stderr, run.stderr
    for rank in range(2):
        assert rank_lines(run.stdout, rank)[-1] == expected
        assert (work / f"heat.{rank}.log").read_text() == expected_log
