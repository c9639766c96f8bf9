#!/usr/bin/env python3
"""Greedy decoding with a paged KV cache through scree, against the same
model with a contiguous cache and PyTorch's attention.

    python3 examples/decode.py --device cuda [--prompts 7,33,120,1] [--new 24]
                               [--page-size 16] [--dtype fp16|bf16] [--seed 0]

The model is LLaMA-shaped with random weights (embeddings, RMSNorm, RoPE,
GQA attention, SwiGLU MLP, a few layers, a vocabulary of 1000). Both runs
prefill every prompt in one packed batch, then decode --new tokens per
sequence, one token a sequence a step:

  paged   the example manages the cache as a server does: a pool of pages
          per layer (vLLM's [pages, 2, page_size, H_kv, d] buffer, K and V
          its two halves), pages handed out in shuffled order as sequences
          grow, block tables; scree.kv_append writes each step's K and V
          into their slots, scree.paged_attention attends.
  torch   a contiguous [max_len, H_kv, d] cache per sequence, and
          F.scaled_dot_product_attention per sequence with a bottom-right
          causal mask (the reference).

Everything but attention runs in float32 and is the same code for both, and
attention reads q, k and v rounded to --dtype in both, so that the runs
differ only in the attention kernels. The paged run is fed the reference's
tokens (teacher forcing), so both see the same sequences at every step.
Checks (exit 1 on failure): the logits of every step agree within 1% of
their largest magnitude, and every greedy choice is the reference's, except
at a near tie (the reference's two best logits closer than twice the
largest logit difference: in bf16 such a pair can flip). Needs a CUDA GPU.
"""
import argparse
import math
import sys

import torch
import torch.nn.functional as F

CFG = dict(vocab=1000, hidden=512, layers=4, heads=8, kv_heads=2, head_dim=64, inter=1376,
           theta=10000.0, eps=1e-6)


def make_weights(cfg, device, gen):
    h, d, nq, nkv = cfg["hidden"], cfg["head_dim"], cfg["heads"], cfg["kv_heads"]

    def lin(n_out, n_in):
        return (torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in)).to(device)

    def norm():
        return (1 + 0.1 * torch.randn(h, generator=gen)).to(device)

    layers = [dict(w_in=norm(), qkv=lin((nq + 2 * nkv) * d, h), o=lin(h, nq * d), w_post=norm(),
                   gate_up=lin(2 * cfg["inter"], h), down=lin(h, cfg["inter"]))
              for _ in range(cfg["layers"])]
    return dict(embed=torch.randn(cfg["vocab"], h, generator=gen).to(device), layers=layers,
                w_out=norm(), head=lin(cfg["vocab"], h) * 4)


def rope(x, pos, theta):
    """Rotate-half RoPE of x [T, H, d] at positions pos [T]."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = pos.float()[:, None, None] * inv
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :d // 2], x[..., d // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)


def forward(W, cfg, ids, pos, attend):
    """Logits [T, vocab] of the packed tokens ids at positions pos; attend(layer, q, k, v)
    stores the new k and v in the cache and returns attention [T, heads, d]."""
    t, nq, nkv, d = ids.shape[0], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    x = W["embed"][ids]
    for i, L in enumerate(W["layers"]):
        n = F.rms_norm(x, [x.shape[-1]], L["w_in"], cfg["eps"])
        qkv = (n @ L["qkv"].t()).view(t, nq + 2 * nkv, d)
        q, k = rope(qkv[:, :nq], pos, cfg["theta"]), rope(qkv[:, nq:nq + nkv], pos, cfg["theta"])
        a = attend(i, q, k, qkv[:, nq + nkv:])
        x = x + a.reshape(t, nq * d).float() @ L["o"].t()
        n = F.rms_norm(x, [x.shape[-1]], L["w_post"], cfg["eps"])
        gate, up = (n @ L["gate_up"].t()).chunk(2, -1)
        x = x + (F.silu(gate) * up) @ L["down"].t()
    return F.rms_norm(x, [x.shape[-1]], W["w_out"], cfg["eps"]) @ W["head"].t()


class PagedRun:
    """The serving side: page pools, block tables, scree's kernels."""

    def __init__(self, cfg, n_seqs, max_len, page_size, dtype, device, gen):
        import scree
        self.scree, self.page = scree, page_size
        per_seq = -(-max_len // page_size)
        n_pages = n_seqs * per_seq + 3  # a few never used
        self.kv = [torch.zeros(n_pages, 2, page_size, cfg["kv_heads"], cfg["head_dim"],
                               dtype=dtype, device=device) for _ in range(cfg["layers"])]
        self.free = torch.randperm(n_pages, generator=gen).tolist()  # pages in shuffled order
        self.table = [[0] * per_seq for _ in range(n_seqs)]
        self.lens = [0] * n_seqs
        self.dtype, self.device = dtype, device

    def step(self, W, cfg, ids, pos, new_lens):
        slots = []
        for b, n in enumerate(new_lens):
            for j in range(self.lens[b], self.lens[b] + n):
                if j % self.page == 0:  # a new page for this sequence
                    self.table[b][j // self.page] = self.free.pop()
                slots.append(self.table[b][j // self.page] * self.page + j % self.page)
            self.lens[b] += n
        dev = self.device
        slots = torch.tensor(slots, dtype=torch.int64, device=dev)
        block_table = torch.tensor(self.table, dtype=torch.int32, device=dev)
        seqlens_k = torch.tensor(self.lens, dtype=torch.int32, device=dev)
        cu_q = torch.tensor([0] + new_lens, device=dev).cumsum(0).to(torch.int32)
        max_q, max_k = max(new_lens), max(self.lens)

        def attend(i, q, k, v):
            k_cache, v_cache = self.kv[i][:, 0], self.kv[i][:, 1]
            self.scree.kv_append(k.to(self.dtype), v.to(self.dtype), k_cache, v_cache, slots)
            return self.scree.paged_attention(q.to(self.dtype), k_cache, v_cache, block_table,
                                              seqlens_k, cu_q, max_q, max_k, causal=True)

        return forward(W, cfg, ids, pos, attend)


class TorchRun:
    """The reference: a contiguous cache per sequence and SDPA."""

    def __init__(self, cfg, n_seqs, max_len, dtype, device):
        shape = (n_seqs, max_len, cfg["kv_heads"], cfg["head_dim"])
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg["layers"])]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(cfg["layers"])]
        self.lens = [0] * n_seqs
        self.dtype = dtype

    def step(self, W, cfg, ids, pos, new_lens):
        def attend(i, q, k, v):
            outs, t = [], 0
            for b, n in enumerate(new_lens):
                start, end = self.lens[b], self.lens[b] + n
                self.k[i][b, start:end] = k[t:t + n].to(self.dtype)
                self.v[i][b, start:end] = v[t:t + n].to(self.dtype)
                qb = q[t:t + n].to(self.dtype).float().transpose(0, 1)  # [H, n, d]
                kb = self.k[i][b, :end].float().transpose(0, 1)
                vb = self.v[i][b, :end].float().transpose(0, 1)
                # Bottom-right causal: query r sits at position start + r.
                mask = torch.arange(end, device=q.device) <= start + torch.arange(
                    n, device=q.device)[:, None]
                outs.append(F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask,
                                                           enable_gqa=True).transpose(0, 1))
                t += n
            return torch.cat(outs)

        logits = forward(W, cfg, ids, pos, attend)
        self.lens = [a + b for a, b in zip(self.lens, new_lens)]
        return logits


