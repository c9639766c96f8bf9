"""Paged decode: scree_paged_attention against FlashAttention-2 varlen and a
device copy, side by side (bench/compare_torch.py --op paged).

For each case (batch, key lengths, query tokens a sequence, heads, head_dim,
page size): K and V random normal in a paged pool ([pages, page_size,
heads_kv, d], pages shuffled), the same keys gathered into contiguous
[total_k, heads_kv, d] for FlashAttention-2 (torch.ops.aten.
_flash_attention_forward with cu_seqlens_k), causal, scale 1/sqrt(d), bf16.
Bytes counted: K and V of every key read once, q read, out written. The
ceiling is a device-to-device copy moving the same bytes (half read, half
written), timed in the same run. Timing: CUDA events around --inner
back-to-back calls, median of --attn-reps; input sets rotated so that they
exceed 3x the L2 where they are small. With --graphs each side is also
timed as a CUDA graph of --inner captured calls, replayed between two events
(median of --attn-reps): a small decode step then costs its GPU time, not
the host's time to submit it, as in a serving engine that captures its
decode steps. Checks, which fail the run: no NaN in scree's output
(poisoned first), max |scree - FA-2| <= 2e-2.

Paged prefill (--paged-set prefill): scree_paged_attention against
scree_attention on the same data, the keys of each sequence stored in pages
(shuffled) and gathered contiguous, the same q; causal (bottom-right
aligned in both), bf16, d=128, GQA 32:8, pages of 16 and 64; fresh prefill
(queries = keys), chunked prefill (a chunk of new tokens against a long
cached prefix). Both write lse. TFLOP/s count the causal pairs (4 * hq * d
per visible query-key pair); ratio = paged time / contiguous time (the aim:
at most 1.10). Checks, which fail the run: no NaN in either output
(poisoned first), max |paged - contiguous| <= 2e-2.
"""
import ctypes
import math
import random
import sys
import zlib

torch = None


class PagedArgs(ctypes.Structure):
    """scree_paged_attention_args, field for field (scree.h)."""
    _fields_ = [("q", ctypes.c_uint64), ("out", ctypes.c_uint64), ("lse", ctypes.c_uint64),
                ("k_cache", ctypes.c_uint64), ("v_cache", ctypes.c_uint64),
                ("block_table", ctypes.c_uint64), ("seqlens_k", ctypes.c_uint64),
                ("cu_seqlens_q", ctypes.c_uint64),
                ("batch", ctypes.c_int64), ("total_q", ctypes.c_int64),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
                ("num_pages", ctypes.c_int64), ("page_size", ctypes.c_int64),
                ("block_table_stride", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64),
                ("head_dim", ctypes.c_int64),
                ("q_token_stride", ctypes.c_int64), ("q_head_stride", ctypes.c_int64),
                ("out_token_stride", ctypes.c_int64), ("out_head_stride", ctypes.c_int64),
                ("cache_page_stride", ctypes.c_int64), ("cache_token_stride", ctypes.c_int64),
                ("cache_head_stride", ctypes.c_int64),
                ("dtype", ctypes.c_int), ("causal", ctypes.c_int), ("scale", ctypes.c_float),
                ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
                ("softcap", ctypes.c_float)]


