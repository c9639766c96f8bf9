#!/usr/bin/env bash
# run.sh - builds the libFuzzer harnesses of tests/fuzz with clang
# (-DSCREE_FUZZ=ON, installing clang and its runtime where they are
# missing) and runs each for SECONDS on a scratch copy of its seed corpus
# and regression inputs. One line per harness: executions, libFuzzer's final
# cov: and ft:, and pass or fail. Exits 1 if any harness crashed (its input
# is kept, the path printed), 2 on a usage or build error.
#
#   tests/fuzz/run.sh [SECONDS] [BUILD_DIR]      defaults: 30, build-fuzz
#
# SCREE_FUZZ_ONLY=name,... runs only those harnesses (config, cache, ...);
# SCREE_FUZZ_ARGS adds libFuzzer flags (-max_total_time is SECONDS);
# SCREE_FUZZ_KEEP=DIR keeps the scratch corpora and logs in DIR.
# ASAN_OPTIONS is passed on after the harness's own (asan_options below).
set -eu
cd "$(dirname "$0")/../.."
seconds=${1:-30}
build=${2:-build-fuzz}
case "$seconds" in
  '' | *[!0-9]*) echo "usage: tests/fuzz/run.sh [SECONDS] [BUILD_DIR]" >&2; exit 2 ;;
esac

# clang and libFuzzer's runtime (Debian: clang, libclang-rt-14-dev).
have_libfuzzer() {
  command -v clang >/dev/null &&
    [ -f "$(clang --print-runtime-dir 2>/dev/null)/libclang_rt.fuzzer-$(uname -m).a" ]
}
need=()
command -v clang >/dev/null || need+=(clang)
have_libfuzzer || need+=(libclang-rt-14-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The library and the harnesses only; scripts/build.sh installs the rest.
if ! SCREE_BUILD_DIR="$build" scripts/build.sh -DCMAKE_C_COMPILER=clang -DSCREE_FUZZ=ON \
    -DSCREE_BUILD_TESTS=OFF -DSCREE_BUILD_BENCH=OFF -DSCREE_BUILD_CLI=OFF; then
  echo "run.sh: the fuzz build in $build failed" >&2
  exit 2
fi

# Per harness: the longest input libFuzzer makes (the seeds that are longer
# are cut to it).
max_len() {
  case "$1" in
    config) echo 512 ;;
    cache) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

# Per harness: ASan settings ahead of the caller's ASAN_OPTIONS (which win).
# The cache harness frees about a megabyte of SQLite's allocations per
# input: through ASan's default 256 MB quarantine nearly every malloc lands
# on memory long out of the CPU's caches, and the harness ran at 70% of the
# speed it has with 32 MB, which still holds the frees of the last thirty or
# so inputs.
asan_options() {
  case "$1" in
    cache) echo "quarantine_size_mb=32" ;;
  esac
}

# The scratch corpora, logs and crashing inputs: removed at the end unless
# something crashed or SCREE_FUZZ_KEEP names a directory to keep them in.
failed=0
scratch=${SCREE_FUZZ_KEEP:-}
if [ -n "$scratch" ]; then
  mkdir -p "$scratch"
else
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/scree-fuzz-XXXXXX")
  trap '[ "$failed" != 0 ] || rm -rf "$scratch"' EXIT
fi
src=tests/fuzz
printf '%-14s %12s %8s %8s %6s %s\n' harness executions cov ft secs result
for c in "$src"/fuzz_*.c; do
  name=$(basename "$c" .c)
  target=${name#fuzz_}
  if [ -n "${SCREE_FUZZ_ONLY:-}" ] && [[ ",$SCREE_FUZZ_ONLY," != *",$target,"* ]]; then
    continue
  fi
  corpus="$scratch/corpus-$target"
  mkdir -p "$corpus" "$scratch/crashes-$target"
  for d in "$src/corpus/$target" "$src/regressions/$target"; do
    [ -d "$d" ] && cp -f "$d"/* "$corpus"/ 2>/dev/null || true
  done
  log="$scratch/$target.log"
  t0=$(date +%s)
  rc=0
  opts=$(asan_options "$target")
  opts="$opts${opts:+${ASAN_OPTIONS:+:}}${ASAN_OPTIONS:-}"
  # shellcheck disable=SC2086
  ASAN_OPTIONS="$opts" "$build/tests/fuzz/$name" -max_total_time="$seconds" -print_final_stats=1 \
    -max_len="$(max_len "$target")" -timeout=25 -rss_limit_mb=2048 \
    -artifact_prefix="$scratch/crashes-$target/" ${SCREE_FUZZ_ARGS:-} \
    "$corpus" >"$log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - t0 ))
  execs=$(grep -h '^stat::number_of_executed_units:' "$log" | awk '{s += $2} END {print s + 0}')
  last=$(grep -hE '^#[0-9]+.*cov: ' "$log" | tail -n 1 || true)
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  crashes=$(ls "$scratch/crashes-$target" | wc -l)
  if [ "$rc" = 0 ] && [ "$crashes" = 0 ]; then
    result=pass
  else
    result="FAIL (exit $rc; $log)"
    for f in "$scratch/crashes-$target"/*; do [ -e "$f" ] && result="$result; input $f"; done
    failed=1
    tail -n 40 "$log" >&2
  fi
  printf '%-14s %12s %8s %8s %6s %s\n' "$name" "$execs" "${cov:-?}" "${ft:-?}" "$secs" "$result"
done
[ "$failed" = 0 ] || echo "run.sh: crashing inputs and logs kept in $scratch" >&2
exit $failed
