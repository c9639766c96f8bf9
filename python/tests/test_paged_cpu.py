"""scree.paged_attention, and varlen_attn and flash_attn_varlen_func with
block_table, without a GPU: fake and meta shapes, argument errors named
under each function's own names, torch.compile(fullgraph=True) of a decode
step, the structs the implementation fills (strided q, the two halves of an
interleaved cache), and the paged calls of varlen_attn against its calls
on the gathered contiguous K/V, through the CPU reference kernels
(reference.py). bad_calls.py holds the refusals shared with the GPU
tests; test_ops_cpu.py's opcheck covers torch.ops.scree.paged_attention."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import reference as ref
import scree
from scree import _ops

BF16 = torch.bfloat16
I32 = torch.int32


def _cuda(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="cuda")


def _tensors(T=6, B=2, hq=8, hkv=2, d=64, P=10, S=16, W=4, dtype=BF16, mk=_cuda):
    """q, k_cache, v_cache, block_table, seqlens_k, cu_seqlens_q."""
    return (mk(T, hq, d, dtype=dtype), mk(P, S, hkv, d, dtype=dtype), mk(P, S, hkv, d, dtype=dtype),
            mk(B, W, dtype=I32), mk(B, dtype=I32), mk(B + 1, dtype=I32))


# -- shapes from the fake implementation ----------------------------------------


@pytest.mark.parametrize("mode", ["fake", "meta"])
def test_fake_shapes(mode):
    meta = mode == "meta"
    mk = (lambda *s, dtype=BF16: torch.empty(*s, dtype=dtype, device="meta")) if meta else _cuda
    ctx = torch.no_grad() if meta else FakeTensorMode()
    with ctx:
        q, kc, vc, bt, sk, cu = _tensors(mk=mk)
        out = scree.paged_attention(q, kc, vc, bt, sk, cu, 4, 64)
        assert out.shape == (6, 8, 64) and out.dtype == BF16 and out.device == q.device
        out, lse = scree.paged_attention(q, kc, vc, bt, sk, cu, 4, 64, return_lse=True,
                                         causal=False, window_size=(32, 0), softcap=30.0,
                                         scale=0.1)
        assert lse.shape == (8, 6) and lse.dtype == torch.float32
        kv = mk(10, 2, 16, 2, 64, dtype=torch.float16)  # vLLM's interleaved cache
        qh = mk(6, 8, 64, dtype=torch.float16)
        out = scree.varlen_attn(qh, kv[:, 0], kv[:, 1], cu, cu, 4, 64, block_table=bt)
        assert out.shape == (6, 8, 64) and out.dtype == torch.float16
        out = scree.varlen_attn(qh, kv[:, 0], kv[:, 1], cu, None, 4, 64, block_table=bt,
                                seqused_k=sk, causal=True)
        assert out.shape == (6, 8, 64)
        out, lse, none = scree.flash_attn_varlen_func(qh, kv[:, 0], kv[:, 1], cu, cu, 4, 64,
                                                      causal=True, softcap=50.0, block_table=bt,
                                                      return_attn_probs=True)
        assert out.shape == (6, 8, 64) and lse.shape == (8, 6) and none is None


# -- argument errors ----------------------------------------------------------------


def _paged(**kw):
    return lambda: scree.paged_attention(*_tensors(**kw), 4, 64)


def _with(i, t, **kw):
    """paged_attention with its i-th tensor replaced by t."""
    def call():
        a = list(_tensors(**kw))
        a[i] = t() if callable(t) else t
        return scree.paged_attention(*a, 4, 64)
    return call


@pytest.mark.parametrize("call,exc,match", [
    (_with(0, lambda: _cuda(6, 512)), ValueError, "argument 'q' must be \\[total_q"),
    (_with(1, lambda: _cuda(10, 16, 128)), ValueError, "argument 'k_cache' must be \\[num_pages"),
    (_with(1, lambda: _cuda(10, 16, 2, 128)), ValueError, "q's head_dim 64"),
    (_with(2, lambda: _cuda(10, 8, 2, 64)), ValueError, "argument 'v_cache'.*k_cache's shape"),
    (_with(2, lambda: _cuda(10, 2, 16, 64).transpose(1, 2)), ValueError,
     "argument 'v_cache'.*strides"),
    (_with(1, lambda: _cuda(10, 16, 2, 64, dtype=torch.float16)), TypeError,
     "argument 'k_cache' has dtype torch.float16, not q's torch.bfloat16"),
    (_with(2, lambda: _cuda(10, 16, 2, 64, dtype=torch.float16)), TypeError, "'v_cache'"),
    (lambda: scree.paged_attention(_cuda(6, 8, 64), *[_cuda(10, 16, 64, 2).transpose(2, 3)] * 2,
                                   *_tensors()[3:], 4, 64), ValueError,
     "'k_cache' needs a contiguous last dimension"),
    (_with(3, lambda: _cuda(2, 4, dtype=torch.int64)), TypeError,
     "argument 'block_table' must be an int32"),
    (_with(3, lambda: _cuda(8, dtype=I32)), TypeError, "'block_table'.*\\(8,\\)"),
    (_with(4, lambda: _cuda(3, dtype=I32)), TypeError, "argument 'seqlens_k' must be int32 "
     "\\[batch\\] with block_table's batch 2"),
    (_with(4, lambda: _cuda(2, dtype=torch.float32)), TypeError, "'seqlens_k'"),
    (_with(5, lambda: _cuda(2, dtype=I32)), ValueError, "argument 'cu_seqlens_q' must be 1-D "
     "with batch \\+ 1 = 3"),
    (_with(5, lambda: _cuda(3, dtype=torch.float32)), TypeError, "'cu_seqlens_q' has dtype"),
    (lambda: scree.paged_attention(*_tensors(), 4, 64, window_size=5), TypeError,
     "'window_size'=5 must be a pair"),
    (lambda: scree.paged_attention(*_tensors(), 4, 64, causal="no"), TypeError, "'causal'"),
])
def test_argument_errors_name_the_argument(call, exc, match):
    with FakeTensorMode():
        with pytest.raises(exc, match=match):
            call()


def _varlen(key_shape=(10, 16, 2, 64), **kw):
    q, kc, vc, bt, sk, cu = _tensors()
    k = _cuda(*key_shape)
    return scree.varlen_attn(q, k, k, cu, cu, 4, 64, block_table=bt, **kw)


@pytest.mark.parametrize("call,exc,arg,match", [
    # The library's refusals, under varlen_attn's names.
    (lambda: _varlen((10, 12, 2, 64)), scree.ScreeArgumentError, "key", "page_size=12"),
    (lambda: _varlen((10, 16, 2, 80)), ValueError, None, "argument 'key' must be \\[num_pages"),
    (lambda: _varlen(seqused_k=_cuda(2, dtype=I32), window_size=(-3, 0)),
     scree.ScreeArgumentError, "window_size", "window_left"),
    (lambda: scree.varlen_attn(_cuda(6, 8, 80), _cuda(10, 16, 2, 80), _cuda(10, 16, 2, 80),
                               _cuda(3, dtype=I32), _cuda(3, dtype=I32), 4, 64,
                               block_table=_cuda(2, 4, dtype=I32)), scree.ScreeArgumentError,
     "query", "head_dim=80"),
    (lambda: scree.varlen_attn(_cuda(6, 8, 64), _cuda(10, 16, 2, 64), _cuda(10, 16, 2, 64),
                               _cuda(3, dtype=I32), _cuda(3, dtype=I32), 4, 64,
                               block_table=_cuda(2, 4, dtype=torch.int64)), TypeError, None,
     "scree.varlen_attn: argument 'block_table' must be an int32"),
    (lambda: scree.varlen_attn(_cuda(6, 8, 64), _cuda(10, 16, 2, 64), _cuda(10, 16, 2, 64),
                               _cuda(3, dtype=I32), _cuda(4, dtype=I32), 4, 64,
                               block_table=_cuda(2, 4, dtype=I32)), TypeError, None,
     "argument 'cu_seq_k' must be int32 \\[batch\\]"),
    (lambda: scree.varlen_attn(_cuda(6, 8, 64), _cuda(10, 16, 2, 64), _cuda(10, 16, 2, 64),
                               _cuda(3, dtype=I32), None, 4, 64,
                               block_table=_cuda(2, 4, dtype=I32)), TypeError, None,
     "argument 'cu_seq_k' must be a tensor"),
    (lambda: scree.varlen_attn(_cuda(6, 8, 64), _cuda(6, 2, 64), _cuda(6, 2, 64),
                               _cuda(3, dtype=I32), _cuda(3, dtype=I32), 4, 4,
                               seqused_k=_cuda(2, dtype=I32)), ValueError, None,
     "'seqused_k' is taken with block_table"),
    (lambda: scree.flash_attn_varlen_func(_cuda(6, 8, 64), _cuda(10, 16, 2, 64),
                                          _cuda(10, 16, 2, 64), _cuda(3, dtype=I32),
                                          _cuda(3, dtype=I32), 4, 1000,
                                          block_table=_cuda(2, 4, dtype=I32)),
     scree.ScreeArgumentError, "block_table", "block_table_stride=4"),
    (lambda: scree.flash_attn_varlen_func(_cuda(6, 8, 64), _cuda(10, 16, 2, 64),
                                          _cuda(10, 16, 2, 64), _cuda(3, dtype=I32),
                                          _cuda(3, dtype=I32), "4", 64,
                                          block_table=_cuda(2, 4, dtype=I32)),
     TypeError, None, "argument 'max_seqlen_q'='4' must be an int"),
    (lambda: scree.flash_attn_varlen_func(_cuda(6, 8, 64), _cuda(6, 2, 64), _cuda(6, 2, 64),
                                          _cuda(3, dtype=I32), _cuda(3, dtype=I32), 4, 4,
                                          softcap=-1.0), scree.ScreeArgumentError, "softcap",
     "'softcap'=-1.0 must be >= 0"),
    (lambda: scree.varlen_attn(_cuda(6, 8, 64), _cuda(10, 16, 2, 64), _cuda(10, 16, 2, 64),
                               _cuda(3, dtype=I32), _cuda(3, dtype=I32), 4, 64,
                               block_table=_cuda(2, 4, dtype=I32), softcap=float("nan")),
     scree.ScreeArgumentError, "softcap", "'softcap'=nan must be finite"),
])
def test_paged_varlen_errors_use_the_callers_names(call, exc, arg, match):
    with FakeTensorMode():
        with pytest.raises(exc, match=match) as e:
            call()
    assert str(e.value).startswith(("scree.varlen_attn", "scree.flash_attn_varlen_func"))
    if arg is not None:
        assert e.value.argument == arg, str(e.value)


# -- the struct the implementation fills ------------------------------------------


def test_implementation_fills_the_struct(captured, gen):
    """Strided q (a view of a fused qkv buffer) is read where it lies; the
    two halves of vLLM's [blocks, 2, page, H, d] cache pass their shared
    strides; block_table's width is its stride; window (-1, 0) is causal."""
    T, hq, hkv, d, P, S = 6, 8, 2, 64, 5, 16
    qkv = torch.randn(T, hq + 2 * hkv, d, generator=gen).to(BF16)
    q = qkv[:, :hq]
    kv = torch.randn(P, 2, S, hkv, d, generator=gen).to(BF16)
    bt = torch.tensor([[3, 0, 4], [1, 2, 0]], dtype=I32)
    sk = torch.tensor([40, 17], dtype=torch.int64)  # converted to int32
    cu = torch.tensor([0, 1, 6], dtype=I32)
    out, lse = _ops._paged_attention_impl(q, kv[:, 0], kv[:, 1], bt, sk, cu, 5, 40, False, None,
                                          -1, 0, 30.0, True)
    name, a = captured[-1]
    assert name == "scree_paged_attention"
    assert (a["q"], a["k_cache"], a["v_cache"], a["out"], a["lse"]) == (
        q.data_ptr(), kv[:, 0].data_ptr(), kv[:, 1].data_ptr(), out.data_ptr(), lse.data_ptr())
    assert (a["q_token_stride"], a["q_head_stride"], a["out_token_stride"]) == (
        (hq + 2 * hkv) * d, d, 0)
    assert (a["cache_page_stride"], a["cache_token_stride"], a["cache_head_stride"]) == (
        2 * S * hkv * d, hkv * d, d)
    assert (a["batch"], a["total_q"], a["max_seqlen_q"], a["max_seqlen_k"]) == (2, T, 5, 40)
    assert (a["num_pages"], a["page_size"], a["block_table_stride"]) == (P, S, 3)
    assert (a["heads_q"], a["heads_kv"], a["head_dim"], a["dtype"]) == (hq, hkv, d, 2)
    assert (a["causal"], a["window_left"], a["window_right"], a["scale"]) == (1, -1, -1, 0.0)
    assert a["softcap"] == 30.0 and a["block_table"] == bt.data_ptr()
    assert a["seqlens_k"] != sk.data_ptr() and out.shape == q.shape and lse.shape == (hq, T)

    # One KV head and one page: the strides of the dimensions of one are 0
    # (dense), whatever torch reports; no lse; a column slice of the block
    # table is copied.
    kc = torch.randn(1, 8, 1, d, generator=gen).to(torch.float16)
    wide = torch.zeros(2, 6, dtype=I32)
    _ops._paged_attention_impl(q.to(torch.float16), kc, kc, wide[:, :2], sk.to(I32), cu, 5, 16,
                               True, 0.5, 8, -1, 0.0, False)
    a = captured[-1][1]
    assert (a["cache_page_stride"], a["cache_token_stride"], a["cache_head_stride"]) == (0, d, 0)
    assert (a["lse"], a["block_table_stride"], a["dtype"], a["scale"]) == (0, 2, 1, 0.5)
    assert a["block_table"] != wide.data_ptr()
    assert (a["causal"], a["window_left"], a["window_right"]) == (1, 8, -1)


