#!/usr/bin/env bash
# Builds the Python wheel (scripts/wheel.sh, as `make wheel` does), installs it into the
# repository's venv, .venv, and runs the binding's pytest suite (crates/py/tests) against the
# installed package. Idempotent: a rerun reuses the venv, the installed tools and the cargo
# build. Extra arguments go to pytest. test_run.py runs target/release/eckpt (ECKPT_BIN) with
# `--kill-at`: the build with fault injection that `make test`'s cargo test leaves there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

bash scripts/wheel.sh >/dev/null
# torch, for the tests of eckpt.torch: installed once per machine (scripts/torch-env.sh).
bash scripts/torch-env.sh >/dev/null
python="$repo/.venv/bin/python"
# pip skips what is already satisfied, without asking the index.
"$python" -m pip install -q --disable-pip-version-check 'numpy>=1.26,<3' 'pytest>=8,<10'
# A wheel, not `maturin develop`, which would drop the compiled module into the source tree;
# --force-reinstall because the version stays 0.1.0 between builds.
"$python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
  "${CARGO_TARGET_DIR:-$repo/target}"/wheels/eckpt-*.whl

# No .pytest_cache in the source tree. The tests import the installed eckpt: pytest puts
# crates/py/tests on sys.path, not the package's source in crates/py/python.
"$python" -m pytest -q -p no:cacheprovider crates/py/tests "$@"
