"""Cluster mode: numpy arrays of two ranks checkpointed into a running `eckpt up` cluster,
the node of one rank killed with its data wiped, `eckpt recover`, and a fresh process-side
Checkpointer restoring the arrays in place from wherever the rank now lives."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import eckpt

REPO = Path(__file__).resolve().parents[3]
ECKPT = Path(os.environ.get("ECKPT_BIN", REPO / "target" / "release" / "eckpt"))


def run(*args):
    done = subprocess.run([str(ECKPT), *map(str, args)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def cluster(tmp_path):
    assert ECKPT.exists(), f"{ECKPT} is missing: build it with `cargo build --release`"
    d = tmp_path / "cluster"
    run("up", "--dir", d, "--nodes", 4, "--k", 2, "--m", 2, "--block-size", "16KiB", "--mode", "update", "--detach")
    yield d
    subprocess.run([str(ECKPT), "down", "--dir", str(d)], capture_output=True, timeout=60)


def status(d):
    return json.loads(run("status", "--dir", d, "--json"))


def test_arrays_survive_the_loss_of_their_node(cluster):
    grid = np.arange(200_000, dtype=np.float64)
    counts = np.random.default_rng(1).integers(0, 1 << 30, size=50_000, dtype=np.int64)
    ranks = []
    for rank, array in enumerate([grid, counts]):
        ck = eckpt.Checkpointer(rank=rank, cluster=cluster, world=2)
        ck.protect("state", array)
        assert ck.restart() is None
        ranks.append(ck)
    assert [ck.checkpoint() for ck in ranks] == [1, 1]
    assert ranks[0].wait() == 1
    grid[1000:1100] = -1.0
    counts[7] = 7
    assert [ck.checkpoint() for ck in ranks] == [2, 2]
    assert ranks[1].wait() == 2
    assert status(cluster)["committed_epoch"] == 2
    expected = grid.copy()
    del ranks

    node = next(n["name"] for n in status(cluster)["nodes"] if 0 in n["ranks"])
    run("kill-node", "--dir", cluster, node, "--wipe")
    report = json.loads(run("recover", "--dir", cluster, "--json"))
    assert report["rebuilt"][0][0] == node
    new_home = next(n["name"] for n in status(cluster)["nodes"] if 0 in n["ranks"])
    assert new_home != node

    restored = np.zeros_like(expected)
    ck = eckpt.Checkpointer(rank=0, cluster=cluster, world=2)
    ck.protect("state", restored)
    assert ck.restart() == 2
    assert np.array_equal(restored, expected)
    assert ck.latest_epoch() == 2


def test_cluster_mode_needs_the_job_size(cluster):
    with pytest.raises(eckpt.InvalidArgument, match="world"):
        eckpt.Checkpointer(rank=0, cluster=cluster)


def test_a_missing_cluster_is_a_clear_error(tmp_path):
    with pytest.raises(eckpt.Error, match="not a cluster directory"):
        eckpt.Checkpointer(rank=0, cluster=tmp_path / "nowhere", world=1)
