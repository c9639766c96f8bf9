#!/usr/bin/env bash
# test.sh - build scree (installing what is missing) and run its tests:
#   scripts/test.sh [--all | --slow] [ctest arguments]
# Without an option, every test not labelled slow: within 3 minutes on a
# fresh 2-core machine, build included. --all runs every test, --slow only
# the slow set (test_compile's sweep of each op, the ragged softmax's
# emulation of each config, the GPU tests' config sweeps), which CI runs as
# a step of its own (.ci/run). Tests labelled gpu are skipped, with the
# reason, where there is no GPU.
set -eu
cd "$(dirname "$0")/.."
select=(-LE slow)
case "${1:-}" in
  --all) select=(); shift ;;
  --slow) select=(-L slow); shift ;;
esac
scripts/build.sh
cd "${SCREE_BUILD_DIR:-build}"
rc=0
ctest --output-on-failure -j"$(nproc)" ${select[@]+"${select[@]}"} "$@" || rc=$?
# ctest does not show a skipped test's output: print each one's reason.
grep -h "^SKIP: " Testing/Temporary/LastTest*.log 2>/dev/null | sort -u || true
exit $rc
