"""The norm backwards against PyTorch and Liger-Kernel, for bench/compare_torch.py
(--op norm-backward).

Ops: scree_rmsnorm_backward, scree_add_rmsnorm_backward (with dh_next) and
scree_layernorm_backward (with db), on the shapes of bench/rowwise_shapes.json
(rows x cols) in its first dtype, w of the same dtype.

Each case runs on the same tensors, in one process on one GPU:
- scree: the backward alone (saved statistics given: the forward's rstd, and
  mean for LayerNorm, computed once per input set), and forward + backward
  (scree_rmsnorm / scree_add_rmsnorm / scree_layernorm writing rstd (and
  mean), then the backward reading them);
- PyTorch eager autograd of the same op (F.rms_norm; x + r then F.rms_norm;
  F.layer_norm): torch.autograd.grad of a graph built once (backward alone,
  retain_graph), and the forward and the grad together;
- Liger-Kernel's autograd functions where it has the op (LigerRMSNormFunction,
  LigerFusedAddRMSNormFunction, LigerLayerNormFunction), alone and with their
  forward; "n/a" when liger_kernel is not importable or lacks the op;
- a device copy of the backward's bytes (x, dy (, dh_next) read once, dx
  written once; dw, db and the statistics not counted).

Timing as the row-wise table (bench/rowwise_torch.py): CUDA events around
--inner back-to-back calls, --warmup rounds, median of --reps, inputs rotated
over enough sets to exceed 3x the L2. scree's dx (dh), dw (and db) are checked
against a float64 PyTorch reference first (relative L2 error under the dtype's
tolerance; dw's over the sum of the terms' magnitudes); a wrong answer stops
the run.
"""
import ctypes
import sys

torch = None
F = None

DT = {"fp32": 0, "fp16": 1, "bf16": 2}
TOL = {"fp16": 2e-3, "bf16": 1.6e-2, "fp32": 1e-5}
I64, U64, I32, FL = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_float


def S(name, fields):
    return type(name, (ctypes.Structure,), {"_fields_": fields})


# Field for field as include/scree.h declares them.
RmsArgs = S("RmsArgs", [("x", U64), ("w", U64), ("y", U64), ("rows", I64), ("cols", I64),
                        ("x_stride", I64), ("y_stride", I64), ("x_dtype", I32), ("w_dtype", I32),
                        ("y_dtype", I32), ("eps", FL), ("rstd", U64)])
LnArgs = S("LnArgs", [("x", U64), ("w", U64), ("b", U64), ("y", U64), ("mean", U64), ("rstd", U64),
                      ("rows", I64), ("cols", I64), ("x_stride", I64), ("y_stride", I64),
                      ("x_dtype", I32), ("w_dtype", I32), ("y_dtype", I32), ("eps", FL)])
AddRmsArgs = S("AddRmsArgs", [("x", U64), ("residual", U64), ("w", U64), ("h", U64), ("y", U64),
                              ("rows", I64), ("cols", I64), ("x_stride", I64),
                              ("residual_stride", I64), ("h_stride", I64), ("y_stride", I64),
                              ("x_dtype", I32), ("w_dtype", I32), ("y_dtype", I32), ("eps", FL),
                              ("rstd", U64)])
RmsBwdArgs = S("RmsBwdArgs", [("x", U64), ("w", U64), ("dy", U64), ("rstd", U64), ("dx", U64),
                              ("dw", U64), ("rows", I64), ("cols", I64), ("x_stride", I64),
                              ("dy_stride", I64), ("dx_stride", I64), ("x_dtype", I32),
                              ("w_dtype", I32), ("y_dtype", I32), ("eps", FL)])
AddRmsBwdArgs = S("AddRmsBwdArgs", [("h", U64), ("w", U64), ("dy", U64), ("dh_next", U64),
                                    ("rstd", U64), ("dh", U64), ("dw", U64), ("rows", I64),
                                    ("cols", I64), ("h_stride", I64), ("dy_stride", I64),
                                    ("dh_next_stride", I64), ("dh_stride", I64),
                                    ("x_dtype", I32), ("w_dtype", I32), ("y_dtype", I32),
                                    ("eps", FL)])
