"""eckpt.torch: torch.distributed.checkpoint into eckpt. A DDP training loop under `eckpt run`
that loses a node and ends bitwise as a run that did not; FSDP2 state saved by four ranks and
loaded by three after a node is lost for good; and the errors of bad use."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import eckpt
import eckpt.torch

REPO = Path(__file__).resolve().parents[3]
ECKPT = Path(os.environ.get("ECKPT_BIN", REPO / "target" / "release" / "eckpt"))
DDP_TRAIN = REPO / "examples" / "python" / "ddp_train.py"
FSDP_STATE = REPO / "examples" / "python" / "fsdp_state.py"


def eckpt_command(*args, timeout=120):
    # --kill-at and kill-node: a build with fault injection, as `make test` leaves in target/release.
    assert ECKPT.exists(), f"{ECKPT} is missing: build it with `cargo build --release -p eckpt --features fault-injection`"
    return subprocess.run([str(ECKPT), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world, script, *args, env):
    """Runs `script` as `world` ranks of a torch.distributed job (the variables torchrun sets);
    every rank's output and exit status."""
    port = free_port()
    ranks = []
    for rank in range(world):
        rank_env = {
            **os.environ,
            **env,
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONWARNINGS": "ignore",
        }
        ranks.append(
            subprocess.Popen(
                [sys.executable, str(script), *map(str, args)],
                env=rank_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return [(rank.communicate(timeout=180)[0], rank.returncode) for rank in ranks]


def per_rank_lines(stdout):
    """`eckpt run`'s output, by rank: the lines each printed, in order."""
    lines = {}
    for line in stdout.splitlines():
        found = re.match(r"\[(\d+)\] (.*)", line)
        if found:
            lines.setdefault(int(found[1]), []).append(found[2])
    return lines


def ddp_run(work, *extra):
    work.mkdir()
    done = subprocess.run(
        [
            str(ECKPT),
            "run",
            *["--nodes", "5", "--spares", "1", "--k", "3", "--m", "2", "--block-size", "16KiB"],
            *extra,
            *["-n", "4", "--", sys.executable, str(DDP_TRAIN), "--steps", "30", "--every", "5"],
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def test_ddp_training_loses_a_node_and_ends_bitwise_as_without(tmp_path):
    """4 ranks on 3 nodes save with dcp.async_save every 5 steps; a node is killed after the
    second epoch; eckpt run recovers its ranks onto the spare and relaunches every rank, which
    re-forms its process group (MASTER_ADDR/PORT anew) and loads through DCP. Every step's loss
    and the final weights are bitwise those of a run that lost nothing."""
    reference = per_rank_lines(ddp_run(tmp_path / "reference").stdout)
    lost = ddp_run(tmp_path / "lost", "--kill-at", "2:1")
    # The kill comes right after the run's second epoch commits, or a later one when the
    # ranks have already committed the next (`--kill-at`): an epoch every 5 steps.
    recovered = re.search(r"recovery of epoch (\d+) \(lost ", lost.stderr)
    assert recovered and int(recovered[1]) >= 2, lost.stderr[-4000:]
    resumed_after = 5 * int(recovered[1])
    resumed = per_rank_lines(lost.stdout)
    for rank in range(4):
        assert any(line.startswith(f"resumed after step {resumed_after} in ") for line in resumed[rank]), resumed[rank]
        expected = {line for line in reference[rank] if line.startswith("step ")}
        assert len(expected) == 30
        # A step run again after the relaunch prints the same loss as its first run.
        assert {line for line in resumed[rank] if line.startswith("step ")} == expected, rank
    weights = [line for line in reference[0] if line.startswith("weights ")]
    assert len(weights) == 1 and weights == [line for line in resumed[0] if line.startswith("weights ")]


@pytest.fixture
def cluster(tmp_path):
    d = tmp_path / "cluster"
    up = eckpt_command("up", "--dir", d, "--nodes", 4, "--k", 2, "--m", 2, "--block-size", "16KiB", "--detach")
    assert up.returncode == 0, up.stderr
    yield d
    eckpt_command("down", "--dir", d, timeout=60)


def state_digest(outputs):
    for output, code in outputs:
        assert code == 0, output[-4000:]
    return re.search(r"^state ([0-9a-f]{64})$", outputs[0][0], re.M)[1]


def test_fsdp_state_of_four_ranks_loads_into_three_after_a_node_is_lost(cluster):
    """FSDP2 shards of a model and its Adam state, saved by 4 ranks into a cluster; the node
    holding two of those ranks is killed with its data wiped and not recovered; 3 ranks load
    through DCP's resharding, their lost items decoded from the group's survivors."""
    env = {"ECKPT_CLUSTER": str(cluster)}
    saved = state_digest(run_ranks(4, FSDP_STATE, "save", env={**env, "ECKPT_WORLD": "4"}))
    status = json.loads(eckpt_command("status", "--dir", cluster, "--json").stdout)
    assert status["committed_epoch"] == 1
    node = next(n["name"] for n in status["nodes"] if 0 in n["ranks"])
    killed = eckpt_command("kill-node", "--dir", cluster, node, "--wipe")
    assert killed.returncode == 0, killed.stderr
    loaded = state_digest(run_ranks(3, FSDP_STATE, "load", env={**env, "ECKPT_WORLD": "3"}))
    assert loaded == saved


def small_state(seed):
    torch.manual_seed(seed)
    return {"weight": torch.randn(300, 70), "step": seed, "name": f"run {seed}"}


def test_a_checkpoint_id_names_an_epoch(store, monkeypatch):
    """checkpoint_id: a name on save; on load an epoch number or the latest epoch's name."""
    monkeypatch.setenv("ECKPT_DIR", str(store))
    for seed, name in [(1, "step-1"), (2, "step-2")]:
        dcp.save(small_state(seed), storage_writer=eckpt.torch.StorageWriter(), checkpoint_id=name)
    for checkpoint_id, seed in [(None, 2), ("step-2", 2), ("1", 1), (2, 2)]:
        loaded = {"weight": torch.zeros(300, 70), "step": 0, "name": ""}
        dcp.load(loaded, storage_reader=eckpt.torch.StorageReader(), checkpoint_id=checkpoint_id)
        expected = small_state(seed)
        assert torch.equal(loaded["weight"], expected["weight"]) and loaded["step"] == seed, checkpoint_id
        assert loaded["name"] == expected["name"]


def test_bad_use_gets_one_clear_error(store, monkeypatch):
    """DCP raises its CheckpointException (a BaseException) carrying eckpt's one line."""
    monkeypatch.setenv("ECKPT_DIR", str(store))
    target = {"weight": torch.zeros(300, 70)}
    with pytest.raises(CheckpointException, match="rank 0 has no committed epoch"):
        dcp.load(target, storage_reader=eckpt.torch.StorageReader())
    dcp.save(small_state(1), storage_writer=eckpt.torch.StorageWriter(), checkpoint_id="step-1")
    with pytest.raises(CheckpointException, match="no checkpoint named 'step-9'.*saved as 'step-1'"):
        dcp.load(target, storage_reader=eckpt.torch.StorageReader(), checkpoint_id="step-9")
    with pytest.raises(CheckpointException, match="rank 0 epoch 7 not found"):
        dcp.load(target, storage_reader=eckpt.torch.StorageReader(), checkpoint_id="7")
    assert torch.equal(target["weight"], torch.zeros(300, 70))


STALE_SAVE = """
import torch, torch.distributed.checkpoint as dcp, eckpt.torch
dcp.save({"weight": torch.ones(10)}, storage_writer=eckpt.torch.StorageWriter())
print("saved")
"""


def test_a_rank_of_a_replaced_generation_cannot_save(cluster, tmp_path):
    """A rank carrying a job generation that no supervisor holds any more is refused by the
    coordinator and ends itself, saying why, before it wrote anything the cluster keeps."""
    script = tmp_path / "stale.py"
    script.write_text(STALE_SAVE)
    env = {**os.environ, "ECKPT_CLUSTER": str(cluster), "ECKPT_WORLD": "1", "ECKPT_RANK": "0", "ECKPT_GENERATION": "3"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "saved" not in done.stdout
    assert "belongs to generation 3" in done.stderr and "this rank's attempt is over" in done.stderr, done.stderr
    status = json.loads(eckpt_command("status", "--dir", cluster, "--json").stdout)
    assert status["committed_epoch"] == 0
