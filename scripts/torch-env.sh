#!/usr/bin/env bash
# Makes torch importable from the repository's venv (.venv) for the tests of eckpt.torch. torch's
# Linux wheel from the Python registry carries the CUDA libraries (about 3 GB installed), so it is
# installed once per machine into a venv of its own under the user's cache
# (~/.cache/eckpt/torch-VERSION-pyX.Y) and .venv sees it through a .pth file: a fresh clone does
# not install it again. Idempotent; prints the torch venv's directory.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="2.15.0"
python="$repo/.venv/bin/python"
py="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/eckpt"
torch_venv="$cache/torch-$version-py$py"

if [ ! -f "$torch_venv/.complete" ]; then
  echo "torch-env: installing torch $version into $torch_venv (once per machine: about 3 GB with its CUDA libraries)" >&2
  rm -rf "$torch_venv"
  mkdir -p "$cache"
  "$python" -m venv "$torch_venv"
  "$torch_venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$version"
  touch "$torch_venv/.complete"
fi
site="$("$torch_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mine="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$site" > "$mine/eckpt-torch.pth"
echo "$torch_venv"
