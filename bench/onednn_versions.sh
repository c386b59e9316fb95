#!/bin/bash
# Builds bench/onednn_versions.cpp against Debian's oneDNN 2.6 and PyPI's onednn-cpu-gomp 3.2
# (wheels downloaded into build/onednn3 with pip) and runs both, alternated, at batch 1 and 8
# with 2 threads and passive waits. Usage: bench/onednn_versions.sh [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/onednn3
pairs=${1:-2}
mkdir -p "$out"
if [ ! -d "$out/x" ]; then
  python3 -m pip download --no-deps -q onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 -d "$out"
  for w in "$out"/*.whl; do python3 -m zipfile -e "$w" "$out/x"; done
fi
inc=$(echo "$out"/x/onednn_devel_cpu_gomp-*.data/data/include)
lib=$(echo "$out"/x/onednn_cpu_gomp-*.data/data/lib)
g++ -O2 -std=c++17 bench/onednn_versions.cpp -o "$out/convs_26" -ldnnl -fopenmp
g++ -O2 -std=c++17 -I"$inc" bench/onednn_versions.cpp -o "$out/convs_32" -L"$lib" -l:libdnnl.so.3 \
  -Wl,-rpath,"$(realpath "$lib")" -fopenmp
for batch in 1 8; do
  for _ in $(seq "$pairs"); do
    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$out/convs_26" "$batch"
    OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE "$out/convs_32" "$batch"
  done
done
