"""scree's ops on torch tensors: the public functions, their implementations
through the C library, and their torch.library custom ops (torch.ops.scree.*)
with fake implementations for torch.compile and export.

Each public function first checks its Python arguments with the shared
helpers of _args.py (each of the wrong kind or range refused naming it),
then takes one of two ways into the op:

- Eager calls on plain CUDA tensors that need no autograd go straight to
  the implementation (`_direct`): argument checks, output allocation with
  PyTorch's allocator, one packed struct and one ctypes call on PyTorch's
  current stream. This is the path whose host time docs/python.md measures.
- Everything else (torch.compile, export, fake or meta tensors, tensor
  subclasses, dispatch modes, inputs that require grad, CPU tensors) goes
  through torch.ops.scree.<op>, whose real implementation is the same one
  and whose fake implementation is that one again in check mode
  (check=True): the same argument checks and output allocation, the C call
  replaced by scree_check_args, which refuses what the device would (the
  op's schema and own rules) without memory or a device. varlen_attn, the
  norms, swiglu, softmax and rope have backward ops (registered as their
  autograd formulas); cross_entropy and linear_cross_entropy compute their
  gradients in the forward when an input requires grad, and their backward
  scales them. The other ops are forward only: a backward through one
  raises.
"""
import math
import re
import struct
import threading
from typing import Optional, Sequence, Tuple

import torch

from . import _args, _context, _lib

_Tensor = torch.Tensor
_DTYPES = {torch.float32: _lib.DTYPE_FP32, torch.float16: _lib.DTYPE_FP16,
           torch.bfloat16: _lib.DTYPE_BF16}
_PACK = {}  # op: the pack method of its struct, on first use

try:
    _is_compiling = torch.compiler.is_compiling
except AttributeError:  # torch < 2.3
    def _is_compiling():
        return False

_dispatch_stack_len = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 0)
_raw_stream = torch._C._cuda_getCurrentRawStream if hasattr(
    torch._C, "_cuda_getCurrentRawStream") else None


def _direct(a, *others):
    """True when this eager call can skip the dispatcher: `a` a plain CUDA
    tensor, the others plain tensors or None, no tracing, no dispatch mode,
    and no input needing autograd."""
    if _is_compiling() or type(a) is not _Tensor or not a.is_cuda or _dispatch_stack_len():
        return False
    grad = torch.is_grad_enabled()
    if grad and a.requires_grad:
        return False
    for t in others:
        if t is not None and (type(t) is not _Tensor or (grad and t.requires_grad)):
            return False
    return True


# -- argument checks ---------------------------------------------------------


def _dtype_code(op, name, t):
    code = _DTYPES.get(t.dtype)
    if code is None:
        raise TypeError(f"scree.{op}: argument '{name}' has dtype {t.dtype}; "
                        "scree takes float32, float16 or bfloat16")
    return code


def _on_cuda(op, name, t):
    if not t.is_cuda:
        raise ValueError(f"scree.{op}: argument '{name}' is on {t.device}; scree runs on CUDA "
                         "devices (torch.ops.scree has no kernel for this device)")


def _same_device(op, name, t, ref):
    if t.device != ref.device:
        raise ValueError(f"scree.{op}: argument '{name}' is on {t.device}, not {ref.device} "
                         "with the other inputs")


def _rows(t, cols):
    """t as [rows, cols] with unit column stride and a row stride of at least
    cols (as scree reads it), a view where one exists, else a copy; and the
    row stride to pass (0: contiguous)."""
    v = t if (t.dim() == 2 and t.shape[1] == cols) else None
    if v is None:
        try:
            v = t.view(-1, cols)
        except RuntimeError:
            v = t.reshape(-1, cols)
    if cols > 1 and v.stride(1) != 1:
        v = v.contiguous()
    if v.shape[0] <= 1:
        return v, 0
    s = v.stride(0)
    if s < cols:  # broadcast (stride 0) or overlapping rows: scree cannot read those
        v = v.contiguous()
        s = cols
    return v, s


def _int32(op, name, t, ref):
    """cu_seqlens as the int32 device tensor scree reads (a copy when it is
    another integer type or not contiguous)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"scree.{op}: argument '{name}' must be a tensor, not {type(t).__name__}")
    if t.dim() != 1 or t.numel() < 1:
        raise ValueError(f"scree.{op}: argument '{name}' must be 1-D with batch + 1 entries, "
                         f"got shape {tuple(t.shape)}")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"scree.{op}: argument '{name}' has dtype {t.dtype}; int32 (or int64)")
    _same_device(op, name, t, ref)
    if t.dtype != torch.int32:
        t = t.to(torch.int32)
    return t.contiguous()


_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def _call(op, entry, packed, ctx, stream, names):
    """One call of a C entry; a failure becomes a ScreeError (a
    ScreeArgumentError, also a ValueError, for argument statuses) naming the
    Python argument that scree's message is about, where it names one."""
    st = entry(ctx, packed, stream)
    if st:
        _raise(op, st, ctx, names)


class _Unchecked(Exception):
    """A field has no value to check at trace time (an unbacked SymInt)."""


def _concrete(v):
    """A field's value for a check at trace time: a SymInt or SymFloat as
    the value it has in the traced example (its hint), read without
    guarding on it, so that checking adds no guard to a dynamic-shape graph.
    The check then holds for the example; each call of the compiled graph
    is checked again by the op entry itself."""
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        h = getattr(v.node, "hint", None)
        if h is None:
            raise _Unchecked
        return h
    return v


def _stand_in(t):
    """A tensor's pointer in a check without memory: scree_check_args takes
    each distinct nonzero value for a buffer of its own, and only tests
    pointers against NULL."""
    return id(t)


def _run(op, c_op, fields, names, t, check):
    """Packs fields into the struct of scree_<c_op> and calls it on t's
    device and PyTorch's current stream there; with check, runs the same
    checks without a device (scree_check_args: the fake implementations at
    trace time, where the pointers are stand-ins)."""
    pack = _PACK.get(c_op)
    if pack is None:
        pack = _PACK[c_op] = _lib.PACKERS[_lib.OPS[c_op]["struct"]].pack
    if not check:
        ctx, stream = _launch_state(t)
        _call(op, getattr(_lib.lib(), "scree_" + c_op), pack(*fields), ctx, stream, names)
        return
    try:
        packed = pack(*[_concrete(v) for v in fields])
    except _Unchecked:
        return
    st, why = _lib.check_args(c_op, packed)
    if st:
        _raise(op, st, None, names, why)


def _raise(op, st, ctx, names, detail=None):
    L = _lib.lib()
    if detail is None:
        detail = L.scree_last_error(ctx).decode(errors="replace")
    name = L.scree_status_name(st).decode()
    arg = None
    for w in _WORD.findall(detail):
        if w in names:
            arg = names[w]
            break
    where = f" (argument '{arg}')" if arg else ""
    msg = f"scree.{op}{where}: {detail or L.scree_status_str(st).decode()} [{name}]"
    cls = _lib.ScreeArgumentError if st in _lib.ARGUMENT_STATUSES else _lib.ScreeError
    raise cls(msg, st, name, detail, arg)


def _launch_state(t):
    """(context, stream) for a call on t's device: scree's context of that
    device and PyTorch's current stream there."""
    dev = t.get_device()
    ctx = _context._contexts.get(dev) or _context.context(dev)
    return ctx, _raw_stream(dev)


_ones_lock = threading.Lock()
_ones_cache = {}


def _ones(device, dtype, n, check=False):
    """A cached ones vector (the weight of an op called without one); in a
    check, an uncached stand-in."""
    if check:
        return torch.empty(n, dtype=dtype, device=device)
    key = (device, dtype, n)
    t = _ones_cache.get(key)
    if t is None:
        t = torch.ones(n, dtype=dtype, device=device)
        with _ones_lock:
            _ones_cache[key] = t
    return t


def _norm_cols(op, input, normalized_shape, weight, bias=None):
    shape = tuple(int(s) for s in normalized_shape)
    if not shape or tuple(input.shape[input.dim() - len(shape):]) != shape:
        raise ValueError(f"scree.{op}: argument 'normalized_shape'={list(shape)} is not the "
                         f"trailing shape of input {tuple(input.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"scree.{op}: argument '{name}' has shape {tuple(t.shape)}, "
                             f"not normalized_shape {list(shape)}")
    return math.prod(shape)


# -- RMSNorm -----------------------------------------------------------------

_RMS_NAMES = {"x": "input", "w": "weight", "y": "output", "x_dtype": "input",
              "w_dtype": "weight", "cols": "normalized_shape", "rows": "input",
              "x_stride": "input", "eps": "eps"}


def _rms_norm_impl(input, normalized_shape, weight, eps, check=False):
    op = "rms_norm"
    if not check:
        _on_cuda(op, "input", input)
    # The common case (one normalized dimension, a contiguous 1-D weight)
    # takes no view or copy: this is the path the overhead figure measures.
    if len(normalized_shape) == 1 and input.dim() > 0 and \
            normalized_shape[0] == input.shape[-1] and \
            (weight is None or (weight.dim() == 1 and weight.shape[0] == input.shape[-1])):
        cols = input.shape[-1]
    else:
        cols = _norm_cols(op, input, normalized_shape, weight)
    dx = _dtype_code(op, "input", input)
    if weight is None:
        w = _ones(input.device, input.dtype, cols, check)
    else:
        if weight.device != input.device:
            _same_device(op, "weight", weight, input)
        w = weight if weight.dim() == 1 and weight.is_contiguous() else \
            weight.reshape(cols).contiguous()
    dw = _dtype_code(op, "weight", w)
    if eps is None:  # F.rms_norm's default: float32's epsilon (its computation type)
        eps = 1.1920928955078125e-07
    x, xs = _rows(input, cols)
    if input.is_contiguous():
        y = torch.empty_like(input)
    else:
        y = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "rmsnorm", (ptr(x), ptr(w), ptr(y), x.shape[0], cols, xs, 0, dx, dw, dx, eps, 0),
         _RMS_NAMES, input, check)
    return y


@torch.library.custom_op("scree::rms_norm", mutates_args=())
def _rms_norm_op(input: torch.Tensor, normalized_shape: Sequence[int],
                 weight: Optional[torch.Tensor], eps: Optional[float]) -> torch.Tensor:
    return _rms_norm_impl(input, normalized_shape, weight, eps)


@_rms_norm_op.register_fake
def _(input, normalized_shape, weight, eps):
    return _rms_norm_impl(input, normalized_shape, weight, eps, check=True)


_rms_entry = None


def _rms_norm_fast(input, normalized_shape, weight, eps):
    """The common eager call in as few tensor queries as it takes (each is a
    few hundred nanoseconds): plain contiguous CUDA tensors on one device,
    one normalized dimension, a weight, no autograd, no tracing. None when
    the call is not that; then the general path checks and reports."""
    global _rms_entry, _PACK_RMS
    if (type(input) is not _Tensor or type(weight) is not _Tensor or _is_compiling()
            or _dispatch_stack_len()):
        return None
    shape = input.shape
    if not shape or not isinstance(normalized_shape, (list, tuple)) or len(normalized_shape) != 1:
        return None
    n = shape[-1]
    if (normalized_shape[0] != n or not input.is_cuda or weight.shape != (n,)
            or not input.is_contiguous() or not weight.is_contiguous()):
        return None
    if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad):
        return None
    dx = _DTYPES.get(input.dtype)
    dw = _DTYPES.get(weight.dtype)
    dev = input.get_device()
    if dx is None or dw is None or weight.get_device() != dev or n == 0:
        return None
    if _rms_entry is None:
        _PACK_RMS = _lib.PACKERS["scree_rmsnorm_args"].pack
        _rms_entry = _lib.lib().scree_rmsnorm
    y = torch.empty_like(input)
    try:
        packed = _PACK_RMS(input.data_ptr(), weight.data_ptr(), y.data_ptr(), input.numel() // n,
                           n, 0, 0, dx, dw, dx, 1.1920928955078125e-07 if eps is None else eps,
                           0)
    except (struct.error, OverflowError):  # eps: the general path says what is wrong
        return None
    ctx = _context._contexts.get(dev) or _context.context(dev)
    st = _rms_entry(ctx, packed, _raw_stream(dev))
    if st:
        _raise("rms_norm", st, ctx, _RMS_NAMES)
    return y


_PACK_RMS = None


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """RMSNorm over the last len(normalized_shape) dimensions, as
    torch.nn.functional.rms_norm (same arguments, same output dtype, eps
    None meaning float32's epsilon). float32, float16 or bfloat16; the
    normalized size at most 65536."""
    if weight is not None and _raw_stream is not None:
        y = _rms_norm_fast(input, normalized_shape, weight, eps)
        if y is not None:
            return y
    op = "rms_norm"
    input = _args.tensor(op, "input", input)
    normalized_shape = _args.shape(op, "normalized_shape", normalized_shape)
    weight = _args.tensor(op, "weight", weight, optional=True)
    eps = _args.real(op, "eps", eps, ("rmsnorm", "eps"), optional=True)
    if _direct(input, weight):
        return _rms_norm_impl(input, normalized_shape, weight, eps)
    return torch.ops.scree.rms_norm(input, list(normalized_shape), weight, eps)


# -- LayerNorm ---------------------------------------------------------------

_LN_NAMES = {"x": "input", "w": "weight", "b": "bias", "y": "output", "x_dtype": "input",
             "w_dtype": "weight", "cols": "normalized_shape", "rows": "input",
             "x_stride": "input", "eps": "eps"}


