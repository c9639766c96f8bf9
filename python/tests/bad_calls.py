"""Calls that scree must refuse, shared by the CPU tests (fake and meta
tensors: the fake implementations) and the GPU tests (the real ones), so
that both paths are held to one list.

Each case takes `mk(*shape, dtype=bfloat16)`, which makes a tensor of the
path under test (a fake CUDA tensor, a meta tensor or a CUDA tensor).

REFUSED: values the library refuses (ranges, finiteness, dtypes and head
sizes an op does not take, its own rules): (id, the public call, the same
call through torch.ops.scree, which skips the Python argument helpers and
so shows the op's own implementation refusing it, the Python argument the
error names, text in the message). Each raises ScreeArgumentError.

UNCLEAR: arguments of the wrong kind or out of what Python can pass on,
which once raised errors that did not name them: (id, call, exception,
argument named, text in the message)."""
import torch

BF16 = torch.bfloat16
NAN, INF = float("nan"), float("inf")
ops = torch.ops.scree


def _i32(mk, n):
    return mk(n, dtype=torch.int32)


def _attn(mk, hq=8, hkv=2, d=64, dtype=BF16, **kw):
    """varlen_attn on 4 query and key tokens, one sequence."""
    import scree
    return scree.varlen_attn(mk(4, hq, d, dtype=dtype), mk(4, hkv, d, dtype=dtype),
                             mk(4, hkv, d, dtype=dtype), _i32(mk, 2), _i32(mk, 2),
                             kw.pop("max_q", 4), 4, **kw)


def _attn_op(mk, hq=8, hkv=2, d=64, dtype=BF16, scale=None, window=(-1, -1), softcap=0.0):
    return ops.varlen_attn(mk(4, hq, d, dtype=dtype), mk(4, hkv, d, dtype=dtype),
                           mk(4, hkv, d, dtype=dtype), _i32(mk, 2), _i32(mk, 2), 4, 4, False,
                           scale, window[0], window[1], softcap, False)


def _kv(mk, page_size=16, d=64):
    """kv_append's arguments: 4 tokens of 2 kv heads into 2 pages."""
    return (mk(4, 2, d), mk(4, 2, d), mk(2, page_size, 2, d), mk(2, page_size, 2, d),
            mk(4, dtype=torch.int64))


def _paged(mk, page_size=16, d=64, hq=8, hkv=2, dtype=BF16, max_k=40):
    """paged_attention's positional arguments: 2 sequences of 3 query tokens
    over pages of 3 slots of a 6-page cache."""
    return (mk(6, hq, d, dtype=dtype), mk(6, page_size, hkv, d, dtype=dtype),
            mk(6, page_size, hkv, d, dtype=dtype), _i32(mk, 2 * 3).view(2, 3), _i32(mk, 2),
            _i32(mk, 3), 3, max_k)


def _paged_op(mk, scale=None, window=(-1, -1), softcap=0.0, **kw):
    return ops.paged_attention(*_paged(mk, **kw), True, scale, window[0], window[1], softcap,
                               False)


def _scree():
    import scree
    return scree


