"""Figures of eckpt.torch (torch.distributed.checkpoint into eckpt), all in one run:

1. The stall of ``dcp.async_save`` (the call's time, until training may go on) and the time until
   the save is complete, into eckpt (standalone store in /dev/shm) and into DCP's own
   FileSystemWriter on a /dev/shm directory, for the first save, a save after a fraction of the
   64 KiB blocks changed, and saves after dense steps (every element written; the step's own
   time is printed too: the first write to a page eckpt tracks takes a fault, which training
   pays); ``torch.save`` of the same tensors to /dev/shm; and, as references measured in the
   same run, the host copy of the whole state (into buffers made beforehand) and of the changed
   blocks alone. One process, no process group, the same tensors for all. With ``--device
   cuda`` the tensors are on the GPU, the references are copies to page-locked host buffers
   (the changed blocks gathered on the GPU first), and every time waits for the GPU's queue.
2. On an emulated cluster (``eckpt run``, 6 ranks on the 3 data nodes of a k=3, m=2 group and a
   spare): the time from a node's loss to every rank training again — examples/python/
   ddp_train.py, a node killed after the second epoch: the loss to the relaunch (the run's
   record) plus the slowest relaunched rank's start to its first step; and the memory a
   checkpoint takes with its redundancy — examples/python/fsdp_state.py, FSDP2 shards saved by
   every rank: the ranks' images plus the group's parity over the images alone ((k+m)/k when
   the data nodes hold equal shares; two replicas take 3×).

Run with the repository's venv (``make test`` installs eckpt and torch there):
``.venv/bin/python scripts/bench-torch.py [--size-mib 512] [--changed 0.01] [--device cuda] [--json]``.
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

import eckpt
import eckpt.torch

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "python"
ECKPT = Path(os.environ.get("ECKPT_BIN", REPO / "target" / "release" / "eckpt"))
BLOCK = 64 << 10
MiB = 1 << 20


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def make_state(size_mib, device):
    """Eight float32 tensors of equal size, like a model's layers."""
    torch.manual_seed(0)
    per = size_mib * MiB // 8 // 4
    return {f"layer{i}": torch.randn(per).to(device) for i in range(8)}


def drained(tensor):
    """Waits for the work queued on `tensor`'s GPU, if it is on one: what a time must include."""
    if tensor.is_cuda:
        torch.cuda.synchronize(tensor.device)


