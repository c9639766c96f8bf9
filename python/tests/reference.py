"""Plain PyTorch references of scree's ops, in float32 (or float64), on any
device: what the GPU tests compare scree with, and the CPU kernels that the
CPU tests register for torch.ops.scree.* (register_cpu_kernels) so that
opcheck, torch.compile and the HuggingFace path run without a GPU."""
import math

import torch
import torch.nn.functional as F


def rms_norm(input, normalized_shape, weight=None, eps=None):
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    x = input.double()
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    y = x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.double()
    return y.to(input.dtype)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    w = weight.double() if weight is not None else None
    b = bias.double() if bias is not None else None
    return F.layer_norm(input.double(), list(normalized_shape), w, b, eps).to(input.dtype)


def _norm_grads(grad_out, input, normalized_shape, weight, eps, center):
    """dx, dw, db of RMSNorm (center False) or LayerNorm in float64 by their
    formulas (a kernel of a custom op runs below autograd): with xhat the
    normalized row, r its rstd and g = dy * w, dx = r (g - mean(g) [LN] -
    xhat mean(g xhat)), dw = sum over rows of dy xhat, db = sum of dy. dx
    in input's dtype, dw and db in the weight's (input's without one)."""
    n = len(normalized_shape)
    dims = tuple(range(input.dim() - n, input.dim()))
    x, dy = input.double(), grad_out.double()
    w = weight.double() if weight is not None else torch.ones(normalized_shape,
                                                              dtype=torch.float64)
    if center:
        x = x - x.mean(dims, keepdim=True)
    r = torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)
    xh = x * r
    g = dy * w
    dx = g - xh * (g * xh).mean(dims, keepdim=True)
    if center:
        dx = dx - g.mean(dims, keepdim=True)
    rows = tuple(range(input.dim() - n))
    wd = weight.dtype if weight is not None else input.dtype
    return ((r * dx).to(input.dtype), (dy * xh).sum(rows).to(wd), dy.sum(rows).to(wd))


def rms_norm_backward(grad_out, input, normalized_shape, weight, eps):
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    dx, dw, _ = _norm_grads(grad_out, input, list(normalized_shape), weight, eps, False)
    return dx, dw


def layer_norm_backward(grad_out, input, normalized_shape, weight, bias, eps):
    return _norm_grads(grad_out, input, list(normalized_shape), weight, eps, True)


def add_rms_norm_backward(grad_out, grad_h, h, weight, eps):
    dh, dw, _ = _norm_grads(grad_out, h, [h.shape[-1]], weight, eps, False)
    if grad_h is not None:
        dh = (dh.double() + grad_h.double()).to(h.dtype)
    return dh, dw


def swiglu_backward(grad_out, gate, up):
    """(dgate, dup) of silu(gate) * up in float64; with up None, gate holds
    both (gate first) and dgate is the fused gradient, dup empty."""
    g, u = (gate.double().chunk(2, -1) if up is None else (gate.double(), up.double()))
    dy = grad_out.double()
    s = torch.sigmoid(g)
    dup = dy * g * s
    dgate = dy * u * s * (1 + g * (1 - s))
    if up is None:
        return torch.cat([dgate, dup], -1).to(gate.dtype), gate.new_empty(0)
    return dgate.to(gate.dtype), dup.to(up.dtype)


def softmax_backward(grad_out, output, input_dtype, scale):
    y, dy = output.double(), grad_out.double()
    return (scale * y * (dy - (y * dy).sum(-1, keepdim=True))).to(input_dtype)


def add_rms_norm(input, residual, weight, eps=1e-6):
    h = (input.double() + residual.double()).to(input.dtype)  # rounded, as written
    return rms_norm(h, [h.shape[-1]], weight, eps), h


def softmax(input, dim=-1, dtype=None, scale=1.0):
    return torch.softmax(input.double() * scale, dim).to(dtype or input.dtype)


