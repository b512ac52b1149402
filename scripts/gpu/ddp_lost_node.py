"""examples/python/ddp_train.py on the GPU (scripts/gpu-check.sh): 2 DDP ranks sharing the GPU,
under `eckpt run` on 4 local nodes (k = 2, m = 2), saving with ``dcp.async_save`` into eckpt
every 5 steps — once losing nothing, once losing a node with its store after the second epoch.
The second run must be recovered, relaunched and resumed from a committed epoch, and print
every step's loss and the final weights bitwise as the first did.

Run from a directory of its own: ``python3 ddp_lost_node.py WORK``; `eckpt` on PATH (the
carried build with fault injection, for ``--kill-at``). Exit status 0 when the runs agree.
``DDP_DEVICE=cpu`` trains on the CPU instead, to try the script on a machine without a GPU.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STEPS, EVERY = 30, 5


def run(work, *extra):
    """One `eckpt run` of the loop: its output by rank, its stderr and its time."""
    work.mkdir(parents=True)
    command = [
        "eckpt", "run", "--nodes", "4", "--k", "2", "--m", "2", "--liveness", "2s", *extra, "-n", "2", "--",
        sys.executable, str(REPO / "examples" / "python" / "ddp_train.py"),
        "--device", os.environ.get("DDP_DEVICE", "cuda"), "--steps", str(STEPS), "--every", str(EVERY),
    ]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"ddp_lost_node: eckpt run {' '.join(extra)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    lines = {}
    for line in done.stdout.splitlines():
        found = re.match(r"\[(\d+)\] (.*)", line)
        if found:
            lines.setdefault(int(found[1]), []).append(found[2])
    return lines, done.stderr, seconds


def main():
    work = Path(sys.argv[1])
    reference, _, clean_s = run(work / "reference")
    print(f"never lost a node: {clean_s:.1f} s, {[line for line in reference.get(0, []) if line.startswith('weights ')]}")
    lost, stderr, lost_s = run(work / "lost", "--kill-at", "2:1")
    for line in stderr.splitlines():
        if re.match(r"eckpt run: (lost|recovered|relaunched)", line):
            print(line)
    recovered = re.search(r"recovery of epoch (\d+) \(lost ", stderr)
    if not recovered:
        sys.exit(f"ddp_lost_node: no recovery in the run that lost a node:\n{stderr[-3000:]}")
    resumed_after = EVERY * int(recovered[1])
    failures = []
    for rank in range(2):
        resumed = [line for line in lost.get(rank, []) if line.startswith("resumed after ")]
        print(f"rank {rank}: {resumed}")
        if not any(line.startswith(f"resumed after step {resumed_after} in ") for line in resumed):
            failures.append(f"rank {rank} did not resume after step {resumed_after}")
        expected = {line for line in reference.get(rank, []) if line.startswith("step ")}
        got = {line for line in lost.get(rank, []) if line.startswith("step ")}
        if len(expected) != STEPS or got != expected:
            failures.append(f"rank {rank}: {len(expected)} steps without a loss, losses differ: {sorted(got ^ expected)[:4]}")
    weights = [line for line in lost.get(0, []) if line.startswith("weights ")]
    print(f"lost a node after epoch {recovered[1]}: {lost_s:.1f} s, {weights}")
    if len(weights) != 1 or weights != [line for line in reference.get(0, []) if line.startswith("weights ")]:
        failures.append("the final weights differ")
    if failures:
        sys.exit("ddp_lost_node: " + "; ".join(failures))
    print("every step's loss and the final weights bitwise as the run that lost nothing")


if __name__ == "__main__":
    main()
