#!/usr/bin/env python3
"""Tuning cost of Triton's autotuner on an RMSNorm with a 24-config space,
the peer for scree's tuning figures (docs/performance.md).

    python3 bench/triton_tuning.py cold    # empty Triton cache: compile + tune
    python3 bench/triton_tuning.py warm    # run again in a new process: warm compile cache
    python3 bench/triton_tuning.py launch  # steady-state host time per launch

Each mode prints one line "triton <mode> <seconds or microseconds>". Run cold
then warm with the same TRITON_CACHE_DIR. Shape: 16384 x 4096 bf16.
"""
import statistics
import sys
import time

t_start = time.perf_counter()
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

t_import = time.perf_counter() - t_start

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w, num_stages=s)
           for b in (4096, 8192) for w in (2, 4, 8, 16) for s in (1, 2, 3)]  # 24


@triton.autotune(configs=CONFIGS, key=["N"])
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row * N + cols, (x * r * w).to(y_ptr.dtype.element_ty), mask=mask)


def call(x, w, y):
    rows, n = x.shape
    rmsnorm_kernel[(rows,)](x, w, y, n, 1e-6)


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "cold"
    rows, n = 16384, 4096
    x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    if mode in ("cold", "warm"):
        t0 = time.perf_counter()
        call(x, w, y)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        ref = torch.nn.functional.rms_norm(x.float(), (n,), w.float(), 1e-6)
        err = ((y.float() - ref).norm() / ref.norm()).item()
        assert err < 1.6e-2, err
        print(f"triton {mode} first call {dt:.3f} s (import {t_import:.2f} s), "
              f"best {rmsnorm_kernel.best_config}")
    else:
        small = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
        ws = torch.randn(256, device="cuda", dtype=torch.bfloat16)
        ys = torch.empty_like(small)
        for _ in range(50):
            call(small, ws, ys)
        torch.cuda.synchronize()
        per = []
        for _ in range(31):
            t0 = time.perf_counter()
            for _ in range(200):
                call(small, ws, ys)
            per.append((time.perf_counter() - t0) / 200 * 1e6)
            torch.cuda.synchronize()
        print(f"triton launch host time {statistics.median(per):.1f} us per call")


if __name__ == "__main__":
    main()
