#!/usr/bin/env python3
"""Developer harness for kernels/attention.cu (varlen FlashAttention-2-style forward).

Modes (combine freely; --check and --bench need a GPU, torch and cupy):

  python3 bench/attention_dev.py --local [--arch sm_90,sm_80] [--dims 64,128] [--sass]
      No GPU needed: compile every valid config with NVRTC (ctypes, exactly the
      runtime's options: --gpu-architecture=sm_XX -std=c++17 -D...), report NVRTC
      seconds, ptxas registers / spills / stack, and SASS instruction counts
      (HMMA, LDSM, LDGSTS, LDL/STL) from cuobjdump (--sass; this machine's toolkit has
      no cuobjdump/nvdisasm: pip-install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
      into a scratch dir and put their bin/ on PATH or set CUOBJDUMP). --defs passes dev
      macros (SCREE_MINB=3, SCREE_ATTN_MMA_ROWSUM=0, ...); config names may carry them
      too: m128n64w4s2q0p1+MMA_ROWSUM=0.
  python3 bench/attention_dev.py --check [--quick] [--dims ...]
      Correctness matrix against a float64 PyTorch reference (per sequence):
      mixed lengths incl. 0, chunked-prefill q/k lengths, causal and not,
      sliding window, GQA 32:8, MQA 8:1, packed qkv [T, 3, H, d] strides, LSE,
      every SCREE_SCHED, and every valid tile config (--configs-all).
  python3 bench/attention_dev.py --sanitize --dims 64   (under compute-sanitizer, with
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 so reads past a sequence are out of bounds)
  python3 bench/attention_dev.py --bench [--only headline-causal,...] [--sweep final|full]
      Times configs against FlashAttention-2 (torch.ops.aten._flash_attention_forward)
      on bench/attention_configs.json: CUDA events around 10 back-to-back calls,
      warm-up, median of --reps; ms, TFLOP/s (4*H*d*sum(L^2), halved when causal),
      ratio to FA-2; best first.

The source is assembled exactly as the runtime does: common.cuh + "\\n" + attention.cu
with every line `#include "X.cuh"` replaced by kernels/X.cuh's text.
"""
import argparse
import concurrent.futures as cf
import ctypes
import ctypes.util
import glob
import hashlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KDIR = os.path.join(ROOT, "kernels")
CACHE_DIR = os.path.join(tempfile.gettempdir(), "scree_attn_dev")

# ----------------------------------------------------------------------------
# Source and configs
# ----------------------------------------------------------------------------


def assemble_source():
    with open(os.path.join(KDIR, "common.cuh")) as f:
        common = f.read()
    out = []
    with open(os.path.join(KDIR, "attention.cu")) as f:
        for line in f.read().split("\n"):
            m = re.match(r'\s*#\s*include\s+"([A-Za-z0-9_]+\.cuh)"\s*$', line)
            if m:
                with open(os.path.join(KDIR, m.group(1))) as g:
                    out.append(g.read())
            else:
                out.append(line)
    return common + "\n" + "\n".join(out)


SMEM_LIMIT = {"sm_90": 232448, "sm_80": 166912}


