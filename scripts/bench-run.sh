#!/usr/bin/env bash
# What `eckpt run` costs and how fast it brings a job back, measured with the MPI example
# (examples/mpi/stencil.c, 8 ranks of 16 MiB) — every figure next to its reference from the
# same run:
#
#   overhead   the stencil's own elapsed time under `eckpt run --interval 30s` (8-node cluster,
#              k=6 m=2, update mode, checkpoints erasure-coded while it computes) next to the
#              same program run directly by mpirun (no cluster, no checkpoint until the end);
#              REPS interleaved pairs, medians and the median of per-pair ratios; and the
#              slowest rank's time inside eckpt_snapshot()/eckpt_checkpoint() over the time it
#              computed (what checkpointing cost the ranks, unaffected by run-to-run noise).
#   recovery   on a namespaced cluster with 1 Gbit/s links: two nodes killed with their disks;
#              from the loss to every rank running again, next to the decode and encode
#              times it contains.
#   ipc        2 ranks (no more than the cores) on a namespaced cluster with 1 Gbit/s links:
#              the halo-exchange time per step with both ranks on one node (--placement pack:
#              shared memory) next to one rank per node (balanced: TCP over the link) — seed
#              004's point that co-located processes should use local IPC.
#   halo       16 ranks of 4 MiB on 8 nodes (rotated parity: every node holds data), two
#              nodes lost: the stencil's halo-exchange time per step before the loss and after
#              relocation per process (the lost nodes' ranks spread) and per node (each lost
#              node's ranks together on one survivor) — seed 004's comparison.
#
# Usage: scripts/bench-run.sh [overhead|recovery|ipc|halo|all] (root for recovery and halo).
# Environment: REPS (3), STEPS (3000), ECKPT (target/release/eckpt).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eckpt=${ECKPT:-$repo/target/release/eckpt}
what=${1:-all}
reps=${REPS:-3}
steps=${STEPS:-3000}
work=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "keeping $work" || trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

mpicc -O2 -std=c11 -I"$repo/include" "$repo/examples/mpi/stencil.c" -o "$work/stencil" \
  -L"$repo/target/release" -leckpt -lm -Wl,-rpath,"$repo/target/release"
cd "$work"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"

