"""The ops without a GPU: output shapes from the fake implementations,
argument errors, torch.library.opcheck, torch.compile(fullgraph=True) of a
LLaMA-style layer, and the HuggingFace attention path. The custom ops run
the float64 references of tests/reference.py as CPU kernels here
(cpu_kernels fixture), so everything around the kernels is exercised."""
import contextlib
import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import bad_calls
import reference as ref
import scree
from scree import _ops

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))

BF16 = torch.bfloat16


def _cuda(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="cuda")


# -- shapes from the fake implementations ------------------------------------


def test_fake_shapes_of_every_op():
    with FakeTensorMode():
        x = _cuda(2, 5, 64)
        w = _cuda(64)
        cu = _cuda(4, dtype=torch.int32)
        assert scree.rms_norm(x, [64], w).shape == (2, 5, 64)
        assert scree.rms_norm(x, (5, 64)).dtype == BF16
        assert scree.layer_norm(x, [64], w, w).shape == (2, 5, 64)
        y, h = scree.add_rms_norm(x, x, w)
        assert y.shape == h.shape == (2, 5, 64)
        assert scree.softmax(x, -1, dtype=torch.float32).dtype == torch.float32
        assert scree.ragged_softmax(_cuda(10, 3, 4), cu, 6).shape == (10, 3, 4)
        q, k = scree.rope(_cuda(10, 8, 64), _cuda(10, 2, 64), cu_seqlens=cu)
        assert q.shape == (10, 8, 64) and k.shape == (10, 2, 64)
        assert scree.swiglu(_cuda(10, 128)).shape == (10, 64)
        assert scree.swiglu(_cuda(10, 64), _cuda(10, 64)).shape == (10, 64)
        assert scree.cross_entropy(_cuda(10, 100), _cuda(10, dtype=torch.int64)).shape == ()
        assert scree.cross_entropy(_cuda(10, 100), _cuda(10, dtype=torch.int64),
                                   reduction="none").shape == (10,)
        q, kv = _cuda(10, 8, 64), _cuda(12, 2, 64)
        out = scree.varlen_attn(q, kv, kv, cu, cu, 5, 6)
        assert out.shape == (10, 8, 64) and out.device.type == "cuda"
        out, lse = scree.varlen_attn(q, kv, kv, cu, cu, 5, 6, return_aux=ref_aux(),
                                     window_size=(-1, 0))
        assert lse.shape == (8, 10) and lse.dtype == torch.float32
        out, lse, none = scree.flash_attn_varlen_func(q, kv, kv, cu, cu, 5, 6, causal=True,
                                                      return_attn_probs=True)
        assert lse.shape == (8, 10) and none is None
        out, lse = scree.varlen_attn(q, kv, kv, cu, cu, 5, 6, softcap=30.0,
                                     return_aux=ref_aux())
        assert out.shape == (10, 8, 64) and lse.shape == (8, 10)
        out = scree.flash_attn_varlen_func(q, kv, kv, cu, cu, 5, 6, softcap=50.0)
        assert out.shape == (10, 8, 64)
        kc, vc = _cuda(3, 16, 2, 64), _cuda(3, 16, 2, 64)
        assert scree.kv_append(_cuda(5, 2, 64), _cuda(5, 2, 64), kc, vc,
                               _cuda(5, dtype=torch.int64)) is None
        bt, sk = _cuda(3, 4, dtype=torch.int32), _cuda(3, dtype=torch.int32)
        out, lse = scree.paged_attention(q, kc, vc, bt, sk, cu, 5, 64, return_lse=True)
        assert out.shape == (10, 8, 64) and lse.shape == (8, 10)


def ref_aux():
    try:
        from torch.nn.attention.varlen import AuxRequest
        return AuxRequest(lse=True)
    except ImportError:
        return _ops._LseRequest()


def test_meta_tensors():
    x = torch.empty(3, 64, device="meta", dtype=torch.float16)
    assert scree.rms_norm(x, [64]).device.type == "meta"
    q = torch.empty(7, 4, 32, device="meta", dtype=torch.float16)
    cu = torch.empty(3, device="meta", dtype=torch.int32)
    assert scree.varlen_attn(q, q, q, cu, cu, 4, 4).shape == (7, 4, 32)


# -- argument errors ----------------------------------------------------------