def _layer_norm_impl(input, normalized_shape, weight, bias, eps, check=False):
    op = "layer_norm"
    if not check:
        _on_cuda(op, "input", input)
    cols = _norm_cols(op, input, normalized_shape, weight, bias)
    dx = _dtype_code(op, "input", input)
    if weight is None:
        w = _ones(input.device, bias.dtype if bias is not None else input.dtype, cols, check)
    else:
        _same_device(op, "weight", weight, input)
        w = weight.reshape(cols).contiguous()
    dw = _dtype_code(op, "weight", w)
    ptr = _stand_in if check else _Tensor.data_ptr
    b = 0
    if bias is not None:
        _same_device(op, "bias", bias, input)
        bt = bias.reshape(cols).to(w.dtype).contiguous()
        b = ptr(bt)
    x, xs = _rows(input, cols)
    y = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    _run(op, "layernorm", (ptr(x), ptr(w), b, ptr(y), 0, 0, x.shape[0], cols, xs, 0, dx, dw,
                           dx, eps), _LN_NAMES, input, check)
    return y


@torch.library.custom_op("scree::layer_norm", mutates_args=())
def _layer_norm_op(input: torch.Tensor, normalized_shape: Sequence[int],
                   weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                   eps: float) -> torch.Tensor:
    return _layer_norm_impl(input, normalized_shape, weight, bias, eps)


@_layer_norm_op.register_fake
def _(input, normalized_shape, weight, bias, eps):
    return _layer_norm_impl(input, normalized_shape, weight, bias, eps, check=True)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """LayerNorm over the last len(normalized_shape) dimensions, as
    torch.nn.functional.layer_norm (output in input's dtype)."""
    op = "layer_norm"
    input = _args.tensor(op, "input", input)
    normalized_shape = _args.shape(op, "normalized_shape", normalized_shape)
    weight = _args.tensor(op, "weight", weight, optional=True)
    bias = _args.tensor(op, "bias", bias, optional=True)
    eps = _args.real(op, "eps", eps, ("layernorm", "eps"))
    if _direct(input, weight, bias):
        return _layer_norm_impl(input, normalized_shape, weight, bias, eps)
    return torch.ops.scree.layer_norm(input, list(normalized_shape), weight, bias, eps)


# -- the norms' backwards (autograd) -----------------------------------------
#
# scree::rms_norm and scree::layer_norm are differentiable in input, weight
# (and bias): their backward ops run scree_rmsnorm_backward and
# scree_layernorm_backward, which recompute each row's statistics from the
# saved input (no extra forward output; the statistics are a row sum the
# kernel takes while x is in registers anyway).

_NB_NAMES = {"x": "input", "w": "weight", "dy": "grad_out", "dx": "input", "dw": "weight",
             "db": "bias", "x_dtype": "input", "w_dtype": "weight", "y_dtype": "grad_out",
             "cols": "normalized_shape", "rows": "input", "x_stride": "input",
             "dy_stride": "grad_out", "dx_stride": "input", "eps": "eps"}


def _norm_backward_impl(op, grad_out, input, normalized_shape, weight, bias, eps, check):
    """dx, dw and db (LayerNorm; RMSNorm: None) of scree's RMSNorm (op
    "rms_norm") or LayerNorm; dw and db shaped normalized_shape, there also
    without a weight or bias (the gradients of a ones weight and a zero
    bias; autograd drops them)."""
    if not check:
        _on_cuda(op, "input", input)
    _same_device(op, "grad_out", grad_out, input)
    cols = _norm_cols(op, input, normalized_shape, weight, bias)
    ln = op == "layer_norm"
    if weight is None:
        w = _ones(input.device, bias.dtype if ln and bias is not None else input.dtype, cols,
                  check)
    else:
        _same_device(op, "weight", weight, input)
        w = weight.reshape(cols).contiguous()
    xd, wd = _dtype_code(op, "input", input), _dtype_code(op, "weight", w)
    g = grad_out if grad_out.dtype == input.dtype else grad_out.to(input.dtype)
    x, xs = _rows(input, cols)
    dy, dys = _rows(g, cols)
    dx = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    dw = torch.empty(cols, dtype=w.dtype, device=input.device)
    db = torch.empty(cols, dtype=w.dtype, device=input.device) if ln else None
    if eps is None:  # rms_norm's default (F.rms_norm's: float32's epsilon)
        eps = 1.1920928955078125e-07
    ptr = _stand_in if check else _Tensor.data_ptr
    if ln:
        _run(op, "layernorm_backward",
             (ptr(x), ptr(w), ptr(dy), 0, 0, ptr(dx), ptr(dw), ptr(db) if db is not None else 0,
              x.shape[0], cols, xs, dys, 0, xd, wd, xd, eps), _NB_NAMES, input, check)
    else:
        _run(op, "rmsnorm_backward",
             (ptr(x), ptr(w), ptr(dy), 0, ptr(dx), ptr(dw), x.shape[0], cols, xs, dys, 0, xd,
              wd, xd, eps), _NB_NAMES, input, check)
    shape = tuple(int(n) for n in normalized_shape)
    return dx, dw.view(shape), db.view(shape) if db is not None else None


@torch.library.custom_op("scree::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(grad_out: torch.Tensor, input: torch.Tensor,
                          normalized_shape: Sequence[int], weight: Optional[torch.Tensor],
                          eps: Optional[float]) -> Tuple[torch.Tensor, torch.Tensor]:
    dx, dw, _ = _norm_backward_impl("rms_norm", grad_out, input, normalized_shape, weight, None,
                                    eps, False)
    return dx, dw


@_rms_norm_backward_op.register_fake
def _(grad_out, input, normalized_shape, weight, eps):
    dx, dw, _ = _norm_backward_impl("rms_norm", grad_out, input, normalized_shape, weight, None,
                                    eps, True)
    return dx, dw


@torch.library.custom_op("scree::layer_norm_backward", mutates_args=())
def _layer_norm_backward_op(grad_out: torch.Tensor, input: torch.Tensor,
                            normalized_shape: Sequence[int], weight: Optional[torch.Tensor],
                            bias: Optional[torch.Tensor], eps: float
                            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _norm_backward_impl("layer_norm", grad_out, input, normalized_shape, weight, bias,
                               eps, False)


@_layer_norm_backward_op.register_fake
def _(grad_out, input, normalized_shape, weight, bias, eps):
    return _norm_backward_impl("layer_norm", grad_out, input, normalized_shape, weight, bias,
                               eps, True)


def _rms_norm_setup(ctx, inputs, output):
    input, normalized_shape, weight, eps = inputs
    ctx.save_for_backward(input, weight)
    ctx.norm = (list(normalized_shape), eps)


def _rms_norm_grad(ctx, grad_out):
    input, weight = ctx.saved_tensors
    normalized_shape, eps = ctx.norm
    dx, dw = torch.ops.scree.rms_norm_backward(grad_out, input, normalized_shape, weight, eps)
    return dx, None, dw if weight is not None else None, None


def _layer_norm_setup(ctx, inputs, output):
    input, normalized_shape, weight, bias, eps = inputs
    ctx.save_for_backward(input, weight, bias)
    ctx.norm = (list(normalized_shape), eps)


def _layer_norm_grad(ctx, grad_out):
    input, weight, bias = ctx.saved_tensors
    normalized_shape, eps = ctx.norm
    dx, dw, db = torch.ops.scree.layer_norm_backward(grad_out, input, normalized_shape, weight,
                                                     bias, eps)
    return (dx, None, dw if weight is not None else None, db if bias is not None else None,
            None)


torch.library.register_autograd("scree::rms_norm", _rms_norm_grad, setup_context=_rms_norm_setup)
torch.library.register_autograd("scree::layer_norm", _layer_norm_grad,
                                setup_context=_layer_norm_setup)


# -- fused residual add + RMSNorm -------------------------------------------

_ADD_NAMES = {"x": "input", "residual": "residual", "w": "weight", "h": "residual_out",
              "y": "output", "x_dtype": "input", "w_dtype": "weight", "cols": "weight",
              "rows": "input", "x_stride": "input", "residual_stride": "residual",
              "eps": "eps"}


def _add_check(op, input, residual, weight):
    if tuple(residual.shape) != tuple(input.shape):
        raise ValueError(f"scree.{op}: argument 'residual' has shape {tuple(residual.shape)}, "
                         f"not input's {tuple(input.shape)}")
    if residual.dtype != input.dtype:
        raise TypeError(f"scree.{op}: argument 'residual' has dtype {residual.dtype}, "
                        f"not input's {input.dtype}")
    if weight.dim() != 1 or input.dim() < 1 or weight.shape[0] != input.shape[-1]:
        raise ValueError(f"scree.{op}: argument 'weight' has shape {tuple(weight.shape)}; "
                         f"expected ({input.shape[-1] if input.dim() else '?'},), the last "
                         "dimension of input")


def _add_rms_norm_impl(input, residual, weight, eps, check=False):
    op = "add_rms_norm"
    if not check:
        _on_cuda(op, "input", input)
    _add_check(op, input, residual, weight)
    _same_device(op, "residual", residual, input)
    _same_device(op, "weight", weight, input)
    cols = input.shape[-1]
    dx = _dtype_code(op, "input", input)
    dw = _dtype_code(op, "weight", weight)
    w = weight.contiguous()
    x, xs = _rows(input, cols)
    r, rs = _rows(residual, cols)
    y = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    h = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "add_rmsnorm", (ptr(x), ptr(r), ptr(w), ptr(h), ptr(y), x.shape[0], cols, xs, rs,
                             0, 0, dx, dw, dx, eps, 0), _ADD_NAMES, input, check)
    return y, h


@torch.library.custom_op("scree::add_rms_norm", mutates_args=())
def _add_rms_norm_op(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> Tuple[torch.Tensor, torch.Tensor]:
    return _add_rms_norm_impl(input, residual, weight, eps)


@_add_rms_norm_op.register_fake
def _(input, residual, weight, eps):
    return _add_rms_norm_impl(input, residual, weight, eps, check=True)


def add_rms_norm(input, residual, weight, eps=1e-6):
    """The residual add fused with RMSNorm, one pass over memory:
    h = input + residual (in input's dtype), y = rms_norm(h) * weight.
    Returns (y, h): the normed output and the new residual stream."""
    op = "add_rms_norm"
    input = _args.tensor(op, "input", input)
    residual = _args.tensor(op, "residual", residual)
    weight = _args.tensor(op, "weight", weight)
    eps = _args.real(op, "eps", eps, ("add_rmsnorm", "eps"))
    if _direct(input, residual, weight):
        return _add_rms_norm_impl(input, residual, weight, eps)
    return torch.ops.scree.add_rms_norm(input, residual, weight, eps)




# The backward of the fused add + RMSNorm (autograd): the gradients of y
# (dy) and of h, the residual stream (dh_next, None when h is unused),
# give dh = rmsnorm_backward(dy at h) + dh_next, the gradient of both input
# and residual (scree_add_rmsnorm_backward), and dw.

_ADD_BWD_NAMES = {"h": "residual_out", "w": "weight", "dy": "grad_out",
                  "dh_next": "grad_residual_out", "dh": "input", "dw": "weight",
                  "x_dtype": "input", "w_dtype": "weight", "y_dtype": "grad_out",
                  "cols": "weight", "rows": "input", "h_stride": "residual_out",
                  "dy_stride": "grad_out", "dh_next_stride": "grad_residual_out",
                  "eps": "eps"}


def _add_rms_norm_backward_impl(grad_out, grad_h, h, weight, eps, check=False):
    op = "add_rms_norm"
    if not check:
        _on_cuda(op, "residual_out", h)
    for name, t in (("grad_out", grad_out), ("weight", weight)):
        _same_device(op, name, t, h)
    cols = h.shape[-1]
    xd, wd = _dtype_code(op, "input", h), _dtype_code(op, "weight", weight)
    g = grad_out if grad_out.dtype == h.dtype else grad_out.to(h.dtype)
    hr, hs = _rows(h, cols)
    dy, dys = _rows(g, cols)
    ptr = _stand_in if check else _Tensor.data_ptr
    dn, dns = 0, 0
    if grad_h is not None:
        _same_device(op, "grad_residual_out", grad_h, h)
        gh = grad_h if grad_h.dtype == h.dtype else grad_h.to(h.dtype)
        dnr, dns = _rows(gh, cols)
        dn = ptr(dnr)
    dh = torch.empty(h.shape, dtype=h.dtype, device=h.device)
    dw = torch.empty(cols, dtype=weight.dtype, device=h.device)
    _run(op, "add_rmsnorm_backward",
         (ptr(hr), ptr(weight.contiguous()), ptr(dy), dn, 0, ptr(dh), ptr(dw), hr.shape[0], cols,
          hs, dys, dns, 0, xd, wd, xd, eps), _ADD_BWD_NAMES, h, check)
    return dh, dw.view(weight.shape)


@torch.library.custom_op("scree::add_rms_norm_backward", mutates_args=())
def _add_rms_norm_backward_op(grad_out: torch.Tensor, grad_h: Optional[torch.Tensor],
                              h: torch.Tensor, weight: torch.Tensor,
                              eps: float) -> Tuple[torch.Tensor, torch.Tensor]:
    return _add_rms_norm_backward_impl(grad_out, grad_h, h, weight, eps)


@_add_rms_norm_backward_op.register_fake
def _(grad_out, grad_h, h, weight, eps):
    return _add_rms_norm_backward_impl(grad_out, grad_h, h, weight, eps, check=True)


def _add_rms_norm_setup(ctx, inputs, output):
    input, residual, weight, eps = inputs
    _, h = output
    ctx.save_for_backward(h, weight)
    ctx.eps = eps


def _add_rms_norm_grad(ctx, grad_out, grad_h):
    h, weight = ctx.saved_tensors
    if grad_out is None:  # only h was used: its gradient passes to both inputs
        return grad_h, grad_h, None, None
    dh, dw = torch.ops.scree.add_rms_norm_backward(grad_out, grad_h, h, weight, ctx.eps)
    return dh, dh, dw, None


torch.library.register_autograd("scree::add_rms_norm", _add_rms_norm_grad,
                                setup_context=_add_rms_norm_setup)

# -- softmax over the last dimension ----------------------------------------

_SM_NAMES = {"x": "input", "y": "output", "x_dtype": "input", "y_dtype": "dtype",
             "cols": "input", "rows": "input", "x_stride": "input", "scale": "scale"}


def _last_dim(op, input, dim):
    nd = input.dim()
    if nd == 0:
        raise ValueError(f"scree.{op}: argument 'input' must have at least one dimension")
    if dim not in (-1, nd - 1):
        raise ValueError(f"scree.{op}: argument 'dim'={dim}: scree takes the softmax along "
                         f"the last dimension only (-1 or {nd - 1})")


def _softmax_impl(input, dim, dtype, scale, check=False):
    op = "softmax"
    if not check:
        _on_cuda(op, "input", input)
    _last_dim(op, input, dim)
    cols = input.shape[-1]
    out_dtype = dtype if dtype is not None else input.dtype
    dx = _dtype_code(op, "input", input)
    y = torch.empty(input.shape, dtype=out_dtype, device=input.device)
    dy = _dtype_code(op, "dtype", y)
    x, xs = _rows(input, cols)
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "softmax", (ptr(x), ptr(y), x.shape[0], cols, xs, 0, dx, dy, scale), _SM_NAMES,
         input, check)
    return y


