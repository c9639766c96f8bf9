#!/usr/bin/env python3
"""Host time of one op call through scree's Python binding, beside PyTorch's
own F.rms_norm and a Triton kernel launch, on the same tensors in one run.

    python3 bench/python_overhead.py [--rows 1] [--cols 4096] [--dtype bf16]
                                     [--calls 100] [--rounds 300] [--json OUT]
    python3 bench/python_overhead.py --binding-only     # no GPU: marshaling alone

What is timed is the host: each round issues --calls back-to-back calls
between two perf_counter_ns readings, then waits for the GPU; the figure is
the median over --rounds of the round's time per call. The shape is small
(default 1 x 4096 bf16, a decode step's RMSNorm), so each kernel runs in a
few microseconds and the GPU keeps up with the host: the time is the call's
host cost, not the kernel's. Before timing, every candidate's output is
checked against F.rms_norm.

Rows:
  F.rms_norm             PyTorch's op (dispatcher, its fused CUDA kernel)
  triton rms_norm        a one-program-per-row Triton RMSNorm, launched from
                         Python with its output allocated per call (the usual
                         Triton wrapper)
  triton launch (empty)  a Triton kernel doing nothing, launched with the same
                         arguments: Triton's launch cost alone
  scree.rms_norm         the binding's eager path (checks, torch.empty, one
                         packed struct, one ctypes call on the current stream)
  torch.ops.scree.rms_norm  the same op through the dispatcher (what
                         torch.compile and tensor subclasses take)
  ctypes call only       scree_rmsnorm with pre-packed arguments (the C call
                         and ctypes, without Python-side work)

--binding-only measures the marshaling choices on the CPU (no GPU): a packed
struct.Struct against a ctypes.Structure, and a ctypes call of scree_rmsnorm
with a NULL context (which returns at once), as docs/python.md quotes.
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def host_time(fn, calls, rounds, sync):
    for _ in range(20):
        fn()
    sync()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter_ns()
        sync()
        per_call.append((t1 - t0) / calls / 1e3)
    return statistics.median(per_call)


def binding_only(calls, rounds):
    from scree import _lib
    L = _lib.lib()
    packer = _lib.PACKERS["scree_rmsnorm_args"]

    ctype = {"Q": ctypes.c_uint64, "q": ctypes.c_int64, "i": ctypes.c_int, "f": ctypes.c_float}

    class RmsArgs(ctypes.Structure):
        _fields_ = [(n, ctype[c]) for n, c in _lib.ARG_STRUCTS["scree_rmsnorm_args"]]

    vals = (1 << 40, 2 << 40, 3 << 40, 1, 4096, 0, 0, 2, 2, 2, 1e-6, 0)
    names = [n for n, _ in RmsArgs._fields_]
    f_struct = L.scree_rmsnorm  # argtypes (void *, char *, void *)
    f_ptr = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(RmsArgs),
                             ctypes.c_void_p)(ctypes.cast(L.scree_rmsnorm, ctypes.c_void_p).value)
    packed = packer.pack(*vals)
    rows = [
        ("struct.Struct.pack (11 fields)", lambda: packer.pack(*vals)),
        ("ctypes.Structure(*fields)", lambda: RmsArgs(*vals)),
        ("ctypes.Structure, fields by name", lambda: RmsArgs(**dict(zip(names, vals)))),
        ("ctypes call, packed bytes", lambda: f_struct(None, packed, None)),
        ("ctypes call, byref(Structure)", lambda: f_ptr(None, ctypes.byref(RmsArgs(*vals)), None)),
        ("pack + ctypes call", lambda: f_struct(None, packer.pack(*vals), None)),
    ]
    out = {}
    for name, fn in rows:
        out[name] = host_time(fn, calls, rounds, lambda: None)
        print(f"{name:36s} {out[name]:7.3f} us")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--json")
    p.add_argument("--binding-only", action="store_true")
    args = p.parse_args()
    if args.binding_only:
        res = binding_only(args.calls, args.rounds)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0

    import torch
    import torch.nn.functional as F
    import scree
    from scree import _lib
    if not torch.cuda.is_available():
        print("python_overhead: needs a CUDA GPU (or --binding-only)", file=sys.stderr)
        return 2
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    dev = torch.device("cuda")
    x = torch.randn(args.rows, args.cols, device=dev, dtype=dtype)
    w = torch.randn(args.cols, device=dev, dtype=dtype)
    eps = 1e-6
    D = args.cols
    sync = torch.cuda.synchronize

    rows = [("F.rms_norm", lambda: F.rms_norm(x, [D], w, eps))]
    # Triton resolves the names a kernel uses among its module's globals.
    global triton, tl
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def rms_kernel(X, W, Y, stride, n, eps, BLOCK: tl.constexpr):
            row = tl.program_id(0)
            offs = tl.arange(0, BLOCK)
            m = offs < n
            xv = tl.load(X + row * stride + offs, mask=m, other=0.0).to(tl.float32)
            wv = tl.load(W + offs, mask=m, other=0.0).to(tl.float32)
            r = tl.rsqrt(tl.sum(xv * xv, 0) / n + eps)
            tl.store(Y + row * stride + offs, (xv * r * wv).to(Y.dtype.element_ty), mask=m)

        @triton.jit
        def empty_kernel(X, W, Y, stride, n, eps, BLOCK: tl.constexpr):
            pass

        block = triton.next_power_of_2(D)

        def triton_rms():
            y = torch.empty_like(x)
            rms_kernel[(x.shape[0],)](x, w, y, x.stride(0), D, eps, BLOCK=block)
            return y

        y_empty = torch.empty_like(x)

        def triton_empty():
            empty_kernel[(x.shape[0],)](x, w, y_empty, x.stride(0), D, eps, BLOCK=block)

        rows += [("triton rms_norm", triton_rms), ("triton launch (empty)", triton_empty)]
        triton_version = triton.__version__
    except ImportError as e:
        triton_version = f"not available ({e})"

    rows.append(("scree.rms_norm", lambda: scree.rms_norm(x, [D], w, eps)))
    rows.append(("torch.ops.scree.rms_norm", lambda: torch.ops.scree.rms_norm(x, [D], w, eps)))
    y_pre = torch.empty_like(x)
    dt = {torch.bfloat16: 2, torch.float16: 1, torch.float32: 0}[dtype]
    packed = _lib.PACKERS["scree_rmsnorm_args"].pack(x.data_ptr(), w.data_ptr(), y_pre.data_ptr(),
                                                     x.shape[0], D, 0, 0, dt, dt, dt, eps)
    ctx = scree._context.context(x.get_device())
    stream = torch.cuda.current_stream().cuda_stream
    entry = _lib.lib().scree_rmsnorm
    rows.append(("ctypes call only", lambda: entry(ctx, packed, stream)))

    # Check every candidate's output before timing.
    want = F.rms_norm(x, [D], w, eps).float()
    for name, fn in rows:
        if "empty" in name:
            continue
        got = fn()
        got = y_pre if got is None or isinstance(got, int) else got
        sync()
        err = (got.float() - want).abs().max().item()
        if err > 0.05:
            print(f"{name}: output differs from F.rms_norm by {err}", file=sys.stderr)
            return 1

    print(f"host time per call, median of {args.rounds} rounds of {args.calls} calls; "
          f"x [{args.rows}, {D}] {args.dtype}")
    print(f"torch {torch.__version__}, triton {triton_version}, scree {scree.__version__}, "
          f"python {sys.version.split()[0]}, {torch.cuda.get_device_name()}")
    res = {}
    for name, fn in rows:
        res[name] = host_time(fn, args.calls, args.rounds, sync)
        print(f"{name:28s} {res[name]:8.2f} us")
    met = res["scree.rms_norm"] < res["F.rms_norm"]
    print(f"target (scree.rms_norm below F.rms_norm): "
          f"{'met' if met else 'NOT met'} ({res['scree.rms_norm']:.2f} us vs "
          f"{res['F.rms_norm']:.2f} us)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"us_per_call": res, "target_met": met, "torch": torch.__version__,
                       "triton": triton_version, "shape": [args.rows, D], "dtype": args.dtype},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