# (name, batch, keys, q tokens a sequence, hq, hkv, page); keys "skew:M"
# draws log-normal lengths around median M with one sequence at 32 x M.
CASES = {
    "core": [
        (f"b{b}-k{k // 1024}k-q{q}-g{hq // hkv}-p{p}", b, k, q, hq, hkv, p)
        for (b, k) in [(1, 1024), (1, 4096), (1, 32768), (1, 131072), (8, 1024), (8, 4096),
                       (8, 32768), (64, 1024), (64, 4096), (64, 32768), (256, 1024),
                       (256, 4096)]
        for q in (1, 4)
        for (hq, hkv, p) in [(32, 8, 16)]
    ] + [
        ("b64-k4k-q1-mha-p16", 64, 4096, 1, 32, 32, 16),
        ("b8-k32k-q1-mha-p64", 8, 32768, 1, 32, 32, 64),
        ("b64-k4k-q1-g8-p64", 64, 4096, 1, 64, 8, 64),
        ("b64-k4k-q4-g8-p16", 64, 4096, 4, 64, 8, 16),
        ("b64-skew1k-q1-g4-p16", 64, "skew:1024", 1, 32, 8, 16),
        ("b16-skew2k-q4-g4-p16", 16, "skew:2048", 4, 32, 8, 16),
    ],
}
CASES["smoke"] = [CASES["core"][i] for i in (0, 17, 19, 24)]
# Prefill: (name, batch, keys a sequence, new query tokens a sequence, hq, hkv,
# page), the queries the last tokens of the keys.
CASES["prefill"] = [
    (f"b{b}-q{q}-k{k}-p{p}", b, k, q, 32, 8, p)
    for (b, q, k) in [(4, 4096, 4096), (2, 2048, 16384), (8, 512, 8192)]
    for p in (16, 64)
]


def key_lengths(keys, batch, rng):
    if isinstance(keys, int):
        return [keys] * batch
    med = int(keys.split(":")[1])
    lens = [max(1, int(med * math.exp(rng.gauss(0, 0.5)))) for _ in range(batch)]
    lens[0] = 32 * med
    return lens


def causal_pairs(lq, lk):
    """Query-key pairs a causal, bottom-right aligned sequence visits."""
    return sum(min(max(t + lk - lq + 1, 0), lk) for t in range(lq))


