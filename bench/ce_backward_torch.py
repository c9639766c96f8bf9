"""Cross-entropy with its gradient in one call against PyTorch and Liger-Kernel,
for bench/compare_torch.py (--op cross-entropy-backward).

For each case (rows x vocab, dtype, smoothing eps and z-loss z), all in one
process on the same buffers:
  - scree: scree_cross_entropy writing loss and dlogits (the mean over the
    rows not ignored, grad_scale 1) in one call, into a buffer of its own
    and in place over the logits; and the plain forward (no dlogits) alone;
  - PyTorch eager, as a training step writes it: F.cross_entropy(x, t,
    label_smoothing=eps) (+ z * mean(lse^2) over the rows kept, with
    torch.logsumexp), then backward: forward + backward together, and the
    backward alone (autograd.grad with the graph kept);
  - Liger-Kernel's fused cross entropy (liger_kernel.transformers.
    cross_entropy.LigerCrossEntropyLoss, lse_square_scale = z; it writes the
    gradient over its input in its forward): forward + backward; "n/a"
    where liger_kernel does not import;
  - a device copy of the logits' bytes (read once, written once): what the
    fused call must move at least (logits read once, dlogits written once).

Timing: CUDA events around --inner back-to-back calls, --warmup rounds,
median of --attn-reps (compare_torch's time_batched); input sets rotated
beyond 3x the L2 (at least two). Before timing, scree's loss and dlogits are
checked against PyTorch autograd in float64 on a subset of rows (the mean's
count taken over every row): loss within 1e-4 + 1e-5 |ref|, dlogits within
1e-4 |scale| + rtol |ref| (rtol 2^-7 bf16, 2^-10 fp16, 5e-5 fp32; plus 2^-24
in fp16, its smallest subnormal); the run
fails if either is off. Targets: uniform, every 10th row ignore_index -100.
"""
import ctypes
import sys

torch = None
F = None

DT = {"fp32": 0, "fp16": 1, "bf16": 2}
RTOL = {"bf16": 1 / 128, "fp16": 1 / 1024, "fp32": 5e-5}
I64, U64, I32, FL = ctypes.c_int64, ctypes.c_uint64, ctypes.c_int, ctypes.c_float
REDUCTION_MEAN = 2


class CeArgs(ctypes.Structure):
    """scree_cross_entropy_args, field for field (include/scree.h)."""
    _fields_ = [("logits", U64), ("targets", U64), ("loss", U64), ("lse", U64),
                ("rows", I64), ("vocab", I64), ("logits_stride", I64), ("ignore_index", I64),
                ("dtype", I32), ("dlogits", U64), ("dlogits_stride", I64),
                ("label_smoothing", FL), ("z_loss", FL), ("reduction", I32),
                ("grad_scale", FL)]


# rows, vocab, dtype, eps, z: every case moves 64 MB or more of logits.
CASES = [
    (8192, 128256, "bf16", 0.0, 0.0),
    (8192, 128256, "bf16", 0.1, 1e-4),
    (4096, 128256, "bf16", 0.0, 0.0),
    (16384, 32000, "bf16", 0.0, 0.0),
    (16384, 32000, "fp16", 0.1, 1e-4),
    (4096, 151936, "bf16", 0.0, 0.0),
    (2048, 128256, "fp32", 0.0, 0.0),
    (1024, 32768, "bf16", 0.0, 0.0),
    (2048, 262144, "bf16", 0.0, 0.0),
]


