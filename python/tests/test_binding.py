"""The ctypes binding against the C library and its header: struct layouts
checked with the C compiler, library loading, NVRTC discovery, statuses and
errors, options and contexts. No GPU needed."""
import ctypes
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import scree
from scree import _context, _lib, _ops

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_INCLUDE = os.path.join(HERE, "..", "..", "include")


def _header_dir():
    """The scree.h installed in the package, else the checkout's."""
    installed = os.path.join(os.path.dirname(scree.__file__), "include")
    if os.path.exists(os.path.join(installed, "scree.h")):
        return installed
    return os.path.abspath(REPO_INCLUDE)


def _c_layouts(tmp_path):
    """offsetof of every field and sizeof of every struct the binding
    describes, as the C compiler lays them out: {struct: ({field: offset},
    size)}."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("no C compiler to check the struct layouts with")
    structs = {name: [f for f, _ in fields] for name, fields in _lib.ARG_STRUCTS.items()}
    for name, cls in _lib.CTYPES_STRUCTS.items():
        structs[name] = [f for f, _ in cls._fields_]
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "scree.h"',
             "int main(void) {"]
    for name, fields in structs.items():
        lines.append(f'  printf("{name} sizeof %zu\\n", sizeof({name}));')
        for f in fields:
            lines.append(f'  printf("{name} {f} %zu\\n", offsetof({name}, {f}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", _header_dir(), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.splitlines():
        s, f, v = line.split()
        offs, size = got.setdefault(s, ({}, None))
        if f == "sizeof":
            got[s] = (offs, int(v))
        else:
            offs[f] = int(v)
    return got


def test_struct_layouts_match_the_header(tmp_path):
    """The generated structs (their offsets, and the layout the packers
    compute from their codes) against the C compiler's."""
    c = _c_layouts(tmp_path)
    for name, fields in _lib.ARG_STRUCTS.items():
        offsets, size = _lib.struct_layout(fields)
        assert offsets == c[name][0], name
        assert size == c[name][1] == _lib.PACKERS[name].size, name
    for op in _lib.OPS.values():
        assert {f["name"]: f["offset"] for f in op["fields"]} == c[op["struct"]][0], op
        assert op["size"] == c[op["struct"]][1], op
    for name, cls in _lib.CTYPES_STRUCTS.items():
        offsets = {f: getattr(cls, f).offset for f, _ in cls._fields_}
        assert offsets == c[name][0], name
        assert ctypes.sizeof(cls) == c[name][1], name


def _header_structs():
    """{struct: [member, ...]} of every args struct of scree.h."""
    with open(os.path.join(_header_dir(), "scree.h")) as f:
        header = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    out = {}
    for body, name in re.findall(r"typedef struct \w+ \{([^}]*)\}\s*(scree_\w+_args);", header):
        members = []
        for decl in body.split(";"):
            words = decl.replace(",", " , ").split()
            if not words:
                continue
            # "int64_t a, b, c": the word after the type and each comma
            names = [w for i, w in enumerate(words[1:]) if i == 0 or words[i] == ","]
            # A member that is an args struct declared above ("scree_attention_args
            # fwd"): its members, as "fwd.q", ..., as the schema names them.
            if words[0] in out:
                names = [f"{n}.{m}" for n in names for m in out[words[0]]]
            members += names
        out[name] = members
    return out, header


def test_every_args_struct_of_the_header_is_bound():
    """Each args struct of scree.h is described, member for member in order,
    by the generated structs (the op's schema), with its entry."""
    structs, header = _header_structs()
    assert set(structs) == set(_lib.ARG_STRUCTS)
    for name, members in structs.items():
        assert [f for f, _ in _lib.ARG_STRUCTS[name]] == members, name
    for entry in _lib.ENTRIES.values():
        assert re.search(rf"\b{entry}\(", header), entry


