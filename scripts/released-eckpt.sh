#!/usr/bin/env bash
# Builds the released eckpt command — without fault injection: no `eckpt debug`, no `eckpt run
# --kill-at`, no pause points in the daemons (`cargo build --release -p eckpt`: the feature
# `fault-injection` is off by default) — copies it to BIN stripped of its symbols and
# debug information, and has that copy write its man pages and shell completions below SHARE, in
# the layout of PREFIX/share (ECKPT_GENERATE_DOCS: crates/cli/src/docs.rs). For scripts/install.sh
# (make install: PREFIX/bin/eckpt) and scripts/wheel.sh (the wheel's eckpt command).
#
#   scripts/released-eckpt.sh BIN SHARE
#
# cargo writes every build of the eckpt crate to the same target/release/eckpt, which the tests
# run expecting the build with fault injection (`make test`'s `cargo test --features
# eckpt/fault-injection`: CARGO_BIN_EXE_eckpt, crates/py/tests/test_run.py's --kill-at): the
# binary that was there before is put back.
set -euo pipefail

fail() {
  echo "released-eckpt: $*" >&2
  exit 1
}

(($# == 2)) || fail "usage: scripts/released-eckpt.sh BIN SHARE"
bin="$1"
share="$2"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
built="${CARGO_TARGET_DIR:-$repo/target}/release/eckpt"
build=(cargo build --release -p eckpt)
command -v strip >/dev/null || fail "strip is missing (binutils; make setup installs it)"

tmp="$(mktemp -d)"
before="$tmp/before"
# Put back by a rename, never written into: target/release/eckpt is a hard link to cargo's own
# copy of a build (target/release/deps/eckpt-HASH), which must stay what cargo thinks it is.
put_back() {
  if [ -f "$before" ]; then
    cp -p "$before" "$built.before.$$" && mv -f "$built.before.$$" "$built"
  fi
  rm -rf "$tmp"
}
trap put_back EXIT
[ ! -f "$built" ] || cp -p "$built" "$before"

"${build[@]}" || fail "${build[*]} failed"
# The copy is checked — the released build refuses `eckpt debug` — in case a build of the
# workspace running beside this one (make demo, make test, cargo test) wrote its fault-injection
# eckpt there in the meantime; then cargo puts the released build back (it is fresh: cargo only
# links it into place again) and it is copied again. The check runs without the user's
# configuration files, whose errors would hide clap's.
for try in 1 2 3; do
  status="none (no copy)"
  if cp "$built" "$bin" 2>/dev/null; then
    status=0
    env HOME=/nonexistent XDG_CONFIG_HOME=/nonexistent ECKPT_SITE_CONFIG=/nonexistent/eckpt.toml \
      "$bin" debug >"$tmp/debug.log" 2>&1 || status=$?
    [ "$status" = 2 ] && grep -qF "unrecognized subcommand 'debug'" "$tmp/debug.log" && break
  fi
  ((try < 3)) || fail "$built is not the released build: 'eckpt debug' exits with status $status: $(head -n1 "$tmp/debug.log" 2>/dev/null)"
  "${build[@]}" --quiet || fail "${build[*]} failed"
done
strip --strip-all "$bin"
rm -rf "$share"
ECKPT_GENERATE_DOCS="$share" "$bin" || fail "$bin did not write its man pages and completions in $share"
