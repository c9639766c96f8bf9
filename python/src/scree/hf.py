"""scree as an attention implementation of HuggingFace transformers.

    import scree      # registers "scree", before or after transformers is imported
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="scree",
                                                 dtype=torch.bfloat16)

The attention of every layer then runs through scree.varlen_attn. Batches
come in the forms FlashAttention-2's integration takes:

- padding-free: one row of concatenated sequences (input_ids [1, T]) whose
  position_ids restart at 0 for each sequence (or explicit cu_seq_lens_q /
  cu_seq_lens_k / max_length_q / max_length_k keyword arguments, as
  DataCollatorWithFlattening gives them): attention never crosses a
  sequence, and nothing is copied;
- padded, with a 2-D attention_mask: the real tokens are gathered, attended
  and scattered back (padding rows come out as zeros);
- plain batches of equal-length rows.

The mask function registered beside it is FlashAttention-2's: None when no
token is padding, else the 2-D mask. Sliding windows (config.sliding_window)
map to window_size (sliding_window - 1, 0), and logit softcapping
(Gemma 2's attn_logit_softcapping) to softcap; dropout and attention sinks
are not supported (training with attention dropout is not either).

apply(model, ...) patches a loaded LLaMA-style model's modules to run on
scree (RMSNorm, the SwiGLU MLP, attention); from_pretrained(name, ...)
loads and patches in one call.
"""
import types

import torch

from ._ops import rms_norm as _rms_norm, swiglu as _swiglu, varlen_attn

NAME = "scree"


def _cu(lengths):
    cu = torch.zeros(lengths.numel() + 1, dtype=torch.int32, device=lengths.device)
    torch.cumsum(lengths, 0, out=cu[1:])
    return cu


def _tokens(x):
    """[B, H, L, D] as [B * L, H, D]: a strided view when B is 1, else a copy."""
    b, h, l, d = x.shape
    if b == 1:
        return x[0].transpose(0, 1)
    return x.transpose(1, 2).reshape(b * l, h, d)


def _from_position_ids(position_ids, total):
    """cu_seqlens and the longest sequence of one packed row: a sequence
    starts wherever the position goes back to the row's smallest one."""
    pos = position_ids.reshape(-1)
    starts = (pos == pos.min()).nonzero().reshape(-1).to(torch.int32)
    cu = torch.cat((starts, torch.tensor([total], dtype=torch.int32, device=pos.device)))
    return cu, int(cu.diff().max())


def _is_packed(position_ids, batch):
    if position_ids is None or batch != 1:
        return False
    pos = position_ids.reshape(-1)
    return bool((pos.diff() != 1).any()) if pos.numel() > 1 else False


