#!/usr/bin/env python3
"""A LLaMA-style decoder layer on a packed batch of uneven sequences with
scree's ops, against the same layer in plain PyTorch on the padded batch.

    python3 examples/llama_block.py [--seqs 16] [--min-len 128] [--max-len 2048]
                                    [--config llama-3-8b|small] [--dtype bf16|fp16]
                                    [--reps 20] [--seed 0]

scree's layer (packed, [T, hidden], no padding anywhere):

    n      = rms_norm(x)                              scree.rms_norm
    q,k,v  = views of n @ W_qkv                       PyTorch matmul, no copies
    q,k    = RoPE, positions restarting per sequence  scree.rope (in place on the views)
    a      = causal GQA attention per sequence        scree.varlen_attn (strided q, k, v)
    y, h   = rms_norm(a @ W_o + x), a @ W_o + x       scree.add_rms_norm (fused residual)
    out    = swiglu(y @ W_gate_up) @ W_down + h       scree.swiglu, PyTorch matmuls

PyTorch's layer is the HuggingFace LLaMA layer written out: the batch padded
to the longest sequence ([B, L, hidden]), F.rms_norm, rotate-half RoPE with
cos and sin cast to the activations' dtype, scaled_dot_product_attention
with is_causal (the padding sits after each sequence's tokens, so no real
query sees it), F.silu(gate) * up.

Checks (exit 1 on failure): both layers' outputs at the real tokens against
a float32 run of PyTorch's layer (same weights and inputs): scree's largest
error at most twice PyTorch's own low-precision error plus 1e-3 of the
output's largest magnitude, and scree against PyTorch directly within 5% of
that magnitude. Speed: tokens per second of each layer (real tokens only,
over the median of --reps timed forwards on the current stream, CUDA
events, after warm-up; the first scree calls of a shape pick its kernels).
Needs a CUDA GPU. The functions are imported by python/tests as well.
"""
import argparse
import math
import statistics
import sys

import torch
import torch.nn.functional as F

CONFIGS = {
    # LLaMA-3-8B's layer.
    "llama-3-8b": dict(hidden=4096, heads=32, kv_heads=8, head_dim=128, inter=14336,
                       theta=500000.0, eps=1e-5),
    "small": dict(hidden=1024, heads=16, kv_heads=4, head_dim=64, inter=2816,
                  theta=10000.0, eps=1e-6),
    # For tests on the CPU (the reference kernels).
    "tiny": dict(hidden=128, heads=4, kv_heads=2, head_dim=32, inter=256, theta=10000.0,
                 eps=1e-6),
}


def make_weights(cfg, device, dtype, gen):
    """The layer's weights, random (scaled as at initialisation)."""
    h, d = cfg["hidden"], cfg["head_dim"]
    nq, nkv, inter = cfg["heads"], cfg["kv_heads"], cfg["inter"]

    def lin(n_out, n_in):
        w = torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in)
        return w.to(device=device, dtype=dtype)

    return {
        "w_in": (1 + 0.1 * torch.randn(h, generator=gen)).to(device=device, dtype=dtype),
        "w_post": (1 + 0.1 * torch.randn(h, generator=gen)).to(device=device, dtype=dtype),
        "qkv": lin((nq + 2 * nkv) * d, h),
        "o": lin(h, nq * d),
        "gate_up": lin(2 * inter, h),
        "down": lin(h, inter),
    }


