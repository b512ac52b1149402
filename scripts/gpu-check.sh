#!/usr/bin/env bash
# eckpt's GPU path on a machine with an NVIDIA GPU, torch and cupy, in about 4 minutes. Nothing
# is built there: run scripts/gpu-carry.sh on the build machine first and bring target/gpu-carry
# along (DEVELOPERS.md says how, for the GPU machine this project borrows).
#
# 1. Byte-exact restores after SIGKILL: torch tensors (one at an address not 8-byte aligned)
#    and a cupy array, background mode (scripts/gpu/restore_check.py).
# 2. The C API: examples/cuda/device_state.c with driver-API memory, stopped and restarted.
# 3. Figures on 8 GiB of tensors, beside the bus's pinned copies, torch.save and
#    torch.distributed.checkpoint in the same run (scripts/gpu/figures.py).
# 4. The restart's read out of the store on this machine's cores, 8 GiB like part 3's
#    (`eckpt bench restore`: by 1 to 16 threads, beside pread and memcpy with as many).
# 5. A 2-rank GPU job under `eckpt run` (both ranks on the one GPU) on 4 local nodes, k=2 m=2,
#    one node killed with its store after epoch 3: the ranks are recovered and relaunched, and
#    each checks its restored tensor and its final state (scripts/gpu/rank.py).
# 6. The README's torch training loop (scripts/gpu/train_loop.py), SIGKILLed after a
#    checkpoint and rerun: it must end with the weights of a run never killed.
# 7. examples/python/ddp_train.py on CUDA tensors, 2 DDP ranks sharing the GPU, saving with
#    dcp.async_save into eckpt under `eckpt run`; a node lost with its store after the second
#    epoch: every step's loss and the final weights bitwise as a run that lost nothing
#    (scripts/gpu/ddp_lost_node.py).
# 8. The stall of dcp.async_save of 2 GiB of GPU tensors into eckpt, beside dcp.async_save to a
#    /dev/shm directory and torch.save, same tensors, same run (scripts/bench-torch.py).
# 9. A probe for the restart: the bus's copy straight out of a registered /dev/shm mapping, and
#    what registering costs (scripts/gpu/mapped_h2d.py).
#
# Exit status: 0 when every part passed. Each part has a time limit, so one that hangs cannot
# take the others' time.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
carry=${ECKPT_GPU_CARRY:-$repo/target/gpu-carry}
[ -x "$carry/bin/eckpt" ] || { echo "gpu-check.sh: no $carry/bin/eckpt: run scripts/gpu-carry.sh first" >&2; exit 2; }
export PATH="$carry/bin:$PATH" PYTHONPATH="$carry/python${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
work=$(mktemp -d)
export repo carry work
trap 'rm -rf "$work" /dev/shm/eckpt-gpu-check /dev/shm/eckpt-gpu-check-mapped' EXIT
failed=()

part() { # NAME SECONDS FUNCTION: the function runs in a bash of its own, under a time limit
  local name=$1 limit=$2 start=$SECONDS
  echo "== $name"
  if timeout --kill-after=5 "$limit" bash -c "$3"; then
    echo "-- $name: passed in $((SECONDS - start)) s"
  else
    echo "-- $name: FAILED (status $?) after $((SECONDS - start)) s"
    failed+=("$name")
  fi
}

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader
grep -m1 "model name" /proc/cpuinfo
echo "cores: $(nproc); python $(python3 -c 'import sys, torch, cupy; print(sys.version.split()[0], "torch", torch.__version__, "cupy", cupy.__version__)')"
echo "build: commit $(cat "$carry/COMMIT" 2>/dev/null || echo unknown) (scripts/gpu-carry.sh)"

restore() {
  python3 "$repo/scripts/gpu/restore_check.py" write "$work/restore" "$work/restore.json"
  local status=$?
  [ "$status" = 137 ] || { echo "the writer ended with status $status, not SIGKILL's 137"; return 1; }
  python3 "$repo/scripts/gpu/restore_check.py" restart "$work/restore" "$work/restore.json"
}
export -f restore
part "restore after SIGKILL (torch, cupy)" 90 restore

c_api() {
  cc -std=c11 -O2 -Wall -Wextra -Werror -I/usr/local/cuda/include -I"$repo/include" \
    "$repo/examples/cuda/device_state.c" -o "$work/device_state" -L/usr/local/cuda/lib64/stubs -lcuda \
    -L"$carry/lib" -leckpt || return 1
  export ECKPT_DIR=$work/c-store
  "$work/device_state" 12 5
  [ $? = 3 ] || { echo "the first run did not stop after step 5"; return 1; }
  "$work/device_state" 12
}
export -f c_api
part "C API (eckpt_protect_device)" 60 c_api

figures() { python3 "$repo/scripts/gpu/figures.py" /dev/shm/eckpt-gpu-check; }
export -f figures
part "figures (8 GiB)" 200 figures

restore_read() { eckpt bench restore --size 8GiB --reps 2 --dir /dev/shm; }
export -f restore_read
part "restore read (8 GiB, by thread count)" 150 restore_read

cluster() {
  (cd "$work" && eckpt run --nodes 4 --k 2 --m 2 -n 2 --liveness 2s --kill-at 3:1 \
    --record "$work/run.json" -- python3 "$repo/scripts/gpu/rank.py" 10) > "$work/run.out" 2> "$work/run.err"
  local status=$?
  cat "$work/run.out"
  grep -E "^eckpt run: (lost|recovered|relaunched)" "$work/run.err"
  [ "$status" = 0 ] || { tail -20 "$work/run.err"; return 1; }
  [ "$(grep -c "restarted from epoch .*GPU tensor verified" "$work/run.out")" -ge 1 ] \
    || { echo "no rank was relaunched from a recovered epoch"; return 1; }
  [ "$(grep -c "final state verified" "$work/run.out")" = 2 ] || { echo "a rank did not end verified"; return 1; }
}
export -f cluster
part "eckpt run: 2 GPU ranks, a node lost" 90 cluster

training() {
  local clean killed
  clean=$(python3 "$repo/scripts/gpu/train_loop.py" "$work/train-clean" 30) || return 1
  python3 "$repo/scripts/gpu/train_loop.py" "$work/train-killed" 30 17
  [ $? = 137 ] || { echo "the training run was not killed after step 17"; return 1; }
  killed=$(python3 "$repo/scripts/gpu/train_loop.py" "$work/train-killed" 30) || return 1
  echo "never killed: $clean"
  echo "killed after checkpoint 17, rerun: $killed"
  [ "$clean" = "$killed" ] || { echo "the rerun ended with other weights"; return 1; }
}
export -f training
part "the README's torch training loop, killed and rerun" 90 training

ddp_cuda() { python3 "$repo/scripts/gpu/ddp_lost_node.py" "$work/ddp"; }
export -f ddp_cuda
part "DDP on CUDA through dcp.async_save, a node lost" 200 ddp_cuda

dcp_stalls() { python3 "$repo/scripts/bench-torch.py" --device cuda --no-cluster --size-mib 2048; }
export -f dcp_stalls
part "dcp.async_save of GPU tensors: eckpt, a directory, torch.save (2 GiB)" 150 dcp_stalls

mapped_h2d() { python3 "$repo/scripts/gpu/mapped_h2d.py" /dev/shm/eckpt-gpu-check-mapped; }
export -f mapped_h2d
part "probe: the bus's copy from a registered /dev/shm mapping (8 GiB)" 120 mapped_h2d

if [ ${#failed[@]} = 0 ]; then
  echo "gpu-check: every part passed"
else
  echo "gpu-check: FAILED: ${failed[*]}"
  exit 1
fi
