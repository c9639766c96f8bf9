#!/usr/bin/env bash
# test.sh - build scree (installing what is missing) and run every test.
# Tests labelled gpu are skipped, with the reason, where there is no GPU.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
cd "${SCREE_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" "$@"