def tdt(name):
    return {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[name]


def liger_loss_class():
    try:
        from liger_kernel.transformers.cross_entropy import LigerCrossEntropyLoss
        return LigerCrossEntropyLoss
    except Exception:  # not installed, or fails to import on this stack
        return None


def torch_loss(x, t, eps, z):
    """The eager training loss: mean cross-entropy (+ PaLM's z-loss)."""
    loss = F.cross_entropy(x, t, ignore_index=-100, label_smoothing=eps)
    if z:
        keep = t != -100
        lse = torch.logsumexp(x.float(), dim=-1)
        loss = loss + z * (lse[keep] ** 2).sum() / keep.sum().clamp(min=1)
    return loss


def check(lib, ctx, fn, st, rows, vocab, dname, eps, z, sub=64):
    """scree's loss and dlogits against float64 autograd on the first `sub`
    rows (plus the last), the mean's count over every row."""
    a = CeArgs()
    x, t = st["x"], st["t"]
    loss = torch.full((rows,), float("nan"), device="cuda", dtype=torch.float32)
    d = torch.full_like(x, float("nan"))
    a.logits, a.targets, a.loss, a.lse = x.data_ptr(), t.data_ptr(), loss.data_ptr(), 0
    a.rows, a.vocab, a.dtype, a.ignore_index = rows, vocab, DT[dname], -100
    a.dlogits, a.label_smoothing, a.z_loss = d.data_ptr(), eps, z
    a.reduction, a.grad_scale = REDUCTION_MEAN, 1.0
    s = fn(ctx, ctypes.byref(a), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    if s != 0:
        sys.exit(f"scree_cross_entropy: {lib.scree_status_name(s).decode()}: "
                 f"{lib.scree_last_error(ctx).decode()}")
    torch.cuda.synchronize()
    kept = int((t != -100).sum())
    scale = 1.0 / max(kept, 1)
    idx = torch.cat([torch.arange(min(sub, rows), device="cuda"),
                     torch.tensor([rows - 1], device="cuda")]).unique()
    xs = x[idx].double().requires_grad_(True)
    ts = t[idx]
    per = F.cross_entropy(xs, ts, ignore_index=-100, label_smoothing=eps, reduction="none")
    if z:
        per = per + z * torch.logsumexp(xs, dim=-1) ** 2 * (ts != -100)
    (g,) = torch.autograd.grad(per.sum() * scale, xs)
    got_l, got_d = loss[idx].double(), d[idx].double()
    bad_l = ((got_l - per.detach()).abs() > 1e-4 + 1e-5 * per.detach().abs()).sum().item()
    # fp16's smallest subnormal on top: mean gradients of a large batch and
    # vocabulary sit below it (ops/rowwise.h, SCREE__CE_GRAD_ATOL_FP16_FLOOR)
    floor = 2.0 ** -24 if dname == "fp16" else 0.0
    err = (got_d - g).abs() - (1e-4 * scale + floor + RTOL[dname] * g.abs())
    bad_d = (err > 0).sum().item() + torch.isnan(got_d).sum().item()
    if bad_l or bad_d:
        sys.exit(f"cross-entropy {rows}x{vocab} {dname} eps={eps} z={z}: scree is wrong: "
                 f"{bad_l} losses, {bad_d} gradients outside the tolerance (max |d err| "
                 f"{(got_d - g).abs().max().item():.3g})")


def run(args, lib, ctx, l2, time_batched, torch_module, copy_gbps):
    global torch, F
    torch = torch_module
    import torch.nn.functional as F_
    F = F_
    fn = lib.scree_cross_entropy
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(CeArgs), ctypes.c_void_p]
    fn.restype = ctypes.c_int
    Liger = liger_loss_class()
    stream = torch.cuda.current_stream().cuda_stream
    reps, inner, warmup = args.attn_reps, args.inner, args.warmup
    print(f"\ncross-entropy forward + backward (the mean; device copy {copy_gbps:.0f} GB/s): "
          f"scree's fused call vs PyTorch eager and Liger-Kernel "
          f"({'available' if Liger else 'n/a: liger_kernel does not import'})")
    hdr = (f"{'case':<34} {'copy us':>8} {'scree us':>9} {'%copy':>6} {'inplace':>8} "
           f"{'fwd us':>8} {'torch f+b':>10} {'torch b':>8} {'liger f+b':>10} "
           f"{'x torch':>8} {'x liger':>8}")
    print(hdr)
    results = []
    for rows, vocab, dname, eps, z in CASES:
        dt = tdt(dname)
        nbytes = rows * vocab * (4 if dname == "fp32" else 2)
        nsets = max(2, min(args.max_sets, -(-3 * l2 // (2 * nbytes))))
        gen = torch.Generator(device="cuda").manual_seed(rows * 7 + vocab)
        sets = []
        for _ in range(nsets):
            x = (torch.randn(rows, vocab, device="cuda", generator=gen) * 2).to(dt)
            t = torch.randint(0, vocab, (rows,), device="cuda", generator=gen)
            t[::10] = -100
            sets.append(dict(x=x, t=t, d=torch.empty_like(x),
                             loss=torch.empty(rows, device="cuda", dtype=torch.float32)))
        check(lib, ctx, fn, sets[0], rows, vocab, dname, eps, z)

        def make(st, dl):
            a = CeArgs()
            a.logits, a.targets, a.loss, a.lse = (st["x"].data_ptr(), st["t"].data_ptr(),
                                                  st["loss"].data_ptr(), 0)
            a.rows, a.vocab, a.dtype, a.ignore_index = rows, vocab, DT[dname], -100
            a.dlogits = dl
            a.label_smoothing, a.z_loss = eps, z
            a.reduction, a.grad_scale = REDUCTION_MEAN, 1.0
            return a

        fused = [make(st, st["d"].data_ptr()) for st in sets]
        inplace = [make(st, st["x"].data_ptr()) for st in sets]
        fwd = [make(st, 0) for st in sets]

        def scree_call(lst):
            def go(i):
                s = fn(ctx, ctypes.byref(lst[i % nsets]), ctypes.c_void_p(stream))
                if s != 0:
                    sys.exit(f"scree_cross_entropy: {lib.scree_status_name(s).decode()}: "
                             f"{lib.scree_last_error(ctx).decode()}")
            return go

        def copy_call(i):
            st = sets[i % nsets]
            st["d"].copy_(st["x"])

        t_copy = time_batched(copy_call, reps, inner, warmup) * 1e3
        t_fused = time_batched(scree_call(fused), reps, inner, warmup) * 1e3
        t_fwd = time_batched(scree_call(fwd), reps, inner, warmup) * 1e3
        # Eager: a fresh leaf each call (as a step's logits); its grad freed.
        leaves = [st["x"].detach().requires_grad_(True) for st in sets]

        def torch_both(i):
            x = leaves[i % nsets]
            torch_loss(x, sets[i % nsets]["t"], eps, z).backward()
            x.grad = None

        t_torch = time_batched(torch_both, reps, inner, warmup) * 1e3
        graphs = [torch_loss(leaves[k], sets[k]["t"], eps, z) for k in range(nsets)]

        def torch_bwd(i):
            torch.autograd.grad(graphs[i % nsets], leaves[i % nsets], retain_graph=True)

        t_tbwd = time_batched(torch_bwd, reps, inner, warmup) * 1e3
        del graphs
        t_liger = None
        if Liger is not None:
            try:
                m = Liger(ignore_index=-100, lse_square_scale=z, label_smoothing=eps,
                          reduction="mean")
                # Liger writes its gradient over its input: a copy of its own.
                lx = [st["x"].detach().clone().requires_grad_(True) for st in sets]

                def liger_both(i):
                    x = lx[i % nsets]
                    m(x, sets[i % nsets]["t"]).backward()
                    x.grad = None

                t_liger = time_batched(liger_both, reps, inner, warmup) * 1e3
                del lx
            except Exception as e:  # an API this version lacks
                print(f"  liger: {type(e).__name__}: {e}")
        # In place last: it overwrites the logits of every set.
        t_inplace = time_batched(scree_call(inplace), reps, inner, warmup) * 1e3
        name = f"{rows}x{vocab} {dname} eps={eps:g} z={z:g}"
        pct = 100 * t_copy / t_fused
        xt = t_torch / t_fused
        xl = t_liger / t_fused if t_liger else None
        print(f"{name:<34} {t_copy:>8.1f} {t_fused:>9.1f} {pct:>5.1f}% {t_inplace:>8.1f} "
              f"{t_fwd:>8.1f} {t_torch:>10.1f} {t_tbwd:>8.1f} "
              f"{(f'{t_liger:.1f}' if t_liger else 'n/a'):>10} {xt:>7.2f}x "
              f"{(f'{xl:.2f}x' if xl else 'n/a'):>8}")
        results.append(dict(case=name, rows=rows, vocab=vocab, dtype=dname, eps=eps, z=z,
                            copy_us=t_copy, scree_us=t_fused, pct_copy=pct,
                            scree_inplace_us=t_inplace, scree_fwd_us=t_fwd,
                            torch_fwd_bwd_us=t_torch, torch_bwd_us=t_tbwd,
                            liger_fwd_bwd_us=t_liger, x_torch=xt, x_liger=xl))
        del sets, leaves, fused, inplace, fwd
        torch.cuda.empty_cache()
    return results
