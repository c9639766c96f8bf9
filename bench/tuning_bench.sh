#!/usr/bin/env bash
# tuning_bench.sh - scree's tuning economics beside Triton's, in one run on
# one GPU: cold tuning time of one RMSNorm bucket, the first call of a fresh
# process with a warm cache, and host time per call on a hit.
#   bench/tuning_bench.sh [OUTDIR]
set -u
out=${1:-tuning-results}
mkdir -p "$out"
build=${SCREE_BUILD_DIR:-build}
now() { date +%s.%N; }
export SCREE_CACHE_DIR=$(mktemp -d)
echo "== scree: cold tune of one bucket (rows<=16384, cols=4096, bf16), whole process"
t0=$(now)
"$build/scree-tune" prewarm --op rmsnorm --rows 16384 --cols 4096 --dtype bf16 --json \
  > "$out/prewarm_cold.json"
t1=$(now)
cat "$out/prewarm_cold.json"
echo "scree-tune process wall time: $(python3 -c "print(round($t1 - $t0, 3))") s"
echo "== scree: the same bucket, exploring the whole config space (--explore --force)"
t0=$(now)
"$build/scree-tune" prewarm --op rmsnorm --rows 16384 --cols 4096 --dtype bf16 --explore --force --json
t1=$(now)
echo "scree-tune --explore process wall time: $(python3 -c "print(round($t1 - $t0, 3))") s"
echo "== scree: first call in fresh processes with the warm cache"
for i in 1 2 3; do "$build/tests/cache_probe" "$SCREE_CACHE_DIR/tune.db" 16384 4096 bf16; done
echo "== scree: the same without NVRTC (SCREE_NVRTC_LIBRARY points nowhere)"
SCREE_NVRTC_LIBRARY=/nonexistent "$build/tests/cache_probe" "$SCREE_CACHE_DIR/tune.db" 16384 4096 bf16
echo "== scree: a model preset (llama-3-8b, 15 buckets)"
t0=$(now)
"$build/scree-tune" prewarm --model llama-3-8b --quiet
t1=$(now)
echo "llama-3-8b prewarm wall time: $(python3 -c "print(round($t1 - $t0, 3))") s"
"$build/scree-tune" list
"$build/scree-tune" verify --retime
"$build/scree-tune" show --bucket "rows<=16384,cols=4096"
"$build/scree-tune" export "$out/shipped.db" --arch sm_90
"$build/scree-tune" safelist export --arch sm_90 -o "$out/sm_90.learned.txt"
echo "== Triton 3.x autotuner, 24 configs, same shape"
export TRITON_CACHE_DIR=$(mktemp -d)
python3 bench/triton_tuning.py cold
python3 bench/triton_tuning.py warm
python3 bench/triton_tuning.py launch
