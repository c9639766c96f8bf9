"""The checks of the Python arguments of scree's functions, shared by all of
them: each returns the value as the C call takes it, or raises TypeError
(the wrong kind of value) or ValueError (a value out of range: a
ScreeArgumentError, as the library's refusal would be) naming the function
and the argument and saying why. Where an argument is a field of
the op's args struct, its range and whether it must be finite come from
the op's schema (_structs.py, the table the C checks are made from), so
that a value is refused before it reaches torch's custom-op schema (whose
int is int64) or the struct's packing (int64, int32, float32).

The rules between fields (GQA divisibility, head sizes, dtypes an op does
not take) are the library's: the C entry checks them on the device, and
scree_check_args in the fake implementations (_ops._run)."""
import math
import numbers
import operator

import torch

from . import _lib

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_FLT_MAX = 3.4028234663852886e38
_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
_fields = {}  # (c_op, field) -> the field's dict in _structs.OPS


def _field(field):
    f = _fields.get(field)
    if f is None:
        c_op, name = field
        f = next(f for f in _lib.OPS[c_op]["fields"] if f["name"] == name)
        _fields[field] = f
    return f


def _refuse(op, name, why):
    """A value out of its range: ScreeArgumentError, a ValueError, as the
    library's refusal of the same value would be, with the argument."""
    msg = f"scree.{op}: argument '{name}'{why}"
    return _lib.ScreeArgumentError(msg, 1, "ERROR_INVALID_ARGUMENT", msg, name)


def _shown(v):
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def tensor(op, name, t, optional=False):
    """A torch tensor (or None when optional)."""
    if t is None and optional:
        return None
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"scree.{op}: argument '{name}' must be a tensor"
                        f"{' or None' if optional else ''}, not {type(t).__name__}")
    return t


def integer(op, name, v, field=None, optional=False):
    """An int (a 0-d integer tensor's value, a SymInt as it is) in int64, or
    in the range of `field` ((c_op, field name)) when given: the schema's
    min and max, within the C type's bounds."""
    if v is None and optional:
        return None
    if isinstance(v, torch.SymInt):
        return v  # checked through its traced value (_ops._concrete)
    if isinstance(v, torch.Tensor) and v.dim() == 0 and not v.is_floating_point() and \
            v.dtype != torch.bool:
        v = int(v)
    if isinstance(v, bool):
        raise TypeError(f"scree.{op}: argument '{name}'={v} must be an int, not bool")
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"scree.{op}: argument '{name}'={_shown(v)} must be an int, not "
                        f"{type(v).__name__}") from None
    lo, hi, what = INT64_MIN, INT64_MAX, "int64"
    if field is not None:
        f = _field(field)
        if f["code"] == "i":
            lo, hi, what = _INT32_MIN, _INT32_MAX, "int32"
        if f.get("min") is not None or f.get("max") is not None:
            lo = max(lo, f["min"] if f.get("min") is not None else lo)
            hi = min(hi, f["max"] if f.get("max") is not None else hi)
            what = f"{f['name']} of scree_{field[0]}"
    if not lo <= v <= hi:
        raise _refuse(op, name, f"={v} is out of range: {what} takes {lo} to {hi}")
    return v


def real(op, name, v, field=None, optional=False):
    """A float (an int converted, a SymFloat as it is) that float32 holds,
    finite and >= 0 where `field`'s schema says so."""
    if v is None and optional:
        return None
    if isinstance(v, torch.SymFloat):
        return v
    if isinstance(v, bool) or not (isinstance(v, numbers.Real) or
                                   (isinstance(v, torch.Tensor) and v.dim() == 0)):
        raise TypeError(f"scree.{op}: argument '{name}'={_shown(v)} must be a float, not "
                        f"{type(v).__name__}")
    try:
        v = float(v)
    except OverflowError:  # an int past float's range
        raise _refuse(op, name, f"={v} is outside float32's range") from None
    flags = _field(field)["flags"] if field is not None else ()
    if "finite" in flags and not math.isfinite(v):
        raise _refuse(op, name, f"={v} must be finite")
    if "nonneg" in flags and not v >= 0:
        raise _refuse(op, name, f"={v} must be >= 0")
    if math.isfinite(v) and abs(v) > _FLT_MAX:
        raise _refuse(op, name, f"={v} is outside float32's range")
    return v


def boolean(op, name, v):
    """A bool (or an int 0 or 1)."""
    if isinstance(v, (bool, torch.SymBool)):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    raise TypeError(f"scree.{op}: argument '{name}'={_shown(v)} must be a bool, not "
                    f"{type(v).__name__}")


def shape(op, name, v):
    """A shape: a list, tuple or torch.Size of ints >= 0, as a tuple."""
    if isinstance(v, int) and not isinstance(v, bool):
        raise TypeError(f"scree.{op}: argument '{name}'={v} must be a list or tuple of ints "
                        f"(a shape, such as [{v}]), not int")
    if not isinstance(v, (list, tuple)):
        raise TypeError(f"scree.{op}: argument '{name}'={_shown(v)} must be a list or tuple of "
                        f"ints, not {type(v).__name__}")
    out = []
    for i, s in enumerate(v):
        if isinstance(s, bool) or not isinstance(s, (int, torch.SymInt)):
            raise TypeError(f"scree.{op}: argument '{name}'={_shown(v)} must hold ints, not "
                            f"{type(s).__name__} (at {i})")
        if isinstance(s, int) and s < 0:
            raise ValueError(f"scree.{op}: argument '{name}'={list(v)} has a negative size")
        out.append(s)
    return tuple(out)


def dtype(op, name, v, optional=True):
    """A torch.dtype (or None when optional)."""
    if v is None and optional:
        return None
    if not isinstance(v, torch.dtype):
        raise TypeError(f"scree.{op}: argument '{name}'={_shown(v)} must be a torch.dtype, not "
                        f"{type(v).__name__}")
    return v