REFUSED = [
    ("attn-fp32", lambda mk: _attn(mk, dtype=torch.float32),
     lambda mk: _attn_op(mk, dtype=torch.float32), "query", "fp16 or bf16"),
    ("attn-head_dim-7", lambda mk: _attn(mk, d=7), lambda mk: _attn_op(mk, d=7), "query",
     "head_dim=7"),
    ("attn-heads-6:4", lambda mk: _attn(mk, hq=6, hkv=4), lambda mk: _attn_op(mk, hq=6, hkv=4),
     "query", "heads_q=6 is not a multiple of heads_kv=4"),
    ("attn-window-left--5", lambda mk: _attn(mk, window_size=(-5, -1)),
     lambda mk: _attn_op(mk, window=(-5, -1)), "window_size", "window_left"),
    ("attn-window-right--5", lambda mk: _attn(mk, window_size=(-1, -5)),
     lambda mk: _attn_op(mk, window=(-1, -5)), "window_size", "window_right"),
    ("attn-scale-nan", lambda mk: _attn(mk, scale=NAN), lambda mk: _attn_op(mk, scale=NAN),
     "scale", "scale"),
    ("attn-scale-inf", lambda mk: _attn(mk, scale=INF), lambda mk: _attn_op(mk, scale=INF),
     "scale", "scale"),
    ("attn-softcap--1", lambda mk: _attn(mk, softcap=-1.0), lambda mk: _attn_op(mk, softcap=-1.0),
     "softcap", "softcap"),
    ("attn-softcap-nan", lambda mk: _attn(mk, softcap=NAN), lambda mk: _attn_op(mk, softcap=NAN),
     "softcap", "softcap"),
    ("attn-softcap-inf", lambda mk: _attn(mk, softcap=INF), lambda mk: _attn_op(mk, softcap=INF),
     "softcap", "softcap"),
    ("attn-max_q--1", lambda mk: _attn(mk, max_q=-1),
     lambda mk: ops.varlen_attn(mk(4, 8, 64, dtype=BF16), mk(4, 2, 64, dtype=BF16),
                                mk(4, 2, 64, dtype=BF16), _i32(mk, 2), _i32(mk, 2), -1, 4, False,
                                None, -1, -1, 0.0, False), "max_q", "max_seqlen_q"),
    ("paged-page_size-12", lambda mk: _scree().paged_attention(*_paged(mk, page_size=12)),
     lambda mk: _paged_op(mk, page_size=12), "k_cache", "page_size=12"),
    ("paged-head_dim-80", lambda mk: _scree().paged_attention(*_paged(mk, d=80)),
     lambda mk: _paged_op(mk, d=80), "q", "head_dim=80"),
    ("paged-fp32", lambda mk: _scree().paged_attention(*_paged(mk, dtype=torch.float32)),
     lambda mk: _paged_op(mk, dtype=torch.float32), "q", "fp16 or bf16"),
    ("paged-heads-6:4", lambda mk: _scree().paged_attention(*_paged(mk, hq=6, hkv=4)),
     lambda mk: _paged_op(mk, hq=6, hkv=4), "q", "heads_q=6 is not a multiple of heads_kv=4"),
    ("paged-block_table-short", lambda mk: _scree().paged_attention(*_paged(mk, max_k=49)),
     lambda mk: _paged_op(mk, max_k=49), "block_table", "block_table_stride=3"),
    ("paged-softcap--1", lambda mk: _scree().paged_attention(*_paged(mk), softcap=-1.0),
     lambda mk: _paged_op(mk, softcap=-1.0), "softcap", "softcap"),
    ("paged-window-left--2", lambda mk: _scree().paged_attention(*_paged(mk),
                                                                   window_size=(-2, -1)),
     lambda mk: _paged_op(mk, window=(-2, -1)), "window_size", "window_left"),
    ("paged-scale-nan", lambda mk: _scree().paged_attention(*_paged(mk), scale=NAN),
     lambda mk: _paged_op(mk, scale=NAN), "scale", "scale"),
    ("rms_norm-cols-65537", lambda mk: _scree().rms_norm(mk(4, 65537), [65537]),
     lambda mk: ops.rms_norm(mk(4, 65537), [65537], None, None), "normalized_shape",
     "cols=65537"),
    ("rms_norm-eps-nan", lambda mk: _scree().rms_norm(mk(4, 64), [64], mk(64), NAN),
     lambda mk: ops.rms_norm(mk(4, 64), [64], mk(64), NAN), "eps", "eps"),
    ("rms_norm-eps--1", lambda mk: _scree().rms_norm(mk(4, 64), [64], mk(64), -1.0),
     lambda mk: ops.rms_norm(mk(4, 64), [64], mk(64), -1.0), "eps", "eps"),
    ("layer_norm-cols-65537", lambda mk: _scree().layer_norm(mk(4, 65537), [65537]),
     lambda mk: ops.layer_norm(mk(4, 65537), [65537], None, None, 1e-5), "normalized_shape",
     "cols=65537"),
    ("add_rms_norm-eps-nan", lambda mk: _scree().add_rms_norm(mk(4, 64), mk(4, 64), mk(64), NAN),
     lambda mk: ops.add_rms_norm(mk(4, 64), mk(4, 64), mk(64), NAN), "eps", "eps"),
    ("softmax-scale-inf", lambda mk: _scree().softmax(mk(4, 64), scale=INF),
     lambda mk: ops.softmax(mk(4, 64), -1, None, INF), "scale", "scale"),
    ("ragged_softmax-max_seqlen-2^31",
     lambda mk: _scree().ragged_softmax(mk(8, 4), _i32(mk, 3), 1 << 31),
     lambda mk: ops.ragged_softmax(mk(8, 4), _i32(mk, 3), 1 << 31, 1.0), "max_seqlen",
     "max_seqlen"),
    ("kv_append-page_size-3",
     lambda mk: _scree().kv_append(*_kv(mk, page_size=3)),
     lambda mk: ops.kv_append(*_kv(mk, page_size=3)), "k_cache", "page_size=3"),
    ("kv_append-head_dim-2048",
     lambda mk: _scree().kv_append(*_kv(mk, d=2048)),
     lambda mk: ops.kv_append(*_kv(mk, d=2048)), "k", "head_dim=2048"),
    ("rope-rotary_dim-3",
     lambda mk: _scree().rope(mk(4, 2, 64), cu_seqlens=_i32(mk, 2), rotary_dim=3),
     lambda mk: ops.rope_(mk(4, 2, 64), None, _i32(mk, 2), None, None, 1e4, 3, False),
     "rotary_dim", "rotary_dim"),
    ("cross_entropy-vocab-2^24+1",
     lambda mk: _scree().cross_entropy(mk(4, (1 << 24) + 1), mk(4, dtype=torch.int64)),
     lambda mk: ops.cross_entropy(mk(4, (1 << 24) + 1), mk(4, dtype=torch.int64), -100), "input",
     "vocab=16777217"),
    ("cross_entropy-label_smoothing-1.5",
     lambda mk: _scree().cross_entropy(mk(4, 10), mk(4, dtype=torch.int64), label_smoothing=1.5),
     lambda mk: ops.cross_entropy(mk(4, 10), mk(4, dtype=torch.int64), -100, 1.5),
     "label_smoothing", "label_smoothing"),
    ("cross_entropy-z_loss-nan",
     lambda mk: _scree().cross_entropy(mk(4, 10), mk(4, dtype=torch.int64), z_loss=NAN),
     lambda mk: ops.cross_entropy(mk(4, 10), mk(4, dtype=torch.int64), -100, 0.0, NAN),
     "z_loss", "z_loss"),
    ("linear_cross_entropy-vocab-2^24+1",
     lambda mk: _scree().linear_cross_entropy(mk(4, 16), mk((1 << 24) + 1, 16),
                                              mk(4, dtype=torch.int64)),
     lambda mk: ops.linear_cross_entropy(mk(4, 16), mk((1 << 24) + 1, 16),
                                         mk(4, dtype=torch.int64), None, -100, 2, 0.0, 0.0, 0,
                                         False), "weight", "vocab=16777217"),
    ("linear_cross_entropy-label_smoothing-1.5",
     lambda mk: _scree().linear_cross_entropy(mk(4, 16), mk(10, 16), mk(4, dtype=torch.int64),
                                              label_smoothing=1.5),
     lambda mk: ops.linear_cross_entropy(mk(4, 16), mk(10, 16), mk(4, dtype=torch.int64), None,
                                         -100, 2, 1.5, 0.0, 0, False), "label_smoothing",
     "label_smoothing"),
    ("rope_backward-rotary_dim-3",
     lambda mk: ops.rope_backward(mk(4, 2, 64), None, _i32(mk, 2), None, None, 1e4, 3, False),
     lambda mk: ops.rope(mk(4, 2, 64), None, _i32(mk, 2), None, None, 1e4, 3, False),
     "rotary_dim", "rotary_dim"),
]


