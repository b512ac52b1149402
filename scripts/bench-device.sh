#!/usr/bin/env bash
# eckpt's figures on a many-core machine, in at most 5 minutes: the codec by thread count and
# kernel level beside klauspost/reedsolomon with as many goroutines (its harness carried along),
# and a 4-node local cluster's full epoch on loopback. Nothing is built there: run
# `make klauspost` and scripts/gpu-carry.sh here first (it takes the harness and Debian's
# ISA-L along), and bring target/gpu-carry along (DEVELOPERS.md).
#
# ECKPT_BEFORE=DIR: an eckpt binary of an earlier commit in DIR/eckpt is measured in the same
# run beside the carried one (the codec by thread count), for before/after figures.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
carry=${ECKPT_GPU_CARRY:-$repo/target/gpu-carry}
[ -x "$carry/bin/eckpt" ] || { echo "bench-device.sh: no $carry/bin/eckpt: run scripts/gpu-carry.sh first" >&2; exit 2; }
[ -x "$carry/klauspost-bench" ] || echo "bench-device.sh: no $carry/klauspost-bench: the codec is measured without klauspost" >&2
export PATH="$carry/bin:$PATH" LD_LIBRARY_PATH="$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
failed=0

echo "== machine"
grep -m1 "model name" /proc/cpuinfo
echo "cores: $(nproc); build: commit $(cat "$carry/COMMIT" 2>/dev/null || echo unknown)"

codec() { # LABEL EXE [ENV…]: RS(10,4), 1 MiB shards, by thread count
  local label=$1 exe=$2
  shift 2
  for threads in 1 4 8 16; do
    echo "-- $label, $threads threads"
    env "$@" timeout 60 "$exe" bench codec --threads "$threads" --reps 5 --klauspost "$carry/klauspost-bench" \
      | grep -E "codec bench|encode|decode|update" || failed=1
  done
}
echo "== codec, the CPU's best kernel"
codec "eckpt" "$carry/bin/eckpt"
echo "== codec, AVX2 forced (klauspost at AVX2 too)"
ECKPT_ISA=avx2 timeout 60 eckpt bench codec --threads 1 --reps 5 --klauspost "$carry/klauspost-bench" \
  | grep -E "codec bench|encode|decode|update" || failed=1
if [ -n "${ECKPT_BEFORE:-}" ]; then
  echo "== codec, the earlier build in $ECKPT_BEFORE (same run)"
  codec "before" "$ECKPT_BEFORE/eckpt"
fi

for threads in 1 4; do # the issue's figure is at 4 threads per agent; 1 beside it
  echo "== cluster: 4 nodes, k=2 m=2, 256 MiB per node, loopback, full epochs, $threads threads per agent"
  timeout 100 eckpt bench cluster --nodes 4 --k 2 --m 2 --size-per-node 256MiB --reps 3 --agent-threads "$threads" \
    --mode full --json > /tmp/bench-cluster.json \
    && python3 -c 'import json; r=json.load(open("/tmp/bench-cluster.json")); d=r["size_per_node"]; t=r["full_encode_seconds"]
print("full encode %.3f s: %.2f GB/s of rank data per data node; agents CPU %.3f s/GB (%d threads)" % (t, d/t/1e9, r["agent_cpu_seconds_per_gb"], r["agent_threads"]))
print(json.dumps(r)[:2000])' || failed=1
done

[ $failed = 0 ] && echo "bench-device: done" || { echo "bench-device: a part FAILED"; exit 1; }
