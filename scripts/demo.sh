#!/usr/bin/env bash
# demo.sh - build scree (installing what is missing) and run the demo:
# RMSNorm and varlen attention through the runtime on GPU 0, each checked
# against its CPU reference, with its time and TFLOP/s or GB/s; without a
# GPU, the default kernels compiled with NVRTC.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
exec "${SCREE_BUILD_DIR:-build}/scree-tune" demo "$@"
