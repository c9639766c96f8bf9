"""Tests of the scree package. Those marked gpu need a CUDA GPU and are
skipped, with the reason, without one; the rest run anywhere (CI).

    python3 -m pytest python/tests -m "not gpu"     # CPU part (CI)
    python3 -m pytest python/tests -m gpu           # GPU part

SCREE_TEST_SEED=<n> replays a run's random inputs (each run prints its seed).
"""
import os
import random
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SEED = int(os.environ.get("SCREE_TEST_SEED", random.randrange(1 << 31)))


def _gpu_reason():
    if not torch.cuda.is_available():
        return "no CUDA device visible to PyTorch"
    import scree
    info = scree.runtime_info()
    if not info["device_count"]:
        return f"scree sees no GPU: {info['driver_error']}"
    return None


def pytest_report_header(config):
    import scree
    return [f"scree {scree.__version__} from {os.path.dirname(scree.__file__)}, "
            f"torch {torch.__version__}, SCREE_TEST_SEED={SEED}"]


def pytest_collection_modifyitems(config, items):
    reason = None
    checked = False
    for item in items:
        if "gpu" in item.keywords:
            if not checked:
                reason, checked = _gpu_reason(), True
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"gpu: {reason}"))


@pytest.fixture
def gen():
    """A seeded CPU generator (SCREE_TEST_SEED) for the test's inputs."""
    g = torch.Generator()
    g.manual_seed(SEED)
    return g


@pytest.fixture(scope="session")
def cpu_kernels():
    """torch.ops.scree.* with CPU kernels running tests/reference.py."""
    import reference
    reference.register_cpu_kernels()