class Cfg:
    """A tile config (BM, BN, WARPS, STAGES, QREG, SCHED)."""

    def __init__(self, bm, bn, w, st, qreg, sched, extra=None):
        self.bm, self.bn, self.w, self.st, self.qreg, self.sched = bm, bn, w, st, qreg, sched
        self.extra = dict(extra or {})   # development -D macros (not part of the contract)

    @property
    def name(self):
        n = f"m{self.bm}n{self.bn}w{self.w}s{self.st}q{self.qreg}p{self.sched}"
        for k, v in self.extra.items():
            n += f"+{k.replace('SCREE_ATTN_', '').replace('SCREE_', '')}={v}"
        return n

    @staticmethod
    def parse(s):
        """m128n64w4s2q0p1, optionally +SCREE_MINB=3+SCREE_ATTN_SKIP_RESCALE=1 (dev macros)."""
        base, *extras = s.split("+")
        m = re.fullmatch(r"m(\d+)n(\d+)w(\d+)s(\d+)q(\d+)p(\d+)", base)
        if not m:
            raise ValueError(f"bad config {s!r} (want e.g. m128n64w4s2q0p1)")
        extra = {}
        for e in extras:
            k, v = e.split("=")
            if not k.startswith("SCREE_"):
                k = ("SCREE_" if k == "MINB" else "SCREE_ATTN_") + k
            extra[k] = v
        return Cfg(*map(int, m.groups()), extra=extra)

    def with_sched(self, p):
        return Cfg(self.bm, self.bn, self.w, self.st, self.qreg, p, self.extra)

    def threads(self):
        return self.w * 32

    def smem(self, d):
        return 2 * d * (self.bm + 2 * self.st * self.bn)

    def valid(self, d, arch="sm_90"):
        """Mirror of the kernel's static_asserts."""
        rpw = self.bm // self.w
        if self.bm not in (64, 128) or self.bn not in (32, 64, 128) or self.w not in (4, 8):
            return False
        if self.st not in (1, 2, 3) or self.qreg not in (0, 1) or self.sched not in (0, 1, 2):
            return False
        if rpw not in (16, 32):
            return False
        mt = rpw // 16
        if mt * (d // 2 + self.bn // 2) + self.qreg * mt * d // 4 > 192:
            return False
        return self.smem(d) <= SMEM_LIMIT[arch]

    def __repr__(self):
        return self.name


def all_tile_cfgs(d, arch="sm_90", sched=0):
    out = []
    for bm, w in ((64, 4), (128, 4), (128, 8)):
        for bn in (32, 64, 128):
            for st in (1, 2, 3):
                for qreg in (0, 1):
                    c = Cfg(bm, bn, w, st, qreg, sched)
                    if c.valid(d, arch):
                        out.append(c)
    return out


EXTRA_DEFS = {}


def macros(dtype_code, d, causal, window, cfg):
    return dict(EXTRA_DEFS) | dict(cfg.extra) | {"SCREE_DTYPE": dtype_code, "SCREE_HEAD_DIM": d, "SCREE_CAUSAL": int(causal),
            "SCREE_WINDOW": int(window), "SCREE_BM": cfg.bm, "SCREE_BN": cfg.bn,
            "SCREE_WARPS": cfg.w, "SCREE_STAGES": cfg.st, "SCREE_QREG": cfg.qreg,
            "SCREE_SCHED": cfg.sched}


# ----------------------------------------------------------------------------
# NVRTC through ctypes (same path as the runtime)
# ----------------------------------------------------------------------------

_nvrtc = None


def nvrtc_lib():
    global _nvrtc
    if _nvrtc is not None:
        return _nvrtc
    cands = []
    if os.environ.get("SCREE_NVRTC_LIBRARY"):
        cands.append(os.environ["SCREE_NVRTC_LIBRARY"])
    cands += ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    for base in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if base:
            cands += sorted(glob.glob(os.path.join(base, "lib64", "libnvrtc.so*")))
    try:  # pip's nvidia-cuda-nvrtc
        import nvidia  # noqa: F401
        for p in nvidia.__path__:
            cands += sorted(glob.glob(os.path.join(p, "**", "libnvrtc.so*"), recursive=True))
    except Exception:
        pass
    for c in cands:
        if "builtins" in c or ".alt." in c:
            continue
        try:
            _nvrtc = ctypes.CDLL(c)
            return _nvrtc
        except OSError:
            continue
    raise RuntimeError("libnvrtc not found")


def nvrtc_compile(src, arch, defs, verbose_ptxas=True):
    """Returns (cubin bytes, log text, seconds). Raises on compile error."""
    lib = nvrtc_lib()
    prog = ctypes.c_void_p()
    t0 = time.perf_counter()
    r = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"attention.cu", 0, None, None)
    if r:
        raise RuntimeError(f"nvrtcCreateProgram {r}")
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    opts += [f"-D{k}={v}".encode() for k, v in defs.items()]
    if verbose_ptxas:
        opts.append(b"--ptxas-options=-v")
    arr = (ctypes.c_char_p * len(opts))(*opts)
    res = lib.nvrtcCompileProgram(prog, len(opts), arr)
    secs = time.perf_counter() - t0
    n = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetProgramLog(prog, buf)
    log = buf.value.decode(errors="replace")
    if res != 0:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        raise RuntimeError(f"NVRTC failed ({res}) for {defs}:\n{log}")
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cub = ctypes.create_string_buffer(n.value)
    lib.nvrtcGetCUBIN(prog, cub)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return cub.raw, log, secs