LnBwdArgs = S("LnBwdArgs", [("x", U64), ("w", U64), ("dy", U64), ("mean", U64), ("rstd", U64),
                            ("dx", U64), ("dw", U64), ("db", U64), ("rows", I64), ("cols", I64),
                            ("x_stride", I64), ("dy_stride", I64), ("dx_stride", I64),
                            ("x_dtype", I32), ("w_dtype", I32), ("y_dtype", I32), ("eps", FL)])

OPS = ("rmsnorm_backward", "add_rmsnorm_backward", "layernorm_backward")
FWD = {"rmsnorm_backward": ("rmsnorm", RmsArgs), "add_rmsnorm_backward": ("add_rmsnorm", AddRmsArgs),
       "layernorm_backward": ("layernorm", LnArgs)}
BWD = {"rmsnorm_backward": RmsBwdArgs, "add_rmsnorm_backward": AddRmsBwdArgs,
       "layernorm_backward": LnBwdArgs}


def tdt(name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def liger_fn(op):
    """Liger-Kernel's autograd function for op, or None."""
    try:
        if op == "rmsnorm_backward":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            return lambda x, r, w, b, eps: LigerRMSNormFunction.apply(x, w, eps)
        if op == "add_rmsnorm_backward":
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
            return lambda x, r, w, b, eps: LigerFusedAddRMSNormFunction.apply(x, r, w, eps)
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction
        return lambda x, r, w, b, eps: LigerLayerNormFunction.apply(x, w, b, eps)
    except Exception:  # not installed, or no such op in this version
        return None


def eager_fwd(op, x, r, w, b, eps, C):
    if op == "rmsnorm_backward":
        return F.rms_norm(x, (C,), w, eps)
    if op == "add_rmsnorm_backward":
        h = x + r
        return F.rms_norm(h, (C,), w, eps), h
    return F.layer_norm(x, (C,), w, b, eps)


def reference(op, x, r, w, dy, dn, eps):
    """float64 gradients of the op at x (h for add) with dy (and dh_next)."""
    x64 = x.double().requires_grad_(True)
    w64 = w.double().requires_grad_(True)
    C = x.shape[-1]
    if op == "layernorm_backward":
        y = F.layer_norm(x64, (C,), w64, None, eps)
    else:
        y = F.rms_norm(x64, (C,), w64, eps)
    gx, gw = torch.autograd.grad(y, (x64, w64), dy.double())
    if op == "add_rmsnorm_backward":
        gx = gx + dn.double()
    db = dy.double().sum(0) if op == "layernorm_backward" else None
    return gx, gw, db


def close(got, want, tol, scale=None):
    err = (got.double() - want).norm().item()
    ref = (scale if scale is not None else want.norm().item()) or 1.0
    return err / ref <= tol, err / ref


def run(args, lib, ctx, spec, l2, time_batched, copy_gbps):
    """Every case; returns the results (dicts). Exits on a wrong answer."""
    global torch, F
    import torch as _t
    import torch.nn.functional as _F
    torch, F = _t, _F
    fns = {}
    for op in OPS:
        for name, A in ((op, BWD[op]), FWD[op]):
            fn = getattr(lib, "scree_" + name, None)
            if fn is None:
                sys.exit(f"libscree has no scree_{name}: rebuild it")
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(A), ctypes.c_void_p]
            fn.restype = ctypes.c_int
            fns[name] = fn
    stream = torch.cuda.current_stream().cuda_stream
    d = spec["dtypes"][0]
    t, code, es = tdt(d), DT[d], (4 if d == "fp32" else 2)
    print(f"\nnorm backwards vs PyTorch eager autograd and Liger-Kernel ({d}); copy "
          f"{copy_gbps:.0f} GB/s (read + write, 1 GiB, this run)")
    print("bwd: the backward alone; f+b: forward and backward; %same: a copy of the backward's "
          "bytes over scree's backward time")
    hdr = (f"{'op':<21} {'shape':<13} {'MB':>6} {'scree us':>9} {'copy us':>8} {'%same':>6} "
           f"{'eager us':>9} {'liger us':>9} {'f+b scree':>9} {'f+b eager':>9} {'f+b liger':>9} "
           f"{'vs eager':>8} {'vs liger':>8}")
    print(hdr, flush=True)
    results = []
    for op in OPS:
        lig = liger_fn(op)
        for R, C in spec["shapes"]:
            eps = 1e-5 if op == "layernorm_backward" else 1e-6
            nin = 3 if op == "add_rmsnorm_backward" else 2
            nbytes = (nin + 1) * R * C * es
            nsets = max(1, min(args.max_sets, -(-3 * l2 // max(1, nbytes))))
            w = torch.randn(C, device="cuda", dtype=t)
            b = torch.randn(C, device="cuda", dtype=t)
            dw = torch.empty(C, device="cuda", dtype=t)
            db = torch.empty(C, device="cuda", dtype=t)
            sets = []
            for _ in range(nsets):
                s = dict(x=torch.randn(R, C, device="cuda", dtype=t),
                         dy=torch.randn(R, C, device="cuda", dtype=t),
                         dx=torch.full((R, C), float("nan"), device="cuda", dtype=t))
                s["r"] = torch.randn(R, C, device="cuda", dtype=t)
                s["y"] = torch.empty(R, C, device="cuda", dtype=t)
                s["h"] = torch.empty(R, C, device="cuda", dtype=t)
                x32 = s["x"].float()
                if op == "layernorm_backward":
                    s["mean"] = x32.mean(-1)
                    s["rstd"] = torch.rsqrt(x32.var(-1, unbiased=False) + eps)
                else:
                    s["mean"] = None
                    s["rstd"] = torch.rsqrt(x32.pow(2).mean(-1) + eps)
                s["fmean"] = torch.empty(R, device="cuda", dtype=torch.float32)
                s["frstd"] = torch.empty(R, device="cuda", dtype=torch.float32)
                sets.append(s)

            def bwd_args(s):
                A = BWD[op]()
                A.rows, A.cols, A.eps = R, C, eps
                A.x_dtype = A.w_dtype = A.y_dtype = code
                A.w, A.dy, A.dw, A.rstd = w.data_ptr(), s["dy"].data_ptr(), dw.data_ptr(), \
                    s["rstd"].data_ptr()
                if op == "add_rmsnorm_backward":
                    A.h, A.dh_next, A.dh = s["x"].data_ptr(), s["r"].data_ptr(), s["dx"].data_ptr()
                else:
                    A.x, A.dx = s["x"].data_ptr(), s["dx"].data_ptr()
                if op == "layernorm_backward":
                    A.mean, A.db = s["mean"].data_ptr(), db.data_ptr()
                return A

            def fwd_args(s):
                name, FA = FWD[op]
                A = FA()
                A.rows, A.cols, A.eps = R, C, eps
                A.x_dtype = A.w_dtype = A.y_dtype = code
                A.x, A.w, A.y = s["x"].data_ptr(), w.data_ptr(), s["y"].data_ptr()
                if op == "add_rmsnorm_backward":
                    A.residual, A.h = s["r"].data_ptr(), s["h"].data_ptr()
                if op == "layernorm_backward":
                    A.b, A.mean = b.data_ptr(), s["fmean"].data_ptr()
                A.rstd = s["frstd"].data_ptr()
                return A

            bargs = [bwd_args(s) for s in sets]
            fargs = [fwd_args(s) for s in sets]
            # The backward of f+b reads h, the forward's output, for add+RMSNorm.
            fbargs = [bwd_args(s) for s in sets]
            for A, s in zip(fbargs, sets):
                A.rstd = s["frstd"].data_ptr()
                if op == "add_rmsnorm_backward":
                    A.h = s["h"].data_ptr()
                if op == "layernorm_backward":
                    A.mean = s["fmean"].data_ptr()

            def call(name, A):
                st = fns[name](ctx, ctypes.byref(A), ctypes.c_void_p(stream))
                if st != 0:
                    sys.exit(f"scree_{name}: {lib.scree_last_error(ctx).decode()}")

            # Check first.
            s = sets[0]
            call(op, bargs[0])
            torch.cuda.synchronize()
            gx, gw, gb = reference(op, s["x"], s["r"], w, s["dy"], s["r"], eps)
            ok, ex = close(s["dx"], gx, TOL[d] * 4)
            term = (s["dy"].double().abs() * s["x"].double().abs()).sum(0) * s["rstd"].double().mean()
            okw, ew = close(dw, gw, TOL[d] * 4, scale=term.norm().item())
            okb, eb = (True, 0.0) if gb is None else close(db, gb, TOL[d] * 4)
            if not (ok and okw and okb):
                sys.exit(f"{op} {R}x{C} {d}: wrong (dx rel err {ex:.2e}, dw {ew:.2e}, "
                         f"db {eb:.2e})")

            k = len(sets)
            us = time_batched(lambda i: call(op, bargs[i % k]), args.reps, args.inner,
                              args.warmup) * 1e3
            fb_us = time_batched(lambda i: (call(FWD[op][0], fargs[i % k]),
                                            call(op, fbargs[i % k])),
                                 args.reps, args.inner, args.warmup) * 1e3
            half = nbytes // 2
            src = torch.empty(half, device="cuda", dtype=torch.uint8).fill_(1)
            dst = torch.empty_like(src)
            copy_us = time_batched(lambda i: dst.copy_(src), args.reps, args.inner,
                                   args.warmup) * 1e3
            del src, dst

            # PyTorch eager: graphs built once per set (backward alone), or
            # forward and grad together.
            def graphs(fwd):
                gs = []
                for s in sets:
                    x = s["x"].detach().requires_grad_(True)
                    r = s["r"].detach().requires_grad_(True)
                    ww = w.detach().requires_grad_(True)
                    bb = b.detach().requires_grad_(True)
                    out = fwd(x, r, ww, bb)
                    # add+RMSNorm: h also feeds the residual stream, whose
                    # gradient (dh_next) autograd adds to h's.
                    y = list(out) if isinstance(out, tuple) else out
                    ins = (x, r, ww) if op == "add_rmsnorm_backward" else (x, ww)
                    if op == "layernorm_backward":
                        ins = ins + (bb,)
                    gs.append((y, ins, s, (x, r, ww, bb)))
                return gs

            def timed(fwd):
                gs = graphs(fwd)
                def grads(s):
                    return [s["dy"], s["r"]] if op == "add_rmsnorm_backward" else s["dy"]

                bw = time_batched(lambda i: torch.autograd.grad(
                    gs[i % k][0], gs[i % k][1], grads(gs[i % k][2]), retain_graph=True),
                    args.reps, args.inner, args.warmup) * 1e3

                def fb(i):
                    _, ins, s, raw = gs[i % k]
                    out = fwd(*raw)
                    yy = list(out) if isinstance(out, tuple) else out
                    torch.autograd.grad(yy, ins, grads(s))
                fbt = time_batched(fb, args.reps, args.inner, args.warmup) * 1e3
                del gs
                return bw, fbt

            eager_bw, eager_fb = timed(lambda x, r, ww, bb: eager_fwd(op, x, r, ww, bb, eps, C))
            liger_bw = liger_fb = None
            if lig is not None:
                try:
                    liger_bw, liger_fb = timed(lambda x, r, ww, bb: lig(x, r, ww, bb, eps))
                except Exception as e:  # a version whose signature differs
                    print(f"  liger {op}: {type(e).__name__}: {e}")
            res = dict(op=op, rows=R, cols=C, dtype=d, mb=nbytes / 1e6, scree_us=us,
                       copy_us=copy_us, same=copy_us / us, eager_us=eager_bw, liger_us=liger_bw,
                       fb_scree_us=fb_us, fb_eager_us=eager_fb, fb_liger_us=liger_fb,
                       fb_vs_eager=eager_fb / fb_us,
                       fb_vs_liger=(liger_fb / fb_us) if liger_fb else None)
            results.append(res)
            na = lambda v, f="9.1f": "n/a".rjust(int(f[0])) if v is None else format(v, f)
            print(f"{op:<21} {R}x{C:<8} {nbytes / 1e6:6.0f} {us:9.1f} {copy_us:8.1f} "
                  f"{100 * copy_us / us:5.0f}% {eager_bw:9.1f} {na(liger_bw)} {fb_us:9.1f} "
                  f"{eager_fb:9.1f} {na(liger_fb)} {eager_fb / fb_us:7.2f}x "
                  f"{na(res['fb_vs_liger'], '7.2f')}{'' if liger_fb is None else 'x'}",
                  flush=True)
            del sets, bargs, fargs, fbargs
    return results
