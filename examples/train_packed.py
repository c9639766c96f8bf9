#!/usr/bin/env python3
"""train_packed.py - packed fine-tuning of a LLaMA-shaped model, three ways.

A LLaMA-shaped model (8 layers, hidden 2048, 16 query and 4 KV heads of
128, intermediate 5632, vocabulary 32000; random init from a seed, no
download) is trained with AdamW on synthetic token sequences of log-normal
lengths (mean 2048, at most 16384), 32768 tokens a step, three ways from
the same seed and the same data:

  sdpa       HuggingFace with SDPA on padded batches (micro-batches of at
             most --padded-tokens padded tokens, gradients accumulated; the
             loss is the mean over the step's tokens, as in the others);
  fa2_liger  HuggingFace on packed batches (DataCollatorWithFlattening)
             with PyTorch's FlashAttention-2 varlen kernel
             (torch.nn.attention.varlen) as the attention and Liger-Kernel's
             RMSNorm, RoPE, SwiGLU and fused linear cross-entropy;
  scree      HuggingFace on the same packed batches with
             scree.hf.apply(model) (attention, RMSNorm, RoPE, SwiGLU and the
             fused linear cross-entropy on scree).

plus fp32: one step of the sdpa way in float32, whose gradient norm is the
reference for step 1's. Each way runs in its own process (Liger patches
transformers' classes). Per way: the loss of every step, step 1's gradient
norm, tokens per second over the steps after --warmup, peak memory, and the
step time split by kernel family (matmul, attention forward, attention
backward, row-wise, loss, optimizer, other) from the PyTorch profiler over
--profile-steps steps.

    python examples/train_packed.py --out DIR                # all four, report in DIR
    python examples/train_packed.py --mode scree --steps 20  # one way, JSON on stdout

The sequences are learnable: each repeats a random motif of 4-64 tokens
(Zipf-distributed vocabulary) with 10% of its tokens replaced at random, so
the loss falls only as the model learns to copy from earlier in the same
sequence, and attention that crossed a sequence boundary would hurt it.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

WAYS = ("sdpa", "fa2_liger", "scree")
FAMILIES = ("matmul", "attention fwd", "attention bwd", "row-wise", "loss", "optimizer", "other")


def model_config(args):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                       intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                       num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                       head_dim=args.hidden // args.heads, max_position_embeddings=args.max_len,
                       rope_theta=500000.0, tie_word_embeddings=False, attention_dropout=0.0,
                       use_cache=False)


# -- data -----------------------------------------------------------------------

def make_steps(args):
    """args.steps lists of sequences (lists of token ids); each list holds
    exactly args.tokens tokens."""
    g = torch.Generator().manual_seed(args.seed)
    ranks = torch.arange(args.vocab, dtype=torch.float64)
    zipf = 1.0 / (ranks + 10.0)
    zipf /= zipf.sum()
    sigma = args.len_sigma
    mu = math.log(args.mean_len) - sigma * sigma / 2
    steps = []
    for _ in range(args.steps):
        seqs, left = [], args.tokens
        while left > 0:
            n = int(math.exp(mu + sigma * float(torch.randn((), generator=g))))
            n = max(16, min(args.max_len, n, left))
            if left - n < 16:  # no sequence shorter than 16: the last one takes the rest
                n = left
            m = int(torch.randint(4, 65, (), generator=g))
            motif = torch.multinomial(zipf, m, replacement=True, generator=g)
            s = motif.repeat((n + m - 1) // m)[:n].clone()
            noise = torch.rand(n, generator=g) < 0.1
            if noise.any():
                s[noise] = torch.multinomial(zipf, int(noise.sum()), replacement=True,
                                             generator=g)
            seqs.append(s.tolist())
            left -= n
        steps.append(seqs)
    return steps


def packed_batch(seqs, device):
    """One packed row, as DataCollatorWithFlattening gives it (labels -100 at
    each sequence's first token, position_ids restarting, FlashAttention's
    keyword arguments)."""
    from transformers import DataCollatorWithFlattening
    coll = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_tensors="pt")
    b = coll([{"input_ids": s} for s in seqs])
    out = {}
    for k, v in b.items():
        out[k] = v.to(device) if torch.is_tensor(v) else v
    return out


def padded_batches(seqs, budget, device):
    """Micro-batches of right-padded rows, longest first, each with at most
    `budget` padded tokens (or one row); labels -100 at padding."""
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    groups, cur = [], []
    for i in order:
        width = len(seqs[cur[0]]) if cur else len(seqs[i])
        if cur and (len(cur) + 1) * width > budget:
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    out = []
    for grp in groups:
        width = len(seqs[grp[0]])
        ids = torch.zeros((len(grp), width), dtype=torch.long)
        mask = torch.zeros((len(grp), width), dtype=torch.long)
        for r, i in enumerate(grp):
            ids[r, :len(seqs[i])] = torch.tensor(seqs[i])
            mask[r, :len(seqs[i])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        out.append({"input_ids": ids.to(device), "attention_mask": mask.to(device),
                    "labels": labels.to(device)})
    return out


# -- the three ways -------------------------------------------------------------

def torch_varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                           **kwargs):
    """PyTorch's FlashAttention-2 varlen kernel as a transformers attention
    function, for packed rows (batch 1) with FlashAttention's keyword
    arguments."""
    from torch.nn.attention.varlen import varlen_attn
    assert query.shape[0] == 1, "packed batches only"
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))
    out = varlen_attn(q, k, v, kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"],
                      int(kwargs["max_length_q"]), int(kwargs["max_length_k"]), scale=scaling,
                      window_size=(-1, 0))
    return out.unsqueeze(0), None


def build(way, args, device):
    from transformers import AttentionInterface, LlamaForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    cfg = model_config(args)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)  # float32 init: the same weights for every way
    dtype = torch.float32 if way == "fp32" else torch.bfloat16
    model.to(dtype)
    if way in ("sdpa", "fp32"):
        model.set_attn_implementation("sdpa")
    elif way == "fa2_liger":
        AttentionInterface.register("torch_varlen", torch_varlen_attention)
        AttentionMaskInterface.register("torch_varlen", flash_attention_mask)
        model.set_attn_implementation("torch_varlen")
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=True, model=model)
    elif way == "scree":
        import scree
        import scree.hf
        model.set_attn_implementation(scree.hf.NAME)
        scree.hf.apply(model, rms_norm=True, rope=True, swiglu=True, cross_entropy=True,
                       attention=True)
    model.train()
    return model


def step_loss(way, model, seqs, args, device):
    """Forward and backward of one step; returns the step's mean loss."""
    if way in ("sdpa", "fp32"):
        batches = padded_batches(seqs, args.padded_tokens, device)
        count = sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
        total = 0.0
        for b in batches:
            out = model(**b, num_items_in_batch=count)
            out.loss.backward()
            total += float(out.loss.detach())
        return total
    b = packed_batch(seqs, device)
    out = model(**b)
    out.loss.backward()
    return out.loss.detach()


