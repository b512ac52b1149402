"""The README's torch training loop, run for real (scripts/gpu-check.sh, part 5): a small MLP
trained by SGD on the GPU, protected with the README's five lines. `train_loop.py DIR STEPS
[KILL_AFTER]` trains up to STEPS (SIGKILLing itself right after checkpoint KILL_AFTER) and
prints a digest of the final weights; a run killed and rerun must end with the digest of a run
never killed."""

import hashlib
import os
import signal
import sys

# Bitwise-reproducible training, so that the killed run can be compared with the clean one.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np
import torch

import eckpt

directory, steps = sys.argv[1], int(sys.argv[2])
kill_after = int(sys.argv[3]) if len(sys.argv) > 3 else None
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)


def train_step(model, batch):
    x, y = batch
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


def batch_of(step):
    g = torch.Generator(device="cuda").manual_seed(1000 + step)
    return torch.randn(256, 1024, device="cuda", generator=g), torch.randn(256, 1024, device="cuda", generator=g)


class Batches:
    def __init__(self, step):
        self.step = step

    def __next__(self):
        return batch_of(int(self.step[0]))


# The README's five lines, with `batches` following the restored step.
ck = eckpt.Checkpointer(dir=directory, rank=0, background=True)
for name, tensor in model.state_dict().items(): ck.protect(name, tensor)   # on the GPU, in place
step = np.zeros(1, dtype=np.int64); ck.protect("step", step)
ck.restart()                                        # weights and step back, if checkpointed
batches = Batches(step)
while step[0] < steps:
    train_step(model, next(batches)); step[0] += 1; ck.checkpoint()
    if step[0] == kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
ck.wait()
weights = b"".join(t.cpu().numpy().tobytes() for t in model.state_dict().values())
print(f"trained to step {step[0]}: weights {hashlib.sha256(weights).hexdigest()[:16]}")
