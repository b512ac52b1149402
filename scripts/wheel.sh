#!/usr/bin/env bash
# Builds the Python wheel of eckpt (crates/py) with maturin into target/wheels/, for the
# python3 of this machine, from the repository's venv, .venv, which it creates on first use;
# `pip install target/wheels/eckpt-*.whl` installs it. scripts/python-test.sh tests this wheel.
# The wheel carries the eckpt command too — the released build (no fault injection), stripped —
# which pip installs with the environment's scripts (.venv/bin/eckpt), and its man pages and
# shell completions under the environment's share/ (the wheel's data, crates/py/eckpt.data:
# [tool.maturin] data in crates/py/pyproject.toml).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
# The same target directory as `cargo build` in the repository, so the client crates are
# compiled once (CARGO_TARGET_DIR from the environment wins, as it does for cargo).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"

venv="$repo/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "wheel: creating $venv"
  python3 -m venv "$venv"
fi
# pip skips what is already satisfied, without asking the index.
"$venv/bin/python" -m pip install -q --disable-pip-version-check 'maturin>=1.9.4,<2'

# The command and its pages and completions, written afresh into the wheel's data.
data="$repo/crates/py/eckpt.data"
rm -rf "$data"
mkdir -p "$data/scripts"
CARGO_TERM_QUIET=true bash scripts/released-eckpt.sh "$data/scripts/eckpt" "$data/data/share"

# One wheel in the directory, so that the glob above names it.
wheels="$CARGO_TARGET_DIR/wheels"
rm -f "$wheels"/eckpt-*.whl
"$venv/bin/maturin" build --release --quiet -m crates/py/Cargo.toml -i "$venv/bin/python" --out "$wheels"
wheel="$(ls "$wheels"/eckpt-*.whl)"
listing="$("$venv/bin/python" -m zipfile -l "$wheel")"
grep -qE '^eckpt-[^/]*\.data/scripts/eckpt ' <<<"$listing" ||
  { echo "wheel: $wheel has no eckpt command (.data/scripts/eckpt)" >&2; exit 1; }
echo "$wheel"
