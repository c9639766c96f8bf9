"""varlen_attn's backward: the autograd wiring on the CPU (torch.ops.scree.*
with tests/reference.py's kernels: the float64 reference's gradients through
scree.varlen_attn, the backward op's schema and fake implementation), and
on the GPU scree_attention_backward's gradients against autograd through the
float64 reference.

GPU tolerances, on gradients of losses sum(out * g) with g standard normal:
the kernel computes P from the forward's lse and rounds P and dS to the
input dtype before their products, as FlashAttention-2 does, so the
gradients carry a few units in the last place of the dtype relative to
their largest magnitude: 1e-2 (float16) and 4e-2 (bfloat16) of the
tensor's largest absolute value."""
import pytest
import torch

import reference as ref
import scree

BF16 = torch.bfloat16


def _batch(gen, lens_q, lens_k, hq, hkv, d, dtype, device):
    def r(n, h):
        return torch.randn(n, h, d, generator=gen).to(device=device, dtype=dtype)
    q, k, v = r(sum(lens_q), hq), r(sum(lens_k), hkv), r(sum(lens_k), hkv)
    g = r(sum(lens_q), hq)
    return q, k, v, g, ref.cu_of(lens_q, device), ref.cu_of(lens_k, device)


def _ref_grads(q, k, v, g, cq, ck, causal, window, softcap=0.0, scale=None):
    return ref.varlen_attn_backward(g, q, k, v, None, None, cq, ck, 0, 0, causal, scale,
                                    window[0], window[1], softcap, False)


def _scree_grads(q, k, v, g, cq, ck, causal, window, softcap=0.0, deterministic=False,
                 lens=None):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = scree.varlen_attn(q, k, v, cq, ck, max(lens[0]) if lens else q.shape[0],
                            max(lens[1]) if lens else k.shape[0], causal=causal,
                            window_size=window, softcap=softcap, deterministic=deterministic)
    (out.float() * g.float()).sum().backward()
    return out, q.grad, k.grad, v.grad


# -- CPU: the reference and the wiring --------------------------------------------


@pytest.mark.parametrize("hq,hkv,causal,window,softcap", [(4, 2, True, (-1, -1), 0.0),
                                                          (2, 2, False, (3, 1), 0.0),
                                                          (4, 1, True, (-1, -1), 2.0)])
def test_reference_backward_matches_autograd_cpu(gen, hq, hkv, causal, window, softcap):
    """The written-out backward reference against autograd through the
    forward reference, float64 (every row sees a key here: the forward
    reference's rows without keys have no finite gradient)."""
    lens_q, lens_k = [3, 5, 1], [4, 5, 3]
    q, k, v, g, cq, ck = _batch(gen, lens_q, lens_k, hq, hkv, 16, torch.float64, "cpu")
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    out, _ = ref.varlen_attn(qq, kk, vv, cq, ck, 0, 0, causal, None, window[0], window[1], False,
                             softcap)
    want = torch.autograd.grad((out * g).sum(), (qq, kk, vv))
    got = _ref_grads(q, k, v, g, cq, ck, causal, window, softcap)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("hq,hkv,causal,window", [(4, 2, True, (-1, -1)), (2, 2, False, (3, 1)),
                                                  (4, 1, False, (-1, -1))])
def test_backward_through_the_op_cpu(cpu_kernels, gen, hq, hkv, causal, window):
    lens_q, lens_k = [3, 0, 5, 1], [4, 2, 5, 3]
    q, k, v, g, cq, ck = _batch(gen, lens_q, lens_k, hq, hkv, 16, torch.float32, "cpu")
    _, dq, dk, dv = _scree_grads(q, k, v, g, cq, ck, causal, window, lens=(lens_q, lens_k))
    want = _ref_grads(q, k, v, g, cq, ck, causal, window)
    for got, w in zip((dq, dk, dv), want):
        assert got.shape == w.shape and got.dtype == w.dtype
        torch.testing.assert_close(got, w, rtol=1e-5, atol=1e-6)


def test_lse_is_not_differentiable_and_grads_need_it_kept_cpu(cpu_kernels, gen):
    lens = [3, 2]
    q, k, v, g, cq, _ = _batch(gen, lens, lens, 2, 2, 16, torch.float32, "cpu")
    q.requires_grad_()
    out, lse = scree.varlen_attn(q, k, v, cq, cq, 3, 3, return_aux=scree._ops._LseRequest())
    assert out.requires_grad and not lse.requires_grad
    # Through the op directly without the log-sum-exp: the backward refuses.
    out, _ = torch.ops.scree.varlen_attn(q, k, v, cq, cq, 3, 3, False, None, -1, -1, 0.0, False,
                                         False)
    with pytest.raises(RuntimeError, match="log-sum-exp"):
        out.sum().backward()


def test_backward_op_opcheck_cpu(cpu_kernels, gen):
    lens_q, lens_k = [3, 5], [4, 5]
    q, k, v, g, cq, ck = _batch(gen, lens_q, lens_k, 4, 2, 32, BF16, "cpu")
    out, lse = ref.varlen_attn(q, k, v, cq, ck, 5, 5, True, None, -1, -1, True)
    torch.library.opcheck(torch.ops.scree.varlen_attn_backward.default,
                          (g, q, k, v, out, lse, cq, ck, 5, 5, True, None, -1, -1, 0.0, False),
                          test_utils=("test_schema", "test_faketensor"))