def ptxas_info(log):
    """{kernel: (regs, spill_st, spill_ld, stack)} from a -v log."""
    info = {}
    cur = None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            cur = m.group(1)
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            info.setdefault(cur, {}).update(stack=int(m.group(1)), spill_st=int(m.group(2)),
                                            spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            info.setdefault(cur, {})["regs"] = int(m.group(1))
    return info


def sass_counts(cubin, kernel="scree_attention_fwd"):
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    try:
        tool = os.environ.get("CUOBJDUMP", "cuobjdump")
        for base in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
            if base and os.path.exists(os.path.join(base, "bin", "cuobjdump")):
                tool = os.path.join(base, "bin", "cuobjdump")
                break
        out = subprocess.run([tool, "-sass", "-fun", kernel, path], capture_output=True,
                             text=True).stdout
    finally:
        os.unlink(path)
    ops = {}
    for line in out.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            op = m.group(1)
            ops[op] = ops.get(op, 0) + 1
    return ops, out


# ----------------------------------------------------------------------------
# --local: compile every config here (no GPU)
# ----------------------------------------------------------------------------


def run_local(args):
    src = assemble_source()
    dims = [int(x) for x in args.dims.split(",")]
    archs = args.arch.split(",")
    jobs = []
    for arch in archs:
        for d in dims:
            cfgs = [Cfg.parse(c) for c in args.configs.split(",")] if args.configs else \
                all_tile_cfgs(d, arch)
            for c in cfgs:
                for causal in (1,) if not args.both_causal else (0, 1):
                    jobs.append((arch, d, causal, c))
    print(f"{len(jobs)} compiles", flush=True)

    def one(job):
        arch, d, causal, c = job
        defs = macros(args.dtype, d, causal, args.window, c)
        defs.update(EXTRA_DEFS)
        try:
            cub, log, secs = nvrtc_compile(src, arch, defs)
        except RuntimeError as e:
            return job, None, str(e)[:2000], 0, None
        info = ptxas_info(log).get("scree_attention_fwd", {})
        ops = sass_counts(cub)[0] if args.sass else None
        return job, info, None, secs, ops

    rows = []
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for job, info, err, secs, ops in ex.map(one, jobs):
            arch, d, causal, c = job
            if err:
                print(f"{arch} d={d} c={causal} {c.name}: COMPILE ERROR\n{err}")
                continue
            line = (f"{arch} d={d:3d} causal={causal} {c.name:18s} regs={info.get('regs')} "
                    f"spill={info.get('spill_st')}/{info.get('spill_ld')} stack={info.get('stack')} "
                    f"smem={c.smem(d)} nvrtc={secs:.2f}s")
            if ops is not None:
                line += (f" HMMA={ops.get('HMMA', 0)} LDSM={ops.get('LDSM', 0)} "
                         f"LDGSTS={ops.get('LDGSTS', 0)} LDL={ops.get('LDL', 0)} STL={ops.get('STL', 0)}"
                         f" MUFU={ops.get('MUFU', 0)} BAR={ops.get('BAR', 0)}")
            print(line, flush=True)
            rows.append((job, info, secs))
    if args.dump_sass:
        arch, d = archs[0], dims[0]
        c = Cfg.parse(args.dump_sass)
        cub, log, _ = nvrtc_compile(src, arch, macros(args.dtype, d, 1, args.window, c))
        path = os.path.join(tempfile.gettempdir(), f"attn_{arch}_d{d}_{c.name}.sass")
        with open(path, "w") as f:
            f.write(sass_counts(cub)[1])
        print("SASS written to", path)
    # the schedule kernel once
    cub, log, secs = nvrtc_compile(src, archs[0], macros(1, 64, 1, 0, Cfg(128, 64, 4, 2, 0, 1)))
    print("schedule kernel:", ptxas_info(log).get("scree_attention_schedule"))


# ----------------------------------------------------------------------------
# GPU side
# ----------------------------------------------------------------------------

_mod_cache = {}


def get_kernels(src, arch, defs):
    """Compile (cached) and load; returns (fwd, sched, ptxas info, nvrtc s)."""
    import cupy
    key = (arch, tuple(sorted(defs.items())))
    if key in _mod_cache:
        return _mod_cache[key]
    cub, log, secs = nvrtc_compile(src, arch, defs)
    os.makedirs(CACHE_DIR, exist_ok=True)
    h = hashlib.sha1((src + repr(key)).encode()).hexdigest()[:16]
    path = os.path.join(CACHE_DIR, h + ".cubin")
    with open(path, "wb") as f:
        f.write(cub)
    mod = cupy.RawModule(path=path)
    fwd = mod.get_function("scree_attention_fwd")
    sch = mod.get_function("scree_attention_schedule")
    info = ptxas_info(log).get("scree_attention_fwd", {})
    _mod_cache[key] = (fwd, sch, info, secs)
    return _mod_cache[key]


def precompile(src, arch, defs_list, jobs=16):
    """Compile many configs in parallel (NVRTC calls release the GIL)."""
    todo = []
    seen = set()
    for defs in defs_list:
        key = (arch, tuple(sorted(defs.items())))
        if key not in _mod_cache and key not in seen:
            seen.add(key)
            todo.append(defs)
    if not todo:
        return
    t0 = time.time()
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        res = list(ex.map(lambda d: (d, nvrtc_compile(src, arch, d)), todo))
    import cupy
    os.makedirs(CACHE_DIR, exist_ok=True)
    for defs, (cub, log, secs) in res:
        key = (arch, tuple(sorted(defs.items())))
        h = hashlib.sha1((src + repr(key)).encode()).hexdigest()[:16]
        path = os.path.join(CACHE_DIR, h + ".cubin")
        with open(path, "wb") as f:
            f.write(cub)
        mod = cupy.RawModule(path=path)
        _mod_cache[key] = (mod.get_function("scree_attention_fwd"),
                           mod.get_function("scree_attention_schedule"),
                           ptxas_info(log).get("scree_attention_fwd", {}), secs)
    print(f"[compiled {len(todo)} modules in {time.time() - t0:.1f}s]", flush=True)


class Attn:
    """Launches one compiled variant on torch tensors."""

    def __init__(self, src, arch, dtype_code, d, causal, window, cfg, num_sms):
        self.cfg, self.d = cfg, d
        self.defs = macros(dtype_code, d, causal, window, cfg)
        self.fwd, self.sch, self.info, self.nvrtc_s = get_kernels(src, arch, self.defs)
        self.smem = cfg.smem(d)
        self.fwd.max_dynamic_shared_size_bytes = self.smem
        self.num_sms = num_sms
        self.sched_buf = None
        self.per_sm = None

    def ctas_per_sm(self):
        if self.per_sm is None:
            regs = self.info.get("regs", 255)
            t = self.cfg.threads()
            by_regs = 65536 // (((regs * 32 + 255) // 256) * 256 * (t // 32))
            by_smem = 233472 // (self.smem + 1024)
            by_thr = 2048 // t
            self.per_sm = max(1, min(by_regs, by_smem, by_thr, 32))
        return self.per_sm

    def __call__(self, q, k, v, out, lse, cu_q, cu_k, max_q, heads_q, heads_kv, scale,
                 wl=-1, wr=-1):
        import numpy as np
        import torch
        c = self.cfg
        batch = cu_q.numel() - 1
        total_q = q.shape[0]
        bm = c.bm
        maxqt = max(1, (max_q + bm - 1) // bm)
        ptr = lambda t: np.uint64(t.data_ptr()) if t is not None else np.uint64(0)  # noqa: E731
        st = lambda t, i: np.int64(t.stride(i))  # noqa: E731
        if c.sched == 0:
            grid = (maxqt, heads_q, batch)
            sched = None
            gx = maxqt
        else:
            cap = min(batch * maxqt, (total_q + bm - 1) // bm + batch)
            cap = max(cap, 1)
            if self.sched_buf is None or self.sched_buf.numel() < 2 + 2 * cap:
                self.sched_buf = torch.empty(2 + 2 * cap, dtype=torch.int32, device=q.device)
            sched = self.sched_buf
            self.sch((1, 1, 1), (1024, 1, 1),
                     (ptr(cu_q), ptr(cu_k), np.int32(batch), ptr(sched), np.int32(cap),
                      np.int32(wl), np.int32(wr)))
            if c.sched == 1:
                grid = (cap * heads_q, 1, 1)
            else:
                grid = (min(cap * heads_q, self.num_sms * self.ctas_per_sm()), 1, 1)
            gx = cap
        args = (ptr(q), ptr(k), ptr(v), ptr(out), ptr(lse), ptr(cu_q), ptr(cu_k),
                st(q, 0), st(q, 1), st(k, 0), st(k, 1), st(v, 0), st(v, 1), st(out, 0), st(out, 1),
                np.int64(total_q), np.int32(batch), np.int32(heads_q),
                np.int32(heads_q // heads_kv), np.float32(scale * math.log2(math.e)),
                np.int32(wl), np.int32(wr), np.float32(0), np.float32(0),  # no softcap
                ptr(sched), np.int32(gx))
        self.fwd(grid, (c.threads(), 1, 1), args, shared_mem=self.smem)


def ref_attention(q, k, v, cu_q, cu_k, scale, causal, wl, wr, heads_q, heads_kv):
    """float64 reference, per sequence. Returns out (float64) [Tq, Hq, d], lse [Hq, Tq]."""
    import torch
    Tq, Hq, d = q.shape
    out = torch.zeros(Tq, Hq, d, dtype=torch.float64, device=q.device)
    lse = torch.full((Hq, Tq), float("-inf"), dtype=torch.float64, device=q.device)
    group = heads_q // heads_kv
    cq, ck = cu_q.tolist(), cu_k.tolist()
    for b in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
        Lq, Lk = q1 - q0, k1 - k0
        if Lq == 0:
            continue
        if Lk == 0:
            continue
        qs = q[q0:q1].double().transpose(0, 1)                   # Hq, Lq, d
        ks = k[k0:k1].double().transpose(0, 1).repeat_interleave(group, 0)
        vs = v[k0:k1].double().transpose(0, 1).repeat_interleave(group, 0)
        i = torch.arange(Lq, device=q.device).view(-1, 1) + (Lk - Lq)
        j = torch.arange(Lk, device=q.device).view(1, -1)
        vis = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device)
        r = 0 if causal else (wr if wr >= 0 else None)
        if r is not None:
            vis &= j <= i + r
        if wl >= 0:
            vis &= j >= i - wl
        for h0 in range(0, Hq, 8):
            h1 = min(Hq, h0 + 8)
            s = torch.matmul(qs[h0:h1], ks[h0:h1].transpose(1, 2)) * scale
            s = s.masked_fill(~vis, float("-inf"))
            l = torch.logsumexp(s, dim=-1)                       # h, Lq
            p = torch.exp(s - l.unsqueeze(-1))
            p = torch.nan_to_num(p, nan=0.0)
            out[q0:q1, h0:h1] = torch.matmul(p, vs[h0:h1]).transpose(0, 1)
            lse[h0:h1, q0:q1] = l
    return out, lse


DT = {"fp16": 1, "bf16": 2}


def torch_dtype(name):
    import torch
    return {"fp16": torch.float16, "bf16": torch.bfloat16}[name]


def make_inputs(lq, lk, hq, hkv, d, dtype, packed, dev, seed=None):
    import torch
    tq, tk = sum(lq), sum(lk)
    dt = torch_dtype(dtype)
    if packed:
        assert hq == hkv and tq == tk
        x = torch.randn(tq, 3, hq, d, device=dev, dtype=torch.float32).to(dt)
        q, k, v = x[:, 0], x[:, 1], x[:, 2]
    else:
        q = torch.randn(tq, hq, d, device=dev, dtype=torch.float32).to(dt)
        k = torch.randn(tk, hkv, d, device=dev, dtype=torch.float32).to(dt)
        v = torch.randn(tk, hkv, d, device=dev, dtype=torch.float32).to(dt)
    cu_q = torch.tensor([0] + list(_cumsum(lq)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(_cumsum(lk)), dtype=torch.int32, device=dev)
    return q, k, v, cu_q, cu_k


def _cumsum(xs):
    s = 0
    for x in xs:
        s += x
        yield s


LENS = [0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 2048, 4097]


def check_case(src, arch, num_sms, case, cfg, rng):
    """Run one case; returns (ok, msg)."""
    import torch
    d, dtype, causal, window = case["d"], case["dtype"], case["causal"], case["window"]
    hq, hkv = case["hq"], case["hkv"]
    lq, lk = case["lq"], case["lk"]
    wl, wr = case.get("wl", -1), case.get("wr", -1)
    dev = "cuda"
    q, k, v, cu_q, cu_k = make_inputs(lq, lk, hq, hkv, d, dtype, case.get("packed", False), dev)
    scale = 1.0 / math.sqrt(d)
    tq = q.shape[0]
    out = torch.full((tq, hq, d), float("nan"), dtype=q.dtype, device=dev)
    lse = torch.full((hq, tq), float("nan"), dtype=torch.float32, device=dev)
    att = Attn(src, arch, DT[dtype], d, causal, window, cfg, num_sms)
    att(q, k, v, out, lse, cu_q, cu_k, max(lq) if lq else 0, hq, hkv, scale, wl, wr)
    torch.cuda.synchronize()
    ro, rl = ref_attention(q, k, v, cu_q, cu_k, scale, causal, wl if window else -1,
                           wr if window else -1, hq, hkv)
    atol, rtol = (2e-3, 1e-2) if dtype == "fp16" else (1e-2, 2e-2)
    o = out.double()
    nan_o = torch.isnan(o).sum().item()
    err = (o - ro).abs()
    bad_o = (err > atol + rtol * ro.abs()).sum().item()
    maxerr = torch.nan_to_num(err, nan=float("inf")).max().item() if tq else 0.0
    l = lse.double()
    nan_l = torch.isnan(l).sum().item()
    both_inf = torch.isinf(rl) & torch.isinf(l) & (torch.sign(rl) == torch.sign(l))
    lerr = torch.where(both_inf, torch.zeros_like(l), (l - rl).abs())
    lerr = torch.nan_to_num(lerr, nan=float("inf"))
    bad_l = (lerr > 1e-3 * torch.clamp(rl.abs(), min=1.0).nan_to_num(posinf=1.0)).sum().item()
    maxl = lerr.max().item() if tq else 0.0
    ok = nan_o == 0 and bad_o == 0 and nan_l == 0 and bad_l == 0
    msg = (f"maxerr={maxerr:.2e} bad={bad_o} nan={nan_o} | lse maxerr={maxl:.2e} bad={bad_l} "
           f"nan={nan_l}")
    return ok, msg


def default_cfg(d, causal):
    """Recommended sm_90 default per head_dim (measured; see the notes)."""
    if d <= 64:
        return Cfg(128, 64, 4, 2, 1, 1)
    if d <= 128:
        return Cfg(128, 64, 4, 2, 0, 1)
    return Cfg(128, 64, 8, 2, 0, 1)


def run_sanitize(args, arch, num_sms):
    """A few small cases for compute-sanitizer (memcheck / racecheck): run with
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 so every tensor is its own allocation and
    reads past a sequence's end would be out of bounds."""
    src = assemble_source()
    cfgs = [Cfg.parse(c) for c in (args.cfgs or "m128n64w4s2q0p0,m128n64w4s1q1p1,m64n32w4s3q0p2").split(",")]
    lq = [65, 0, 129, 7, 200]
    lk = [100, 5, 129, 0, 263]
    fails = 0
    for d in [int(x) for x in args.dims.split(",")]:
        for c in cfgs:
            if not c.valid(d, arch):
                continue
            for causal, window in ((1, 0), (0, 1)):
                case = dict(d=d, dtype="bf16", causal=causal, window=window, wl=50, wr=20,
                            hq=2, hkv=1, lq=lq, lk=lk, name="sanitize")
                ok, msg = check_case(src, arch, num_sms, case, c, None)
                fails += not ok
                print(f"{'PASS' if ok else 'FAIL'} sanitize d={d} {c.name} causal={causal} {msg}",
                      flush=True)
    return fails


def build_cases(dims, quick):
    import random
    rng = random.Random()
    cases = []
    mixed = list(LENS)
    for d in dims:
        for dtype in ("fp16", "bf16"):
            for causal in (0, 1):
                rng.shuffle(mixed)
                base = dict(d=d, dtype=dtype, causal=causal, window=0, hq=2, hkv=2)
                cases.append(dict(base, name="mixed", lq=list(mixed), lk=list(mixed)))
                # chunked prefill: k longer than q (and some shorter, some zero)
                lq = [rng.choice(LENS) for _ in range(10)]
                lk = [x + rng.choice([0, 1, 5, 64, 300, 1500]) for x in lq]
                lk[0], lq[1], lk[2] = max(0, lq[0] - 40), 0, 0
                cases.append(dict(base, name="chunked", lq=lq, lk=lk))
                # sliding window
                wl, wr = rng.choice([(100, 30), (256, 0), (0, 0), (511, -1), (-1, 70)])
                cases.append(dict(base, name=f"window({wl},{wr})", window=1, wl=wl, wr=wr,
                                  lq=list(mixed), lk=list(mixed)))
                if not quick:
                    small = [1, 63, 65, 128, 700, 1000, 0, 129]
                    cases.append(dict(base, name="gqa32:8", hq=32, hkv=8, lq=small, lk=small))
                    cases.append(dict(base, name="mqa8:1", hq=8, hkv=1, lq=small, lk=small))
                    cases.append(dict(base, name="packed-qkv", hq=4, hkv=4, packed=True,
                                      lq=list(mixed), lk=list(mixed)))
                    cases.append(dict(base, name="chunked-window", window=1, wl=300, wr=20,
                                      lq=lq, lk=lk))
    return cases


def run_check(args, arch, num_sms):
    src = assemble_source()
    dims = [int(x) for x in args.dims.split(",")]
    cases = build_cases(dims, args.quick)
    plan = []  # (case, cfg)
    for i, case in enumerate(cases):
        base = Cfg.parse(args.cfg) if args.cfg else default_cfg(case["d"], case["causal"])
        plan.append((case, base.with_sched(i % 3)))
    if args.configs_all:
        # every valid tile config, on a masked chunked-prefill case per head_dim
        for d in dims:
            for c in all_tile_cfgs(d, arch):
                lq = [1, 65, 129, 700, 0, 64, 300]
                lk = [1, 100, 129, 1000, 5, 64, 300]
                for causal in (0, 1):
                    plan.append((dict(d=d, dtype="bf16" if causal else "fp16", causal=causal,
                                      window=1, wl=400 if causal else -1, wr=-1 if causal else 90,
                                      hq=4, hkv=2, lq=lq, lk=lk, name="cfg-sweep"),
                                 c.with_sched((d // 32 + c.st + c.qreg) % 3)))
    precompile(src, arch, [macros(DT[c["dtype"]], c["d"], c["causal"], c["window"], cfg)
                           for c, cfg in plan], jobs=args.jobs)
    fails = 0
    t0 = time.time()
    for case, cfg in plan:
        try:
            ok, msg = check_case(src, arch, num_sms, case, cfg, None)
        except Exception as e:  # a CUDA error poisons the context: report and stop
            ok, msg = False, f"EXCEPTION {type(e).__name__}: {str(e)[:300]}"
            if "cuda" in str(e).lower() or "CUDA" in type(e).__name__:
                print(f"FAIL d={case['d']} {case['name']} {cfg.name} {msg}", flush=True)
                return fails + 1
        fails += not ok
        print(f"{'PASS' if ok else 'FAIL'} d={case['d']:3d} {case['dtype']} causal={case['causal']} "
              f"{case['name']:18s} hq={case['hq']}:{case['hkv']} {cfg.name:18s} {msg}", flush=True)
    print(f"check: {len(plan) - fails}/{len(plan)} passed ({time.time() - t0:.0f}s)", flush=True)
    return fails


# ----------------------------------------------------------------------------
# Benchmark against FA-2
# ----------------------------------------------------------------------------


def load_bench_configs(synthetic=False):
    for p in (os.path.join(HERE, "attention_configs.json"),
              os.path.join(ROOT, "..", "shared", "bench", "attention_configs.json")):
        if os.path.exists(p):
            with open(p) as f:
                confs = json.load(f)["configs"]
            break
    else:
        raise FileNotFoundError("attention_configs.json")
    if synthetic:
        # head dims the six configs do not cover: the first 16 llama lengths, 16 heads, fp16
        lens = next(c for c in confs if c["name"] == "llama-mha-causal")["seqlens"][:16]
        for d in (32, 96, 256):
            for causal in (True, False):
                confs.append({"name": f"synth-d{d}-{'causal' if causal else 'noncausal'}",
                              "seqlens": lens, "hq": 16, "hkv": 16, "d": d, "causal": causal,
                              "dtype": "fp16"})
    return confs


def time_fn(fn, reps, inner=10, warmup=3):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        s.record()
        for _ in range(inner):
            fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / inner)
    return statistics.median(ts)


SWEEPS = {
    # head_dim -> config names (full, with SCHED)
    "final": {
        64: ["m128n64w4s2q1p1", "m128n64w4s2q1p0", "m128n64w4s2q1p2", "m128n64w4s3q1p1",
             "m128n128w4s2q0p1", "m64n64w4s2q1p1", "m128n64w4s2q1p1+MMA_ROWSUM=0"],
        128: ["m128n64w4s2q0p1", "m128n64w4s2q0p0", "m128n64w4s2q0p2", "m128n64w4s1q0p1",
              "m128n32w4s2q0p1", "m128n64w4s2q0p1+MMA_ROWSUM=0",
              "m128n64w4s2q0p0+MMA_ROWSUM=0", "m128n64w4s2q0p1+MMA_ROWSUM=2",
              "m128n64w4s2q0p0+MMA_ROWSUM=2"],
        32: ["m128n64w4s2q1p1", "m128n64w4s2q1p0", "m64n64w4s2q1p1"],
        96: ["m128n64w4s2q0p1", "m128n64w4s2q0p0", "m128n64w4s3q0p1"],
        256: ["m128n64w8s2q0p1", "m128n64w8s2q0p0", "m128n64w8s1q0p1", "m64n64w4s1q0p1"],
    },
    "r3": {
        64: ["m128n64w4s2q1p1", "m128n64w4s2q1p1+RANK_CHUNK=16", "m128n64w4s2q1p0",
             "m128n64w4s2q1p2", "m128n64w4s2q1p1+MMA_ROWSUM=1", "m128n64w4s2q0p1+MMA_ROWSUM=1",
             "m128n64w4s1q1p1+MMA_ROWSUM=1", "m128n32w4s2q1p1", "m64n64w4s2q1p1",
             "m64n64w4s2q1p1+MMA_ROWSUM=1", "m128n64w4s2q1p2+MMA_ROWSUM=1",
             "m128n64w4s2q1p0+MMA_ROWSUM=1"],
        128: ["m128n64w4s2q0p1", "m128n64w4s1q0p1", "m128n64w4s2q0p0",
              "m128n64w4s2q0p1+RANK_CHUNK=128", "m128n64w4s2q0p1+MMA_ROWSUM=1",
              "m128n64w4s1q0p1+MMA_ROWSUM=1", "m128n64w4s2q0p0+MMA_ROWSUM=1",
              "m128n64w4s2q0p2+MMA_ROWSUM=1", "m128n64w4s1q0p0+MMA_ROWSUM=1",
              "m128n32w4s2q0p1", "m128n32w4s1q0p1+MMA_ROWSUM=1", "m64n64w4s2q1p1+MMA_ROWSUM=1"],
    },
    "r2": {
        64: ["m128n64w4s2q1p1", "m128n64w4s2q0p1", "m128n64w4s2q1p2", "m128n64w4s2q1p0",
             "m128n64w4s2q0p1+MINB=3", "m128n32w4s2q1p1+MINB=3", "m128n64w4s3q1p1",
             "m128n128w4s2q0p1", "m128n64w4s2q1p1+SKIP_RESCALE=1",
             "m128n64w4s2q1p1+PACK_EARLY=1", "m128n64w4s2q1p1+RANK_CHUNK=16", "m64n64w4s2q1p1"],
        128: ["m128n64w4s2q0p0", "m128n64w4s2q0p1", "m128n64w4s2q0p2", "m128n64w4s1q0p1",
              "m128n64w4s3q0p1", "m128n32w4s2q0p1", "m128n64w4s2q0p1+SKIP_RESCALE=1",
              "m128n64w4s2q0p1+PACK_EARLY=1", "m128n64w4s2q0p1+RANK_CHUNK=32",
              "m128n64w4s2q0p1+RANK_CHUNK=128", "m128n128w8s2q0p1", "m64n64w4s2q1p1"],
    },
    "small": {
        64: ["m128n64w4s2q1p1", "m128n64w4s2q0p1", "m128n64w8s2q1p1", "m128n64w8s2q0p1",
             "m128n128w8s2q1p1", "m128n32w8s2q1p1", "m64n64w4s2q1p1", "m128n64w4s1q1p1",
             "m128n64w8s2q1p0", "m128n64w8s2q1p2", "m128n64w4s2q1p0", "m128n64w4s2q1p2"],
        128: ["m128n64w4s1q0p1", "m128n64w4s2q0p1", "m128n32w4s2q0p1", "m128n64w8s2q0p1",
              "m128n64w8s2q1p1", "m128n32w8s2q0p1", "m64n64w4s2q0p1", "m128n128w8s2q0p1",
              "m128n64w4s2q0p0", "m128n64w4s2q0p2", "m128n64w8s2q0p0", "m128n64w8s2q0p2"],
    },
}


def sweep_cfgs(d, kind, scheds):
    if kind == "full":
        return [c.with_sched(p) for c in all_tile_cfgs(d) for p in scheds]
    names = SWEEPS[kind].get(d)
    if names is None:
        return [default_cfg(d, 1).with_sched(p) for p in scheds]
    return [Cfg.parse(n) for n in names]


def run_bench(args, arch, num_sms):
    import torch
    src = assemble_source()
    confs = load_bench_configs(synthetic=True)
    if not args.only:
        confs = [c for c in confs if not c["name"].startswith("synth")]
    if args.only:
        keep = args.only.split(",")
        confs = [c for c in confs if c["name"] in keep]
    scheds = [int(x) for x in args.scheds.split(",")]
    extra = [Cfg.parse(x) for x in args.cfgs.split(",")] if args.cfgs else None
    plan = []
    for bc in confs:
        cfgs = extra if extra else sweep_cfgs(bc["d"], args.sweep, scheds)
        cfgs = [c for c in cfgs if c.valid(bc["d"], arch)]
        plan.append((bc, cfgs))
    precompile(src, arch, [macros(DT[bc["dtype"]], bc["d"], bc["causal"], 0, c)
                           for bc, cfgs in plan for c in cfgs], jobs=args.jobs)
    summary = []
    fa = torch.ops.aten._flash_attention_forward
    for bc, cfgs in plan:
        lens, hq, hkv, d, causal = bc["seqlens"], bc["hq"], bc["hkv"], bc["d"], bc["causal"]
        q, k, v, cu_q, cu_k = make_inputs(lens, lens, hq, hkv, d, bc["dtype"], False, "cuda")
        scale = 1.0 / math.sqrt(d)
        maxl = max(lens)
        flops = 4 * hq * d * sum(x * x for x in lens) / (2 if causal else 1)
        fa_call = lambda: fa(q, k, v, cu_q, cu_k, maxl, maxl, 0.0, bool(causal), False,  # noqa
                             scale=scale)
        fo = fa_call()[0]
        fa_ms = time_fn(fa_call, args.reps)
        out = torch.empty_like(q)
        res = []
        for c in cfgs:
            att = Attn(src, arch, DT[bc["dtype"]], d, causal, 0, c, num_sms)
            call = lambda: att(q, k, v, out, None, cu_q, cu_k, maxl, hq, hkv, scale)  # noqa
            out.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            diff = (out.float() - fo.float()).abs().max().item()
            ms = time_fn(call, args.reps)
            res.append((ms, c, diff, att.info))
        if any(c.sched > 0 for c in cfgs):  # the schedule kernel alone
            import numpy as np
            c1 = next(c for c in cfgs if c.sched > 0)
            att = Attn(src, arch, DT[bc["dtype"]], d, causal, 0, c1, num_sms)
            att(q, k, v, out, None, cu_q, cu_k, maxl, hq, hkv, scale)  # allocates sched_buf
            maxqt = (maxl + c1.bm - 1) // c1.bm
            cap = min(len(lens) * maxqt, (q.shape[0] + c1.bm - 1) // c1.bm + len(lens))
            sch_args = (np.uint64(cu_q.data_ptr()), np.uint64(cu_k.data_ptr()),
                        np.int32(len(lens)), np.uint64(att.sched_buf.data_ptr()), np.int32(cap),
                        np.int32(-1), np.int32(-1))
            sms = time_fn(lambda: att.sch((1, 1, 1), (1024, 1, 1), sch_args), args.reps)
            print(f"  [schedule kernel alone, back to back: {sms * 1000:.1f} us per call]")
        res.sort(key=lambda r: r[0])
        print(f"\n== {bc['name']}  (d={d} hq={hq} hkv={hkv} {bc['dtype']} causal={causal}, "
              f"{len(lens)} seqs)  FA-2: {fa_ms:.3f} ms  {flops / fa_ms / 1e9:.1f} TFLOP/s")
        for ms, c, diff, info in res:
            print(f"  {c.name:18s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s  "
                  f"x{fa_ms / ms:5.3f} vs FA-2  maxdiff={diff:.1e} regs={info.get('regs')} "
                  f"spill={info.get('spill_st')}")
        best = res[0]
        summary.append((bc["name"], fa_ms, flops / fa_ms / 1e9, best[0], flops / best[0] / 1e9,
                        fa_ms / best[0], best[1].name))
        sys.stdout.flush()
    print("\n| config | FA-2 ms | FA-2 TF/s | best ms | best TF/s | speedup | best config |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in summary:
        print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.1f} | {r[3]:.3f} | {r[4]:.1f} | {r[5]:.3f} | {r[6]} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--local", action="store_true", help="compile-only report (no GPU)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--sanitize", action="store_true",
                    help="small cases for compute-sanitizer (set PYTORCH_NO_CUDA_MEMORY_CACHING=1)")
    ap.add_argument("--quick", action="store_true", help="--check: fewer cases")
    ap.add_argument("--configs-all", action="store_true", help="--check: every valid tile config too")
    ap.add_argument("--dims", default="32,64,96,128,256")
    ap.add_argument("--arch", default=None, help="sm_90 / sm_80 (default: the GPU's; --local: sm_90,sm_80)")
    ap.add_argument("--configs", default=None, help="--local: config names instead of all valid")
    ap.add_argument("--cfg", default=None, help="--check: one config for the matrix")
    ap.add_argument("--cfgs", default=None, help="--bench: config names instead of the sweep")
    ap.add_argument("--sweep", default="small", choices=["small", "r2", "r3", "final", "full"])
    ap.add_argument("--scheds", default="1", help="--bench: SCHED values to sweep")
    ap.add_argument("--only", default=None, help="--bench: benchmark config names")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--dtype", type=int, default=1, help="--local: 1 fp16, 2 bf16")
    ap.add_argument("--window", type=int, default=0, help="--local: SCREE_WINDOW")
    ap.add_argument("--both-causal", action="store_true", help="--local: causal 0 and 1")
    ap.add_argument("--sass", action="store_true", help="--local: count SASS instructions")
    ap.add_argument("--dump-sass", default=None, help="--local: write one config's SASS")
    ap.add_argument("--defs", default="", help="extra -D macros, e.g. SCREE_MINB=2 (development)")
    args = ap.parse_args()
    for kv in filter(None, args.defs.split(",")):
        k, v = kv.split("=")
        EXTRA_DEFS[k] = v
    if args.local:
        args.arch = args.arch or "sm_90,sm_80"
        run_local(args)
    fails = 0
    if args.check or args.bench or args.sanitize:
        import torch  # noqa: F811
        dev = torch.cuda.get_device_properties(0)
        arch = args.arch or f"sm_{dev.major}{dev.minor}"
        if arch not in SMEM_LIMIT:
            arch = "sm_90" if dev.major >= 9 else "sm_80"
        print(f"device: {dev.name}, {dev.multi_processor_count} SMs, arch {arch}, torch "
              f"{torch.__version__}", flush=True)
        if args.bench:
            print(torch.ops.aten._flash_attention_forward.default._schema)
        if args.sanitize:
            fails += run_sanitize(args, arch, dev.multi_processor_count)
        if args.check:
            fails += run_check(args, arch, dev.multi_processor_count)
        if args.bench:
            run_bench(args, arch, dev.multi_processor_count)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
