"""The C library through ctypes: loading it, its structs and its status codes.

Nothing here imports torch. Each op's argument struct is described once, as
a list of (field, struct-module code) pairs in the order of include/scree.h;
from it come the packer the hot path uses (one precompiled struct.Struct,
whose bytes are passed as the `const args *`) and the layout that the tests
compare with the C compiler's offsetof and sizeof.

Why ctypes and a packed bytes object rather than a ctypes.Structure or a
CPython extension: see docs/python.md ("Binding").
"""
import ctypes
import ctypes.util
import glob
import os
import struct
import sys
import threading

# -- the argument structs, field for field (include/scree.h) -----------------
# Q: scree_devptr (uint64_t), q: int64_t, i: int or an enum, f: float.
# Enums are int-sized on every ABI scree builds for (x86-64, aarch64 Linux).

ARG_STRUCTS = {
    "scree_rmsnorm_args": [
        ("x", "Q"), ("w", "Q"), ("y", "Q"),
        ("rows", "q"), ("cols", "q"),
        ("x_stride", "q"), ("y_stride", "q"),
        ("x_dtype", "i"), ("w_dtype", "i"), ("y_dtype", "i"),
        ("eps", "f")],
    "scree_layernorm_args": [
        ("x", "Q"), ("w", "Q"), ("b", "Q"), ("y", "Q"),
        ("mean", "Q"), ("rstd", "Q"),
        ("rows", "q"), ("cols", "q"),
        ("x_stride", "q"), ("y_stride", "q"),
        ("x_dtype", "i"), ("w_dtype", "i"), ("y_dtype", "i"),
        ("eps", "f")],
    "scree_add_rmsnorm_args": [
        ("x", "Q"), ("residual", "Q"), ("w", "Q"), ("h", "Q"), ("y", "Q"),
        ("rows", "q"), ("cols", "q"),
        ("x_stride", "q"), ("residual_stride", "q"), ("h_stride", "q"), ("y_stride", "q"),
        ("x_dtype", "i"), ("w_dtype", "i"), ("y_dtype", "i"),
        ("eps", "f")],
    "scree_softmax_args": [
        ("x", "Q"), ("y", "Q"),
        ("rows", "q"), ("cols", "q"),
        ("x_stride", "q"), ("y_stride", "q"),
        ("x_dtype", "i"), ("y_dtype", "i"),
        ("scale", "f")],
    "scree_ragged_softmax_args": [
        ("x", "Q"), ("y", "Q"), ("cu_seqlens", "Q"),
        ("batch", "q"), ("total", "q"), ("max_seqlen", "q"), ("cols", "q"),
        ("x_stride", "q"), ("y_stride", "q"),
        ("x_dtype", "i"), ("y_dtype", "i"),
        ("scale", "f")],
    "scree_rope_args": [
        ("q", "Q"), ("k", "Q"),
        ("positions", "Q"), ("cu_seqlens", "Q"), ("cos_sin", "Q"),
        ("total", "q"), ("batch", "q"), ("max_position", "q"),
        ("heads_q", "q"), ("heads_kv", "q"), ("head_dim", "q"), ("rotary_dim", "q"),
        ("q_token_stride", "q"), ("q_head_stride", "q"),
        ("k_token_stride", "q"), ("k_head_stride", "q"),
        ("dtype", "i"), ("layout", "i"), ("positions_int64", "i"),
        ("theta", "f")],
    "scree_swiglu_args": [
        ("gate", "Q"), ("up", "Q"), ("y", "Q"),
        ("rows", "q"), ("cols", "q"),
        ("gate_stride", "q"), ("up_stride", "q"), ("y_stride", "q"),
        ("dtype", "i"), ("y_dtype", "i")],
    "scree_cross_entropy_args": [
        ("logits", "Q"), ("targets", "Q"), ("loss", "Q"), ("lse", "Q"),
        ("rows", "q"), ("vocab", "q"), ("logits_stride", "q"),
        ("ignore_index", "q"),
        ("dtype", "i")],
    "scree_attention_args": [
        ("q", "Q"), ("k", "Q"), ("v", "Q"), ("out", "Q"),
        ("lse", "Q"),
        ("cu_seqlens_q", "Q"), ("cu_seqlens_k", "Q"),
        ("batch", "q"), ("total_q", "q"), ("total_k", "q"),
        ("max_seqlen_q", "q"), ("max_seqlen_k", "q"),
        ("heads_q", "q"), ("heads_kv", "q"), ("head_dim", "q"),
        ("q_token_stride", "q"), ("k_token_stride", "q"),
        ("v_token_stride", "q"), ("out_token_stride", "q"),
        ("q_head_stride", "q"), ("k_head_stride", "q"),
        ("v_head_stride", "q"), ("out_head_stride", "q"),
        ("dtype", "i"), ("causal", "i"), ("scale", "f"),
        ("window_left", "q"), ("window_right", "q")],
}