@torch.library.custom_op("scree::softmax", mutates_args=())
def _softmax_op(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype],
                scale: float) -> torch.Tensor:
    return _softmax_impl(input, dim, dtype, scale)


@_softmax_op.register_fake
def _(input, dim, dtype, scale):
    return _softmax_impl(input, dim, dtype, scale, check=True)


_SM_BWD_NAMES = {"y": "output", "dy": "grad_out", "dx": "input", "y_dtype": "output",
                 "dy_dtype": "grad_out", "cols": "input", "rows": "input",
                 "y_stride": "output", "dy_stride": "grad_out", "scale": "scale"}


def _softmax_backward_impl(grad_out, output, input_dtype, scale, check=False):
    """The gradient of softmax's input (scree_softmax_backward) from its
    output y and grad_out: scale * y * (dy - sum(y * dy)), in input_dtype."""
    op = "softmax"
    if not check:
        _on_cuda(op, "output", output)
    _same_device(op, "grad_out", grad_out, output)
    cols = output.shape[-1]
    yd = _dtype_code(op, "output", output)
    g = grad_out if grad_out.dtype == output.dtype else grad_out.to(output.dtype)
    y, ys = _rows(output, cols)
    dy, dys = _rows(g, cols)
    dx = torch.empty(output.shape, dtype=g.dtype, device=output.device)
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "softmax_backward", (ptr(y), ptr(dy), ptr(dx), y.shape[0], cols, ys, dys, 0, yd, yd,
                                  scale), _SM_BWD_NAMES, output, check)
    return dx if dx.dtype == input_dtype else dx.to(input_dtype)


@torch.library.custom_op("scree::softmax_backward", mutates_args=())
def _softmax_backward_op(grad_out: torch.Tensor, output: torch.Tensor, input_dtype: torch.dtype,
                         scale: float) -> torch.Tensor:
    return _softmax_backward_impl(grad_out, output, input_dtype, scale)


@_softmax_backward_op.register_fake
def _(grad_out, output, input_dtype, scale):
    return _softmax_backward_impl(grad_out, output, input_dtype, scale, check=True)


def _softmax_setup(ctx, inputs, output):
    input, dim, dtype, scale = inputs
    ctx.save_for_backward(output)
    ctx.sm = (input.dtype, scale)


def _softmax_grad(ctx, grad_out):
    (output,) = ctx.saved_tensors
    input_dtype, scale = ctx.sm
    return (torch.ops.scree.softmax_backward(grad_out, output, input_dtype, scale), None, None,
            None)


torch.library.register_autograd("scree::softmax", _softmax_grad, setup_context=_softmax_setup)


def softmax(input, dim=-1, *, dtype=None, scale=1.0):
    """softmax(scale * input) along the last dimension, as
    torch.nn.functional.softmax(input, dim, dtype=dtype) for dim -1."""
    op = "softmax"
    input = _args.tensor(op, "input", input)
    dim = _args.integer(op, "dim", dim)
    dtype = _args.dtype(op, "dtype", dtype)
    scale = _args.real(op, "scale", scale, ("softmax", "scale"))
    if _direct(input):
        return _softmax_impl(input, dim, dtype, scale)
    return torch.ops.scree.softmax(input, dim, dtype, scale)


# -- softmax along each sequence's tokens -----------------------------------

_RSM_NAMES = {"x": "input", "y": "output", "x_dtype": "input", "cu_seqlens": "cu_seqlens",
              "max_seqlen": "max_seqlen", "total": "input", "cols": "input",
              "x_stride": "input", "scale": "scale", "batch": "cu_seqlens"}


def _ragged_softmax_impl(input, cu_seqlens, max_seqlen, scale, check=False):
    op = "ragged_softmax"
    if not check:
        _on_cuda(op, "input", input)
    if input.dim() < 1:
        raise ValueError(f"scree.{op}: argument 'input' must be [total, ...]")
    cu = _int32(op, "cu_seqlens", cu_seqlens, input)
    total = input.shape[0]
    cols = math.prod(input.shape[1:])
    dx = _dtype_code(op, "input", input)
    y = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    x, xs = _rows(input, cols) if cols else (input, 0)
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "ragged_softmax", (ptr(x), ptr(y), ptr(cu), cu.numel() - 1, total, max_seqlen, cols,
                                xs, 0, dx, dx, scale), _RSM_NAMES, input, check)
    return y


@torch.library.custom_op("scree::ragged_softmax", mutates_args=())
def _ragged_softmax_op(input: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                       scale: float) -> torch.Tensor:
    return _ragged_softmax_impl(input, cu_seqlens, max_seqlen, scale)


@_ragged_softmax_op.register_fake
def _(input, cu_seqlens, max_seqlen, scale):
    return _ragged_softmax_impl(input, cu_seqlens, max_seqlen, scale, check=True)


def ragged_softmax(input, cu_seqlens, max_seqlen, *, scale=1.0):
    """Softmax along the token dimension of a packed batch, per sequence and
    per column: input [total, ...], sequence b holding tokens
    [cu_seqlens[b], cu_seqlens[b + 1]); max_seqlen bounds the lengths."""
    op = "ragged_softmax"
    input = _args.tensor(op, "input", input)
    cu_seqlens = _args.tensor(op, "cu_seqlens", cu_seqlens)
    max_seqlen = _args.integer(op, "max_seqlen", max_seqlen, ("ragged_softmax", "max_seqlen"))
    scale = _args.real(op, "scale", scale, ("ragged_softmax", "scale"))
    if _direct(input, cu_seqlens):
        return _ragged_softmax_impl(input, cu_seqlens, max_seqlen, scale)
    return torch.ops.scree.ragged_softmax(input, cu_seqlens, max_seqlen, scale)


# -- RoPE --------------------------------------------------------------------

_ROPE_NAMES = {"q": "q", "k": "k", "positions": "positions", "cu_seqlens": "cu_seqlens",
               "cos_sin": "cos_sin", "total": "q", "batch": "cu_seqlens",
               "max_position": "cos_sin", "heads_q": "q", "heads_kv": "k", "head_dim": "q",
               "rotary_dim": "rotary_dim", "q_token_stride": "q", "q_head_stride": "q",
               "k_token_stride": "k", "k_head_stride": "k", "dtype": "q", "theta": "theta",
               "q_out": "q", "k_out": "k", "q_out_token_stride": "q",
               "q_out_head_stride": "q", "k_out_token_stride": "k", "k_out_head_stride": "k"}


def _rope_check(op, q, k, cu_seqlens, positions):
    if q.dim() != 3:
        raise ValueError(f"scree.{op}: argument 'q' must be [total, heads, head_dim], "
                         f"got shape {tuple(q.shape)}")
    if k is not None:
        if k.dim() != 3 or k.shape[0] != q.shape[0] or k.shape[2] != q.shape[2]:
            raise ValueError(f"scree.{op}: argument 'k' must be [total, heads_kv, head_dim] "
                             f"with q's total and head_dim, got {tuple(k.shape)} "
                             f"(q {tuple(q.shape)})")
        if k.dtype != q.dtype:
            raise TypeError(f"scree.{op}: argument 'k' has dtype {k.dtype}, not q's {q.dtype}")
    if (cu_seqlens is None) == (positions is None):
        raise ValueError(f"scree.{op}: give exactly one of 'cu_seqlens' (positions restart at "
                         "0 for each sequence) and 'positions'")


def _rope_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved,
               check=False, c_op="rope", q_out=None, k_out=None):
    """scree_rope (or, c_op "rope_backward", its inverse rotation) in place
    on q and k, or, with q_out (and k_out when k is given: tensors of q's
    and k's shape, dtype and device, last dimension contiguous), from q and
    k into q_out and k_out."""
    op = "rope"
    if not check:
        _on_cuda(op, "q", q)
    _rope_check(op, q, k, cu_seqlens, positions)
    dt = _dtype_code(op, "q", q)
    ptr = _stand_in if check else _Tensor.data_ptr
    cu = pos = 0
    batch = 0
    pos64 = 0
    keep = []
    if positions is not None:
        _same_device(op, "positions", positions, q)
        if positions.dtype not in (torch.int32, torch.int64) or positions.dim() != 1:
            raise TypeError(f"scree.{op}: argument 'positions' must be a 1-D int32 or int64 "
                            f"tensor, got {positions.dtype} {tuple(positions.shape)}")
        p = positions.contiguous()
        keep.append(p)
        pos = ptr(p)
        pos64 = 1 if p.dtype == torch.int64 else 0
    else:
        c = _int32(op, "cu_seqlens", cu_seqlens, q)
        keep.append(c)
        cu = ptr(c)
        batch = c.numel() - 1
    cs, max_pos = 0, 0
    if cos_sin is not None:
        _same_device(op, "cos_sin", cos_sin, q)
        if cos_sin.dtype != torch.float32 or cos_sin.dim() != 2:
            raise TypeError(f"scree.{op}: argument 'cos_sin' must be float32 "
                            "[max_position, rotary_dim]")
        c2 = cos_sin.contiguous()
        keep.append(c2)
        cs, max_pos = ptr(c2), c2.shape[0]
    for name, t in (("q", q), ("k", k)):
        if t is not None and t.shape[2] > 1 and t.stride(2) != 1:
            raise ValueError(f"scree.{op}: argument '{name}' needs a contiguous last dimension "
                             f"(strides {t.stride()})")
    kp, kts, khs, hkv = 0, 0, 0, 0
    if k is not None:
        _same_device(op, "k", k, q)
        kp, kts, khs, hkv = ptr(k), k.stride(0), k.stride(1), k.shape[1]
    qo = ko = qots = qohs = kots = kohs = 0
    if q_out is not None:
        qo, qots, qohs = ptr(q_out), q_out.stride(0), q_out.stride(1)
        if k_out is not None:
            ko, kots, kohs = ptr(k_out), k_out.stride(0), k_out.stride(1)
    _run(op, c_op, (ptr(q), kp, pos, cu, cs, q.shape[0], batch, max_pos, q.shape[1], hkv,
                      q.shape[2], rotary_dim or 0, q.stride(0), q.stride(1), kts, khs, dt,
                      1 if interleaved else 0, pos64, theta, qo, ko, qots, qohs, kots, kohs),
         _ROPE_NAMES, q, check)


@torch.library.custom_op("scree::rope_", mutates_args=("q", "k"))
def _rope_op(q: torch.Tensor, k: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
             positions: Optional[torch.Tensor], cos_sin: Optional[torch.Tensor], theta: float,
             rotary_dim: int, interleaved: bool) -> None:
    _rope_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved)


@_rope_op.register_fake
def _(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved):
    _rope_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved, check=True)


# The functional RoPE (autograd): scree::rope returns rotated q and k, new
# contiguous tensors written out of place (scree_rope's q_out and k_out:
# no copy of the inputs first); its backward, scree::rope_backward, rotates
# the incoming gradients back the same way (scree_rope_backward, the
# inverse rotation: the forward's transpose). Without k, the k output is
# an empty tensor.


def _rope_readable(t):
    """t where it lies, unless the kernel cannot read it so: a last
    dimension that is not contiguous, or a broadcast dimension (stride 0,
    as autograd's gradient of a sum), which is made contiguous."""
    if t is None:
        return None
    if (t.shape[2] > 1 and t.stride(2) != 1) or any(
            t.stride(i) == 0 and t.shape[i] > 1 for i in range(2)):
        return t.contiguous()
    return t


def _rope_fn_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved,
                  check=False, c_op="rope"):
    op = "rope"
    _rope_check(op, q, k, cu_seqlens, positions)
    q, k = _rope_readable(q), _rope_readable(k)
    rq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    rk = torch.empty(k.shape, dtype=k.dtype, device=k.device) if k is not None else None
    _rope_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved, check,
               c_op, q_out=rq, k_out=rk)
    return rq, rk if rk is not None else q.new_empty(0)


