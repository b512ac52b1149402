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
#   ipc        the restart on one node of Sawada (2017; cited in full in docs/REPRODUCTION.md,
#              References): ranks spread over n0 and n1 (3-node namespaced cluster, k=2 m=1,
#              1 Gbit/s links; 2 ranks of 1 and 4 MiB, and 4 ranks of 1 MiB as in Sawada's
#              thesis); n1 is lost after epoch 2 and every rank is relaunched on n0. The
#              halo-exchange time per step and the run time after the restart, with Open MPI
#              choosing the transport afresh (shared memory between the now co-located ranks:
#              what eckpt's relaunch gives) next to the TCP the job started with kept
#              (OMPI_MCA_btl=self,tcp: what a checkpointer that restores the recorded sockets
#              gives) — Sawada's point that co-located processes should switch to local IPC
#              after relocation. REPS interleaved pairs.
#   halo       16 ranks of 4 MiB on 8 nodes (rotated parity: every node holds data), two
#              nodes lost: the stencil's halo-exchange time per step before the loss and after
#              relocation per process (the lost nodes' ranks spread) and per node (each lost
#              node's ranks together on one survivor) — Sawada's (2017) comparison.
#
# Usage: scripts/bench-run.sh [overhead|recovery|ipc|halo|all] (root for recovery, ipc and halo).
# Environment: REPS (3), STEPS (3000), ECKPT (target/release/eckpt), RUN_ARGS (more options of
# `eckpt run` in the overhead runs, e.g. "--agent-nice 19" or "--agent-cpus 1").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eckpt=${ECKPT:-$repo/target/release/eckpt}
# The recovery runs kill nodes with --kill-at: a build with fault injection (make demo, make
# test), not the released binary of make build.
"$eckpt" run --help | grep -q -- --kill-at ||
  { echo "bench-run.sh: $eckpt has no --kill-at (the released build); run cargo build --release -p eckpt --features fault-injection first" >&2; exit 1; }
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
    # shellcheck disable=SC2086 # RUN_ARGS is a list of options.
    "$eckpt" run --nodes 8 --spares 1 --k 6 --m 2 --mode update --launcher mpirun --interval 30s \
      ${RUN_ARGS:-} --record run.json -n 8 -- ./stencil -m 16 -s "$steps" -a -l log.%r > run.out 2> run.err
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

halo_windows() { # file, before|after, mean|median|resumed-from: every rank's halo windows
  python3 - "$@" <<'PY'
import re, statistics, sys
path, when, what = sys.argv[1:]
# Ranks that resumed from a checkpoint mark their windows "(resumed)".
windows = [
    (int(m.group(1)), float(m.group(3)))
    for line in open(path)
    if (m := re.search(r"halo steps (\d+)-\d+( \(resumed\))?: ([0-9.]+) us", line))
    and (m.group(2) is not None) == (when == "after")
]
values = [us for _, us in windows]
if what == "resumed-from":  # the step the restarted ranks resumed at
    print(min(step for step, _ in windows))
elif what == "median":
    print(f"{statistics.median(values):.1f}" if values else "nan")
else:
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
    # From the loss (the lost node last heard): detection includes the silence before the
    # loss was declared.
    loss, detect = x["loss_to_running_seconds"], x["silence_seconds"] + x["detect_seconds"]
    print(f"  lost {' '.join(x['lost'])}: loss to every rank running {loss:.2f} s = "
          f"detect {detect:.2f} + decode {x['decode_seconds']:.2f} + encode {x['encode_seconds']:.2f} "
          f"+ relaunch and the rest {loss - detect - x['decode_seconds'] - x['encode_seconds']:.2f} s")
    # The goal: everything but the decode within 5 s, the decode at the link's speed.
    at_link = x["decode_link_bytes"] * 8 / 1e9
    print(f"  decode tasks {x['decode_task_seconds']:.2f} s for {x['decode_link_bytes'] / 2**20:.0f} MiB over the busiest link"
          f" ({at_link:.2f} s at 1 Gbit/s, efficiency {at_link / x['decode_task_seconds']:.2f}); goal 5 s + {at_link:.2f} s"
          f" = {5 + at_link:.2f} s against {loss:.2f} s; placement {x['placement']}, moved {x['moved']}")
PY
fi

if [ "$what" = ipc ] || [ "$what" = all ]; then
  echo "== restart on one node: ranks on n0 and n1, n1 lost after epoch 2, all relaunched on n0"
  # ranks:MiB per rank — Sawada (2017) ran 2 processes per node (4 after the restart).
  for shape in 2:1 2:4 4:1; do
    ranks=${shape%:*}; mib=${shape#*:}
    steps_ipc=$((160000 / mib / ranks))
    echo "  $ranks ranks of $mib MiB, $steps_ipc steps"
    for transport in shm tcp; do : > "after-$transport.txt"; : > "step-$transport.txt"; done
    for rep in $(seq "$reps"); do
      for transport in shm tcp; do
        rm -f log.*
        btl=(); [ "$transport" = tcp ] && btl=(OMPI_MCA_btl=self,tcp)
        out=ipc-$transport.out
        env "${btl[@]}" "$eckpt" run --nodes 3 --k 2 --m 1 --netns --link-rate 1gbit --launcher mpirun \
          --interval 1s --kill-at 2:1 -n "$ranks" -- ./stencil -m "$mib" -s "$steps_ipc" -a -l log.%r \
          > "$out" 2> "ipc-$transport.err"
        grep -q "relaunched $ranks ranks: n0:0-$((ranks - 1))\$" "ipc-$transport.err" ||
          { echo "  rep $rep $transport: the ranks were not relaunched together on n0" >&2; exit 1; }
        halo_windows "$out" after median >> "after-$transport.txt"
        # The restarted job's run time per step (the loss falls at a slightly different step each run).
        echo "$(elapsed "$out") $steps_ipc $(halo_windows "$out" after resumed-from)" |
          awk '{printf "%.1f\n", 1e6 * $1 / ($2 - $3)}' >> "step-$transport.txt"
        echo "    rep $rep, $transport: halo before the loss $(halo_windows "$out" before median) us," \
          "after $(tail -1 "after-$transport.txt") us per step; a step after the restart $(tail -1 "step-$transport.txt") us"
      done
    done
    shm=$(median < after-shm.txt); tcp=$(median < after-tcp.txt)
    shm_step=$(median < step-shm.txt); tcp_step=$(median < step-tcp.txt)
    echo "    median after the restart: halo $shm us (shared memory) vs $tcp us (TCP kept):" \
      "$(echo "$shm $tcp" | awk '{printf "%+.0f %%", 100 * ($1 / $2 - 1)}');" \
      "a step $shm_step us vs $tcp_step us: $(echo "$shm_step $tcp_step" | awk '{printf "%+.1f %%", 100 * ($1 / $2 - 1)}')"
  done
fi

if [ "$what" = halo ] || [ "$what" = all ]; then
  echo "== halo exchange per step, 16 ranks x 4 MiB on 8 nodes, 1 Gbit/s namespaced links, 2 nodes lost"
  for relocation in process node; do
    lossy_run "$relocation" rotated 16 4 600
    placement=$(grep -m1 "relaunched" "lossy-$relocation.err" | sed 's/.*ranks: //')
    echo "  relocation per $relocation: before the loss $(halo_windows "lossy-$relocation.out" before mean);" \
      "after $(halo_windows "lossy-$relocation.out" after mean) [$placement]"
  done
fi
