"""Autograd through scree.rope, scree.cross_entropy and
scree.linear_cross_entropy against PyTorch's own autograd of the same
functions: on CPU through the reference kernels of reference.py (the
wiring: saved tensors, scales, chunks, shapes, the fake implementations
under torch.compile), on a GPU through scree's kernels (rope_backward, the
cross-entropy kernel writing dlogits, in place over the logits for the
fused linear cross-entropy)."""
import pytest
import torch
import torch.nn.functional as F

import reference as ref
import scree
from scree import _ops

BF16 = torch.bfloat16


# -- RoPE ----------------------------------------------------------------------


def _rope_want(q, k, pos, theta, rd, interleaved, cos_sin):
    """RoPE in float64 with plain torch ops (autograd's reference): HF's
    rotate-half formula, or GPT-J's interleaved pairs."""
    assert rd <= q.shape[-1]
    return ref.rope(q, k, positions=pos, theta=theta, rotary_dim=rd, interleaved=interleaved,
                    cos_sin=cos_sin, keep_double=True)


def _rope_case(gen, device, dtype, lens, hq, hk, d, rd, interleaved, use_cos_sin, use_positions):
    total = sum(lens)
    q = torch.randn(total, hq, d, generator=gen).to(device, dtype)
    k = torch.randn(total, hk, d, generator=gen).to(device, dtype) if hk else None
    cu = ref.cu_of(lens, device)
    pos = ref.positions_from_cu(cu, total, device)
    if use_positions:
        pos = torch.randint(0, 300, (total,), generator=gen).to(device)
    cos_sin = None
    if use_cos_sin:
        ang = torch.rand(300, rd // 2, generator=gen, dtype=torch.float64) * 6.28
        cos_sin = torch.cat((ang.cos(), ang.sin()), -1).float().to(device)
    kw = dict(theta=5000.0, rotary_dim=rd if rd != d else None, interleaved=interleaved,
              cos_sin=cos_sin)
    if use_positions:
        kw["positions"] = pos
    else:
        kw["cu_seqlens"] = cu
    return q, k, pos, cos_sin, kw


def _rope_compare(gen, device, dtype, tol, lens=(3, 1, 6), hq=4, hk=2, d=32, rd=32,
                  interleaved=False, use_cos_sin=False, use_positions=False, inplace=False):
    q, k, pos, cos_sin, kw = _rope_case(gen, device, dtype, lens, hq, hk, d, rd, interleaved,
                                        use_cos_sin, use_positions)
    gq = torch.randn(q.shape, generator=gen).to(device, dtype)
    gk = torch.randn(k.shape, generator=gen).to(device, dtype) if k is not None else None
    leaves = [q.requires_grad_()] + ([k.requires_grad_()] if k is not None else [])
    if inplace:  # in place on non-leaf tensors (e.g. projections' views)
        qi, ki = q * 1, (k * 1 if k is not None else None)
        rq, rk = scree.rope(qi, ki, inplace=True, **kw)
        assert rq is qi and rk is ki
    else:
        rq, rk = scree.rope(q, k, **kw)
    assert rq.dtype == dtype and rq.shape == q.shape and rq.requires_grad
    assert (rk is None) == (k is None)
    loss = (rq * gq).sum() + ((rk * gk).sum() if k is not None else 0)
    got = torch.autograd.grad(loss, leaves)
    wq, wk = _rope_want(q, k, pos, 5000.0, rd, interleaved, cos_sin)
    torch.testing.assert_close(rq.detach().double(), wq.detach(), rtol=tol, atol=tol)
    wloss = (wq * gq.double()).sum() + ((wk * gk.double()).sum() if k is not None else 0)
    want = torch.autograd.grad(wloss, leaves)
    for name, a, e in zip(("dq", "dk"), got, want):
        assert a.dtype == dtype and a.shape == e.shape, name
        torch.testing.assert_close(a.double(), e.double(), rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("kw", [{}, {"hk": 0}, {"interleaved": True}, {"rd": 16},
                                {"use_cos_sin": True, "rd": 16, "use_positions": True},
                                {"inplace": True}, {"inplace": True, "hk": 0}])
def test_rope_grads_cpu(cpu_kernels, gen, kw):
    _rope_compare(gen, "cpu", torch.float32, 1e-5, **kw)


def test_rope_inplace_on_a_leaf_requiring_grad_is_refused_cpu(cpu_kernels, gen):
    q = torch.randn(4, 2, 16, generator=gen, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        scree.rope(q, cu_seqlens=ref.cu_of([4], "cpu"), inplace=True)


def test_rope_backward_op_is_the_inverse_rotation_cpu(cpu_kernels, gen):
    """rope_backward(rope(x)) == x: the rotation's transpose is its inverse."""
    q, k, _, _, kw = _rope_case(gen, "cpu", torch.float32, (5, 2), 4, 2, 32, 32, False, False,
                                False)
    rq, rk = torch.ops.scree.rope(q, k, kw["cu_seqlens"], None, None, 5000.0, 0, False)
    bq, bk = torch.ops.scree.rope_backward(rq, rk, kw["cu_seqlens"], None, None, 5000.0, 0,
                                           False)
    torch.testing.assert_close(bq, q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bk, k, rtol=1e-5, atol=1e-5)
    bq, bk = torch.ops.scree.rope_backward(rq, None, kw["cu_seqlens"], None, None, 5000.0, 0,
                                           False)
    assert bk.numel() == 0


def test_rope_backward_opcheck_cpu(cpu_kernels, gen):
    cu = ref.cu_of([3, 5], "cpu")
    g = torch.randn(8, 4, 16, generator=gen)
    gk = torch.randn(8, 2, 16, generator=gen)
    torch.library.opcheck(torch.ops.scree.rope_backward.default,
                          (g, gk, cu, None, None, 1e4, 0, False),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.scree.rope_backward.default,
                          (g, None, None, torch.arange(8), None, 1e4, 8, True),
                          test_utils=("test_schema", "test_faketensor"))


def test_rope_calls_the_c_backward_with_the_forward_fields_cpu(captured, gen):
    """The backward op packs scree_rope_backward with the forward's fields,
    reading the gradients where they lie and writing new contiguous tensors
    out of place (q_out): no copy of the gradients first."""
    g = torch.randn(6, 2, 4, 16, generator=gen)[:, 0]  # strided: read as it is
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    dq, dk = _ops._rope_fn_impl(g, None, cu, None, None, 500.0, 8, True, c_op="rope_backward")
    assert len(captured) == 1  # one call: nothing copied on the way
    entry, a = captured[-1]
    assert entry == "scree_rope_backward"
    assert a["q"] == g.data_ptr() and a["q_token_stride"] == 128 and a["q_head_stride"] == 16
    assert a["q_out"] == dq.data_ptr() and dq.is_contiguous() and dk.numel() == 0
    assert a["q_out_token_stride"] == 64 and a["q_out_head_stride"] == 16
    assert (a["k"], a["k_out"], a["batch"], a["rotary_dim"], a["layout"], a["theta"]) == \
        (0, 0, 2, 8, 1, 500.0)


def test_rope_functional_op_writes_out_of_place_cpu(captured, gen):
    """torch.ops.scree.rope reads q and k where they lie (views of a packed
    qkv buffer) and writes new tensors through q_out and k_out: one C call,
    no clones."""
    qkv = torch.randn(5, 4 + 2 + 2, 16, generator=gen)
    q, k = qkv[:, :4], qkv[:, 4:6]
    cu = torch.tensor([0, 5], dtype=torch.int32)
    rq, rk = _ops._rope_fn_impl(q, k, cu, None, None, 1e4, 0, False)
    assert len(captured) == 1
    entry, a = captured[-1]
    assert entry == "scree_rope"
    assert (a["q"], a["k"]) == (q.data_ptr(), k.data_ptr())
    assert (a["q_token_stride"], a["k_token_stride"]) == (128, 128)
    assert (a["q_out"], a["k_out"]) == (rq.data_ptr(), rk.data_ptr())
    assert rq.shape == q.shape and rk.shape == k.shape
    assert (a["q_out_token_stride"], a["q_out_head_stride"]) == (64, 16)
    assert (a["k_out_token_stride"], a["k_out_head_stride"]) == (32, 16)


def _compiled_grads_match_eager(aot_graphs, step, leaves, op):
    """step(*leaves) (a scalar loss) compiled with fullgraph=True and run
    eagerly: one graph holding torch.ops.scree.<op>, and the same gradient
    of every leaf."""
    backend, graphs = aot_graphs
    torch._dynamo.reset()
    torch.compile(step, fullgraph=True, backend=backend)(*leaves).backward()
    got = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    step(*leaves).backward()
    for a, t in zip(got, leaves):
        torch.testing.assert_close(a, t.grad)
    assert len(graphs) == 1
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert any(f"scree.{op}" in x for x in targets), targets


def test_rope_compiled_grads_cpu(cpu_kernels, gen, aot_graphs):
    q = torch.randn(8, 4, 16, generator=gen, requires_grad=True)
    k = torch.randn(8, 2, 16, generator=gen, requires_grad=True)
    cu = ref.cu_of([3, 5], "cpu")

    def step(q, k):
        rq, rk = scree.rope(q, k, cu_seqlens=cu)
        return rq.pow(2).mul(torch.arange(16.0)).sum() + rk.sum()

    _compiled_grads_match_eager(aot_graphs, step, (q, k), "rope")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (BF16, 2e-2)])
@pytest.mark.parametrize("kw", [{}, {"hk": 0}, {"interleaved": True}, {"rd": 64, "d": 128},
                                {"use_cos_sin": True, "rd": 64, "use_positions": True},
                                {"inplace": True}])
def test_rope_grads_gpu(gen, dtype, tol, kw):
    kw = dict({"lens": (130, 1, 77), "hq": 8, "hk": 2, "d": 128, "rd": 128}, **kw)
    _rope_compare(gen, "cuda", dtype, tol, **kw)


# -- cross-entropy -------------------------------------------------------------


def _ce_compare(gen, device, dtype, tol, rows=7, vocab=50, reduction="mean", smoothing=0.0,
                ignored=(2,), all_ignored=False):
    x = torch.randn(rows, vocab, generator=gen).to(device, dtype).requires_grad_()
    t = torch.randint(0, vocab, (rows,), generator=gen)
    for i in ignored:
        t[i % rows] = -100
    if all_ignored:
        t[:] = -100
    t = t.to(device)
    got = scree.cross_entropy(x, t, reduction=reduction, label_smoothing=smoothing)
    want = F.cross_entropy(x.double(), t, reduction=reduction, label_smoothing=smoothing)
    assert got.dtype == dtype and got.shape == want.shape
    g = torch.randn(got.shape, generator=gen).to(device, dtype)
    (gx,) = torch.autograd.grad((got * g).sum(), x)
    (wx,) = torch.autograd.grad((want * g.double()).sum(), x)
    assert gx.dtype == dtype
    if all_ignored and reduction == "mean":
        assert torch.isnan(got) and torch.isnan(want)
        assert not gx.any()  # every row ignored: no gradient
        return
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(gx.double(), wx.double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_grads_cpu(cpu_kernels, gen, reduction, smoothing):
    _ce_compare(gen, "cpu", torch.float32, 1e-5, reduction=reduction, smoothing=smoothing)


def test_cross_entropy_every_row_ignored_cpu(cpu_kernels, gen):
    _ce_compare(gen, "cpu", torch.float32, 1e-5, all_ignored=True)


def _z_want(x, t, z, reduction):
    lse = torch.logsumexp(x.double(), -1)
    keep = t != -100
    rows = F.cross_entropy(x.double(), t, reduction="none") + torch.where(
        keep, z * lse ** 2, torch.zeros_like(lse))
    if reduction == "none":
        return rows
    return rows.sum() if reduction == "sum" else rows.sum() / keep.sum()


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_z_loss_grads_cpu(cpu_kernels, gen, reduction):
    x = torch.randn(6, 40, generator=gen, requires_grad=True)
    t = torch.tensor([1, -100, 39, 0, 7, 3])
    got = scree.cross_entropy(x, t, reduction=reduction, z_loss=1e-2)
    want = _z_want(x, t, 1e-2, reduction)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    (a,) = torch.autograd.grad(got.sum(), x)
    (b,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5)


def test_cross_entropy_keeps_no_gradient_without_grad_cpu(cpu_kernels, gen):
    """No input requiring grad: need_grad False, no dlogits buffer; a
    backward through an op called so says what to do."""
    x = torch.randn(4, 10, generator=gen)
    t = torch.tensor([1, 2, 3, 4])
    loss, lse, dl = torch.ops.scree.cross_entropy(x, t, -100)
    assert dl.numel() == 0 and loss.shape == (4,) and lse.shape == (4,)
    xr = x.clone().requires_grad_()
    loss, _, _ = torch.ops.scree.cross_entropy(xr, t, -100, 0.0, 0.0, 2, False)
    with pytest.raises(RuntimeError, match="need_grad=False"):
        loss.backward()


def test_cross_entropy_packs_the_gradient_fields_cpu(captured, gen):
    x = torch.randn(6, 50, generator=gen)
    t = torch.tensor([1, 2, -100, 49, 0, 7])
    loss, lse, dl = _ops._cross_entropy_impl(x, t, -100, 0.1, 1e-4, 2, True)
    a = captured[-1][1]
    assert a["dlogits"] == dl.data_ptr() and dl.shape == x.shape and dl.dtype == x.dtype
    assert (a["reduction"], a["grad_scale"], a["dlogits_stride"]) == (2, 0.0, 50)
    assert a["label_smoothing"] == pytest.approx(0.1) and a["z_loss"] == pytest.approx(1e-4)
    assert loss.shape == ()
    # In place over the logits (the fused linear cross-entropy's chunks):
    # the same pointer and stride.
    _ops._ce_rows(x, t, -100, 0.0, 0.0, 1, x, 0.25, False)
    a = captured[-1][1]
    assert a["dlogits"] == a["logits"] == x.data_ptr()
    assert (a["dlogits_stride"], a["logits_stride"], a["grad_scale"]) == (50, 50, 0.25)
    _ops._cross_entropy_impl(x, t, -100)
    a = captured[-1][1]
    assert (a["dlogits"], a["reduction"], a["label_smoothing"]) == (0, 0, 0.0)


@pytest.fixture
def ce_host_kernel(monkeypatch):
    """scree_cross_entropy's plain forward and its count on the host: the
    struct a call packs, read from CPU tensors' memory (float32 logits,
    int64 targets) with ctypes; loss per row and, when given, the count of
    the rows not ignored written as the kernel writes them. The counts it
    makes are recorded, so a test sees what the Python side counted."""
    import ctypes
    from scree import _lib
    calls = []

    def view(ptr, n, ctype, dtype):
        return torch.frombuffer((ctype * n).from_address(ptr), dtype=dtype) if n else \
            torch.empty(0, dtype=dtype)

    class Entry:
        def __call__(self, ctx, packed, stream):
            fields = [f for f, _ in _lib.ARG_STRUCTS["scree_cross_entropy_args"]]
            a = dict(zip(fields, _lib.PACKERS["scree_cross_entropy_args"].unpack(packed)))
            rows, vocab = a["rows"], a["vocab"]
            stride = a["logits_stride"] or vocab
            x = view(a["logits"], rows * stride, ctypes.c_float, torch.float32)
            x = x.view(rows, stride)[:, :vocab] if rows else x.view(0, vocab)
            t = view(a["targets"], rows, ctypes.c_int64, torch.int64)
            keep = t != a["ignore_index"]
            lse = torch.logsumexp(x.double(), 1)
            picked = x.double().gather(1, t.clamp(0, vocab - 1)[:, None])[:, 0]
            view(a["loss"], rows, ctypes.c_float, torch.float32).copy_(
                torch.where(keep, lse - picked, 0.0).float())
            if a["count"]:
                view(a["count"], 1, ctypes.c_int64, torch.int64).fill_(int(keep.sum()))
            calls.append(a)
            return 0

    class FakeLib:
        def __getattr__(self, name):
            assert name == "scree_cross_entropy", name
            return Entry()

    monkeypatch.setattr(_ops, "_on_cuda", lambda op, name, t: None)
    monkeypatch.setattr(_ops, "_launch_state", lambda t: (None, None))
    monkeypatch.setattr(_lib, "lib", lambda: FakeLib())
    return calls


@pytest.mark.parametrize("targets", [[1, 2, -100, 9, 0, 7], [-100, 3, -100, -100, 5, -100],
                                     [-100] * 6, [4] * 6])
def test_cross_entropy_mean_divides_by_the_kernels_count_cpu(ce_host_kernel, gen, targets):
    """reduction="mean": one call, which counts the rows not ignored into
    `count` (the kernel's pre-pass); the mean is the loss summed over it,
    as PyTorch's (NaN when every row is ignored); sum and none ask for no
    count."""
    x = torch.randn(6, 10, generator=gen)
    t = torch.tensor(targets)
    loss, _, _ = _ops._cross_entropy_impl(x, t, -100, 0.0, 0.0, 2)
    assert len(ce_host_kernel) == 1 and ce_host_kernel[0]["count"] != 0
    want = torch.nn.functional.cross_entropy(x, t, ignore_index=-100)
    torch.testing.assert_close(loss, want, equal_nan=True)
    assert loss.isnan().item() == all(v == -100 for v in targets)
    for red, name in ((1, "sum"), (0, "none")):
        got, _, _ = _ops._cross_entropy_impl(x, t, -100, 0.0, 0.0, red)
        assert ce_host_kernel[-1]["count"] == 0
        torch.testing.assert_close(
            got, torch.nn.functional.cross_entropy(x, t, ignore_index=-100, reduction=name))


def test_cross_entropy_compiled_grads_cpu(cpu_kernels, gen, aot_graphs):
    x = torch.randn(6, 30, generator=gen, requires_grad=True)
    t = torch.tensor([1, 2, -100, 29, 0, 7])

    def step(x):
        return scree.cross_entropy(x * 2, t, label_smoothing=0.1) * 3

    _compiled_grads_match_eager(aot_graphs, step, (x,), "cross_entropy")


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_grads_gpu(gen, reduction, smoothing):
    _ce_compare(gen, "cuda", torch.float32, 1e-5, rows=300, vocab=32000, reduction=reduction,
                smoothing=smoothing, ignored=(2, 7, 100))
    _ce_compare(gen, "cuda", BF16, 2e-2, rows=64, vocab=50257, reduction=reduction,
                smoothing=smoothing)


@pytest.mark.gpu
def test_cross_entropy_every_row_ignored_gpu(gen):
    _ce_compare(gen, "cuda", torch.float32, 1e-5, all_ignored=True)


# -- fused linear cross-entropy ------------------------------------------------


def _lce_compare(gen, device, dtype, tol, n=9, h=16, v=50, bias=False, reduction="mean",
                 smoothing=0.0, z_loss=0.0, chunk_size=None, ignored=(2, 8), upstream=3.0):
    hid = torch.randn(n, h, generator=gen).to(device, dtype).requires_grad_()
    w = (torch.randn(v, h, generator=gen) / h ** 0.5).to(device, dtype).requires_grad_()
    b = (torch.randn(v, generator=gen) * 0.1).to(device, dtype).requires_grad_() if bias \
        else None
    t = torch.randint(0, v, (n,), generator=gen)
    for i in ignored:
        t[i % n] = -100
    t = t.to(device)
    leaves = [hid, w] + ([b] if bias else [])
    got = scree.linear_cross_entropy(hid, w, t, b, reduction=reduction,
                                     label_smoothing=smoothing, z_loss=z_loss,
                                     chunk_size=chunk_size)
    assert got.dtype == torch.float32 and got.shape == ()
    ga = torch.autograd.grad(got * upstream, leaves)
    logits = F.linear(hid.double(), w.double(), b.double() if bias else None)
    rows = F.cross_entropy(logits, t, reduction="none", label_smoothing=smoothing)
    if z_loss:
        lse = torch.logsumexp(logits, -1)
        rows = rows + torch.where(t != -100, z_loss * lse ** 2, torch.zeros_like(lse))
    want = rows.sum() if reduction == "sum" else rows.sum() / (t != -100).sum()
    gw = torch.autograd.grad(want * upstream, leaves)
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    for name, a, e in zip(("hidden", "weight", "bias"), ga, gw):
        assert a.dtype == dtype and a.shape == e.shape, name
        scale = max(e.abs().max().item(), 1.0)
        torch.testing.assert_close(a.double(), e.double(), rtol=tol, atol=tol * scale, msg=name)


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"bias": True}, {"chunk_size": 2},
                                {"chunk_size": 4, "bias": True, "reduction": "sum"},
                                {"chunk_size": 1000}, {"smoothing": 0.1, "chunk_size": 3},
                                {"z_loss": 1e-3, "chunk_size": 4}, {"ignored": ()}])