@torch.library.custom_op("scree::rope", mutates_args=())
def _rope_fn_op(q: torch.Tensor, k: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor],
                positions: Optional[torch.Tensor], cos_sin: Optional[torch.Tensor], theta: float,
                rotary_dim: int, interleaved: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return _rope_fn_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved)


@_rope_fn_op.register_fake
def _(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved):
    return _rope_fn_impl(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved,
                         check=True)


@torch.library.custom_op("scree::rope_backward", mutates_args=())
def _rope_backward_op(grad_q: torch.Tensor, grad_k: Optional[torch.Tensor],
                      cu_seqlens: Optional[torch.Tensor], positions: Optional[torch.Tensor],
                      cos_sin: Optional[torch.Tensor], theta: float, rotary_dim: int,
                      interleaved: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return _rope_fn_impl(grad_q, grad_k, cu_seqlens, positions, cos_sin, theta, rotary_dim,
                         interleaved, c_op="rope_backward")


@_rope_backward_op.register_fake
def _(grad_q, grad_k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved):
    return _rope_fn_impl(grad_q, grad_k, cu_seqlens, positions, cos_sin, theta, rotary_dim,
                         interleaved, check=True, c_op="rope_backward")


def _rope_setup(ctx, inputs, output):
    q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved = inputs
    ctx.save_for_backward(cu_seqlens, positions, cos_sin)
    ctx.rope = (theta, rotary_dim, interleaved, k is not None, q.dtype)


def _rope_grad(ctx, grad_q, grad_k):
    cu_seqlens, positions, cos_sin = ctx.saved_tensors
    theta, rotary_dim, interleaved, has_k, dtype = ctx.rope
    gk = grad_k if has_k else None
    if gk is not None and gk.dtype != dtype:
        gk = gk.to(dtype)
    dq, dk = torch.ops.scree.rope_backward(grad_q if grad_q.dtype == dtype else grad_q.to(dtype),
                                           gk, cu_seqlens, positions, cos_sin, theta,
                                           rotary_dim, interleaved)
    return dq, dk if has_k else None, None, None, None, None, None, None


torch.library.register_autograd("scree::rope", _rope_grad, setup_context=_rope_setup)


def rope(q, k=None, *, cu_seqlens=None, positions=None, theta=10000.0, rotary_dim=None,
         interleaved=False, cos_sin=None, inplace=False):
    """Rotary position embedding on q [total, heads_q, head_dim] and k
    [total, heads_kv, head_dim] (or None), in one launch. Positions restart
    at 0 for each sequence of cu_seqlens, or come from positions (int32 or
    int64 [total]). interleaved=False is the rotate-half (NeoX, HuggingFace
    LLaMA) layout, True the GPT-J one; rotary_dim (default head_dim) rotates
    the leading part of each head. cos and sin are computed from theta, or
    read from cos_sin (float32 [max_position, rotary_dim]: the cos of the
    rotary_dim / 2 angles, then their sin). Returns (q, k): new tensors,
    or q and k themselves, rotated in place, with inplace=True.

    Differentiable in q and k (torch.ops.scree.rope, whose backward runs
    scree_rope_backward, the inverse rotation, on the gradients); positions,
    cu_seqlens and cos_sin get no gradient. With inplace=True and q or k
    requiring grad, the rotation is computed out of place and copied into
    q and k (copy_, which autograd records), so gradients stay correct;
    PyTorch refuses that copy into a leaf tensor that requires grad, as
    for any in-place operation."""
    op = "rope"
    q = _args.tensor(op, "q", q)
    k = _args.tensor(op, "k", k, optional=True)
    cu_seqlens = _args.tensor(op, "cu_seqlens", cu_seqlens, optional=True)
    positions = _args.tensor(op, "positions", positions, optional=True)
    cos_sin = _args.tensor(op, "cos_sin", cos_sin, optional=True)
    theta = _args.real(op, "theta", theta, ("rope", "theta"))
    rd = _args.integer(op, "rotary_dim", rotary_dim, ("rope", "rotary_dim"), optional=True) or 0
    interleaved = _args.boolean(op, "interleaved", interleaved)
    inplace = _args.boolean(op, "inplace", inplace)
    if _direct(q, k, cu_seqlens, positions, cos_sin):
        if inplace:
            _rope_impl(q, k, cu_seqlens, positions, cos_sin, theta, rd, interleaved)
            return q, k
        rq = torch.empty_like(q)
        rk = torch.empty_like(k) if k is not None else None
        _rope_impl(q, k, cu_seqlens, positions, cos_sin, theta, rd, interleaved, q_out=rq,
                   k_out=rk)
        return rq, rk
    grad = torch.is_grad_enabled() and (q.requires_grad or (k is not None and k.requires_grad))
    if inplace and not grad:
        torch.ops.scree.rope_(q, k, cu_seqlens, positions, cos_sin, theta, rd, interleaved)
        return q, k
    rq, rk = torch.ops.scree.rope(q, k, cu_seqlens, positions, cos_sin, theta, rd, interleaved)
    if not inplace:
        return rq, rk if k is not None else None
    q.copy_(rq)
    if k is not None:
        k.copy_(rk)
    return q, k


# -- SwiGLU ------------------------------------------------------------------

_SWIGLU_NAMES = {"gate": "gate", "up": "up", "y": "output", "dtype": "gate", "cols": "gate",
                 "rows": "gate", "gate_stride": "gate", "up_stride": "up"}


def _swiglu_shape(op, gate, up):
    if gate.dim() < 1:
        raise ValueError(f"scree.{op}: argument 'gate' must have at least one dimension")
    if up is None:
        if gate.shape[-1] % 2:
            raise ValueError(f"scree.{op}: argument 'gate' holds gate and up side by side "
                             f"when up is None, so its last dimension ({gate.shape[-1]}) "
                             "must be even")
        return tuple(gate.shape[:-1]) + (gate.shape[-1] // 2,)
    if tuple(up.shape) != tuple(gate.shape):
        raise ValueError(f"scree.{op}: argument 'up' has shape {tuple(up.shape)}, not gate's "
                         f"{tuple(gate.shape)}")
    if up.dtype != gate.dtype:
        raise TypeError(f"scree.{op}: argument 'up' has dtype {up.dtype}, not gate's "
                        f"{gate.dtype}")
    return tuple(gate.shape)


def _swiglu_impl(gate, up, check=False):
    op = "swiglu"
    if not check:
        _on_cuda(op, "gate", gate)
    shape = _swiglu_shape(op, gate, up)
    dt = _dtype_code(op, "gate", gate)
    cols = shape[-1]
    y = torch.empty(shape, dtype=gate.dtype, device=gate.device)
    ptr = _stand_in if check else _Tensor.data_ptr
    if up is None:
        g, gs = _rows(gate, 2 * cols)
        up_p, us = 0, 0  # up is gate + cols, with gate's stride
    else:
        _same_device(op, "up", up, gate)
        g, gs = _rows(gate, cols)
        u, us = _rows(up, cols)
        up_p = ptr(u)
    _run(op, "swiglu", (ptr(g), up_p, ptr(y), g.shape[0], cols, gs, us, 0, dt, dt),
         _SWIGLU_NAMES, gate, check)
    return y


@torch.library.custom_op("scree::swiglu", mutates_args=())
def _swiglu_op(gate: torch.Tensor, up: Optional[torch.Tensor]) -> torch.Tensor:
    return _swiglu_impl(gate, up)


@_swiglu_op.register_fake
def _(gate, up):
    return _swiglu_impl(gate, up, check=True)


def swiglu(gate, up=None):
    """silu(gate) * up, computed in float32, in gate's dtype. With up None,
    gate holds both side by side on its last dimension (gate first), as the
    fused gate_up projection of LLaMA-style MLPs writes them."""
    gate = _args.tensor("swiglu", "gate", gate)
    up = _args.tensor("swiglu", "up", up, optional=True)
    if _direct(gate, up):
        return _swiglu_impl(gate, up)
    return torch.ops.scree.swiglu(gate, up)


# -- SwiGLU's backward (autograd) --------------------------------------------

_SWIGLU_BWD_NAMES = dict(_SWIGLU_NAMES, dy="grad_out", dgate="gate", dup="up",
                         dy_dtype="grad_out", dy_stride="grad_out", dgate_stride="gate",
                         dup_stride="up")


def _swiglu_backward_impl(grad_out, gate, up, check=False):
    """(dgate, dup) of swiglu (scree_swiglu_backward): with up None, dgate
    is the fused [..., 2F] gradient of the fused input and dup is empty."""
    op = "swiglu"
    if not check:
        _on_cuda(op, "gate", gate)
    shape = _swiglu_shape(op, gate, up)
    _same_device(op, "grad_out", grad_out, gate)
    if tuple(grad_out.shape) != shape:
        raise ValueError(f"scree.{op}: argument 'grad_out' has shape {tuple(grad_out.shape)}, "
                         f"not the output's {shape}")
    dt = _dtype_code(op, "gate", gate)
    dd = _dtype_code(op, "grad_out", grad_out)
    cols = shape[-1]
    ptr = _stand_in if check else _Tensor.data_ptr
    dy, dys = _rows(grad_out, cols)
    dgate = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    if up is None:
        g, gs = _rows(gate, 2 * cols)
        up_p, us = 0, 0
        dup = torch.empty(0, dtype=gate.dtype, device=gate.device)
        dup_p = 0
    else:
        _same_device(op, "up", up, gate)
        g, gs = _rows(gate, cols)
        u, us = _rows(up, cols)
        up_p = ptr(u)
        dup = torch.empty(up.shape, dtype=up.dtype, device=up.device)
        dup_p = ptr(dup)
    _run(op, "swiglu_backward",
         (ptr(g), up_p, ptr(dy), ptr(dgate), dup_p, g.shape[0], cols, gs, us, dys, 0, 0, dt,
          dd), _SWIGLU_BWD_NAMES, gate, check)
    return dgate, dup


@torch.library.custom_op("scree::swiglu_backward", mutates_args=())
def _swiglu_backward_op(grad_out: torch.Tensor, gate: torch.Tensor,
                        up: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    return _swiglu_backward_impl(grad_out, gate, up)


@_swiglu_backward_op.register_fake
def _(grad_out, gate, up):
    return _swiglu_backward_impl(grad_out, gate, up, check=True)


def _swiglu_setup(ctx, inputs, output):
    gate, up = inputs
    ctx.save_for_backward(gate, up)


def _swiglu_grad(ctx, grad_out):
    gate, up = ctx.saved_tensors
    dgate, dup = torch.ops.scree.swiglu_backward(grad_out, gate, up)
    return dgate, dup if up is not None else None


torch.library.register_autograd("scree::swiglu", _swiglu_grad, setup_context=_swiglu_setup)


# -- cross-entropy -----------------------------------------------------------

_CE_NAMES = {"logits": "input", "targets": "target", "dtype": "input", "vocab": "input",
             "rows": "input", "logits_stride": "input", "loss": "output",
             "dlogits": "input", "dlogits_stride": "input", "label_smoothing": "label_smoothing",
             "z_loss": "z_loss", "reduction": "reduction", "grad_scale": "grad_out",
             "count": "target"}
_REDUCTIONS = {"none": 0, "sum": 1, "mean": 2}  # scree_reduction


def _target_check(op, target, rows):
    """target: class indices, one a row."""
    if target.dim() != 1 or target.shape[0] != rows:
        raise ValueError(f"scree.{op}: argument 'target' must be [rows] = [{rows}], "
                         f"got shape {tuple(target.shape)}")
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"scree.{op}: argument 'target' has dtype {target.dtype}; class "
                        "indices (int64) are needed")


def _ce_check(op, input, target):
    if input.dim() != 2:
        raise ValueError(f"scree.{op}: argument 'input' must be [rows, classes], got shape "
                         f"{tuple(input.shape)}")
    _target_check(op, target, input.shape[0])


def _ce_rows(input, target, ignore_index, label_smoothing, z_loss, reduction, dlogits,
             grad_scale, check, op="cross_entropy", names=_CE_NAMES, count=None):
    """One scree_cross_entropy call: the per-row loss and lse (float32), and
    with dlogits (a [rows, classes] tensor of input's dtype, or input itself:
    written in place over the logits) the gradient, scaled as the C args say
    (reduction, grad_scale); with count (an int64 0-d tensor) the number of
    rows not ignored, as the kernel's pre-pass counts them for the
    gradient's mean. Errors are scree.<op>'s, naming names[field]."""
    if not check:
        _on_cuda(op, "input", input)
    _ce_check(op, input, target)
    _same_device(op, "target", target, input)
    dt = _dtype_code(op, "input", input)
    t = target.to(torch.int64).contiguous()
    x, xs = _rows(input, input.shape[1])
    loss = torch.empty(input.shape[0], dtype=torch.float32, device=input.device)
    lse = torch.empty(input.shape[0], dtype=torch.float32, device=input.device)
    ptr = _stand_in if check else _Tensor.data_ptr
    dp, ds = 0, 0
    if dlogits is input:
        if not check and x.data_ptr() != input.data_ptr():
            raise ValueError(f"scree.{op}: argument 'input' cannot take its gradient in place "
                             f"(strides {tuple(input.stride())})")
        dp, ds = ptr(x), xs
    elif dlogits is not None:
        d, ds = _rows(dlogits, input.shape[1])
        dp = ptr(d)
    # The zeroed trailing fields (no dlogits, smoothing, z-loss) are the
    # plain forward.
    cp = ptr(count) if count is not None else 0
    _run(op, "cross_entropy", (ptr(x), ptr(t), ptr(loss), ptr(lse), x.shape[0], input.shape[1],
                               xs, ignore_index, dt, dp, ds, label_smoothing, z_loss, reduction,
                               grad_scale, cp), names, input, check)
    return loss, lse


def _ce_reduce(loss, count, reduction):
    """The per-row float32 loss reduced: as is (0, none), summed (1) or
    averaged over the rows not ignored (2, mean: over count, the kernel's
    count of them; 0 / 0 = NaN when all are, as PyTorch's)."""
    if reduction == 0:
        return loss
    if reduction == 1:
        return loss.sum()
    return loss.sum() / count


def _cross_entropy_impl(input, target, ignore_index, label_smoothing=0.0, z_loss=0.0,
                        reduction=0, need_grad=False, check=False):
    """(loss, lse, dlogits): loss reduced by `reduction` (0 none: [rows];
    1 sum, 2 mean: a 0-d tensor) in float32, lse [rows] float32, and with
    need_grad the gradient of that loss over the logits in input's dtype,
    written by the same kernel pass (else an empty tensor)."""
    dl = torch.empty(input.shape, dtype=input.dtype, device=input.device) if need_grad \
        else None
    count = torch.empty((), dtype=torch.int64, device=input.device) if reduction == 2 else None
    loss, lse = _ce_rows(input, target, ignore_index, label_smoothing, z_loss, reduction, dl,
                         0.0, check, count=count)
    return (_ce_reduce(loss, count, reduction), lse,
            dl if dl is not None else input.new_empty(0))


@torch.library.custom_op("scree::cross_entropy", mutates_args=())
def _cross_entropy_op(input: torch.Tensor, target: torch.Tensor, ignore_index: int,
                      label_smoothing: float = 0.0, z_loss: float = 0.0, reduction: int = 0,
                      need_grad: bool = False) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _cross_entropy_impl(input, target, ignore_index, label_smoothing, z_loss, reduction,
                               need_grad)


@_cross_entropy_op.register_fake
def _(input, target, ignore_index, label_smoothing=0.0, z_loss=0.0, reduction=0,
      need_grad=False):
    return _cross_entropy_impl(input, target, ignore_index, label_smoothing, z_loss, reduction,
                               need_grad, check=True)


def _cross_entropy_setup(ctx, inputs, output):
    input, target, ignore_index, label_smoothing, z_loss, reduction, need_grad = inputs
    _, lse, dlogits = output
    ctx.mark_non_differentiable(lse, dlogits)
    ctx.save_for_backward(dlogits if need_grad else None)
    ctx.ce = (reduction, need_grad, input.dtype)


def _cross_entropy_grad(ctx, grad_loss, grad_lse, grad_dlogits):
    reduction, need_grad, dtype = ctx.ce
    if not need_grad:
        raise RuntimeError("scree.cross_entropy: torch.ops.scree.cross_entropy was called with "
                           "need_grad=False, so it kept no gradient to go backward with; call "
                           "it with need_grad=True (scree.cross_entropy does when input "
                           "requires grad)")
    (dlogits,) = ctx.saved_tensors
    g = grad_loss.to(dtype)
    if reduction == 0:
        g = g[:, None]
    return dlogits * g, None, None, None, None, None, None


torch.library.register_autograd("scree::cross_entropy", _cross_entropy_grad,
                                setup_context=_cross_entropy_setup)


def _reduction(op, reduction):
    if not isinstance(reduction, str) or reduction not in _REDUCTIONS:
        raise ValueError(f"scree.{op}: argument 'reduction'={reduction!r}: "
                         "'mean', 'sum' or 'none'")
    return _REDUCTIONS[reduction]


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0, *, z_loss=0.0):
    """Cross-entropy of logits input [rows, classes] against class indices
    target [rows], as torch.nn.functional.cross_entropy (same arguments and
    result dtype, label_smoothing included) without class weights or the
    deprecated size_average / reduce. One pass over the logits; the mean is
    over the rows whose target is not ignore_index. z_loss (scree only,
    PaLM's) adds z_loss * logsumexp(row)^2 to each row's loss.

    Differentiable in input: when input requires grad, the same kernel pass
    also writes the gradient over the logits (with the reduction's scale,
    1 / count for the mean) into a new [rows, classes] buffer, kept for the
    backward, which multiplies it by the upstream gradient."""
    op = "cross_entropy"
    input = _args.tensor(op, "input", input)
    target = _args.tensor(op, "target", target)
    ignore_index = _args.integer(op, "ignore_index", ignore_index,
                                 ("cross_entropy", "ignore_index"))
    for name, v in (("weight", weight), ("size_average", size_average), ("reduce", reduce)):
        if v is not None:
            raise ValueError(f"scree.cross_entropy: argument '{name}' is not supported "
                             "(only its default, None)")
    red = _reduction(op, reduction)
    label_smoothing = _args.real(op, "label_smoothing", label_smoothing,
                                 ("cross_entropy", "label_smoothing"))
    z_loss = _args.real(op, "z_loss", z_loss, ("cross_entropy", "z_loss"))
    need = torch.is_grad_enabled() and input.requires_grad
    if _direct(input, target):
        loss, _, _ = _cross_entropy_impl(input, target, ignore_index, label_smoothing, z_loss,
                                         red)
    else:
        loss, _, _ = torch.ops.scree.cross_entropy(input, target, ignore_index, label_smoothing,
                                                   z_loss, red, need)
    return loss.to(input.dtype)


# -- fused linear cross-entropy ----------------------------------------------
#
# Cross-entropy of hidden @ weight.T (+ bias) without the [rows, vocab]
# logits: row chunks of logits, each one's gradient written in place over
# it by the cross-entropy kernel, then folded into the gradients of hidden,
# weight and bias in the forward (as Liger-Kernel's fused linear
# cross-entropy); the backward scales them by the upstream gradient.


# The cross-entropy kernel's fields as linear_cross_entropy's arguments.
_LCE_NAMES = dict(_CE_NAMES, logits="weight", vocab="weight", rows="hidden", dtype="hidden",
                  logits_stride="weight", dlogits="weight", dlogits_stride="weight")


def _lce_chunk_rows(n, vocab, hidden_size):
    """The default chunk: rows such that chunk x vocab logits take about
    as many elements as the whole hidden [n, hidden_size] (Liger-Kernel's
    rule): next power of two of ceil(n / ceil(vocab / hidden_size))."""
    per = max(1, -(-vocab // max(hidden_size, 1)))
    rows = max(1, -(-n // per))
    return 1 << (rows - 1).bit_length()


def _lce_check(op, hidden, weight, target, bias, chunk_size):
    if hidden.dim() != 2:
        raise ValueError(f"scree.{op}: argument 'hidden' must be [rows, hidden_size], got "
                         f"shape {tuple(hidden.shape)}")
    if weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"scree.{op}: argument 'weight' must be [vocab, {hidden.shape[1]}] "
                         f"(hidden's last dimension), got shape {tuple(weight.shape)}")
    _target_check(op, target, hidden.shape[0])
    _dtype_code(op, "hidden", hidden)
    for name, t, shape in (("weight", weight, None), ("bias", bias, (weight.shape[0],))):
        if t is None:
            continue
        if shape is not None and tuple(t.shape) != shape:
            raise ValueError(f"scree.{op}: argument '{name}' has shape {tuple(t.shape)}, "
                             f"not ({weight.shape[0]},), weight's vocab")
        if t.dtype != hidden.dtype:
            raise TypeError(f"scree.{op}: argument '{name}' has dtype {t.dtype}, not hidden's "
                            f"{hidden.dtype}")
    for name, t in (("weight", weight), ("target", target), ("bias", bias)):
        if t is not None:
            _same_device(op, name, t, hidden)
    if chunk_size < 0:
        raise ValueError(f"scree.{op}: argument 'chunk_size'={chunk_size} must be positive "
                         "(or None: the default)")


_LCE_IN_PLACE = ("cuda",)  # devices where the kernel is called directly, in place


def _lce_ce(logits, target, ignore_index, label_smoothing, z_loss, reduction, need_grad,
            grad_scale):
    """The cross-entropy of one chunk: its per-row loss, and with need_grad
    its gradient written over logits. On CUDA, scree_cross_entropy in
    place; elsewhere through torch.ops.scree.cross_entropy (whatever kernel
    the device has there) and a copy."""
    if logits.device.type in _LCE_IN_PLACE:
        loss, _ = _ce_rows(logits, target, ignore_index, label_smoothing, z_loss, reduction,
                           logits if need_grad else None, grad_scale, False,
                           "linear_cross_entropy", _LCE_NAMES)
        return loss
    loss, _, dl = torch.ops.scree.cross_entropy(logits, target, ignore_index, label_smoothing,
                                                z_loss, 0, need_grad)
    if need_grad:
        logits.copy_(dl * grad_scale)
    return loss


def _lce_impl(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, z_loss,
              chunk_size, need_grad, check=False, weight_grad=True, bias_grad=True):
    """(loss, grad hidden, grad weight, grad bias), the gradients with
    need_grad: weight's only with weight_grad and bias's only with bias_grad
    (a frozen lm_head: no weight product per chunk, no float32 sums), else
    empty tensors."""
    op = "linear_cross_entropy"
    _lce_check(op, hidden, weight, target, bias, chunk_size)
    if need_grad and reduction == 0:
        raise ValueError(f"scree.{op}: argument 'reduction'='none' is not differentiable here "
                         "(the gradients are folded in the forward for a scalar loss); use "
                         "'mean' or 'sum'")
    n, h = hidden.shape
    v = weight.shape[0]
    dev = hidden.device

    def empty():  # an unused output (one of its own: outputs may not alias)
        return hidden.new_empty(0)
    # The kernel's checks on the logits the chunks make up (meta tensors:
    # no memory), before any product is computed.
    _ce_rows(torch.empty((n, v), dtype=hidden.dtype, device="meta"),
             torch.empty((n,), dtype=target.dtype, device="meta"), ignore_index,
             label_smoothing, z_loss, 1 if need_grad else 0, None, 0.0, True,
             op, _LCE_NAMES)
    weight_grad = need_grad and weight_grad
    bias_grad = need_grad and bias_grad and bias is not None
    if check:
        loss = torch.empty(() if reduction else (n,), dtype=torch.float32, device=dev)
        if not need_grad:
            return loss, empty(), empty(), empty()
        return (loss, torch.empty((n, h), dtype=hidden.dtype, device=dev),
                torch.empty((v, h), dtype=weight.dtype, device=dev) if weight_grad else empty(),
                torch.empty((v,), dtype=bias.dtype, device=dev) if bias_grad else empty())
    chunk = chunk_size or _lce_chunk_rows(n, v, h)
    scale = 1.0
    if reduction == 2:
        # The mean is over the rows not ignored in every chunk: the count
        # first and, for the gradients, on the host (one device-to-host
        # copy), so that the kernel scales each chunk's gradient by it.
        count = (target != ignore_index).sum()
        if need_grad:
            c = int(count)
            scale = 1.0 / c if c else 1.0
    rows = torch.empty(n, dtype=torch.float32, device=dev)
    gh = gw = gb = None
    if need_grad:
        gh = torch.empty((n, h), dtype=hidden.dtype, device=dev)
        gw = torch.zeros((v, h), dtype=torch.float32, device=dev) if weight_grad else None
        gb = torch.zeros((v,), dtype=torch.float32, device=dev) if bias_grad else None
    wt = weight.t()
    for s in range(0, n, chunk):
        e = min(s + chunk, n)
        hc = hidden[s:e]
        logits = torch.addmm(bias, hc, wt) if bias is not None else torch.mm(hc, wt)
        rows[s:e] = _lce_ce(logits, target[s:e], ignore_index, label_smoothing, z_loss,
                            1 if need_grad else 0, need_grad, scale)
        if need_grad:  # logits now hold the chunk's dlogits
            torch.mm(logits, weight, out=gh[s:e])
            if gw is None:
                pass  # a frozen weight: no product for it
            elif hc.is_cuda and hc.dtype != torch.float32:
                # cuBLAS adds the 16-bit product into the fp32 sums in its
                # epilogue: no 16-bit product tensor, no separate add.
                torch.addmm(gw, logits.t(), hc, out_dtype=torch.float32, out=gw)
            else:
                gw.addmm_(logits.t().to(gw.dtype), hc.to(gw.dtype))
            if gb is not None:
                gb += logits.sum(0, dtype=torch.float32)
    if reduction == 0:
        loss = rows
    elif reduction == 1:
        loss = rows.sum()
    else:
        loss = rows.sum() / count
    if not need_grad:
        return loss, empty(), empty(), empty()
    return (loss, gh, gw.to(weight.dtype) if gw is not None else empty(),
            gb.to(bias.dtype) if gb is not None else empty())


@torch.library.custom_op("scree::linear_cross_entropy", mutates_args=())
def _lce_op(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
            bias: Optional[torch.Tensor], ignore_index: int, reduction: int,
            label_smoothing: float, z_loss: float, chunk_size: int, need_grad: bool,
            weight_grad: bool = True, bias_grad: bool = True
            ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _lce_impl(hidden, weight, target, bias, ignore_index, reduction, label_smoothing,
                     z_loss, chunk_size, need_grad, weight_grad=weight_grad, bias_grad=bias_grad)


@_lce_op.register_fake
def _(hidden, weight, target, bias, ignore_index, reduction, label_smoothing, z_loss,
      chunk_size, need_grad, weight_grad=True, bias_grad=True):
    return _lce_impl(hidden, weight, target, bias, ignore_index, reduction, label_smoothing,
                     z_loss, chunk_size, need_grad, check=True, weight_grad=weight_grad,
                     bias_grad=bias_grad)


def _lce_setup(ctx, inputs, output):
    hidden, weight, target, bias, *_ = inputs
    need_grad, weight_grad, bias_grad = (tuple(inputs[9:12]) + (True, True))[:3]
    _, gh, gw, gb = output
    ctx.mark_non_differentiable(gh, gw, gb)
    ctx.save_for_backward(gh, gw, gb)
    ctx.lce = (need_grad, need_grad and weight_grad,
               need_grad and bias_grad and bias is not None)


def _lce_grad(ctx, grad_loss, *_):
    need_grad, weight_grad, bias_grad = ctx.lce
    if not need_grad:
        raise RuntimeError("scree.linear_cross_entropy: torch.ops.scree.linear_cross_entropy "
                           "was called with need_grad=False, so it kept no gradients to go "
                           "backward with; call it with need_grad=True")
    gh, gw, gb = ctx.saved_tensors
    # No weight (bias) gradient was computed for a weight (bias) that does
    # not require grad: None, which autograd takes as nothing to add.
    return (gh * grad_loss.to(gh.dtype),
            gw * grad_loss.to(gw.dtype) if weight_grad else None, None,
            gb * grad_loss.to(gb.dtype) if bias_grad else None, None, None, None, None, None,
            None, None, None)


torch.library.register_autograd("scree::linear_cross_entropy", _lce_grad,
                                setup_context=_lce_setup)


def linear_cross_entropy(hidden, weight, target, bias=None, ignore_index=-100, reduction="mean",
                         label_smoothing=0.0, z_loss=0.0, chunk_size=None):
    """cross_entropy(hidden @ weight.T + bias, target, ...) without the
    [rows, vocab] logits (Liger-Kernel's fused linear cross-entropy):
    hidden [rows, hidden_size], weight [vocab, hidden_size] (an lm_head's),
    bias [vocab] or None, all of one dtype; target [rows]. Row chunks of
    chunk_size (default: rows such that chunk x vocab is about rows x
    hidden_size elements) are multiplied out in hidden's dtype (torch.mm),
    their loss taken by scree's cross-entropy kernel, which writes the
    chunk's gradient in place over its logits; when an input requires
    grad, the gradients of hidden, weight and bias are computed then, in
    the forward (weight's and bias's accumulated in float32 over the
    chunks, then cast to their dtype), and the backward only scales them
    by the upstream gradient; a weight or bias that does not require grad
    (a frozen lm_head) gets none computed. The mean is over the rows not
    ignored in all
    chunks (counted first; with gradients, one device-to-host copy).
    Returns the loss in float32. reduction='none' is forward only (refused
    when an input requires grad). label_smoothing and z_loss as scree.cross_entropy's."""
    op = "linear_cross_entropy"
    hidden = _args.tensor(op, "hidden", hidden)
    weight = _args.tensor(op, "weight", weight)
    target = _args.tensor(op, "target", target)
    bias = _args.tensor(op, "bias", bias, optional=True)
    ignore_index = _args.integer(op, "ignore_index", ignore_index,
                                 ("cross_entropy", "ignore_index"))
    red = _reduction(op, reduction)
    label_smoothing = _args.real(op, "label_smoothing", label_smoothing,
                                 ("cross_entropy", "label_smoothing"))
    z_loss = _args.real(op, "z_loss", z_loss, ("cross_entropy", "z_loss"))
    chunk = _args.integer(op, "chunk_size", chunk_size, optional=True)
    if chunk is not None and chunk < 1:
        raise ValueError(f"scree.{op}: argument 'chunk_size'={chunk} must be positive "
                         "(or None: the default)")
    need = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, weight, bias))
    if need and red == 0:
        raise ValueError(f"scree.{op}: argument 'reduction'='none' is not differentiable here "
                         "(the gradients are folded in the forward for a scalar loss); use "
                         "'mean' or 'sum'")
    # A frozen lm_head (weight, bias not requiring grad): their gradients
    # are not computed (no weight product per chunk, no float32 sums).
    loss, _, _, _ = torch.ops.scree.linear_cross_entropy(
        hidden, weight, target, bias, ignore_index, red, label_smoothing, z_loss, chunk or 0,
        need, need and weight.requires_grad,
        need and bias is not None and bias.requires_grad)
    return loss


# -- varlen attention --------------------------------------------------------

_ATTN_NAMES = {"q": "query", "k": "key", "v": "value", "out": "output", "lse": "lse",
               "cu_seqlens_q": "cu_seq_q", "cu_seqlens_k": "cu_seq_k", "total_q": "query",
               "total_k": "key", "max_seqlen_q": "max_q", "max_seqlen_k": "max_k",
               "heads_q": "query", "heads_kv": "key", "head_dim": "query", "dtype": "query",
               "q_token_stride": "query", "k_token_stride": "key",
               "v_token_stride": "value", "q_head_stride": "query",
               "k_head_stride": "key", "v_head_stride": "value", "scale": "scale",
               "window_left": "window_size", "window_right": "window_size",
               "softcap": "softcap", "batch": "cu_seq_q", "cu_seqlens": "cu_seq_q"}


def _attn_check(op, query, key, value, cu_seq_q, cu_seq_k):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 3:
            raise ValueError(f"scree.{op}: argument '{name}' must be [total, heads, head_dim], "
                             f"got shape {tuple(t.shape)}")
    if tuple(key.shape) != tuple(value.shape):
        raise ValueError(f"scree.{op}: argument 'value' has shape {tuple(value.shape)}, "
                         f"not key's {tuple(key.shape)}")
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"scree.{op}: argument 'key' has head_dim {key.shape[2]}, not "
                         f"query's {query.shape[2]}")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise TypeError(f"scree.{op}: argument '{name}' has dtype {t.dtype}, not query's "
                            f"{query.dtype}")
    if cu_seq_q.dim() != 1 or cu_seq_k.dim() != 1 or cu_seq_q.shape[0] != cu_seq_k.shape[0]:
        raise ValueError(f"scree.{op}: arguments 'cu_seq_q' {tuple(cu_seq_q.shape)} and "
                         f"'cu_seq_k' {tuple(cu_seq_k.shape)} must be 1-D of batch + 1 entries")


def _last_contiguous(t):
    return t if t.stride(2) == 1 or t.shape[2] == 1 else t.contiguous()


def _varlen_attn_impl(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale,
                      window_left, window_right, softcap, return_lse, check=False):
    op = "varlen_attn"
    if not check:
        _on_cuda(op, "query", query)
    _attn_check(op, query, key, value, cu_seq_q, cu_seq_k)
    for name, t in (("key", key), ("value", value)):
        _same_device(op, name, t, query)
    dt = _dtype_code(op, "query", query)
    cq = _int32(op, "cu_seq_q", cu_seq_q, query)
    ck = cq if cu_seq_k is cu_seq_q else _int32(op, "cu_seq_k", cu_seq_k, query)
    q, k, v = _last_contiguous(query), _last_contiguous(key), _last_contiguous(value)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    tq, hq, d = q.shape
    if return_lse:
        lse = torch.empty((hq, tq), dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty((0,), dtype=torch.float32, device=q.device)
    # Causal is a window with no right side (FlashAttention-2's convention);
    # passed as causal, scree runs its causal kernel.
    if window_right == 0:
        causal = True
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "attention",
         (ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse) if return_lse else 0, ptr(cq), ptr(ck),
          cq.numel() - 1, tq, k.shape[0], max_q, max_k, hq, k.shape[1], d,
          q.stride(0), k.stride(0), v.stride(0), 0, q.stride(1), k.stride(1), v.stride(1), 0,
          dt, 1 if causal else 0, 0.0 if scale is None else scale,
          window_left, -1 if causal else window_right, softcap), _ATTN_NAMES, q, check)
    return out, lse


@torch.library.custom_op("scree::varlen_attn", mutates_args=())
def _varlen_attn_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    cu_seq_q: torch.Tensor, cu_seq_k: torch.Tensor, max_q: int, max_k: int,
                    causal: bool, scale: Optional[float], window_left: int, window_right: int,
                    softcap: float, return_lse: bool,
                    deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    return _varlen_attn_impl(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal,
                             scale, window_left, window_right, softcap, return_lse)


@_varlen_attn_op.register_fake
def _(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale, window_left,
      window_right, softcap, return_lse, deterministic=False):
    return _varlen_attn_impl(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale,
                             window_left, window_right, softcap, return_lse, check=True)


# -- attention backward ---------------------------------------------------------

_ATTN_BWD_NAMES = dict(_ATTN_NAMES, dout="grad_out", dq="query", dk="key", dv="value",
                       dout_token_stride="grad_out", dout_head_stride="grad_out",
                       deterministic="deterministic",
                       **{"fwd." + k: v for k, v in _ATTN_NAMES.items()})


def _varlen_attn_backward_impl(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q,
                               max_k, causal, scale, window_left, window_right, softcap,
                               deterministic, check=False):
    """dq, dk, dv of varlen_attn (scree_attention_backward), from the
    forward's out and lse [H_q, T_q]; dk and dv [T_k, H_kv, D] sum a GQA
    group's query heads."""
    op = "varlen_attn"
    if not check:
        _on_cuda(op, "query", query)
    _attn_check(op, query, key, value, cu_seq_q, cu_seq_k)
    for name, t in (("key", key), ("value", value), ("grad_out", grad_out), ("out", out),
                    ("lse", lse)):
        _same_device(op, name, t, query)
    dt = _dtype_code(op, "query", query)
    cq = _int32(op, "cu_seq_q", cu_seq_q, query)
    ck = cq if cu_seq_k is cu_seq_q else _int32(op, "cu_seq_k", cu_seq_k, query)
    q, k, v = _last_contiguous(query), _last_contiguous(key), _last_contiguous(value)
    do = _last_contiguous(grad_out.to(q.dtype))
    o = _last_contiguous(out)
    lse = lse.contiguous()
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    tq, hq, d = q.shape
    if window_right == 0:
        causal = True
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "attention_backward",
         (ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse), ptr(cq), ptr(ck),
          cq.numel() - 1, tq, k.shape[0], max_q, max_k, hq, k.shape[1], d,
          q.stride(0), k.stride(0), v.stride(0), o.stride(0), q.stride(1), k.stride(1),
          v.stride(1), o.stride(1), dt, 1 if causal else 0, 0.0 if scale is None else scale,
          window_left, -1 if causal else window_right, softcap,
          ptr(do), ptr(dq), ptr(dk), ptr(dv), do.stride(0), do.stride(1), 0, 0, 0, 0, 0, 0,
          1 if deterministic else 0), _ATTN_BWD_NAMES, q, check)
    return dq, dk, dv