def scree_layer(x, cu_seqlens, max_len, W, cfg, inplace_rope=True):
    """The layer on a packed batch x [T, hidden] with scree's ops."""
    import scree
    t = x.shape[0]
    nq, nkv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    n = scree.rms_norm(x, [x.shape[-1]], W["w_in"], cfg["eps"])
    qkv = (n @ W["qkv"].t()).view(t, nq + 2 * nkv, d)
    q, k, v = qkv[:, :nq], qkv[:, nq:nq + nkv], qkv[:, nq + nkv:]
    q, k = scree.rope(q, k, cu_seqlens=cu_seqlens, theta=cfg["theta"], inplace=inplace_rope)
    a = scree.varlen_attn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, causal=True)
    y, h = scree.add_rms_norm(a.view(t, nq * d) @ W["o"].t(), x, W["w_post"], cfg["eps"])
    return scree.swiglu(y @ W["gate_up"].t()) @ W["down"].t() + h


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def torch_layer(x, W, cfg):
    """The same layer in plain PyTorch on a padded batch x [B, L, hidden]
    (each sequence's tokens first, padding after)."""
    b, length, hidden = x.shape
    nq, nkv, d = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    n = F.rms_norm(x, [hidden], W["w_in"], cfg["eps"])
    qkv = (n @ W["qkv"].t()).view(b, length, nq + 2 * nkv, d)
    q = qkv[:, :, :nq].transpose(1, 2)
    k = qkv[:, :, nq:nq + nkv].transpose(1, 2)
    v = qkv[:, :, nq + nkv:].transpose(1, 2)
    inv = 1.0 / (cfg["theta"] ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    freqs = torch.arange(length, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    q = q * cos + _rotate_half(q) * sin
    k = k * cos + _rotate_half(k) * sin
    k = k.repeat_interleave(nq // nkv, dim=1)
    v = v.repeat_interleave(nq // nkv, dim=1)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    h = a.transpose(1, 2).reshape(b, length, nq * d) @ W["o"].t() + x
    y = F.rms_norm(h, [hidden], W["w_post"], cfg["eps"])
    gate, up = (y @ W["gate_up"].t()).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ W["down"].t() + h


def make_batch(lengths, hidden, device, dtype, gen):
    """(packed [T, hidden], padded [B, L, hidden] with zeros after each
    sequence, cu_seqlens int32, longest length)."""
    longest = max(lengths)
    padded = torch.zeros(len(lengths), longest, hidden, dtype=dtype)
    for i, n in enumerate(lengths):
        padded[i, :n] = torch.randn(n, hidden, generator=gen).to(dtype)
    padded = padded.to(device)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths).cumsum(0)
    return unpad(padded, lengths), padded, cu.to(device), longest


def unpad(padded, lengths):
    return torch.cat([padded[i, :n] for i, n in enumerate(lengths)])


def compare(out_scree, out_torch_padded, out_ref_padded, lengths):
    """Errors of both layers against the float32 one, at the real tokens:
    (scree's max error, PyTorch's max error, scree vs PyTorch, scale)."""
    ref = unpad(out_ref_padded, lengths).float()
    pt = unpad(out_torch_padded, lengths).float()
    sc = out_scree.float()
    return ((sc - ref).abs().max().item(), (pt - ref).abs().max().item(),
            (sc - pt).abs().max().item(), ref.abs().max().item())


def _time(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="llama-3-8b", choices=sorted(CONFIGS))
    p.add_argument("--seqs", type=int, default=16)
    p.add_argument("--min-len", type=int, default=128)
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("llama_block: needs a CUDA GPU", file=sys.stderr)
        return 2
    import scree
    cfg = CONFIGS[args.config]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    dev = torch.device("cuda")
    gen = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(args.min_len, args.max_len + 1, (args.seqs,), generator=gen).tolist()
    W = make_weights(cfg, dev, dtype, gen)
    x, xp, cu, longest = make_batch(lengths, cfg["hidden"], dev, dtype, gen)
    total, padded_tokens = sum(lengths), len(lengths) * longest
    print(f"scree {scree.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print(f"layer {args.config} ({cfg}), {args.dtype}")
    print(f"batch: {len(lengths)} sequences of {min(lengths)}..{longest} tokens, {total} tokens "
          f"packed, {padded_tokens} padded ({100 * (1 - total / padded_tokens):.0f}% padding)")

    with torch.no_grad():
        out_s = scree_layer(x, cu, longest, W, cfg)
        out_t = torch_layer(xp, W, cfg)
        W32 = {k: v.float() for k, v in W.items()}
        out_r = torch_layer(xp.float(), W32, cfg)
        err_s, err_t, diff, scale = compare(out_s, out_t, out_r, lengths)
        ok = err_s <= 2 * err_t + 1e-3 * scale and diff <= 0.05 * scale
        print(f"output vs float32 PyTorch (max |diff|, outputs up to {scale:.3g}): "
              f"scree {err_s:.4g}, PyTorch {args.dtype} {err_t:.4g}; scree vs PyTorch {diff:.4g}"
              f" -> {'match' if ok else 'MISMATCH'}")
        t_s = _time(lambda: scree_layer(x, cu, longest, W, cfg), args.reps)
        t_t = _time(lambda: torch_layer(xp, W, cfg), args.reps)
    print(f"scree (packed):   {t_s * 1e3:8.3f} ms  {total / t_s:12,.0f} tokens/s")
    print(f"PyTorch (padded): {t_t * 1e3:8.3f} ms  {total / t_t:12,.0f} tokens/s")
    print(f"speedup: {t_t / t_s:.2f}x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