def scree_attention_forward(module, query, key, value, attention_mask, dropout=0.0,
                            scaling=None, sliding_window=None, softcap=None, is_causal=None,
                            s_aux=None, **kwargs):
    """transformers' attention-function protocol: query [B, H_q, L_q, D], key
    and value [B, H_kv, L_k, D]; returns ([B, L_q, H_q, D], None)."""
    if dropout and module.training:
        raise ValueError("scree attention: dropout is not supported")
    if s_aux is not None:
        raise ValueError("scree attention: attention sinks (s_aux) are not supported")
    if kwargs.get("output_attentions"):
        raise ValueError("scree attention: output_attentions is not supported")
    if query.is_cuda and query.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"scree attention: query has dtype {query.dtype}; scree's attention "
                        "takes float16 or bfloat16 (load the model with dtype=torch.bfloat16)")
    b, hq, lq, d = query.shape
    lk = key.shape[2]
    # Masks are aligned to the bottom right, so one query against a cache
    # is causal too (it sees every key).
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    left, right = -1, -1
    if sliding_window is not None:
        left = int(sliding_window) - 1
        right = 0 if causal else int(sliding_window) - 1
    if causal:
        right = 0
    window = (left, right)
    cap = float(softcap) if softcap else 0.0

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
    if attention_mask is not None and attention_mask.dim() == 2:
        return _padded(query, key, value, attention_mask, scaling, window, cap), None
    if attention_mask is not None:
        raise ValueError("scree attention: a 4-D attention mask is not supported; scree takes "
                         "padding-free batches, 2-D padding masks, or none")
    if cu_q is not None and cu_k is not None and max_q is not None and max_k is not None:
        q, k, v = _tokens(query), _tokens(key), _tokens(value)
        out = varlen_attn(q, k, v, cu_q, cu_k, int(max_q), int(max_k), scale=scaling,
                          window_size=window, softcap=cap)
    elif _is_packed(kwargs.get("position_ids"), b):
        cu, longest = _from_position_ids(kwargs["position_ids"], lq)
        if lq != lk:
            raise ValueError("scree attention: a packed batch (position_ids restarting) with a "
                             "KV cache is not supported")
        out = varlen_attn(_tokens(query), _tokens(key), _tokens(value), cu, cu, longest, longest,
                          scale=scaling, window_size=window, softcap=cap)
    else:
        dev = query.device
        cq = torch.arange(0, (b + 1) * lq, lq, dtype=torch.int32, device=dev)
        ck = torch.arange(0, (b + 1) * lk, lk, dtype=torch.int32, device=dev)
        out = varlen_attn(_tokens(query), _tokens(key), _tokens(value), cq, ck, lq, lk,
                          scale=scaling, window_size=window, softcap=cap)
    return out.view(b, lq, hq, d), None


def _padded(query, key, value, mask, scaling, window, softcap):
    """A padded batch: gather the real tokens (mask [B, L_k], True where
    real; the queries are its last L_q columns), attend, scatter back."""
    b, hq, lq, d = query.shape
    lk = key.shape[2]
    mask = mask[:, -lk:].to(torch.bool)
    len_k = mask.sum(-1, dtype=torch.int32)
    idx_k = mask.reshape(-1).nonzero().reshape(-1)
    k = key.transpose(1, 2).reshape(b * lk, key.shape[1], d)[idx_k]
    v = value.transpose(1, 2).reshape(b * lk, value.shape[1], d)[idx_k]
    mask_q = mask[:, -lq:]
    len_q = mask_q.sum(-1, dtype=torch.int32)
    idx_q = mask_q.reshape(-1).nonzero().reshape(-1)
    q = query.transpose(1, 2).reshape(b * lq, hq, d)[idx_q]
    out_unpad = varlen_attn(q, k, v, _cu(len_q), _cu(len_k), int(len_q.max()), int(len_k.max()),
                            scale=scaling, window_size=window, softcap=softcap)
    out = query.new_zeros((b * lq, hq, d))
    out[idx_q] = out_unpad
    return out.view(b, lq, hq, d)


_registered = False


def register():
    """Registers NAME with transformers' AttentionInterface and
    AttentionMaskInterface (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    AttentionInterface.register(NAME, scree_attention_forward)
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    _registered = True


register()


# -- patching a model ---------------------------------------------------------

# model_type -> (RMSNorm adds 1 to its weight (Gemma), MLP is SwiGLU)
_SUPPORTED = {
    "llama": (False, True), "mistral": (False, True), "qwen2": (False, True),
    "qwen3": (False, True), "gemma": (True, False), "gemma2": (True, False),
}


def _rms_forward(self, hidden_states):
    """LlamaRMSNorm's forward on scree.rms_norm (fp32 statistics, one
    rounding to the input's dtype; differentiable)."""
    n = hidden_states.shape[-1]
    return _rms_norm(hidden_states, [n], self.weight.to(hidden_states.dtype),
                    eps=float(self._scree_eps))


def _rms_forward_plus_one(self, hidden_states):
    """GemmaRMSNorm's forward (weight + 1) on scree.rms_norm."""
    n = hidden_states.shape[-1]
    return _rms_norm(hidden_states, [n], (1.0 + self.weight.float()).to(hidden_states.dtype),
                    eps=float(self._scree_eps))


