"""scree.hf.apply: a tiny LLaMA patched to run its RMSNorms, SwiGLU MLPs
and attention on scree gives the unpatched model's logits and gradients
(on CPU through the reference kernels of reference.py, on a GPU through
scree's); unsupported models and settings are refused before anything is
patched."""
import pytest
import torch

transformers = pytest.importorskip("transformers")
import scree.hf  # noqa: E402


def _tiny(kind="llama", seed=1, **over):
    layers = over.pop("num_hidden_layers", 2)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                       num_hidden_layers=layers, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=256,
                                       **over)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.GemmaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                       num_hidden_layers=layers, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=32,
                                       max_position_embeddings=256, **over)
        cls = transformers.GemmaForCausalLM
    torch.manual_seed(seed)
    m = cls(cfg)
    m.set_attn_implementation("sdpa")
    return m, cfg


def _compare(gen, kind, device, dtype, atol):
    """The patched model on one packed batch against the unpatched one on
    each sequence alone (sdpa does not see position_ids restart): logits,
    and the gradients of every parameter under the same loss."""
    ref, cfg = _tiny(kind)
    ours, _ = _tiny(kind)
    scree.hf.apply(ours, swiglu=kind == "llama")
    assert ours.config._attn_implementation == "scree"
    for m in (ref, ours):
        m.to(device=device, dtype=dtype)
    lengths = [7, 1, 12, 4]
    total = sum(lengths)
    ids = torch.randint(0, cfg.vocab_size, (1, total), generator=gen).to(device)
    pos = torch.cat([torch.arange(n) for n in lengths])[None].to(device)
    weight = torch.randn(total, cfg.vocab_size, generator=gen).to(device, dtype)
    a = ours(input_ids=ids, position_ids=pos, use_cache=False).logits[0]
    (a.float() * weight.float()).sum().backward()
    parts, start = [], 0
    for n in lengths:
        out = ref(input_ids=ids[:, start:start + n], use_cache=False).logits[0]
        (out.float() * weight[start:start + n].float()).sum().backward()
        parts.append(out.detach())
        start += n
    torch.testing.assert_close(a.detach(), torch.cat(parts), atol=atol, rtol=0)
    _same_grads(ours, ref, atol)


def _same_grads(ours, ref, atol):
    """Every parameter's gradient of ours as ref's, within atol times the
    larger of 1 and the gradient's largest magnitude."""
    got = dict(ours.named_parameters())
    for name, p in ref.named_parameters():
        g = got[name].grad
        assert g is not None, name
        scale = max(p.grad.abs().max().item(), 1.0)
        torch.testing.assert_close(g.float(), p.grad.float(), atol=atol * scale, rtol=0,
                                   msg=name)


def test_apply_llama_matches_unpatched_cpu(cpu_kernels, gen):
    _compare(gen, "llama", "cpu", torch.float32, 1e-4)


def test_apply_gemma_norms_and_attention_cpu(cpu_kernels, gen):
    _compare(gen, "gemma", "cpu", torch.float32, 1e-4)


def test_apply_patches_what_it_says_cpu(cpu_kernels):
    m, _ = _tiny()
    scree.hf.apply(m, attention=False)
    norm = m.model.layers[0].input_layernorm
    mlp = m.model.layers[0].mlp
    assert norm.forward.__func__ is scree.hf._rms_forward
    assert mlp.forward.__func__ is scree.hf._mlp_forward
    assert m.config._attn_implementation == "sdpa"
    scree.hf.apply(m, attention=False)  # twice: harmless
    assert norm.forward.__func__ is scree.hf._rms_forward


def test_apply_refuses_settings_before_patching_cpu():
    gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2,
                                                               vocab_size=64))
    gpt.config.model_type = "llama"  # past the type check: no RMSNorm, no lm_head over .model
    with pytest.raises(ValueError, match="cross_entropy=True needs a CausalLM"):
        scree.hf.apply(gpt, rms_norm=False, swiglu=False, attention=False, cross_entropy=True)
    with pytest.raises(ValueError, match="rope=True needs the modeling module"):
        scree.hf.apply(gpt, rms_norm=False, swiglu=False, attention=False, rope=True)
    assert "forward" not in vars(gpt)
    m, _ = _tiny("gemma")
    m.config.model_type = "gemma2"
    m.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        scree.hf.apply(m, swiglu=False, rope=True, cross_entropy=True)
    assert "forward" not in vars(m) and "forward" not in vars(m.model.layers[0].input_layernorm)
    assert not hasattr(scree.hf._modeling_module(m).apply_rotary_pos_emb, "_scree_original")
    assert m.config._attn_implementation == "sdpa"