def family(name):
    """The kernel family of a CUDA kernel's name (FlashAttention-2, PyTorch's
    memory-efficient SDPA, cuBLAS, Liger-Kernel's Triton kernels, scree)."""
    n = name.lower()
    if ("flash_bwd" in n or "scree_attention_bwd" in n or "fmha_cutlassb" in n
            or "attention" in n and "backward" in n):
        return "attention bwd"
    if "flash_fwd" in n or "scree_attention" in n or "fmha" in n or "attention" in n:
        return "attention fwd"
    if ("cross_entropy" in n or "scree_ce_" in n or "element_mul" in n or "nll_loss" in n
            or "log_softmax" in n):
        return "loss"
    if "adam" in n or "multi_tensor" in n:
        return "optimizer"
    if any(s in n for s in ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "sm80_", "ampere_",
                            "cublas", "splitk")):
        return "matmul"
    if n.startswith("scree_") or any(s in n for s in ("rms", "rope", "swiglu", "silu", "norm")):
        return "row-wise"
    return "other"


def grad_norm(model):
    """The 2-norm of every parameter's gradient, summed in float64 (PyTorch's
    clip_grad_norm_ returns it in the parameters' dtype: bf16 would round it
    to 3 significant digits)."""
    sq = sum(p.grad.double().pow(2).sum() for p in model.parameters() if p.grad is not None)
    return float(sq.sqrt())


