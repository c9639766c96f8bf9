"""The C library through ctypes: loading it, its structs and its status codes.

Nothing here imports torch. Each op's argument struct is described by the
op's schema in C (src/runtime/ops/<op>.c), which the build writes into the
package as _structs.py (tools/gen_structs.c): its fields in the order of
include/scree.h, with struct-module codes, roles and links. From it come
the packer the hot path uses (one precompiled struct.Struct, whose bytes
are passed as the `const args *`) and the layout that the tests compare
with the C compiler's offsetof and sizeof.

Why ctypes and a packed bytes object rather than a ctypes.Structure or a
CPython extension: see docs/python.md ("Binding").
"""
import ctypes
import ctypes.util
import glob
import importlib.util
import os
import struct
import sys
import threading

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def _load_structs():
    """The generated _structs module: the one built beside $SCREE_LIBRARY
    (<build>/python/scree/_structs.py, so that a library and the description
    of its structs go together), else the package's own (the wheel's)."""
    env = os.environ.get("SCREE_LIBRARY")
    paths = [os.path.join(os.path.dirname(os.path.abspath(env)), "python", "scree",
                          "_structs.py")] if env else []
    paths.append(os.path.join(_PKG_DIR, "_structs.py"))
    for path in paths:
        if os.path.exists(path):
            spec = importlib.util.spec_from_file_location("scree._structs", path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    raise ImportError(
        f"scree: no _structs.py in {' or '.join(paths)}; it is written by scree's build "
        "(install the package with `pip install ./python`, or build with scripts/build.sh "
        "and set SCREE_LIBRARY to <build>/libscree.so)")


# -- the argument structs, field for field (include/scree.h) -----------------
# OPS[op]: "struct", "entry", "size" and "fields", each field a dict with
# "name", "code" (Q: scree_devptr, q: int64_t, i: int or an enum, f: float),
# "offset", "role" and its links (_structs.py's header says more). Enums are
# int-sized on every ABI scree builds for (x86-64, aarch64 Linux). From it:
# ARG_STRUCTS {struct: [(field, code), ...]}, ENTRIES {struct: entry} and
# PACKERS {struct: struct.Struct}. Read on first use (module __getattr__),
# with the library: `import scree` needs neither.

_STRUCT_NAMES = ("OPS", "ARG_STRUCTS", "ENTRIES", "PACKERS")


def _structs():
    """This module's globals, with the struct names above set."""
    g = globals()
    if "PACKERS" not in g:
        ops = _load_structs().OPS
        arg_structs = {o["struct"]: [(f["name"], f["code"]) for f in o["fields"]]
                       for o in ops.values()}
        g.update(OPS=ops, ARG_STRUCTS=arg_structs,
                 ENTRIES={o["struct"]: o["entry"] for o in ops.values()},
                 PACKERS={n: struct.Struct(struct_format(fs)) for n, fs in arg_structs.items()})
    return g


def __getattr__(name):
    if name not in _STRUCT_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _structs()[name]


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
                ("validate", ctypes.c_int),
                ("pin_path", ctypes.c_char_p),
                ("batch_invariant", ctypes.c_int)]


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
    for entry in _structs()["ENTRIES"].values():
        f = getattr(L, entry)
        f.argtypes = (vp, cp, vp)  # ctx, the packed args (bytes), stream
        f.restype = i
    L.scree_check_args.argtypes = (cp, cp, cp, ctypes.c_size_t)  # op, args, why, size
    L.scree_check_args.restype = i
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


def check_args(op, packed):
    """(status, message) of scree_check_args: the checks of scree_<op> on
    the packed args struct, without a device; its pointers only tested
    against NULL, each distinct one standing for a buffer of its own."""
    why = ctypes.create_string_buffer(512)
    st = lib().scree_check_args(op.encode(), packed, why, len(why))
    return st, why.value.decode(errors="replace")


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
