"""Row-wise backward ops: scree's SwiGLU, softmax, ragged softmax and RoPE
backward against
PyTorch eager autograd and Liger-Kernel, side by side
(bench/compare_torch.py --op misc-backward).

For each case: random inputs, input sets rotated beyond 3x the L2; first
scree's gradients (poisoned with NaN before the call) are checked against
a float64 torch autograd reference of the same forward on the same inputs
(max |scree - ref| within 1e-2 (fp16), 4e-2 (bf16) of the reference's
largest magnitude, no NaN), which fails the run. Then, timed with CUDA
events around --inner back-to-back calls (median of the reps, warm-up
first; compare_torch's time_batched):
  - scree's backward alone, and scree's forward + backward;
  - PyTorch eager: the backward alone (torch.autograd.grad on a graph built
    once per input set) and forward + backward;
  - Liger-Kernel where it has the op (LigerSiLUMulFunction, LigerRopeFunction,
    LigerSoftmaxFunction if the installed version has it; none for the
    ragged softmax): "n/a" when liger_kernel is not importable;
  - a device copy of the backward's bytes (half read, half written), timed
    alike: %copy is its time over scree's backward time.
Bytes: the backward's reads and writes once each (SwiGLU: gate, up, dy read,
dgate, dup written; softmax and ragged softmax: y, dy read, dx written;
RoPE: dq, dk read and written in place). The ragged softmax's eager
forward is torch.softmax over dim 0 of each sequence's slice, concatenated
(what eager PyTorch offers for a packed batch); its batches are the
forward's benchmark batches (ops/ragged_softmax.c).
"""
import ctypes
import sys

torch = None

FP32, FP16, BF16 = 0, 1, 2
U64, I64, INT, F32 = ctypes.c_uint64, ctypes.c_int64, ctypes.c_int, ctypes.c_float


def struct(name, fields):
    return type(name, (ctypes.Structure,), {"_fields_": fields})


# Field for field as include/scree.h declares them.
SwigluArgs = struct("SwigluArgs", [(n, U64) for n in ("gate", "up", "y")] +
                    [(n, I64) for n in ("rows", "cols", "gate_stride", "up_stride", "y_stride")] +
                    [("dtype", INT), ("y_dtype", INT)])
SwigluBwdArgs = struct("SwigluBwdArgs", [(n, U64) for n in ("gate", "up", "dy", "dgate", "dup")] +
                       [(n, I64) for n in ("rows", "cols", "gate_stride", "up_stride", "dy_stride",
                                           "dgate_stride", "dup_stride")] +
                       [("dtype", INT), ("dy_dtype", INT)])
SoftmaxArgs = struct("SoftmaxArgs", [("x", U64), ("y", U64)] +
                     [(n, I64) for n in ("rows", "cols", "x_stride", "y_stride")] +
                     [("x_dtype", INT), ("y_dtype", INT), ("scale", F32)])
SoftmaxBwdArgs = struct("SoftmaxBwdArgs", [(n, U64) for n in ("y", "dy", "dx")] +
                        [(n, I64) for n in ("rows", "cols", "y_stride", "dy_stride", "dx_stride")] +
                        [("y_dtype", INT), ("dy_dtype", INT), ("scale", F32)])
RaggedSoftmaxArgs = struct("RaggedSoftmaxArgs", [(n, U64) for n in ("x", "y", "cu_seqlens")] +
                           [(n, I64) for n in ("batch", "total", "max_seqlen", "cols", "x_stride",
                                               "y_stride")] +
                           [("x_dtype", INT), ("y_dtype", INT), ("scale", F32)])
RaggedSoftmaxBwdArgs = struct("RaggedSoftmaxBwdArgs",
                              [(n, U64) for n in ("y", "dy", "dx", "cu_seqlens")] +
                              [(n, I64) for n in ("batch", "total", "max_seqlen", "cols",
                                                  "y_stride", "dy_stride", "dx_stride")] +
                              [("y_dtype", INT), ("dy_dtype", INT), ("scale", F32)])
