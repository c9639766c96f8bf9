"""Every op on the GPU against PyTorch on random varlen batches, with stated
tolerances; views and strides, PyTorch's current stream, threads sharing a
context, errors from the C library, options, opcheck on CUDA,
torch.compile(fullgraph=True) of a LLaMA-style layer with Inductor, and a
tiny HuggingFace LLaMA with attn_implementation="scree" against "sdpa";
paged attention (scree.paged_attention, varlen_attn and
flash_attn_varlen_func with block_table) against the gathered pages.

Tolerances: outputs are compared with float64 references rounded to the
output dtype (tests/reference.py), so they allow the rounding of the
reference plus the kernel's own: float32 1e-5, float16 2e-3, bfloat16 1.6e-2
relative (one to two units in the last place), with a small absolute floor
near zero. Attention is exact in float32 accumulation but rounds P to the
input dtype before P.V, as FlashAttention does: 4e-3 (float16) and 2.5e-2
(bfloat16) absolute on outputs of magnitude up to about 3; its log-sum-exp
is float32: 1e-3."""
import os
import sys
import threading

import pytest
import torch
import torch.nn.functional as F

import bad_calls
import reference as ref
import scree

pytestmark = pytest.mark.gpu
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3),
       torch.bfloat16: (1.6e-2, 1e-2)}
ATTN_ATOL = {torch.float16: 4e-3, torch.bfloat16: 2.5e-2}
DEV = "cuda"


