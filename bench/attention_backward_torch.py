"""Attention backward: scree_attention_backward against FlashAttention-2's varlen
backward, side by side (bench/compare_torch.py --op attention-backward).

For each config of bench/attention_configs.json: q, k, v random normal,
packed by cu_seqlens, dout random normal; each side runs its own forward
first (scree_attention, aten._flash_attention_forward) and its backward is
fed that forward's out and LSE (natural log, [heads_q, total_q] for both).
FA-2's backward is torch.ops.aten._flash_attention_backward on the same
tensors. FLOPs: 2.5 x the forward's (attention_flops). Timing: CUDA events
around --inner back-to-back calls, median of --attn-reps, input sets
rotated beyond 3x the L2 (compare_torch's time_batched); scree in its
default mode and with deterministic = 1; forward + backward of each side
too. Checks, which fail the run: no NaN in scree's gradients (poisoned
first), and max |scree - FA-2| of dq, dk and dv within 2e-2 of the larger
of 1 and the tensor's largest magnitude.
"""
import ctypes
import sys

torch = None


def bwd_args_type(attn_args):
    class BwdArgs(ctypes.Structure):
        """scree_attention_backward_args, field for field (scree.h)."""
        _fields_ = [("fwd", attn_args), ("dout", ctypes.c_uint64), ("dq", ctypes.c_uint64),
                    ("dk", ctypes.c_uint64), ("dv", ctypes.c_uint64),
                    ("dout_token_stride", ctypes.c_int64), ("dout_head_stride", ctypes.c_int64),
                    ("dq_token_stride", ctypes.c_int64), ("dq_head_stride", ctypes.c_int64),
                    ("dk_token_stride", ctypes.c_int64), ("dk_head_stride", ctypes.c_int64),
                    ("dv_token_stride", ctypes.c_int64), ("dv_head_stride", ctypes.c_int64),
                    ("deterministic", ctypes.c_int)]
    # The C layout on x86-64 and aarch64 (offsetof / sizeof from scree.h).
    assert ctypes.sizeof(BwdArgs) == 328 and BwdArgs.dout.offset == 224 and \
        BwdArgs.deterministic.offset == 320, "BwdArgs layout"
    return BwdArgs


