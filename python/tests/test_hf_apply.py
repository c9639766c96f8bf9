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
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=256,
                                       **over)
        cls = transformers.LlamaForCausalLM
    else:
        cfg = transformers.GemmaConfig(vocab_size=256, hidden_size=128, intermediate_size=256,
                                       num_hidden_layers=2, num_attention_heads=4,
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


@pytest.mark.parametrize("kw,match", [({"rope": True}, "rope=True"),
                                      ({"cross_entropy": True}, "cross_entropy=True")])
def test_apply_refuses_settings_before_patching_cpu(kw, match):
    m, _ = _tiny()
    with pytest.raises(ValueError, match=match):
        scree.hf.apply(m, **kw)
    assert "forward" not in vars(m.model.layers[0].input_layernorm)
    assert m.config._attn_implementation == "sdpa"


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


def test_compiled_training_step_keeps_scree_ops_cpu(cpu_kernels, gen):
    """torch.compile(fullgraph=True) of a patched model's forward and loss:
    no graph break, scree's forward ops in the forward graph and their
    backward ops in the backward graph, gradients as in eager."""
    from torch._dynamo.backends.common import aot_autograd
    graphs = {"fw": [], "bw": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(str(gm.graph))
            return gm.forward
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    m, cfg = _tiny()
    scree.hf.apply(m)
    m.to(torch.bfloat16)
    lengths = [7, 1, 12, 4]
    ids = torch.randint(0, cfg.vocab_size, (1, sum(lengths)), generator=gen)
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    cu = torch.tensor([0, 7, 8, 20, 24], dtype=torch.int32)

    def step(ids, pos):
        out = m(input_ids=ids, position_ids=pos, use_cache=False, cu_seq_lens_q=cu,
                cu_seq_lens_k=cu, max_length_q=12, max_length_k=12)
        return out.logits.float().pow(2).mean()

    torch._dynamo.reset()
    loss = torch.compile(step, fullgraph=True, backend=backend)(ids, pos)
    loss.backward()
    compiled = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    step(ids, pos).backward()
    for n, p in m.named_parameters():
        torch.testing.assert_close(compiled[n].float(), p.grad.float(), atol=2e-2, rtol=0, msg=n)
    fw, bw = "\n".join(graphs["fw"]), "\n".join(graphs["bw"])
    for op in ("scree.varlen_attn", "scree.rms_norm", "scree.swiglu"):
        assert op + ".default" in fw, op
    for op in ("scree.varlen_attn_backward", "scree.rms_norm_backward",
               "scree.swiglu_backward"):
        assert op + ".default" in bw, op
