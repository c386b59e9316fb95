#!/usr/bin/env bash
# Installs what graft needs on a fresh Debian 12 machine: the C++ toolchain and -dev packages
# (apt-get), and a Python virtual environment inside the project (.venv, git-ignored).
# Idempotent: a second run installs nothing and takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libonnx-dev libonnx-testdata libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libcli11-dev libfmt-dev libdnnl-dev zlib1g-dev
  dataset-fashion-mnist python3-venv python3-dev libopenmpi-dev openmpi-bin
  clang clang-format clang-tidy
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.graft-requirements
if [ ! -f "$stamp" ] || ! cmp -s requirements.txt "$stamp"; then
  echo "setup: installing Python packages into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  cp requirements.txt "$stamp"
fi
# Make the in-tree package importable from the venv (the extension is built into python/graft).
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/python" > "$site/graft-dev.pth"
