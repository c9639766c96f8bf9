"""Autograd through scree.rms_norm, layer_norm, add_rms_norm, swiglu and
softmax: their backward ops (torch.ops.scree.rms_norm_backward,
layer_norm_backward, add_rms_norm_backward, swiglu_backward,
softmax_backward: scree's backward kernels on CUDA)
against PyTorch's own autograd of the same functions. On CPU the ops run
the float64 references of reference.py (the wiring: saved tensors, shapes,
optional weight, bias and up, the fake implementations); on a GPU,
scree's kernels."""
import pytest
import torch
import torch.nn.functional as F

import scree

BF16 = torch.bfloat16


def _grads(fn, x, w, b, g):
    leaves = [t for t in (x, w, b) if t is not None]
    for t in leaves:
        t.requires_grad_()
    y = fn(x, w, b)
    assert y.requires_grad
    got = torch.autograd.grad(y, leaves, g)
    for t in leaves:
        t.requires_grad_(False)
    return got


def _inputs(gen, shape, dtype, device, weight=True, bias=False):
    n = shape[-1]
    x = torch.randn(*shape, generator=gen).to(device, dtype)
    w = (1 + 0.3 * torch.randn(n, generator=gen)).to(device, dtype) if weight else None
    b = (0.2 * torch.randn(n, generator=gen)).to(device, dtype) if bias else None
    g = torch.randn(*shape, generator=gen).to(device, dtype)
    return x, w, b, g


def _compare(gen, kind, shape, dtype, device, weight, bias, tol):
    x, w, b, g = _inputs(gen, shape, dtype, device, weight, bias)
    n = [shape[-1]]
    if kind == "rms":
        ours = _grads(lambda x, w, b: scree.rms_norm(x, n, w, eps=1e-6), x, w, None, g)
        want = _grads(lambda x, w, b: F.rms_norm(x.double(), n, None if w is None else
                                                 w.double(), eps=1e-6), x, w, None, g.double())
    else:
        ours = _grads(lambda x, w, b: scree.layer_norm(x, n, w, b, eps=1e-5), x, w, b, g)
        want = _grads(lambda x, w, b: F.layer_norm(
            x.double(), n, None if w is None else w.double(),
            None if b is None else b.double(), 1e-5), x, w, b, g.double())
    assert len(ours) == len(want)
    for name, a, e in zip(("dx", "dw", "db"), ours, want):
        assert a.shape == e.shape and a.dtype == dtype, name
        assert not torch.isnan(a).any(), name
        # dw and db sum over rows: their tolerance scales with the sums' size.
        scale = e.abs().max().item() if name != "dx" else 1.0
        torch.testing.assert_close(a.double(), e.double(), rtol=tol, atol=tol * max(scale, 1.0),
                                   msg=name)


@pytest.mark.parametrize("kind", ["rms", "ln"])
@pytest.mark.parametrize("weight,bias", [(True, False), (False, False), (True, True)])
def test_norm_grads_cpu(cpu_kernels, gen, kind, weight, bias):
    if kind == "rms" and bias:
        pytest.skip("RMSNorm has no bias")
    _compare(gen, kind, (3, 5, 64), torch.float32, "cpu", weight, bias, 1e-5)


def test_norm_backward_ops_opcheck_cpu(cpu_kernels, gen):
    x, w, b, g = _inputs(gen, (6, 32), torch.float32, "cpu", True, True)
    torch.library.opcheck(torch.ops.scree.rms_norm_backward.default, (g, x, [32], w, 1e-6),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.scree.layer_norm_backward.default,
                          (g, x, [32], w, b, 1e-5),
                          test_utils=("test_schema", "test_faketensor"))