@pytest.mark.parametrize("call,exc,match", [
    (lambda: scree.rms_norm(_cuda(4, 64), [32]), ValueError, "'normalized_shape'"),
    (lambda: scree.rms_norm(_cuda(4, 64), [64], _cuda(32)), ValueError, "'weight'"),
    (lambda: scree.rms_norm(_cuda(4, 64, dtype=torch.float64), [64]), TypeError, "'input'"),
    (lambda: scree.layer_norm(_cuda(4, 64), [64], None, _cuda(8)), ValueError, "'bias'"),
    (lambda: scree.add_rms_norm(_cuda(4, 64), _cuda(4, 32), _cuda(64)), ValueError,
     "'residual'"),
    (lambda: scree.add_rms_norm(_cuda(4, 64), _cuda(4, 64, dtype=torch.float16), _cuda(64)),
     TypeError, "'residual'"),
    (lambda: scree.add_rms_norm(_cuda(4, 64), _cuda(4, 64), _cuda(32)), ValueError, "'weight'"),
    (lambda: scree.softmax(_cuda(4, 64), 0), ValueError, "'dim'"),
    (lambda: scree.softmax(_cuda(4, 64), dtype=torch.int32), TypeError, "'dtype'"),
    (lambda: scree.rope(_cuda(4, 64)), ValueError, "'q'"),
    (lambda: scree.rope(_cuda(4, 2, 64)), ValueError, "'cu_seqlens'"),
    (lambda: scree.rope(_cuda(4, 2, 64), _cuda(4, 2, 32), cu_seqlens=_cuda(2, dtype=torch.int32)),
     ValueError, "'k'"),
    (lambda: scree.kv_append(_cuda(4, 128), _cuda(4, 128), _cuda(2, 16, 1, 128),
                             _cuda(2, 16, 1, 128), _cuda(4, dtype=torch.int64)), ValueError, "'k'"),
    (lambda: scree.kv_append(_cuda(4, 2, 64), _cuda(4, 2, 64), _cuda(2, 16, 4, 64),
                             _cuda(2, 16, 4, 64), _cuda(4, dtype=torch.int64)), ValueError,
     "'k_cache'"),
    (lambda: scree.kv_append(_cuda(4, 2, 64), _cuda(4, 2, 64), _cuda(2, 16, 2, 64),
                             _cuda(2, 2, 16, 64).transpose(1, 2), _cuda(4, dtype=torch.int64)), ValueError,
     "'v_cache'"),
    (lambda: scree.kv_append(_cuda(4, 2, 64), _cuda(4, 2, 64, dtype=torch.float16),
                             _cuda(2, 16, 2, 64), _cuda(2, 16, 2, 64),
                             _cuda(4, dtype=torch.int64)), TypeError, "'v'"),
    (lambda: scree.kv_append(_cuda(4, 2, 64), _cuda(4, 2, 64), _cuda(2, 16, 2, 64),
                             _cuda(2, 16, 2, 64), _cuda(4, dtype=torch.float32)), TypeError,
     "'slot_mapping'"),
    (lambda: scree.kv_append(_cuda(4, 2, 64), _cuda(4, 2, 64), _cuda(2, 16, 2, 64),
                             _cuda(2, 16, 2, 64), _cuda(3, dtype=torch.int64)), TypeError,
     "'slot_mapping'"),
    (lambda: scree.swiglu(_cuda(4, 63)), ValueError, "'gate'"),
    (lambda: scree.swiglu(_cuda(4, 64), _cuda(4, 32)), ValueError, "'up'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(3, dtype=torch.int64)), ValueError,
     "'target'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(4, dtype=torch.float32)), TypeError,
     "'target'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(4, dtype=torch.int64), reduction="avg"),
     ValueError, "'reduction'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(4, dtype=torch.int64), label_smoothing=1.5),
     ValueError, "'label_smoothing'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(4, dtype=torch.int64), z_loss=-1.0),
     ValueError, "'z_loss'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(4, dtype=torch.int64), weight=_cuda(10)),
     ValueError, "'weight'"),
    (lambda: scree.cross_entropy(_cuda(4, 10), _cuda(4, dtype=torch.int64), reduce=False),
     ValueError, "'reduce'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 8, 16), _cuda(10, 16),
                                        _cuda(4, dtype=torch.int64)), ValueError, "'hidden'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 8), _cuda(4, dtype=torch.int64)),
     ValueError, "'weight'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16), _cuda(3, dtype=torch.int64)),
     ValueError, "'target'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16), _cuda(4)), TypeError,
     "'target'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16), _cuda(4, dtype=torch.int64),
                                        _cuda(9)), ValueError, "'bias'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16, dtype=torch.float32),
                                        _cuda(4, dtype=torch.int64)), TypeError, "'weight'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16), _cuda(4, dtype=torch.int64),
                                        reduction="avg"), ValueError, "'reduction'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16), _cuda(4, dtype=torch.int64),
                                        chunk_size=0), ValueError, "'chunk_size'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16), _cuda(4, dtype=torch.int64),
                                        label_smoothing=2.0), ValueError, "'label_smoothing'"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda(10, 16).requires_grad_(),
                                        _cuda(4, dtype=torch.int64), reduction="none"),
     ValueError, "'reduction'='none' is not differentiable"),
    (lambda: scree.linear_cross_entropy(_cuda(4, 16), _cuda((1 << 24) + 1, 16),
                                        _cuda(4, dtype=torch.int64)), ValueError, "vocab"),
    (lambda: scree.varlen_attn(_cuda(4, 64), _cuda(4, 2, 64), _cuda(4, 2, 64),
                               _cuda(2, dtype=torch.int32), _cuda(2, dtype=torch.int32), 4, 4),
     ValueError, "'query'"),
    (lambda: scree.varlen_attn(_cuda(4, 8, 64), _cuda(4, 2, 64), _cuda(4, 2, 32),
                               _cuda(2, dtype=torch.int32), _cuda(2, dtype=torch.int32), 4, 4),
     ValueError, "'value'"),
    (lambda: scree.varlen_attn(_cuda(4, 8, 64), _cuda(4, 2, 64), _cuda(4, 2, 64),
                               _cuda(2, dtype=torch.int32), _cuda(3, dtype=torch.int32), 4, 4),
     ValueError, "'cu_seq_q'"),
    (lambda: scree.varlen_attn(_cuda(4, 8, 64), _cuda(4, 2, 64), _cuda(4, 2, 64),
                               _cuda(2, dtype=torch.int32), _cuda(2, dtype=torch.int32), 4, 4,
                               window_size=3), TypeError, "'window_size'"),
    (lambda: scree.flash_attn_varlen_func(_cuda(4, 8, 64), _cuda(4, 2, 64), _cuda(4, 2, 64),
                                          _cuda(2, dtype=torch.int32),
                                          _cuda(2, dtype=torch.int32), 4, 4, dropout_p=0.1),
     ValueError, "'dropout_p'"),
])
def test_argument_errors_name_the_argument(call, exc, match):
    with FakeTensorMode():
        with pytest.raises(exc, match=match):
            call()


