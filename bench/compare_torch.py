#!/usr/bin/env python3
"""Side-by-side: scree's RMSNorm (through the C API, with ctypes) against
torch.nn.functional.rms_norm, on the same tensors, in one process, on one GPU.

    python3 bench/compare_torch.py [--lib build/libscree.so] [--reps 100]

Method: both read the same x and w and write y (separate outputs, checked
against each other and against a float64 PyTorch reference). CUDA events
around each call on the current stream, 10 warm-up calls, median of --reps,
inputs rotated over enough copies to exceed 3x the L2 cache. Bytes counted:
x read, w read, y written. The copy ceiling is a device-to-device copy of
1 GiB measured in the same run (bytes read + written).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"fp16": (torch.float16, 1), "bf16": (torch.bfloat16, 2), "fp32": (torch.float32, 0)}


class RmsArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint64), ("w", ctypes.c_uint64), ("y", ctypes.c_uint64),
                ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("x_stride", ctypes.c_int64), ("y_stride", ctypes.c_int64),
                ("x_dtype", ctypes.c_int), ("w_dtype", ctypes.c_int), ("y_dtype", ctypes.c_int),
                ("eps", ctypes.c_float)]


def load_scree(path):
    lib = ctypes.CDLL(path)
    lib.scree_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.c_char_p, ctypes.c_size_t]
    lib.scree_create.restype = ctypes.c_int
    lib.scree_rmsnorm.argtypes = [ctypes.c_void_p, ctypes.POINTER(RmsArgs), ctypes.c_void_p]
    lib.scree_rmsnorm.restype = ctypes.c_int
    lib.scree_last_error.argtypes = [ctypes.c_void_p]
    lib.scree_last_error.restype = ctypes.c_char_p
    lib.scree_version.restype = ctypes.c_char_p
    lib.scree_destroy.argtypes = [ctypes.c_void_p]
    ctx = ctypes.c_void_p()
    why = ctypes.create_string_buffer(1024)
    st = lib.scree_create(None, ctypes.byref(ctx), why, len(why))
    if st != 0:
        sys.exit(f"scree_create failed ({st}): {why.value.decode()}")
    return lib, ctx


def time_events(fn, reps, warmup=10):
    times = []
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for i in range(warmup + reps):
        start.record()
        fn(i)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times) * 1e3  # microseconds


def copy_bandwidth(reps=30):
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
    b = torch.empty_like(a)
    us = time_events(lambda i: b.copy_(a), reps, warmup=5)
    del a, b
    return 2 * (1 << 30) / (us * 1e-6) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "libscree.so"))
    ap.add_argument("--shapes", default=os.path.join(HERE, "rowwise_shapes.json"))
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json", help="write results here as JSON")
    args = ap.parse_args()

    lib, ctx = load_scree(args.lib)
    spec = json.load(open(args.shapes))
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    copy_gbps = copy_bandwidth()
    print(f"device: {props.name}, torch {torch.__version__}, scree {lib.scree_version().decode()}")
    print(f"copy bandwidth (read + write): {copy_gbps:.0f} GB/s\n")
    print(f"{'shape':<14} {'dtype':<5} {'scree us':>9} {'torch us':>9} {'scree GB/s':>10} "
          f"{'torch GB/s':>10} {'scree %copy':>11} {'torch %copy':>11} {'speedup':>8}")
    results = []
    eps = 1e-6
    for rows, cols in spec["shapes"]:
        for dname in spec["dtypes"]:
            tdt, code = DTYPES[dname]
            nbytes = rows * cols * torch.finfo(tdt).bits // 8
            nsets = min(64, max(1, (3 * l2) // (2 * nbytes) + 1))
            xs = [torch.randn(rows, cols, device="cuda", dtype=tdt) for _ in range(nsets)]
            w = torch.randn(cols, device="cuda", dtype=tdt)
            ys = [torch.empty_like(x) for x in xs]
            stream = torch.cuda.current_stream().cuda_stream
            rargs = RmsArgs(0, w.data_ptr(), 0, rows, cols, 0, 0, code, code, code, eps)

            def scree_call(i):
                rargs.x = xs[i % nsets].data_ptr()
                rargs.y = ys[i % nsets].data_ptr()
                st = lib.scree_rmsnorm(ctx, ctypes.byref(rargs), ctypes.c_void_p(stream))
                if st != 0:
                    sys.exit(f"scree_rmsnorm: {st}: {lib.scree_last_error(ctx).decode()}")

            # Correctness first: both against a float64 reference.
            scree_call(0)
            ref = torch.nn.functional.rms_norm(xs[0].double(), (cols,), w.double(), eps)
            got = ys[0].double()
            tor = torch.nn.functional.rms_norm(xs[0], (cols,), w, eps).double()
            rel = ((got - ref).norm() / ref.norm()).item()
            rel_t = ((tor - ref).norm() / ref.norm()).item()
            tol = 2e-3 if dname == "fp16" else 1.6e-2 if dname == "bf16" else 1e-5
            if not rel < tol:
                sys.exit(f"{rows}x{cols} {dname}: scree rel err {rel:.3g} > {tol}")

            scree_us = time_events(scree_call, args.reps)
            # PyTorch's op allocates its output; time the op alone.
            torch_us = time_events(
                lambda i: torch.nn.functional.rms_norm(xs[i % nsets], (cols,), w, eps), args.reps)
            moved = 2 * nbytes + cols * torch.finfo(tdt).bits // 8
            sg, tg = moved / (scree_us * 1e-6) / 1e9, moved / (torch_us * 1e-6) / 1e9
            print(f"{rows}x{cols:<8} {dname:<5} {scree_us:9.2f} {torch_us:9.2f} {sg:10.0f} {tg:10.0f} "
                  f"{100 * sg / copy_gbps:10.1f}% {100 * tg / copy_gbps:10.1f}% {torch_us / scree_us:7.2f}x")
            results.append(dict(rows=rows, cols=cols, dtype=dname, scree_us=scree_us, torch_us=torch_us,
                                scree_gbps=sg, torch_gbps=tg, copy_gbps=copy_gbps,
                                scree_rel_err=rel, torch_rel_err=rel_t))
            del xs, ys
            torch.cuda.empty_cache()
    if args.json:
        json.dump(dict(device=props.name, copy_gbps=copy_gbps, results=results), open(args.json, "w"), indent=1)
    lib.scree_destroy(ctx)


if __name__ == "__main__":
    main()