def run_prefill(args, lib, ctx, l2, time_batched, attn_args):
    fn = lib.scree_paged_attention
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(PagedArgs), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    afn = lib.scree_attention
    afn.argtypes = [ctypes.c_void_p, ctypes.POINTER(attn_args), ctypes.c_void_p]
    afn.restype = ctypes.c_int
    stream = torch.cuda.current_stream().cuda_stream
    d, dt = 128, torch.bfloat16
    cases = CASES[args.paged_set]
    if args.only:
        cases = [c for c in cases if c[0] in args.only.split(",")]
    print(f"\npaged prefill: scree_paged_attention vs scree_attention on the same K/V stored "
          f"contiguously; bf16, d={d}, causal")
    results = []
    for (name, batch, keys, qn, hq, hkv, page) in cases:
        npg = -(-keys // page)
        pool = npg * batch
        total_k, total_q = keys * batch, qn * batch
        flops = 4.0 * hq * d * causal_pairs(qn, keys) * batch
        set_bytes = (2 * total_k * hkv * 2 + 2 * total_q * hq) * d * 2
        nsets = max(1, min(args.max_sets, -(-3 * l2 // set_bytes)))
        scale = 1.0 / math.sqrt(d)
        sk = torch.full((batch,), keys, device="cuda", dtype=torch.int32)
        cu_q = torch.arange(0, total_q + 1, qn, device="cuda", dtype=torch.int32)
        cu_k = torch.arange(0, total_k + 1, keys, device="cuda", dtype=torch.int32)
        sets = []
        for _ in range(nsets):
            kc = torch.randn(pool, page, hkv, d, device="cuda", dtype=dt)
            vc = torch.randn(pool, page, hkv, d, device="cuda", dtype=dt)
            bt = torch.randperm(pool, device="cuda", dtype=torch.int32).reshape(batch, npg)
            flat = (bt.long()[:, :, None] * page +
                    torch.arange(page, device="cuda")[None, None, :]).reshape(batch, -1)
            idx = flat[:, :keys].reshape(-1)
            k = kc.reshape(-1, hkv, d)[idx].contiguous()
            v = vc.reshape(-1, hkv, d)[idx].contiguous()
            q = torch.randn(total_q, hq, d, device="cuda", dtype=dt)
            outs = [torch.full_like(q, float("nan")) for _ in range(2)]
            lses = [torch.full((hq, total_q), float("nan"), device="cuda", dtype=torch.float32)
                    for _ in range(2)]
            sets.append(dict(kc=kc, vc=vc, bt=bt, k=k, v=v, q=q, outs=outs, lses=lses))
        pargs, aargs = [], []
        for st in sets:
            a = PagedArgs()
            a.q, a.out, a.lse = st["q"].data_ptr(), st["outs"][0].data_ptr(), st["lses"][0].data_ptr()
            a.k_cache, a.v_cache = st["kc"].data_ptr(), st["vc"].data_ptr()
            a.block_table, a.seqlens_k, a.cu_seqlens_q = (st["bt"].data_ptr(), sk.data_ptr(),
                                                          cu_q.data_ptr())
            a.batch, a.total_q, a.max_seqlen_q, a.max_seqlen_k = batch, total_q, qn, keys
            a.num_pages, a.page_size, a.block_table_stride = pool, page, npg
            a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
            a.dtype, a.causal, a.scale = 2, 1, scale
            a.window_left = a.window_right = -1
            pargs.append(a)
            c = attn_args()
            c.q, c.k, c.v = st["q"].data_ptr(), st["k"].data_ptr(), st["v"].data_ptr()
            c.out, c.lse = st["outs"][1].data_ptr(), st["lses"][1].data_ptr()
            c.cu_seqlens_q, c.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
            c.batch, c.total_q, c.total_k = batch, total_q, total_k
            c.max_seqlen_q, c.max_seqlen_k = qn, keys
            c.heads_q, c.heads_kv, c.head_dim = hq, hkv, d
            c.dtype, c.causal, c.scale = 2, 1, scale
            c.window_left = c.window_right = -1
            aargs.append(c)

        def call(f, what, argv):
            def go(i):
                st = f(ctx, ctypes.byref(argv[i % nsets]), ctypes.c_void_p(stream))
                if st != 0:
                    sys.exit(f"{name}: {what}: {lib.scree_status_name(st).decode()}: "
                             f"{lib.scree_last_error(ctx).decode()}")
            return go

        paged_call = call(fn, "scree_paged_attention", pargs)
        attn_call = call(afn, "scree_attention", aargs)
        # First calls alone: a miss tunes here under SCREE_MISS_POLICY=tune.
        paged_call(0)
        attn_call(0)
        torch.cuda.synchronize()
        got, ref = sets[0]["outs"][0].float(), sets[0]["outs"][1].float()
        nan = bool(torch.isnan(got).any().item() or torch.isnan(ref).any().item())
        diff = (got - ref).abs().max().item()
        ldiff = (sets[0]["lses"][0] - sets[0]["lses"][1]).abs().max().item()
        if nan or not diff <= 2e-2:
            sys.exit(f"FAIL {name}: paged and contiguous attention differ (NaN: {nan}, max "
                     f"|paged - contiguous| {diff:.3g}, limit 2e-2)")
        pa_ms = time_batched(paged_call, args.attn_reps, args.inner, args.warmup)
        at_ms = time_batched(attn_call, args.attn_reps, args.inner, args.warmup)
        r = dict(name=name, batch=batch, keys=keys, q=qn, hq=hq, hkv=hkv, page=page,
                 flops=flops, paged_us=pa_ms * 1e3, attention_us=at_ms * 1e3,
                 paged_tflops=flops / pa_ms / 1e9, attention_tflops=flops / at_ms / 1e9,
                 ratio=pa_ms / at_ms, maxdiff=diff, lse_maxdiff=ldiff, input_sets=nsets)
        results.append(r)
        print(f"{name:<22} paged {r['paged_us']:9.1f} us {r['paged_tflops']:6.1f} TFLOP/s  "
              f"contiguous {r['attention_us']:9.1f} us {r['attention_tflops']:6.1f} TFLOP/s  "
              f"paged/contiguous {r['ratio']:5.3f}{'' if r['ratio'] <= 1.10 else ' (> 1.10)'}  "
              f"diff {diff:.1e} lse {ldiff:.1e}", flush=True)
        del sets, pargs, aargs, got, ref
        torch.cuda.empty_cache()
    return results


def time_graph(fn, reps, inner, warmup, time_batched):
    """Median over `reps` of the mean time (ms) of one call, from replays of a
    CUDA graph of `inner` captured calls (timed as time_batched times one
    call); fn(i) runs call i on torch's current stream (a side stream while
    warming up and capturing, so that per-stream state exists before the
    capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(inner):
            fn(i)
    side.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        for i in range(inner):
            fn(i)
    torch.cuda.synchronize()
    ms = time_batched(lambda i: g.replay(), reps, 1, warmup)
    del g
    return ms / inner


def run(args, lib, ctx, l2, time_batched, torch_module, attn_args=None):
    global torch
    torch = torch_module
    if args.paged_set == "prefill":
        return run_prefill(args, lib, ctx, l2, time_batched, attn_args)
    fn = lib.scree_paged_attention
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(PagedArgs), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    fa = torch.ops.aten._flash_attention_forward
    d, dt = 128, torch.bfloat16
    cases = CASES[args.paged_set]
    if args.only:
        cases = [c for c in cases if c[0] in args.only.split(",")]
    print(f"\npaged decode: scree_paged_attention vs FA-2 varlen (contiguous K/V) vs a copy of "
          f"the same bytes; bf16, d={d}, causal")
    results = []
    for (name, batch, keys, qn, hq, hkv, page) in cases:
        # lengths drawn per case, so that --only draws the same ones
        lk = key_lengths(keys, batch, random.Random(zlib.crc32(name.encode())))
        npg = [-(-k // page) for k in lk]
        pool = sum(npg)
        total_k, total_q = sum(lk), qn * batch
        kv_bytes = 2 * total_k * hkv * d * 2
        byts = kv_bytes + 2 * total_q * hq * d * 2
        nsets = max(1, min(args.max_sets, -(-3 * l2 // byts)))
        scale = 1.0 / math.sqrt(d)
        sets = []
        for _ in range(nsets):
            kc = torch.randn(pool, page, hkv, d, device="cuda", dtype=dt)
            vc = torch.randn(pool, page, hkv, d, device="cuda", dtype=dt)
            perm = torch.randperm(pool, device="cuda", dtype=torch.int32)
            bt = torch.full((batch, max(npg)), -1, device="cuda", dtype=torch.int32)
            s = 0
            for b in range(batch):
                bt[b, :npg[b]] = perm[s:s + npg[b]]
                s += npg[b]
            q = torch.randn(total_q, hq, d, device="cuda", dtype=dt)
            out = torch.full_like(q, float("nan"))
            sets.append(dict(kc=kc, vc=vc, bt=bt, q=q, out=out))
        sk = torch.tensor(lk, device="cuda", dtype=torch.int32)
        cu_q = torch.arange(0, total_q + 1, qn, device="cuda", dtype=torch.int32)
        cu_k = torch.tensor([0] + lk, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()

        def gather(st):
            idx = []
            for b in range(batch):
                pages = st["bt"][b, :npg[b]].long()
                flat = (pages[:, None] * page + torch.arange(page, device="cuda")[None, :]).reshape(-1)
                idx.append(flat[:lk[b]])
            idx = torch.cat(idx)
            return (st["kc"].reshape(-1, hkv, d)[idx].contiguous(),
                    st["vc"].reshape(-1, hkv, d)[idx].contiguous())

        for st in sets:
            st["k"], st["v"] = gather(st)
        sargs = []
        for st in sets:
            a = PagedArgs()
            a.q, a.out = st["q"].data_ptr(), st["out"].data_ptr()
            a.k_cache, a.v_cache = st["kc"].data_ptr(), st["vc"].data_ptr()
            a.block_table, a.seqlens_k, a.cu_seqlens_q = (st["bt"].data_ptr(), sk.data_ptr(),
                                                          cu_q.data_ptr())
            a.batch, a.total_q, a.max_seqlen_q, a.max_seqlen_k = batch, total_q, qn, max(lk)
            a.num_pages, a.page_size, a.block_table_stride = pool, page, max(npg)
            a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
            a.dtype, a.causal, a.scale = 2, 1, scale
            a.window_left = a.window_right = -1
            sargs.append(a)

        def scree_call(i):
            stream = torch.cuda.current_stream().cuda_stream
            st = fn(ctx, ctypes.byref(sargs[i % nsets]), ctypes.c_void_p(stream))
            if st != 0:
                sys.exit(f"{name}: scree_paged_attention: {lib.scree_status_name(st).decode()}: "
                         f"{lib.scree_last_error(ctx).decode()}")

        def fa_call(i):
            st = sets[i % nsets]
            return fa(st["q"], st["k"], st["v"], cu_q, cu_k, qn, max(lk), 0.0, True, False,
                      scale=scale)

        src = torch.empty(byts // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copies = [(src, dst)]

        def copy_call(i):
            dst.copy_(src)

        scree_call(0)
        torch.cuda.synchronize()
        ref = fa_call(0)[0].float()
        got = sets[0]["out"].float()
        nan = bool(torch.isnan(got).any().item())
        diff = (got - ref).abs().max().item()
        if nan or not diff <= 2e-2:
            sys.exit(f"FAIL {name}: scree's paged attention is wrong (NaN: {nan}, max |scree - "
                     f"FA-2| {diff:.3g}, limit 2e-2)")
        fa_ms = time_batched(fa_call, args.attn_reps, args.inner, args.warmup)
        sc_ms = time_batched(scree_call, args.attn_reps, args.inner, args.warmup)
        cp_ms = time_batched(copy_call, args.attn_reps, args.inner, args.warmup)
        r = dict(name=name, batch=batch, keys=keys, total_k=total_k, q=qn, hq=hq, hkv=hkv,
                 page=page, bytes=byts, scree_us=sc_ms * 1e3, fa2_us=fa_ms * 1e3,
                 copy_us=cp_ms * 1e3, scree_tbps=byts / sc_ms / 1e9,
                 fa2_tbps=byts / fa_ms / 1e9, copy_tbps=byts / cp_ms / 1e9,
                 of_copy=cp_ms / sc_ms, vs_fa2=fa_ms / sc_ms, maxdiff_vs_fa2=diff,
                 input_sets=nsets)
        if getattr(args, "graphs", False):
            g = {}
            for what, f in (("fa2", fa_call), ("scree", scree_call), ("copy", copy_call)):
                g[what] = time_graph(f, args.attn_reps, args.inner, args.warmup,
                                     time_batched) * 1e3
            r.update(graph_scree_us=g["scree"], graph_fa2_us=g["fa2"], graph_copy_us=g["copy"],
                     graph_of_copy=g["copy"] / g["scree"], graph_vs_fa2=g["fa2"] / g["scree"])
            print(f"{name:<24} graphs: scree {g['scree']:8.1f} us  FA-2 {g['fa2']:8.1f} us  copy "
                  f"{g['copy']:8.1f} us  scree/copy {r['graph_of_copy']:5.2f}  copy+5us-scree "
                  f"{g['copy'] + 5 - g['scree']:6.1f}  x FA-2 {r['graph_vs_fa2']:5.2f}", flush=True)
        results.append(r)
        print(f"{name:<24} {byts / 1e6:9.1f} MB  scree {r['scree_us']:8.1f} us "
              f"{r['scree_tbps']:5.2f} TB/s  FA-2 {r['fa2_us']:8.1f} us {r['fa2_tbps']:5.2f} TB/s"
              f"  copy {r['copy_us']:8.1f} us {r['copy_tbps']:5.2f} TB/s  "
              f"scree/copy {r['of_copy']:5.2f}  x FA-2 {r['vs_fa2']:5.2f}  diff {diff:.1e}",
              flush=True)
        del sets, sargs, src, dst, copies, ref, got
        torch.cuda.empty_cache()
    return results
