#!/usr/bin/env bash
# Runs seeds of the deterministic simulation for HOURS hours (real time), starting from a
# seed drawn from the clock, and writes the summary — seeds, simulated hours, faults by
# kind, invariant checks, failed seeds — to sim-soak-<date>-<commit>.json. A failed seed's
# trace goes to the log beside it; replay one with
#   cargo run --release -p eckpt-sim -- --replay SEED
set -euo pipefail
cd "$(dirname "$0")/.."
hours=${1:?usage: scripts/sim-soak.sh HOURS}
name="sim-soak-$(date -u +%Y-%m-%d)-$(git rev-parse --short HEAD)"
cargo build --release -p eckpt-sim
status=0
./target/release/eckpt-sim --hours "$hours" --from "$(date +%s)000" --json \
  > "$name.json" 2> "$name.log" || status=$?
cat "$name.json"
echo "summary: $name.json, traces of failed seeds: $name.log" >&2
exit $status