@torch.library.custom_op("scree::varlen_attn_backward", mutates_args=())
def _varlen_attn_backward_op(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                             value: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                             cu_seq_q: torch.Tensor, cu_seq_k: torch.Tensor, max_q: int,
                             max_k: int, causal: bool, scale: Optional[float], window_left: int,
                             window_right: int, softcap: float, deterministic: bool
                             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _varlen_attn_backward_impl(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k,
                                      max_q, max_k, causal, scale, window_left, window_right,
                                      softcap, deterministic)


@_varlen_attn_backward_op.register_fake
def _(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale,
      window_left, window_right, softcap, deterministic):
    return _varlen_attn_backward_impl(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k,
                                      max_q, max_k, causal, scale, window_left, window_right,
                                      softcap, deterministic, check=True)


def _varlen_attn_setup(ctx, inputs, output):
    (query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale, window_left,
     window_right, softcap, return_lse, deterministic) = inputs
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(query, key, value, out, lse if return_lse else None, cu_seq_q,
                          cu_seq_k)
    ctx.attn = (max_q, max_k, causal, scale, window_left, window_right, softcap, deterministic)


def _varlen_attn_grad(ctx, grad_out, grad_lse):
    query, key, value, out, lse, cu_seq_q, cu_seq_k = ctx.saved_tensors
    if lse is None:
        raise RuntimeError("scree.varlen_attn: the backward needs the forward's log-sum-exp; "
                           "call scree.varlen_attn (it keeps it whenever an input requires "
                           "grad), or torch.ops.scree.varlen_attn with return_lse=True")
    max_q, max_k, causal, scale, window_left, window_right, softcap, deterministic = ctx.attn
    deterministic = bool(deterministic or torch.are_deterministic_algorithms_enabled())
    dq, dk, dv = torch.ops.scree.varlen_attn_backward(
        grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale,
        window_left, window_right, softcap, deterministic)
    return (dq, dk, dv) + (None,) * 11


torch.library.register_autograd("scree::varlen_attn", _varlen_attn_grad,
                                setup_context=_varlen_attn_setup)


def _attn_args(op, names, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale,
               window_size, causal):
    """The checked arguments of an attention call; names: the caller's
    names of the first nine."""
    q, k, v, cq, ck = (_args.tensor(op, n, t) for n, t in
                       zip(names, (query, key, value, cu_seq_q, cu_seq_k)))
    # Maximum lengths: ints, SymInts, or 0-d tensors (as transformers passes them).
    mq = _args.integer(op, names[5], max_q, ("attention", "max_seqlen_q"))
    mk = _args.integer(op, names[6], max_k, ("attention", "max_seqlen_k"))
    sc = _args.real(op, names[7], scale, ("attention", "scale"), optional=True)
    left, right = _window(op, window_size, "attention")
    return q, k, v, cq, ck, mq, mk, sc, left, right, _args.boolean(op, names[8], causal)


def _window(op, window_size, c_op):
    """window_size as the (left, right) ints of c_op's window fields."""
    if isinstance(window_size, (str, bytes)) or not hasattr(window_size, "__len__") or \
            len(window_size) != 2:
        raise TypeError(f"scree.{op}: argument 'window_size'={window_size!r} must be a pair "
                        "(left, right)")
    return (_args.integer(op, "window_size", window_size[0], (c_op, "window_left")),
            _args.integer(op, "window_size", window_size[1], (c_op, "window_right")))


_VARLEN_NAMES = ("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k", "scale",
                 "causal")


def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None,
                scale=None, window_size=(-1, -1), causal=False, softcap=0.0, block_table=None,
                seqused_k=None, deterministic=False, enable_gqa=None, num_splits=None,
                varlen_attn_out=None, **unsupported):
    """Attention over a packed batch of sequences, with the signature of
    torch.nn.attention.varlen.varlen_attn.

    query [T_q, H_q, D], key and value [T_k, H_kv, D] (H_q a multiple of
    H_kv: GQA and MQA read K and V in place), float16 or bfloat16, D in 32,
    64, 96, 128, 256; token and head strides multiples of 8 elements.
    Sequence b is query tokens [cu_seq_q[b], cu_seq_q[b + 1]) against key
    tokens [cu_seq_k[b], cu_seq_k[b + 1]) (int32 on the device); max_q and
    max_k bound the lengths. scale defaults to 1/sqrt(D). window_size
    (left, right), -1 unbounded, masks aligned to the bottom right as
    FlashAttention-2's; (-1, 0), or causal=True, is causal attention.
    softcap > 0 (scree's extension, as FlashAttention's softcap) applies
    softcap * tanh(s / softcap) to the scaled scores s (Gemma 2); 0 is none.
    Returns out [T_q, H_q, D], and with return_aux.lse also the log-sum-exp
    [H_q, T_q] (float32; the layout PyTorch's op returns).

    Differentiable in query, key and value (contiguous K/V): the backward is
    scree_attention_backward, fed this call's out and log-sum-exp (kept
    whenever an input requires grad). The log-sum-exp output is not
    differentiable. deterministic=True (scree's extension, as
    FlashAttention's; also whenever torch.use_deterministic_algorithms is on)
    makes the backward bitwise reproducible.

    Paged K/V (scree's extension; PyTorch 2.11's varlen_attn has none): with
    block_table (int32 [batch, pages]), key and value are the paged caches
    [num_pages, page_size, H_kv, D] of paged_attention, and sequence b's keys
    are its first seqused_k[b] (int32 [batch]; vLLM's FlashAttention names)
    or, without seqused_k, cu_seq_k[b + 1] - cu_seq_k[b]; the call is
    scree.paged_attention's, max_k bounding the key lengths.

    Keywords of later varlen_attn releases: enable_gqa (None or True allow
    H_q a multiple of H_kv; False refuses H_q != H_kv, as
    scaled_dot_product_attention does); num_splits None or 0 (scree's tuned
    config picks the split of long key ranges; a fixed count is refused:
    pin a cache for fixed configs); varlen_attn_out, a tensor of out's
    shape, dtype and device that receives the output (copied into it: one
    more pass over the output; refused when a gradient would flow) and is
    returned. Any other keyword is refused with ScreeArgumentError naming
    it."""
    op = "varlen_attn"
    if unsupported:
        name = sorted(unsupported)[0]
        raise _args._refuse(op, name, " is not supported by scree's varlen_attn (it takes "
                            "return_aux, scale, window_size, causal, softcap, block_table, "
                            "seqused_k, deterministic, enable_gqa, num_splits and "
                            "varlen_attn_out)")
    if enable_gqa is not None and not _args.boolean(op, "enable_gqa", enable_gqa) and \
            isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and \
            query.dim() == 3 and key.dim() >= 3 and query.shape[-2] != key.shape[-2]:
        raise _args._refuse(op, "enable_gqa", f"=False, but query has {query.shape[-2]} heads "
                            f"and key {key.shape[-2]}: grouped-query attention needs "
                            "enable_gqa=True (or None)")
    if num_splits is not None and _args.integer(op, "num_splits", num_splits) != 0:
        raise _args._refuse(op, "num_splits", f"={num_splits} is not supported: scree's tuned "
                            "config picks the split of long key ranges (0 or None); for fixed "
                            "configs run with a pinned cache")
    if varlen_attn_out is not None:
        out = varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k,
                          return_aux=return_aux, scale=scale, window_size=window_size,
                          causal=causal, softcap=softcap, block_table=block_table,
                          seqused_k=seqused_k, deterministic=deterministic)
        res, lse = out if isinstance(out, tuple) else (out, None)
        dst = _args.tensor(op, "varlen_attn_out", varlen_attn_out)
        if tuple(dst.shape) != tuple(res.shape) or dst.dtype != res.dtype or \
                dst.device != res.device:
            raise _args._refuse(op, "varlen_attn_out", f" is {tuple(dst.shape)} {dst.dtype} on "
                                f"{dst.device}; the output is {tuple(res.shape)} {res.dtype} "
                                f"on {res.device}")
        if res.requires_grad:
            raise _args._refuse(op, "varlen_attn_out", " takes no gradient (an out= argument "
                                "is not differentiable); call without it under autograd")
        dst.copy_(res)
        return (dst, lse) if lse is not None else dst
    want_lse = bool(return_aux is not None and getattr(return_aux, "lse", False))
    if block_table is not None:
        return _paged_varlen("varlen_attn", _VARLEN_PAGED_NAMES, _VARLEN_PAGED_CU_NAMES, query,
                             key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale, window_size,
                             causal, softcap, want_lse, block_table, seqused_k)
    if seqused_k is not None:
        raise ValueError("scree.varlen_attn: argument 'seqused_k' is taken with block_table "
                         "(paged K/V) only; contiguous keys take their lengths from cu_seq_k")
    query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, sc, left, right, causal = _attn_args(
        "varlen_attn", _VARLEN_NAMES, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale,
        window_size, causal)
    cap = _args.real("varlen_attn", "softcap", softcap, ("attention", "softcap"))
    det = _args.boolean("varlen_attn", "deterministic", deterministic)
    if _direct(query, key, value, cu_seq_q, cu_seq_k):
        out, lse = _varlen_attn_impl(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal,
                                     sc, left, right, cap, want_lse)
    else:
        # The backward needs the log-sum-exp: kept whenever a gradient may flow.
        grad = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in (query, key, value))
        out, lse = torch.ops.scree.varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q,
                                               max_k, causal, sc, left, right, cap,
                                               want_lse or grad, det)
    return (out, lse) if want_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None):
    """varlen_attn under flash_attn.flash_attn_varlen_func's argument names
    (FlashAttention-2). dropout_p must be 0 and alibi_slopes None;
    differentiable as varlen_attn (deterministic=True: a bitwise
    reproducible backward). With block_table (int32 [batch, pages]), k and v are paged caches
    [num_blocks, page_size, H_kv, D] and cu_seqlens_k the cumulative key
    lengths, as FlashAttention-2's paged KV: the call is
    scree.paged_attention's. softcap > 0 applies softcap * tanh(s /
    softcap) to the scaled scores s on either path. With return_attn_probs
    it returns (out, softmax_lse [H_q, T_q], None), as FlashAttention does
    without dropout."""
    for name, v_, ok in (("dropout_p", dropout_p, dropout_p == 0),
                         ("alibi_slopes", alibi_slopes, alibi_slopes is None)):
        if not ok:
            raise ValueError(f"scree.flash_attn_varlen_func: argument '{name}' is not supported "
                             f"(got {v_!r})")
    if block_table is not None:
        res = _paged_varlen("flash_attn_varlen_func", _FLASH_PAGED_NAMES, _FLASH_PAGED_NAMES, q,
                            k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            softmax_scale, window_size, causal, softcap,
                            bool(return_attn_probs), block_table, None)
        return (res[0], res[1], None) if return_attn_probs else res
    # Checked under this function's names; varlen_attn takes the values as they come out.
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, _, _, \
        causal = _attn_args("flash_attn_varlen_func", _FLASH_NAMES, q, k, v, cu_seqlens_q,
                            cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, window_size,
                            causal)
    softcap = _args.real("flash_attn_varlen_func", "softcap", softcap, ("attention", "softcap"))
    aux = _LseRequest() if return_attn_probs else None
    res = varlen_attn(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                      return_aux=aux, scale=softmax_scale, window_size=window_size,
                      causal=causal, softcap=softcap,
                      deterministic=_args.boolean("flash_attn_varlen_func", "deterministic",
                                                  deterministic))
    if return_attn_probs:
        return res[0], res[1], None
    return res


