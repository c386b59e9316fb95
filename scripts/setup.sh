#!/usr/bin/env bash
# Installs what graft needs on a fresh Debian 12 machine: the C++ toolchain and -dev packages
# (apt-get), a Python virtual environment inside the project (.venv, git-ignored), and the ONNX C++
# library built from PyPI's source distribution into a cache outside the project
# (docs/dependencies.md: Debian's libonnx-dev is 1.12, opset 17; graft needs the opsets of today's
# exporters). Idempotent: a second run installs and builds nothing and takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libcli11-dev libfmt-dev libdnnl-dev zlib1g-dev
  dataset-fashion-mnist python3-venv python3-dev libopenmpi-dev openmpi-bin
  clang clang-format clang-tidy libomp-dev
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

# The ONNX C++ library (onnx, onnx_proto; static, position-independent, against Debian's shared
# protobuf so that graft and onnx share one protobuf runtime). Its version is the Python package's pin
# in requirements.txt, so that the library and the conformance data of the Python package agree. The
# prefix lives outside the project: `make clean` and fresh clones on this machine reuse it.
ONNX_VERSION=$(sed -n 's/^onnx==\([0-9.]*\).*/\1/p' requirements.txt)
[ -n "$ONNX_VERSION" ] || { echo "setup: requirements.txt pins no onnx==X.Y.Z"; exit 1; }
DEPS=${GRAFT_DEPS_DIR:-$HOME/.cache/graft-deps}
ONNX_PREFIX=$DEPS/onnx-$ONNX_VERSION
mkdir -p "$DEPS"
# Several checkouts on one machine may set up at once: one builds, the others wait for it.
exec 9>"$DEPS/onnx-$ONNX_VERSION.lock"
flock 9
if [ ! -f "$ONNX_PREFIX/.complete" ]; then
  log=$DEPS/onnx-$ONNX_VERSION-build.log
  echo "setup: building the ONNX $ONNX_VERSION C++ library into $ONNX_PREFIX (log: $log; ~10 min on 2 cores)"
  start=$(date +%s)
  if ! scripts/build_onnx.sh "$ONNX_VERSION" "$DEPS" "$ONNX_PREFIX" >"$log" 2>&1; then
    echo "setup: the ONNX $ONNX_VERSION build failed; see $log"
    exit 1
  fi
  echo "$ONNX_VERSION built in $(($(date +%s) - start)) s" > "$ONNX_PREFIX/.complete"
  echo "setup: ONNX $ONNX_VERSION built in $(($(date +%s) - start)) s"
fi
# The conformance data of the same onnx version (tests/conformance reads it; ~3 min).
ONNX_DATA=$DEPS/onnx-$ONNX_VERSION-testdata
if [ ! -f "$ONNX_DATA/ONNX_VERSION" ]; then
  log=$DEPS/onnx-$ONNX_VERSION-testdata.log
  echo "setup: writing the ONNX $ONNX_VERSION conformance data into $ONNX_DATA (log: $log)"
  if ! .venv/bin/python tests/conformance/generate_data.py "$ONNX_DATA" >"$log" 2>&1; then
    echo "setup: writing the ONNX $ONNX_VERSION conformance data failed; see $log"
    exit 1
  fi
fi
exec 9>&-
