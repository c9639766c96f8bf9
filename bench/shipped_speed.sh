#!/usr/bin/env bash
# shipped_speed.sh - on a GPU: do the shipped tuned configs (caches/) serve
# the model presets' shapes, in a process without NVRTC, as fast as a local
# tune does? (docs/cluster.md, "Measuring it")
#
#   bench/shipped_speed.sh [MODEL ...]      # default: llama-3-8b
#
# 1. compiles the shipped configs of this GPU's architecture into a fresh
#    cache (scree-tune prewarm --from-shipped: NVRTC only, nothing timed);
# 2. runs each preset shape (one bench_ops case per bucket, from prewarm
#    --dry-run) from that cache with NVRTC hidden (SCREE_NVRTC_LIBRARY
#    pointing nowhere, SCREE_NVRTC_OPTIONAL=1): a bucket that the shipped
#    configs lack fails there instead of being compiled;
# 3. runs them again on a fresh cache that tunes each bucket on its first
#    call (the local tune);
# 4. prints both medians per case, their ratio, and the geometric mean.
set -eu
cd "$(dirname "$0")/.."
build=${SCREE_BUILD_DIR:-build}
models=${*:-llama-3-8b}
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
for m in $models; do "$build/scree-tune" prewarm --model "$m" --dry-run -q; done |
  awk '{print $1, $3, $4}' | sort -u > "$w/cases.txt"
echo "$(wc -l < "$w/cases.txt") preset bucket(s) of: $models"
"$build/scree-tune" prewarm --from-shipped --cache "$w/shipped.db" --quiet
echo "== from the shipped configs, NVRTC absent"
SCREE_TUNED_CONFIGS=none SCREE_NVRTC_OPTIONAL=1 SCREE_NVRTC_LIBRARY=/nonexistent/libnvrtc.so.13 \
  "$build/bench/bench_ops" --file "$w/cases.txt" --cache "$w/shipped.db" --csv "$w/shipped.csv" |
  tail -3
echo "== after a local tune"
SCREE_TUNED_CONFIGS=none "$build/bench/bench_ops" --file "$w/cases.txt" --cache "$w/local.db" \
  --csv "$w/local.csv" | tail -3
# case,op,variant,shape,us,...: the cases are the same lines in both runs
# (variant and shape are quoted and hold commas: a CSV reader, not awk -F,).
python3 - "$w/local.csv" "$w/shipped.csv" <<'PY'
import csv, math, sys
local = {r["case"]: float(r["us"]) for r in csv.DictReader(open(sys.argv[1]))}
n, s = 0, 0.0
for r in csv.DictReader(open(sys.argv[2])):
    us, lu = float(r["us"]), local.get(r["case"], 0.0)
    if us > 0 and lu > 0:
        n, s = n + 1, s + math.log(us / lu)
        print(f"{r['case']:<16} {r['op']:<14} shipped {us:10.2f} us  local {lu:10.2f} us  "
              f"{us / lu:.3f}x")
if n:
    print(f"{n} case(s): shipped / local time, geometric mean {math.exp(s / n):.3f}")
PY