@pytest.fixture
def unpatch_rope():
    """Gives the LLaMA and Gemma modeling modules their own RoPE back after
    the test (apply(rope=True) patches the module function)."""
    yield
    for kind in ("llama", "gemma"):
        scree.hf.unapply_rope(_tiny(kind)[0])


def _hf_rope_inputs(gen, b, s, hq, hk, d, dtype, device, batch_cos=1):
    m, _ = _tiny()
    rot = m.model.rotary_emb.to(device)
    x = torch.randn(b, s, hq * d, generator=gen).to(device, dtype)
    pos = torch.randint(0, 200, (batch_cos, s), generator=gen).to(device)
    cos, sin = rot(x, pos)
    q = torch.randn(b, s, hq, d, generator=gen).to(device, dtype).transpose(1, 2)
    k = torch.randn(b, s, hk, d, generator=gen).to(device, dtype).transpose(1, 2)
    return q, k, cos, sin


def _rope_patched_vs_hf(gen, device, dtype, tol, batch_cos):
    from transformers.models.llama import modeling_llama as ml
    original = ml.apply_rotary_pos_emb
    ours = scree.hf._make_rotary_pos_emb(original)
    q, k, cos, sin = _hf_rope_inputs(gen, 2, 9, 4, 2, 32, dtype, device, batch_cos)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    res = []
    for fn in (ours, original):
        a, b = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
        rq, rk = fn(a, b, cos, sin)
        assert rq.shape == q.shape and rk.shape == k.shape and rq.dtype == dtype
        ((rq * gq).sum() + (rk * gk).sum()).backward()
        res.append((rq.detach(), rk.detach(), a.grad, b.grad))
    for name, x, y in zip(("q", "k", "dq", "dk"), *res):
        torch.testing.assert_close(x.float(), y.float(), atol=tol, rtol=tol, msg=name)


@pytest.mark.parametrize("batch_cos", [1, 2])
def test_patched_rotary_pos_emb_matches_hf_cpu(cpu_kernels, gen, batch_cos):
    _rope_patched_vs_hf(gen, "cpu", torch.float32, 1e-5, batch_cos)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_patched_rotary_pos_emb_matches_hf_gpu(gen, dtype, tol):
    _rope_patched_vs_hf(gen, "cuda", dtype, tol, 2)


def test_apply_rope_patches_the_module_function_once_cpu(cpu_kernels, unpatch_rope):
    from transformers.models.llama import modeling_llama as ml
    original = ml.apply_rotary_pos_emb
    m, _ = _tiny()
    scree.hf.apply(m, attention=False, rope=True)
    patched = ml.apply_rotary_pos_emb
    assert patched._scree_original is original
    scree.hf.apply(m, attention=False, rope=True)  # twice: the same patch, not a wrapper
    assert ml.apply_rotary_pos_emb is patched
    scree.hf.unapply_rope(m)
    assert ml.apply_rotary_pos_emb is original