def test_norm_grad_under_compile_cpu(cpu_kernels, gen):
    """A compiled forward and backward keeps the ops in one graph."""
    x, w, _, g = _inputs(gen, (4, 16), torch.float32, "cpu")

    def step(x, w):
        return (scree.rms_norm(x, [16], w, eps=1e-6) * g).sum()

    fn = torch.compile(step, fullgraph=True, backend="aot_eager")
    x.requires_grad_()
    w.requires_grad_()
    fn(x, w).backward()
    want = _grads(lambda x, w, b: F.rms_norm(x.double(), [16], w.double(), eps=1e-6),
                  x.detach().clone(), w.detach().clone(), None, g.double())
    torch.testing.assert_close(x.grad.double(), want[0].double(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad.double(), want[1].double(), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["rms", "ln"])
@pytest.mark.parametrize("shape,dtype", [((7, 33, 4096), BF16), ((1000, 1), torch.float16),
                                         ((5, 8192), torch.float32), ((2, 3, 777), BF16)])
def test_norm_grads_gpu(gen, kind, shape, dtype):
    tol = {torch.float32: 1e-4, torch.float16: 4e-3, BF16: 2e-2}[dtype]
    for weight, bias in ((True, kind == "ln"), (False, False)):
        _compare(gen, kind, shape, dtype, "cuda", weight, bias, tol)


def _act_compare(gen, kind, shape, dtype, device, fused, tol):
    n = shape[-1]
    if kind == "swiglu":
        gate = torch.randn(*shape[:-1], 2 * n if fused else n, generator=gen).to(device, dtype)
        up = None if fused else torch.randn(*shape, generator=gen).to(device, dtype)
        g = torch.randn(*shape, generator=gen).to(device, dtype)

        def ours(a, b, _):
            return scree.swiglu(a, b)

        def want(a, b, _):
            a = a.double()
            if b is None:
                a, b = a.chunk(2, -1)
            return F.silu(a) * b.double()
        x, w = gate, up
    else:
        x = torch.randn(*shape, generator=gen).to(device, dtype)
        w = None
        g = torch.randn(*shape, generator=gen).to(device, dtype)

        def ours(a, b, _):
            return scree.softmax(a, -1, scale=0.5)

        def want(a, b, _):
            return torch.softmax(a.double() * 0.5, -1)
    got = _grads(ours, x, w, None, g)
    exp = _grads(want, x, w, None, g.double())
    assert len(got) == len(exp)
    for a, e in zip(got, exp):
        assert a.shape == e.shape and a.dtype == dtype
        assert not torch.isnan(a).any()
        torch.testing.assert_close(a.double(), e.double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("kind,fused", [("swiglu", False), ("swiglu", True),
                                        ("softmax", False)])
def test_activation_grads_cpu(cpu_kernels, gen, kind, fused):
    _act_compare(gen, kind, (3, 4, 40), torch.float32, "cpu", fused, 1e-5)


def test_activation_backward_ops_opcheck_cpu(cpu_kernels, gen):
    gate = torch.randn(6, 32, generator=gen)
    g = torch.randn(6, 16, generator=gen)
    torch.library.opcheck(torch.ops.scree.swiglu_backward.default, (g, gate, None),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.scree.swiglu_backward.default, (g, gate[:, :16], gate[:, 16:]),
                          test_utils=("test_schema", "test_faketensor"))
    y = torch.softmax(torch.randn(6, 16, generator=gen), -1)
    torch.library.opcheck(torch.ops.scree.softmax_backward.default, (g, y, torch.float32, 1.0),
                          test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.parametrize("kind,fused", [("swiglu", False), ("swiglu", True),
                                        ("softmax", False)])
@pytest.mark.parametrize("shape,dtype", [((7, 33, 4096), BF16), ((1000, 1), torch.float16),
                                         ((5, 8192), torch.float32), ((2, 3, 777), BF16)])
def test_activation_grads_gpu(gen, kind, fused, shape, dtype):
    tol = {torch.float32: 1e-4, torch.float16: 4e-3, BF16: 2e-2}[dtype]
    _act_compare(gen, kind, shape, dtype, "cuda", fused, tol)


def _add_compare(gen, shape, dtype, device, use, tol):
    """add_rms_norm's gradients with the loss reading y, h or both."""
    n = shape[-1]
    x = torch.randn(*shape, generator=gen).to(device, dtype)
    r = torch.randn(*shape, generator=gen).to(device, dtype)
    w = (1 + 0.3 * torch.randn(n, generator=gen)).to(device, dtype)
    gy = torch.randn(*shape, generator=gen).to(device, dtype)
    gh = torch.randn(*shape, generator=gen).to(device, dtype)

    def loss(y, h, gy, gh):
        return (("y" in use) * (y * gy).sum() + ("h" in use) * (h * gh).sum())

    def ours(x, r, w):
        y, h = scree.add_rms_norm(x, r, w, eps=1e-6)
        return loss(y, h, gy, gh)

    def want(x, r, w):
        h = x.double() + r.double()
        y = F.rms_norm(h, [n], w.double(), eps=1e-6)
        return loss(y, h, gy.double(), gh.double())
    got = _grads(lambda a, b, c: ours(a, b, c), x, r, w, None)
    exp = _grads(lambda a, b, c: want(a, b, c), x, r, w, None)
    for name, a, e in zip(("dinput", "dresidual", "dweight"), got, exp):
        assert a.shape == e.shape and a.dtype == dtype, name
        scale = e.abs().max().item() if name == "dweight" else 1.0
        torch.testing.assert_close(a.double(), e.double(), rtol=tol, atol=tol * max(scale, 1.0),
                                   msg=name)


@pytest.mark.parametrize("use", ["y", "yh", "h"])
def test_add_rms_norm_grads_cpu(cpu_kernels, gen, use):
    _add_compare(gen, (3, 5, 64), torch.float32, "cpu", use, 1e-5)


def test_add_rms_norm_backward_op_opcheck_cpu(cpu_kernels, gen):
    h = torch.randn(6, 32, generator=gen)
    w = torch.randn(32, generator=gen)
    g = torch.randn(6, 32, generator=gen)
    for gh in (g.clone(), None):
        torch.library.opcheck(torch.ops.scree.add_rms_norm_backward.default, (g, gh, h, w, 1e-6),
                              test_utils=("test_schema", "test_faketensor"))


@pytest.mark.gpu
@pytest.mark.parametrize("use", ["y", "yh"])
@pytest.mark.parametrize("shape,dtype", [((7, 33, 4096), BF16), ((1000, 1), torch.float16),
                                         ((5, 8192), torch.float32)])
def test_add_rms_norm_grads_gpu(gen, use, shape, dtype):
    tol = {torch.float32: 1e-4, torch.float16: 4e-3, BF16: 2e-2}[dtype]
    _add_compare(gen, shape, dtype, "cuda", use, tol)