def _i32(*shape):
    return _cuda(*shape, dtype=torch.int32)


def _meta(*shape, dtype=BF16):
    return torch.empty(*shape, dtype=dtype, device="meta")


# Fake CUDA tensors under FakeTensorMode, and meta tensors: both reach the
# fake implementations (with no torch.compile).
_MODES = {"fake": (FakeTensorMode, _cuda), "meta": (contextlib.nullcontext, _meta)}


@pytest.mark.parametrize("mode", sorted(_MODES))
@pytest.mark.parametrize("case", bad_calls.REFUSED, ids=[c[0] for c in bad_calls.REFUSED])
def test_fake_implementations_refuse_what_the_device_would(case, mode):
    """What the library refuses on the device is refused with fake and meta
    tensors, through the public function and through torch.ops.scree (the
    fake implementation alone: its check goes through scree_check_args,
    the library's checks without a device), with a ScreeArgumentError
    naming the argument. The GPU tests run the same cases on the device."""
    _, public, through_op, arg, match = case
    enter, mk = _MODES[mode]
    for call in (public, through_op):
        with enter():
            with pytest.raises(scree.ScreeArgumentError, match=match) as e:
                call(mk)
        assert e.value.argument == arg, str(e.value)


@pytest.mark.parametrize("mode", sorted(_MODES))
@pytest.mark.parametrize("case", bad_calls.UNCLEAR, ids=[c[0] for c in bad_calls.UNCLEAR])
def test_arguments_of_the_wrong_kind_are_named(case, mode):
    """Arguments of the wrong type, or out of what can be passed on (int64,
    float32, the schema's ranges), are refused naming the argument and
    saying why, before any tensor is looked at."""
    _, call, exc, arg, match = case
    enter, mk = _MODES[mode]
    with enter():
        with pytest.raises(exc) as e:
            call(mk)
    msg = str(e.value)
    assert f"argument '{arg}'" in msg and match in msg, msg


def test_argument_helpers_pass_good_values():
    """The helpers take what the functions took before: ints from 0-d
    integer tensors and numpy-like integers, floats from ints, bools as
    0 and 1, shapes as lists, tuples and torch.Size."""
    from scree import _args
    assert _args.integer("f", "n", torch.tensor(7)) == 7
    assert _args.integer("f", "n", 2 ** 31 - 1, ("attention", "max_seqlen_q")) == 2 ** 31 - 1
    assert _args.real("f", "x", 3) == 3.0 and type(_args.real("f", "x", 3)) is float
    assert _args.real("f", "x", None, optional=True) is None
    assert _args.boolean("f", "b", 1) is True
    assert _args.shape("f", "s", torch.Size([2, 3])) == (2, 3)
    with pytest.raises(TypeError, match="'n'=True must be an int, not bool"):
        _args.integer("f", "n", True)
    with pytest.raises(ValueError, match="int32"):
        _args.integer("f", "n", 2 ** 31, ("attention", "causal"))


def test_compile_refuses_at_trace_time(cpu_kernels):
    """torch.compile refuses a call the device would, while tracing."""
    q = torch.randn(6, 4, 32)  # float32 attention
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    torch._dynamo.reset()
    f = torch.compile(lambda q, cu: scree.varlen_attn(q, q, q, cu, cu, 4, 4), fullgraph=True,
                      backend="aot_eager")
    with pytest.raises(Exception, match="fp16 or bf16"):
        f(q, cu)


def test_dynamic_shapes_trace_and_check(cpu_kernels, gen):
    """With dynamic shapes the check reads the example's sizes without
    guarding on them: one graph serves other sizes, each call still right."""
    frames = []

    def backend(gm, example_inputs):
        frames.append(gm)
        return gm.forward

    torch._dynamo.reset()
    w = torch.randn(32, generator=gen)
    f = torch.compile(lambda x: scree.rms_norm(x, [32], w, 1e-6), dynamic=True, backend=backend)
    for rows in (5, 9, 17):
        x = torch.randn(rows, 32, generator=gen)
        torch.testing.assert_close(f(x), F.rms_norm(x, [32], w, 1e-6))
    assert len(frames) == 1