def _x(mk):
    return mk(4, 128)


UNCLEAR = [
    ("rms_norm-shape-int", lambda mk: _scree().rms_norm(_x(mk), 128, mk(128)), TypeError,
     "normalized_shape", "list or tuple of ints"),
    ("rms_norm-input-None", lambda mk: _scree().rms_norm(None, [128]), TypeError, "input",
     "must be a tensor, not NoneType"),
    ("rms_norm-eps-str", lambda mk: _scree().rms_norm(_x(mk), [128], mk(128), "1e-6"), TypeError,
     "eps", "must be a float, not str"),
    ("attn-max_q-str", lambda mk: _attn(mk, max_q="abc"), TypeError, "max_q",
     "must be an int, not str"),
    ("attn-max_q-2^70", lambda mk: _attn(mk, max_q=2 ** 70), ValueError, "max_q",
     "out of range"),
    ("attn-causal-str", lambda mk: _attn(mk, causal="yes"), TypeError, "causal",
     "must be a bool"),
    ("attn-window-int", lambda mk: _attn(mk, window_size=3), TypeError, "window_size",
     "a pair"),
    ("flash-max_seqlen_q-str",
     lambda mk: _scree().flash_attn_varlen_func(mk(4, 8, 64), mk(4, 2, 64), mk(4, 2, 64),
                                                _i32(mk, 2), _i32(mk, 2), "4", 4),
     TypeError, "max_seqlen_q", "must be an int"),
    ("paged-max_seqlen_k-str",
     lambda mk: _scree().paged_attention(*_paged(mk)[:7], "40"), TypeError, "max_seqlen_k",
     "must be an int"),
    ("paged-softcap-str", lambda mk: _scree().paged_attention(*_paged(mk), softcap="30"),
     TypeError, "softcap", "must be a float"),
    ("attn-softcap-str", lambda mk: _attn(mk, softcap="30"), TypeError, "softcap",
     "must be a float"),
    ("paged-return_lse-str", lambda mk: _scree().paged_attention(*_paged(mk), return_lse="yes"),
     TypeError, "return_lse", "must be a bool"),
    ("paged-block_table-None", lambda mk: _scree().paged_attention(*_paged(mk)[:3], None,
                                                                     *_paged(mk)[4:]),
     TypeError, "block_table", "must be a tensor"),
    ("attn-paged-max_k-2^40",
     lambda mk: _scree().varlen_attn(*_paged(mk)[:3], _i32(mk, 3), _i32(mk, 3), 3, 2 ** 40,
                                     block_table=_paged(mk)[3]), ValueError, "max_k",
     "out of range"),
    ("layer_norm-eps-1e300", lambda mk: _scree().layer_norm(_x(mk), [128], eps=1e300),
     ValueError, "eps", "float32"),
    ("layer_norm-bias-list", lambda mk: _scree().layer_norm(_x(mk), [128], None, [0.0] * 128),
     TypeError, "bias", "must be a tensor or None, not list"),
    ("add_rms_norm-residual-None", lambda mk: _scree().add_rms_norm(_x(mk), None, mk(128)),
     TypeError, "residual", "must be a tensor"),
    ("softmax-dim-str", lambda mk: _scree().softmax(_x(mk), "last"), TypeError, "dim",
     "must be an int"),
    ("softmax-dtype-str", lambda mk: _scree().softmax(_x(mk), dtype="float32"), TypeError,
     "dtype", "torch.dtype"),
    ("ragged_softmax-max_seqlen-float",
     lambda mk: _scree().ragged_softmax(mk(8, 4), _i32(mk, 3), 4.5), TypeError, "max_seqlen",
     "must be an int, not float"),
    ("rope-rotary_dim-float",
     lambda mk: _scree().rope(mk(4, 2, 64), cu_seqlens=_i32(mk, 2), rotary_dim=32.0), TypeError,
     "rotary_dim", "must be an int"),
    ("rope-theta-str", lambda mk: _scree().rope(mk(4, 2, 64), cu_seqlens=_i32(mk, 2), theta="1e4"),
     TypeError, "theta", "must be a float"),
    ("swiglu-gate-None", lambda mk: _scree().swiglu(None), TypeError, "gate", "must be a tensor"),
    ("cross_entropy-ignore_index-2^64",
     lambda mk: _scree().cross_entropy(mk(4, 10), mk(4, dtype=torch.int64), ignore_index=2 ** 64),
     ValueError, "ignore_index", "out of range"),
    ("call-eps-str", lambda mk: _scree().call("rmsnorm", x=_x(mk), w=mk(128), y=_x(mk), eps="x"),
     TypeError, "eps", "must be a float"),
    ("call-rows-2^64", lambda mk: _scree().call("rmsnorm", x=_x(mk), w=mk(128), y=_x(mk),
                                                rows=2 ** 64), ValueError, "rows", "out of range"),
]