# -- through the CPU reference kernels ---------------------------------------------


@pytest.mark.parametrize("interleaved", [False, True])
def test_varlen_attn_with_block_table_is_attention_on_the_gathered_keys(cpu_kernels, gen,
                                                                        interleaved):
    """varlen_attn and flash_attn_varlen_func with block_table (key lengths
    from seqused_k or from cu_seq_k's differences) give what varlen_attn
    gives on the gathered contiguous K/V, and paged_attention the same."""
    lens_k, lens_q = [9, 1, 30, 4], [1, 1, 5, 4]
    q, kc, vc, bt, sk, cq = ref.paged_batch(gen, lens_k, lens_q, 8, interleaved=interleaved)
    k, ck = ref.gather_pages(kc, bt, sk)
    v, _ = ref.gather_pages(vc, bt, sk)
    mq, mk = max(lens_q), max(lens_k)
    aux = _ops._LseRequest()
    want, want_lse = scree.varlen_attn(q, k, v, cq, ck, mq, mk, causal=True, return_aux=aux)
    got, lse = scree.varlen_attn(q, kc, vc, cq, ck, mq, mk, causal=True, block_table=bt,
                                 return_aux=aux)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(lse, want_lse)
    got = scree.varlen_attn(q, kc, vc, cq, None, mq, mk, window_size=(-1, 0), block_table=bt,
                            seqused_k=sk)
    torch.testing.assert_close(got, want)
    got = scree.flash_attn_varlen_func(q, kc, vc, cq, ck, mq, mk, causal=True, block_table=bt)
    torch.testing.assert_close(got, want)
    got = scree.paged_attention(q, kc, vc, bt, sk, cq, mq, mk)
    torch.testing.assert_close(got, want)
    # softcap and a window reach the kernel.
    capped = scree.paged_attention(q, kc, vc, bt, sk, cq, mq, mk, softcap=0.5,
                                   window_size=(3, 0))
    want_c, _ = ref.varlen_attn(q, k, v, cq, ck, mq, mk, True, None, 3, 0, softcap=0.5)
    torch.testing.assert_close(capped, want_c)
    assert not torch.allclose(capped, want)


