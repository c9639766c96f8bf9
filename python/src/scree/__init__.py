"""scree: autotuning GPU kernels for packed variable-length transformer
batches, on torch tensors.

    import scree
    out = scree.varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, causal=True)
    y = scree.rms_norm(x, [hidden], weight, eps=1e-6)

Every function runs on its tensors' CUDA device, on PyTorch's current
stream, and allocates its outputs with PyTorch's allocator. Each op is also
a torch.library custom op (torch.ops.scree.*) with a fake implementation,
so torch.compile(fullgraph=True) keeps it in the graph. varlen_attn,
flash_attn_varlen_func, rms_norm, layer_norm, add_rms_norm, swiglu and
softmax are differentiable (scree's backward kernels); the other ops are
forward only. scree.call(op, **fields) calls any op entry of the
library with its args struct's fields by name (a new op's, before it has a
function here). docs/python.md has the details.

Environment: SCREE_LIBRARY names the libscree.so to load (default: the one
in this package); the C library's own variables (SCREE_MISS_POLICY,
SCREE_CACHE_DIR, SCREE_CACHE_PATH, ...) apply as in C.
"""
import importlib.abc as _importlib_abc
import sys as _sys

from ._lib import (ScreeArgumentError, ScreeError, device_info, runtime_info,
                   version as library_version)
from ._context import counters, current_options, options
from ._generic import call
from ._ops import (add_rms_norm, cross_entropy, flash_attn_varlen_func, kv_append, layer_norm,
                   linear_cross_entropy, paged_attention, ragged_softmax, rms_norm, rope, softmax,
                   swiglu, varlen_attn)

__version__ = "0.1.0"

__all__ = [
    "varlen_attn", "flash_attn_varlen_func", "rms_norm", "layer_norm", "add_rms_norm",
    "softmax", "ragged_softmax", "rope", "swiglu", "cross_entropy", "linear_cross_entropy",
    "kv_append",
    "paged_attention", "call", "options", "current_options", "counters", "runtime_info", "device_info",
    "library_version", "ScreeError", "ScreeArgumentError", "register_transformers",
]


def register_transformers():
    """Registers "scree" as an attention implementation of HuggingFace
    transformers (AttentionInterface and AttentionMaskInterface), so that
    from_pretrained(..., attn_implementation="scree") runs attention through
    scree.varlen_attn. Done by `import scree` in either import order: at
    once when transformers is already imported, else as soon as
    transformers.modeling_utils (where models and AttentionInterface live)
    has been imported; also by importing scree.hf."""
    from . import hf
    hf.register()


class _AfterImport(_importlib_abc.MetaPathFinder):
    """A finder that runs register_transformers() right after the module
    NAME has executed (the module is found by the finders after this one;
    this one only wraps its loader's exec_module), then leaves sys.meta_path.
    A failure to register is a warning, never the user's import error."""

    NAME = "transformers.modeling_utils"

    def find_spec(self, name, path, target=None):
        if name != self.NAME:
            return None
        spec = None
        for finder in list(_sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _remove_hook()
            try:
                register_transformers()
            except Exception as e:  # noqa: BLE001 - never break the user's import
                import warnings
                warnings.warn(f"scree: registering the \"scree\" attention implementation "
                              f"with transformers failed: {e!r}", RuntimeWarning, stacklevel=2)

        loader.exec_module = exec_module
        return spec


_hook = None


def _remove_hook():
    if _hook in _sys.meta_path:
        _sys.meta_path.remove(_hook)


if "transformers" in _sys.modules:
    register_transformers()
else:
    _hook = _AfterImport()
    _sys.meta_path.insert(0, _hook)
