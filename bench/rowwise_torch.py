"""The row-wise family against PyTorch, for bench/compare_torch.py (--op rowwise,
or one op's name).

Every op runs on the same tensors three ways in one process on one GPU:
scree (C API through ctypes), the PyTorch code a model would write (eager),
and torch.compile of that same code (dynamic=False, compile time excluded;
"n/a" where it does not compile, and for the ragged softmax's per-sequence
loop, which would compile a graph per distinct length). Shapes: bench/rowwise_shapes.json (rows x
cols, cols the hidden size; for SwiGLU cols is F and the input [rows, 2F];
for ragged softmax the rows are a packed batch of uneven sequences), the
LLaMA-3-8B prefill q/k for RoPE, and a 128k-vocab cross-entropy.

Bytes counted: each input read once, each output written once (what the op
must move at least). GB/s = bytes / time, beside a device-to-device copy of
1 GiB measured in the same run (read + written). Timing: CUDA events around
--inner back-to-back calls (host launch latency hidden where the kernel is
longer), --warmup such rounds, median of --reps; inputs rotated over enough
sets to exceed 3x the L2. Every scree output is checked against a float64
PyTorch reference first (relative L2 error under the dtype's tolerance), and
the run fails if one is wrong.

PyTorch peers: F.rms_norm; F.layer_norm; x + r then F.rms_norm; a loop of
torch.softmax(x[s:e], dim=0) over the sequences; torch.softmax(x, -1);
HuggingFace's apply_rotary_pos_emb (rotate_half, cos/sin [T, d] precomputed
from the positions); F.silu(g) * u; F.cross_entropy(reduction="none").
"""
import ctypes
import math
import random
import statistics
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
SoftmaxArgs = S("SoftmaxArgs", [("x", U64), ("y", U64), ("rows", I64), ("cols", I64),
                                ("x_stride", I64), ("y_stride", I64), ("x_dtype", I32),
                                ("y_dtype", I32), ("scale", FL)])
RaggedArgs = S("RaggedArgs", [("x", U64), ("y", U64), ("cu_seqlens", U64), ("batch", I64),
                              ("total", I64), ("max_seqlen", I64), ("cols", I64),
                              ("x_stride", I64), ("y_stride", I64), ("x_dtype", I32),
                              ("y_dtype", I32), ("scale", FL)])
RopeArgs = S("RopeArgs", [("q", U64), ("k", U64), ("positions", U64), ("cu_seqlens", U64),
                          ("cos_sin", U64), ("total", I64), ("batch", I64), ("max_position", I64),
                          ("heads_q", I64), ("heads_kv", I64), ("head_dim", I64),
                          ("rotary_dim", I64), ("q_token_stride", I64), ("q_head_stride", I64),
                          ("k_token_stride", I64), ("k_head_stride", I64), ("dtype", I32),
                          ("layout", I32), ("positions_int64", I32), ("theta", FL)])
SwigluArgs = S("SwigluArgs", [("gate", U64), ("up", U64), ("y", U64), ("rows", I64), ("cols", I64),
                              ("gate_stride", I64), ("up_stride", I64), ("y_stride", I64),
                              ("dtype", I32), ("y_dtype", I32)])
CeArgs = S("CeArgs", [("logits", U64), ("targets", U64), ("loss", U64), ("lse", U64),
                      ("rows", I64), ("vocab", I64), ("logits_stride", I64),
                      ("ignore_index", I64), ("dtype", I32), ("dlogits", U64),
                      ("dlogits_stride", I64), ("label_smoothing", FL), ("z_loss", FL),
                      ("reduction", I32), ("grad_scale", FL)])

ARGS = {"rmsnorm": RmsArgs, "layernorm": LnArgs, "add_rmsnorm": AddRmsArgs,
        "softmax": SoftmaxArgs, "ragged_softmax": RaggedArgs, "rope": RopeArgs,
        "swiglu": SwigluArgs, "cross_entropy": CeArgs}
OPS = list(ARGS)