# The public entry of each struct.
ENTRIES = {
    "scree_rmsnorm_args": "scree_rmsnorm",
    "scree_layernorm_args": "scree_layernorm",
    "scree_add_rmsnorm_args": "scree_add_rmsnorm",
    "scree_softmax_args": "scree_softmax",
    "scree_ragged_softmax_args": "scree_ragged_softmax",
    "scree_rope_args": "scree_rope",
    "scree_swiglu_args": "scree_swiglu",
    "scree_cross_entropy_args": "scree_cross_entropy",
    "scree_attention_args": "scree_attention",
}


def struct_format(fields):
    """The native-alignment format of a field list, padded at the end to the
    struct's alignment (the widest member: 8 bytes when there is an int64 or
    pointer), so that calcsize equals C's sizeof."""
    codes = "".join(code for _, code in fields)
    tail = "0q" if any(c in "Qq" for c in codes) else "0i"
    return "@" + codes + tail


def struct_layout(fields):
    """{field: offset} and the size, as native alignment lays them out."""
    offsets, fmt = {}, "@"
    for name, code in fields:
        # The offset of a field is the size of everything before it, with
        # this field's alignment applied ("0<code>" pads without adding).
        offsets[name] = struct.calcsize(fmt + "0" + code)
        fmt += code
    return offsets, struct.calcsize(struct_format(fields))


PACKERS = {name: struct.Struct(struct_format(fields)) for name, fields in ARG_STRUCTS.items()}

# -- the other structs, as ctypes Structures (used off the hot path) --------


class Options(ctypes.Structure):
    _fields_ = [("device", ctypes.c_int),
                ("cache_path", ctypes.c_char_p),
                ("cache_search_path", ctypes.c_char_p),
                ("disable_cache", ctypes.c_int),
                ("miss_policy", ctypes.c_int),
                ("log_level", ctypes.c_int),
                ("log_fn", ctypes.c_void_p),
                ("log_user", ctypes.c_void_p),
                ("nvrtc_optional", ctypes.c_int),
                ("validate", ctypes.c_int)]


class DeviceInfo(ctypes.Structure):
    _fields_ = [("ordinal", ctypes.c_int),
                ("name", ctypes.c_char * 256),
                ("cc_major", ctypes.c_int), ("cc_minor", ctypes.c_int),
                ("arch", ctypes.c_char * 16),
                ("sm_count", ctypes.c_int),
                ("total_memory", ctypes.c_size_t),
                ("l2_bytes", ctypes.c_int),
                ("max_smem_per_block_optin", ctypes.c_int)]


class RuntimeInfo(ctypes.Structure):
    _fields_ = [("driver_loaded", ctypes.c_int),
                ("driver_version", ctypes.c_int),
                ("nvrtc_loaded", ctypes.c_int),
                ("nvrtc_major", ctypes.c_int), ("nvrtc_minor", ctypes.c_int),
                ("device_count", ctypes.c_int),
                ("driver_error", ctypes.c_char * 256),
                ("nvrtc_error", ctypes.c_char * 256),
                ("nvrtc_path", ctypes.c_char * 256)]


class Counters(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "calls", "compiles", "module_loads", "memory_hits", "user_cache_hits",
        "shipped_cache_hits", "safelist_defaults", "misses_recorded", "tunes")]


CTYPES_STRUCTS = {"scree_options": Options, "scree_device_info": DeviceInfo,
                  "scree_runtime_info": RuntimeInfo, "scree_counters": Counters}

DTYPE_FP32, DTYPE_FP16, DTYPE_BF16 = 0, 1, 2
MISS_POLICIES = {"default": 0, "tune": 1, "error": 2}
LOG_LEVELS = {"off": 0, "error": 1, "warn": 2, "info": 3, "debug": 4}

# Statuses that say the caller's arguments are wrong (a ValueError as well).
ARGUMENT_STATUSES = {1, 2, 3}  # INVALID_ARGUMENT, UNSUPPORTED, MISALIGNED


class ScreeError(RuntimeError):
    """A scree call failed. `status` is the C status code, `status_name` its
    name ("ERROR_MISALIGNED"), `detail` scree's message (scree_last_error),
    `argument` the Python argument it concerns, when known."""

    def __init__(self, message, status=None, status_name=None, detail="", argument=None):
        super().__init__(message)
        self.status = status
        self.status_name = status_name
        self.detail = detail
        self.argument = argument


class ScreeArgumentError(ScreeError, ValueError):
    """A scree call refused its arguments (invalid, unsupported or misaligned)."""