def test_cpu_tensors_are_refused_by_the_implementation():
    """Without a kernel registered for the CPU, an op on CPU tensors says so."""
    x = torch.randn(4, 64)
    with pytest.raises(ValueError, match="argument 'input' is on cpu"):
        _ops._rms_norm_impl(x, [64], None, None)
    q = torch.randn(4, 2, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="argument 'query' is on cpu"):
        _ops._varlen_attn_impl(q, q, q, torch.zeros(2, dtype=torch.int32),
                               torch.zeros(2, dtype=torch.int32), 4, 4, False, None, -1, -1,
                               0.0, False)


def test_direct_path_only_for_plain_eager_cuda_tensors():
    x = torch.randn(2, 2)
    assert not _ops._direct(x)  # CPU
    with FakeTensorMode():
        assert not _ops._direct(_cuda(2, 2))
    m = torch.empty(2, 2, device="meta")
    assert not _ops._direct(m)


# -- opcheck ------------------------------------------------------------------


def _opcheck_cases(gen):
    """(op, args) per custom op, on small CPU inputs."""
    def r(*s, dtype=torch.float32):
        return torch.randn(*s, generator=gen).to(dtype)
    lens = [3, 0, 5, 1]
    cu = ref.cu_of(lens, "cpu")
    t = sum(lens)
    kv = r(6, 2, 8, 2, 32, dtype=BF16)
    bt = torch.randperm(6, generator=gen).to(torch.int32)[:, None].repeat(1, 3)
    bt = torch.stack([bt[:4, 0], bt[1:5, 0], bt[2:, 0]], 1)  # [4, 3], rows of distinct pages
    sk = torch.tensor([6, 0, 17, 2], dtype=torch.int32)
    cases = [
        ("rms_norm", (r(6, 32), [32], r(32), 1e-6)),
        ("rms_norm", (r(2, 3, 16, dtype=BF16), [3, 16], None, None)),
        ("layer_norm", (r(6, 32), [32], r(32), r(32), 1e-5)),
        ("add_rms_norm", (r(6, 32), r(6, 32), r(32), 1e-6)),
        ("softmax", (r(6, 32), -1, None, 1.0)),
        ("softmax", (r(6, 32, dtype=BF16), -1, torch.float32, 0.5)),
        ("ragged_softmax", (r(t, 8), cu, 5, 1.0)),
        ("rope_", (r(t, 4, 16), r(t, 2, 16), cu, None, None, 10000.0, 0, False)),
        ("rope_", (r(t, 4, 16), None, None, torch.arange(t), None, 500.0, 8, True)),
        ("kv_append", (r(t, 2, 16), r(t, 2, 16), r(2, 8, 2, 16), r(2, 8, 2, 16),
                       torch.tensor([5, -1, 0, 11, 2, 7, -1, 3, 9]))),
        ("kv_append", (r(t, 2, 16, dtype=BF16), r(t, 2, 16, dtype=BF16),
                       r(t, 1, 2, 16, dtype=BF16), r(t, 1, 2, 16, dtype=BF16),
                       torch.randperm(t, generator=gen))),
        ("swiglu", (r(6, 64), None)),
        ("swiglu", (r(6, 32), r(6, 32))),
        ("cross_entropy", (r(6, 50), torch.tensor([1, 2, -100, 49, 0, 7]), -100)),
        ("cross_entropy", (r(6, 50), torch.tensor([1, 2, -100, 49, 0, 7]), -100, 0.1, 1e-4, 2,
                           True)),
        ("rope", (r(t, 4, 16), r(t, 2, 16), cu, None, None, 10000.0, 0, False)),
        ("rope", (r(t, 4, 16), None, None, torch.arange(t), r(t, 8), 500.0, 8, True)),
        ("linear_cross_entropy", (r(7, 16), r(50, 16), torch.tensor([1, 2, -100, 49, 0, 7, 3]),
                                  None, -100, 2, 0.0, 0.0, 3, True)),
        ("linear_cross_entropy", (r(7, 16), r(50, 16), torch.tensor([1, 2, -100, 49, 0, 7, 3]),
                                  r(50), -100, 0, 0.1, 1e-4, 0, False)),
        # fp16 and bf16: the fake implementation refuses what the device
        # would, float32 attention included.
        ("varlen_attn", (r(t, 4, 32, dtype=BF16), r(t, 2, 32, dtype=BF16),
                         r(t, 2, 32, dtype=BF16), cu, cu, 5, 5, True, None, -1, -1, 0.0, True)),
        ("varlen_attn", (r(t, 4, 32, dtype=torch.float16), r(t, 4, 32, dtype=torch.float16),
                         r(t, 4, 32, dtype=torch.float16), cu, cu, 5, 5, False, 0.3, 2, 1,
                         30.0, False)),
        # Shuffled pages; the two halves of one interleaved cache; keys of
        # [6, 0, 17, 2] at page_size 8 (the last page of each one spare).
        ("paged_attention", (r(t, 4, 32, dtype=BF16), kv[:, 0], kv[:, 1], bt, sk, cu, 5, 17,
                             True, None, -1, -1, 0.0, True)),
        ("paged_attention", (r(t, 2, 32, dtype=torch.float16), r(6, 8, 2, 32,
                                                                 dtype=torch.float16),
                             r(6, 8, 2, 32, dtype=torch.float16), bt, sk, cu, 5, 17, False, 0.5,
                             4, 2, 10.0, False)),
    ]
    return cases