def tdt(name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def esize(name):
    return 4 if name == "fp32" else 2


def seq_lens(total, seed):
    """An uneven packed batch summing to total: about 1k tokens per sequence."""
    if total <= 8:
        return [total // 2 - 1, total - (total // 2 - 1)] if total > 2 else [total]
    n = max(2, total // 1024)
    rnd = random.Random(seed)
    w = [rnd.uniform(0.25, 1.75) for _ in range(n)]
    lens = [max(1, int(total * x / sum(w))) for x in w]
    lens[-1] += total - sum(lens)
    return lens


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """HuggingFace transformers' LLaMA apply_rotary_pos_emb."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class Case:
    """One op on one shape: build(i) makes input set i; scree(st, i) fills the
    args of set i; eager(st) is the PyTorch code; ref(st) a float64 reference
    of what scree writes; got(st) scree's outputs; nbytes the bytes moved."""


def cases(spec):
    """(op, label, dtype, builder) for every measured case."""
    out = []
    shapes, dts = spec["shapes"], spec["dtypes"]
    for op in ("rmsnorm", "layernorm", "add_rmsnorm", "softmax", "ragged_softmax", "swiglu"):
        for rows, cols in shapes:
            for d in dts:
                if d != dts[0] and (rows, cols) != tuple(shapes[0]):
                    continue  # the second dtype on the first shape only
                out.append((op, f"{rows}x{cols}", d, dict(rows=rows, cols=cols)))
    for total in (16384, 65536):
        for d in (("fp16", "bf16") if total == 16384 else ("bf16",)):
            out.append(("rope", f"{total}x32/8x128", d, dict(total=total, hq=32, hkv=8, d=128)))
    for rows, vocab in ((4096, 128256), (16384, 32000)):
        for d in (("bf16", "fp16") if vocab == 128256 else ("fp16",)):
            out.append(("cross_entropy", f"{rows}x{vocab}", d, dict(rows=rows, vocab=vocab)))
    return out


def make(op, d, p, nsets_for):
    """Tensors, scree args and torch functions of one case."""
    t, code = tdt(d), DT[d]
    dev = "cuda"
    c = Case()
    c.sets = []
    if op in ("rmsnorm", "layernorm", "add_rmsnorm", "softmax", "ragged_softmax", "swiglu"):
        R, C = p["rows"], p["cols"]
        per = {"rmsnorm": 2, "layernorm": 2, "add_rmsnorm": 4, "softmax": 2,
               "ragged_softmax": 2, "swiglu": 3}[op] * R * C * esize(d)
        n = nsets_for(per)
        w = torch.randn(C, device=dev, dtype=t)
        b = torch.randn(C, device=dev, dtype=t)
        eps = 1e-6 if op != "layernorm" else 1e-5
        lens = seq_lens(R, R * 31 + C) if op == "ragged_softmax" else None
        if lens:
            cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)
            bounds = [(int(s), int(e)) for s, e in zip(cu[:-1].tolist(), cu[1:].tolist())]
        for _ in range(n):
            st = {}
            if op == "swiglu":
                st["x"] = torch.randn(R, 2 * C, device=dev, dtype=t)
            else:
                st["x"] = torch.randn(R, C, device=dev, dtype=t)
            if op == "add_rmsnorm":
                st["r"] = torch.randn(R, C, device=dev, dtype=t)
                st["h"] = torch.full((R, C), float("nan"), device=dev, dtype=t)
            st["y"] = torch.full((R, C), float("nan"), device=dev, dtype=t)
            c.sets.append(st)
        c.nbytes = per + (C * esize(d) if op in ("rmsnorm", "add_rmsnorm") else 0) + \
            (2 * C * esize(d) if op == "layernorm" else 0) + (4 * (len(lens) + 1) if lens else 0)

        def scree(st):
            A = ARGS[op]()
            if op == "rmsnorm":
                A.x, A.w, A.y, A.rows, A.cols = st["x"].data_ptr(), w.data_ptr(), st["y"].data_ptr(), R, C
                A.x_dtype = A.w_dtype = A.y_dtype = code
                A.eps = eps
            elif op == "layernorm":
                A.x, A.w, A.b, A.y = st["x"].data_ptr(), w.data_ptr(), b.data_ptr(), st["y"].data_ptr()
                A.rows, A.cols, A.eps = R, C, eps
                A.x_dtype = A.w_dtype = A.y_dtype = code
            elif op == "add_rmsnorm":
                A.x, A.residual, A.w = st["x"].data_ptr(), st["r"].data_ptr(), w.data_ptr()
                A.h, A.y, A.rows, A.cols, A.eps = st["h"].data_ptr(), st["y"].data_ptr(), R, C, eps
                A.x_dtype = A.w_dtype = A.y_dtype = code
            elif op == "softmax":
                A.x, A.y, A.rows, A.cols = st["x"].data_ptr(), st["y"].data_ptr(), R, C
                A.x_dtype = A.y_dtype = code
            elif op == "ragged_softmax":
                A.x, A.y, A.cu_seqlens = st["x"].data_ptr(), st["y"].data_ptr(), cu.data_ptr()
                A.batch, A.total, A.max_seqlen, A.cols = len(lens), R, max(lens), C
                A.x_dtype = A.y_dtype = code
            else:  # swiglu, one [R, 2C] tensor, gate first
                A.gate, A.up, A.y, A.rows, A.cols = st["x"].data_ptr(), 0, st["y"].data_ptr(), R, C
                A.dtype = A.y_dtype = code
            return A

        if op == "rmsnorm":
            c.eager = lambda st: F.rms_norm(st["x"], (C,), w, eps)
            c.ref = lambda st: [F.rms_norm(st["x"].double(), (C,), w.double(), eps)]
            c.got = lambda st: [st["y"]]
        elif op == "layernorm":
            c.eager = lambda st: F.layer_norm(st["x"], (C,), w, b, eps)
            c.ref = lambda st: [F.layer_norm(st["x"].double(), (C,), w.double(), b.double(), eps)]
            c.got = lambda st: [st["y"]]
        elif op == "add_rmsnorm":
            def eager(st):
                h = st["x"] + st["r"]
                return h, F.rms_norm(h, (C,), w, eps)
            c.eager = eager
            c.ref = lambda st: [(st["x"] + st["r"]).double(),
                                F.rms_norm((st["x"] + st["r"]).double(), (C,), w.double(), eps)]
            c.got = lambda st: [st["h"], st["y"]]
        elif op == "softmax":
            c.eager = lambda st: torch.softmax(st["x"], dim=-1)
            c.ref = lambda st: [torch.softmax(st["x"].double(), dim=-1)]
            c.got = lambda st: [st["y"]]
        elif op == "ragged_softmax":
            def eager(st):
                x = st["x"]
                return torch.cat([torch.softmax(x[s:e], dim=0) for s, e in bounds])
            c.eager = eager
            c.ref = lambda st: [torch.cat([torch.softmax(st["x"][s:e].double(), dim=0)
                                           for s, e in bounds])]
            c.got = lambda st: [st["y"]]
        else:
            def eager(st):
                g, u = st["x"].chunk(2, dim=-1)
                return F.silu(g) * u
            c.eager = eager
            c.ref = lambda st: [F.silu(st["x"][:, :C].double()) * st["x"][:, C:].double()]
            c.got = lambda st: [st["y"]]
        c.scree = scree
        return c

    if op == "rope":
        T, hq, hkv, hd = p["total"], p["hq"], p["hkv"], p["d"]
        per = 2 * T * (hq + hkv) * hd * esize(d)
        n = nsets_for(per)
        lens = seq_lens(T, T + 7)
        cu = torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).to(dev)
        pos = torch.cat([torch.arange(L, device=dev) for L in lens])
        theta = 500000.0  # LLaMA-3
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).to(dev).float() / hd))
        freqs = pos.float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(t), emb.sin().to(t)
        for _ in range(n):
            q = torch.randn(T, hq, hd, device=dev, dtype=t)
            k = torch.randn(T, hkv, hd, device=dev, dtype=t)
            c.sets.append(dict(q=q, k=k, q0=q.clone(), k0=k.clone()))
        c.nbytes = per + 4 * (len(lens) + 1)

        def scree(st):
            A = RopeArgs()
            A.q, A.k, A.cu_seqlens = st["q"].data_ptr(), st["k"].data_ptr(), cu.data_ptr()
            A.total, A.batch, A.heads_q, A.heads_kv, A.head_dim = T, len(lens), hq, hkv, hd
            A.dtype, A.layout, A.theta = code, 0, theta
            return A

        c.scree = scree
        c.eager = lambda st: apply_rotary_pos_emb(st["q"], st["k"], cos, sin)

        def ref(st):
            f64 = freqs.double()  # the fp32 angles, as HF computes them
            e = torch.cat((f64, f64), dim=-1)
            return list(apply_rotary_pos_emb(st["q0"].double(), st["k0"].double(), e.cos(), e.sin()))
        c.ref = ref
        c.got = lambda st: [st["q"], st["k"]]
        return c

    # cross_entropy
    R, V = p["rows"], p["vocab"]
    per = R * V * esize(d)
    n = nsets_for(per)
    for _ in range(n):
        logits = torch.randn(R, V, device=dev, dtype=t) * 2
        tg = torch.randint(0, V, (R,), device=dev, dtype=torch.int64)
        tg[::17] = -100
        c.sets.append(dict(x=logits, t=tg, loss=torch.full((R,), float("nan"), device=dev),
                           lse=torch.full((R,), float("nan"), device=dev)))
    c.nbytes = per + 8 * R + 4 * R

    def scree(st):
        A = CeArgs()
        A.logits, A.targets, A.loss = st["x"].data_ptr(), st["t"].data_ptr(), st["loss"].data_ptr()
        A.rows, A.vocab, A.ignore_index, A.dtype = R, V, -100, code
        return A

    c.scree = scree
    c.eager = lambda st: F.cross_entropy(st["x"], st["t"], reduction="none", ignore_index=-100)
    c.ref = lambda st: [F.cross_entropy(st["x"].double(), st["t"], reduction="none", ignore_index=-100)]
    c.got = lambda st: [st["loss"]]
    return c


