"""Byte-exact restores of GPU tensors after SIGKILL (scripts/gpu-check.sh, part 1).

`write DIR RECORD`: protects a torch tensor, a torch tensor whose device address is not 8-byte
aligned (a view at offset 3) and a cupy array whose length is not a multiple of 8, then takes
epochs of scattered changes — single elements, the last byte, two elements swapped (a sum of
words would not see it), whole slices — in the background mode, recording the SHA-256 of each
array as it was at each checkpoint call. After the last call it SIGKILLs itself, so that the
last epoch may or may not have committed.

`restart DIR RECORD`: a new process protects fresh arrays, restarts, and checks that every
array equals what the record says the restored epoch held, byte for byte.
"""

import hashlib
import json
import os
import signal
import sys

import cupy
import numpy as np
import torch

import eckpt

EPOCHS = 8
BLOCK = 64 << 10


def arrays():
    torch.manual_seed(1)
    w = torch.randn(12 << 20, device="cuda")  # 48 MiB of float32
    base = torch.zeros((5 << 20) + 3, dtype=torch.uint8, device="cuda")
    u = base[3:]  # contiguous, but its address is 3 bytes past an aligned one
    assert u.data_ptr() % 8 == 3
    c = ((cupy.arange((33 << 20) + 777, dtype=cupy.uint64) * 2654435761) >> 7).astype(cupy.uint8)
    return {"w": w, "u": u, "c": c}, base


def digest(a):
    if isinstance(a, torch.Tensor):
        data = a.cpu().contiguous().view(torch.uint8).numpy().tobytes()
    else:
        data = cupy.asnumpy(a).tobytes()
    return hashlib.sha256(data).hexdigest()


def change(state, rng):
    w, u, c = state["w"], state["u"], state["c"]
    for i in rng.integers(0, w.numel(), size=40):
        w[int(i)] += 1.0
    i, j = (int(x) for x in rng.integers(0, w.numel(), size=2))
    w[i], w[j] = w[j].clone(), w[i].clone()  # a swap: the same words, in other places
    start = int(rng.integers(0, u.numel() - 300_000))
    u[start : start + 300_000] += 1
    u[-1] += 7
    c[int(rng.integers(0, c.size))] ^= 0x5A
    c[-1] ^= 0x01
    torch.cuda.synchronize()
    cupy.cuda.runtime.deviceSynchronize()


def write(directory, record):
    state, _base = arrays()
    ck = eckpt.Checkpointer(dir=directory, rank=0, background=True)
    for name, a in state.items():
        ck.protect(name, a)
    assert ck.restart() is None
    rng = np.random.default_rng(3)
    hashes = {}
    for epoch in range(1, EPOCHS + 1):
        change(state, rng)
        hashes[epoch] = {name: digest(a) for name, a in state.items()}
        with open(record + ".tmp", "w") as f:
            json.dump(hashes, f)
        os.replace(record + ".tmp", record)
        assert ck.checkpoint() == epoch
    # Epoch EPOCHS may still be being written: die now.
    os.kill(os.getpid(), signal.SIGKILL)


def restart(directory, record):
    hashes = json.load(open(record))
    state, _base = arrays()
    for a in state.values():
        a.fill(0) if isinstance(a, cupy.ndarray) else a.zero_()
    ck = eckpt.Checkpointer(dir=directory, rank=0)
    for name, a in state.items():
        ck.protect(name, a)
    epoch = ck.restart()
    assert epoch in (EPOCHS - 1, EPOCHS), f"restarted from epoch {epoch}"
    got = {name: digest(a) for name, a in state.items()}
    assert got == hashes[str(epoch)], f"epoch {epoch}: restored {got}, checkpointed {hashes[str(epoch)]}"
    print(f"restore: epoch {epoch} of {EPOCHS} (the last call was SIGKILLed), torch, unaligned torch view "
          f"and cupy arrays byte-exact: OK")
    # Protecting what cannot be restored into is refused with a clear error.
    try:
        ck.protect("cpu", torch.zeros(10))
        raise AssertionError("a CPU tensor was accepted as GPU memory")
    except TypeError as e:
        print(f"refused as expected: {e}")


if __name__ == "__main__":
    {"write": write, "restart": restart}[sys.argv[1]](sys.argv[2], sys.argv[3])