def test_opcheck_every_op(cpu_kernels, gen):
    seen = set()
    for name, args in _opcheck_cases(gen):
        seen.add(name)
        torch.library.opcheck(getattr(torch.ops.scree, name).default, args)
    assert seen == set(_ops.OPS)


# -- the public functions through the CPU kernels -----------------------------


def test_functions_match_references_through_the_ops(cpu_kernels, gen):
    x = torch.randn(5, 3, 32, generator=gen)
    w = torch.randn(32, generator=gen)
    torch.testing.assert_close(scree.rms_norm(x, [32], w, 1e-6), F.rms_norm(x, [32], w, 1e-6))
    torch.testing.assert_close(scree.layer_norm(x, [32], w, w), F.layer_norm(x, [32], w, w))
    torch.testing.assert_close(scree.softmax(x, -1, scale=2.0), torch.softmax(2 * x, -1))
    g = torch.randn(5, 64, generator=gen)
    torch.testing.assert_close(scree.swiglu(g), F.silu(g[:, :32]) * g[:, 32:])
    logits = torch.randn(6, 50, generator=gen)
    tgt = torch.tensor([1, 2, -100, 49, 0, 7])
    for red in ("mean", "sum", "none"):
        torch.testing.assert_close(scree.cross_entropy(logits, tgt, reduction=red),
                                   F.cross_entropy(logits, tgt, reduction=red))
    q0 = torch.randn(8, 4, 32, generator=gen)
    k0 = torch.randn(8, 2, 32, generator=gen)
    q, k = scree.rope(q0, k0, cu_seqlens=ref.cu_of([3, 5], "cpu"))
    assert not torch.equal(q, q0) and torch.equal(q0, q0.clone())  # not in place
    qi, ki = q0.clone(), k0.clone()
    out = scree.rope(qi, ki, cu_seqlens=ref.cu_of([3, 5], "cpu"), inplace=True)
    assert out[0] is qi and torch.equal(qi, q)