def test_backward_fake_refuses_what_the_device_would_cpu(gen):
    """The fake implementation runs scree_check_args on the backward's struct:
    a head_dim the kernels lack is refused at trace time, naming it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(6, 4, 40, dtype=BF16)
        kv = torch.empty(6, 2, 40, dtype=BF16)
        lse = torch.empty(4, 6)
        cu = torch.tensor([0, 6], dtype=torch.int32)
        with pytest.raises(scree.ScreeArgumentError):
            torch.ops.scree.varlen_attn_backward(q, q, kv, kv, q, lse, cu, cu, 6, 6, False, None,
                                                 -1, -1, 0.0, False)


# -- GPU: scree_attention_backward ------------------------------------------------

GRAD_TOL = {torch.float16: 1e-2, BF16: 4e-2}


def _close_rel(got, want, dtype, what):
    scale = max(1.0, want.abs().max().item())
    err = (got.float() - want.float()).abs().max().item() / scale
    assert err <= GRAD_TOL[dtype], f"{what}: max |scree - reference| / max |reference| {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,hq,hkv,d,causal,window,softcap", [
    (BF16, 8, 2, 128, True, (-1, -1), 0.0),
    (torch.float16, 4, 4, 64, False, (-1, -1), 0.0),
    (BF16, 4, 1, 64, False, (32, 8), 0.0),
    (torch.float16, 4, 2, 128, True, (-1, -1), 20.0),
    (BF16, 2, 2, 256, True, (48, 0), 0.0),
])
def test_backward_gpu(gen, dtype, hq, hkv, d, causal, window, softcap):
    lens_q = [1, 0, 70, 130, 7]
    lens_k = [1, 3, 70, 150, 40]
    q, k, v, g, cq, ck = _batch(gen, lens_q, lens_k, hq, hkv, d, dtype, "cuda")
    _, dq, dk, dv = _scree_grads(q, k, v, g, cq, ck, causal, window, softcap,
                                 lens=(lens_q, lens_k))
    want = _ref_grads(q, k, v, g, cq, ck, causal, window, softcap)
    for name, got, w in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        assert got.shape == w.shape and got.dtype == dtype
        assert not torch.isnan(got).any(), name
        _close_rel(got, w, dtype, name)


@pytest.mark.gpu
def test_backward_deterministic_gpu(gen):
    lens = [200, 33, 257]
    q, k, v, g, cq, _ = _batch(gen, lens, lens, 8, 2, 64, BF16, "cuda")
    runs = [_scree_grads(q, k, v, g, cq, cq, True, (-1, -1), deterministic=True,
                         lens=(lens, lens))[1:] for _ in range(3)]
    for r in runs[1:]:
        for a, b in zip(runs[0], r):
            assert torch.equal(a, b)
    # flash_attn_varlen_func takes FlashAttention's deterministic= too
    qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = scree.flash_attn_varlen_func(qq, kk, vv, cq, cq, max(lens), max(lens), causal=True,
                                       deterministic=True)
    (out.float() * g.float()).sum().backward()
    for a, b in zip(runs[0], (qq.grad, kk.grad, vv.grad)):
        assert torch.equal(a, b)


def test_varlen_attn_later_keywords_cpu(cpu_kernels, gen):
    """The keywords of later torch varlen_attn releases: routed where scree
    supports them, refused by name (ScreeArgumentError, never TypeError)
    where it does not."""
    lens = [3, 5]
    q, k, v, _, cq, _ = _batch(gen, lens, lens, 4, 2, 16, torch.float32, "cpu")
    want = scree.varlen_attn(q, k, v, cq, cq, 5, 5, causal=True)
    got = scree.varlen_attn(q, k, v, cq, cq, 5, 5, causal=True, enable_gqa=True, num_splits=0)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    dst = torch.full_like(want, float("nan"))
    out = scree.varlen_attn(q, k, v, cq, cq, 5, 5, causal=True, varlen_attn_out=dst)
    assert out is dst
    torch.testing.assert_close(dst, want, rtol=0, atol=0)
    cases = [({"enable_gqa": False}, "enable_gqa"), ({"num_splits": 2}, "num_splits"),
             ({"varlen_attn_out": torch.empty(3, 4, 16)}, "varlen_attn_out"),
             ({"is_causal": True}, "is_causal"), ({"dropout_p": 0.1}, "dropout_p")]
    for kw, name in cases:
        with pytest.raises(scree.ScreeArgumentError, match=f"'{name}'"):
            scree.varlen_attn(q, k, v, cq, cq, 5, 5, **kw)
    qg = q.clone().requires_grad_()
    with pytest.raises(scree.ScreeArgumentError, match="'varlen_attn_out'"):
        scree.varlen_attn(qg, k, v, cq, cq, 5, 5, varlen_attn_out=torch.empty_like(want))