def close(got, want, dtype=None):
    rtol, atol = TOL[dtype or want.dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


def rand(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(device=DEV, dtype=dtype)


def varlen_lengths(gen, n=7, lo=0, hi=300):
    lens = ref.random_seqlens(gen, n, lo, hi)
    lens[0] = max(lens[0], 1)
    return lens


# -- row-wise ops -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(gen, dtype):
    x = rand(gen, 37, 3, 512, dtype=dtype)
    w = rand(gen, 512, dtype=dtype)
    y = scree.rms_norm(x, [512], w, 1e-6)
    want = F.rms_norm(x, [512], w, 1e-6)
    assert y.dtype == want.dtype and y.shape == want.shape
    close(y, ref.rms_norm(x, [512], w, 1e-6))
    close(scree.rms_norm(x, [3, 512]), ref.rms_norm(x, [3, 512]))  # no weight, eps None
    # A strided view: every other row, the first 512 columns of 1024.
    big = rand(gen, 64, 1024, dtype=dtype)
    v = big[::2, :512]
    close(scree.rms_norm(v, [512], w), ref.rms_norm(v, [512], w))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm(gen, dtype):
    x = rand(gen, 300, 1000, dtype=dtype, scale=3)
    w, b = rand(gen, 1000, dtype=dtype), rand(gen, 1000, dtype=dtype)
    y = scree.layer_norm(x, [1000], w, b)
    assert y.dtype == F.layer_norm(x, [1000], w, b).dtype
    close(y, ref.layer_norm(x, [1000], w, b))
    close(scree.layer_norm(x, [1000]), ref.layer_norm(x, [1000]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm(gen, dtype):
    x, r = rand(gen, 211, 2048, dtype=dtype), rand(gen, 211, 2048, dtype=dtype)
    w = rand(gen, 2048, dtype=dtype)
    y, h = scree.add_rms_norm(x, r, w, 1e-5)
    wy, wh = ref.add_rms_norm(x, r, w, 1e-5)
    assert torch.equal(h, wh)  # one rounding of the fp32 sum, as x + r
    close(y, wy)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax(gen, dtype):
    x = rand(gen, 100, 3000, dtype=dtype, scale=4)
    close(scree.softmax(x), ref.softmax(x))
    close(scree.softmax(x, -1, dtype=torch.float32, scale=0.5),
          ref.softmax(x, dtype=torch.float32, scale=0.5))


def test_ragged_softmax(gen):
    lens = [5, 0, 1, 300, 77]
    cu = ref.cu_of(lens, DEV)
    x = rand(gen, sum(lens), 4, 16, dtype=torch.bfloat16, scale=3)
    close(scree.ragged_softmax(x, cu, max(lens)), ref.ragged_softmax(x, cu, max(lens)))


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope(gen, interleaved):
    lens = varlen_lengths(gen)
    cu = ref.cu_of(lens, DEV)
    t = sum(lens)
    # q and k as views of one packed qkv buffer, rotated where they lie.
    qkv = rand(gen, t, 8 + 2 + 2, 128, dtype=torch.bfloat16)
    q, k = qkv[:, :8], qkv[:, 8:10]
    wq, wk = ref.rope(q, k, cu_seqlens=cu, theta=500000.0, interleaved=interleaved)
    rq, rk = scree.rope(q, k, cu_seqlens=cu, theta=500000.0, interleaved=interleaved)
    close(rq, wq)
    close(rk, wk)
    before = qkv[:, 10:].clone()
    scree.rope(q, k, cu_seqlens=cu, theta=500000.0, interleaved=interleaved, inplace=True)
    close(q, wq)
    assert torch.equal(qkv[:, 10:], before)  # v untouched


@pytest.mark.parametrize("rotary_dim", [None, 40])
def test_rope_out_of_place_equals_in_place(gen, rotary_dim):
    """scree.rope (no inplace), torch.ops.scree.rope and its backward write
    out of place (scree_rope's q_out, k_out): bitwise what the in-place call
    leaves, the parts past rotary_dim copied, the inputs untouched, from
    strided views of a packed qkv buffer."""
    lens = varlen_lengths(gen)
    cu = ref.cu_of(lens, DEV)
    t = sum(lens)
    qkv = rand(gen, t, 8 + 2 + 2, 128, dtype=torch.bfloat16)
    before = qkv.clone()
    q, k = qkv[:, :8], qkv[:, 8:10]
    kw = dict(cu_seqlens=cu, theta=500000.0, rotary_dim=rotary_dim)
    rq, rk = scree.rope(q, k, **kw)
    fq, fk = torch.ops.scree.rope(q, k, cu, None, None, 500000.0, rotary_dim or 0, False)
    bq, bk = torch.ops.scree.rope_backward(q, k, cu, None, None, 500000.0, rotary_dim or 0,
                                           False)
    assert torch.equal(qkv, before)  # read only
    iq, ik = q.clone(), k.clone()
    scree.rope(iq, ik, inplace=True, **kw)
    for got in ((rq, rk), (fq, fk)):
        assert torch.equal(got[0], iq) and torch.equal(got[1], ik)
    # The backward out of place against scree_rope_backward in place.
    from scree import _ops
    jq, jk = q.clone(), k.clone()
    _ops._rope_impl(jq, jk, cu, None, None, 500000.0, rotary_dim or 0, False,
                    c_op="rope_backward")
    assert torch.equal(bq, jq) and torch.equal(bk, jk)
    assert bq.is_contiguous() and not torch.equal(bq, q)


def test_rope_positions_partial_and_cos_sin(gen):
    t = 50
    q = rand(gen, t, 4, 64, dtype=torch.float16)
    pos = torch.randint(0, 1000, (t,), generator=gen).to(DEV)
    for p in (pos, pos.to(torch.int32)):
        rq, rk = scree.rope(q, None, positions=p, rotary_dim=32)
        assert rk is None
        close(rq, ref.rope(q, None, positions=p, rotary_dim=32)[0])
    inv = 10000.0 ** (-torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    ang = torch.arange(1000, dtype=torch.float64)[:, None] * inv[None]
    cos_sin = torch.cat((ang.cos(), ang.sin()), 1).float().to(DEV)
    close(scree.rope(q, positions=pos, cos_sin=cos_sin)[0],
          ref.rope(q, positions=pos, cos_sin=cos_sin)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu(gen, dtype):
    gu = rand(gen, 123, 2 * 1408, dtype=dtype, scale=2)
    close(scree.swiglu(gu), ref.swiglu(gu))
    g, u = gu[:, :1408], gu[:, 1408:]  # strided views
    close(scree.swiglu(g, u), ref.swiglu(g, u))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("page_size", [1, 16, 256])
def test_kv_append(gen, dtype, page_size):
    """k and v as views of a fused qkv projection into a paged cache
    ([pages, S, H, d], and one interleaved [pages, 2, S, H, d] buffer),
    against index_put; slots a random permutation with padding (-1); every
    other cache element keeps its old value, bit for bit."""
    T, H, d = 300, 8, 128
    P = (T + page_size - 1) // page_size + 2
    qkv = rand(gen, T, 32 + 2 * H, d, dtype=dtype)
    k, v = qkv[:, 32:32 + H], qkv[:, 32 + H:]
    slots = torch.randperm(P * page_size, generator=gen)[:T]
    slots[::5] = -1
    slots = slots.to(DEV)
    for shared in (False, True):
        if shared:
            kv = rand(gen, P, 2, page_size, H, d, dtype=dtype)
            kc, vc = kv[:, 0], kv[:, 1]
        else:
            kc, vc = rand(gen, P, page_size, H, d, dtype=dtype), rand(gen, P, page_size, H, d,
                                                                       dtype=dtype)
        wk, wv = kc.clone(), vc.clone()
        live = slots >= 0
        s = slots[live]
        wk.index_put_((s // page_size, s % page_size), k[live])
        wv.index_put_((s // page_size, s % page_size), v[live])
        assert scree.kv_append(k, v, kc, vc, slots) is None
        assert torch.equal(kc, wk) and torch.equal(vc, wv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy(gen, dtype):
    logits = rand(gen, 64, 32000, dtype=dtype, scale=3)
    tgt = torch.randint(0, 32000, (64,), generator=gen)
    tgt[::7] = -100
    tgt = tgt.to(DEV)
    for red in ("none", "sum", "mean"):
        got = scree.cross_entropy(logits, tgt, reduction=red)
        want = F.cross_entropy(logits.double(), tgt, reduction=red).to(dtype)
        assert got.dtype == F.cross_entropy(logits, tgt, reduction=red).dtype
        torch.testing.assert_close(got.float(), want.float(), rtol=TOL[dtype][0],
                                   atol=TOL[dtype][1] * (64 if red == "sum" else 1))


# -- attention ----------------------------------------------------------------

ATTN_CASES = [
    # dtype, heads_q, heads_kv, head_dim, causal, window
    (torch.bfloat16, 16, 4, 128, True, (-1, -1)),
    (torch.float16, 8, 8, 64, False, (-1, -1)),
    (torch.bfloat16, 8, 1, 64, False, (64, 16)),
    (torch.float16, 4, 2, 128, True, (96, 0)),
]


@pytest.mark.parametrize("dtype,hq,hkv,d,causal,window", ATTN_CASES)
def test_varlen_attn(gen, dtype, hq, hkv, d, causal, window):
    lens_q = varlen_lengths(gen)
    lens_k = [n + (ref.random_seqlens(gen, 1, 0, 40)[0] if n else 0) for n in lens_q]
    cq, ck = ref.cu_of(lens_q, DEV), ref.cu_of(lens_k, DEV)
    q = rand(gen, sum(lens_q), hq, d, dtype=dtype)
    k = rand(gen, sum(lens_k), hkv, d, dtype=dtype)
    v = rand(gen, sum(lens_k), hkv, d, dtype=dtype)
    out, lse = scree.varlen_attn(q, k, v, cq, ck, max(lens_q), max(lens_k), causal=causal,
                                 window_size=window, return_aux=_aux())
    wl, wr = window
    want, want_lse = ref.varlen_attn(q, k, v, cq, ck, 0, 0, causal, None, wl, wr, True)
    torch.testing.assert_close(out.float(), want.float(), atol=ATTN_ATOL[dtype], rtol=0)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=0)
    assert out.shape == q.shape and lse.shape == (hq, q.shape[0])


def _aux():
    try:
        from torch.nn.attention.varlen import AuxRequest
        return AuxRequest(lse=True)
    except ImportError:
        from scree._ops import _LseRequest
        return _LseRequest()


def test_varlen_attn_is_a_drop_in_for_pytorchs(gen):
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    lens = varlen_lengths(gen, 5, 16, 400)
    cu = ref.cu_of(lens, DEV)
    q = rand(gen, sum(lens), 8, 128, dtype=torch.bfloat16)
    k = rand(gen, sum(lens), 8, 128, dtype=torch.bfloat16)
    v = rand(gen, sum(lens), 8, 128, dtype=torch.bfloat16)
    args = (q, k, v, cu, cu, max(lens), max(lens))
    kw = dict(return_aux=varlen.AuxRequest(lse=True), window_size=(-1, 0), scale=0.1)
    try:
        want, want_lse = varlen.varlen_attn(*args, **kw)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"PyTorch's varlen_attn does not run here: {e}")
    got, lse = scree.varlen_attn(*args, **kw)
    assert got.shape == want.shape and lse.shape == want_lse.shape
    torch.testing.assert_close(got.float(), want.float(), atol=ATTN_ATOL[torch.bfloat16], rtol=0)
    torch.testing.assert_close(lse, want_lse.float(), atol=1e-3, rtol=0)


@pytest.mark.parametrize("dtype,hq,hkv,d,causal,window,scale,softcap", [
    (torch.bfloat16, 8, 2, 128, True, (-1, -1), 0.5, 20.0),
    (torch.float16, 4, 4, 64, False, (48, 16), 1.0, 5.0),
    (torch.float16, 8, 1, 256, True, (100, 0), 0.5, 30.0),
])
def test_varlen_attn_softcap(gen, dtype, hq, hkv, d, causal, window, scale, softcap):
    """Softcap over contiguous K/V (scale * q.k of 4 to 11 standard
    deviations, so that tanh saturates), through varlen_attn and
    flash_attn_varlen_func, against the float64 reference; the plain
    attention is far from it."""
    lens_q = varlen_lengths(gen)
    lens_k = [n + (ref.random_seqlens(gen, 1, 0, 40)[0] if n else 0) for n in lens_q]
    cq, ck = ref.cu_of(lens_q, DEV), ref.cu_of(lens_k, DEV)
    q = rand(gen, sum(lens_q), hq, d, dtype=dtype)
    k = rand(gen, sum(lens_k), hkv, d, dtype=dtype)
    v = rand(gen, sum(lens_k), hkv, d, dtype=dtype)
    mq, mk = max(lens_q), max(lens_k)
    out, lse = scree.varlen_attn(q, k, v, cq, ck, mq, mk, causal=causal, window_size=window,
                                 scale=scale, softcap=softcap, return_aux=_aux())
    wl, wr = window
    want, want_lse = ref.varlen_attn(q, k, v, cq, ck, 0, 0, causal, scale, wl, wr, True,
                                     softcap=softcap)
    torch.testing.assert_close(out.float(), want.float(), atol=ATTN_ATOL[dtype], rtol=0)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=0)
    plain, _ = ref.varlen_attn(q, k, v, cq, ck, 0, 0, causal, scale, wl, wr, False)
    assert (plain.float() - want.float()).abs().max() > 10 * ATTN_ATOL[dtype]
    got = scree.flash_attn_varlen_func(q, k, v, cq, ck, mq, mk, softmax_scale=scale,
                                       causal=causal, window_size=window, softcap=softcap)
    torch.testing.assert_close(got, out, atol=0, rtol=0)


def test_flash_attn_alias_and_packed_qkv_views(gen):
    lens = varlen_lengths(gen)
    cu = ref.cu_of(lens, DEV)
    qkv = rand(gen, sum(lens), 3, 8, 64, dtype=torch.float16)
    q, k, v = qkv.unbind(1)  # token stride 3*8*64, no copies
    out = scree.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True)
    want, _ = ref.varlen_attn(q, k, v, cu, cu, 0, 0, True)
    torch.testing.assert_close(out.float(), want.float(), atol=ATTN_ATOL[torch.float16], rtol=0)
    cu64 = cu.to(torch.int64)  # int64 cu_seqlens are converted
    out2 = scree.varlen_attn(q, k, v, cu64, cu64, max(lens), max(lens), causal=True)
    torch.testing.assert_close(out2, out, atol=0, rtol=0)


# -- paged attention -------------------------------------------------------------

PAGED_CASES = [
    # dtype, page_size, heads_q, heads_kv, head_dim, query lengths, causal, window, softcap
    (torch.bfloat16, 16, 32, 8, 128, "decode", True, (-1, -1), 0.0),
    (torch.float16, 1, 8, 8, 64, "spec4", True, (-1, -1), 0.0),
    (torch.bfloat16, 64, 16, 2, 128, "chunk", True, (256, 0), 0.0),
    (torch.bfloat16, 16, 8, 1, 256, "decode", True, (-1, -1), 50.0),
    (torch.float16, 64, 8, 2, 96, "spec4", False, (-1, -1), 30.0),
    (torch.bfloat16, 1, 4, 2, 32, "chunk", True, (64, 0), 20.0),
]


def paged_lengths(gen, kind, n=6):
    """(key lengths, query lengths): keys up to 3000 (long ones split across
    CTAs), one empty sequence; 1 query a sequence (decode), 4
    (speculative) or a chunk of up to 200, never more than the keys."""
    lens_k = ref.random_seqlens(gen, n, 4, 3000)
    lens_k[1] = 0
    if kind == "chunk":
        lens_q = [min(k, q) for k, q in zip(lens_k, ref.random_seqlens(gen, n, 1, 200))]
    else:
        lens_q = [min(k, 1 if kind == "decode" else 4) for k in lens_k]
    return lens_k, lens_q


@pytest.mark.parametrize("dtype,page,hq,hkv,d,kind,causal,window,softcap", PAGED_CASES)
def test_paged_attention(gen, dtype, page, hq, hkv, d, kind, causal, window, softcap):
    """Against the pages gathered to contiguous K/V and attended in float64
    (bottom-right masks, softcap, window); shuffled block tables; the lse."""
    lens_k, lens_q = paged_lengths(gen, kind)
    q, kc, vc, bt, sk, cq = ref.paged_batch(gen, lens_k, lens_q, page, hq, hkv, d, dtype, DEV,
                                            interleaved=page == 16)
    out, lse = scree.paged_attention(q, kc, vc, bt, sk, cq, max(lens_q), max(lens_k),
                                     causal=causal, window_size=window, softcap=softcap,
                                     return_lse=True)
    want, want_lse = ref.paged_attention(q, kc, vc, bt, sk, cq, 0, 0, causal, None, window[0],
                                         window[1], softcap, True)
    assert out.shape == q.shape and lse.shape == (hq, q.shape[0])
    torch.testing.assert_close(out.float(), want.float(), atol=ATTN_ATOL[dtype], rtol=0)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=0)
    alone = scree.paged_attention(q, kc, vc, bt, sk, cq, max(lens_q), max(lens_k), causal=causal,
                                  window_size=window, softcap=softcap)
    torch.testing.assert_close(alone, out, atol=ATTN_ATOL[dtype], rtol=0)  # without lse


@pytest.mark.parametrize("page", [1, 16, 64])
def test_varlen_attn_with_block_table_equals_contiguous(gen, page):
    """varlen_attn with block_table (seqused_k, or cu_seq_k's differences)
    and flash_attn_varlen_func with block_table give varlen_attn's output on
    the gathered contiguous K/V; q a strided view of a fused qkv buffer,
    the caches the two halves of an interleaved one."""
    lens_k, lens_q = paged_lengths(gen, "chunk")
    _, kc, vc, bt, sk, cq = ref.paged_batch(gen, lens_k, lens_q, page, 8, 2, 128,
                                            torch.bfloat16, DEV, interleaved=True)
    q = rand(gen, sum(lens_q), 8 + 2 * 2, 128, dtype=torch.bfloat16)[:, :8]
    k, ck = ref.gather_pages(kc, bt, sk)
    v, _ = ref.gather_pages(vc, bt, sk)
    mq, mk = max(lens_q), max(lens_k)
    want = scree.varlen_attn(q, k, v, cq, ck, mq, mk, causal=True)
    tol = dict(atol=ATTN_ATOL[torch.bfloat16], rtol=0)
    for got in (scree.varlen_attn(q, kc, vc, cq, ck, mq, mk, causal=True, block_table=bt),
                scree.varlen_attn(q, kc, vc, cq, None, mq, mk, window_size=(-1, 0),
                                  block_table=bt, seqused_k=sk),
                scree.flash_attn_varlen_func(q, kc, vc, cq, ck, mq, mk, causal=True,
                                             block_table=bt)):
        torch.testing.assert_close(got.float(), want.float(), **tol)


def test_paged_attention_after_kv_append(gen):
    """A decode step as a server runs it: the new tokens' K and V written by
    kv_append into their slots, then attended with the cached ones."""
    lens_k = [37, 1, 300, 16]
    lens_q = [1] * 4
    q, kc, vc, bt, sk, cq = ref.paged_batch(gen, lens_k, lens_q, 16, 8, 2, 64, torch.float16,
                                            DEV)
    new_k, new_v = rand(gen, 4, 2, 64, dtype=torch.float16), rand(gen, 4, 2, 64,
                                                                 dtype=torch.float16)
    last = torch.tensor(lens_k) - 1
    slots = (bt.cpu()[torch.arange(4), last // 16].long() * 16 + last % 16).to(DEV)
    scree.kv_append(new_k, new_v, kc, vc, slots)
    out = scree.paged_attention(q, kc, vc, bt, sk, cq, 1, max(lens_k))
    want, _ = ref.paged_attention(q, kc, vc, bt, sk, cq, 0, 0)
    torch.testing.assert_close(out.float(), want.float(), atol=ATTN_ATOL[torch.float16], rtol=0)
    k, _ = ref.gather_pages(kc, bt, sk)
    assert torch.equal(k[torch.tensor(lens_k).cumsum(0).to(DEV) - 1], new_k)


def test_errors_from_the_library_name_the_argument(gen):
    cu = ref.cu_of([4], DEV)
    q = rand(gen, 4, 2, 48, dtype=torch.float16)
    with pytest.raises(scree.ScreeArgumentError) as e:
        scree.varlen_attn(q, q, q, cu, cu, 4, 4)
    assert e.value.argument == "query" and "head_dim=48" in str(e.value)
    assert e.value.status_name == "ERROR_UNSUPPORTED"
    buf = rand(gen, 4 * 2 * 64 + 4, dtype=torch.float16)
    qm = buf[4:].view(4, 2, 64)  # 8 bytes off 16-byte alignment
    with pytest.raises(scree.ScreeArgumentError) as e:
        scree.varlen_attn(qm, qm, qm, cu, cu, 4, 4)
    assert e.value.status_name == "ERROR_MISALIGNED" and e.value.argument == "query"
    with pytest.raises(scree.ScreeArgumentError, match="'normalized_shape'"):
        scree.rms_norm(rand(gen, 2, 70000), [70000])


def _on_device(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype, device=DEV)


@pytest.mark.parametrize("case", bad_calls.REFUSED, ids=[c[0] for c in bad_calls.REFUSED])
def test_device_refuses_what_the_fake_implementations_do(case):
    """The cases the CPU tests refuse with fake and meta tensors
    (test_fake_implementations_refuse_what_the_device_would), on the
    device: the same ScreeArgumentError naming the same argument, through
    the public function (its eager path) and torch.ops.scree (the real
    implementation)."""
    _, public, through_op, arg, match = case
    for call in (public, through_op):
        with pytest.raises(scree.ScreeArgumentError, match=match) as e:
            call(_on_device)
        assert e.value.argument == arg, str(e.value)


@pytest.mark.parametrize("case", bad_calls.UNCLEAR, ids=[c[0] for c in bad_calls.UNCLEAR])
def test_arguments_of_the_wrong_kind_are_named_on_the_device(case):
    _, call, exc, arg, match = case
    with pytest.raises(exc) as e:
        call(_on_device)
    assert f"argument '{arg}'" in str(e.value) and match in str(e.value), str(e.value)


# -- streams, threads, options -------------------------------------------------


def test_runs_on_pytorchs_current_stream(gen):
    x = rand(gen, 4096, 4096)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # keep s busy, so a launch elsewhere would run first
        x.fill_(2.0)
        y = scree.rms_norm(x, [4096])
        y2 = scree.swiglu(x, x)
    s.synchronize()
    close(y, torch.ones_like(y))
    close(y2, ref.swiglu(x, x))


def test_threads_share_one_context(gen):
    x = rand(gen, 1000, 1024, dtype=torch.bfloat16)
    w = rand(gen, 1024, dtype=torch.bfloat16)
    want = ref.rms_norm(x, [1024], w, 1e-6)
    errors = []

    def work():
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                for _ in range(50):
                    y = scree.rms_norm(x, [1024], w, 1e-6)
                torch.cuda.current_stream().synchronize()
                close(y, want)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    torch.cuda.synchronize()  # the inputs are ready for every thread's stream
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    from scree import _context
    assert list(_context._contexts) == [torch.cuda.current_device()]
    assert scree.counters(torch.cuda.current_device())["calls"] >= 200


def test_options_miss_policy_error(tmp_path, gen):
    if os.environ.get("SCREE_MISS_POLICY"):
        pytest.skip("SCREE_MISS_POLICY is set, and it takes precedence")
    prev = scree.options(miss_policy="error", cache_path=str(tmp_path / "tune.db"))
    try:
        with pytest.raises(scree.ScreeError) as e:
            scree.rms_norm(rand(gen, 8, 96), [96])
        assert e.value.status_name == "ERROR_CACHE_MISS"
    finally:
        scree.options(miss_policy=None, cache_path=None)
        scree.options(**prev)
    scree.rms_norm(rand(gen, 8, 96), [96])  # a new context, the default policy again


# -- torch.library and torch.compile ------------------------------------------


def test_opcheck_on_cuda(gen):
    lens = [3, 0, 40, 1]
    cu = ref.cu_of(lens, DEV)
    t = sum(lens)
    b = torch.bfloat16
    cases = [
        ("rms_norm", (rand(gen, 6, 256, dtype=b), [256], rand(gen, 256, dtype=b), 1e-6)),
        ("layer_norm", (rand(gen, 6, 256), [256], rand(gen, 256), rand(gen, 256), 1e-5)),
        ("add_rms_norm", (rand(gen, 6, 256, dtype=b), rand(gen, 6, 256, dtype=b),
                          rand(gen, 256, dtype=b), 1e-6)),
        ("softmax", (rand(gen, 6, 256), -1, None, 1.0)),
        ("ragged_softmax", (rand(gen, t, 8), cu, 40, 1.0)),
        ("rope_", (rand(gen, t, 4, 64, dtype=b), rand(gen, t, 2, 64, dtype=b), cu, None, None,
                   10000.0, 0, False)),
        ("swiglu", (rand(gen, 6, 512, dtype=b), None)),
        ("cross_entropy", (rand(gen, 6, 500), torch.tensor([1, 2, -100, 49, 0, 7], device=DEV),
                           -100)),
        ("cross_entropy", (rand(gen, 6, 500, dtype=b),
                           torch.tensor([1, 2, -100, 49, 0, 7], device=DEV), -100, 0.1, 1e-4, 2,
                           True)),
        ("rope", (rand(gen, t, 4, 64, dtype=b), rand(gen, t, 2, 64, dtype=b), cu, None, None,
                  10000.0, 0, False)),
        ("rope_backward", (rand(gen, t, 4, 64, dtype=b), None, None,
                           torch.arange(t, device=DEV), None, 500.0, 32, True)),
        ("linear_cross_entropy", (rand(gen, 7, 64), rand(gen, 500, 64),
                                  torch.tensor([1, 2, -100, 49, 0, 7, 3], device=DEV), None, -100,
                                  2, 0.0, 0.0, 3, True)),
        ("linear_cross_entropy", (rand(gen, 7, 64, dtype=b), rand(gen, 500, 64, dtype=b),
                                  torch.tensor([1, 2, -100, 49, 0, 7, 3], device=DEV),
                                  rand(gen, 500, dtype=b), -100, 1, 0.1, 1e-4, 0, True)),
        ("varlen_attn", (rand(gen, t, 4, 64, dtype=b), rand(gen, t, 2, 64, dtype=b),
                         rand(gen, t, 2, 64, dtype=b), cu, cu, 40, 40, True, None, -1, -1,
                         30.0, True)),
        ("paged_attention", ref.paged_batch(gen, [60, 0, 45, 3], lens, 16, 4, 2, 64, b, DEV,
                                            interleaved=True)
         + (40, 60, True, None, -1, -1, 0.0, True)),
    ]
    for name, args in cases:
        torch.library.opcheck(getattr(torch.ops.scree, name).default, args)


def test_compile_llama_layer_fullgraph_inductor(gen):
    import llama_block as lb
    cfg = lb.CONFIGS["small"]
    lengths = [100, 7, 333, 64, 1]
    W = lb.make_weights(cfg, DEV, torch.bfloat16, gen)
    x, xp, cu, longest = lb.make_batch(lengths, cfg["hidden"], DEV, torch.bfloat16, gen)
    torch._dynamo.reset()
    f = torch.compile(lambda x, cu: lb.scree_layer(x, cu, longest, W, cfg, False),
                      fullgraph=True)
    with torch.no_grad():
        got = f(x, cu)
        eager = lb.scree_layer(x, cu, longest, W, cfg)
        padded = lb.unpad(lb.torch_layer(xp, W, cfg), lengths)
    scale = padded.abs().max().item()
    torch.testing.assert_close(got.float(), eager.float(), atol=0.02 * scale, rtol=0)
    torch.testing.assert_close(eager.float(), padded.float(), atol=0.05 * scale, rtol=0)


def test_transformers_llama_scree_matches_sdpa(gen):
    transformers = pytest.importorskip("transformers")
    import scree.hf  # noqa: F401

    def model(attn):
        cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024,
                                       num_hidden_layers=2, num_attention_heads=8,
                                       num_key_value_heads=2, max_position_embeddings=1024)
        torch.manual_seed(3)
        m = transformers.LlamaForCausalLM(cfg).eval()
        m.set_attn_implementation(attn)
        return m.to(device=DEV, dtype=torch.bfloat16)

    m_scree, m_sdpa = model("scree"), model("sdpa")
    lengths = [37, 1, 250, 64, 9]
    ids = torch.randint(0, 1000, (1, sum(lengths)), generator=gen).to(DEV)
    pos = torch.cat([torch.arange(n) for n in lengths])[None].to(DEV)
    with torch.no_grad():
        a = m_scree(input_ids=ids, position_ids=pos, use_cache=False).logits.float()
        b = m_sdpa(input_ids=ids, position_ids=pos, use_cache=False).logits.float()
    scale = b.abs().max().item()
    torch.testing.assert_close(a, b, atol=0.05 * scale, rtol=0)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9
