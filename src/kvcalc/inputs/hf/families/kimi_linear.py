"""Kimi-Linear (Moonshot AI): Kimi Delta Attention (KDA) layers between MLA layers.

transformers 5.24 (models/kimi_linear/configuration_kimi_linear.py, modeling_kimi_linear.py):

- Layers. ``KimiLinearConfig.__post_init__``: an explicit ``layer_types`` ("full_attention" /
  "linear_attention") wins; else ``linear_attn_config`` lists the MLA layers (``full_attn_layers``)
  and the KDA layers (``kda_layers``), **1-based**; without both lists every layer i with
  ``i and i % 4 == 0`` is MLA and the rest KDA. vLLM reads only the lists
  (vllm/transformers_utils/configs/kimi_linear.py @ 6b065994: ``is_kda_layer(i)`` is
  ``(i + 1) in linear_attn_config["kda_layers"]``, no list at all making every layer MLA), so a
  config without the lists is refused here: the two engines would build different models.
- KDA geometry. ``linear_attn_config``'s ``num_heads``, ``head_dim`` and ``short_conv_kernel_size``
  win over the top-level ``linear_num_heads``, ``linear_head_dim`` and ``linear_conv_kernel_dim``
  (a file re-saved by transformers has both), which default to 32, 128 and 4.
- KDA cache (``KimiLinearDeltaAttention``): one causal depthwise conv over q, k and v, each of
  ``num_heads x head_dim`` channels (``conv_dim = 3 x qkv_dim``), and one ``head_dim x head_dim``
  recurrent matrix per head, stored ``.to(torch.float32)`` whatever the model dtype. transformers'
  ``LinearAttentionLayer`` keeps the whole kernel of the conv; vLLM keeps kernel - 1
  (vllm/model_executor/layers/mamba/mamba_utils.py @ 2afe1e85, ``kda_state_shape``: q, k and v
  convs of ``(kernel - 1, heads x head_dim)`` and a ``(heads, head_dim, head_dim)`` recurrent
  state; ``kda_state_dtype``: the convs in the model (mamba cache) dtype, the recurrent state
  ``torch.float32``), as SGLang does (python/sglang/srt/configs/mamba_utils.py @ 288330db,
  ``KimiLinearStateShape``; conv bf16, SSM float32) and llama.cpp (``LLM_ARCH_KIMI_LINEAR``:
  ``n_embd_r = 3 x (d_conv - 1) x heads x head_dim``, ``n_embd_s = head_dim^2 x heads``, f32).
  So the recurrent state is float32 in every engine (``recurrent_dtype``).
- MLA layers (``KimiLinearAttention``) cache the latent ``kv_lora_rank`` and the shared
  ``qk_rope_head_dim`` key per token, as DeepSeek's (vLLM kimi_linear.py @ 8744bb09,
  ``KimiMLAAttention`` through ``MultiHeadLatentAttentionWrapper``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvcalc.dtypes import FP32
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, KV_HEAD_KEYS, LAYER_KEYS, checked_layers, family_layer_types
from kvcalc.inputs.hf.guard import unmodelled
from kvcalc.spec import LatentCache, LayerCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader

_SUB = "linear_attn_config"
_MLA, _KDA = "full_attention", "linear_attention"

# KimiLinearConfig's class defaults (transformers 5.24) for what sizes the cache.
_MLA_DEFAULTS = {"num_attention_heads": 32, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                 "v_head_dim": 128}  # fmt: skip
# KDA geometry: (key in linear_attn_config, top-level key, class default).
_KDA_FIELDS = {
    "heads": ("num_heads", "linear_num_heads", 32),
    "head_dim": ("head_dim", "linear_head_dim", 128),
    "kernel": ("short_conv_kernel_size", "linear_conv_kernel_dim", 4),
}
_SUB_READ = frozenset({"full_attn_layers", "kda_layers", "num_heads", "head_dim", "short_conv_kernel_size"})

# Fields that size no cache: head_dim (hidden_size / heads; MLA layers cache the latent, KDA layers
# take linear_attn_config's head_dim), qk_head_dim (derived), the MoE placement and routing.
_NOT_CACHE = ("head_dim", "qk_head_dim", "mlp_layer_types", "first_k_dense_replace", "moe_layer_freq",
              "use_grouped_topk")  # fmt: skip


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    """One entry per layer, in order: a KDA state or an MLA latent."""
    layers = checked_layers(r, r.positive_int(LAYER_KEYS))
    sub = _linear_attn_config(r)
    kinds = _kinds(r, layers, sub)
    r.considered(*_NOT_CACHE)
    mla, heads = _mla(r, any(kind == _MLA for kind in kinds))
    if _KDA not in kinds:
        r.considered(*(top for _key, top, _default in _KDA_FIELDS.values()))  # no KDA layer to size
        return [mla] * layers, layers, heads
    kda = _kda(r, sub)
    return [kda if kind == _KDA else mla for kind in kinds], layers, heads


def _linear_attn_config(r: Reader) -> Mapping[str, Any]:
    value = r.raw.get(_SUB)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config field '{r.where}{_SUB}' must be an object")
    # Its other keys are checked by the guard like top-level ones.
    r.unmodelled += unmodelled(value, set(_SUB_READ), f"{r.where}{_SUB}.")
    return value


def _kinds(r: Reader, layers: int, sub: Mapping[str, Any]) -> list[str]:
    listed = _listed_kinds(r, layers, sub)
    if r.raw.get("layer_types") is not None:
        kinds = family_layer_types(r, layers, (_MLA, _KDA), "kimi_linear")
        if listed is not None and listed != kinds:
            raise ConfigError(
                f"config field '{r.where}layer_types' disagrees with '{r.where}{_SUB}': transformers follows "
                "layer_types, vLLM the lists; kvcalc cannot tell which is meant"
            )
        return kinds
    if listed is None:
        raise ConfigError(
            f"config field '{r.where}{_SUB}' has no 'kda_layers' and 'full_attn_layers': transformers then makes "
            "the layers of 0-based index 4, 8, 12, ... MLA and the rest KDA, vLLM makes every layer MLA; kvcalc cannot "
            "tell which is meant"
        )
    return listed


def _listed_kinds(r: Reader, layers: int, sub: Mapping[str, Any]) -> list[str] | None:
    """The layers ``full_attn_layers`` and ``kda_layers`` name (1-based), each layer exactly once;
    None without the two lists."""
    full, kda = sub.get("full_attn_layers"), sub.get("kda_layers")
    if full is None and kda is None:
        return None
    if full is None or kda is None:
        missing = "full_attn_layers" if full is None else "kda_layers"
        raise ConfigError(f"config field '{r.where}{_SUB}.{missing}' is missing (vLLM requires both lists)")
    kinds: list[str | None] = [None] * layers
    for key, kind, numbers in (("full_attn_layers", _MLA, full), ("kda_layers", _KDA, kda)):
        where = f"{r.where}{_SUB}.{key}"
        if not isinstance(numbers, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            raise ConfigError(f"config field '{where}' must be a list of layer numbers")
        for number in numbers:
            if not 1 <= number <= layers:
                raise ConfigError(f"config field '{where}' holds layer {number}; layers are numbered 1 to {layers}")
            if kinds[number - 1] is not None:
                raise ConfigError(f"config field '{where}' names layer {number} twice or in both lists")
            kinds[number - 1] = kind
    unnamed = [i + 1 for i, kind in enumerate(kinds) if kind is None]
    if unnamed:
        raise ConfigError(f"config field '{r.where}{_SUB}' names layer {unnamed[0]} in neither list")
    return [kind for kind in kinds if kind is not None]


def _mla(r: Reader, used: bool) -> tuple[LatentCache, int]:
    """KimiLinearAttention's cache: the latent and the shared RoPE key of every token."""
    # The latent is shared by every head: the KV head count sizes nothing.
    r.considered(*KV_HEAD_KEYS)
    heads = r.positive_int(HEAD_KEYS, default=_MLA_DEFAULTS["num_attention_heads"])
    rope = r.positive_int("qk_rope_head_dim", default=_MLA_DEFAULTS["qk_rope_head_dim"])
    latent = LatentCache(
        latent_dim=r.positive_int("kv_lora_rank", default=_MLA_DEFAULTS["kv_lora_rank"]),
        rope_dim=rope,
        k_head_dim=r.positive_int("qk_nope_head_dim", default=_MLA_DEFAULTS["qk_nope_head_dim"]) + rope,
        v_head_dim=r.positive_int("v_head_dim", default=_MLA_DEFAULTS["v_head_dim"]),
    )
    if used:
        _vllm_mla_notes(r)
    else:
        r.considered("mla_use_nope")
    return latent, heads