def test_kv_append_through_the_op_writes_the_caches_in_place(cpu_kernels, gen):
    """scree.kv_append on CPU tensors goes through torch.ops.scree.kv_append
    (the reference kernel here): k and v of a fused [T, 3, H, d] buffer land
    in their slots of one interleaved [pages, 2, S, H, d] cache, the rest of
    the cache as it was, and nothing is returned."""
    T, H, d, S, P = 6, 2, 8, 4, 3
    qkv = torch.randn(T, 3, H, d, generator=gen)
    kv = torch.randn(P, 2, S, H, d, generator=gen)
    before = kv.clone()
    slots = torch.tensor([7, -1, 0, 11, 4, -1])
    assert scree.kv_append(qkv[:, 1], qkv[:, 2], kv[:, 0], kv[:, 1], slots) is None
    want = before.clone()
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            want[s // S, 0, s % S] = qkv[t, 1]
            want[s // S, 1, s % S] = qkv[t, 2]
    assert torch.equal(kv, want)


# -- torch.compile of a LLaMA-style layer ------------------------------------


def _layer_inputs(gen, dtype=torch.float32):
    import llama_block as lb
    cfg = lb.CONFIGS["tiny"]
    lengths = [5, 1, 9, 3]
    W = lb.make_weights(cfg, "cpu", dtype, gen)
    x, xp, cu, longest = lb.make_batch(lengths, cfg["hidden"], "cpu", dtype, gen)
    return lb, cfg, lengths, W, x, xp, cu, longest


def test_layer_matches_the_padded_pytorch_layer(cpu_kernels, gen):
    lb, cfg, lengths, W, x, xp, cu, longest = _layer_inputs(gen)
    with torch.no_grad():
        out = lb.scree_layer(x, cu, longest, W, cfg)
        want = lb.unpad(lb.torch_layer(xp, W, cfg), lengths)
    torch.testing.assert_close(out, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("inplace_rope", [False, True])
def test_compile_fullgraph_keeps_the_layer_in_one_graph(cpu_kernels, gen, inplace_rope,
                                                        aot_graphs):
    # bf16, as on the device: tracing checks each call as the device would,
    # and its attention takes fp16 and bf16.
    lb, cfg, lengths, W, x, xp, cu, longest = _layer_inputs(gen, BF16)
    backend, graphs = aot_graphs
    torch._dynamo.reset()
    f = torch.compile(lambda x, cu: lb.scree_layer(x, cu, longest, W, cfg, inplace_rope),
                      fullgraph=True, backend=backend)
    with torch.no_grad():
        got = f(x, cu)
        want = lb.scree_layer(x, cu, longest, W, cfg, inplace_rope)
    assert len(graphs) == 1
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    for op in ("rms_norm", "rope", "varlen_attn", "add_rms_norm", "swiglu"):
        assert any(f"scree.{op}" in t for t in targets), (op, targets)
    torch.testing.assert_close(got, want)


# -- HuggingFace transformers -------------------------------------------------


def _tiny_llama(attn, seed):
    transformers = pytest.importorskip("transformers")
    import scree.hf  # noqa: F401  (registers "scree")
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval(), cfg


def _hf_compare(gen, dtype, device, atol):
    m_scree, cfg = _tiny_llama("scree", 1)
    m_sdpa, _ = _tiny_llama("sdpa", 1)
    m_scree.set_attn_implementation("scree")
    m_sdpa.set_attn_implementation("sdpa")
    m_scree.to(device=device, dtype=dtype)
    m_sdpa.to(device=device, dtype=dtype)
    lengths = [7, 1, 12, 4]
    ids = torch.randint(0, cfg.vocab_size, (1, sum(lengths)), generator=gen).to(device)
    pos = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    # use_cache=False: transformers' sdpa masks find packed sequences only
    # without a cache.
    with torch.no_grad():
        a = m_scree(input_ids=ids, position_ids=pos, use_cache=False).logits
        b = m_sdpa(input_ids=ids, position_ids=pos, use_cache=False).logits
        # Each sequence alone through sdpa gives the same logits: the packed
        # batch did not attend across sequences.
        alone = torch.cat([m_sdpa(input_ids=ids[:, s:s + n]).logits[0] for s, n in
                           zip([0] + list(torch.tensor(lengths).cumsum(0)[:-1].tolist()),
                               lengths)])
    torch.testing.assert_close(a, b, atol=atol, rtol=0)
    torch.testing.assert_close(a[0], alone, atol=atol, rtol=0)
    return m_scree, cfg


def test_transformers_registration(cpu_kernels):
    pytest.importorskip("transformers")
    import scree.hf
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    assert AttentionInterface._global_mapping["scree"] is scree.hf.scree_attention_forward
    assert "scree" in AttentionMaskInterface._global_mapping


_ORDER_CHECK = """
import sys
{first}
{second}
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
fn = AttentionInterface._global_mapping.get("scree")
assert fn is not None, "not registered"
assert "scree" in AttentionMaskInterface._global_mapping
import scree
assert scree._hook not in sys.meta_path
assert fn is sys.modules["scree.hf"].scree_attention_forward
print("registered")
"""


@pytest.mark.parametrize("first,second", [
    ("import scree", "import transformers"),
    ("import transformers", "import scree"),
    ("import scree", "from transformers import AutoConfig"),
])
def test_transformers_registration_any_import_order(first, second):
    """`import scree` registers the attention implementation whichever of
    scree and transformers is imported first, without an import of
    scree.hf (a fresh interpreter each: the registration is per process);
    the import hook leaves sys.meta_path once it has run."""
    pytest.importorskip("transformers")
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, "-c", _ORDER_CHECK.format(first=first, second=second)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "registered" in r.stdout, r.stderr[-2000:]


def test_transformers_llama_padding_free_matches_sdpa(cpu_kernels, gen):
    _hf_compare(gen, torch.float32, "cpu", 1e-4)


def test_transformers_llama_padded_and_generate(cpu_kernels, gen):
    """A padded batch (2-D mask, left padding) and greedy generation with a
    KV cache give sdpa's tokens."""
    m_scree, cfg = _tiny_llama("scree", 2)
    m_sdpa, _ = _tiny_llama("sdpa", 2)
    m_scree.set_attn_implementation("scree")
    m_sdpa.set_attn_implementation("sdpa")
    ids = torch.randint(0, cfg.vocab_size, (2, 9), generator=gen)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :4] = 0  # left padding
    with torch.no_grad():
        a = m_scree(input_ids=ids, attention_mask=mask).logits
        b = m_sdpa(input_ids=ids, attention_mask=mask).logits
        torch.testing.assert_close(a[mask.bool()], b[mask.bool()], atol=1e-4, rtol=0)
        ga = m_scree.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False,
                              pad_token_id=0)
        gb = m_sdpa.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False,
                             pad_token_id=0)
    assert torch.equal(ga, gb)


# -- the implementations' argument structs, without a GPU ---------------------