def test_rope_table_is_built_once_per_forward_cpu(cpu_kernels, gen, unpatch_rope, monkeypatch):
    """apply(rope=True): the cos/sin table scree reads is built once per
    forward for all layers (4 here), from the cos and sin the model computes
    once; a new forward (new cos) builds it again, an in-place change of cos
    too; the logits are the unpatched model's."""
    ref, cfg = _tiny(num_hidden_layers=4)
    ours, _ = _tiny(num_hidden_layers=4)
    ids = torch.randint(0, cfg.vocab_size, (2, 11), generator=gen)
    with torch.no_grad():  # before the patch, which is the modeling module's
        want = ref(input_ids=ids, use_cache=False).logits
    scree.hf.apply(ours, attention=False, rope=True)
    built = []
    real = scree.hf._rope_table
    monkeypatch.setattr(scree.hf, "_rope_table", lambda *a: built.append(a) or real(*a))
    with torch.no_grad():
        got = ours(input_ids=ids, use_cache=False).logits
        assert len(built) == 1
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
        ours(input_ids=ids[:, :5], use_cache=False)
        assert len(built) == 2
    # The cache itself: the same tensors hit, a bumped version misses.
    fn = scree.hf._modeling_module(ours).apply_rotary_pos_emb
    q, k, cos, sin = _hf_rope_inputs(gen, 2, 9, 4, 2, 32, torch.float32, "cpu")
    fn(q, k, cos, sin)
    fn(q, k, cos, sin)
    assert len(built) == 3
    cos.mul_(1.0)
    a = fn(q, k, cos, sin)
    assert len(built) == 4
    torch.testing.assert_close(a[0], fn._scree_original(q, k, cos, sin)[0], atol=1e-5, rtol=0)


def _labels(gen, cfg, ids, ignored=(0, 5, 13)):
    labels = ids.clone()
    for i in ignored:
        labels[0, i] = -100
    return labels


def _training_compare(gen, kind, device, dtype, atol, num_items=False, shift=False):
    """The model patched with rope and cross_entropy (and the rest) in
    training with labels against the unpatched one: the loss (HF's
    ForCausalLMLoss) and every parameter's gradient; the patched logits are
    None."""
    ref, cfg = _tiny(kind)
    ours, _ = _tiny(kind)
    for m in (ref, ours):
        m.to(device=device, dtype=dtype)
        m.train()
    from transformers.models.llama import modeling_llama as ml
    from transformers.models.gemma import modeling_gemma as mg
    originals = (ml.apply_rotary_pos_emb, mg.apply_rotary_pos_emb)
    ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=gen).to(device)
    labels = _labels(gen, cfg, ids).to(device)
    kw = {}
    if num_items:
        kw["num_items_in_batch"] = torch.tensor(40, device=device)
    if shift:
        # DataCollatorWithFlattening's: shift_labels are used, labels only
        # tell that there is a loss (these ones would give another).
        shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
        kw["shift_labels"] = shifted.contiguous()
        labels = torch.flip(labels, (1,))
    want = ref(input_ids=ids, labels=labels, use_cache=False, **kw)
    want.loss.backward()
    scree.hf.apply(ours, swiglu=kind == "llama", attention=False, rope=True, cross_entropy=True)
    assert (ml.apply_rotary_pos_emb, mg.apply_rotary_pos_emb) != originals
    got = ours(input_ids=ids, labels=labels, use_cache=False, **kw)
    assert got.logits is None and want.logits is not None
    got.loss.backward()
    torch.testing.assert_close(got.loss.float(), want.loss.float(), atol=atol, rtol=0)
    _same_grads(ours, ref, atol)
    # Eval (or no labels): the model's own forward, logits included.
    ours.eval()
    ref.eval()
    with torch.no_grad():
        a = ours(input_ids=ids, labels=labels, use_cache=False, **kw)
        b = ref(input_ids=ids, labels=labels, use_cache=False, **kw)
    assert a.logits is not None
    torch.testing.assert_close(a.logits.float(), b.logits.float(), atol=atol * 10, rtol=0)


@pytest.mark.parametrize("kind,num_items,shift", [("llama", False, False),
                                                  ("llama", True, False),
                                                  ("llama", False, True),
                                                  ("gemma", False, False)])
def test_apply_rope_and_cross_entropy_match_unpatched_cpu(cpu_kernels, gen, unpatch_rope, kind,
                                                         num_items, shift):
    _training_compare(gen, kind, "cpu", torch.float32, 1e-4, num_items, shift)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["llama", "gemma"])
def test_apply_rope_and_cross_entropy_match_unpatched_gpu(gen, unpatch_rope, kind):
    _training_compare(gen, kind, "cuda", torch.float32, 1e-3)


