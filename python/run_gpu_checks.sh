#!/usr/bin/env bash
# run_gpu_checks.sh - the Python package's GPU work, from the source tree
# with a built libscree (no pip install: the package is imported from
# python/src, the library named by SCREE_LIBRARY): the gpu-marked pytest
# tests, the per-call overhead benchmark, examples/llama_block.py and
# examples/decode.py. Each
# one's output goes to OUTDIR; the exit status is non-zero if any failed.
#   python/run_gpu_checks.sh BUILD_DIR [OUTDIR]
# Needs python3 with torch (and triton, transformers for their parts) and
# pytest. Where pytest is not installed, python/.pydeps is put on the path:
# `pip install --target python/.pydeps pytest` on a machine with PyPI makes
# one (pure Python) to carry along.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: run_gpu_checks.sh BUILD_DIR [OUTDIR]}" && pwd)
out=${2:-python-gpu-results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONPATH="$root/python/src${PYTHONPATH:+:$PYTHONPATH}"
[ -d "$root/python/.pydeps" ] && PYTHONPATH="$PYTHONPATH:$root/python/.pydeps"
export SCREE_LIBRARY="$build/libscree.so" PYTHONUNBUFFERED=1
# A scratch tuning cache: the runs start from nothing, as on a new machine.
export SCREE_CACHE_DIR=${SCREE_CACHE_DIR:-$(mktemp -d)}
cd "$root"
python3 -c "import torch, scree; print('torch', torch.__version__, 'scree', scree.__version__, \
  scree.library_version(), scree.runtime_info())" 2>&1 | tee "$out/info.txt"
rc=0
python3 -m pytest python/tests -m gpu -v -rs -p no:cacheprovider 2>&1 | tee "$out/pytest-gpu.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
python3 bench/python_overhead.py --json "$out/overhead.json" 2>&1 | tee "$out/overhead.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
python3 examples/llama_block.py 2>&1 | tee "$out/llama_block.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
python3 examples/llama_block.py --config small --seqs 32 --min-len 16 --max-len 512 2>&1 |
  tee "$out/llama_block_small.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
python3 examples/decode.py --device cuda 2>&1 | tee "$out/decode.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
python3 examples/decode.py --device cuda --dtype bf16 --page-size 1 --prompts 300,5,64 2>&1 |
  tee "$out/decode_bf16.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "run_gpu_checks: exit $rc (outputs in $out)"
exit $rc
