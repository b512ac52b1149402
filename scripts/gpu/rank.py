"""A GPU rank for `eckpt run` (scripts/gpu-check.sh, part 3): 64 MiB of float32 on the GPU
(every rank on the same GPU), a few blocks changed per step, a checkpoint per step. At restart
it checks that the restored tensor is exactly what its step's computation gives (recomputed
from the seed), and at the end it prints the tensor's checksum, which must not depend on
whether nodes were lost on the way."""

import hashlib
import sys
import time

import numpy as np
import torch

import eckpt

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
ck = eckpt.Checkpointer()
rank = ck.rank


def initial():
    torch.manual_seed(100 + rank)
    return torch.randn(16 << 20, device="cuda")


def advance(w, step):
    # A few 64 KiB blocks change per step, at places that depend on the step.
    for k in range(4):
        at = ((step * 7919 + k * 104729) % (w.numel() // 16384)) * 16384
        w[at : at + 100] = w[at : at + 100] * 0.5 + step


def expected(steps):
    w = initial()
    for s in range(steps):
        advance(w, s)
    return w


w = initial()
step = np.zeros(1, dtype=np.int64)
ck.protect("w", w)
ck.protect("step", step)
epoch = ck.restart()
if epoch is not None:
    assert torch.equal(w, expected(int(step[0]))), f"rank {rank}: restored tensor is not step {step[0]}'s"
    print(f"[{rank}] restarted from epoch {epoch} at step {step[0]}: GPU tensor verified", flush=True)
while step[0] < STEPS:
    advance(w, int(step[0]))
    step[0] += 1
    ck.checkpoint()
    ck.wait()
    time.sleep(0.3)
assert torch.equal(w, expected(STEPS)), f"rank {rank}: the final tensor is not step {STEPS}'s"
digest = hashlib.sha256(w.cpu().numpy().tobytes()).hexdigest()[:16]
print(f"[{rank}] final state verified, checksum {digest}", flush=True)
