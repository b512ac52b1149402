#!/usr/bin/env bash
# Stops the emulated Slurm of up.sh and removes everything it made; with `--node NAME`,
# crashes one node instead: every process in its network namespace is SIGKILLed and its
# link goes away (the namespace stays, empty); with `--slurmd NAME`, kills only its slurmd. Safe to run twice. Nothing is killed by name:
# only the processes of the namespaces and the PIDs up.sh recorded.
set -euo pipefail

sim=/var/spool/slurm-sim
run=/run/slurm-sim

# SIGKILLs every process in network namespace $1 until none is left (at most 4 s).
empty_namespace() {
  for _ in $(seq 40); do
    pids="$(ip netns pids "$1" 2>/dev/null || true)"
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086 # one PID per word
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "slurm-sim: processes of $1 survive SIGKILL" >&2
  return 1
}

if [ "${1:-}" = "--slurmd" ]; then
  # Only the node's slurmd dies: its jobs' processes and eckpt's agent live on, and Slurm
  # declares the node down after SlurmdTimeout.
  node="${2:?down.sh --slurmd NAME}"
  [[ "$node" =~ ^node[0-9]+$ ]] || { echo "slurm-sim: no node $node" >&2; exit 2; }
  kill -9 "$(cat "$run/slurmd-$node.daemon")"
  exit 0
fi

if [ "${1:-}" = "--node" ]; then
  node="${2:?down.sh --node NAME}"
  [[ "$node" =~ ^node[0-9]+$ ]] || { echo "slurm-sim: no node $node" >&2; exit 2; }
  empty_namespace "sim$node"
  ip link del "simv${node#node}" 2>/dev/null || true
  exit 0
fi

for ns in $(ip netns list | awk '/^simnode[0-9]+/ {print $1}'); do
  empty_namespace "$ns" || true
  ip netns del "$ns"
done
# The daemons up.sh started: SIGTERM, then SIGKILL after 10 s.
for file in "$run"/*.daemon "$run"/munged.pid; do
  [ -f "$file" ] || continue
  pid="$(cat "$file")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
done
for link in $(ip -o link show | awk -F': ' '{print $2}' | grep -E '^simv[0-9]+' | cut -d@ -f1); do
  ip link del "$link" 2>/dev/null || true
done
ip link del simbr0 2>/dev/null || true
if grep -q '# slurm-sim begin' /etc/hosts; then
  hosts="$(sed '/# slurm-sim begin/,/# slurm-sim end/d' /etc/hosts)"
  printf '%s\n' "$hosts" >/etc/hosts
fi
rm -rf "$run" "$sim"
