#!/usr/bin/env bash
# Runs seeds of the deterministic simulation for HOURS hours (real time), three `eckpt-sim`
# per two cores (one per core left a quarter of two cores idle: a run's thread waits on its
# workers' hand-offs), each from its own seed drawn from the clock, and writes the summary of them all
# — seeds, simulated hours, faults by kind, invariant checks, failed seeds — to
# sim-soak-<date>-<commit>.json. Give --storm to run every seed in a storm (40 to 200 blips
# besides its other faults). A failed seed's trace goes to the logs beside it; replay one
# with
#   cargo run --release -p eckpt-sim -- --replay SEED [--storm]
set -euo pipefail
cd "$(dirname "$0")/.."
hours=${1:?usage: scripts/sim-soak.sh HOURS [--storm]}
shift
name="sim-soak-$(date -u +%Y-%m-%d)-$(git rev-parse --short HEAD)"
cargo build --release -p eckpt-sim
first="$(date +%s)000"
pids=()
for i in $(seq 0 $((($(nproc) * 3 + 1) / 2 - 1))); do
  ./target/release/eckpt-sim --hours "$hours" --from $((first + i * 100000)) --json "$@" \
    > "$name.$i.json" 2> "$name.$i.log" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
python3 - "$name" "$@" > "$name.json" <<'EOF'
import glob, json, sys
name, args = sys.argv[1], sys.argv[2:]
total = {"args": args, "processes": 0, "seeds": 0, "simulated_hours": 0.0, "real_seconds": 0.0,
         "faults": {}, "invariant_checks": 0, "final_losses_survived": 0,
         "flushed_epochs_checked": 0, "restarts_from_flush": 0, "failed_seeds": []}
for path in sorted(glob.glob(f"{name}.[0-9]*.json")):
    part = json.load(open(path))
    total["processes"] += 1
    for key in ("seeds", "simulated_hours", "invariant_checks", "final_losses_survived",
                "flushed_epochs_checked", "restarts_from_flush"):
        total[key] += part[key]
    total["real_seconds"] = max(total["real_seconds"], part["real_seconds"])
    for kind, n in part["faults"].items():
        total["faults"][kind] = total["faults"].get(kind, 0) + n
    total["failed_seeds"] += part["failed_seeds"]
total["faults_total"] = sum(total["faults"].values())
print(json.dumps(total, indent=2))
EOF
cat "$name.json"
echo "summary: $name.json, traces of failed seeds: $name.*.log" >&2
exit $status
