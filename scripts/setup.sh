#!/usr/bin/env bash
# Installs everything eckpt needs to build and test on a fresh Debian machine: the packages the
# ISA-L build and the tests need, and a Rust toolchain if there is none. Idempotent and quiet
# when everything is already there.
set -euo pipefail

packages=(
  build-essential pkg-config      # C toolchain for ISA-L, the C API examples
  gfortran                        # the Fortran interface example
  nasm autoconf automake libtool  # ISA-L >= 2.32 is built from source (GFNI kernels)
  libclang-dev clang              # bindgen for the ISA-L bindings
  libisal2 libisal-dev            # Debian's ISA-L 2.30: the independent reference in tests/benches
  xdelta3                         # reference for the delta benchmarks
  python3 python3-venv            # the Python binding and its tests
  iproute2                        # ip netns / tc tbf: emulated hosts on shaped links
  chromium chromium-driver        # the headless-browser test of `eckpt report`'s page
  openmpi-bin libopenmpi-dev      # eckpt run --launcher mpirun and the MPI example
  slurm-wlm munge                 # a real Slurm on this machine: eckpt run --launcher srun's tests
  mpich libmpich-dev              # eckpt run --launcher mpiexec (MPICH's Hydra)
  patchelf                        # make install: the soname of the installed libeckpt.so
  cmake                           # the install test builds a CMake project against the install
  man-db                          # the install test reads the installed man pages (man -M)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: no Rust toolchain; installing Debian's rustup and the stable toolchain"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rustup >/dev/null
  rustup default stable
fi
