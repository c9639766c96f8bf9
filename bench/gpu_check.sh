#!/usr/bin/env bash
# gpu_check.sh - everything that needs the GPU, in one go: the gpu-labelled
# tests, the attention, paged attention and KV-append tests under
# compute-sanitizer (memcheck, racecheck; synccheck too for the hopper kernels),
# then the benchmarks (CPU tests run in CI: scripts/test.sh). Run from the
# repository root on a GPU machine with a build made by scripts/build.sh
# (or any build in ./build). Results go to OUTDIR.
#   bench/gpu_check.sh [OUTDIR] [tests|sanitize|bench|sweep|paged-sweep|all]
# sweep (not part of all): every config of each row-wise op's space timed on
# its cases of bench/rowwise_sweep.txt, CSVs for tools/make_rowwise_safelist.py;
# sweep-backward: the same for the backward ops on bench/rowwise_backward_sweep.txt;
# paged-sweep: paged attention's configs on bench/paged_sweep.txt (split) and
# bench/paged_prefill_sweep.txt (hopper).
set -u
out=${1:-gpu-results}
what=${2:-all}
mkdir -p "$out"
build=${SCREE_BUILD_DIR:-build}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
"$build/scree-tune" info | tee "$out/info.txt"
if [ "$what" = tests ] || [ "$what" = all ]; then
  # Correctness tests share the GPU: run them side by side (their time is
  # mostly NVRTC compiles and CPU references); test_tune_gpu, which compares
  # timings, runs alone afterwards.
  (cd "$build" && ctest -L gpu -E test_tune_gpu -j"${SCREE_TEST_JOBS:-8}" --output-on-failure 2>&1 &&
    ctest -R test_tune_gpu --output-on-failure 2>&1) | tee "$out/ctest.txt"
fi
if [ "$what" = sweep ] || [ "$what" = sweep-backward ]; then
  cases=bench/rowwise_sweep.txt
  ops="layernorm add_rmsnorm softmax ragged_softmax rope swiglu cross_entropy"
  if [ "$what" = sweep-backward ]; then
    cases=bench/rowwise_backward_sweep.txt
    ops="rmsnorm_backward add_rmsnorm_backward layernorm_backward softmax_backward ragged_softmax_backward swiglu_backward rope_backward"
  fi
  for op in ${SCREE_SWEEP_OPS:-$ops}; do
    SCREE_CACHE_DIR=$(mktemp -d) "$build/bench/bench_ops" --file $cases --op "$op" --sweep --reps 5 \
      --csv "$out/sweep-$op.csv" > "$out/sweep-$op.txt" 2>&1
    echo "sweep $op: exit $? ($(grep -c sweep "$out/sweep-$op.csv") configs x cases)"
  done
fi
if [ "$what" = paged-sweep ]; then
  # Paged attention's safelist measurements: the split implementation over
  # the decode buckets, the hopper one over the prefill buckets.
  for impl in split hopper; do
    f=bench/paged_sweep.txt; [ $impl = hopper ] && f=bench/paged_prefill_sweep.txt
    SCREE_CACHE_DIR=$(mktemp -d) "$build/bench/bench_ops" --file $f --sweep --sweep-impl $impl \
      --reps 5 --csv "$out/sweep-paged-$impl.csv" > "$out/sweep-paged-$impl.txt" 2>&1
    echo "paged sweep $impl: exit $? ($(grep -c sweep "$out/sweep-paged-$impl.csv") configs x cases)"
  done
fi
if [ "$what" = sanitize ] || [ "$what" = all ]; then
  # memcheck on the quick case; racecheck (much slower) on the small one.
  for tool in memcheck racecheck; do
    case=quick; [ $tool = racecheck ] && case=race
    CK_RUN_CASE=$case compute-sanitizer --tool $tool --error-exitcode 9 \
      "$build/tests/test_attention_gpu" > "$out/sanitize-$tool.txt" 2>&1
    echo "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$tool.txt" | tail -1))"
  done
  # Paged attention and the KV-cache write: memcheck on their race cases
  # and kv_append's quick case, racecheck on the race cases.
  for t in "memcheck race paged_attention" "racecheck race paged_attention" \
           "memcheck quick kv_append"; do
    set -- $t
    CK_RUN_CASE=$2 compute-sanitizer --tool $1 --error-exitcode 9 \
      "$build/tests/test_$3_gpu" > "$out/sanitize-$3-$1.txt" 2>&1
    echo "compute-sanitizer $1 ($3): exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-$3-$1.txt" | tail -1))"
  done
  # The hopper implementation (sm_90a; its configs skip elsewhere), synccheck too.
  for tool in memcheck racecheck synccheck; do
    CK_RUN_CASE=hopper_race compute-sanitizer --tool $tool --error-exitcode 9 \
      "$build/tests/test_attention_gpu" > "$out/sanitize-hopper-$tool.txt" 2>&1
    echo "compute-sanitizer $tool (hopper): exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-hopper-$tool.txt" | tail -1))"
  done
  # Paged attention's hopper implementation: a small prefill batch, pages of 8 and 64.
  for tool in memcheck racecheck synccheck; do
    CK_RUN_CASE=hopper_race compute-sanitizer --tool $tool --error-exitcode 9 \
      "$build/tests/test_paged_attention_gpu" > "$out/sanitize-paged-hopper-$tool.txt" 2>&1
    echo "compute-sanitizer $tool (paged hopper): exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize-paged-hopper-$tool.txt" | tail -1))"
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  "$build/bench/bench_rowwise" --csv "$out/rowwise.csv" 2>&1 | tee "$out/bench_rowwise.txt"
  "$build/bench/bench_ops" --csv "$out/ops.csv" 2>&1 | tee "$out/bench_ops.txt"
  # The first call of each shape tunes it (into a scratch cache), as in a
  # deployment with SCREE_MISS_POLICY=tune.
  SCREE_CACHE_DIR=$(mktemp -d) SCREE_MISS_POLICY=tune python3 bench/compare_torch.py \
    --lib "$build/libscree.so" --json "$out/compare_torch.json" 2>&1 | tee "$out/compare_torch.txt"
  # The paged decode table (FA-2 on gathered K/V and a copy beside it).
  SCREE_CACHE_DIR=$(mktemp -d) SCREE_MISS_POLICY=tune python3 bench/compare_torch.py --op paged \
    --lib "$build/libscree.so" --json "$out/compare_paged.json" 2>&1 | tee "$out/compare_paged.txt"
  # Paged prefill against scree_attention on the same data (the hopper implementation on sm_90).
  SCREE_CACHE_DIR=$(mktemp -d) python3 bench/compare_torch.py --op paged --paged-set prefill \
    --lib "$build/libscree.so" --json "$out/compare_paged_prefill.json" 2>&1 | tee "$out/compare_paged_prefill.txt"
fi
