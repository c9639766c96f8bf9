"""scree: autotuning GPU kernels for packed variable-length transformer
batches, on torch tensors.

    import scree
    out = scree.varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, causal=True)
    y = scree.rms_norm(x, [hidden], weight, eps=1e-6)

Every function runs on its tensors' CUDA device, on PyTorch's current
stream, and allocates its outputs with PyTorch's allocator. Each op is also
a torch.library custom op (torch.ops.scree.*) with a fake implementation,
so torch.compile(fullgraph=True) keeps it in the graph. The ops are forward
only (inference). scree.call(op, **fields) calls any op entry of the
library with its args struct's fields by name (a new op's, before it has a
function here). docs/python.md has the details.

Environment: SCREE_LIBRARY names the libscree.so to load (default: the one
in this package); the C library's own variables (SCREE_MISS_POLICY,
SCREE_CACHE_DIR, SCREE_CACHE_PATH, ...) apply as in C.
"""
import sys as _sys

from ._lib import (ScreeArgumentError, ScreeError, device_info, runtime_info,
                   version as library_version)
from ._context import counters, current_options, options
from ._generic import call
from ._ops import (add_rms_norm, cross_entropy, flash_attn_varlen_func, kv_append, layer_norm,
                   paged_attention, ragged_softmax, rms_norm, rope, softmax, swiglu, varlen_attn)

__version__ = "0.1.0"

__all__ = [
    "varlen_attn", "flash_attn_varlen_func", "rms_norm", "layer_norm", "add_rms_norm",
    "softmax", "ragged_softmax", "rope", "swiglu", "cross_entropy", "kv_append",
    "paged_attention", "call", "options", "current_options", "counters", "runtime_info", "device_info",
    "library_version", "ScreeError", "ScreeArgumentError", "register_transformers",
]


def register_transformers():
    """Registers "scree" as an attention implementation of HuggingFace
    transformers (AttentionInterface and AttentionMaskInterface), so that
    from_pretrained(..., attn_implementation="scree") runs attention through
    scree.varlen_attn. Done on import of scree when transformers is already
    imported, and by importing scree.hf."""
    from . import hf
    hf.register()


if "transformers" in _sys.modules:
    register_transformers()