def test_fused_loss_forward_return_dict_false_cpu(cpu_kernels, gen, unpatch_rope):
    """apply(cross_entropy=True) in training with labels: return_dict=False
    (passed, or the config's) gives HF's tuple of the fields that are not
    None: the loss first (the same loss), no logits; the unpatched model
    agrees on the loss; eval with return_dict=False is the model's own
    tuple (logits first)."""
    ref, cfg = _tiny()
    ours, _ = _tiny()
    ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=gen)
    labels = _labels(gen, cfg, ids)
    ref.train()
    want = ref(input_ids=ids, labels=labels, use_cache=False, return_dict=False)
    assert isinstance(want, tuple)
    scree.hf.apply(ours, attention=False, cross_entropy=True)
    ours.train()
    as_dict = ours(input_ids=ids, labels=labels, use_cache=False)
    got = ours(input_ids=ids, labels=labels, use_cache=False, return_dict=False)
    assert isinstance(got, tuple) and len(got) == 1  # logits and the cache are None
    torch.testing.assert_close(got[0], as_dict.loss)
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=0)
    got[0].backward()
    ours.config.return_dict = False
    try:
        by_config = ours(input_ids=ids, labels=labels, use_cache=False)
        assert isinstance(by_config, tuple)
        torch.testing.assert_close(by_config[0], as_dict.loss)
        assert not isinstance(ours(input_ids=ids, labels=labels, use_cache=False,
                                   return_dict=True), tuple)
    finally:
        ours.config.return_dict = True
    ours.eval()
    with torch.no_grad():
        ev = ours(input_ids=ids, use_cache=False, return_dict=False)
    assert isinstance(ev, tuple) and ev[0].shape == (2, 16, cfg.vocab_size)


def test_apply_refuses_models_and_mlps_it_cannot_patch_cpu():
    m, _ = _tiny("gemma")
    with pytest.raises(ValueError, match="swiglu=True needs a SwiGLU MLP"):
        scree.hf.apply(m)  # Gemma's MLP is GeGLU
    assert "forward" not in vars(m.model.layers[0].input_layernorm)
    gpt = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2,
                                                               vocab_size=64))
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported"):
        scree.hf.apply(gpt)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["llama", "gemma"])
def test_apply_matches_unpatched_gpu(gen, kind):
    _compare(gen, kind, "cuda", torch.bfloat16, 6e-2)


def test_compiled_training_step_keeps_scree_ops_cpu(cpu_kernels, gen, unpatch_rope):
    """torch.compile(fullgraph=True) of a patched model's training step
    (RoPE and the fused linear cross-entropy loss on scree too): no graph
    break, scree's forward ops in the forward graph and their backward ops
    in the backward graph, loss and gradients as in eager."""
    from torch._dynamo.backends.common import aot_autograd
    graphs = {"fw": [], "bw": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(str(gm.graph))
            return gm.forward
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    m, cfg = _tiny()
    scree.hf.apply(m, rope=True, cross_entropy=True)
    m.to(torch.bfloat16)
    m.train()
    lengths = [7, 1, 12, 4]
    ids = torch.randint(0, cfg.vocab_size, (1, sum(lengths)), generator=gen)
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    cu = torch.tensor([0, 7, 8, 20, 24], dtype=torch.int32)

    def step(ids, pos):
        out = m(input_ids=ids, position_ids=pos, use_cache=False, cu_seq_lens_q=cu,
                cu_seq_lens_k=cu, max_length_q=12, max_length_k=12, labels=ids)
        assert out.logits is None
        return out.loss

    torch._dynamo.reset()
    loss = torch.compile(step, fullgraph=True, backend=backend)(ids, pos)
    loss.backward()
    compiled = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    eager = step(ids, pos)
    eager.backward()
    torch.testing.assert_close(loss, eager)
    for n, p in m.named_parameters():
        torch.testing.assert_close(compiled[n].float(), p.grad.float(), atol=2e-2, rtol=0, msg=n)
    fw, bw = "\n".join(graphs["fw"]), "\n".join(graphs["bw"])
    for op in ("scree.varlen_attn", "scree.rms_norm", "scree.swiglu", "scree.rope",
               "scree.linear_cross_entropy"):
        assert op + ".default" in fw, op
    for op in ("scree.varlen_attn_backward", "scree.rms_norm_backward",
               "scree.swiglu_backward", "scree.rope_backward"):
        assert op + ".default" in bw, op