def test_structs_come_beside_the_library_named(tmp_path):
    """With SCREE_LIBRARY set, the _structs.py built beside it is used (a
    source-tree run); else the package's."""
    d = tmp_path / "python" / "scree"
    d.mkdir(parents=True)
    ops = dict(_lib.OPS, toy={"struct": "scree_toy_args", "entry": "scree_toy", "size": 8,
                              "fields": [{"name": "x", "code": "Q", "offset": 0, "role": "in",
                                          "flags": []}]})
    (d / "_structs.py").write_text(f"OPS = {ops!r}\n")
    r = _run("from scree import _lib; print(list(_lib.OPS)[-1])",
             SCREE_LIBRARY=str(tmp_path / "libscree.so"))
    assert r.returncode == 0 and r.stdout.strip() == "toy", r.stderr
    if os.path.exists(os.path.join(os.path.dirname(_lib.__file__), "_structs.py")):  # a wheel
        r = _run("from scree import _lib; print(len(_lib.OPS))",
                 SCREE_LIBRARY=str(tmp_path / "python" / "libscree.so"))
        assert r.returncode == 0 and int(r.stdout) == len(_lib.OPS), r.stderr


def test_version_matches_the_library():
    assert scree.library_version() == scree.__version__


def test_runtime_info_without_a_gpu():
    info = scree.runtime_info()
    assert set(info) >= {"driver_loaded", "nvrtc_loaded", "device_count", "driver_error"}
    if not info["driver_loaded"]:
        assert info["device_count"] == 0 and info["driver_error"]


def test_no_device_is_a_scree_error():
    if scree.runtime_info()["device_count"]:
        pytest.skip("a GPU is present")
    with pytest.raises(scree.ScreeError) as e:
        _context.context(0)
    assert e.value.status_name in ("ERROR_NO_DEVICE", "ERROR_NO_DRIVER")
    assert "cuda:0" in str(e.value)


def test_failed_call_raises_with_status_and_message():
    L = _lib.lib()
    packed = _lib.PACKERS["scree_rmsnorm_args"].pack(0, 0, 0, 4, 8, 0, 0, 1, 1, 1, 1e-6, 0)
    with pytest.raises(scree.ScreeArgumentError) as e:
        _ops._call("rms_norm", L.scree_rmsnorm, packed, None, None, _ops._RMS_NAMES)
    assert e.value.status == 1 and e.value.status_name == "ERROR_INVALID_ARGUMENT"
    assert "ctx is NULL" in str(e.value)
    assert isinstance(e.value, ValueError)


class _FakeLib:
    """Answers scree_last_error with a chosen message."""

    def __init__(self, msg):
        self.msg = msg

    def scree_last_error(self, ctx):
        return self.msg.encode()

    def scree_status_name(self, st):
        return {2: b"ERROR_UNSUPPORTED", 10: b"ERROR_CUDA"}[st]

    def scree_status_str(self, st):
        return b"..."


@pytest.mark.parametrize("op,msg,arg", [
    ("varlen_attn", "head_dim=48 is not supported (32, 64, 96, 128 or 256)", "query"),
    ("rms_norm", "cols=70000 exceeds the supported maximum 65536", "normalized_shape"),
    ("varlen_attn", "window_left=-3, window_right=-1: -1 (unbounded) or >= 0", "window_size"),
    ("rope", "rotary_dim=3 must be even", "rotary_dim"),
    ("paged_attention", "page_size=12 is not supported (1, 8, 16, 32, 64, 128 or 256)",
     "k_cache"),
])
def test_error_names_the_python_argument(monkeypatch, op, msg, arg):
    monkeypatch.setattr(_lib, "lib", lambda: _FakeLib(msg))
    names = _ops._varlen_names_ok()[op]
    with pytest.raises(scree.ScreeArgumentError) as e:
        _ops._raise(op, 2, None, names)
    assert e.value.argument == arg
    assert f"scree.{op} (argument '{arg}'): {msg} [ERROR_UNSUPPORTED]" == str(e.value)


def test_runtime_failure_is_not_a_value_error(monkeypatch):
    monkeypatch.setattr(_lib, "lib", lambda: _FakeLib("cuLaunchKernel: CUDA_ERROR_X"))
    with pytest.raises(scree.ScreeError) as e:
        _ops._raise("swiglu", 10, None, _ops._SWIGLU_NAMES)
    assert not isinstance(e.value, ValueError)


