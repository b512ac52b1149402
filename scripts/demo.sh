#!/usr/bin/env bash
# The eckpt demo, on the embedded default: a local cluster of 6 node agents (+1 spare) on
# loopback, k=4 data + m=2 parity, parity updated in place from the changed blocks.
#
# A 4-rank job (examples/c/mat.c, 64 MiB of state per rank, checkpointing through the C API
# in cluster mode) runs 40 steps. Two nodes then die with their disks. `eckpt recover`
# rebuilds their ranks from the survivors (one onto the spare, one per process onto a
# survivor) and restores redundancy; the job restarts from its last epoch and runs to step
# 80. Its final checksums and logs must equal those of an uninterrupted run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eckpt=${ECKPT:-$repo/target/release/eckpt}
work=$(mktemp -d)
cluster=$work/cluster
cleanup() {
  "$eckpt" down --dir "$cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
world=4

echo "== building examples/c/mat.c against libeckpt"
cc -O2 -std=c11 -I"$repo/include" -I"$repo/examples/c" "$repo/examples/c/mat.c" -o "$work/mat" \
  -L"$repo/target/release" -leckpt -lm -Wl,-rpath,"$repo/target/release"

# Each rank seeds its matrices from an input file of its own (restart also checks it is
# unchanged), so every rank's state differs.
for r in $(seq 0 $((world - 1))); do echo "input of rank $r" > "$work/input$r"; done

echo "== reference: the job uninterrupted, 80 steps, standalone checkpoints"
for r in $(seq 0 $((world - 1))); do
  (cd "$work" && ECKPT_DIR="$work/ref-store" ECKPT_RANK=$r ./mat -m 64 -s 80 -k 10 -l "ref$r.log" -i "input$r" \
    | sed -n 's/checksum: //p' > "ref$r.sum")
done

echo "== eckpt up: 6 nodes + 1 spare, k=4 m=2, update mode"
"$eckpt" up --dir "$cluster" --nodes 6 --spares 1 --k 4 --m 2 --mode update --detach

echo "== the job: 4 ranks, 40 steps, a checkpoint every 10 steps, erasure-coded across nodes"
for r in $(seq 0 $((world - 1))); do
  (cd "$work" && ECKPT_CLUSTER="$cluster" ECKPT_WORLD=$world ECKPT_RANK=$r ./mat -m 64 -s 40 -k 10 -l "job$r.log" -i "input$r" >/dev/null) &
done
wait
"$eckpt" status --dir "$cluster"

lost=$("$eckpt" status --dir "$cluster" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
with_ranks = [n["name"] for n in s["nodes"] if n["ranks"]]
print(with_ranks[1], s["groups"][0]["members"][-1])')
echo "== two nodes die with their disks: $lost"
for n in $lost; do "$eckpt" kill-node --dir "$cluster" "$n" --wipe; done
sleep 1
"$eckpt" status --dir "$cluster"

echo "== eckpt recover: parallel decode from the survivors, ranks re-placed, redundancy restored"
"$eckpt" recover --dir "$cluster"
"$eckpt" status --dir "$cluster"

echo "== the job restarts from its last epoch (wherever each rank now lives) and runs to step 80"
for r in $(seq 0 $((world - 1))); do
  (cd "$work" && ECKPT_CLUSTER="$cluster" ECKPT_WORLD=$world ECKPT_RANK=$r ./mat -m 64 -s 80 -k 10 -l "job$r.log" -i "input$r" \
    | sed -n 's/checksum: //p' > "job$r.sum") &
done
wait

for r in $(seq 0 $((world - 1))); do
  if ! cmp -s "$work/ref$r.sum" "$work/job$r.sum" || ! cmp -s "$work/ref$r.log" "$work/job$r.log"; then
    echo "rank $r: the restarted job differs from the uninterrupted one" >&2
    exit 1
  fi
  echo "rank $r: checksum $(cat "$work/job$r.sum") and 80-line log identical to the uninterrupted run"
done

"$eckpt" down --dir "$cluster"
echo
bash "$repo/scripts/demo-encode.sh"
echo "demo: OK"