def generate(run, W, cfg, prompts, n_new, force=None):
    """Greedy decoding: the prompts prefilled as one packed batch, then one
    token a sequence a step. Returns each step's greedy tokens [B, n_new]
    and logits at the sequences' last tokens [B, n_new, vocab]. With force
    ([B, n_new] tokens), step s feeds force[:, s] on instead of its own
    greedy choice (teacher forcing: both runs see the same sequences)."""
    dev = prompts[0].device
    ids = torch.cat(prompts)
    pos = torch.cat([torch.arange(len(p), device=dev) for p in prompts])
    new_lens = [len(p) for p in prompts]
    lengths = list(new_lens)
    tokens, logits = [], []
    for step in range(n_new):
        out = run.step(W, cfg, ids, pos, new_lens)
        last = out[torch.tensor(new_lens, device=dev).cumsum(0) - 1]
        tokens.append(last.argmax(-1))
        ids = tokens[-1] if force is None else force[:, step]
        logits.append(last)
        pos = torch.tensor(lengths, device=dev)
        lengths = [n + 1 for n in lengths]
        new_lens = [1] * len(prompts)
    return torch.stack(tokens, 1), torch.stack(logits, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", required=True, help="cuda (or cuda:N)")
    ap.add_argument("--prompts", default="7,33,120,1", help="prompt lengths, comma-separated")
    ap.add_argument("--new", type=int, default=24, help="tokens generated per sequence")
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not args.device.startswith("cuda") or not torch.cuda.is_available():
        sys.exit(f"decode.py needs a CUDA GPU (--device cuda); got --device {args.device}, "
                 f"CUDA available: {torch.cuda.is_available()}")
    device = torch.device(args.device)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    gen = torch.Generator().manual_seed(args.seed)
    lens = [int(n) for n in args.prompts.split(",")]
    W = make_weights(CFG, device, gen)
    prompts = [torch.randint(0, CFG["vocab"], (n,), generator=gen).to(device) for n in lens]
    max_len = max(lens) + args.new

    with torch.no_grad():
        want, want_logits = generate(TorchRun(CFG, len(lens), max_len, dtype, device), W, CFG,
                                     prompts, args.new)
        paged = PagedRun(CFG, len(lens), max_len, args.page_size, dtype, device, gen)
        got, got_logits = generate(paged, W, CFG, prompts, args.new, force=want)

    scale = want_logits.abs().max().item()
    err = (got_logits - want_logits).abs().max().item()
    same = torch.equal(got, want)
    # A greedy choice may differ only where the reference's two best logits
    # are closer than twice the largest logit difference (a near tie).
    top2 = want_logits.topk(2, dim=-1).values
    margin = top2[..., 0] - top2[..., 1]
    real = (got != want) & (margin > 2 * err)
    print(f"{len(lens)} prompts of {lens} tokens, {args.new} new tokens each, {args.dtype}, "
          f"page_size {args.page_size}, {len(paged.kv[0])} pages a layer")
    for b, n in enumerate(lens):
        print(f"  seq {b} ({n:4d} prompt tokens): {got[b, :12].tolist()}"
              f"{' ...' if args.new > 12 else ''}")
    print(f"tokens identical: {same}; largest logit difference {err:.3g} "
          f"({err / scale:.2%} of the largest logit {scale:.3g})")
    for b, s in (got != want).nonzero().tolist():
        top = want_logits[b, s].topk(2).values.tolist()
        print(f"difference: sequence {b}, step {s}: scree {got[b, s].item()}, torch "
              f"{want[b, s].item()} (torch's two best logits {top[0]:.4f}, {top[1]:.4f}: "
              f"{'a near tie' if not real[b, s] else 'NOT a tie'})")
    ok = not real.any().item() and err <= 0.01 * scale
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
