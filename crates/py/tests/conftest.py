"""Shared fixtures: every test gets its own store and an environment without ECKPT_* settings."""

import os

import pytest


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    """A developer's ECKPT_DIR or ECKPT_TRACK must not leak into the tests."""
    for name in list(os.environ):
        if name.startswith("ECKPT_") or name in (
            "OMPI_COMM_WORLD_RANK",
            "PMI_RANK",
            "SLURM_PROCID",
            "SLURM_JOB_ID",
            "PBS_JOBID",
            "LSB_JOBID",
        ):
            monkeypatch.delenv(name)


@pytest.fixture
def store(tmp_path):
    """A fresh checkpoint store directory."""
    return tmp_path / "store"
