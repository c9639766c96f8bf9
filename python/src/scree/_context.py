"""One scree context per CUDA device, created on first use and shared by
every thread (scree's op entries are thread-safe on one context).

The options start from scree's defaults, which scree_create completes from
the environment (SCREE_MISS_POLICY, SCREE_CACHE_DIR, SCREE_CACHE_PATH,
SCREE_NO_CACHE, SCREE_LOG_LEVEL, SCREE_VALIDATE, SCREE_NVRTC_OPTIONAL,
SCREE_BATCH_INVARIANT);
scree.options(...) changes them for the contexts made after it.
"""
import ctypes
import threading

from . import _lib

_lock = threading.Lock()
_contexts = {}  # device ordinal -> context pointer (int)
_retired = []   # contexts replaced by options(): kept, never destroyed (see options)
_settings = {}  # what options() was given, as scree_options fields

_OPTION_NAMES = ("miss_policy", "cache_path", "cache_search_path", "disable_cache", "log_level",
                 "validate", "nvrtc_optional", "pin_path", "batch_invariant")


def options(**changes):
    """Change the options of the contexts scree makes from now on, and return
    the previous settings (a dict, to pass back to restore them).

    miss_policy: "default", "tune" or "error" (what a call does when no tuned
        config is cached for its shape).
    cache_path: the user's read-write cache file (default
        $SCREE_CACHE_DIR/tune.db, else ~/.cache/scree/tune.db).
    cache_search_path: read-only caches consulted after it, colon separated
        (default $SCREE_CACHE_PATH).
    disable_cache: True for no SQLite cache at all.
    log_level: "off", "error", "warn", "info" or "debug".
    validate: True to check cu_seqlens on the host before each launch.
    nvrtc_optional: True to run from cached cubins only, without NVRTC.
    pin_path: a pinned cache file, the only source of tuned configs, read
        only; a call whose bucket it lacks raises (default $SCREE_PIN;
        docs/cache.md, "A pinned cache").
    batch_invariant: True for batch-invariant mode: each sequence's output of
        every forward op bitwise the same whatever else is in the batch
        (docs/cache.md, "Batch-invariant mode").
    None for a value goes back to the default.

    As in the C API, the environment variables, when set, take precedence
    over these (SCREE_MISS_POLICY, SCREE_LOG_LEVEL) or turn the flags on
    (SCREE_NO_CACHE, SCREE_VALIDATE, SCREE_NVRTC_OPTIONAL,
    SCREE_BATCH_INVARIANT), so an operator
    can still change a deployed program. Contexts already made are retired:
    calls from now on get new ones (the old ones stay alive until the
    process exits, since another thread may still be using one).
    """
    for k, v in changes.items():
        if k not in _OPTION_NAMES:
            raise TypeError(f"scree.options: unknown option {k!r} "
                            f"(known: {', '.join(_OPTION_NAMES)})")
        if k == "miss_policy" and v is not None and v not in _lib.MISS_POLICIES:
            raise ValueError(f"scree.options: miss_policy={v!r}: one of default, tune, error")
        if k == "log_level" and v is not None and v not in _lib.LOG_LEVELS:
            raise ValueError(f"scree.options: log_level={v!r}: one of {', '.join(_lib.LOG_LEVELS)}")
    with _lock:
        previous = dict(_settings)
        for k, v in changes.items():
            if v is None:
                _settings.pop(k, None)
            else:
                _settings[k] = v
        _retired.extend(_contexts.values())
        _contexts.clear()
    return previous


def current_options():
    """The settings given to options() (not including the environment's)."""
    with _lock:
        return dict(_settings)


def _make_options(device):
    o = _lib.Options()
    _lib.lib().scree_options_init(ctypes.byref(o))
    o.device = device
    s = _settings
    if "miss_policy" in s:
        o.miss_policy = _lib.MISS_POLICIES[s["miss_policy"]]
    if "log_level" in s:
        o.log_level = _lib.LOG_LEVELS[s["log_level"]]
    # The strings are copied by scree_create; these bytes outlive the call.
    if "cache_path" in s:
        o.cache_path = str(s["cache_path"]).encode()
    if "cache_search_path" in s:
        o.cache_search_path = str(s["cache_search_path"]).encode()
    if "pin_path" in s:
        o.pin_path = str(s["pin_path"]).encode()
    for flag in ("disable_cache", "validate", "nvrtc_optional", "batch_invariant"):
        if flag in s:
            setattr(o, flag, 1 if s[flag] else 0)
    return o


def context(device):
    """The context of CUDA device `device` (an int), created on first use."""
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    with _lock:
        ctx = _contexts.get(device)
        if ctx is None:
            L = _lib.lib()
            opts = _make_options(device)
            out = ctypes.c_void_p()
            why = ctypes.create_string_buffer(1024)
            st = L.scree_create(ctypes.byref(opts), ctypes.byref(out), why, len(why))
            if st:
                name = _lib.status_name(st)
                raise _lib.ScreeError(
                    f"scree: cannot create a context on cuda:{device}: {name} "
                    f"({_lib.status_str(st)}): {why.value.decode(errors='replace')}",
                    st, name, why.value.decode(errors="replace"))
            ctx = out.value
            _contexts[device] = ctx
    return ctx


def counters(device=0):
    """The counters of the context on `device` (a dict; see scree_counters)."""
    c = _lib.Counters()
    _lib.lib().scree_get_counters(context(device), ctypes.byref(c))
    return {name: getattr(c, name) for name, _ in c._fields_}