def test_implementations_fill_the_structs(captured, gen):
    b = torch.bfloat16
    x = torch.randn(6, 4, 64, generator=gen).to(b)
    w = torch.randn(64, generator=gen).to(b)
    _ops._rms_norm_impl(x, [64], w, None)
    name, a = captured[-1]
    assert name == "scree_rmsnorm" and a["x"] == x.data_ptr() and a["w"] == w.data_ptr()
    assert (a["rows"], a["cols"], a["x_stride"], a["x_dtype"], a["w_dtype"]) == (24, 64, 64, 2, 2)
    assert a["eps"] == pytest.approx(torch.finfo(torch.float32).eps)
    v = torch.randn(10, 128, generator=gen)[::2, :64]  # strided rows
    _ops._rms_norm_impl(v, [64], None, 1e-6)
    a = captured[-1][1]
    assert (a["x"], a["rows"], a["x_stride"], a["x_dtype"]) == (v.data_ptr(), 5, 256, 0)
    e = torch.randn(1, 64).expand(4, 64)  # broadcast rows: copied, never read with stride 0
    _ops._rms_norm_impl(e, [64], None, 1e-6)
    assert captured[-1][1]["x_stride"] == 64 and captured[-1][1]["x"] != e.data_ptr()

    _ops._layer_norm_impl(x, [64], w, w, 1e-5)
    a = captured[-1][1]
    assert a["b"] == w.data_ptr() and a["mean"] == 0 and a["rows"] == 24
    y, h = _ops._add_rms_norm_impl(x, x + 1, w, 1e-6)
    a = captured[-1][1]
    assert (a["h"], a["y"], a["cols"]) == (h.data_ptr(), y.data_ptr(), 64)
    _ops._softmax_impl(x, -1, torch.float32, 0.5)
    a = captured[-1][1]
    assert (a["x_dtype"], a["y_dtype"], a["scale"], a["rows"]) == (2, 0, 0.5, 24)
    cu = torch.tensor([0, 2, 6], dtype=torch.int64)
    _ops._ragged_softmax_impl(x, cu, 4, 1.0)
    a = captured[-1][1]
    assert (a["batch"], a["total"], a["cols"], a["max_seqlen"]) == (2, 6, 256, 4)

    qkv = torch.randn(6, 12, 64, generator=gen).to(b)
    q, k = qkv[:, :8], qkv[:, 8:10]
    _ops._rope_impl(q, k, cu, None, None, 500000.0, 0, True)
    a = captured[-1][1]
    assert (a["q"], a["k"], a["q_token_stride"], a["q_head_stride"]) == \
        (q.data_ptr(), k.data_ptr(), 12 * 64, 64)
    assert (a["heads_q"], a["heads_kv"], a["head_dim"], a["batch"], a["layout"]) == \
        (8, 2, 64, 2, 1)
    _ops._rope_impl(q, None, None, torch.arange(6), None, 1e4, 32, False)
    a = captured[-1][1]
    assert (a["k"], a["positions_int64"], a["cu_seqlens"], a["rotary_dim"]) == (0, 1, 0, 32)

    gu = torch.randn(5, 128, generator=gen)
    out = _ops._swiglu_impl(gu, None)
    a = captured[-1][1]
    assert out.shape == (5, 64) and (a["up"], a["cols"], a["gate_stride"]) == (0, 64, 128)
    _ops._swiglu_impl(gu[:, :64], gu[:, 64:])
    a = captured[-1][1]
    assert a["up"] == gu[:, 64:].data_ptr() and a["up_stride"] == 128

    logits = torch.randn(6, 50, generator=gen)
    _ops._cross_entropy_impl(logits, torch.arange(6, dtype=torch.int32), -100)
    a = captured[-1][1]
    assert (a["rows"], a["vocab"], a["ignore_index"]) == (6, 50, -100)

    q3 = torch.randn(6, 3, 8, 64, generator=gen).to(b)
    q, k, v = q3[:, 0], q3[:, 1, :2], q3[:, 2, :2]
    out, lse = _ops._varlen_attn_impl(q, k, v, cu, cu, 4, 4, False, None, -1, 0, 0.0, True)
    a = captured[-1][1]
    assert (a["q_token_stride"], a["q_head_stride"], a["k_token_stride"]) == (3 * 8 * 64, 64,
                                                                               3 * 8 * 64)
    assert (a["heads_q"], a["heads_kv"], a["batch"], a["causal"], a["window_right"]) == \
        (8, 2, 2, 1, -1)
    assert a["lse"] == lse.data_ptr() and lse.shape == (8, 6) and a["scale"] == 0.0
    assert a["softcap"] == 0.0
    _ops._varlen_attn_impl(q, k, v, cu, cu, 4, 4, False, 0.25, 16, 4, 30.0, False)
    a = captured[-1][1]
    assert (a["lse"], a["causal"], a["window_left"], a["window_right"], a["scale"]) == \
        (0, 0, 16, 4, 0.25)
    assert a["softcap"] == 30.0


def test_softcap_reaches_the_attention_struct(captured, gen, monkeypatch):
    """softcap over contiguous K/V, from varlen_attn, flash_attn_varlen_func
    and the transformers attention function, is scree_attention_args'
    softcap (0.0 when not given)."""
    import types
    import scree.hf
    monkeypatch.setattr(_ops, "_direct", lambda *t: True)  # the eager CUDA path
    q = torch.randn(6, 4, 64, generator=gen).to(BF16)
    kv = torch.randn(6, 2, 64, generator=gen).to(BF16)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    scree.varlen_attn(q, kv, kv, cu, cu, 4, 4, causal=True, softcap=30.0)
    name, a = captured[-1]
    assert name == "scree_attention" and (a["softcap"], a["causal"]) == (30.0, 1)
    scree.varlen_attn(q, kv, kv, cu, cu, 4, 4, softcap=2)
    assert captured[-1][1]["softcap"] == 2.0
    scree.varlen_attn(q, kv, kv, cu, cu, 4, 4)
    assert captured[-1][1]["softcap"] == 0.0
    scree.flash_attn_varlen_func(q, kv, kv, cu, cu, 4, 4, softcap=20.0, window_size=(8, 0))
    a = captured[-1][1]
    assert (a["softcap"], a["window_left"], a["causal"]) == (20.0, 8, 1)
    scree.flash_attn_varlen_func(q, kv, kv, cu, cu, 4, 4)
    assert captured[-1][1]["softcap"] == 0.0
    # Gemma 2's attention: softcap=attn_logit_softcapping, sliding_window.
    module = types.SimpleNamespace(is_causal=True, training=False)
    q4 = torch.randn(1, 4, 6, 64, generator=gen).to(BF16)
    kv4 = torch.randn(1, 2, 6, 64, generator=gen).to(BF16)
    out, _ = scree.hf.scree_attention_forward(module, q4, kv4, kv4, None, scaling=0.0625,
                                              sliding_window=4, softcap=50.0)
    name, a = captured[-1]
    assert name == "scree_attention" and out.shape == (1, 6, 4, 64)
    assert (a["softcap"], a["scale"], a["window_left"], a["causal"]) == (50.0, 0.0625, 3, 1)
    scree.hf.scree_attention_forward(module, q4, kv4, kv4, None, softcap=None)
    assert captured[-1][1]["softcap"] == 0.0


