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


@pytest.fixture
def captured(monkeypatch):
    """Runs the real implementations on CPU tensors with the C call replaced
    by a recorder: each call's struct, unpacked into a dict by field name."""
    from scree import _lib, _ops
    calls = []
    by_entry = {}
    for struct_name, entry in _lib.ENTRIES.items():
        by_entry[entry] = struct_name

    class Entry:
        def __init__(self, name):
            self.name = name

        def __call__(self, ctx, packed, stream):
            sname = by_entry[self.name]
            fields = [f for f, _ in _lib.ARG_STRUCTS[sname]]
            calls.append((self.name, dict(zip(fields, _lib.PACKERS[sname].unpack(packed)))))
            return 0

    class FakeLib:
        def __getattr__(self, name):
            return Entry(name)

    monkeypatch.setattr(_ops, "_on_cuda", lambda op, name, t: None)
    monkeypatch.setattr(_ops, "_launch_state", lambda t: (None, None))
    monkeypatch.setattr(_lib, "lib", lambda: FakeLib())
    return calls


@pytest.fixture
def aot_graphs():
    """(backend, graphs): a torch.compile backend (AOT autograd running the
    traced forward, so that custom ops go through their fake
    implementations) that keeps each Dynamo graph in graphs."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        from torch._dynamo.backends.common import aot_autograd
        from functorch.compile import make_boxed_func
        return aot_autograd(fw_compiler=lambda g, _: make_boxed_func(g.forward))(
            gm, example_inputs)

    return backend, graphs