RopeArgs = struct("RopeArgs", [(n, U64) for n in ("q", "k", "positions", "cu_seqlens", "cos_sin")] +
                  [(n, I64) for n in ("total", "batch", "max_position", "heads_q", "heads_kv",
                                      "head_dim", "rotary_dim", "q_token_stride", "q_head_stride",
                                      "k_token_stride", "k_head_stride")] +
                  [("dtype", INT), ("layout", INT), ("positions_int64", INT), ("theta", F32)])

CASES = [
    # op, shape, dtype
    ("swiglu_backward", dict(rows=16384, cols=4096), "bf16"),
    ("swiglu_backward", dict(rows=4096, cols=14336), "fp16"),
    ("softmax_backward", dict(rows=16384, cols=4096), "bf16"),
    ("softmax_backward", dict(rows=4096, cols=32768), "fp16"),
    ("softmax_backward", dict(rows=64, cols=131072), "fp32"),
    ("ragged_softmax_backward", dict(total=16384, cols=4096, seqs=16), "fp16"),
    ("ragged_softmax_backward", dict(total=16384, cols=4096, seqs=16), "bf16"),
    ("ragged_softmax_backward", dict(total=65536, cols=1024, seqs=64), "fp16"),
    ("ragged_softmax_backward", dict(total=16384, cols=128, seqs=16), "fp16"),
    ("rope_backward", dict(total=16384, hq=32, hkv=8, d=128), "bf16"),
    ("rope_backward", dict(total=65536, hq=32, hkv=8, d=128), "fp16"),
]

# The ragged batches' lengths, by (total, sequences): the forward's
# benchmark entries (src/runtime/ops/ragged_softmax.c).
RAGGED_LENS = {
    (16384, 16): [440, 1821, 1541, 560, 903, 824, 1233, 1620, 406, 356, 1778, 796, 1536, 337,
                  817, 1416],
    (65536, 64): [457, 840, 594, 946, 988, 324, 292, 1506, 476, 453, 2064, 725, 1503, 734, 1015,
                  384, 1006, 1601, 805, 1243, 1082, 323, 1286, 922, 518, 302, 1593, 728, 1189,
                  1635, 1178, 1778, 623, 1399, 688, 1830, 1635, 344, 372, 437, 1943, 676, 989,
                  517, 779, 612, 571, 910, 909, 1719, 1104, 1806, 1563, 2044, 1081, 392, 1576,
                  1939, 1721, 882, 1176, 432, 1488, 889],
}


def liger_fn(name):
    if name == "ragged_softmax_backward":
        return None  # Liger-Kernel has no softmax along a ragged dimension
    try:
        if name == "swiglu_backward":
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction as f
        elif name == "rope_backward":
            from liger_kernel.ops.rope import LigerRopeFunction as f
        else:
            from liger_kernel.ops.softmax import LigerSoftmaxFunction as f
        return f
    except Exception:  # not installed, or this version lacks the op
        return None


