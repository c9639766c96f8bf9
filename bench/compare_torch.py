#!/usr/bin/env python3
"""Side-by-side benchmarks of scree against PyTorch: RMSNorm, varlen attention, paged decode.

scree runs through the C API (ctypes) on the same tensors as PyTorch, in one
process, on one GPU: RMSNorm against torch.nn.functional.rms_norm, varlen
attention against FlashAttention-2.

    python3 bench/compare_torch.py [--op rmsnorm|attention|attention-backward|misc-backward|paged|
                                         norm-backward|cross-entropy-backward|all]
                                   [--lib build/libscree.so]
                                   [--reps 100] [--only NAME,...] [--json OUT]

RMSNorm: both read the same x and w and write y (separate outputs, checked
against each other and against a float64 PyTorch reference). CUDA events
around each call on the current stream, 10 warm-up calls, median of --reps,
inputs rotated over enough copies to exceed 3x the L2 cache. Bytes counted:
x read, w read, y written. The copy ceiling is a device-to-device copy of
1 GiB measured in the same run (bytes read + written).

Attention: for every config of bench/attention_configs.json (explicit
seqlens, hq, hkv, d, causal, dtype), q, k, v [T, H, d] random normal on the
GPU and int32 cu_seqlens; FlashAttention-2 varlen is
torch.ops.aten._flash_attention_forward, scree is scree_attention (with lse,
as FA-2 always writes it), both with scale 1/sqrt(d) on the current stream.
scree's first call of each config is timed alone (with SCREE_MISS_POLICY=tune
in the environment it tunes the bucket). Checks, which fail the run: scree's
output against FA-2's (max abs diff <= 2e-2, no NaN, out poisoned with NaN
first), and scree's output and lse against a float32 PyTorch reference on
two sequences (the first and the longest). Timing: CUDA events around
--inner back-to-back calls (host launch latency hidden), --warmup such
rounds, median of --attn-reps; inputs rotated over enough copies of q, k, v
(and outputs) to exceed 3x the L2, at least 2. FLOPs = 4 * hq * d *
sum(L^2), halved when causal; ratio = FA-2 time / scree time (> 1: scree is
faster).

Paged decode (--op paged, --paged-set core|smoke) and paged prefill against
scree_attention on the same data (--paged-set prefill): bench/paged_torch.py.
Attention backward against FlashAttention-2's (--op attention-backward, the
configs of bench/attention_configs.json): bench/attention_backward_torch.py.
Cross-entropy with its gradient in one call against PyTorch eager and
Liger-Kernel (--op cross-entropy-backward): bench/ce_backward_torch.py.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPE_CODES = {"fp32": 0, "fp16": 1, "bf16": 2}
torch = None  # imported in main(), after the arguments are checked


class RmsArgs(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint64), ("w", ctypes.c_uint64), ("y", ctypes.c_uint64),
                ("rows", ctypes.c_int64), ("cols", ctypes.c_int64),
                ("x_stride", ctypes.c_int64), ("y_stride", ctypes.c_int64),
                ("x_dtype", ctypes.c_int), ("w_dtype", ctypes.c_int), ("y_dtype", ctypes.c_int),
                ("eps", ctypes.c_float), ("rstd", ctypes.c_uint64)]


class AttnArgs(ctypes.Structure):
    """scree_attention_args, field for field (scree.h)."""
    _fields_ = [("q", ctypes.c_uint64), ("k", ctypes.c_uint64), ("v", ctypes.c_uint64),
                ("out", ctypes.c_uint64),
                ("lse", ctypes.c_uint64),
                ("cu_seqlens_q", ctypes.c_uint64), ("cu_seqlens_k", ctypes.c_uint64),
                ("batch", ctypes.c_int64), ("total_q", ctypes.c_int64), ("total_k", ctypes.c_int64),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q_token_stride", ctypes.c_int64), ("k_token_stride", ctypes.c_int64),
                ("v_token_stride", ctypes.c_int64), ("out_token_stride", ctypes.c_int64),
                ("q_head_stride", ctypes.c_int64), ("k_head_stride", ctypes.c_int64),
                ("v_head_stride", ctypes.c_int64), ("out_head_stride", ctypes.c_int64),
                ("dtype", ctypes.c_int),  # scree_dtype
                ("causal", ctypes.c_int),
                ("scale", ctypes.c_float),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("softcap", ctypes.c_float)]


# The C layout on x86-64 and aarch64 (offsetof / sizeof from scree.h).
assert ctypes.sizeof(AttnArgs) == 224 and AttnArgs.window_left.offset == 200 and \
    AttnArgs.softcap.offset == 216, "AttnArgs layout"


def torch_dtype(name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def load_scree(path, need_attention):
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        sys.exit(f"cannot load libscree ({path}): {e}\n(build it with scripts/build.sh, or pass --lib)")
    lib.scree_create.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.c_char_p, ctypes.c_size_t]
    lib.scree_create.restype = ctypes.c_int
    lib.scree_rmsnorm.argtypes = [ctypes.c_void_p, ctypes.POINTER(RmsArgs), ctypes.c_void_p]
    lib.scree_rmsnorm.restype = ctypes.c_int
    if need_attention:
        try:
            fn = lib.scree_attention
        except AttributeError:
            sys.exit(f"{path} has no scree_attention: rebuild it, or run with --op rmsnorm")
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(AttnArgs), ctypes.c_void_p]
        fn.restype = ctypes.c_int
    lib.scree_last_error.argtypes = [ctypes.c_void_p]
    lib.scree_last_error.restype = ctypes.c_char_p
    lib.scree_status_name.argtypes = [ctypes.c_int]
    lib.scree_status_name.restype = ctypes.c_char_p
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


def time_batched(fn, reps, inner, warmup):
    """Median over `reps` of the mean time (ms) of `inner` back-to-back calls
    between two CUDA events; fn(i) runs call i (i counts up across all)."""
    i = 0
    for _ in range(warmup * inner):
        fn(i)
        i += 1
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(inner):
            fn(i)
            i += 1
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


def copy_bandwidth(reps=30):
    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(1)
    b = torch.empty_like(a)
    us = time_events(lambda i: b.copy_(a), reps, warmup=5)
    del a, b
    return 2 * (1 << 30) / (us * 1e-6) / 1e9


# ----------------------------------------------------------------------------
# RMSNorm
# ----------------------------------------------------------------------------

def run_rmsnorm(args, lib, ctx, spec, l2):
    copy_gbps = copy_bandwidth()
    print(f"copy bandwidth (read + write): {copy_gbps:.0f} GB/s\n")
    print(f"{'shape':<14} {'dtype':<5} {'scree us':>9} {'torch us':>9} {'scree GB/s':>10} "
          f"{'torch GB/s':>10} {'scree %copy':>11} {'torch %copy':>11} {'speedup':>8}")
    results = []
    eps = 1e-6
    for rows, cols in spec["shapes"]:
        for dname in spec["dtypes"]:
            tdt, code = torch_dtype(dname), DTYPE_CODES[dname]
            nbytes = rows * cols * torch.finfo(tdt).bits // 8
            nsets = min(64, max(1, (3 * l2) // (2 * nbytes) + 1))
            xs = [torch.randn(rows, cols, device="cuda", dtype=tdt) for _ in range(nsets)]
            w = torch.randn(cols, device="cuda", dtype=tdt)
            ys = [torch.empty_like(x) for x in xs]
            stream = torch.cuda.current_stream().cuda_stream
            rargs = RmsArgs(0, w.data_ptr(), 0, rows, cols, 0, 0, code, code, code, eps, 0)

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
    return copy_gbps, results


# ----------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------

def check_attention_configs(configs):
    """Argument checks that need no GPU; exits with a message on a bad config."""
    for c in configs:
        for key in ("name", "seqlens", "hq", "hkv", "d", "causal", "dtype"):
            if key not in c:
                sys.exit(f"attention config {c.get('name', '?')}: missing {key!r}")
        if c["dtype"] not in ("fp16", "bf16"):
            sys.exit(f"attention config {c['name']}: dtype {c['dtype']} (fp16 or bf16)")
        if c["hq"] % c["hkv"]:
            sys.exit(f"attention config {c['name']}: hq {c['hq']} not a multiple of hkv {c['hkv']}")
        if not c["seqlens"] or min(c["seqlens"]) < 0:
            sys.exit(f"attention config {c['name']}: bad seqlens")


def attention_flops(c):
    return 4 * c["hq"] * c["d"] * sum(L * L for L in c["seqlens"]) / (2 if c["causal"] else 1)


def set_fp32_matmul_ieee():
    """float32 matmuls in full precision (no TF32) for the reference."""
    try:
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    except (AttributeError, TypeError, ValueError):
        torch.backends.cuda.matmul.allow_tf32 = False


def reference_attention(q, k, v, s, L, hq, hkv, scale, causal):
    """float32 attention of one sequence (tokens [s, s + L), Lq = Lk = L):
    out [L, hq, d] and lse [hq, L], computed a few heads at a time."""
    group = hq // hkv
    qs = q[s:s + L].float().transpose(0, 1)  # [hq, L, d]
    ks = k[s:s + L].float().transpose(0, 1)  # [hkv, L, d]
    vs = v[s:s + L].float().transpose(0, 1)
    out = torch.empty_like(qs)
    lse = torch.empty(hq, L, device=q.device, dtype=torch.float32)
    mask = None
    if causal:  # bottom-right aligned; with Lq == Lk the usual lower triangle
        idx = torch.arange(L, device=q.device)
        mask = idx[None, :] <= idx[:, None]
    chunk = max(1, (1 << 28) // max(1, L * L))  # <= 1 GiB of scores at a time
    for h0 in range(0, hq, chunk):
        h1 = min(hq, h0 + chunk)
        kv_heads = torch.arange(h0, h1, device=q.device) // group
        sc = torch.matmul(qs[h0:h1], ks[kv_heads].transpose(1, 2)) * scale
        if mask is not None:
            sc.masked_fill_(~mask, float("-inf"))
        lse[h0:h1] = torch.logsumexp(sc, dim=-1)
        out[h0:h1] = torch.matmul(torch.softmax(sc, dim=-1), vs[kv_heads])
        del sc
    return out.transpose(0, 1), lse


def cudnn_padded_call(qs, ks, vs, lens, hq, hkv, causal, scale):
    """cuDNN through SDPA on padded dense batches [B, H, Lmax, d] (what a user
    without varlen runs; K and V heads repeated for GQA beforehand): a call
    maker, or None with the reason where this PyTorch cannot."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except ImportError as e:
        return None, f"no sdpa_kernel ({e})"
    B, L = len(lens), max(lens)
    starts = [0]
    for n in lens[:-1]:
        starts.append(starts[-1] + n)

    def pad(x):
        out = torch.zeros(B, x.shape[1], L, x.shape[2], device=x.device, dtype=x.dtype)
        for b, (s0, n) in enumerate(zip(starts, lens)):
            out[b, :, :n] = x[s0:s0 + n].transpose(0, 1)
        return out

    sets = []
    for q, k, v in list(zip(qs, ks, vs))[:2]:
        kp, vp = pad(k), pad(v)
        if hq != hkv:
            kp = kp.repeat_interleave(hq // hkv, dim=1)
            vp = vp.repeat_interleave(hq // hkv, dim=1)
        sets.append((pad(q), kp, vp))

    def call(i):
        q, k, v = sets[i % len(sets)]
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

    try:
        call(0)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any backend refusal is reported, not fatal
        return None, f"cuDNN SDPA failed: {str(e).splitlines()[0][:120]}"
    return call, None


def flex_document_call(qs, ks, vs, lens, hq, hkv, causal, scale):
    """FlexAttention (torch.compile) on one packed sequence [1, H, T, d] with a
    document (+causal) block mask: a call maker, or None with the reason."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as e:
        return None, f"no flex_attention ({e})"
    T = sum(lens)
    doc = torch.repeat_interleave(torch.arange(len(lens), device="cuda"),
                                  torch.tensor(lens, device="cuda"))

    def mask_mod(b, h, qi, ki):
        same = doc[qi] == doc[ki]
        return (same & (qi >= ki)) if causal else same

    try:
        bm = create_block_mask(mask_mod, None, None, T, T, device="cuda")
        fn = torch.compile(flex_attention)
        sets = [(q.transpose(0, 1).unsqueeze(0).contiguous(), k.transpose(0, 1).unsqueeze(0).contiguous(),
                 v.transpose(0, 1).unsqueeze(0).contiguous()) for q, k, v in list(zip(qs, ks, vs))[:2]]

        def call(i):
            q, k, v = sets[i % len(sets)]
            return fn(q, k, v, block_mask=bm, scale=scale, enable_gqa=hq != hkv)

        call(0)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        return None, f"flex_attention failed: {str(e).splitlines()[0][:120]}"
    return call, None


def run_attention(args, lib, ctx, configs, l2):
    fa = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if fa is None:
        sys.exit("this PyTorch has no torch.ops.aten._flash_attention_forward (FlashAttention-2)")
    set_fp32_matmul_ieee()
    policy = os.environ.get("SCREE_MISS_POLICY", "(unset: the context's default)")
    print(f"\nattention: FlashAttention-2 varlen (aten._flash_attention_forward) vs scree_attention; "
          f"SCREE_MISS_POLICY={policy}")
    stream = torch.cuda.current_stream().cuda_stream
    results = []
    for c in configs:
        lens, hq, hkv, d, causal, dname = (c["seqlens"], c["hq"], c["hkv"], c["d"],
                                           bool(c["causal"]), c["dtype"])
        tdt, code = torch_dtype(dname), DTYPE_CODES[dname]
        T, maxl = sum(lens), max(lens)
        scale = 1.0 / math.sqrt(d)
        flops = attention_flops(c)
        cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        esize = torch.finfo(tdt).bits // 8
        set_bytes = T * (2 * hq + 2 * hkv) * d * esize  # q, k, v read, out written
        nsets = max(2, min(args.max_sets, -(-3 * l2 // max(1, set_bytes))))
        qs = [torch.randn(T, hq, d, device="cuda", dtype=tdt) for _ in range(nsets)]
        ks = [torch.randn(T, hkv, d, device="cuda", dtype=tdt) for _ in range(nsets)]
        vs = [torch.randn(T, hkv, d, device="cuda", dtype=tdt) for _ in range(nsets)]
        outs = [torch.full((T, hq, d), float("nan"), device="cuda", dtype=tdt) for _ in range(nsets)]
        lses = [torch.full((hq, T), float("nan"), device="cuda", dtype=torch.float32)
                for _ in range(nsets)]
        sargs = []
        for i in range(nsets):
            a = AttnArgs()
            a.q, a.k, a.v = qs[i].data_ptr(), ks[i].data_ptr(), vs[i].data_ptr()
            a.out, a.lse = outs[i].data_ptr(), lses[i].data_ptr()
            a.cu_seqlens_q = a.cu_seqlens_k = cu.data_ptr()
            a.batch, a.total_q, a.total_k = len(lens), T, T
            a.max_seqlen_q = a.max_seqlen_k = maxl
            a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
            a.dtype, a.causal, a.scale = code, int(causal), scale
            a.window_left = a.window_right = -1  # strides stay 0: packed [T, H, d]
            sargs.append(a)

        def scree_call(i):
            st = lib.scree_attention(ctx, ctypes.byref(sargs[i % nsets]), ctypes.c_void_p(stream))
            if st != 0:
                sys.exit(f"{c['name']}: scree_attention: {lib.scree_status_name(st).decode()}: "
                         f"{lib.scree_last_error(ctx).decode()}")

        def fa_call(i):
            j = i % nsets
            return fa(qs[j], ks[j], vs[j], cu, cu, maxl, maxl, 0.0, causal, False, scale=scale)

        # First call alone: a cache miss tunes here under SCREE_MISS_POLICY=tune.
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        scree_call(0)
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0

        # Correctness: against FA-2 on the whole batch, and against a float32
        # reference on the first and the longest sequence.
        fo = fa_call(0)
        fa_out, fa_lse = fo[0], fo[1]
        got = outs[0].float()
        nan = bool(torch.isnan(got).any().item()) or bool(torch.isnan(lses[0]).any().item())
        diff_fa = (got - fa_out.float()).abs().max().item() if T else 0.0
        lse_diff_fa = None
        if tuple(fa_lse.shape) == (hq, T):
            lse_diff_fa = (lses[0] - fa_lse.float()).abs().max().item() if T else 0.0
        starts = [0]
        for L in lens[:-1]:
            starts.append(starts[-1] + L)
        picks = sorted({0, max(range(len(lens)), key=lambda b: lens[b])})
        diff_ref = diff_ref_fa = lse_diff_ref = 0.0
        for b in picks:
            if lens[b] == 0:
                continue
            ro, rl = reference_attention(qs[0], ks[0], vs[0], starts[b], lens[b], hq, hkv, scale, causal)
            sl = slice(starts[b], starts[b] + lens[b])
            diff_ref = max(diff_ref, (outs[0][sl].float() - ro).abs().max().item())
            diff_ref_fa = max(diff_ref_fa, (fa_out[sl].float() - ro).abs().max().item())
            lse_diff_ref = max(lse_diff_ref, (lses[0][:, sl] - rl).abs().max().item())
            del ro, rl
        del fo, fa_out, fa_lse, got
        lse_fa_txt = f"{lse_diff_fa:.1e}" if lse_diff_fa is not None else "n/a"
        print(f"{c['name']}: {len(lens)} seqs, {T} tokens, hq={hq} hkv={hkv} d={d} {dname} "
              f"causal={int(causal)}; scree first call {first_s:.3f} s; max |scree - FA-2| "
              f"{diff_fa:.2e} (lse {lse_fa_txt}); vs float32 reference on seqs {picks}: scree "
              f"{diff_ref:.2e} (lse {lse_diff_ref:.1e}), FA-2 {diff_ref_fa:.2e}", flush=True)
        tol = 2e-2
        if nan or not diff_fa <= tol or not diff_ref <= tol or not lse_diff_ref <= 1e-2:
            sys.exit(f"FAIL {c['name']}: scree's attention is wrong (NaN: {nan}, max diff vs FA-2 "
                     f"{diff_fa:.3g}, vs float32 reference {diff_ref:.3g}, lse vs reference "
                     f"{lse_diff_ref:.3g}; limits {tol} and 1e-2)")

        fa_ms = time_batched(fa_call, args.attn_reps, args.inner, args.warmup)
        scree_ms = time_batched(scree_call, args.attn_reps, args.inner, args.warmup)
        peers = {}
        for pname in [p for p in (args.peers or "").split(",") if p]:
            maker = {"flex": flex_document_call, "cudnn": cudnn_padded_call}.get(pname)
            if maker is None:
                sys.exit(f"--peers: unknown peer {pname} (flex, cudnn)")
            call, why = maker(qs, ks, vs, lens, hq, hkv, causal, scale)
            if call is None:
                print(f"  {pname}: n/a ({why})", flush=True)
                peers[pname] = None
            else:
                peers[pname] = time_batched(call, args.attn_reps, args.inner, args.warmup)
            del call
            torch.cuda.empty_cache()
        r = dict(name=c["name"], nseqs=len(lens), tokens=T, hq=hq, hkv=hkv, d=d, causal=causal,
                 dtype=dname, flops=flops, fa2_ms=fa_ms, fa2_tflops=flops / fa_ms / 1e9,
                 scree_ms=scree_ms, scree_tflops=flops / scree_ms / 1e9, ratio=fa_ms / scree_ms,
                 scree_first_call_s=first_s, miss_policy=os.environ.get("SCREE_MISS_POLICY"),
                 maxdiff_vs_fa2=diff_fa, lse_maxdiff_vs_fa2=lse_diff_fa,
                 maxdiff_vs_ref=diff_ref, fa2_maxdiff_vs_ref=diff_ref_fa,
                 lse_maxdiff_vs_ref=lse_diff_ref, ref_seqs=picks, input_sets=nsets,
                 inner=args.inner, reps=args.attn_reps)
        for pname, ms in peers.items():
            r[pname + "_ms"] = ms
            r[pname + "_tflops"] = flops / ms / 1e9 if ms else None
        results.append(r)
        print(f"  FA-2 {fa_ms:.3f} ms {r['fa2_tflops']:.1f} TFLOP/s, scree {scree_ms:.3f} ms "
              f"{r['scree_tflops']:.1f} TFLOP/s, ratio {r['ratio']:.3f} ({nsets} input sets)"
              + "".join(f", {p} {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s" for p, ms in peers.items()
                        if ms), flush=True)
        del qs, ks, vs, outs, lses, sargs
        torch.cuda.empty_cache()

    print(f"\n{'config':<20} {'FA-2 ms':>9} {'FA-2 TF/s':>10} {'scree ms':>9} {'scree TF/s':>11} "
          f"{'ratio':>7} {'first call s':>13}")
    for r in results:
        print(f"{r['name']:<20} {r['fa2_ms']:9.3f} {r['fa2_tflops']:10.1f} {r['scree_ms']:9.3f} "
              f"{r['scree_tflops']:11.1f} {r['ratio']:7.3f} {r['scree_first_call_s']:13.3f}")
    for pname in [p for p in (args.peers or "").split(",") if p]:
        print(f"\n{'config':<20} {pname + ' ms':>10} {pname + ' TF/s':>12} {'scree/' + pname:>12}")
        for r in results:
            ms = r.get(pname + "_ms")
            if ms:
                print(f"{r['name']:<20} {ms:10.3f} {r[pname + '_tflops']:12.1f} "
                      f"{ms / r['scree_ms']:12.3f}")
            else:
                print(f"{r['name']:<20} {'n/a':>10}")
    print("(ratio = FA-2 time / scree time: > 1 means scree is faster; flex and cudnn columns: "
          "peer time / scree time; cuDNN's TFLOP/s count only the useful work of its padded batch)")
    return results


# ----------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", default="all",
                    help="rmsnorm (the RMSNorm table), attention, attention-backward, "
                         "misc-backward (SwiGLU, softmax, ragged softmax, RoPE backward), paged, "
                         "norm-backward (the norm backwards against eager autograd and Liger), "
                         "cross-entropy-backward (the fused loss and gradient), "
                         "rowwise (every row-wise op against eager and torch.compile), one "
                         "row-wise op's name, or all")
    ap.add_argument("--lib", default=os.path.join(HERE, "..", "build", "libscree.so"))
    ap.add_argument("--shapes", default=os.path.join(HERE, "rowwise_shapes.json"),
                    help="RMSNorm shapes and dtypes")
    ap.add_argument("--reps", type=int, default=100, help="RMSNorm: timed calls (median)")
    ap.add_argument("--attn-configs", default=os.path.join(HERE, "attention_configs.json"))
    ap.add_argument("--only", help="attention: comma-separated config names")
    ap.add_argument("--peers", default="",
                    help="attention: more peers timed on the same inputs, comma-separated: flex "
                         "(FlexAttention, document mask, torch.compile), cudnn (SDPA's cuDNN "
                         "backend on padded batches)")
    ap.add_argument("--attn-reps", type=int, default=30, help="attention: measurements (median)")
    ap.add_argument("--inner", type=int, default=10, help="attention: back-to-back calls per measurement")
    ap.add_argument("--warmup", type=int, default=3, help="attention: warm-up measurements")
    ap.add_argument("--max-sets", type=int, default=16, help="attention: most input copies rotated")
    ap.add_argument("--json", help="write results here as JSON")
    ap.add_argument("--rowwise-ops", help="row-wise table: only these ops (comma-separated; "
                    "rmsnorm included, timed as the others are)")
    ap.add_argument("--paged-set", default="core",
                    help="paged: the case list (core: the decode table; smoke: four; prefill: "
                         "paged against contiguous scree_attention on prefill batches)")
    ap.add_argument("--graphs", action="store_true",
                    help="paged decode: also time each side as a CUDA graph of --inner calls "
                         "(replayed; no host time per call, as a serving engine runs decode)")
    ap.add_argument("--no-compile", action="store_true",
                    help="row-wise table: leave torch.compile out (quicker A/B runs)")
    args = ap.parse_args()
    for name in ("reps", "attn_reps", "inner", "max_sets"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    sys.path.insert(0, HERE)
    import rowwise_torch
    import paged_torch
    import attention_backward_torch
    import ce_backward_torch
    import misc_backward_torch
    import norm_backward_torch
    if (args.op not in ("rmsnorm", "attention", "attention-backward", "misc-backward", "rowwise",
                        "paged", "all", "cross-entropy-backward", "norm-backward")
            and args.op not in rowwise_torch.OPS):
        ap.error(f"--op: unknown {args.op!r}; rmsnorm, attention, attention-backward, "
                 f"misc-backward, norm-backward, rowwise, "
                 f"paged, cross-entropy-backward, all or one of "
                 f"{', '.join(rowwise_torch.OPS)}")
    do_paged = args.op == "paged"
    if args.paged_set not in paged_torch.CASES:
        ap.error(f"--paged-set: one of {', '.join(paged_torch.CASES)}")
    do_rms, do_attn = args.op in ("rmsnorm", "all"), args.op in ("attention", "all")
    do_bwd = args.op == "attention-backward"
    do_ce_bwd = args.op == "cross-entropy-backward"
    do_norm_bwd = args.op == "norm-backward"
    do_rowwise = args.op == "rowwise" or args.op == "all" or (
        args.op in rowwise_torch.OPS and args.op != "rmsnorm")

    # Everything that needs no GPU first, so that mistakes show up anywhere.
    spec = configs = None
    if do_rms or do_rowwise or do_norm_bwd:
        with open(args.shapes) as f:
            spec = json.load(f)
    if do_attn or do_bwd:
        with open(args.attn_configs) as f:
            configs = json.load(f)["configs"]
        if args.only:
            want = [s for s in args.only.split(",") if s]
            known = {c["name"] for c in configs}
            unknown = [s for s in want if s not in known]
            if unknown:
                ap.error(f"--only: unknown config(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
            configs = [c for c in configs if c["name"] in want]
        check_attention_configs(configs)
    elif args.only and do_paged:
        known = {c[0] for c in paged_torch.CASES[args.paged_set]}
        unknown = [s for s in args.only.split(",") if s and s not in known]
        if unknown:
            ap.error(f"--only: unknown paged case(s) {', '.join(unknown)}; known: "
                     f"{', '.join(sorted(known))}")
    elif args.only:
        ap.error("--only applies to the attention configs and the paged cases")

    global torch
    try:
        import torch as torch_module
    except ImportError:
        sys.exit("PyTorch is not installed: this benchmark needs PyTorch with CUDA and a GPU")
    torch = torch_module
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU visible to PyTorch: this benchmark needs one")

    lib, ctx = load_scree(args.lib, do_attn or do_bwd)
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"device: {props.name}, torch {torch.__version__}, scree {lib.scree_version().decode()}")
    out = dict(device=props.name, torch=torch.__version__, scree=lib.scree_version().decode())

    def dump():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)

    if do_rms:
        out["copy_gbps"], out["results"] = run_rmsnorm(args, lib, ctx, spec, l2)
        dump()  # kept even if the attention part fails
    if do_attn:
        out["attention"] = run_attention(args, lib, ctx, configs, l2)
        dump()
    if do_bwd:
        out["attention_backward"] = attention_backward_torch.run(
            args, lib, ctx, configs, l2, time_batched, torch, AttnArgs,
            dict(torch_dtype=torch_dtype, dtype_codes=DTYPE_CODES, attention_flops=attention_flops))
        dump()
    if do_paged:
        out["paged"] = paged_torch.run(args, lib, ctx, l2, time_batched, torch, AttnArgs)
        dump()
    if do_ce_bwd:
        out["copy_gbps"] = out.get("copy_gbps") or copy_bandwidth()
        out["cross_entropy_backward"] = ce_backward_torch.run(
            args, lib, ctx, l2, time_batched, torch, out["copy_gbps"])
        dump()
    if args.op == "misc-backward":  # SwiGLU, softmax, ragged softmax and RoPE backward
        out["copy_gbps"] = out.get("copy_gbps") or copy_bandwidth()
        out["misc_backward"] = misc_backward_torch.run(args, lib, ctx, l2, time_batched,
                                                       out["copy_gbps"], torch)
        dump()
    if do_rowwise:
        gbps = out.get("copy_gbps") or copy_bandwidth()
        out["copy_gbps"] = gbps
        only = [args.op] if args.op in rowwise_torch.OPS else None
        if args.rowwise_ops:
            only = [o for o in args.rowwise_ops.split(",") if o]
            bad = [o for o in only if o not in rowwise_torch.OPS]
            if bad:
                sys.exit(f"--rowwise-ops: unknown {', '.join(bad)}")
        out["rowwise"] = rowwise_torch.run(args, lib, ctx, spec, l2, time_batched, gbps, only)
        dump()
    if do_norm_bwd:
        gbps = out.get("copy_gbps") or copy_bandwidth()
        out["copy_gbps"] = gbps
        out["norm_backward"] = norm_backward_torch.run(args, lib, ctx, spec, l2, time_batched, gbps)
        dump()
    lib.scree_destroy(ctx)


if __name__ == "__main__":
    main()
