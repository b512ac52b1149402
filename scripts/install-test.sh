#!/usr/bin/env bash
# `make install` checked as a packager and a user see it: staged with DESTDIR for a temporary
# PREFIX and moved there, then the C example examples/c/mat.c built against the installed tree
# with pkg-config and with CMake (packaging/example: eckpt::eckpt and eckpt::eckpt_static, whose
# link list is the .pc file's Libs.private), and the Fortran example with the installed module
# source. Each program runs with a store of its own, must leave a committed epoch on disk, and
# run again must restart from it. (The Python wheel is tested installed: scripts/python-test.sh.)
set -euo pipefail

fail() {
  echo "install-test: $*" >&2
  exit 1
}

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# A developer's ECKPT_DIR, ECKPT_CLUSTER, ... must not reach the programs.
for name in "${!ECKPT_@}"; do unset "$name"; done

# Runs a command with its output in $tmp/log, which is shown if it fails.
quiet() {
  "$@" >"$tmp/log" 2>&1 || {
    cat "$tmp/log" >&2
    return 1
  }
}

prefix="$tmp/prefix"
stage="$tmp/stage"
quiet make --no-print-directory install PREFIX="$prefix" DESTDIR="$stage" || fail "make install failed"
[ ! -e "$prefix" ] || fail "make install wrote into PREFIX instead of below DESTDIR"
mv "$stage$prefix" "$prefix"
stray="$(find "$stage" ! -type d)"
[ -z "$stray" ] || fail "make install wrote outside DESTDIR/PREFIX: ${stray%%$'\n'*}"

lib="$prefix/lib"
soname="$(patchelf --print-soname "$lib/$(readlink "$lib/libeckpt.so")")"
[ "$lib/$soname" -ef "$lib/libeckpt.so" ] || fail "$lib/libeckpt.so's soname $soname is not installed as a link to it"

export PKG_CONFIG_PATH="$lib/pkgconfig"
version="$(pkg-config --modversion eckpt)" || fail "pkg-config does not find eckpt in $PKG_CONFIG_PATH"
libdir="$(pkg-config --variable=libdir eckpt)"
read -ra cflags <<<"$(pkg-config --cflags eckpt)"
read -ra libs <<<"$(pkg-config --libs eckpt)"
quiet cc -std=c11 -O2 -Wall -Werror "${cflags[@]}" examples/c/mat.c -o "$tmp/mat-pkg-config" \
  "${libs[@]}" -lm -Wl,-rpath,"$libdir" || fail "examples/c/mat.c does not build with pkg-config --cflags --libs eckpt"

quiet cmake -S packaging/example -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DECKPT_VERSION="$version" ||
  fail "packaging/example does not configure: find_package(eckpt $version) with CMAKE_PREFIX_PATH=$prefix"
quiet cmake --build "$tmp/cmake" || fail "packaging/example does not build against eckpt::eckpt and eckpt::eckpt_static"
IFS=. read -r major minor _ <<<"$version"
newer="$major.$((minor + 1))"
! cmake -S packaging/example -B "$tmp/cmake-newer" -DCMAKE_PREFIX_PATH="$prefix" -DECKPT_VERSION="$newer" \
  >"$tmp/log" 2>&1 ||
  fail "find_package(eckpt $newer) accepts the installed $version"

quiet gfortran -O2 -J "$tmp" "$prefix/include/eckpt.f90" examples/fortran/heat.f90 -o "$tmp/heat" \
  "${libs[@]}" -Wl,-rpath,"$libdir" || fail "examples/fortran/heat.f90 does not build with the installed eckpt.f90 and pkg-config --libs eckpt"

# Runs program $1 twice with arguments $2... and a store of its own: the first run must exit 0
# and leave a committed epoch on disk; the second must say that it restarted and end with the
# same line (the examples' checksum).
run_twice() {
  local exe="$1" store="$tmp/store-${1##*/}"
  shift
  ECKPT_DIR="$store" "$exe" "$@" >"$tmp/out1" 2>"$tmp/err1" || fail "$exe exited with status $?: $(tail -n1 "$tmp/err1")"
  compgen -G "$store/rank.*/epoch-*/manifest" >/dev/null || fail "$exe left no committed epoch in $store"
  ECKPT_DIR="$store" "$exe" "$@" >"$tmp/out2" 2>"$tmp/err2" ||
    fail "$exe exited with status $? when run again: $(tail -n1 "$tmp/err2")"
  grep -q restarted "$tmp/out2" "$tmp/err2" || fail "$exe did not restart from its checkpoint in $store"
  [ "$(tail -n1 "$tmp/out1")" = "$(tail -n1 "$tmp/out2")" ] ||
    fail "$exe ends with '$(tail -n1 "$tmp/out2")' after a restart, '$(tail -n1 "$tmp/out1")' before"
}

for exe in "$tmp/mat-pkg-config" "$tmp/cmake/mat" "$tmp/heat"; do
  grep -qF " => $lib/$soname " <<<"$(ldd "$exe")" || fail "$exe does not load $lib/$soname"
done
! grep -qF libeckpt <<<"$(ldd "$tmp/cmake/mat-static")" || fail "$tmp/cmake/mat-static loads a shared libeckpt"

for exe in "$tmp/mat-pkg-config" "$tmp/cmake/mat" "$tmp/cmake/mat-static"; do
  run_twice "$exe" -m 1 -s 8 -k 4 -l "$tmp/${exe##*/}.log"
done
run_twice "$tmp/heat" 1000 20 10

echo "install-test: eckpt $version installed; pkg-config, CMake (shared, static) and Fortran builds checkpoint and restart"