def profile_families(prof, nsteps):
    """Kernel milliseconds per step by family, and the 40 longest kernels."""
    from torch.autograd import DeviceType
    fams = {f: 0.0 for f in FAMILIES}
    kernels = {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        ms = e.time_range.elapsed_us() / 1e3 / nsteps
        fam = family(e.name)
        fams[fam] += ms
        k = kernels.setdefault(e.name, [fam, 0.0])
        k[1] += ms
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:40]
    return {"ms": fams, "top": [(k, f, ms) for k, (f, ms) in top]}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_way(way, args):
    device = torch.device(args.device)
    steps = make_steps(args)
    if way == "fp32":
        steps = steps[:1]
    model = build(way, args, device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device.type == "cuda")
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    losses, times, grad_norm1 = [], [], None
    nprof = args.profile_steps if way != "fp32" else 0
    prof_at = max(0, min(args.warmup, len(steps) - nprof)) if nprof else -1
    families, prof = None, None
    for i, seqs in enumerate(steps):
        if i == prof_at:
            from torch.profiler import ProfilerActivity, profile
            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.__enter__()
        _sync(device)
        t0 = time.perf_counter()
        loss = step_loss(way, model, seqs, args, device)
        if i == 0:
            grad_norm1 = grad_norm(model)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        if prof is not None and i == prof_at + nprof - 1:
            prof.__exit__(None, None, None)
            families = profile_families(prof, nprof)
            prof = None
        if args.verbose:
            print(f"{way} step {i + 1}: loss {losses[-1]:.4f} {times[-1] * 1e3:.0f} ms",
                  file=sys.stderr, flush=True)
    # tokens/s over the steps after the warm-up, the profiled ones left out
    timed = [t for i, t in enumerate(times)
             if i >= args.warmup and not (prof_at <= i < prof_at + nprof)]
    timed = timed or times
    return {"way": way, "losses": losses, "grad_norm_step1": grad_norm1,
            "step_ms_median": 1e3 * sorted(timed)[len(timed) // 2],
            "tokens_per_s": args.tokens * len(timed) / sum(timed),
            "peak_mem_gib": (torch.cuda.max_memory_allocated() / 2**30
                             if device.type == "cuda" else 0.0),
            "profile": families,
            "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__}


# -- the report -------------------------------------------------------------------

def report(res, args):
    lines = []
    dev = next(iter(res.values()))["device"]
    lines.append(f"Device: {dev}; {args.steps} steps of {args.tokens} tokens; torch "
                 f"{next(iter(res.values()))['torch']}")
    lines.append("")
    lines.append("| way | final loss (mean of last 10) | step-1 grad norm | tokens/s | median step ms "
                 "| peak GiB |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for w in WAYS + ("fp32",):
        if w not in res:
            continue
        r = res[w]
        last = r["losses"][-10:]
        lines.append(f"| {w} | {sum(last) / len(last):.4f} | {r['grad_norm_step1']:.6g} | "
                     f"{r['tokens_per_s']:.0f} | {r['step_ms_median']:.1f} | "
                     f"{r['peak_mem_gib']:.2f} |")
    lines.append("")
    prof = [w for w in ("fa2_liger", "scree", "sdpa") if w in res and res[w]["profile"]]
    if prof:
        lines.append("Kernel time of one step by family (ms, PyTorch profiler):")
        lines.append("")
        lines.append("| family | " + " | ".join(prof) + " |")
        lines.append("| --- |" + " --- |" * len(prof))
        for f in FAMILIES + ("total",):
            vals = []
            for w in prof:
                ms = res[w]["profile"]["ms"]
                vals.append(sum(ms.values()) if f == "total" else ms[f])
            lines.append(f"| {f} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
    checks = []
    if "scree" in res and "fa2_liger" in res:
        a = res["scree"]["losses"][-10:]
        b = res["fa2_liger"]["losses"][-10:]
        fa, fb = sum(a) / len(a), sum(b) / len(b)
        checks.append(f"final loss scree / fa2_liger - 1: {fa / fb - 1:+.4f} (target within 1%)")
        checks.append(f"tokens/s scree / fa2_liger: "
                      f"{res['scree']['tokens_per_s'] / res['fa2_liger']['tokens_per_s']:.3f}")
        checks.append(f"peak memory scree / fa2_liger: "
                      f"{res['scree']['peak_mem_gib'] / res['fa2_liger']['peak_mem_gib']:.3f}")
        ps, pb = res["scree"]["profile"], res["fa2_liger"]["profile"]
        if ps and pb:
            share = ("attention fwd", "attention bwd", "row-wise", "loss")
            s = sum(ps["ms"][f] for f in share)
            t = sum(pb["ms"][f] for f in share)
            checks.append(f"attention + row-wise + loss kernels, scree / fa2_liger: {s / t:.3f} "
                          f"({s:.1f} / {t:.1f} ms; target <= 0.75); scree's share of its step's "
                          f"kernel time: {s / sum(ps['ms'].values()):.3f}")
    if "scree" in res and "sdpa" in res:
        checks.append(f"tokens/s scree / sdpa: "
                      f"{res['scree']['tokens_per_s'] / res['sdpa']['tokens_per_s']:.3f} "
                      "(target >= 1.5)")
    if "fp32" in res:
        ref = res["fp32"]["grad_norm_step1"]
        for w in WAYS:
            if w in res:
                checks.append(f"step-1 grad norm {w} / fp32 - 1: "
                              f"{res[w]['grad_norm_step1'] / ref - 1:+.5f} (target within 1e-2)")
    lines.append("")
    lines += [f"- {c}" for c in checks]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="all", choices=("all",) + WAYS + ("fp32",))
    ap.add_argument("--out", default=None, help="directory for per-way JSON and report.md")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=32768, help="tokens per step")
    ap.add_argument("--mean-len", type=float, default=2048)
    ap.add_argument("--len-sigma", type=float, default=1.0, help="log-normal sigma of lengths")
    ap.add_argument("--max-len", type=int, default=16384)
    ap.add_argument("--padded-tokens", type=int, default=32768,
                    help="padded tokens per micro-batch of the sdpa way")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of tokens/s")
    ap.add_argument("--profile-steps", type=int, default=3,
                    help="steps profiled after the warm-up, left out of tokens/s (0: none)")
    ap.add_argument("--ways", default="sdpa,fa2_liger,scree,fp32", help="ways run by --mode all")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for the sdpa and fp32 ways")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if args.mode != "all":
        print(json.dumps(run_way(args.mode, args)))
        return
    res = {}
    out = args.out or "train_packed_results"
    os.makedirs(out, exist_ok=True)
    argv, skip = [], False
    for a in sys.argv[1:]:  # the child's arguments: these, less --mode
        if skip or a == "--mode" or a.startswith("--mode="):
            skip = a == "--mode"
            continue
        argv.append(a)
    for w in args.ways.split(","):
        t0 = time.time()
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--mode", w] + argv,
                           stdout=subprocess.PIPE, text=True)
        print(f"{w}: exit {p.returncode} in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
        if p.returncode == 0:
            res[w] = json.loads(p.stdout.strip().splitlines()[-1])
            with open(os.path.join(out, f"{w}.json"), "w") as f:
                json.dump(res[w], f)
    if res:
        text = report(res, args)
        with open(os.path.join(out, "report.md"), "w") as f:
            f.write(text)
        print(text)
    sys.exit(0 if len(res) == len(args.ways.split(",")) else 1)


if __name__ == "__main__":
    main()