def test_linear_cross_entropy_grads_cpu(cpu_kernels, gen, kw):
    _lce_compare(gen, "cpu", torch.float32, 1e-5, **kw)


@pytest.mark.parametrize("bias", [False, True])
def test_linear_cross_entropy_frozen_lm_head_cpu(cpu_kernels, gen, bias):
    """weight (and bias) not requiring grad: hidden's gradient as with a
    trainable head, weight.grad stays None and its gradient is not computed
    (the op returns an empty one: no product per chunk, no float32 sums);
    a trainable bias on a frozen weight still gets its own."""
    n, h, v = 9, 16, 50
    hid = torch.randn(n, h, generator=gen, requires_grad=True)
    w = torch.randn(v, h, generator=gen) / h ** 0.5
    b = torch.randn(v, generator=gen) * 0.1 if bias else None
    if bias:
        b.requires_grad_()
    t = torch.randint(0, v, (n,), generator=gen)
    t[2] = -100
    loss = scree.linear_cross_entropy(hid, w, t, b, chunk_size=4)
    loss.backward()
    assert w.grad is None
    want_hid = hid.detach().clone().requires_grad_()
    want_b = b.detach().clone().requires_grad_() if bias else None
    want = F.cross_entropy(F.linear(want_hid, w, want_b), t)
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hid.grad, want_hid.grad, rtol=1e-5, atol=1e-5)
    if bias:
        torch.testing.assert_close(b.grad, want_b.grad, rtol=1e-5, atol=1e-5)
    _, gh, gw, gb = _ops._lce_impl(hid.detach(), w, t, b.detach() if bias else None, -100, 2,
                                   0.0, 0.0, 4, True, weight_grad=False, bias_grad=bias)
    assert gh.shape == hid.shape and gw.numel() == 0
    assert gb.numel() == (v if bias else 0)