def test_argument_maps_name_real_fields():
    """Every C name an op's map translates is a field of its struct."""
    structs = {"rms_norm": "scree_rmsnorm_args", "layer_norm": "scree_layernorm_args",
               "add_rms_norm": "scree_add_rmsnorm_args", "softmax": "scree_softmax_args",
               "ragged_softmax": "scree_ragged_softmax_args", "rope": "scree_rope_args",
               "swiglu": "scree_swiglu_args", "cross_entropy": "scree_cross_entropy_args",
               "varlen_attn": "scree_attention_args",
               "paged_attention": "scree_paged_attention_args"}
    for op, names in _ops._varlen_names_ok().items():
        fields = {f for f, _ in _lib.ARG_STRUCTS[structs[op]]}
        extra = set(names) - fields - {"cu_seqlens"}
        assert not extra, (op, extra)


def _run(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True)


def test_scree_library_env_is_honoured(tmp_path):
    missing = str(tmp_path / "nowhere" / "libscree.so")
    r = _run("import scree; scree.library_version()", SCREE_LIBRARY=missing)
    assert r.returncode != 0
    assert missing in r.stderr and "SCREE_LIBRARY" in r.stderr


def test_import_without_loading_the_library(tmp_path):
    """import scree (and its custom ops) needs no libscree until a call."""
    r = _run("import scree, torch; print(torch.ops.scree.varlen_attn)",
             SCREE_LIBRARY=str(tmp_path / "none.so"))
    assert r.returncode == 0, r.stderr


def test_nvrtc_from_the_wheel_when_the_system_has_none(tmp_path, monkeypatch):
    lib_dir = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert _lib.wheel_nvrtc() == str(lib_dir / "libnvrtc.so.13")
    monkeypatch.delenv("SCREE_NVRTC_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "_system_nvrtc", lambda: False)
    monkeypatch.setattr(_lib, "_lib", None)
    _lib.lib()
    assert os.environ["SCREE_NVRTC_LIBRARY"] == str(lib_dir / "libnvrtc.so.13")


def test_a_system_nvrtc_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("SCREE_NVRTC_LIBRARY", raising=False)
    monkeypatch.setattr(_lib, "_system_nvrtc", lambda: True)
    monkeypatch.setattr(_lib, "_lib", None)
    _lib.lib()
    assert "SCREE_NVRTC_LIBRARY" not in os.environ


def test_options():
    with pytest.raises(TypeError, match="unknown option 'cache'"):
        scree.options(cache="x")
    with pytest.raises(ValueError, match="miss_policy"):
        scree.options(miss_policy="sometimes")
    with pytest.raises(ValueError, match="log_level"):
        scree.options(log_level="loud")
    prev = scree.options(miss_policy="error", cache_path="/tmp/x.db", validate=True,
                         disable_cache=False, pin_path="/tmp/pinned.db",
                         batch_invariant=True)
    try:
        o = _context._make_options(1)
        assert (o.device, o.miss_policy, o.cache_path, o.validate, o.disable_cache) == \
            (1, 2, b"/tmp/x.db", 1, 0)
        # batch_invariant is the last field of scree_options, as in scree.h
        assert _lib.Options._fields_[-1][0] == "batch_invariant"
        assert o.pin_path == b"/tmp/pinned.db"
        assert o.batch_invariant == 1
        assert scree.current_options()["miss_policy"] == "error"
    finally:
        scree.options(**{k: None for k in scree.current_options()})
        scree.options(**prev)
    o = _context._make_options(0)
    assert (o.miss_policy, o.cache_path, o.validate, o.pin_path, o.batch_invariant) == \
        (0, None, 0, None, 0)


def test_options_retire_existing_contexts(monkeypatch):
    monkeypatch.setitem(_context._contexts, 7, 12345)
    prev = scree.options(log_level="error")
    try:
        assert 7 not in _context._contexts and 12345 in _context._retired
    finally:
        scree.options(log_level=None)
        scree.options(**prev)


def test_scree_tune_is_installed_beside_python():
    """The wheel puts scree-tune among its programs (not in a source run)."""
    if "site-packages" not in scree.__file__:
        pytest.skip("scree runs from the source tree")
    exe = os.path.join(os.path.dirname(sys.executable), "scree-tune")
    assert os.path.exists(exe)
    r = subprocess.run([exe, "info"], capture_output=True, text=True)
    assert "NVRTC" in r.stdout + r.stderr