def ragged_softmax(input, cu_seqlens, max_seqlen, scale=1.0):
    out = torch.empty_like(input)
    cu = cu_seqlens.tolist()
    for b in range(len(cu) - 1):
        s, e = cu[b], cu[b + 1]
        if e > s:
            out[s:e] = torch.softmax(input[s:e].double() * scale, 0).to(input.dtype)
    return out


def positions_from_cu(cu_seqlens, total, device):
    pos = torch.empty(total, dtype=torch.int64, device=device)
    cu = cu_seqlens.tolist()
    for b in range(len(cu) - 1):
        pos[cu[b]:cu[b + 1]] = torch.arange(cu[b + 1] - cu[b], device=device)
    return pos


def rope(q, k=None, cu_seqlens=None, positions=None, theta=10000.0, rotary_dim=None,
         interleaved=False, cos_sin=None, inverse=False, keep_double=False):
    """(q, k) rotated, new tensors; inverse: rotated back (angle -a, the
    backward's rotation of the gradients). Plain torch ops in float64, so
    autograd goes through it; keep_double returns the float64 result
    instead of rounding it to the inputs' dtype."""
    d = q.shape[-1]
    rd = rotary_dim or d
    pos = positions.long() if positions is not None else positions_from_cu(
        cu_seqlens, q.shape[0], q.device)
    if cos_sin is not None:
        cos = cos_sin[pos, :rd // 2].double()
        sin = cos_sin[pos, rd // 2:].double()
    else:
        inv = theta ** (-torch.arange(0, rd, 2, dtype=torch.float64, device=q.device) / rd)
        ang = pos.double()[:, None] * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
    cos, sin = cos[:, None, :], sin[:, None, :]
    if inverse:
        sin = -sin

    def rot(x):
        if x is None:
            return None
        x64 = x.double()
        r, rest = x64[..., :rd], x64[..., rd:]
        if interleaved:
            x1, x2 = r[..., 0::2], r[..., 1::2]
            o = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).flatten(-2)
        else:
            x1, x2 = r[..., :rd // 2], r[..., rd // 2:]
            o = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)
        o = torch.cat((o, rest), -1)
        return o if keep_double else o.to(x.dtype)

    return rot(q), rot(k)


def swiglu(gate, up=None):
    if up is None:
        gate, up = gate.chunk(2, dim=-1)
    g = gate.double()
    return (g * torch.sigmoid(g) * up.double()).to(gate.dtype)


def cross_entropy_rows(input, target, ignore_index=-100):
    """(loss, lse) per row in float32, loss 0 where ignored."""
    x = input.double()
    lse = torch.logsumexp(x, -1)
    t = target.long()
    keep = t != ignore_index
    picked = x.gather(1, torch.where(keep, t, 0)[:, None])[:, 0]
    loss = torch.where(keep, lse - picked, torch.zeros_like(lse))
    return loss.float(), lse.float()


def cross_entropy_full(input, target, ignore_index=-100, label_smoothing=0.0, z_loss=0.0,
                       reduction=0, grad_scale=0.0):
    """(loss per row, lse, dlogits) in float64 by the formulas of
    scree_cross_entropy (include/scree.h): smoothing, z-loss, ignored rows
    0, dlogits scaled by grad_scale (0 means 1) and, for the mean
    (reduction 2), by 1 / the rows not ignored."""
    x = input.double()
    v = x.shape[1]
    lse = torch.logsumexp(x, -1)
    t = target.long()
    keep = t != ignore_index
    ts = torch.where(keep, t, 0)
    picked = x.gather(1, ts[:, None])[:, 0]
    eps = label_smoothing
    loss = (1 - eps) * (lse - picked) + eps / v * (v * lse - x.sum(-1)) + z_loss * lse ** 2
    loss = torch.where(keep, loss, torch.zeros_like(loss))
    p = torch.softmax(x, -1)
    onehot = F.one_hot(ts, v).double()
    dl = p * (1 + 2 * z_loss * lse)[:, None] - (1 - eps) * onehot - eps / v
    scale = grad_scale or 1.0
    if reduction == 2:
        scale = scale / max(int(keep.sum()), 1)
    dl = torch.where(keep[:, None], dl * scale, torch.zeros_like(dl))
    return loss, lse, dl


def _keep(lq, lk, causal, window_left, window_right, device):
    """[lq, lk] bool: the keys each query row sees, masks aligned to the
    bottom right (query i at key position i + lk - lq); causal is
    window_right = 0, a negative window side unbounded."""
    i = torch.arange(lq, device=device)[:, None] + (lk - lq)
    j = torch.arange(lk, device=device)[None, :]
    keep = torch.ones(lq, lk, dtype=torch.bool, device=device)
    if causal:
        keep &= j <= i
    if window_left >= 0:
        keep &= j >= i - window_left
    if window_right >= 0 and not causal:
        keep &= j <= i + window_right
    return keep


def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal=False, scale=None,
                window_left=-1, window_right=-1, return_lse=False, softcap=0.0):
    """(out, lse [H_q, T_q] float32 or an empty tensor): per sequence, in
    float64, masks aligned to the bottom right; softcap > 0 caps the scaled
    scores at softcap * tanh(s / softcap)."""
    tq, hq, d = query.shape
    hkv = key.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if window_right == 0:
        causal = True
    out = torch.zeros(query.shape, dtype=query.dtype, device=query.device)
    lse = torch.full((hq, tq), float("-inf"), dtype=torch.float32, device=query.device)
    cq, ck = cu_seq_q.tolist(), cu_seq_k.tolist()
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        lq, lk = qe - qs, ke - ks
        if lq == 0:
            continue
        q = query[qs:qe].double().transpose(0, 1)                     # [H, Lq, d]
        k = key[ks:ke].double().repeat_interleave(hq // hkv, 1).transpose(0, 1)
        v = value[ks:ke].double().repeat_interleave(hq // hkv, 1).transpose(0, 1)
        s = q @ k.transpose(1, 2) * scale                               # [H, Lq, Lk]
        if softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        keep = _keep(lq, lk, causal, window_left, window_right, query.device)
        s = s.masked_fill(~keep, float("-inf"))
        m = torch.logsumexp(s, -1)                                      # [H, Lq]
        p = torch.exp(s - m[..., None]).nan_to_num(0.0)
        o = (p @ v).transpose(0, 1)                                     # [Lq, H, d]
        out[qs:qe] = o.to(query.dtype)
        lse[:, qs:qe] = m.float()
    if not return_lse:
        lse = torch.empty((0,), dtype=torch.float32, device=query.device)
    return out, lse


def varlen_attn_backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q,
                         max_k, causal, scale, window_left, window_right, softcap,
                         deterministic):
    """(dq, dk, dv) of varlen_attn for the loss sum(out * grad_out), in
    float64 per sequence, written out (out and lse, the forward's, are not
    used: P is recomputed): P = softmax(S) over the visible keys (a row with
    none: 0), dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)), dX = dS
    ds/dx (scale, or scale (1 - tanh^2(scale x / softcap)) with softcap),
    dQ = dX K, dK = dX^T Q; dK and dV summed over a GQA group's heads."""
    tq, hq, d = query.shape
    hkv = key.shape[1]
    grp = hq // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if window_right == 0:
        causal = True
    dq = torch.zeros(query.shape, dtype=torch.float64, device=query.device)
    dk = torch.zeros(key.shape, dtype=torch.float64, device=key.device)
    dv = torch.zeros(value.shape, dtype=torch.float64, device=value.device)
    cq, ck = cu_seq_q.tolist(), cu_seq_k.tolist()
    for b in range(len(cq) - 1):
        qs, qe, ks, ke = cq[b], cq[b + 1], ck[b], ck[b + 1]
        lq, lk = qe - qs, ke - ks
        if lq == 0 or lk == 0:
            continue
        q = query[qs:qe].double().transpose(0, 1)                     # [H, Lq, d]
        k = key[ks:ke].double().repeat_interleave(grp, 1).transpose(0, 1)
        v = value[ks:ke].double().repeat_interleave(grp, 1).transpose(0, 1)
        do = grad_out[qs:qe].double().transpose(0, 1)
        x = q @ k.transpose(1, 2) * scale                               # scaled scores
        if softcap > 0:
            t = torch.tanh(x / softcap)
            s, dsdx = softcap * t, scale * (1 - t * t)
        else:
            s, dsdx = x, scale
        keep = _keep(lq, lk, causal, window_left, window_right, query.device)
        s = s.masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)                        # rows without keys: 0
        dp = do @ v.transpose(1, 2)
        ds = p * (dp - (p * dp).sum(-1, keepdim=True))
        dx = ds * dsdx
        dq[qs:qe] = (dx @ k).transpose(0, 1)
        dk[ks:ke] = (dx.transpose(1, 2) @ q).transpose(0, 1).reshape(lk, hkv, grp, d).sum(2)
        dv[ks:ke] = (p.transpose(1, 2) @ do).transpose(0, 1).reshape(lk, hkv, grp, d).sum(2)
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


