"""A DDP training loop that checkpoints through torch.distributed.checkpoint into eckpt.

Run it under `eckpt run`, which gives every rank torch.distributed's variables (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, …) and relaunches the job after a node loss; the
relaunched ranks resume from the last committed epoch::

    eckpt run --nodes 6 --spares 1 --k 3 --m 2 -n 4 -- python3 examples/python/ddp_train.py

Deterministic (gloo, seeded data, one thread per rank): each step prints its loss bitwise
(``float.hex``), and rank 0 prints the final weights' SHA-256, so a run that lost a node can be
compared with one that did not. ``--device cuda`` trains on the GPUs instead (rank r on GPU
r mod count, so ranks may share one; gloo still sums the gradients, which NCCL cannot do for
ranks on the same GPU), with torch's deterministic algorithms.
"""

import time

started = time.perf_counter()

import argparse  # noqa: E402 (the clock starts before the imports, torch's included)
import hashlib  # noqa: E402
import os  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

import eckpt.torch  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--every", type=int, default=5, help="checkpoint every this many steps")
parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")  # env://, from eckpt run
rank = dist.get_rank()
device = torch.device("cpu")
if args.device == "cuda":
    # cuBLAS is deterministic with a fixed workspace, set before its first use.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
# The background saves' collectives run on a group of their own, beside the training's.
saves = dist.new_group(backend="gloo")

torch.manual_seed(0)
layers = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
model = DistributedDataParallel(layers, device_ids=[device] if device.type == "cuda" else None)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
# DDP lays its gradient buckets out anew after its first backward pass, and the layout decides
# the order in which gloo sums each gradient across ranks. One pass that changes nothing makes a
# relaunched attempt sum in the same order as the steps before it, so its steps stay bitwise.
(model(torch.zeros(1, 32, device=device)) * 0).sum().backward()
optimizer.zero_grad()


def state(step):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optimizer_state, "step": step}


start = 0
if eckpt.torch.checkpointer().latest_epoch() is not None:
    restored = state(0)
    dcp.load(restored, storage_reader=eckpt.torch.StorageReader())
    set_state_dict(model, optimizer, model_state_dict=restored["model"], optim_state_dict=restored["optim"])
    start = restored["step"]
    # From the process's start: what a relaunch adds to the loss before training goes on.
    print(f"resumed after step {start} in {time.perf_counter() - started:.3f} s", flush=True)

saving = None
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 32, generator=data).to(device)
    loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item().hex()}", flush=True)
    if step % args.every == 0:
        if saving is not None:
            saving.result()
        saving = dcp.async_save(state(step), storage_writer=eckpt.torch.StorageWriter(), process_group=saves)
if saving is not None:
    saving.result()
if rank == 0:
    weights = b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())
    print(f"weights {hashlib.sha256(weights).hexdigest()}", flush=True)
# Every rank done with every collective before any tears its connections down: a rank that
# closes them while a peer still reads from them can abort that peer (gloo).
dist.barrier()
dist.destroy_process_group()
