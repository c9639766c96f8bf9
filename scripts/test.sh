#!/usr/bin/env bash
# test.sh - build scree (installing what is missing) and run every test.
# Tests labelled gpu are skipped, with the reason, where there is no GPU.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
cd "${SCREE_BUILD_DIR:-build}"
rc=0
ctest --output-on-failure -j"$(nproc)" "$@" || rc=$?
# ctest does not show a skipped test's output: print each one's reason.
grep -h "^SKIP: " Testing/Temporary/LastTest*.log 2>/dev/null | sort -u || true
exit $rc