def test_linear_cross_entropy_mean_counts_rows_over_all_chunks_cpu(cpu_kernels, gen):
    """Chunks of 2 rows, the ignored rows all in the first chunks: a mean
    per chunk would differ from the mean over every row kept."""
    _lce_compare(gen, "cpu", torch.float32, 1e-5, n=8, chunk_size=2, ignored=(0, 1, 2))


def test_linear_cross_entropy_in_place_path_cpu(monkeypatch, gen):
    """The path CUDA takes (the kernel called directly, dlogits written
    over each chunk's logits) with scree_cross_entropy played by the
    float64 reference: every chunk's call passes the logits themselves as
    dlogits, the summed reduction and 1 / the rows kept in all chunks as
    grad_scale, and the gradients come out as autograd's."""
    calls = []

    def fake_rows(input, target, ignore_index, smoothing, z_loss, reduction, dlogits,
                  grad_scale, check, op="cross_entropy", names=None):
        if check:
            return None, None
        calls.append((dlogits is input, reduction, grad_scale, input.shape[0]))
        loss, lse, dl = ref.cross_entropy_full(input, target, ignore_index, smoothing, z_loss,
                                               reduction, grad_scale)
        if dlogits is not None:
            dlogits.copy_(dl)
        return loss.float(), lse.float()

    monkeypatch.setattr(_ops, "_LCE_IN_PLACE", ("cpu",))
    monkeypatch.setattr(_ops, "_ce_rows", fake_rows)
    hid = torch.randn(7, 16, generator=gen, requires_grad=True)
    w = torch.randn(40, 16, generator=gen, requires_grad=True)
    t = torch.tensor([-100, -100, 3, 39, 0, 7, -100])
    loss = scree.linear_cross_entropy(hid, w, t, chunk_size=3, label_smoothing=0.1)
    loss.backward()
    assert calls == [(True, 1, 0.25, 3), (True, 1, 0.25, 3), (True, 1, 0.25, 1)]
    want = F.cross_entropy(hid.double() @ w.double().T, t, label_smoothing=0.1)
    gh, gw = torch.autograd.grad(want, (hid, w))
    torch.testing.assert_close(loss, want.to(loss.dtype))  # the loss is float32
    torch.testing.assert_close(hid.grad, gh)
    torch.testing.assert_close(w.grad, gw)
    calls.clear()
    with torch.no_grad():
        scree.linear_cross_entropy(hid, w, t, chunk_size=4)
    assert calls == [(False, 0, 1.0, 4), (False, 0, 1.0, 3)]


