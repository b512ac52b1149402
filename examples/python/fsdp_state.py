"""One rank of an FSDP2-sharded model and its Adam state (gloo, CPU), through eckpt.torch: mode
`save` trains three steps and saves them with ``dcp.async_save`` while it trains a fourth; mode
`load` loads into however many ranks run it (DCP reshards). Rank 0 prints the SHA-256 of the full (unsharded) state saved or loaded, to compare them::

    eckpt run --dir D --keep -n 4 -- python3 examples/python/fsdp_state.py save

and then 3 torch.distributed ranks (torchrun's variables) with ``ECKPT_CLUSTER=D ECKPT_WORLD=3``
running it with ``load`` (crates/py/tests/test_torch.py does, after losing a node for good).

``--width`` sets the model's size (two square layers of that width and a narrow one).
"""

import argparse
import hashlib

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
import eckpt.torch

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["save", "load"])
parser.add_argument("--width", type=int, default=40)
args = parser.parse_args()
mode = args.mode
torch.set_num_threads(1)
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
torch.manual_seed(0)
width = args.width
model = torch.nn.Sequential(torch.nn.Linear(24, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 7))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(step):
    x = torch.Generator().manual_seed(step * 10 + dist.get_rank())
    model(torch.randn(5, 24, generator=x)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def print_digest():
    """Rank 0 prints the SHA-256 of the full (unsharded) model and optimizer state."""
    full_model, full_optim = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        digest = hashlib.sha256()
        for key in sorted(full_model):
            digest.update(key.encode()); digest.update(full_model[key].numpy().tobytes())
        for key in sorted(full_optim["state"]):
            for name in sorted(full_optim["state"][key]):
                digest.update(f"{key}.{name}".encode()); digest.update(full_optim["state"][key][name].numpy().tobytes())
        print(f"state {digest.hexdigest()}", flush=True)


if mode == "save":
    for step in range(3):
        train_step(step)
    print_digest()
    model_state, optim_state = get_state_dict(model, optimizer)
    # The save's collectives run on a group of their own, beside the training's.
    saves = dist.new_group(backend="gloo")
    future = dcp.async_save({"model": model_state, "optim": optim_state}, storage_writer=eckpt.torch.StorageWriter(), process_group=saves)
    # Training goes on while the save runs: the checkpoint keeps the state as it was staged.
    train_step(3)
    future.result()
else:
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, storage_reader=eckpt.torch.StorageReader())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    print_digest()
# Every rank done with every collective before any tears its connections down: a rank that
# closes them while a peer still reads from them can abort that peer (gloo).
dist.barrier()
dist.destroy_process_group()
