"""eckpt.torch's staging for dcp.async_save: what a save writes is the state as it was when
async_save returned, however the training goes on meanwhile, while a stage copies only what
changed; tensors that change whole are copied whole, and tracked again later; a stage never
overwrites what a save in flight still reads."""

import pytest
import torch
import torch.distributed.checkpoint as dcp

import eckpt
import eckpt._torch_staging as staging
import eckpt.torch

MiB = 1 << 20


def snapshot(state):
    return {key: value.clone() if torch.is_tensor(value) else value for key, value in state.items()}


def zeros_like(state):
    return {key: torch.zeros(value.shape, dtype=value.dtype) if torch.is_tensor(value) else 0 for key, value in state.items()}


def test_async_save_writes_the_state_as_it_was_when_the_call_returned(store, monkeypatch):
    monkeypatch.setenv("ECKPT_DIR", str(store))
    torch.manual_seed(0)
    big = torch.randn(MiB)  # 4 MiB: tracked page by page
    state = {
        "big": big,
        "tied": big,  # the same tensor under two names (tied weights)
        "small": torch.randn(100),  # less than a page: compared by hash
        "transposed": torch.randn(64, 48).t(),  # not contiguous: copied whole
        "step": 0,
    }
    changes = [
        lambda: None,
        lambda: state["big"].view(-1, 1024)[::97, 5].add_(1.0),  # sparse: one float per 97 pages
        lambda: [state[key].add_(0.5) for key in ("big", "small", "transposed")],  # dense
        lambda: state.update(small=torch.randn(100) + 7),  # a new tensor object under a name
    ]
    for step, change in enumerate(changes):
        change()
        state["step"] = step
        expected = snapshot(state)
        future = dcp.async_save(state, storage_writer=eckpt.torch.StorageWriter())
        # Training goes on while the save runs: none of this may reach the checkpoint.
        for key in ("big", "small", "transposed"):
            state[key].add_(1000.0)
        future.result()
        for key in ("big", "small", "transposed"):
            state[key].sub_(1000.0)
        loaded = zeros_like(state)
        dcp.load(loaded, storage_reader=eckpt.torch.StorageReader())
        for key, value in expected.items():
            if torch.is_tensor(value):
                assert torch.equal(loaded[key], value), (step, key)
            else:
                assert loaded[key] == value, (step, key)


def test_a_tensor_rewritten_every_save_is_copied_whole_then_tracked_again():
    stage = staging.Staging()
    tensor = torch.randn(MiB)
    state = {"weight": tensor}

    def staged_once():
        copy, number = stage.stage(state, timeout=5)
        stage.release(number)
        assert torch.equal(copy["weight"], tensor)
        return stage.last

    first = staged_once()
    if first["kernel_tracked"] == 0:
        pytest.skip("the kernel does not track writes here (userfaultfd write-protect)")
    assert first["copied"] == 4 * MiB and first["copied_whole"] == 0
    tensor[MiB // 2] += 1.0
    assert staged_once()["copied"] == 4096  # one page
    tensor.add_(1.0)
    assert staged_once()["copied"] == 4 * MiB  # tracked: every page written, every page copied
    for _ in range(staging.RETRACK_AFTER_SAVES - 1):
        tensor.add_(1.0)
        demoted = staged_once()
        assert demoted["copied_whole"] == 4 * MiB and demoted["mirrored"] == 0, demoted
    tensor.add_(1.0)
    retracked = staged_once()
    assert retracked["mirrored"] == 4 * MiB and retracked["copied_whole"] == 0, retracked
    # Quiet now: a float in each of 3 pages, in the page-aligned middle of the tensor.
    for at in (MiB // 4, MiB // 2, MiB // 2 + 1):
        tensor[at] += 1.0
    assert staged_once()["copied"] == 2 * 4096


def test_a_stage_waits_for_the_previous_save_then_says_why():
    stage = staging.Staging()
    state = {"weight": torch.randn(1000)}
    copy, first = stage.stage(state, timeout=5)
    with pytest.raises(eckpt.Error, match="the previous async_save has not written its staged state after 0.2 s"):
        stage.stage(state, timeout=0.2)
    state["weight"].add_(1.0)
    assert not torch.equal(copy["weight"], state["weight"]), "the refused stage left the staged copy alone"
    stage.release(first)
    _, second = stage.stage(state, timeout=5)
    stage.release(first)  # a release of an older stage frees nothing
    with pytest.raises(eckpt.Error, match="has not written"):
        stage.stage(state, timeout=0.2)
    stage.release(second)
    stage.stage(state, timeout=5)


@pytest.fixture
def one_rank_group():
    """A torch.distributed group of this process alone (gloo), for DTensors."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_dtensor_is_staged_as_a_dtensor_over_a_kept_copy(one_rank_group):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh("cpu", (1,))
    local = torch.randn(512, 256)
    sharded = DTensor.from_local(local, mesh, [Shard(0)], run_check=False)
    stage = staging.Staging()
    staged, number = stage.stage({"layer": {"weight": sharded}}, timeout=5)
    copy = staged["layer"]["weight"]
    assert isinstance(copy, DTensor) and copy.placements == sharded.placements and copy.shape == sharded.shape
    assert copy.to_local().data_ptr() != local.data_ptr()
    expected = local.clone()
    local.add_(1.0)  # training goes on: the staged copy keeps the state as it was
    assert torch.equal(copy.to_local(), expected)
    stage.release(number)
    staged, _ = stage.stage({"layer": {"weight": sharded}}, timeout=5)
    assert torch.equal(staged["layer"]["weight"].to_local(), local)


def test_a_writer_refuses_to_be_sent_to_another_process():
    """DCP's process executor pickles the writer; the copies it staged stay in this process."""
    import pickle

    with pytest.raises(eckpt.Error, match="not AsyncCheckpointerType.PROCESS"):
        pickle.dumps(eckpt.torch.StorageWriter())
