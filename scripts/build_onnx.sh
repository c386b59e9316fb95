#!/usr/bin/env bash
# Builds the ONNX C++ library (onnx, onnx_proto) from PyPI's source distribution and installs it.
# Called by scripts/setup.sh, which logs the output: build_onnx.sh VERSION DEPS_DIR PREFIX.
# Static, position-independent libraries (graft's Python module links them), against Debian's
# shared protobuf (one protobuf runtime in the process, shared with graft). ONNX_ML stays on, as in
# Debian's build, so that the ai.onnx.ml schemas are registered. No Python extension, no tests.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$1 deps=$2 prefix=$3
src=$deps/src/onnx-$version
py=$PWD/.venv/bin/python
rm -rf "$src" "$src-build" "$prefix"
mkdir -p "$deps/src"
if [ ! -f "$deps/src/onnx-$version.tar.gz" ]; then
  "$py" -m pip download -q --no-binary :all: --no-deps "onnx==$version" -d "$deps/src"
fi
tar -xzf "$deps/src/onnx-$version.tar.gz" -C "$deps/src"
cmake -S "$src" -B "$src-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DONNX_BUILD_PYTHON=OFF -DONNX_BUILD_TESTS=OFF -DONNX_ML=1 -DONNX_NAMESPACE=onnx \
  -DONNX_USE_PROTOBUF_SHARED_LIBS=ON -DONNX_BUILD_CUSTOM_PROTOBUF=OFF -DONNX_GEN_PB_TYPE_STUBS=OFF \
  -DONNX_WERROR=OFF -DPython3_EXECUTABLE="$py" -DPython_EXECUTABLE="$py"
cmake --build "$src-build" -j "${ONNX_JOBS:-2}"
cmake --install "$src-build"
rm -rf "$src" "$src-build"