def test_compile_fullgraph_decode_step(cpu_kernels, gen, aot_graphs):
    """A decode step (kv_append of the new tokens, then paged_attention, and
    varlen_attn with block_table whose key lengths come from cu_seq_k on
    the device) stays in one graph and gives the eager result."""
    lens_k, lens_q = [5, 12, 1], [1, 1, 1]
    q, kc, vc, bt, sk, cq = ref.paged_batch(gen, lens_k, lens_q, 8, dtype=BF16)
    ck = ref.cu_of(lens_k, "cpu")
    slots = torch.tensor([bt[b, (n - 1) // 8].item() * 8 + (n - 1) % 8
                          for b, n in enumerate(lens_k)])
    knew, vnew = torch.randn(3, 2, 32, generator=gen).to(BF16), torch.randn(
        3, 2, 32, generator=gen).to(BF16)

    def step(q, knew, vnew, kc, vc, bt, sk, cq, ck):
        scree.kv_append(knew, vnew, kc, vc, slots)
        a = scree.paged_attention(q, kc, vc, bt, sk, cq, 1, 12)
        b = scree.varlen_attn(q, kc, vc, cq, ck, 1, 12, block_table=bt, causal=True)
        return a, b

    backend, graphs = aot_graphs
    torch._dynamo.reset()
    kc2, vc2 = kc.clone(), vc.clone()
    with torch.no_grad():
        got = torch.compile(step, fullgraph=True, backend=backend)(q, knew, vnew, kc, vc, bt, sk,
                                                                    cq, ck)
        want = step(q, knew, vnew, kc2, vc2, bt, sk, cq, ck)
    assert len(graphs) == 1
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert sum("scree.paged_attention" in t for t in targets) == 2, targets
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(got[0], got[1])


def test_compile_refuses_at_trace_time(cpu_kernels):
    q, kc, vc, bt, sk, cq = _tensors(mk=lambda *s, dtype=BF16: torch.zeros(*s, dtype=dtype),
                                  S=12)
    torch._dynamo.reset()
    f = torch.compile(lambda *a: scree.paged_attention(*a, 4, 40), fullgraph=True,
                      backend="aot_eager")
    with pytest.raises(Exception, match="page_size=12"):
        f(q, kc, vc, bt, sk, cq)