def run(args, lib, ctx, configs, l2, time_batched, torch_module, attn_args, helpers):
    global torch
    torch = torch_module
    try:
        bfn = lib.scree_attention_backward
    except AttributeError:
        sys.exit("this libscree has no scree_attention_backward: rebuild it")
    BwdArgs = bwd_args_type(attn_args)
    bfn.argtypes = [ctypes.c_void_p, ctypes.POINTER(BwdArgs), ctypes.c_void_p]
    bfn.restype = ctypes.c_int
    ffn = lib.scree_attention
    fa_fwd = torch.ops.aten._flash_attention_forward
    fa_bwd = getattr(torch.ops.aten, "_flash_attention_backward", None)
    if fa_bwd is None:
        sys.exit("this PyTorch has no torch.ops.aten._flash_attention_backward")
    torch_dtype, codes, attention_flops = (helpers["torch_dtype"], helpers["dtype_codes"],
                                           helpers["attention_flops"])
    print("\nattention backward: FlashAttention-2 varlen backward "
          "(aten._flash_attention_backward) vs scree_attention_backward")
    results = []
    for c in configs:
        lens, hq, hkv, d, causal, dname = (c["seqlens"], c["hq"], c["hkv"], c["d"],
                                           bool(c["causal"]), c["dtype"])
        tdt, code = torch_dtype(dname), codes[dname]
        T, maxl = sum(lens), max(lens)
        scale = d ** -0.5
        fwd_flops = attention_flops(c)
        flops = 2.5 * fwd_flops
        cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()
        esize = torch.finfo(tdt).bits // 8
        # read q, k, v, out, dout, written dq, dk, dv: the backward's bytes a set
        set_bytes = T * (4 * hq + 4 * hkv) * d * esize
        nsets = max(2, min(args.max_sets, -(-3 * l2 // max(1, set_bytes))))
        sets = []
        for _ in range(nsets):
            st = dict(q=torch.randn(T, hq, d, device="cuda", dtype=tdt),
                      k=torch.randn(T, hkv, d, device="cuda", dtype=tdt),
                      v=torch.randn(T, hkv, d, device="cuda", dtype=tdt),
                      do=torch.randn(T, hq, d, device="cuda", dtype=tdt),
                      out=torch.full((T, hq, d), float("nan"), device="cuda", dtype=tdt),
                      lse=torch.full((hq, T), float("nan"), device="cuda", dtype=torch.float32),
                      dq=torch.full((T, hq, d), float("nan"), device="cuda", dtype=tdt),
                      dk=torch.full((T, hkv, d), float("nan"), device="cuda", dtype=tdt),
                      dv=torch.full((T, hkv, d), float("nan"), device="cuda", dtype=tdt))
            sets.append(st)
        fargs, bargs = [], {0: [], 1: []}
        for st in sets:
            a = attn_args()
            a.q, a.k, a.v = st["q"].data_ptr(), st["k"].data_ptr(), st["v"].data_ptr()
            a.out, a.lse = st["out"].data_ptr(), st["lse"].data_ptr()
            a.cu_seqlens_q = a.cu_seqlens_k = cu.data_ptr()
            a.batch, a.total_q, a.total_k = len(lens), T, T
            a.max_seqlen_q = a.max_seqlen_k = maxl
            a.heads_q, a.heads_kv, a.head_dim = hq, hkv, d
            a.dtype, a.causal, a.scale = code, int(causal), scale
            a.window_left = a.window_right = -1
            fargs.append(a)
            for det in (0, 1):
                b = BwdArgs()
                b.fwd = a
                b.dout = st["do"].data_ptr()
                b.dq, b.dk, b.dv = st["dq"].data_ptr(), st["dk"].data_ptr(), st["dv"].data_ptr()
                b.deterministic = det
                bargs[det].append(b)
        stream = torch.cuda.current_stream().cuda_stream

        def check(st, what):
            if st != 0:
                sys.exit(f"{c['name']}: {what}: {lib.scree_status_name(st).decode()}: "
                         f"{lib.scree_last_error(ctx).decode()}")

        def scree_fwd(i):
            check(ffn(ctx, ctypes.byref(fargs[i % nsets]), ctypes.c_void_p(stream)),
                  "scree_attention")

        def scree_bwd(det):
            def go(i):
                check(bfn(ctx, ctypes.byref(bargs[det][i % nsets]), ctypes.c_void_p(stream)),
                      "scree_attention_backward")
            return go

        def scree_both(i):
            scree_fwd(i)
            scree_bwd(0)(i)

        fa_state = []
        for st in sets:
            o = fa_fwd(st["q"], st["k"], st["v"], cu, cu, maxl, maxl, 0.0, causal, False,
                       scale=scale)
            fa_state.append((o[0], o[1], o[2], o[3]))

        def fa_bwd_call(i):
            st, (o, lse, seed, off) = sets[i % nsets], fa_state[i % nsets]
            return fa_bwd(st["do"], st["q"], st["k"], st["v"], o, lse, cu, cu, maxl, maxl, 0.0,
                          causal, seed, off, scale=scale)

        def fa_both(i):
            st = sets[i % nsets]
            o = fa_fwd(st["q"], st["k"], st["v"], cu, cu, maxl, maxl, 0.0, causal, False,
                       scale=scale)
            return fa_bwd(st["do"], st["q"], st["k"], st["v"], o[0], o[1], cu, cu, maxl, maxl,
                          0.0, causal, o[2], o[3], scale=scale)

        # Correctness on set 0 (the first calls tune under SCREE_MISS_POLICY=tune).
        for i in range(nsets):
            scree_fwd(i)
        scree_bwd(0)(0)
        torch.cuda.synchronize()
        ref = fa_bwd_call(0)
        worst, nan = 0.0, False
        for name, got, want in (("dq", sets[0]["dq"], ref[0]), ("dk", sets[0]["dk"], ref[1]),
                                ("dv", sets[0]["dv"], ref[2])):
            g, w = got.float(), want.float()
            nan = nan or bool(torch.isnan(g).any().item())
            err = (g - w).abs().max().item() / max(1.0, w.abs().max().item())
            worst = max(worst, err)
        print(f"{c['name']}: {len(lens)} seqs, {T} tokens, hq={hq} hkv={hkv} d={d} {dname} "
              f"causal={int(causal)}; max |scree - FA-2| of dq, dk, dv (relative to the largest "
              f"of each) {worst:.2e}", flush=True)
        if nan or not worst <= 2e-2:
            sys.exit(f"FAIL {c['name']}: scree's attention backward differs from FA-2's "
                     f"(NaN: {nan}, worst {worst:.3g}, limit 2e-2)")
        del ref
        fa_ms = time_batched(fa_bwd_call, args.attn_reps, args.inner, args.warmup)
        sc_ms = time_batched(scree_bwd(0), args.attn_reps, args.inner, args.warmup)
        det_ms = time_batched(scree_bwd(1), args.attn_reps, args.inner, args.warmup)
        fa_both_ms = time_batched(fa_both, args.attn_reps, args.inner, args.warmup)
        sc_both_ms = time_batched(scree_both, args.attn_reps, args.inner, args.warmup)
        r = dict(name=c["name"], nseqs=len(lens), tokens=T, hq=hq, hkv=hkv, d=d, causal=causal,
                 dtype=dname, flops=flops, fa2_ms=fa_ms, scree_ms=sc_ms, scree_det_ms=det_ms,
                 fa2_tflops=flops / fa_ms / 1e9, scree_tflops=flops / sc_ms / 1e9,
                 scree_det_tflops=flops / det_ms / 1e9, ratio=fa_ms / sc_ms,
                 det_slowdown=det_ms / sc_ms, fa2_fwd_bwd_ms=fa_both_ms,
                 scree_fwd_bwd_ms=sc_both_ms, fwd_bwd_ratio=fa_both_ms / sc_both_ms,
                 maxdiff_vs_fa2=worst, input_sets=nsets)
        results.append(r)
        print(f"  backward: FA-2 {fa_ms:.3f} ms {r['fa2_tflops']:.1f} TFLOP/s, scree {sc_ms:.3f} ms "
              f"{r['scree_tflops']:.1f} TFLOP/s ({r['ratio']:.2f}x FA-2), deterministic "
              f"{det_ms:.3f} ms ({r['det_slowdown']:.2f}x the default); forward + backward: FA-2 "
              f"{fa_both_ms:.3f} ms, scree {sc_both_ms:.3f} ms ({r['fwd_bwd_ratio']:.2f}x)",
              flush=True)
        del sets, fa_state, fargs, bargs
        torch.cuda.empty_cache()
    return results