def entry(lib, name, argtype):
    fn = getattr(lib, "scree_" + name, None)
    if fn is None:
        sys.exit(f"this libscree has no scree_{name}: rebuild it")
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(argtype), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def rope_cos_sin(T, d, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
    ang = torch.arange(T, device="cuda", dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()


def rope_torch(x, cos, sin):  # x [T, H, d], HuggingFace's rotate-half
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos[:, None, :].to(x.dtype) + rot * sin[:, None, :].to(x.dtype)


def make_case(name, s, tdt):
    """Inputs of one set, the torch forward (a function of the leaf
    tensors), the leaves, and the upstream gradients."""
    if name == "swiglu_backward":
        gu = torch.randn(s["rows"], 2 * s["cols"], device="cuda", dtype=tdt) * 2
        dy = torch.randn(s["rows"], s["cols"], device="cuda", dtype=tdt)
        fwd = lambda gu: torch.nn.functional.silu(gu[:, :s["cols"]]) * gu[:, s["cols"]:]
        return dict(gu=gu, dy=dy), fwd, ("gu",), ("dy",)
    if name == "softmax_backward":
        x = torch.randn(s["rows"], s["cols"], device="cuda", dtype=tdt) * 3
        dy = torch.randn(s["rows"], s["cols"], device="cuda", dtype=tdt)
        return dict(x=x, dy=dy), lambda x: torch.softmax(x, -1), ("x",), ("dy",)
    if name == "ragged_softmax_backward":
        lens = RAGGED_LENS[(s["total"], s["seqs"])]
        x = torch.randn(s["total"], s["cols"], device="cuda", dtype=tdt) * 3
        dy = torch.randn(s["total"], s["cols"], device="cuda", dtype=tdt)
        fwd = lambda x: torch.cat([torch.softmax(seg, 0) for seg in x.split(lens)])
        return dict(x=x, dy=dy), fwd, ("x",), ("dy",)
    T, hq, hkv, d = s["total"], s["hq"], s["hkv"], s["d"]
    cos, sin = rope_cos_sin(T, d)
    q = torch.randn(T, hq, d, device="cuda", dtype=tdt)
    k = torch.randn(T, hkv, d, device="cuda", dtype=tdt)
    dq = torch.randn(T, hq, d, device="cuda", dtype=tdt)
    dk = torch.randn(T, hkv, d, device="cuda", dtype=tdt)
    fwd = lambda q, k: (rope_torch(q, cos.to(q.dtype), sin.to(q.dtype)),
                        rope_torch(k, cos.to(k.dtype), sin.to(k.dtype)))
    return dict(q=q, k=k, dq=dq, dk=dk, cos=cos, sin=sin), fwd, ("q", "k"), ("dq", "dk")


def run(args, lib, ctx, l2, time_batched, copy_gbps, torch_module):
    global torch
    torch = torch_module
    calls = {n: entry(lib, n, t) for n, t in (("swiglu", SwigluArgs), ("swiglu_backward", SwigluBwdArgs),
                                             ("softmax", SoftmaxArgs),
                                             ("softmax_backward", SoftmaxBwdArgs),
                                             ("ragged_softmax", RaggedSoftmaxArgs),
                                             ("ragged_softmax_backward", RaggedSoftmaxBwdArgs),
                                             ("rope", RopeArgs), ("rope_backward", RopeArgs))}
    codes = dict(fp32=FP32, fp16=FP16, bf16=BF16)
    tdts = dict(fp32=torch.float32, fp16=torch.float16, bf16=torch.bfloat16)
    reps, inner, warmup = min(args.reps, 30), args.inner, args.warmup
    print(f"\nrow-wise backward vs PyTorch eager and Liger-Kernel; copy {copy_gbps:.0f} GB/s")
    print(f"{'op':17} {'shape':28} {'dt':4} {'MB':>6} {'scree bwd':>9} {'eager bwd':>9} "
          f"{'liger bwd':>9} {'copy':>7} {'%copy':>6} {'scree f+b':>9} {'eager f+b':>9} "
          f"{'liger f+b':>9} {'x eager':>7} {'x liger':>7}")
    results, failed = [], []
    for name, s, dname in CASES:
        tdt, code = tdts[dname], codes[dname]
        es = torch.finfo(tdt).bits // 8
        one, fwd, leaves, ups = make_case(name, s, tdt)
        if name == "swiglu_backward":
            nbytes = s["rows"] * s["cols"] * 5 * es
        elif name == "softmax_backward":
            nbytes = s["rows"] * s["cols"] * 3 * es
        elif name == "ragged_softmax_backward":
            nbytes = s["total"] * s["cols"] * 3 * es
            lens = RAGGED_LENS[(s["total"], s["seqs"])]
            cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
            ragged = dict(cu_seqlens=cu.data_ptr(), batch=len(lens), total=s["total"],
                          max_seqlen=max(lens), cols=s["cols"])
        else:
            nbytes = s["total"] * (s["hq"] + s["hkv"]) * s["d"] * 2 * es
        nsets = max(2, min(args.max_sets, -(-3 * l2 // max(1, nbytes))))
        sets = [one] + [make_case(name, s, tdt)[0] for _ in range(nsets - 1)]
        for st in sets:  # the forward's outputs, and the eager graphs (built once per set)
            lv = [st[n].detach().clone().requires_grad_(True) for n in leaves]
            out = fwd(*lv)
            st["leaves"], st["out"] = lv, out if isinstance(out, tuple) else (out,)
            if name in ("softmax_backward", "ragged_softmax_backward"):
                st["y"] = st["out"][0].detach()
            st["grads"] = [torch.full_like(st[n], float("nan")) for n in leaves]

        def scree_bwd(i, st=None):
            st = st or sets[i % nsets]
            if name == "swiglu_backward":
                R, F = s["rows"], s["cols"]
                a = SwigluBwdArgs(gate=st["gu"].data_ptr(), dy=st["dy"].data_ptr(),
                                  dgate=st["grads"][0].data_ptr(), rows=R, cols=F, dtype=code,
                                  dy_dtype=code)
                return calls[name](ctx, ctypes.byref(a), None)
            if name == "softmax_backward":
                a = SoftmaxBwdArgs(y=st["y"].data_ptr(), dy=st["dy"].data_ptr(),
                                   dx=st["grads"][0].data_ptr(), rows=s["rows"], cols=s["cols"],
                                   y_dtype=code, dy_dtype=code)
                return calls[name](ctx, ctypes.byref(a), None)
            if name == "ragged_softmax_backward":
                a = RaggedSoftmaxBwdArgs(y=st["y"].data_ptr(), dy=st["dy"].data_ptr(),
                                         dx=st["grads"][0].data_ptr(), y_dtype=code,
                                         dy_dtype=code, **ragged)
                return calls[name](ctx, ctypes.byref(a), None)
            g = st["grads"]
            return calls[name](ctx, ctypes.byref(rope_args(st, g[0], g[1])), None)

        def rope_args(st, q, k):
            cu = st.setdefault("cu", torch.tensor([0, s["total"]], dtype=torch.int32, device="cuda"))
            return RopeArgs(q=q.data_ptr(), k=k.data_ptr(), cu_seqlens=cu.data_ptr(),
                            total=s["total"], batch=1, heads_q=s["hq"], heads_kv=s["hkv"],
                            head_dim=s["d"], dtype=code)

        def scree_fwd(i):
            st = sets[i % nsets]
            if name == "swiglu_backward":
                a = SwigluArgs(gate=st["gu"].data_ptr(), y=st["out"][0].data_ptr(),
                               rows=s["rows"], cols=s["cols"], dtype=code, y_dtype=code)
                return calls["swiglu"](ctx, ctypes.byref(a), None)
            if name == "softmax_backward":
                a = SoftmaxArgs(x=st["x"].data_ptr(), y=st["y"].data_ptr(), rows=s["rows"],
                                cols=s["cols"], x_dtype=code, y_dtype=code)
                return calls["softmax"](ctx, ctypes.byref(a), None)
            if name == "ragged_softmax_backward":
                a = RaggedSoftmaxArgs(x=st["x"].data_ptr(), y=st["y"].data_ptr(), x_dtype=code,
                                      y_dtype=code, **ragged)
                return calls["ragged_softmax"](ctx, ctypes.byref(a), None)
            return calls["rope"](ctx, ctypes.byref(rope_args(st, st["q"], st["k"])), None)

        # The check: scree's gradients against float64 autograd on set 0.
        if name == "rope_backward":
            for j, n in enumerate(ups):  # in place: the gradients start as dy
                sets[0]["grads"][j].copy_(sets[0][n])
        rc = scree_bwd(0, sets[0])
        torch.cuda.synchronize()
        lv64 = [sets[0][n].detach().double().requires_grad_(True) for n in leaves]
        if name == "rope_backward":
            c64, s64 = sets[0]["cos"].double(), sets[0]["sin"].double()
            out64 = (rope_torch(lv64[0], c64, s64), rope_torch(lv64[1], c64, s64))
        elif name == "softmax_backward":
            out64 = (torch.softmax(lv64[0], -1),)
        elif name == "ragged_softmax_backward":
            out64 = (fwd(lv64[0]),)
        else:
            out64 = (fwd(lv64[0]),)
        ref = torch.autograd.grad(out64, lv64, [sets[0][n].double() for n in ups])
        tol = dict(fp16=1e-2, bf16=4e-2, fp32=1e-4)[dname]
        err = max(((g.double() - r).abs().max() / max(1e-30, r.abs().max())).item()
                  for g, r in zip(sets[0]["grads"], ref))
        ok = rc == 0 and err <= tol and not any(g.isnan().any().item() for g in sets[0]["grads"])
        if not ok:
            failed.append(f"{name} {s} {dname}: status {rc}, max rel error {err:.3g} (tol {tol})")

        def eager_bwd(i):
            st = sets[i % nsets]
            torch.autograd.grad(st["out"], st["leaves"], [st[n] for n in ups], retain_graph=True)

        def eager_fb(i):
            st = sets[i % nsets]
            lv = [st[n].detach().requires_grad_(True) for n in leaves]
            out = fwd(*lv)
            torch.autograd.grad(out if isinstance(out, tuple) else (out,), lv,
                                [st[n] for n in ups])

        lig = liger_fn(name)
        liger_b = liger_fb = None
        if lig is not None:
            try:
                if name == "swiglu_backward":
                    F = s["cols"]

                    def liger_fb(i):
                        st = sets[i % nsets]
                        a = st["gu"][:, :F].detach().requires_grad_(True)
                        b = st["gu"][:, F:].detach().requires_grad_(True)
                        torch.autograd.grad(lig.apply(a, b), (a, b), st["dy"])
                elif name == "rope_backward":
                    def liger_fb(i):  # Liger's layout: [B, H, T, d]
                        st = sets[i % nsets]
                        q = st["q"].transpose(0, 1)[None].detach().requires_grad_(True)
                        k = st["k"].transpose(0, 1)[None].detach().requires_grad_(True)
                        oq, ok_ = lig.apply(q, k, st["cos"][None].to(tdt), st["sin"][None].to(tdt))
                        torch.autograd.grad((oq, ok_), (q, k), (st["dq"].transpose(0, 1)[None],
                                                                st["dk"].transpose(0, 1)[None]))
                else:
                    def liger_fb(i):
                        st = sets[i % nsets]
                        x = st["x"].detach().requires_grad_(True)
                        torch.autograd.grad(lig.apply(x), (x,), st["dy"])
                liger_fb(0)
                torch.cuda.synchronize()
            except Exception as e:  # an API this script does not know
                print(f"  liger {name}: n/a ({type(e).__name__}: {e})")
                liger_fb = None

        csrc = [torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda") for _ in range(nsets)]
        cdst = [torch.empty_like(c) for c in csrc]
        t = dict(scree=time_batched(scree_bwd, reps, inner, warmup),
                 eager=time_batched(eager_bwd, reps, inner, warmup),
                 scree_fb=time_batched(lambda i: (scree_fwd(i), scree_bwd(i)), reps, inner, warmup),
                 eager_fb=time_batched(eager_fb, reps, inner, warmup),
                 copy=time_batched(lambda i: cdst[i % nsets].copy_(csrc[i % nsets]), reps, inner,
                                   warmup),
                 liger_fb=time_batched(liger_fb, reps, inner, warmup) if liger_fb else None,
                 liger=liger_b)
        del csrc, cdst, sets
        us = {k: (v * 1e3 if v else None) for k, v in t.items()}
        fmt = lambda v: f"{v:9.1f}" if v else f"{'n/a':>9}"
        shape = ",".join(f"{k}={v}" for k, v in s.items())
        xe = us["eager_fb"] / us["scree_fb"]
        xl = us["liger_fb"] / us["scree_fb"] if us["liger_fb"] else None
        print(f"{name:17} {shape:28} {dname:4} {nbytes / 1e6:6.0f} {fmt(us['scree'])} "
              f"{fmt(us['eager'])} {fmt(us['liger'])} {us['copy']:7.1f} "
              f"{100 * us['copy'] / us['scree']:5.1f}% {fmt(us['scree_fb'])} {fmt(us['eager_fb'])} "
              f"{fmt(us['liger_fb'])} {xe:7.2f} {xl if xl is None else round(xl, 2)!s:>7}"
              f"{'' if ok else '  CHECK FAILED'}")
        results.append(dict(op=name, shape=s, dtype=dname, bytes=nbytes, max_rel_err=err, ok=ok,
                            **{k + "_us": v for k, v in us.items()}))
    if failed:
        print("\n".join(["scree's gradients differ from the float64 reference:"] + failed))
        sys.exit(1)
    return results
