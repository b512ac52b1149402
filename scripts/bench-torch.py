"""Figures of eckpt.torch (torch.distributed.checkpoint into eckpt), all in one run:

1. The stall of ``dcp.async_save`` (the call's time, until training may go on) and the time until
   the save is complete, into eckpt (standalone store in /dev/shm) and into DCP's own
   FileSystemWriter on a /dev/shm directory, for the first save and for a save after a fraction
   of the 64 KiB blocks changed; ``torch.save`` of the same tensors to /dev/shm; and, as
   references measured in the same run, the host copy of the whole state and of the changed
   blocks alone. One process, no process group, the same tensors for all.
2. On an emulated cluster (``eckpt run``, 6 ranks of examples/python/ddp_train.py on the 3
   data nodes of a k=3, m=2 group, one spare, a node killed after the second epoch): the memory
   the committed checkpoint takes with its redundancy — the ranks' images plus the group's
   parity — over the images alone ((k+m)/k when the data nodes hold equal shares; two replicas
   take 3×); and the time from the node's loss to every rank training again (the loss to the
   relaunch, from the run's record, plus the slowest relaunched rank's start to its first step).

Run with the repository's venv (``make test`` installs eckpt and torch there):
``.venv/bin/python scripts/bench-torch.py [--size-mib 512] [--changed 0.01] [--json]``.
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
ECKPT = Path(os.environ.get("ECKPT_BIN", REPO / "target" / "release" / "eckpt"))
BLOCK = 64 << 10
MiB = 1 << 20


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def make_state(size_mib):
    """Eight float32 tensors of equal size, like a model's layers."""
    torch.manual_seed(0)
    per = size_mib * MiB // 8 // 4
    return {f"layer{i}": torch.randn(per) for i in range(8)}


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
    """The host copy of the whole state, or of the changed blocks only (the reference)."""
    start = time.perf_counter()
    for name, tensor in state.items():
        blocks = tensor.view(-1, BLOCK // 4)
        if changed is None:
            blocks.clone()
        else:
            blocks.index_select(0, changed[name])
    return time.perf_counter() - start


def timed_async_save(state, writer):
    start = time.perf_counter()
    future = dcp.async_save(state, storage_writer=writer)
    stall = time.perf_counter() - start
    future.result()
    return stall, time.perf_counter() - start


def stall_figures(size_mib, fraction, root):
    state = make_state(size_mib)
    figures = {"state_mib": size_mib, "changed_fraction": fraction}
    figures["copy_all_s"] = min(copy_seconds(state) for _ in range(3))
    store = root / "eckpt-store"
    os.environ["ECKPT_DIR"] = str(store)
    target = root / "dcp-dir"
    runs = {}
    for round_ in ("first", "changed"):
        if round_ == "changed":
            changed = change_blocks(state, fraction, seed=1)
            figures["copy_changed_s"] = min(copy_seconds(state, changed) for _ in range(3))
        runs[f"eckpt_{round_}"] = timed_async_save(state, eckpt.torch.StorageWriter())
        shutil.rmtree(target, ignore_errors=True)
        runs[f"dcp_dir_{round_}"] = timed_async_save(state, dcp.FileSystemWriter(str(target)))
    start = time.perf_counter()
    torch.save(state, root / "torch.pt")
    figures["torch_save_s"] = time.perf_counter() - start
    for key, (stall, done) in runs.items():
        figures[f"{key}_stall_s"] = stall
        figures[f"{key}_done_s"] = done
    return figures


def cluster_figures(work, ranks):
    """The DDP example through a node loss on an emulated cluster (k=3, m=2, a spare)."""
    record = work / "record.json"
    command = [
        str(ECKPT), "run", "--nodes", "6", "--spares", "1", "--k", "3", "--m", "2", "--block-size", "64KiB",
        *["--kill-at", "2:1", "--record", str(record), "-n", str(ranks), "--"],
        sys.executable, str(REPO / "examples" / "python" / "ddp_train.py"), "--steps", "30",
    ]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if done.returncode != 0:
        raise SystemExit(f"bench-torch: the DDP run failed:\n{done.stderr[-3000:]}")
    run = json.loads(record.read_text())
    recovery = run["recoveries"][0]
    starts = [float(s) for s in re.findall(r"resumed after step \d+ in ([0-9.]+) s", done.stdout)]
    if len(starts) != ranks:
        raise SystemExit(f"bench-torch: {len(starts)} of {ranks} ranks said they resumed:\n{done.stdout[-3000:]}")
    # Redundancy: the committed epoch's images on the data nodes plus the parity of its group
    # (m chunks of the largest member's padded share) over the images alone.
    epoch = [e for e in run["epochs"] if e["committed"]][-1]
    return {
        "ranks": ranks,
        "loss_to_relaunch_s": recovery["loss_to_running_seconds"],
        "relaunch_to_training_s": max(starts),
        "loss_to_training_s": recovery["loss_to_running_seconds"] + max(starts),
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
    parser.add_argument("--no-cluster", action="store_true", help="skip the emulated cluster's figures")
    parser.add_argument("--ranks", type=int, default=6, help="ranks of the DDP run (6: two per data node)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    figures = {"cpu": cpu_model(), "torch": torch.__version__}
    with tempfile.TemporaryDirectory(dir=args.root, prefix="eckpt-bench-torch-") as root:
        figures.update(stall_figures(args.size_mib, args.changed, Path(root)))
    if not args.no_cluster:
        with tempfile.TemporaryDirectory(prefix="eckpt-bench-torch-") as work:
            figures.update(cluster_figures(Path(work), args.ranks))
    if args.json:
        print(json.dumps(figures, indent=1))
        return
    for key, value in figures.items():
        print(f"{key:28} {value:.4f}" if isinstance(value, float) else f"{key:28} {value}")


if __name__ == "__main__":
    main()
