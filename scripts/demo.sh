#!/usr/bin/env bash
# The eckpt demo, on the embedded default: a local cluster of 8 node agents (+1 spare) on
# loopback, k=6 data + m=2 parity, parity updated in place where that is cheaper.
#
# `eckpt run` launches an MPI job — examples/mpi/stencil.c, a 2-D heat stencil with halo
# exchange over 8 ranks, 16 MiB of state each, checkpointing by time (eckpt_snapshot(),
# every second) — through Open MPI, once without failures and once with two nodes killed
# with their disks right after epoch 4. The second run notices the loss, recovers by itself
# (parallel decode from the survivors, ranks re-placed on the spare and per process on the
# nodes left, redundancy restored) and relaunches every rank where it now lives; the job
# must end with the same checksums and logs as the failure-free run. A table compares the
# two runs. Then the standalone file coder.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
eckpt=${ECKPT:-$repo/target/release/eckpt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ranks=8
cluster=(--nodes 8 --spares 1 --k 6 --m 2 --mode update)
job=(--launcher mpirun -n "$ranks" --interval 1s)
program=(./stencil -m 16 -s 500 -a -l log.%r)

echo "== building examples/mpi/stencil.c with Open MPI's mpicc against libeckpt"
mpicc -O2 -std=c11 -I"$repo/include" "$repo/examples/mpi/stencil.c" -o "$work/stencil" \
  -L"$repo/target/release" -leckpt -lm -Wl,-rpath,"$repo/target/release"

mkdir -p "$work/clean" "$work/losses"
cp "$work/stencil" "$work/clean/"
cp "$work/stencil" "$work/losses/"

echo "== failure-free: eckpt run of 8 MPI ranks on a new 8-node cluster (+1 spare, k=6 m=2)"
(cd "$work/clean" && "$eckpt" run "${cluster[@]}" "${job[@]}" --record ../clean.json -- "${program[@]}" \
  > ../clean.out)
grep -E "plate checksum" "$work/clean.out" | sed 's/^/   /'

echo
echo "== the same job; two nodes die with their disks right after epoch 4 commits"
(cd "$work/losses" && "$eckpt" run "${cluster[@]}" "${job[@]}" --kill-at 4:2 --record ../losses.json -- "${program[@]}" \
  > ../losses.out 2> >(grep -E "^eckpt run: (lost|recovered|relaunched)" | sed 's/^/   /' >&2))
grep -E "plate checksum" "$work/losses.out" | sed 's/^/   /'

echo
checksums() { grep -E "^\[[0-9]+\] (plate )?checksum" "$1" | sort; }
if [ -z "$(checksums "$work/clean.out")" ] || [ "$(checksums "$work/clean.out")" != "$(checksums "$work/losses.out")" ]; then
  echo "the checksums differ from the failure-free run's" >&2
  exit 1
fi
for r in $(seq 0 $((ranks - 1))); do
  if ! cmp -s "$work/clean/log.$r" "$work/losses/log.$r"; then
    echo "rank $r: its log differs from the failure-free run's" >&2
    exit 1
  fi
done
python3 - "$work/clean.json" "$work/losses.json" <<'PY'
import json, statistics, sys

runs = [json.load(open(p)) for p in sys.argv[1:]]
MiB = 1 << 20


def row(name, f):
    print(f"  {name:<34}" + "".join(f"{f(r):>22}" for r in runs))


def committed(r):
    return [e for e in r["epochs"] if e["committed"]]


print(f"  {'':<34}{'failure-free':>22}{'two nodes lost':>22}")
row("exit status", lambda r: r["exit_code"])
row("wall time (s)", lambda r: f"{r['seconds']:.1f}")
row("epochs committed", lambda r: len(committed(r)))
row("full image per epoch (MiB)", lambda r: f"{max(e['image_bytes'] for e in committed(r)) / MiB:.1f}")
row(
    "incremental stored, median (MiB)",
    lambda r: f"{statistics.median(e['stored_bytes'] for e in committed(r)[1:]) / MiB:.1f}",
)
row("encode per epoch, median (s)", lambda r: f"{statistics.median(e['encode_seconds'] for e in committed(r)):.3f}")
row("nodes lost", lambda r: " ".join(n for f in r["failures"] for n in f["nodes"]) or "-")
row("recovery decode + encode (s)", lambda r: " ".join(f"{x['decode_seconds']:.2f}+{x['encode_seconds']:.2f}" for x in r["recoveries"]) or "-")
row("loss to all ranks running (s)", lambda r: " ".join(f"{x['loss_to_running_seconds']:.2f}" for x in r["recoveries"]) or "-")
PY
echo
echo "every rank's checksum and 500-line log are identical to the failure-free run"
echo
bash "$repo/scripts/demo-encode.sh"
echo "demo: OK"