def test_linear_cross_entropy_every_row_ignored_cpu(cpu_kernels, gen):
    hid = torch.randn(4, 8, generator=gen, requires_grad=True)
    w = torch.randn(20, 8, generator=gen, requires_grad=True)
    t = torch.full((4,), -100)
    loss = scree.linear_cross_entropy(hid, w, t)
    assert torch.isnan(loss)  # as F.cross_entropy's mean over no row
    loss.backward()
    assert not hid.grad.any() and not w.grad.any()
    assert scree.linear_cross_entropy(hid, w, t, reduction="sum").item() == 0


def test_linear_cross_entropy_without_grad_and_none_cpu(cpu_kernels, gen):
    hid = torch.randn(5, 8, generator=gen)
    w = torch.randn(20, 8, generator=gen)
    t = torch.tensor([1, -100, 3, 19, 0])
    rows = scree.linear_cross_entropy(hid, w, t, reduction="none", chunk_size=2)
    torch.testing.assert_close(rows, F.cross_entropy(hid @ w.T, t, reduction="none"))
    for red in ("mean", "sum"):  # without gradients: no dlogits, no count on the host
        torch.testing.assert_close(scree.linear_cross_entropy(hid, w, t, reduction=red,
                                                              chunk_size=2),
                                   F.cross_entropy(hid @ w.T, t, reduction=red))
    with pytest.raises(ValueError, match="'reduction'='none' is not differentiable"):
        scree.linear_cross_entropy(hid, w.requires_grad_(), t, reduction="none")


