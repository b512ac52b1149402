#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh and scripts/bench-device.sh need on a GPU machine that has no
# Rust toolchain, into target/gpu-carry (about 20 MB, stripped): bin/eckpt, lib/libeckpt.so, and python/eckpt, the
# Python package with its extension module built for that machine's Python (3.12 by default:
# GPU_PYTHON=3.11 for another). PyO3 is told the version by a build configuration file instead
# of asking an interpreter, since that Python is not on this machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
python_version=${GPU_PYTHON:-3.12}
out=target/gpu-carry
export PATH="$HOME/.cargo/bin:$PATH"

# With fault injection: gpu-check.sh kills a node with `eckpt run --kill-at`.
cargo build --release -p eckpt -p eckpt-client --features eckpt/fault-injection
config=$(mktemp)
trap 'rm -f "$config"' EXIT
printf 'implementation=CPython\nversion=%s\nshared=true\nabi3=false\npointer_width=64\nbuild_flags=\nsuppress_build_script_link_lines=false\n' \
  "$python_version" > "$config"
PYO3_CONFIG_FILE=$config CARGO_TARGET_DIR=target/py$python_version cargo build --release -p eckpt-py

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/python/eckpt"
strip -o "$out/bin/eckpt" target/release/eckpt
strip -o "$out/lib/libeckpt.so" target/release/libeckpt.so
cp crates/py/python/eckpt/*.py "$out/python/eckpt/"
tag=${python_version/./}
strip -o "$out/python/eckpt/_eckpt.cpython-$tag-x86_64-linux-gnu.so" "target/py$python_version/release/lib_eckpt.so"
# For scripts/bench-device.sh: the klauspost/reedsolomon harness when built (`make klauspost`),
# and Debian's ISA-L, which that machine lacks, for the codec's comparisons.
[ -x target/klauspost-bench ] && cp target/klauspost-bench "$out/"
isal=$(ldconfig -p | awk '/libisal\.so\.2 .*x86-64/ && !found {print $NF; found = 1}')
[ -n "$isal" ] && cp -L "$isal" "$out/lib/libisal.so.2"
# The GPU machine's copy of the repository may carry stale git metadata: the build says which
# commit it is (and whether the tree had changes), for gpu-check.sh to print.
{ git rev-parse --short HEAD; git status --porcelain --untracked-files=no | grep -q . && echo "(with uncommitted changes)"; } \
  | tr '\n' ' ' > "$out/COMMIT" || true
du -sh "$out"