def rel_err(got, ref):
    g, r = got.double(), ref.double()
    if torch.isnan(g).any():
        return float("nan")
    den = r.norm().item()
    return (g - r).norm().item() / (den if den > 0 else 1.0)


def run(args, lib, ctx, spec, l2, time_batched, copy_gbps, only_op=None):
    """Runs every case (of the ops in only_op, a list, if given); returns the
    results (dicts). Exits on a wrong answer."""
    global torch, F
    import torch as _t
    import torch.nn.functional as _F
    torch, F = _t, _F
    stream = torch.cuda.current_stream().cuda_stream
    fns = {}
    for op in OPS:
        fn = getattr(lib, "scree_" + op, None)
        if fn is None:
            sys.exit(f"libscree has no scree_{op}: rebuild it")
        fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ARGS[op]), ctypes.c_void_p]
        fn.restype = ctypes.c_int
        fns[op] = fn

    def nsets_for(per_set):
        return max(1, min(args.max_sets, -(-3 * l2 // max(1, per_set))))

    print(f"\nrow-wise family vs PyTorch eager and torch.compile; copy {copy_gbps:.0f} GB/s "
          f"(read + write, 1 GiB, this run)")
    print("%same: a copy of the same bytes, timed alike in this run, over each one's time; "
          "%copy: GB/s over the 1 GiB copy's")
    hdr = (f"{'op':<15} {'shape':<15} {'dtype':<5} {'MB':>6} {'scree us':>9} {'eager us':>9} "
           f"{'comp us':>9} {'copy us':>8} {'scree %same':>11} {'eager %same':>11} "
           f"{'comp %same':>10} {'scree %copy':>11} {'vs eager':>8} {'vs comp':>8}")
    print(hdr, flush=True)
    results = []
    for op, label, d, p in cases(spec):
        if only_op and op not in only_op:
            continue
        c = make(op, d, p, nsets_for)
        n = len(c.sets)
        sargs = [c.scree(st) for st in c.sets]
        fn = fns[op]

        def scree_call(i):
            st = fn(ctx, ctypes.byref(sargs[i % n]), ctypes.c_void_p(stream))
            if st != 0:
                sys.exit(f"scree_{op} {label} {d}: {lib.scree_status_name(st).decode()}: "
                         f"{lib.scree_last_error(ctx).decode()}")

        e_out = c.eager(c.sets[0])  # before scree: RoPE rotates in place
        e_out = list(e_out) if isinstance(e_out, tuple) else [e_out]
        eager_err = [rel_err(g, r) for g, r in zip(e_out, c.ref(c.sets[0]))]
        del e_out
        scree_call(0)
        torch.cuda.synchronize()
        errs = [rel_err(g, r) for g, r in zip(c.got(c.sets[0]), c.ref(c.sets[0]))]
        tol = TOL[d] if op != "cross_entropy" else 1e-4 if d != "fp32" else 1e-5
        if not all(e <= tol for e in errs):
            sys.exit(f"FAIL {op} {label} {d}: scree relative error {errs} > {tol}")
        # Timing repeats RoPE's in-place rotation on the same buffers: the
        # bytes moved are the same.

        scree_ms = time_batched(scree_call, args.reps, args.inner, args.warmup)
        # The per-sequence eager loop takes milliseconds a call: fewer reps.
        ereps = min(args.reps, 10) if op == "ragged_softmax" else args.reps
        eager_ms = time_batched(lambda i: c.eager(c.sets[i % n]), ereps, args.inner, args.warmup)
        comp_ms = None
        # The ragged softmax's per-sequence loop compiles one graph per
        # distinct length (minutes for 64 sequences) and still launches one
        # kernel per sequence: not measured, shown as n/a.
        if op != "ragged_softmax" and not getattr(args, "no_compile", False):
            try:
                cf = torch.compile(c.eager, dynamic=False)
                cf(c.sets[0])
                comp_ms = time_batched(lambda i: cf(c.sets[i % n]), args.reps, args.inner,
                                       args.warmup)
            except Exception as e:  # noqa: BLE001 - report, keep going
                print(f"  torch.compile failed for {op}: {type(e).__name__}: {str(e)[:120]}")
        # A copy of the same bytes (half read, half written), timed the same
        # way over as many rotated buffers: the physical limit for this size.
        half = max(1, c.nbytes // 2)
        nc = max(1, min(args.max_sets, -(-3 * l2 // c.nbytes)))
        csrc = [torch.empty(half, dtype=torch.uint8, device="cuda").fill_(1) for _ in range(nc)]
        cdst = [torch.empty_like(t) for t in csrc]
        same_ms = time_batched(lambda i: cdst[i % nc].copy_(csrc[i % nc]), args.reps, args.inner,
                               args.warmup)
        del csrc, cdst
        gb = lambda ms: c.nbytes / (ms * 1e-3) / 1e9
        r = dict(op=op, shape=label, dtype=d, mbytes=c.nbytes / 1e6, input_sets=n,
                 scree_us=scree_ms * 1e3, eager_us=eager_ms * 1e3,
                 compiled_us=comp_ms * 1e3 if comp_ms else None,
                 scree_gbps=gb(scree_ms), eager_gbps=gb(eager_ms),
                 compiled_gbps=gb(comp_ms) if comp_ms else None, copy_gbps=copy_gbps,
                 same_copy_us=same_ms * 1e3, same_copy_gbps=gb(same_ms),
                 scree_pct_same=100 * same_ms / scree_ms,
                 eager_pct_same=100 * same_ms / eager_ms,
                 compiled_pct_same=100 * same_ms / comp_ms if comp_ms else None,
                 scree_pct_copy=100 * gb(scree_ms) / copy_gbps,
                 eager_pct_copy=100 * gb(eager_ms) / copy_gbps,
                 compiled_pct_copy=100 * gb(comp_ms) / copy_gbps if comp_ms else None,
                 speedup_eager=eager_ms / scree_ms,
                 speedup_compiled=comp_ms / scree_ms if comp_ms else None,
                 scree_rel_err=errs, eager_rel_err=eager_err)
        results.append(r)
        cu = f"{r['compiled_us']:9.1f}" if comp_ms else f"{'n/a':>9}"
        cp = f"{r['compiled_pct_same']:9.1f}%" if comp_ms else f"{'n/a':>10}"
        cs = f"{r['speedup_compiled']:7.2f}x" if comp_ms else f"{'n/a':>8}"
        print(f"{op:<15} {label:<15} {d:<5} {r['mbytes']:6.0f} {r['scree_us']:9.1f} "
              f"{r['eager_us']:9.1f} {cu} {r['same_copy_us']:8.1f} {r['scree_pct_same']:10.1f}% "
              f"{r['eager_pct_same']:10.1f}% {cp} {r['scree_pct_copy']:10.1f}% "
              f"{r['speedup_eager']:7.2f}x {cs}", flush=True)
        del c, sargs
        torch.cuda.empty_cache()
    return results
