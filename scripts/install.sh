#!/usr/bin/env bash
# Installs eckpt under PREFIX (default /usr/local), staged below $DESTDIR when that is set, as
# packagers do:
#
#   bin/eckpt                          the command, the released build: no fault injection
#   lib/libeckpt.so.VERSION            the C and Fortran library, its soname link and the
#     libeckpt.so.ABI, libeckpt.so     libeckpt.so development link
#   lib/libeckpt.a                     the static library
#   include/eckpt.h, eckpt.f90         the header and the Fortran module's source
#   lib/pkgconfig/eckpt.pc             written from the templates in packaging/
#   lib/cmake/eckpt/                   the CMake package, from packaging/ too
#   share/man/man1/eckpt*.1            a man page per command (eckpt-run.1, eckpt-bench-cluster.1)
#   share/bash-completion/completions/eckpt, share/zsh/site-functions/_eckpt,
#   share/fish/vendor_completions.d/eckpt.fish      shell completions
#
# Everything is stripped: the command of all symbols, libeckpt.so of all but its dynamic
# symbols (the C API, eckpt_*), libeckpt.a of debug information. The man pages and completions
# are written by the eckpt being installed (scripts/released-eckpt.sh), so they describe that
# binary. The libraries come from target/release: `make install` builds them first (`cargo
# build --release -p eckpt-client`); the command is built here (scripts/released-eckpt.sh: `cargo
# build --release -p eckpt`, without fault injection, then target/release/eckpt is put back).
#
#   scripts/install.sh [PREFIX]        # make install [PREFIX=/usr/local] [DESTDIR=]
set -euo pipefail

fail() {
  echo "install: $*" >&2
  exit 1
}

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
build="${CARGO_TARGET_DIR:-$repo/target}/release"

prefix="${1:-/usr/local}"
[[ "$prefix" == /* ]] || fail "PREFIX must be an absolute path, not '$prefix'"
dest="${DESTDIR:-}$prefix"
for f in libeckpt.so libeckpt.a; do
  [ -f "$build/$f" ] || fail "$build/$f is missing: build it with cargo build --release -p eckpt-client (make install does)"
done
command -v patchelf >/dev/null || fail "patchelf is missing (make setup installs it)"
command -v strip >/dev/null || fail "strip is missing (binutils; make setup installs it)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The client crate's version (its Cargo.toml takes the workspace's): cargo pkgid ends in
# @VERSION, or in #VERSION when the package is named as its directory.
pkgid="$(cargo pkgid -p eckpt-client)" || fail "cargo cannot read the client crate's version"
version="${pkgid##*[#@]}"
# The soname names the ABI as Cargo's semver does: the major version, or 0.minor before 1.0.
IFS=. read -r major minor _ <<<"$version"
if [ "$major" = 0 ]; then abi="0.$minor"; else abi="$major"; fi
real="libeckpt.so.$version"
soname="libeckpt.so.$abi"

# What a program linking libeckpt.a needs besides it: the Rust standard library's system libs,
# as `cargo rustc --release -p eckpt-client --lib -- --print native-static-libs` lists them
# (not asked here: changed rustc arguments make cargo rebuild the client and all that uses it).
# scripts/install-test.sh links a program with libeckpt.a and this list; it cannot notice a
# missing entry that the C compiler adds by itself (gcc_s) or that glibc >= 2.34 keeps in libc.
native_static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
cmake_static_libs="${native_static_libs//-l/}"
cmake_static_libs="${cmake_static_libs// /;}"

# Writes template $1 to $2 with @NAME@ replaced by VALUE for each NAME VALUE pair that follows.
render() {
  local template="$1" out="$2" text
  shift 2
  text="$(<"$template")"
  while (($#)); do
    text="${text//"@$1@"/"$2"}"
    shift 2
  done
  [[ "$text" != *@[A-Z_]*@* ]] || fail "$template has a placeholder that install.sh does not fill"
  printf '%s\n' "$text" >"$out"
}

# The released command, stripped, and the pages and completions it writes of itself.
bash scripts/released-eckpt.sh "$tmp/eckpt" "$tmp/share" || fail "the released eckpt command did not build"

# libeckpt.so keeps its dynamic symbol table, the C API (a cdylib exports only the eckpt_*
# functions): strip removes the symbol table and the debug information (31 MB to 3 in 0.1).
# Stripped before patchelf edits it: strip can break a file that patchelf has rewritten.
strip --strip-all -o "$tmp/libeckpt.so" "$build/libeckpt.so"
# libeckpt.a keeps the symbols a linker needs and loses the debug information, and the LLVM
# bitcode that rustc embeds in every object (.llvmbc, .llvmcmd: only for cross-language LTO with
# rustc's own LLVM; C and Fortran linkers never read it): 92 MB to 21 in 0.1.
strip --strip-debug --remove-section=.llvmbc --remove-section=.llvmcmd -o "$tmp/libeckpt.a" "$build/libeckpt.a"

install -d "$dest/bin" "$dest/include" "$dest/lib/pkgconfig" "$dest/lib/cmake/eckpt"
# install(1) replaces a file by a new one, so programs running on the old library keep it (and a
# running eckpt its binary).
install -m 0755 "$tmp/eckpt" "$dest/bin/eckpt"
install -m 0755 "$tmp/libeckpt.so" "$dest/lib/$real"
patchelf --set-soname "$soname" "$dest/lib/$real"
ln -sfn "$real" "$dest/lib/$soname"
ln -sfn "$soname" "$dest/lib/libeckpt.so"
install -m 0644 "$tmp/libeckpt.a" "$dest/lib/libeckpt.a"
install -m 0644 include/eckpt.h "$dest/include/eckpt.h"
# The Fortran module as source, not a compiled eckpt.mod: a .mod file is readable only by the
# compiler (and, for gfortran, the major version) that wrote it, so users compile eckpt.f90
# with their own compiler, together with their program.
install -m 0644 include/eckpt.f90 "$dest/include/eckpt.f90"

render packaging/eckpt.pc.in "$dest/lib/pkgconfig/eckpt.pc" \
  PREFIX "$prefix" VERSION "$version" NATIVE_STATIC_LIBS "$native_static_libs"
render packaging/eckptConfig.cmake.in "$dest/lib/cmake/eckpt/eckptConfig.cmake" \
  REAL_NAME "$real" SONAME "$soname" NATIVE_STATIC_LIBS_CMAKE "$cmake_static_libs"
render packaging/eckptConfigVersion.cmake.in "$dest/lib/cmake/eckpt/eckptConfigVersion.cmake" \
  VERSION "$version" ABI "$abi" SIZEOF_VOID_P "$(($(getconf LONG_BIT) / 8))"

# Each written file installed as such, in the same layout below share/.
(cd "$tmp/share" && find . -type f) | sort | while read -r file; do
  install -D -m 0644 "$tmp/share/$file" "$dest/share/${file#./}"
done

# The dynamic linker's cache, so that programs find the new soname in a system library
# directory such as /usr/local/lib; not for a staged install, and only root may write it.
if [ -z "${DESTDIR:-}" ] && [ "$(id -u)" = 0 ]; then
  ldconfig
fi
echo "install: eckpt $version (the command, libeckpt $soname, man pages, completions) in $dest"
