#!/usr/bin/env bash
# test-python.sh - the Python package's tests that need no GPU, from a clean
# checkout: a virtual environment in build-py/ with PyTorch, transformers
# and pytest from PyPI, `pip install ./python` into it (scree's CMake build,
# through scikit-build-core), then the pytest suite less its gpu-marked
# tests, run from outside the source tree so that the installed wheel is
# what is tested. The system packages the build needs are installed by
# scripts/build.sh, as for the C tests.
#   SCREE_TORCH=torch==2.11.0 SCREE_TRANSFORMERS=transformers==5.17.0 (the
#   versions the GPU machine has) choose other versions.
set -eu
cd "$(dirname "$0")/.."
scripts/build.sh
venv=build-py/venv
rm -rf "$venv"
python3 -m venv "$venv"
pip="$venv/bin/pip --disable-pip-version-check -q"
$pip install "${SCREE_TORCH:-torch==2.11.0}" "${SCREE_TRANSFORMERS:-transformers==5.17.0}" pytest
$pip install ./python
cd build-py
rc=0
"$(pwd)/venv/bin/python" -m pytest ../python/tests -m "not gpu" -q -rs -p no:cacheprovider || rc=$?
exit $rc