def _vllm_mla_notes(r: Reader) -> None:
    """vLLM's KimiMLAAttention asserts ``use_nope is True`` and ``q_lora_rank is None``; transformers
    reads no mla_use_nope and supports a q LoRA. Neither changes the latent cached."""
    if r.raw.get("mla_use_nope") is not True:
        r.notes.append(f"'{r.where}mla_use_nope' is not true: vLLM's kimi_linear.py refuses such a model")
    if r.raw.get("q_lora_rank") is not None:
        r.notes.append(f"'{r.where}q_lora_rank' is set: vLLM's kimi_linear.py refuses such a model")


def _kda(r: Reader, sub: Mapping[str, Any]) -> StateCache:
    heads, head_dim, kernel = (_kda_field(r, sub, *_KDA_FIELDS[name]) for name in ("heads", "head_dim", "kernel"))
    qkv = heads * head_dim
    return StateCache(
        family="linear_attention",
        conv_channels=3 * qkv,  # q, k and v
        conv_kernel=kernel,
        recurrent_elements=heads * head_dim * head_dim,
        recurrent_dtype=FP32,
    )


def _kda_field(r: Reader, sub: Mapping[str, Any], key: str, top: str, default: int) -> int:
    """``linear_attn_config[key]``, else the top-level ``top``, else the class default (noted)."""
    if sub.get(key) is None:
        return r.positive_int(top, default=default)
    r.considered(top)  # transformers and vLLM both take linear_attn_config's value
    return r.check_positive(f"{_SUB}.{key}", sub[key])