_FLASH_NAMES = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k",
                "softmax_scale", "causal")


class _LseRequest:
    lse = True


def _varlen_names_ok():
    """The C field names of every op, to check the maps above in tests."""
    return {"rms_norm": _RMS_NAMES, "layer_norm": _LN_NAMES, "add_rms_norm": _ADD_NAMES,
            "softmax": _SM_NAMES, "ragged_softmax": _RSM_NAMES, "rope": _ROPE_NAMES,
            "swiglu": _SWIGLU_NAMES, "cross_entropy": _CE_NAMES, "varlen_attn": _ATTN_NAMES,
            "paged_attention": _PAGED_NAMES}


# -- KV-cache append ------------------------------------------------------------

_KV_APPEND_NAMES = {"k": "k", "v": "v", "k_cache": "k_cache", "v_cache": "v_cache",
                    "slot_mapping": "slot_mapping", "total_new": "k", "num_pages": "k_cache",
                    "page_size": "k_cache", "heads_kv": "k", "head_dim": "k",
                    "k_token_stride": "k", "k_head_stride": "k", "v_token_stride": "v",
                    "v_head_stride": "v", "cache_page_stride": "k_cache",
                    "cache_token_stride": "k_cache", "cache_head_stride": "k_cache",
                    "dtype": "k"}


