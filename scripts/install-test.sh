#!/usr/bin/env bash
# `make install` checked as a packager and a user see it: staged with DESTDIR for a temporary
# PREFIX and moved there. The installed eckpt command runs, is the released build (it refuses
# `eckpt debug` and `eckpt run --kill-at`: no fault injection) and is stripped; its man pages
# show with man -M (one per command, none for hidden or fault-injection commands); the bash
# completion completes `eckpt ru<TAB>` to run, the zsh and fish ones are there; libeckpt.so is
# stripped to at most 8 MB and still exports every function eckpt.h declares, and nothing but
# eckpt_*; libeckpt.a has no debug information. Then the C example examples/c/mat.c built
# against the installed tree with pkg-config and with CMake (packaging/example: eckpt::eckpt and
# eckpt::eckpt_static, whose link list is the .pc file's Libs.private), and the Fortran example
# with the installed module source. Each program runs with a store of its own, must leave a
# committed epoch on disk, and run again must restart from it. (The Python wheel is tested
# installed, its eckpt command too: scripts/python-test.sh.)
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

# The command, run without the developer's configuration files.
installed_eckpt() {
  HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" ECKPT_SITE_CONFIG="$tmp/no-site.toml" \
    "$prefix/bin/eckpt" "$@"
}
[ "$(installed_eckpt --version 2>&1)" = "eckpt $version" ] ||
  fail "$prefix/bin/eckpt --version says '$(installed_eckpt --version 2>&1 | head -n1)', not 'eckpt $version'"
# Refused by the parser: the released build has no fault injection.
refused() {
  local expected="$1" status=0
  shift
  installed_eckpt "$@" >"$tmp/log" 2>&1 || status=$?
  [ "$status" = 2 ] && grep -qF "$expected" "$tmp/log" ||
    fail "the installed 'eckpt $*' exits with status $status, not refused with '$expected' (a build with fault injection?): $(head -n1 "$tmp/log")"
}
# --help after --kill-at: a build that has it prints its help instead of starting a job.
refused "unrecognized subcommand 'debug'" debug
refused "unexpected argument '--kill-at'" run --kill-at 1:1 --help
# grep -E >/dev/null, not -q: grep reads all, so no SIGPIPE of the writer hides a match.
! readelf -S -W "$prefix/bin/eckpt" | grep -E ' \.(symtab|debug_info) ' >/dev/null || fail "$prefix/bin/eckpt is not stripped"

man="$prefix/share/man"
for page in eckpt eckpt-run eckpt-up eckpt-bench-cluster eckpt-config; do
  [ -f "$man/man1/$page.1" ] || fail "make install wrote no man page $man/man1/$page.1"
done
for page in eckpt-debug eckpt-run-guard eckpt-run-rank eckpt-mpirun-agent; do
  [ ! -e "$man/man1/$page.1" ] || fail "make install wrote a man page for a hidden or fault-injection command: $man/man1/$page.1"
done
# Every command the installed eckpt lists in its help has its page.
installed_eckpt --help | sed -n '/^Commands:/,/^$/s/^  \([a-z-]*\) .*/\1/p' | grep -vx help >"$tmp/commands"
[ -s "$tmp/commands" ] || fail "no command found in the installed eckpt --help"
while read -r command; do
  [ -f "$man/man1/eckpt-$command.1" ] || fail "eckpt $command has no man page in $man/man1"
done <"$tmp/commands"
MANWIDTH=100 man -M "$man" -P cat eckpt-run >"$tmp/man" 2>"$tmp/log" || fail "man -M $man eckpt-run fails: $(head -n1 "$tmp/log")"
grep -q '^NAME' "$tmp/man" && grep -q 'eckpt-run  *-  *Run a job' "$tmp/man" && grep -q -- '--max-restarts' "$tmp/man" ||
  fail "man -M $man eckpt-run does not show eckpt run's page: $(head -n3 "$tmp/man")"
! grep -q -- '--kill-at' "$tmp/man" || fail "eckpt-run(1) documents --kill-at, which the installed eckpt does not have"

# The bash completion, as bash calls it for `eckpt ru<TAB>`: the function with the command, the
# word being completed and the one before it.
completes() {
  local words="$1"
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _eckpt eckpt "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"; echo "${COMPREPLY[*]}"' \
    bash "$prefix/share/bash-completion/completions/eckpt" $words
}
[ "$(completes "eckpt ru")" = run ] || fail "the bash completion completes 'eckpt ru' to '$(completes "eckpt ru")', not 'run'"
[ -z "$(completes "eckpt debu")" ] ||
  fail "the bash completion completes 'eckpt debu' to '$(completes "eckpt debu")': the installed eckpt has no debug"
[ "$(completes "eckpt run --max-re")" = --max-restarts ] ||
  fail "the bash completion completes 'eckpt run --max-re' to '$(completes "eckpt run --max-re")', not '--max-restarts'"
[ "$(head -n1 "$prefix/share/zsh/site-functions/_eckpt")" = "#compdef eckpt" ] ||
  fail "$prefix/share/zsh/site-functions/_eckpt does not start with #compdef eckpt"
grep -q '^complete -c eckpt ' "$prefix/share/fish/vendor_completions.d/eckpt.fish" ||
  fail "$prefix/share/fish/vendor_completions.d/eckpt.fish completes no eckpt"

so="$(readlink -f "$lib/libeckpt.so")"
size="$(stat -c %s "$so")"
((size <= 8 * 1024 * 1024)) || fail "$so is $((size / 1024 / 1024)) MiB, more than 8: not stripped?"
! readelf -S -W "$so" | grep -E ' \.(symtab|debug_info) ' >/dev/null || fail "$so is not stripped"
# The functions eckpt.h declares (its preprocessed text: no comments), and those libeckpt.so
# exports.
cc -E -P "$prefix/include/eckpt.h" | grep -oE '\beckpt_[A-Za-z0-9_]+[[:space:]]*\(' | tr -d ' \t(' | sort -u >"$tmp/declared"
[ -s "$tmp/declared" ] || fail "no function found in $prefix/include/eckpt.h"
nm -D --defined-only "$so" | awk '$2 ~ /^[TtWi]$/ {print $3}' | sort -u >"$tmp/exported"
missing="$(comm -23 "$tmp/declared" "$tmp/exported")"
[ -z "$missing" ] || fail "$so does not export what eckpt.h declares: $missing"
other="$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v '^eckpt_' || true)"
[ -z "$other" ] || fail "$so exports symbols that are not the C API: ${other%%$'\n'*}"
! objdump -h "$lib/libeckpt.a" | grep -E ' \.(debug_info|llvmbc) ' >/dev/null || fail "$lib/libeckpt.a has debug information or LLVM bitcode"
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

echo "install-test: eckpt $version installed; the released command, its man pages and completions; stripped libraries; pkg-config, CMake (shared, static) and Fortran builds checkpoint and restart"
