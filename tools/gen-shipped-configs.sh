#!/usr/bin/env bash
# gen-shipped-configs.sh - on a GPU machine: tunes every model preset
# (presets/models.txt) and the benchmark shapes (bench/rowwise_shapes.json,
# every op's benchmark entries, bench/attention_configs.json) into a fresh
# cache on all of the machine's GPUs, checks every winner against the CPU
# reference, and writes them as the shipped tuned configs caches/NAME.txt
# (docs/cluster.md).
#
#   scripts/build.sh && tools/gen-shipped-configs.sh h100-sxm    # on an H100 SXM
#   tools/gen-shipped-configs.sh h200                            # on an H200
#
# Environment: SCREE_BUILD_DIR (default build), SCREE_DTYPES (default
# bf16,fp16), SCREE_DEVICES (default all), SCREE_KEEP_CACHE=FILE to keep the
# cache (with its cubins: `scree-tune export` it to ship it as a .db too).
set -eu
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 NAME (caches/NAME.txt: h100-sxm, h200, ...)" >&2; exit 2; }
name=$1
build=${SCREE_BUILD_DIR:-build}
tune=$build/scree-tune
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db=${SCREE_KEEP_CACHE:-$work/tune.db}
dtypes=${SCREE_DTYPES:-bf16,fp16}
devices=${SCREE_DEVICES:-all}
t0=$SECONDS
$tune info
# The shipped configs must not answer for themselves: tune from nothing.
export SCREE_TUNED_CONFIGS=none SCREE_CACHE_PATH=
models=$(sed -n 's/^model \([^ ]*\).*/\1/p' presets/models.txt)
for m in $models; do
  echo "== prewarm --model $m --dtype $dtypes"
  $tune prewarm --model "$m" --dtype "$dtypes" --devices "$devices" --cache "$db" --quiet
done
echo "== prewarm --shapes bench/rowwise_shapes.json"
$tune prewarm --shapes bench/rowwise_shapes.json --devices "$devices" --cache "$db" --quiet
echo "== the benchmark entries (tuned on their first call)"
$build/bench/bench_ops --cache "$db" --reps 3 --inner 1 >/dev/null
$build/bench/bench_ops --json-configs bench/attention_configs.json --cache "$db" --reps 3 \
  --inner 1 >/dev/null
echo "== verify"
$tune verify --cache "$db" --quiet
$tune export --text "caches/$name.txt" --cache "$db"
echo "caches/$name.txt: $(grep -vc '^#' "caches/$name.txt") entries in $((SECONDS - t0)) s;" \
  "rebuild to embed them, and review the diff"