def test_linear_cross_entropy_default_chunk_cpu():
    """Liger-Kernel's rule: chunk x vocab about rows x hidden_size."""
    assert _ops._lce_chunk_rows(8192, 128256, 4096) == 256  # 8192 / 32
    assert _ops._lce_chunk_rows(100, 50, 16) == 32  # ceil(100 / 4) = 25 -> 32
    assert _ops._lce_chunk_rows(10, 8, 16) == 16  # vocab below hidden: one chunk
    assert _ops._lce_chunk_rows(1, 1 << 20, 64) == 1


def test_linear_cross_entropy_compiled_grads_cpu(cpu_kernels, gen, aot_graphs):
    hid = torch.randn(9, 16, generator=gen, requires_grad=True)
    w = torch.randn(50, 16, generator=gen, requires_grad=True)
    t = torch.tensor([1, 2, -100, 49, 0, 7, 3, 5, -100])

    def step(hid, w):
        return scree.linear_cross_entropy(hid * 2, w, t, chunk_size=4) * 3

    _compiled_grads_match_eager(aot_graphs, step, (hid, w), "linear_cross_entropy")


@pytest.mark.gpu
@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"bias": True, "chunk_size": 100},
                                {"smoothing": 0.1}, {"z_loss": 1e-4, "chunk_size": 64}])
def test_linear_cross_entropy_grads_gpu(gen, kw):
    _lce_compare(gen, "cuda", torch.float32, 1e-4, n=1000, h=256, v=32000,
                 ignored=(0, 5, 999), **kw)


@pytest.mark.gpu
def test_linear_cross_entropy_bf16_gpu(gen):
    _lce_compare(gen, "cuda", BF16, 3e-2, n=512, h=512, v=32000, chunk_size=128)
