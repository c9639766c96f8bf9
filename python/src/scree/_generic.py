"""scree.call: any op entry of the library, its args struct filled by name
from torch tensors and numbers, by the op's schema (_structs.py, generated
from src/runtime/ops/<op>.c). It is how an op without a wrapper of its own
in _ops.py (a new one, say) is called from Python: eager, on CUDA tensors,
with no custom op and no fake implementation."""
import torch

from . import _args, _lib, _ops

_ELEM = {"float32": torch.float32, "int32": torch.int32, "int64": torch.int64}
_TENSOR_ROLES = ("in", "out", "inout")


def _view(op, name, t, rank):
    """t as a tensor of the schema's rank: leading dimensions flattened into
    the first when it has more (rows of any batch shape), as a view."""
    if t.dim() == rank:
        return t
    if t.dim() < rank:
        raise ValueError(f"scree.call({op!r}): argument '{name}' has shape {tuple(t.shape)}; "
                         f"the op's {name} has {rank} dimensions")
    try:
        return t.view(-1, *t.shape[t.dim() - rank + 1:])
    except RuntimeError:
        raise ValueError(f"scree.call({op!r}): argument '{name}' (shape {tuple(t.shape)}, "
                         f"strides {t.stride()}) has no view of {rank} dimensions") from None


def call(op, /, *, stream=None, **fields):
    """Calls scree_<op> ("rmsnorm", "attention", ...; the names of
    scree._lib.OPS) with its args struct's fields as keyword arguments: a
    tensor for each buffer, numbers for the rest. A field not given comes
    from the tensors, by the schema: a dimension from the extent of a tensor
    that spans it (a tensor with more dimensions than the schema's has its
    leading ones flattened into the first), a stride from that tensor's
    stride, a dtype from the tensors it types, a 64-bit index flag from an
    int64 index tensor; anything else is 0, the C default. A tensor must be
    at least as large as the fields given say. Runs on the tensors' CUDA
    device, on stream (a raw cudaStream_t as an int) or PyTorch's current
    one there; returns None (outputs are tensors the caller passes)."""
    schema = _lib.OPS.get(op)
    if schema is None:
        raise ValueError(f"scree.call: unknown op {op!r} (one of {', '.join(_lib.OPS)})")
    by_name = {f["name"]: f for f in schema["fields"]}
    unknown = set(fields) - set(by_name)
    if unknown:
        raise TypeError(f"scree.call({op!r}): no field {', '.join(sorted(unknown))} in "
                        f"{schema['struct']}")
    where = f"call({op!r})"
    values = {}
    for n, v in fields.items():
        f = by_name[n]
        if f["role"] == "float":
            values[n] = _args.real(where, n, v, (op, n))
        elif f["role"] not in _TENSOR_ROLES:
            values[n] = _args.integer(where, n, v, (op, n))
    views, ref = {}, None
    for f in schema["fields"]:
        t = fields.get(f["name"])
        if f["role"] not in _TENSOR_ROLES or t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"scree.call({op!r}): argument '{f['name']}' must be a tensor or "
                            f"None, not {type(t).__name__}")
        if ref is None:
            ref = t
            _ops._on_cuda(f"call({op!r})", f["name"], t)
        else:
            _ops._same_device(f"call({op!r})", f["name"], t, ref)
        views[f["name"]] = v = _view(op, f["name"], t, len(f["dims"]))
        _infer(op, f, v, values)
    if ref is None:
        raise ValueError(f"scree.call({op!r}): no tensor given")
    for name, v in views.items():
        _check_extents(op, by_name[name], v, values)
    packed = []
    for f in schema["fields"]:
        if f["role"] in _TENSOR_ROLES:
            packed.append(views[f["name"]].data_ptr() if f["name"] in views else 0)
        else:
            packed.append(values.get(f["name"], 0))
    ctx, s = _ops._launch_state(ref)
    _ops._call(f"call({op!r})", getattr(_lib.lib(), schema["entry"]),
               _lib.PACKERS[schema["struct"]].pack(*packed), ctx, s if stream is None else stream,
               {n: n for n in by_name})


def _infer(op, f, t, values):
    """Fills the fields tensor t gives that were not given: its extents,
    strides and dtype."""
    name = f["name"]
    for i, d in enumerate(f["dims"]):
        n = t.shape[i] - 1 if i == 0 and "plus_one" in f["flags"] else t.shape[i]
        values.setdefault(d, n)
    for i, s in enumerate(f["strides"]):
        if t.stride(i) == 0 and t.shape[i] > 1:
            raise ValueError(f"scree.call({op!r}): argument '{name}' is broadcast along "
                             f"dimension {i} (stride 0); scree reads 0 as dense")
        values.setdefault(s, t.stride(i))
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"scree.call({op!r}): argument '{name}' needs a contiguous last "
                         f"dimension (strides {t.stride()})")
    if "dtype" in f:
        code = _ops._DTYPES.get(t.dtype)
        if code is None:
            raise TypeError(f"scree.call({op!r}): argument '{name}' has dtype {t.dtype}; "
                            "float32, float16 or bfloat16")
        if values.setdefault(f["dtype"], code) != code:
            raise TypeError(f"scree.call({op!r}): argument '{name}' has dtype {t.dtype}, not "
                            f"that of the other tensors {f['dtype']} types")
    else:
        want = _ELEM[f["elem"]]
        if "wide" in f:  # int32, or int64 when the flag field says so
            wide = values.setdefault(f["wide"], int(t.dtype == torch.int64))
            want = torch.int64 if wide else want
        if t.dtype != want:
            raise TypeError(f"scree.call({op!r}): argument '{name}' has dtype {t.dtype}, "
                            f"not {want}")


def _check_extents(op, f, t, values):
    """Refuses a tensor smaller than the extents its dimension fields give,
    which the C entry cannot see (it has pointers, not allocations)."""
    for i, d in enumerate(f["dims"]):
        need = values.get(d, 0) + (1 if i == 0 and "plus_one" in f["flags"] else 0)
        if t.shape[i] < need:
            raise ValueError(f"scree.call({op!r}): argument '{f['name']}' has shape "
                             f"{tuple(t.shape)}, smaller than {d}={values.get(d, 0)} along "
                             f"dimension {i}")