def change_blocks(state, fraction, seed):
    """Changes one float in `fraction` of each tensor's 64 KiB blocks; the changed block indices."""
    generator = torch.Generator().manual_seed(seed)
    changed = {}
    for name, tensor in state.items():
        blocks = (tensor.numel() * 4 + BLOCK - 1) // BLOCK
        count = max(1, int(blocks * fraction))
        chosen = torch.randperm(blocks, generator=generator)[:count]
        tensor.view(-1, BLOCK // 4)[chosen, 0] += 1.0
        changed[name] = chosen
    return changed


def copy_seconds(state, changed=None):
    """The host copy of the whole state into buffers made (and their pages touched) beforehand,
    or of the changed blocks only (the references); page-locked buffers for GPU tensors."""
    buffers = {}
    for name, tensor in state.items():
        shape = tensor.shape if changed is None else (len(changed[name]), BLOCK // 4)
        buffers[name] = torch.zeros(shape, dtype=tensor.dtype, pin_memory=tensor.is_cuda)
    first = next(iter(state.values()))
    drained(first)
    start = time.perf_counter()
    for name, tensor in state.items():
        if changed is None:
            buffers[name].copy_(tensor, non_blocking=tensor.is_cuda)
        else:
            chosen = changed[name].to(tensor.device)
            buffers[name].copy_(tensor.view(-1, BLOCK // 4).index_select(0, chosen), non_blocking=tensor.is_cuda)
    drained(first)
    return time.perf_counter() - start


def step_seconds(state):
    """A dense training step's writes: every element of every tensor updated in place."""
    first = next(iter(state.values()))
    drained(first)
    start = time.perf_counter()
    for tensor in state.values():
        tensor.add_(1.0)
    drained(first)
    return time.perf_counter() - start


def timed_async_save(state, writer):
    """The stall (the call, and the GPU work it queued) and the time until the save is done."""
    first = next(iter(state.values()))
    drained(first)
    start = time.perf_counter()
    future = dcp.async_save(state, storage_writer=writer)
    drained(first)
    stall = time.perf_counter() - start
    future.result()
    return stall, time.perf_counter() - start


def check_saved(state):
    """The latest eckpt save, loaded into zeroed tensors, is the state: a save that staged only
    the changed blocks staged all of them."""
    loaded = {name: torch.zeros_like(tensor) for name, tensor in state.items()}
    dcp.load(loaded, storage_reader=eckpt.torch.StorageReader())
    differ = [name for name in state if not torch.equal(loaded[name], state[name])]
    if differ:
        raise SystemExit(f"bench-torch: the save after a sparse change loads other values for {differ}")


def stall_figures(size_mib, fraction, root, device):
    """Saves of one state: the first; after a sparse change (`fraction` of the blocks, one
    float each); after two dense steps in a row (every element: the first tracked, the second
    after eckpt stopped tracking what changes every time). Into eckpt and into DCP's own
    writer (with its default stager) on a /dev/shm directory."""
    state = make_state(size_mib, device)
    figures = {"state_mib": size_mib, "changed_fraction": fraction}
    figures["copy_all_s"] = min(copy_seconds(state) for _ in range(3))
    figures["step_untracked_s"] = min(step_seconds(state) for _ in range(3))
    os.environ["ECKPT_DIR"] = str(root / "eckpt-store")
    target = root / "dcp-dir"
    runs = {}
    for round_ in ("first", "sparse", "dense", "dense_again"):
        if round_ == "sparse":
            changed = change_blocks(state, fraction, seed=1)
            figures["copy_changed_s"] = min(copy_seconds(state, changed) for _ in range(3))
        elif round_.startswith("dense"):
            figures[f"step_before_{round_}_s"] = step_seconds(state)
        runs[f"eckpt_{round_}"] = timed_async_save(state, eckpt.torch.StorageWriter())
        staged = eckpt.torch._staging(eckpt.torch.checkpointer()).last
        figures[f"eckpt_{round_}_staged_bytes"] = staged["copied"] + staged["copied_whole"]
        figures[f"eckpt_{round_}_stage_s"] = staged["seconds"]
        if round_ == "sparse":
            check_saved(state)
        shutil.rmtree(target, ignore_errors=True)
        runs[f"dcp_dir_{round_}"] = timed_async_save(state, dcp.FileSystemWriter(str(target)))
    drained(next(iter(state.values())))
    start = time.perf_counter()
    torch.save(state, root / "torch.pt")
    figures["torch_save_s"] = time.perf_counter() - start
    for key, (stall, done) in runs.items():
        figures[f"{key}_stall_s"] = stall
        figures[f"{key}_done_s"] = done
    return figures


def eckpt_run(work, ranks, options, *command):
    """`eckpt run` of `command` as `ranks` ranks on a k=3, m=2 group with a spare (64 KiB
    blocks); the run's record."""
    record = work / "record.json"
    done = subprocess.run(
        [
            str(ECKPT), "run", "--nodes", "6", "--spares", "1", "--k", "3", "--m", "2", "--block-size", "64KiB",
            *options, "--record", str(record), "-n", str(ranks), "--", sys.executable, *map(str, command),
        ],
        cwd=work, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if done.returncode != 0:
        raise SystemExit(f"bench-torch: {command[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout, json.loads(record.read_text())


def recovery_figures(work, ranks):
    """The DDP example through the loss of a node after its second epoch: the loss to the
    relaunch (the run's record), and the slowest relaunched rank's start to training."""
    stdout, run = eckpt_run(work, ranks, ["--kill-at", "2:1"], EXAMPLES / "ddp_train.py", "--steps", "30")
    starts = [float(s) for s in re.findall(r"resumed after step \d+ in ([0-9.]+) s", stdout)]
    if len(starts) != ranks:
        raise SystemExit(f"bench-torch: {len(starts)} of {ranks} ranks said they resumed:\n{stdout[-3000:]}")
    loss_to_relaunch = run["recoveries"][0]["loss_to_running_seconds"]
    return {
        "ddp_ranks": ranks,
        "loss_to_relaunch_s": loss_to_relaunch,
        "relaunch_to_training_s": max(starts),
        "loss_to_training_s": loss_to_relaunch + max(starts),
    }


def redundancy_figures(work, ranks, width):
    """FSDP2-sharded state saved by `ranks` ranks, two per data node: the committed epoch's
    images plus its group's parity (m chunks the size of the largest member's padded share)
    over the images alone."""
    _, run = eckpt_run(work, ranks, [], EXAMPLES / "fsdp_state.py", "save", "--width", width)
    epoch = [e for e in run["epochs"] if e["committed"]][-1]
    return {
        "fsdp_ranks": ranks,
        "checkpoint_bytes": epoch["image_bytes"],
        "redundancy_ram": (epoch["image_bytes"] + 2 * epoch["shard_bytes"]) / epoch["image_bytes"],
        "redundancy_ram_expected": (3 + 2) / 3,
        "two_replicas_ram": 3.0,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--changed", type=float, default=0.01)
    parser.add_argument("--root", default="/dev/shm")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where part 1's tensors are")
    parser.add_argument("--no-cluster", action="store_true", help="skip the emulated cluster's figures")
    parser.add_argument("--ranks", type=int, default=6, help="ranks of the cluster runs (6: two per data node)")
    parser.add_argument("--width", type=int, default=1024, help="the FSDP2 model's width (1024: 25 MB of state)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    figures = {"cpu": cpu_model(), "torch": torch.__version__, "device": args.device}
    if args.device == "cuda":
        figures["gpu"] = torch.cuda.get_device_name()
    with tempfile.TemporaryDirectory(dir=args.root, prefix="eckpt-bench-torch-") as root:
        figures.update(stall_figures(args.size_mib, args.changed, Path(root), args.device))
    if not args.no_cluster:
        with tempfile.TemporaryDirectory(prefix="eckpt-bench-torch-") as work:
            figures.update(recovery_figures(Path(work), args.ranks))
        with tempfile.TemporaryDirectory(prefix="eckpt-bench-torch-") as work:
            figures.update(redundancy_figures(Path(work), args.ranks, args.width))
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    for key, value in figures.items():
        print(f"{key:28} {value:.4f}" if isinstance(value, float) else f"{key:28} {value}")


if __name__ == "__main__":
    main()
