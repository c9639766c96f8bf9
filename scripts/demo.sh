#!/usr/bin/env bash
# demo.sh - build scree (installing what is missing) and run the demo:
# RMSNorm through the runtime on GPU 0 with its time and bandwidth, or,
# without a GPU, the kernels compiled with NVRTC.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
exec "${SCREE_BUILD_DIR:-build}/scree-tune" demo "$@"
