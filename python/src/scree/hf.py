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
scree (RMSNorm, the SwiGLU MLP, attention, and on request RoPE and the
training loss as a fused linear cross-entropy); from_pretrained(name, ...)
loads and patches in one call.
"""
import sys
import types

import torch

from ._ops import (_is_compiling, linear_cross_entropy as _linear_cross_entropy,
                   rms_norm as _rms_norm, rope as _rope, swiglu as _swiglu, varlen_attn)

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


def _rope_table(cos, sin, b, s):
    """The table scree.rope reads for HF's cos and sin [B or 1, S,
    rotary_dim] (halves duplicated): each token's cos and sin halves,
    float32 [b * s, rotary_dim]."""
    rd = cos.shape[-1]
    half = rd // 2
    table = torch.cat((cos[..., :half], sin[..., :half]), -1).float()
    return table.expand(b, s, rd).reshape(b * s, rd)


def _make_rotary_pos_emb(original):
    """A modeling module's apply_rotary_pos_emb on scree.rope; `original`
    (HF's) for the layouts it does not take (unsqueeze_dim other than 1).

    Every layer of a forward gets the same cos and sin (the model's rotary
    embedding, computed once): the table is built for the first and kept
    for the others, keyed on those tensors (held, so that their memory and
    id cannot be reused while the entry lives) with their data pointers,
    versions (an in-place change) and shapes, and the batch; the next
    forward's new cos replaces it. Not cached while torch.compile traces
    (the compiled graph holds its own table)."""
    cache = {}

    def table_of(cos, sin, b, s):
        if _is_compiling():
            return _rope_table(cos, sin, b, s)
        key = (cos.data_ptr(), cos._version, tuple(cos.shape), sin.data_ptr(), sin._version,
               tuple(sin.shape), b, s)
        if cache.get("cos") is cos and cache.get("sin") is sin and cache.get("key") == key:
            return cache["table"]
        cache.clear()
        table = _rope_table(cos, sin, b, s)
        cache.update(cos=cos, sin=sin, key=key, table=table)
        return table

    def scree_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        """HF's apply_rotary_pos_emb (rotate-half) on scree.rope, in one
        launch for q and k: q [B, H_q, S, D], k [B, H_kv, S, D] (views of the
        [B, S, H, D] projections), cos and sin [B or 1, S, rotary_dim] with
        their halves duplicated. The table scree reads is each token's cos
        and sin halves (float32 [B * S, rotary_dim]) at positions
        0 .. B * S - 1. Differentiable in q and k."""
        if unsqueeze_dim != 1 or cos.dim() != 3 or q.dim() != 4:
            return original(q, k, cos, sin, position_ids, unsqueeze_dim)
        b, hq, s, d = q.shape
        hk = k.shape[1]
        rd = cos.shape[-1]
        table = table_of(cos, sin, b, s)
        pos = torch.arange(b * s, device=q.device)
        rq, rk = _rope(q.transpose(1, 2).reshape(b * s, hq, d),
                       k.transpose(1, 2).reshape(b * s, hk, d), positions=pos, cos_sin=table,
                       rotary_dim=rd)
        return rq.view(b, s, hq, d).transpose(1, 2), rk.view(b, s, hk, d).transpose(1, 2)

    scree_rotary_pos_emb._scree_original = original
    scree_rotary_pos_emb._scree_table_cache = cache
    return scree_rotary_pos_emb


def _modeling_module(model):
    """The modeling module of a model's class (whose apply_rotary_pos_emb
    its attention layers call)."""
    return sys.modules.get(type(model).__module__)


def _lce_forward(self, input_ids=None, attention_mask=None, position_ids=None,
                 past_key_values=None, inputs_embeds=None, labels=None, use_cache=None,
                 logits_to_keep=0, **kwargs):
    """The CausalLM's forward with, in training with labels (or
    shift_labels), the loss of transformers' ForCausalLMLoss computed by
    scree.linear_cross_entropy on the last hidden states and lm_head's
    weight, never materialising the logits: the returned logits are then
    None. Otherwise (eval, or no labels) the model's own forward. As HF's,
    return_dict=False (passed, or the config's return_dict) returns the
    output's tuple of the fields that are not None (loss first)."""
    shift_labels = kwargs.get("shift_labels")
    if not (self.training and (labels is not None or shift_labels is not None)):
        return type(self).forward(self, input_ids=input_ids, attention_mask=attention_mask,
                                  position_ids=position_ids, past_key_values=past_key_values,
                                  inputs_embeds=inputs_embeds, labels=labels,
                                  use_cache=use_cache, logits_to_keep=logits_to_keep, **kwargs)
    from transformers.modeling_outputs import CausalLMOutputWithPast
    return_dict = kwargs.pop("return_dict", None)
    if return_dict is None:
        return_dict = getattr(self.config, "return_dict", True)
    outputs = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, past_key_values=past_key_values,
                         inputs_embeds=inputs_embeds, use_cache=use_cache, return_dict=True,
                         **kwargs)
    hidden = outputs.last_hidden_state
    keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    hidden = hidden[:, keep, :]
    ignore_index = kwargs.get("ignore_index", -100)
    if shift_labels is None:  # tokens < n predict n
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    h = hidden.reshape(-1, hidden.shape[-1])
    target = shift_labels.reshape(-1).to(h.device)
    num_items = kwargs.get("num_items_in_batch")
    head = self.lm_head
    if num_items is None:
        loss = _linear_cross_entropy(h, head.weight, target, head.bias, ignore_index=ignore_index,
                                     reduction="mean")
    else:
        loss = _linear_cross_entropy(h, head.weight, target, head.bias, ignore_index=ignore_index,
                                     reduction="sum")
        if torch.is_tensor(num_items):
            num_items = num_items.to(loss.device)
        loss = loss / num_items
    out = CausalLMOutputWithPast(loss=loss, logits=None, past_key_values=outputs.past_key_values,
                                 hidden_states=outputs.hidden_states,
                                 attentions=outputs.attentions)
    return out if return_dict else out.to_tuple()


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
    Gemma and Gemma 2 for the norms, RoPE and attention, Gemma also for the
    loss) in place to run its RMSNorms on scree.rms_norm, its SwiGLU MLPs
    on scree.swiglu and its attention on scree (attn_implementation
    "scree"), as Liger-Kernel's apply_liger_kernel_to_llama does; all of
    them differentiable, so training runs scree's backward kernels.
    Returns the model.

    rope=True replaces the modeling module's apply_rotary_pos_emb (e.g.
    transformers.models.llama.modeling_llama.apply_rotary_pos_emb, which
    the attention layers call) with one on scree.rope, as Liger-Kernel
    does: that module function is shared, so every model of that type in
    the process runs it, patched or not. cross_entropy=True replaces this
    model's forward: in training with labels, the loss is
    scree.linear_cross_entropy over the last hidden states and lm_head,
    and the returned logits are None (they are never materialised); in
    eval or without labels, the model's own forward.

    Everything is checked before anything is patched: an unsupported
    architecture or setting raises ValueError naming it and leaves the
    model as it was. Patching twice is harmless."""
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype not in _SUPPORTED:
        raise ValueError(f"scree.hf.apply: model_type {mtype!r} is not supported; scree patches "
                         f"{', '.join(sorted(_SUPPORTED))}")
    plus_one, swiglu_mlp = _SUPPORTED[mtype]
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
    modeling = _modeling_module(model) if rope else None
    if rope and not callable(getattr(modeling, "apply_rotary_pos_emb", None)):
        raise ValueError(f"scree.hf.apply: rope=True needs the modeling module of "
                         f"{type(model).__name__} to define apply_rotary_pos_emb; pass rope=False")
    if cross_entropy:
        head = getattr(model, "lm_head", None)
        if not isinstance(head, torch.nn.Linear) or not isinstance(
                getattr(model, "model", None), torch.nn.Module):
            raise ValueError(f"scree.hf.apply: cross_entropy=True needs a CausalLM with a "
                             f"linear lm_head over model ({type(model).__name__} is not one); "
                             "pass cross_entropy=False")
        if getattr(cfg, "final_logit_softcapping", None):
            raise ValueError(f"scree.hf.apply: cross_entropy=True does not take "
                             f"final_logit_softcapping ({mtype}: "
                             f"{cfg.final_logit_softcapping}); pass cross_entropy=False")
    if attention:
        register()
    # Nothing refused: patch.
    for _, mod in norms:
        mod._scree_eps = getattr(mod, "variance_epsilon", getattr(mod, "eps", None))
        mod.forward = types.MethodType(_rms_forward_plus_one if plus_one else _rms_forward, mod)
    for _, mod in mlps:
        mod.forward = types.MethodType(_mlp_forward, mod)
    if rope and not hasattr(modeling.apply_rotary_pos_emb, "_scree_original"):
        modeling.apply_rotary_pos_emb = _make_rotary_pos_emb(modeling.apply_rotary_pos_emb)
    if cross_entropy:
        model.forward = types.MethodType(_lce_forward, model)
    if attention:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(NAME)
        else:
            cfg._attn_implementation = NAME
    return model


def unapply_rope(model):
    """Gives the modeling module of model's type back its own
    apply_rotary_pos_emb (undoes apply(..., rope=True) for every model of
    that type). Harmless when it is not patched."""
    modeling = _modeling_module(model)
    fn = getattr(modeling, "apply_rotary_pos_emb", None)
    original = getattr(fn, "_scree_original", None)
    if original is not None:
        modeling.apply_rotary_pos_emb = original


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