def _mlp_forward(self, x):
    """LlamaMLP's forward with the SwiGLU on scree.swiglu (differentiable)."""
    return self.down_proj(_swiglu(self.gate_proj(x), self.up_proj(x)))


def _norms(model):
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("RMSNorm"):
            yield name, mod


def _mlps(model):
    for name, mod in model.named_modules():
        if type(mod).__name__.endswith("MLP") and all(
                hasattr(mod, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            yield name, mod


def apply(model, *, rms_norm=True, swiglu=True, attention=True, rope=False,
          cross_entropy=False):
    """Patches a loaded transformers model (LLaMA, Mistral, Qwen2, Qwen3;
    Gemma and Gemma 2 for the norms and attention) in place to run its
    RMSNorms on scree.rms_norm, its SwiGLU MLPs on scree.swiglu and its
    attention on scree (attn_implementation "scree"), as Liger-Kernel's
    apply_liger_kernel_to_llama does; all of them differentiable, so
    training runs scree's backward kernels. Returns the model.

    Everything is checked before anything is patched: an unsupported
    architecture or setting raises ValueError naming it and leaves the
    model as it was. rope=True and cross_entropy=True are refused for now
    (scree.rope and scree.cross_entropy are not differentiable yet; they
    would leave training half on scree). Patching twice is harmless."""
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype not in _SUPPORTED:
        raise ValueError(f"scree.hf.apply: model_type {mtype!r} is not supported; scree patches "
                         f"{', '.join(sorted(_SUPPORTED))}")
    plus_one, swiglu_mlp = _SUPPORTED[mtype]
    if rope:
        raise ValueError("scree.hf.apply: rope=True is not supported yet (scree.rope has no "
                         "backward registered); leave it False")
    if cross_entropy:
        raise ValueError("scree.hf.apply: cross_entropy=True is not supported yet "
                         "(scree.cross_entropy has no backward registered); leave it False")
    act = getattr(cfg, "hidden_act", None) or getattr(cfg, "hidden_activation", None)
    if swiglu and (not swiglu_mlp or act not in ("silu", "swish")):
        raise ValueError(f"scree.hf.apply: swiglu=True needs a SwiGLU MLP (hidden_act 'silu'); "
                         f"{mtype} has hidden_act {act!r}: pass swiglu=False")
    norms = list(_norms(model)) if rms_norm else []
    for name, mod in norms:
        eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
        if eps is None or not isinstance(getattr(mod, "weight", None), torch.Tensor):
            raise ValueError(f"scree.hf.apply: the RMSNorm {name!r} ({type(mod).__name__}) has "
                             "no weight or epsilon scree knows; pass rms_norm=False")
    mlps = list(_mlps(model)) if swiglu else []
    if rms_norm and not norms:
        raise ValueError(f"scree.hf.apply: no RMSNorm module found in {type(model).__name__}; "
                         "pass rms_norm=False")
    if swiglu and not mlps:
        raise ValueError(f"scree.hf.apply: no SwiGLU MLP module found in "
                         f"{type(model).__name__}; pass swiglu=False")
    if attention:
        register()
    # Nothing refused: patch.
    for _, mod in norms:
        mod._scree_eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
        mod.forward = types.MethodType(_rms_forward_plus_one if plus_one else _rms_forward, mod)
    for _, mod in mlps:
        mod.forward = types.MethodType(_mlp_forward, mod)
    if attention:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(NAME)
        else:
            cfg._attn_implementation = NAME
    return model


def from_pretrained(name, *, rms_norm=True, swiglu=True, attention=True, rope=False,
                    cross_entropy=False, **kwargs):
    """AutoModelForCausalLM.from_pretrained(name, **kwargs) with attention
    on scree, then apply(model, ...)."""
    from transformers import AutoModelForCausalLM
    if attention:
        kwargs.setdefault("attn_implementation", NAME)
    model = AutoModelForCausalLM.from_pretrained(name, **kwargs)
    return apply(model, rms_norm=rms_norm, swiglu=swiglu, attention=attention, rope=rope,
                 cross_entropy=cross_entropy)