def kv_append(k, v, k_cache, v_cache, slot_mapping):
    """vLLM's reshape_and_cache, in place: token t's head rows to page
    slot // page_size, row slot % page_size; slots of -1 skipped."""
    page_size = k_cache.shape[1]
    live = slot_mapping >= 0
    s = slot_mapping[live].long()
    k_cache[s // page_size, s % page_size] = k[live]
    v_cache[s // page_size, s % page_size] = v[live]


def gather_pages(cache, block_table, seqlens_k):
    """A paged cache [pages, page_size, H, d] as contiguous keys [sum of
    seqlens_k, H, d] (sequence b's first seqlens_k[b] keys, in order) and
    their cu_seqlens (int32, on the cache's device)."""
    page_size = cache.shape[1]
    lens = seqlens_k.tolist()
    rows = []
    for b, n in enumerate(lens):
        j = torch.arange(n, device=cache.device)
        pages = block_table[b].long()[j // page_size]
        rows.append(cache[pages, j % page_size])
    keys = torch.cat(rows) if rows else cache.new_empty((0,) + tuple(cache.shape[2:]))
    return keys, cu_of(lens, cache.device)


def paged_attention(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q, max_q, max_k,
                    causal=True, scale=None, window_left=-1, window_right=-1, softcap=0.0,
                    return_lse=False):
    """scree.paged_attention's result: the pages gathered to contiguous K and
    V, then varlen_attn above."""
    k, cu_k = gather_pages(k_cache, block_table, seqlens_k)
    v, _ = gather_pages(v_cache, block_table, seqlens_k)
    return varlen_attn(q, k, v, cu_seqlens_q, cu_k, max_q, max_k, causal, scale, window_left,
                       window_right, return_lse, softcap)


def paged_batch(gen, lens_k, lens_q, page_size, hq=4, hkv=2, d=32, dtype=torch.float32,
                device="cpu", interleaved=False):
    """(q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q): random
    K and V in shuffled pages of a pool with two spare pages, each block
    table row padded with a spare page id; with interleaved, the caches are
    the two halves of one [pages, 2, page_size, H, d] buffer (vLLM's)."""
    pages = [(n + page_size - 1) // page_size for n in lens_k]
    n_pages = sum(pages) + 2
    perm = torch.randperm(n_pages, generator=gen)
    bt = torch.full((len(lens_k), max(pages + [1]) + 1), int(perm[-1]), dtype=torch.int32)
    at = 0
    for b, n in enumerate(pages):
        bt[b, :n] = perm[at:at + n].to(torch.int32)
        at += n
    shape = (n_pages, page_size, hkv, d)
    if interleaved:
        kv = torch.randn(n_pages, 2, page_size, hkv, d, generator=gen).to(device, dtype)
        kc, vc = kv[:, 0], kv[:, 1]
    else:
        kc = torch.randn(*shape, generator=gen).to(device, dtype)
        vc = torch.randn(*shape, generator=gen).to(device, dtype)
    q = torch.randn(sum(lens_q), hq, d, generator=gen).to(device, dtype)
    return (q, kc, vc, bt.to(device), torch.tensor(lens_k, dtype=torch.int32, device=device),
            cu_of(lens_q, device))


def register_cpu_kernels():
    """CPU kernels for every torch.ops.scree op, running these references,
    so that the CPU tests can call the custom ops for real. Idempotent."""
    import scree  # noqa: F401  (defines the ops)
    if getattr(register_cpu_kernels, "done", False):
        return
    lib = torch.library

    lib.register_kernel("scree::rms_norm", "cpu")(
        lambda input, normalized_shape, weight, eps: rms_norm(input, normalized_shape, weight,
                                                              eps))
    lib.register_kernel("scree::layer_norm", "cpu")(
        lambda input, normalized_shape, weight, bias, eps: layer_norm(
            input, normalized_shape, weight, bias, eps))
    lib.register_kernel("scree::rms_norm_backward", "cpu")(rms_norm_backward)
    lib.register_kernel("scree::layer_norm_backward", "cpu")(layer_norm_backward)
    lib.register_kernel("scree::swiglu_backward", "cpu")(swiglu_backward)
    lib.register_kernel("scree::add_rms_norm_backward", "cpu")(add_rms_norm_backward)
    lib.register_kernel("scree::softmax_backward", "cpu")(softmax_backward)
    lib.register_kernel("scree::add_rms_norm", "cpu")(
        lambda input, residual, weight, eps: add_rms_norm(input, residual, weight, eps))
    lib.register_kernel("scree::softmax", "cpu")(
        lambda input, dim, dtype, scale: softmax(input, dim, dtype, scale))
    lib.register_kernel("scree::ragged_softmax", "cpu")(
        lambda input, cu_seqlens, max_seqlen, scale: ragged_softmax(input, cu_seqlens,
                                                                    max_seqlen, scale))

    def rope_cpu(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved):
        rq, rk = rope(q, k, cu_seqlens, positions, theta, rotary_dim, interleaved, cos_sin)
        q.copy_(rq)
        if k is not None:
            k.copy_(rk)

    lib.register_kernel("scree::rope_", "cpu")(rope_cpu)

    def rope_fn_cpu(inverse):
        def kernel(q, k, cu_seqlens, positions, cos_sin, theta, rotary_dim, interleaved):
            rq, rk = rope(q, k, cu_seqlens, positions, theta, rotary_dim, interleaved, cos_sin,
                          inverse)
            return rq, rk if rk is not None else q.new_empty(0)
        return kernel

    lib.register_kernel("scree::rope", "cpu")(rope_fn_cpu(False))
    lib.register_kernel("scree::rope_backward", "cpu")(rope_fn_cpu(True))
    lib.register_kernel("scree::swiglu", "cpu")(lambda gate, up: swiglu(gate, up))
    lib.register_kernel("scree::kv_append", "cpu")(kv_append)
    def cross_entropy_cpu(input, target, ignore_index, label_smoothing=0.0, z_loss=0.0,
                          reduction=0, need_grad=False):
        from scree import _ops
        loss, lse, dl = cross_entropy_full(input, target, ignore_index, label_smoothing, z_loss,
                                           reduction)
        # The count the kernel's pre-pass makes: the rows not ignored.
        count = (target != ignore_index).sum()
        return (_ops._ce_reduce(loss.float(), count, reduction), lse.float(),
                dl.to(input.dtype) if need_grad else input.new_empty(0))

    lib.register_kernel("scree::cross_entropy", "cpu")(cross_entropy_cpu)
    lib.register_kernel("scree::varlen_attn", "cpu")(
        lambda query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale, wl, wr,
        softcap, return_lse, deterministic=False: varlen_attn(
            query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, causal, scale, wl, wr,
            return_lse, softcap))
    lib.register_kernel("scree::varlen_attn_backward", "cpu")(varlen_attn_backward)
    lib.register_kernel("scree::paged_attention", "cpu")(paged_attention)
    register_cpu_kernels.done = True


def random_seqlens(gen, n, lo, hi):
    return torch.randint(lo, hi + 1, (n,), generator=gen).tolist()


def cu_of(lens, device):
    cu = torch.zeros(len(lens) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lens, dtype=torch.int32).cumsum(0)
    return cu.to(device)