def _read_in_place(op, name, t):
    """Refuses a tensor that scree would read wrongly where it lies (caches,
    which are not copied): a last dimension that is not contiguous, or a
    broadcast dimension (a stride of 0, which scree reads as dense)."""
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"scree.{op}: argument '{name}' needs a contiguous last dimension "
                         f"(strides {t.stride()})")
    for i in range(t.dim() - 1):
        if t.stride(i) == 0 and t.shape[i] > 1:
            raise ValueError(f"scree.{op}: argument '{name}' is broadcast along dimension "
                             f"{i} (stride 0); scree reads 0 as dense")


def _same_cache_layout(op, name, t, ref, ref_name):
    """v_cache has k_cache's shape and strides (the C API takes one set)."""
    if tuple(t.shape) != tuple(ref.shape) or t.stride() != ref.stride():
        raise ValueError(f"scree.{op}: argument '{name}' (shape {tuple(t.shape)}, "
                         f"strides {t.stride()}) must have {ref_name}'s shape and strides "
                         f"{tuple(ref.shape)}, {ref.stride()}")


def _kv_append_check(op, k, v, k_cache, v_cache, slot_mapping):
    if k.dim() != 3:
        raise ValueError(f"scree.{op}: argument 'k' must be [total_new, heads_kv, head_dim], "
                         f"got shape {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"scree.{op}: argument 'v' has shape {tuple(v.shape)}, not k's "
                         f"{tuple(k.shape)}")
    if k_cache.dim() != 4 or tuple(k_cache.shape[2:]) != tuple(k.shape[1:]):
        raise ValueError(f"scree.{op}: argument 'k_cache' must be [num_pages, page_size, "
                         f"heads_kv, head_dim] with k's heads_kv and head_dim "
                         f"{tuple(k.shape[1:])}, got shape {tuple(k_cache.shape)}")
    _same_cache_layout(op, "v_cache", v_cache, k_cache, "k_cache")
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != k.dtype:
            raise TypeError(f"scree.{op}: argument '{name}' has dtype {t.dtype}, not k's "
                            f"{k.dtype}")
    for name, t in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        _read_in_place(op, name, t)
    if slot_mapping.dtype not in (torch.int32, torch.int64) or slot_mapping.dim() != 1 or \
            slot_mapping.shape[0] != k.shape[0]:
        raise TypeError(f"scree.{op}: argument 'slot_mapping' must be a 1-D int64 (or int32) "
                        f"tensor of total_new={k.shape[0]} slots, got {slot_mapping.dtype} "
                        f"{tuple(slot_mapping.shape)}")


def _kv_append_impl(k, v, k_cache, v_cache, slot_mapping, check=False):
    op = "kv_append"
    if not check:
        _on_cuda(op, "k", k)
    _kv_append_check(op, k, v, k_cache, v_cache, slot_mapping)
    for name, t in (("v", v), ("k_cache", k_cache), ("v_cache", v_cache),
                    ("slot_mapping", slot_mapping)):
        _same_device(op, name, t, k)
    dt = _dtype_code(op, "k", k)
    ptr = _stand_in if check else _Tensor.data_ptr
    slots = slot_mapping.to(torch.int64).contiguous()  # kept alive through the call
    _run(op, "kv_append", (ptr(k), ptr(v), ptr(k_cache), ptr(v_cache), ptr(slots), k.shape[0],
                           k_cache.shape[0], k_cache.shape[1], k.shape[1], k.shape[2],
                           k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                           k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), dt),
         _KV_APPEND_NAMES, k, check)


@torch.library.custom_op("scree::kv_append", mutates_args=("k_cache", "v_cache"))
def _kv_append_op(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  slot_mapping: torch.Tensor) -> None:
    _kv_append_impl(k, v, k_cache, v_cache, slot_mapping)


@_kv_append_op.register_fake
def _(k, v, k_cache, v_cache, slot_mapping):
    _kv_append_impl(k, v, k_cache, v_cache, slot_mapping, check=True)