elapsed() { sed -n 's/^\(\[0\] \)\{0,1\}elapsed: \([0-9.]*\) s$/\2/p' "$1" | tail -1; }
in_calls() { sed -n 's/^\(\[0\] \)\{0,1\}in checkpoint calls: \([0-9.]*\) s$/\2/p' "$1" | tail -1; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

if [ "$what" = overhead ] || [ "$what" = all ]; then
  echo "== overhead: stencil -m 16 -s $steps, 8 ranks: mpirun directly vs eckpt run --interval 30s"
  : > direct.txt; : > run.txt; : > ratio.txt; : > calls.txt
  for rep in $(seq "$reps"); do
    rm -rf store log.*
    ECKPT_DIR=$work/store mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 8 \
      ./stencil -m 16 -s "$steps" -k "$steps" -l log.%r > direct.out 2>&1
    rm -f log.*
    "$eckpt" run --nodes 8 --spares 1 --k 6 --m 2 --mode update --launcher mpirun --interval 30s \
      --record run.json -n 8 -- ./stencil -m 16 -s "$steps" -a -l log.%r > run.out 2> run.err
    d=$(elapsed direct.out); r=$(elapsed run.out); c=$(in_calls run.out)
    epochs=$(python3 -c "import json; print(sum(e['committed'] for e in json.load(open('run.json'))['epochs']))")
    echo "$d" >> direct.txt; echo "$r" >> run.txt
    echo "$r $d" | awk '{print $1 / $2}' >> ratio.txt
    # The slowest rank's time inside the checkpoint calls, over the time it computed.
    echo "$c $r" | awk '{print $1 / ($2 - $1)}' >> calls.txt
    echo "  rep $rep: direct $d s, eckpt run $r s ($epochs epochs, $c s in checkpoint calls)," \
      "ratio $(tail -1 ratio.txt)"
  done
  echo "  median: direct $(median < direct.txt) s, eckpt run $(median < run.txt) s," \
    "overhead $(median < ratio.txt | awk '{printf "%.1f %%", 100 * ($1 - 1)}')," \
    "time in checkpoint calls $(median < calls.txt | awk '{printf "%.2f %%", 100 * $1}') of computing"
fi

# One run on a namespaced cluster of 8 nodes (k=6 m=2, no spare) at 1 Gbit/s, two nodes
# killed after epoch 3: relocation $1, layout $2, ranks $3, MiB per rank $4, steps $5.
lossy_run() {
  rm -f log.*
  "$eckpt" run --nodes 8 --k 6 --m 2 --mode update --layout "$2" --netns --link-rate 1gbit \
    --launcher mpirun --interval 2s --relocation "$1" --kill-at 3:2 --record "lossy-$1.json" \
    -n "$3" -- ./stencil -m "$4" -s "$5" -a -l log.%r > "lossy-$1.out" 2> "lossy-$1.err"
}

halo_means() { # file, before|after: the mean of every rank's halo windows
  python3 - "$1" "$2" <<'PY'
import re, sys
path, when = sys.argv[1:]
# Ranks that resumed from a checkpoint mark their windows "(resumed)".
values = [
    float(m.group(2))
    for line in open(path)
    if (m := re.search(r"halo steps \d+-\d+( \(resumed\))?: ([0-9.]+) us", line))
    and (m.group(1) is not None) == (when == "after")
]
print(f"{sum(values) / len(values):.0f} us over {len(values)} rank-windows" if values else "no windows")
PY
}

if [ "$what" = recovery ] || [ "$what" = all ]; then
  echo "== recovery: 8 ranks x 64 MiB, 8 nodes (k=6 m=2, no spare) on 1 Gbit/s namespaced links, 2 nodes killed"
  lossy_run process dedicated 8 64 300
  python3 - lossy-process.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for x in r["recoveries"]:
    print(f"  lost {' '.join(x['lost'])}: loss to every rank running {x['downtime_seconds']:.2f} s = "
          f"detect {x['detect_seconds']:.2f} + decode {x['decode_seconds']:.2f} + encode {x['encode_seconds']:.2f} "
          f"+ relaunch and the rest {x['downtime_seconds'] - x['detect_seconds'] - x['decode_seconds'] - x['encode_seconds']:.2f} s")
    # The goal: everything but the decode within 5 s, the decode at the link's speed.
    at_link = x["decode_link_bytes"] * 8 / 1e9
    print(f"  decode tasks {x['decode_task_seconds']:.2f} s for {x['decode_link_bytes'] / 2**20:.0f} MiB over the busiest link"
          f" ({at_link:.2f} s at 1 Gbit/s, efficiency {at_link / x['decode_task_seconds']:.2f}); goal 5 s + {at_link:.2f} s"
          f" = {5 + at_link:.2f} s against {x['downtime_seconds']:.2f} s; placement {x['placement']}, moved {x['moved']}")
PY
fi

if [ "$what" = ipc ] || [ "$what" = all ]; then
  echo "== halo exchange per step, 2 ranks x 4 MiB, namespaced cluster with 1 Gbit/s links"
  for placement in pack balanced; do
    rm -f log.*
    "$eckpt" run --nodes 4 --k 2 --m 2 --netns --link-rate 1gbit --launcher mpirun --placement "$placement" \
      -n 2 -- ./stencil -m 4 -s 1000 -k 100 -l log.%r > "ipc-$placement.out" 2> "ipc-$placement.err"
    echo "  $placement [$(grep -m1 launched "ipc-$placement.err" | sed 's/.*ranks: //')]: $(halo_means "ipc-$placement.out" before)"
  done
fi

if [ "$what" = halo ] || [ "$what" = all ]; then
  echo "== halo exchange per step, 16 ranks x 4 MiB on 8 nodes, 1 Gbit/s namespaced links, 2 nodes lost"
  for relocation in process node; do
    lossy_run "$relocation" rotated 16 4 600
    placement=$(grep -m1 "relaunched" "lossy-$relocation.err" | sed 's/.*ranks: //')
    echo "  relocation per $relocation: before the loss $(halo_means "lossy-$relocation.out" before);" \
      "after $(halo_means "lossy-$relocation.out" after) [$placement]"
  done
fi
