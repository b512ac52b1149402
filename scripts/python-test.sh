#!/usr/bin/env bash
# Builds the Python binding (crates/py) and runs its pytest suite (crates/py/tests) in the
# repository's venv, .venv, which it creates on first use. Idempotent: a rerun reuses the venv,
# the installed tools and the cargo build. Extra arguments go to pytest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
# The same target directory as `cargo build` in the repository, so the client crates are
# compiled once (CARGO_TARGET_DIR from the environment wins, as it does for cargo).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"

venv="$repo/.venv"
if [ ! -x "$venv/bin/python" ]; then
  echo "python-test: creating $venv"
  python3 -m venv "$venv"
fi
python="$venv/bin/python"
# pip skips what is already satisfied, without asking the index.
"$python" -m pip install -q --disable-pip-version-check \
  'maturin>=1.9.4,<2' 'numpy>=1.26,<3' 'pytest>=8,<10'

# A wheel installed into the venv (not `maturin develop`, which would drop the compiled module
# into the source tree); --force-reinstall because the version stays 0.1.0 between builds.
wheels="$CARGO_TARGET_DIR/wheels/eckpt-py"
rm -rf "$wheels"
"$venv/bin/maturin" build --release --quiet -m crates/py/Cargo.toml -i "$python" --out "$wheels"
"$python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheels"/eckpt-*.whl

# No .pytest_cache in the source tree.
"$python" -m pytest -q -p no:cacheprovider crates/py/tests "$@"