def kv_append(k, v, k_cache, v_cache, slot_mapping):
    """Writes new tokens' k and v [total_new, heads_kv, head_dim] into their
    slots of the paged caches k_cache and v_cache [num_pages, page_size,
    heads_kv, head_dim], in place (vLLM's reshape_and_cache): token t goes
    to page slot_mapping[t] // page_size, row slot_mapping[t] % page_size;
    a slot of -1 skips the token. k and v may be strided views (of a fused
    qkv projection); the caches share one set of strides (two halves of one
    [num_pages, 2, ...] buffer included). slot_mapping is int64 (int32 is
    converted). Returns None."""
    op = "kv_append"
    k = _args.tensor(op, "k", k)
    v = _args.tensor(op, "v", v)
    k_cache = _args.tensor(op, "k_cache", k_cache)
    v_cache = _args.tensor(op, "v_cache", v_cache)
    slot_mapping = _args.tensor(op, "slot_mapping", slot_mapping)
    if _direct(k, v, k_cache, v_cache, slot_mapping):
        _kv_append_impl(k, v, k_cache, v_cache, slot_mapping)
    else:
        torch.ops.scree.kv_append(k, v, k_cache, v_cache, slot_mapping)


# -- paged attention ------------------------------------------------------------


def _paged_names(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, max_q, max_k,
                 scale):
    """The fields of scree_paged_attention_args under a caller's argument
    names (the tensors' and sizes' names first, in the C order)."""
    return {"q": q, "out": "output", "lse": "lse", "k_cache": k_cache, "v_cache": v_cache,
            "block_table": block_table, "seqlens_k": seqlens_k, "cu_seqlens_q": cu_seqlens_q,
            "batch": cu_seqlens_q, "total_q": q, "max_seqlen_q": max_q, "max_seqlen_k": max_k,
            "num_pages": k_cache, "page_size": k_cache, "block_table_stride": block_table,
            "heads_q": q, "heads_kv": k_cache, "head_dim": q, "q_token_stride": q,
            "q_head_stride": q, "out_token_stride": "output", "out_head_stride": "output",
            "cache_page_stride": k_cache, "cache_token_stride": k_cache,
            "cache_head_stride": k_cache, "dtype": q, "causal": "causal", "scale": scale,
            "window_left": "window_size", "window_right": "window_size", "softcap": "softcap"}


_PAGED_NAMES = _paged_names("q", "k_cache", "v_cache", "block_table", "seqlens_k",
                            "cu_seqlens_q", "max_seqlen_q", "max_seqlen_k", "scale")
# varlen_attn and flash_attn_varlen_func with block_table: the key lengths
# come from seqused_k, or from the cumulative key lengths.
_VARLEN_PAGED_NAMES = _paged_names("query", "key", "value", "block_table", "seqused_k",
                                   "cu_seq_q", "max_q", "max_k", "scale")
_VARLEN_PAGED_CU_NAMES = dict(_VARLEN_PAGED_NAMES, seqlens_k="cu_seq_k")
_FLASH_PAGED_NAMES = _paged_names("q", "k", "v", "block_table", "cu_seqlens_k", "cu_seqlens_q",
                                  "max_seqlen_q", "max_seqlen_k", "softmax_scale")


def _paged_check(op, n, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q):
    """The tensors' ranks, shapes and dtypes; n: the caller's names of the
    fields (_paged_names)."""
    if q.dim() != 3:
        raise ValueError(f"scree.{op}: argument '{n['q']}' must be [total_q, heads_q, "
                         f"head_dim], got shape {tuple(q.shape)}")
    if k_cache.dim() != 4 or k_cache.shape[3] != q.shape[2]:
        raise ValueError(f"scree.{op}: argument '{n['k_cache']}' must be [num_pages, "
                         f"page_size, heads_kv, head_dim] with {n['q']}'s head_dim "
                         f"{q.shape[2]}, got shape {tuple(k_cache.shape)}")
    _same_cache_layout(op, n["v_cache"], v_cache, k_cache, n["k_cache"])
    for f, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"scree.{op}: argument '{n[f]}' has dtype {t.dtype}, not "
                            f"{n['q']}'s {q.dtype}")
        _read_in_place(op, n[f], t)
    if block_table.dtype != torch.int32 or block_table.dim() != 2:
        raise TypeError(f"scree.{op}: argument '{n['block_table']}' must be an int32 "
                        f"[batch, pages] tensor of page ids, got {block_table.dtype} "
                        f"{tuple(block_table.shape)}")
    batch = block_table.shape[0]
    if seqlens_k.dtype not in (torch.int32, torch.int64) or seqlens_k.dim() != 1 or \
            seqlens_k.shape[0] != batch:
        raise TypeError(f"scree.{op}: argument '{n['seqlens_k']}' must be int32 [batch] with "
                        f"{n['block_table']}'s batch {batch}, got {seqlens_k.dtype} "
                        f"{tuple(seqlens_k.shape)}")
    if cu_seqlens_q.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"scree.{op}: argument '{n['cu_seqlens_q']}' has dtype "
                        f"{cu_seqlens_q.dtype}; int32 (or int64)")
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] != batch + 1:
        raise ValueError(f"scree.{op}: argument '{n['cu_seqlens_q']}' must be 1-D with batch + "
                         f"1 = {batch + 1} entries ({n['block_table']} has {batch} rows), got "
                         f"shape {tuple(cu_seqlens_q.shape)}")


def _cache_stride(t, i):
    """A cache's stride along dimension i; 0 (dense) along a dimension of
    one, whose stride is never used and may be anything in torch."""
    return t.stride(i) if t.shape[i] > 1 else 0


def _paged_attention_impl(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, max_q,
                          max_k, causal, scale, window_left, window_right, softcap, return_lse,
                          check=False, op="paged_attention", n=_PAGED_NAMES):
    if not check:
        _on_cuda(op, n["q"], q)
    _paged_check(op, n, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q)
    for f, t in (("k_cache", k_cache), ("v_cache", v_cache), ("block_table", block_table),
                 ("seqlens_k", seqlens_k)):
        _same_device(op, n[f], t, q)
    dt = _dtype_code(op, n["q"], q)
    cq = _int32(op, n["cu_seqlens_q"], cu_seqlens_q, q)
    sk = seqlens_k.to(torch.int32).contiguous()
    bt = block_table.contiguous()
    qv = _last_contiguous(q)
    tq, hq, d = qv.shape
    out = torch.empty(qv.shape, dtype=q.dtype, device=q.device)
    if return_lse:
        lse = torch.empty((hq, tq), dtype=torch.float32, device=q.device)
    else:
        lse = torch.empty((0,), dtype=torch.float32, device=q.device)
    if window_right == 0:  # FlashAttention-2's causal window, as in varlen_attn
        causal = True
    ptr = _stand_in if check else _Tensor.data_ptr
    _run(op, "paged_attention",
         (ptr(qv), ptr(out), ptr(lse) if return_lse else 0, ptr(k_cache), ptr(v_cache), ptr(bt),
          ptr(sk), ptr(cq), bt.shape[0], tq, max_q, max_k, k_cache.shape[0], k_cache.shape[1],
          bt.shape[1], hq, k_cache.shape[2], d, qv.stride(0), qv.stride(1), 0, 0,
          _cache_stride(k_cache, 0), _cache_stride(k_cache, 1), _cache_stride(k_cache, 2), dt,
          1 if causal else 0, 0.0 if scale is None else scale, window_left,
          -1 if causal else window_right, softcap), n, qv, check)
    return out, lse


@torch.library.custom_op("scree::paged_attention", mutates_args=())
def _paged_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_table: torch.Tensor, seqlens_k: torch.Tensor,
                        cu_seqlens_q: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                        causal: bool, scale: Optional[float], window_left: int,
                        window_right: int, softcap: float,
                        return_lse: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    return _paged_attention_impl(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q,
                                 max_seqlen_q, max_seqlen_k, causal, scale, window_left,
                                 window_right, softcap, return_lse)


@_paged_attention_op.register_fake
def _(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, max_seqlen_q, max_seqlen_k,
      causal, scale, window_left, window_right, softcap, return_lse):
    return _paged_attention_impl(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q,
                                 max_seqlen_q, max_seqlen_k, causal, scale, window_left,
                                 window_right, softcap, return_lse, check=True)


def _paged_call(op, n, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, max_q, max_k,
                scale, window_size, causal, softcap, return_lse):
    """A paged attention call of the public function `op`, whose argument
    names n gives (_paged_names): the scalars checked, then the
    implementation (eager CUDA tensors) or torch.ops.scree.paged_attention,
    whose refusals are reported under op's names. Returns (out, lse)."""
    c = "paged_attention"
    mq = _args.integer(op, n["max_seqlen_q"], max_q, (c, "max_seqlen_q"))
    mk = _args.integer(op, n["max_seqlen_k"], max_k, (c, "max_seqlen_k"))
    sc = _args.real(op, n["scale"], scale, (c, "scale"), optional=True)
    left, right = _window(op, window_size, c)
    causal = _args.boolean(op, "causal", causal)
    cap = _args.real(op, "softcap", softcap, (c, "softcap"))
    if _direct(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q):
        return _paged_attention_impl(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q,
                                     mq, mk, causal, sc, left, right, cap, return_lse, op=op, n=n)
    if n is _PAGED_NAMES:
        return torch.ops.scree.paged_attention(q, k_cache, v_cache, block_table, seqlens_k,
                                               cu_seqlens_q, mq, mk, causal, sc, left, right,
                                               cap, return_lse)
    _paged_check(op, n, q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q)
    try:
        return torch.ops.scree.paged_attention(q, k_cache, v_cache, block_table, seqlens_k,
                                               cu_seqlens_q, mq, mk, causal, sc, left, right,
                                               cap, return_lse)
    except _lib.ScreeError as e:  # the op's refusal, under op's names
        if e.argument is None or e.argument not in _PAGED_NAMES.values():
            raise
        field = next(f for f, a in _PAGED_NAMES.items() if a == e.argument)
        arg = n[field]
        raise type(e)(f"scree.{op} (argument '{arg}'): {e.detail} [{e.status_name}]", e.status,
                      e.status_name, e.detail, arg) from None


def paged_attention(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, max_seqlen_q,
                    max_seqlen_k, *, causal=True, scale=None, window_size=(-1, -1), softcap=0.0,
                    return_lse=False):
    """Attention of packed queries over a paged KV cache (decode, chunked
    prefill, speculative decoding), as vLLM's and FlashAttention's paged
    kernels.

    q [T_q, H_q, D], sequence b's queries at rows [cu_seqlens_q[b],
    cu_seqlens_q[b + 1]); k_cache and v_cache [num_pages, page_size, H_kv,
    D] with one set of strides (the two halves of vLLM's [num_blocks, 2,
    page_size, H_kv, D] cache included); block_table int32 [batch, pages]:
    sequence b's keys j < seqlens_k[b] (its new tokens included) are row j %
    page_size of page block_table[b, j // page_size]. seqlens_k int32
    [batch]; max_seqlen_q and max_seqlen_k bound the lengths. causal masks
    are aligned to the bottom right (query i of L_q sits at key position i +
    L_k - L_q); window_size (left, right), -1 unbounded; softcap > 0 applies
    softcap * tanh(s / softcap) to the scaled scores (Gemma 2); scale
    defaults to 1/sqrt(D). float16 or bfloat16, D in 32, 64, 96, 128, 256,
    page_size in 1, 8, 16, 32, 64, 128, 256, H_q a multiple of H_kv.
    Returns out [T_q, H_q, D], and with return_lse also the log-sum-exp
    [H_q, T_q] (float32)."""
    op = "paged_attention"
    q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q = (
        _args.tensor(op, name, t) for name, t in
        (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("block_table", block_table),
         ("seqlens_k", seqlens_k), ("cu_seqlens_q", cu_seqlens_q)))
    return_lse = _args.boolean(op, "return_lse", return_lse)
    out, lse = _paged_call(op, _PAGED_NAMES, q, k_cache, v_cache, block_table, seqlens_k,
                           cu_seqlens_q, max_seqlen_q, max_seqlen_k, scale, window_size, causal,
                           softcap, return_lse)
    return (out, lse) if return_lse else out


def _paged_varlen(op, n, n_cu, query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, scale,
                  window_size, causal, softcap, want_lse, block_table, seqused_k):
    """varlen_attn or flash_attn_varlen_func with block_table: key and value
    are the paged caches, the key lengths seqused_k or, without it, the
    differences of cu_seq_k (computed on the device). n and n_cu: the
    caller's names (_paged_names) with seqused_k and with cu_seq_k."""
    q, kc, vc, bt, cq = (_args.tensor(op, n[f], t) for f, t in
                         (("q", query), ("k_cache", key), ("v_cache", value),
                          ("block_table", block_table), ("cu_seqlens_q", cu_seq_q)))
    if seqused_k is not None:
        sk = _args.tensor(op, n["seqlens_k"], seqused_k)
    else:
        n = n_cu
        ck = _args.tensor(op, n["seqlens_k"], cu_seq_k)
        if ck.dim() != 1 or ck.shape[0] < 1 or ck.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"scree.{op}: argument '{n['seqlens_k']}' must be a 1-D int32 "
                             f"tensor of batch + 1 cumulative key lengths, got {ck.dtype} "
                             f"{tuple(ck.shape)}")
        sk = (ck[1:] - ck[:-1]).to(torch.int32)
    out, lse = _paged_call(op, n, q, kc, vc, bt, sk, cq, max_q, max_k, scale, window_size,
                           causal, softcap, want_lse)
    return (out, lse) if want_lse else out


OPS = ("rms_norm", "layer_norm", "add_rms_norm", "softmax", "ragged_softmax", "rope_", "rope",
       "swiglu", "cross_entropy", "linear_cross_entropy", "varlen_attn", "kv_append",
       "paged_attention")
