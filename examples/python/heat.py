#!/usr/bin/env python3
"""2-D heat diffusion with eckpt: kill it at any moment, rerun it, get the same answer.

A square plate with a few hot spots and cold edges is relaxed by the explicit 5-point stencil
for ``--steps`` steps. The grid and the step counter live in protected numpy arrays; every
``--every`` steps the program checkpoints. On start it calls ``restart()``: after a crash it
resumes from the last checkpointed step, with the grid as it was then. Each step appends one
line to ``--log`` (protected as an APPEND file, so a restart cuts off the lines written after
the checkpoint and none is written twice).

The last line printed is ``sha256 <hex>`` of the final grid and step counter: an interrupted
and restarted run prints the same as an uninterrupted one.

    python3 examples/python/heat.py --dir /tmp/heat-ck --log /tmp/heat.log
"""

import argparse
import hashlib
import os
import signal
import time

import numpy as np

import eckpt


def initial_grid(n):
    """Cold edges (0), a warm interior (1) and three hot spots (100), the same every time."""
    grid = np.ones((n, n))
    grid[0, :] = grid[-1, :] = grid[:, 0] = grid[:, -1] = 0.0
    for y, x in ((n // 4, n // 4), (n // 2, 3 * n // 4), (3 * n // 4, n // 3)):
        grid[y - 2 : y + 3, x - 2 : x + 3] = 100.0
    return grid


def step_once(grid, alpha):
    """One explicit diffusion step in place (the right side is evaluated before the update)."""
    inner = grid[1:-1, 1:-1]
    inner += alpha * (
        grid[:-2, 1:-1] + grid[2:, 1:-1] + grid[1:-1, :-2] + grid[1:-1, 2:] - 4.0 * inner
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps to run (default 300)")
    parser.add_argument("--size", type=int, default=128, help="grid side (default 128)")
    parser.add_argument("--every", type=int, default=10, help="checkpoint every K steps")
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="checkpoint by time instead: snapshot() every step (ECKPT_INTERVAL says how often)",
    )
    parser.add_argument("--dir", help="checkpoint store (default: ECKPT_DIR)")
    parser.add_argument("--rank", type=int, help="rank (default: ECKPT_RANK or 0)")
    parser.add_argument(
        "--log", default="heat.%r.log", help="per-step log, an APPEND file (%%r: the rank)"
    )
    parser.add_argument(
        "--sleep", type=float, default=0.0, help="seconds to sleep per step (to watch or kill it)"
    )
    parser.add_argument(
        "--kill-at",
        type=int,
        help="SIGKILL this process once step KILL_AT is logged (and checkpointed, if due): "
        "a crash at an exact point, for tests",
    )
    args = parser.parse_args()

    grid = np.zeros((args.size, args.size))
    step = np.zeros(1, dtype=np.int64)
    ck = eckpt.Checkpointer(dir=args.dir, rank=args.rank)
    args.log = args.log.replace("%r", str(ck.rank))
    ck.protect("grid", grid)
    ck.protect("step", step)
    # An APPEND file must exist to be checkpointed; opening it for append creates it.
    open(args.log, "a").close()
    ck.protect_file(args.log, eckpt.APPEND)

    epoch = ck.restart()
    if epoch is None:
        grid[...] = initial_grid(args.size)
        print("fresh start", flush=True)
    else:
        print(f"resumed from epoch {epoch} at step {step[0]}", flush=True)

    # Opened after restart(), which may have cut the file back.
    with open(args.log, "a") as log:
        while step[0] < args.steps:
            step_once(grid, alpha=0.2)
            step[0] += 1
            log.write(f"step {step[0]} total {grid.sum():.17g}\n")
            # On disk before the checkpoint records the file's length.
            log.flush()
            if args.snapshot:
                ck.snapshot()
            elif step[0] % args.every == 0:
                ck.checkpoint()
            if step[0] == args.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.sleep:
                time.sleep(args.sleep)

    digest = hashlib.sha256(grid.tobytes() + step.tobytes()).hexdigest()
    print(f"sha256 {digest}")


if __name__ == "__main__":
    main()
