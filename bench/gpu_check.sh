#!/usr/bin/env bash
# gpu_check.sh - everything that needs the GPU, in one go: the gpu-labelled
# tests, then the benchmarks (CPU tests run in CI: scripts/test.sh). Run from the repository root on a GPU machine
# with a build made by `scripts/build.sh` (or any build in ./build).
#   bench/gpu_check.sh [OUTDIR] [--sweep]
set -u
out=${1:-gpu-results}
mkdir -p "$out"
shift || true
build=${SCREE_BUILD_DIR:-build}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
"$build/scree-tune" info | tee "$out/info.txt"
(cd "$build" && ctest -L gpu --output-on-failure 2>&1) | tee "$out/ctest.txt"
"$build/bench/bench_rowwise" "$@" --csv "$out/rowwise.csv" 2>&1 | tee "$out/bench_rowwise.txt"
# The first call of each shape tunes it (into a scratch cache), as in a
# deployment with SCREE_MISS_POLICY=tune.
SCREE_CACHE_DIR=$(mktemp -d) SCREE_MISS_POLICY=tune PYTHONUNBUFFERED=1 python3 bench/compare_torch.py --lib "$build/libscree.so" \
  --json "$out/compare_torch.json" 2>&1 | tee "$out/compare_torch.txt"