def test_varlen_attn_softcap_through_the_op(cpu_kernels, gen):
    """softcap reaches torch.ops.scree.varlen_attn: the CPU kernel (the
    float64 reference) gives the softcapped attention, which differs from
    the plain one."""
    lens_q, lens_k = [5, 1, 9], [7, 4, 9]
    cq, ck = ref.cu_of(lens_q, "cpu"), ref.cu_of(lens_k, "cpu")
    q = torch.randn(sum(lens_q), 4, 32, generator=gen).to(BF16)
    k = torch.randn(sum(lens_k), 2, 32, generator=gen).to(BF16)
    v = torch.randn(sum(lens_k), 2, 32, generator=gen).to(BF16)
    aux = _ops._LseRequest()
    got, lse = scree.varlen_attn(q, k, v, cq, ck, 9, 9, causal=True, scale=1.0, softcap=2.0,
                                 return_aux=aux)
    want, want_lse = ref.varlen_attn(q, k, v, cq, ck, 9, 9, True, 1.0, -1, -1, True,
                                     softcap=2.0)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(lse, want_lse)
    plain = scree.varlen_attn(q, k, v, cq, ck, 9, 9, causal=True, scale=1.0)
    assert not torch.allclose(got, plain, atol=0.05)
    got = scree.flash_attn_varlen_func(q, k, v, cq, ck, 9, 9, softmax_scale=1.0, causal=True,
                                       softcap=2.0)
    torch.testing.assert_close(got, want)


def test_call_fills_the_struct_from_the_schema(captured, gen):
    """scree.call derives what it is not given from the tensors, by the op's
    schema, into the struct the op's own function fills."""
    b = torch.bfloat16
    x = torch.randn(6, 4, 64, generator=gen).to(b)
    w = torch.randn(64, generator=gen).to(b)
    y = _ops._rms_norm_impl(x, [64], w, 1e-6)
    want = captured[-1][1]
    scree.call("rmsnorm", x=x, w=w, y=y, eps=1e-6)
    name, got = captured[-1]
    assert name == "scree_rmsnorm" and got == dict(want, x_stride=64, y_stride=64)

    q3 = torch.randn(6, 3, 8, 64, generator=gen).to(b)
    q, k, v = q3[:, 0], q3[:, 1, :2], q3[:, 2, :2]
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    out, _ = _ops._varlen_attn_impl(q, k, v, cu, cu, 4, 4, False, None, -1, -1, 0.0, False)
    want = captured[-1][1]
    scree.call("attention", q=q, k=k, v=v, out=out, cu_seqlens_q=cu, cu_seqlens_k=cu,
               max_seqlen_q=4, max_seqlen_k=4, window_left=-1, window_right=-1)
    got = captured[-1][1]
    assert got == dict(want, cu_seqlens_q=cu.data_ptr(), cu_seqlens_k=cu.data_ptr(),
                       out_token_stride=8 * 64, out_head_stride=64)

    pos = torch.arange(6)
    scree.call("rope", q=q, positions=pos)
    got = captured[-1][1]
    assert (got["positions_int64"], got["total"], got["heads_q"], got["head_dim"]) == \
        (1, 6, 8, 64)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(x=torch.zeros(4, 64), w=torch.zeros(64), y=torch.zeros(4, 64), rows=5), ValueError,
     "'x' has shape \\(4, 64\\), smaller than rows=5"),
    (dict(x=torch.zeros(4, 64), w=torch.zeros(64, dtype=torch.float64)), TypeError, "'w'"),
    (dict(x=torch.zeros(1, 64).expand(4, 64)), ValueError, "broadcast"),
    (dict(x=torch.zeros(64, 4).t()), ValueError, "contiguous last dimension"),
    (dict(x=torch.zeros(4, 64), scale=1.0), TypeError, "no field scale"),
    (dict(rows=4), ValueError, "no tensor"),
])
def test_call_refuses_what_the_schema_cannot_pass(captured, kw, exc, match):
    with pytest.raises(exc, match=match):
        scree.call("rmsnorm", **kw)
    with pytest.raises(ValueError, match="unknown op 'rms'"):
        scree.call("rms")
