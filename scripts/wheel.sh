#!/usr/bin/env bash
# Builds the Python wheel of eckpt (crates/py) with maturin into target/wheels/, for the
# python3 of this machine, from the repository's venv, .venv, which it creates on first use;
# `pip install target/wheels/eckpt-*.whl` installs it. scripts/python-test.sh tests this wheel.
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

# One wheel in the directory, so that the glob above names it.
wheels="$CARGO_TARGET_DIR/wheels"
rm -f "$wheels"/eckpt-*.whl
"$venv/bin/maturin" build --release --quiet -m crates/py/Cargo.toml -i "$venv/bin/python" --out "$wheels"
ls "$wheels"/eckpt-*.whl
