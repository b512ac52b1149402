"""The figures of docs/PERFORMANCE.md's GPU section (scripts/gpu-check.sh, part 2), all in one
run on the same tensors: 8 GiB of float32 tensors (eight of 1 GiB, like a model's layers).

- References: a pinned device-to-host copy and a host-to-device copy of all of it (torch).
- eckpt, standalone store in /dev/shm, background mode: the stall of the first (full)
  checkpoint and of checkpoints after 1 % of the 64 KiB blocks changed (the call's time: scan
  on the GPU, copy of the changed blocks; the store write runs behind), and the time until each
  epoch is committed; then a restart into zeroed tensors, checked equal to the saved ones.
- torch.save of the same tensors to /dev/shm, and torch.distributed.checkpoint.save (one
  process, no process group).

Prints one line per figure and, last, one JSON object (`figures: {...}`).
"""

import json
import os
import shutil
import statistics
import sys
import time

import numpy as np
import torch

import eckpt

GiB = 1 << 30
BLOCK = 64 << 10
TENSORS = int(os.environ.get("GPU_CHECK_TENSORS", "8"))
ROOT = sys.argv[1] if len(sys.argv) > 1 else "/dev/shm/eckpt-gpu-check"
figures = {}


def say(key, value, text=None):
    figures[key] = value
    if text:
        print(text, flush=True)


def timed(f):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = f()
    torch.cuda.synchronize()
    return time.perf_counter() - t, out


shutil.rmtree(ROOT, ignore_errors=True)
os.makedirs(ROOT)
torch.manual_seed(0)
tensors = [torch.randn(GiB // 4, device="cuda") for _ in range(TENSORS)]
total = TENSORS * GiB
say("bytes", total, f"state: {TENSORS} tensors of 1 GiB on {torch.cuda.get_device_name()}")

# References: the bus, both ways, pinned.
pinned = [torch.empty(GiB // 4, pin_memory=True) for _ in range(TENSORS)]
for _ in range(2):  # the first pass warms the pages up
    d2h, _ = timed(lambda: [h.copy_(t, non_blocking=True) for h, t in zip(pinned, tensors)])
    h2d, _ = timed(lambda: [t.copy_(h, non_blocking=True) for h, t in zip(pinned, tensors)])
say("pinned_d2h_gbps", total / d2h / 1e9, f"pinned device-to-host copy: {total / d2h / 1e9:.1f} GB/s")
say("pinned_h2d_gbps", total / h2d / 1e9, f"pinned host-to-device copy: {total / h2d / 1e9:.1f} GB/s")
del pinned

# eckpt.
store = os.path.join(ROOT, "eckpt")
ck = eckpt.Checkpointer(dir=store, rank=0, background=True)
protect_s, _ = timed(lambda: [ck.protect(f"layer{i}", t) for i, t in enumerate(tensors)])
say("protect_s", protect_s, f"eckpt protect (pinned staging allocated): {protect_s:.2f} s")
stall, _ = timed(ck.checkpoint)
commit, _ = timed(ck.wait)
say("full_stall_s", stall, f"eckpt first checkpoint (full): stall {stall * 1e3:.0f} ms = {total / stall / 1e9:.1f} GB/s "
    f"({total / stall / 1e9 / figures['pinned_d2h_gbps']:.2f} x pinned D2H); committed {commit:.2f} s later")
say("full_commit_s", commit)

rng = np.random.default_rng(1)
blocks_per_tensor = GiB // BLOCK
stalls, commits = [], []
for round in range(5):
    # 1 % of the blocks, each touched once (one float in it changes).
    chosen = rng.choice(TENSORS * blocks_per_tensor, size=TENSORS * blocks_per_tensor // 100, replace=False)
    for t_index in range(TENSORS):
        mine = chosen[(chosen // blocks_per_tensor) == t_index] % blocks_per_tensor
        offsets = torch.as_tensor(mine * (BLOCK // 4) + round, device="cuda")
        tensors[t_index].index_add_(0, offsets, torch.ones(len(mine), device="cuda"))
    s, _ = timed(ck.checkpoint)
    c, _ = timed(ck.wait)
    stalls.append(s)
    commits.append(c)
stall = statistics.median(stalls)
say("delta_1pct_stall_ms", stall * 1e3, f"eckpt checkpoint, 1 % of blocks changed: stall {stall * 1e3:.1f} ms median "
    f"(min {min(stalls) * 1e3:.1f}, max {max(stalls) * 1e3:.1f}); committed {statistics.median(commits) * 1e3:.0f} ms later")
say("delta_1pct_commit_ms", statistics.median(commits) * 1e3)
expected = [t.clone() for t in tensors]
del ck

for t in tensors:
    t.zero_()
ck = eckpt.Checkpointer(dir=store, rank=0)
for i, t in enumerate(tensors):
    ck.protect(f"layer{i}", t)
restart_s, epoch = timed(ck.restart)
same = all(torch.equal(a, b) for a, b in zip(tensors, expected))
assert same, "the restored tensors differ from the checkpointed ones"
say("restart_s", restart_s, f"eckpt restart of epoch {epoch} (a full image and its deltas): {restart_s * 1e3:.0f} ms = "
    f"{total / restart_s / 1e9:.1f} GB/s ({total / restart_s / 1e9 / figures['pinned_h2d_gbps']:.2f} x pinned H2D), byte-exact")
del ck, expected
shutil.rmtree(store)

# What users reach for today, on the same tensors.
state = {f"layer{i}": t for i, t in enumerate(tensors)}
path = os.path.join(ROOT, "torch.pt")
save_s, _ = timed(lambda: torch.save(state, path))
say("torch_save_s", save_s, f"torch.save to /dev/shm: {save_s:.2f} s")
os.remove(path)
try:
    import torch.distributed.checkpoint as dcp

    dcp_s, _ = timed(lambda: dcp.save(state, checkpoint_id=os.path.join(ROOT, "dcp"), no_dist=True))
    say("dcp_save_s", dcp_s, f"torch.distributed.checkpoint.save (one process): {dcp_s:.2f} s")
except Exception as e:  # report, do not hide the other figures
    print(f"torch.distributed.checkpoint.save failed: {e!r}")
shutil.rmtree(ROOT, ignore_errors=True)
print("figures:", json.dumps(figures, sort_keys=True))