# -- finding and loading the libraries --------------------------------------

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_NVRTC_NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")


def _system_nvrtc():
    """True when scree's own search (the loader path, then $CUDA_HOME/lib64
    and /usr/local/cuda/lib64) would find an NVRTC."""
    for name in _NVRTC_NAMES:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            pass
    dirs = [os.path.join(os.environ["CUDA_HOME"], "lib64")] if os.environ.get("CUDA_HOME") else []
    dirs.append("/usr/local/cuda/lib64")
    return any(os.path.exists(os.path.join(d, n)) for d in dirs for n in _NVRTC_NAMES)


def wheel_nvrtc():
    """The NVRTC of an installed nvidia-cuda-nvrtc wheel (the one PyTorch
    depends on), or None: nvidia/cu13/lib for CUDA 13, nvidia/cuda_nvrtc/lib
    (or nvidia/cu12/lib) for CUDA 12, in each directory of sys.path."""
    patterns = ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.13",
                "nvidia/cu12/lib/libnvrtc.so.12", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")
    for pattern in patterns:
        for d in sys.path:
            if d and os.path.isdir(os.path.join(d, "nvidia")):
                hits = glob.glob(os.path.join(d, pattern))
                if hits:
                    return hits[0]
    return None


def library_path():
    """$SCREE_LIBRARY, else the libscree.so installed in this package."""
    env = os.environ.get("SCREE_LIBRARY")
    if env:
        return env
    return os.path.join(_PKG_DIR, "libscree.so")


_lib = None
_lib_lock = threading.Lock()


def lib():
    """The loaded libscree (loaded, with its prototypes, on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            _lib = _load()
    return _lib


def _load():
    # scree opens NVRTC once per process, on first need: point it at the
    # wheel's copy before that when the system has none.
    if not os.environ.get("SCREE_NVRTC_LIBRARY") and not _system_nvrtc():
        found = wheel_nvrtc()
        if found:
            os.environ["SCREE_NVRTC_LIBRARY"] = found
    path = library_path()
    try:
        L = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"scree: cannot load libscree from {path} ({e}); install the package with "
            "`pip install ./python`, or set SCREE_LIBRARY to a built libscree.so") from None
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for entry in ENTRIES.values():
        f = getattr(L, entry)
        f.argtypes = (vp, cp, vp)  # ctx, the packed args (bytes), stream
        f.restype = i
    L.scree_status_str.argtypes = (i,)
    L.scree_status_str.restype = cp
    L.scree_status_name.argtypes = (i,)
    L.scree_status_name.restype = cp
    L.scree_version.argtypes = ()
    L.scree_version.restype = cp
    L.scree_last_error.argtypes = (vp,)
    L.scree_last_error.restype = cp
    L.scree_options_init.argtypes = (ctypes.POINTER(Options),)
    L.scree_options_init.restype = None
    L.scree_create.argtypes = (ctypes.POINTER(Options), ctypes.POINTER(vp), ctypes.c_char_p,
                               ctypes.c_size_t)
    L.scree_create.restype = i
    L.scree_destroy.argtypes = (vp,)
    L.scree_destroy.restype = None
    L.scree_get_runtime_info.argtypes = (ctypes.POINTER(RuntimeInfo),)
    L.scree_get_runtime_info.restype = i
    L.scree_get_device_info.argtypes = (i, ctypes.POINTER(DeviceInfo))
    L.scree_get_device_info.restype = i
    L.scree_context_device.argtypes = (vp, ctypes.POINTER(DeviceInfo))
    L.scree_context_device.restype = i
    L.scree_get_counters.argtypes = (vp, ctypes.POINTER(Counters))
    L.scree_get_counters.restype = i
    return L


def status_name(status):
    return lib().scree_status_name(status).decode()


def status_str(status):
    return lib().scree_status_str(status).decode()


def version():
    """The C library's version string."""
    return lib().scree_version().decode()


def _struct_dict(s):
    out = {}
    for name, _ in s._fields_:
        v = getattr(s, name)
        out[name] = v.decode(errors="replace") if isinstance(v, bytes) else v
    return out


def runtime_info():
    """What this process can see: driver, NVRTC and device count (a dict)."""
    info = RuntimeInfo()
    lib().scree_get_runtime_info(ctypes.byref(info))
    return _struct_dict(info)


def device_info(ordinal=0):
    """Describes device `ordinal` (a dict); ScreeError without one."""
    info = DeviceInfo()
    st = lib().scree_get_device_info(int(ordinal), ctypes.byref(info))
    if st:
        raise ScreeError(f"scree: device {ordinal}: {status_name(st)} ({status_str(st)})",
                         st, status_name(st))
    return _struct_dict(info)
