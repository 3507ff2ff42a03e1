"""Checkpoints in mamba_ssm's own config format (state-spaces/mamba-2.8b, mamba2-2.7b, ...): no
``model_type``; ``d_model``, ``n_layer`` and an ``ssm_cfg`` object.

Read from state-spaces/mamba @ e9594ce (mamba_ssm/models/config_mamba.py MambaConfig,
models/mixer_seq_simple.py create_block, modules/mamba_simple.py Mamba, modules/mamba2.py Mamba2,
modules/mha.py MHA). A layer listed in ``attn_layer_idx`` is an MHA block (``attn_cfg``: num_heads,
num_heads_kv defaulting to num_heads, head_dim defaulting to d_model / num_heads, d_conv 0)
caching K and V per token, and with d_conv > 0 also a conv state over its q, k and v
(head_dim x (num_heads + 2 x num_heads_kv) channels); every other layer is the mixer
``ssm_cfg["layer"]`` names, "Mamba1" by default. Mamba (d_state 16, d_conv 4, expand 2 by default)
keeps a conv over expand x d_model channels and a d_inner x d_state state; Mamba2 (d_state 128,
d_conv 4, expand 2, headdim 64, ngroups 1; d_ssm, the channels the SSM runs on, d_inner by
default) a conv over d_ssm + 2 x ngroups x d_state channels and nheads x headdim x d_state =
d_ssm x d_state. Every conv state keeps the whole kernel, d_conv columns (each module's
``allocate_inference_cache``: mamba_simple.py lines 255-266, mamba2.py 345-355, mha.py 110-122),
not the d_conv - 1 past inputs the theoretical figure counts for other formats. No engine loads
this format (transformers, vLLM and the rest read the -hf repos' configs), so only the
theoretical figure is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kvcalc.errors import ConfigError
from kvcalc.spec import AttentionCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache

MODEL_TYPE = "mamba_ssm"
_MIXERS: dict[str, dict[str, int]] = {
    "Mamba1": {"d_state": 16, "d_conv": 4, "expand": 2},
    "Mamba2": {"d_state": 128, "d_conv": 4, "expand": 2, "headdim": 64, "ngroups": 1},
}
# Arguments of the mixers' __init__ (ssm_cfg) and of MHA's (attn_cfg) that size weights or tune
# numerics only: accepted, not read.
_SSM_NOT_SHAPING = frozenset({
    "layer", "dt_rank", "dt_min", "dt_max", "dt_init", "dt_scale", "dt_init_floor", "dt_limit", "conv_bias",
    "bias", "use_fast_path", "chunk_size", "rmsnorm", "norm_before_gate", "D_has_hdim", "A_init_range",
})  # fmt: skip
_ATTN_NOT_SHAPING = frozenset({
    "rotary_emb_dim", "rotary_emb_base", "rotary_emb_interleaved", "causal", "softmax_scale", "qkv_proj_bias",
    "out_proj_bias", "mlp_dim",
})  # fmt: skip
# The arguments that size what each object's layers keep: each object has its own (MHA's d_conv is
# its qkv conv, not the mixers'); d_ssm, headdim and ngroups are Mamba2's alone.
_SSM_SHAPING = frozenset({"d_state", "d_conv", "expand", "headdim", "ngroups", "d_ssm"})
_ATTN_SHAPING = frozenset({"num_heads", "num_heads_kv", "head_dim", "d_conv"})


def is_mamba_ssm(config: Mapping[str, Any]) -> bool:
    """Whether a config without model_type is in mamba_ssm's own format."""
    return "model_type" not in config and "d_model" in config and "n_layer" in config and "ssm_cfg" in config


def read(r: Reader) -> Layout:
    layers = r.check_positive("n_layer", r.raw["n_layer"])
    hidden = r.check_positive("d_model", r.raw["d_model"])
    attention_layers = set(r.int_list("attn_layer_idx")) if r.raw.get("attn_layer_idx") else set()
    outside = sorted(i for i in attention_layers if not 0 <= i < layers)
    if outside:
        raise ConfigError(f"config field 'attn_layer_idx' holds layer {outside[0]}, outside the {layers} layers")
    ssm = _object(r, "ssm_cfg", _SSM_SHAPING, _SSM_NOT_SHAPING)
    mixer = ssm.get("layer", "Mamba1")
    if mixer not in _MIXERS:
        raise ConfigError(f"config field 'ssm_cfg.layer' is {mixer!r}; mamba_ssm's mixers are 'Mamba1' and 'Mamba2'")
    state = _state(r, ssm, mixer, hidden)
    attention = _attention(r, hidden) if attention_layers else None
    heads = attention[1] if attention is not None else None
    qkv_conv = attention[2] if attention is not None else None
    r.considered("d_intermediate", "rms_norm", "residual_in_fp32", "fused_add_norm", "pad_vocab_size_multiple",
                 "tie_embeddings", "vocab_size")  # fmt: skip
    caches: list[LayerCache] = [
        attention[0] if attention is not None and i in attention_layers else state for i in range(layers)
    ]
    if qkv_conv is not None:
        # An MHA layer with a conv keeps two things: its K/V (entry i) and its qkv conv state.
        ordered = sorted(attention_layers)
        caches += [qkv_conv] * len(ordered)
        r.entry_layers = [*range(layers), *ordered]
    return caches, layers, heads


def _object(r: Reader, key: str, shaping: frozenset[str], not_shaping: frozenset[str]) -> dict[str, Any]:
    value = r.raw.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"config field '{key}' must be an object")
    unknown = sorted(k for k in value if k not in shaping and k not in not_shaping)
    if unknown:
        raise ConfigError(f"config field '{key}.{unknown[0]}' is not one kvcalc knows how mamba_ssm reads")
    return dict(value)


def _whole(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"config field '{key}' must be a positive integer, got {value!r}")
    return value


def _state(r: Reader, ssm: dict[str, Any], mixer: str, hidden: int) -> StateCache:
    given = {k: _whole(f"ssm_cfg.{k}", v) for k, v in ssm.items() if k in _SSM_SHAPING}
    takes = set(_MIXERS[mixer]) | ({"d_ssm"} if mixer == "Mamba2" else set())
    foreign = sorted(set(given) - takes)
    if foreign:
        # mamba_simple.py's Mamba.__init__ has no such argument (mamba_ssm raises a TypeError).
        raise ConfigError(
            f"config field 'ssm_cfg.{foreign[0]}' is Mamba2's; mamba_ssm's {mixer} takes no such argument"
        )
    values = {**_MIXERS[mixer], **given}
    for key in sorted(set(_MIXERS[mixer]) - set(given)):
        r.notes.append(f"'ssm_cfg.{key}' not in config; used mamba_ssm's {mixer} default {values[key]}")
    d_state, d_conv, d_inner = values["d_state"], values["d_conv"], values["expand"] * hidden
    if mixer == "Mamba1":
        # mamba_simple.py allocate_inference_cache: conv_state (batch, d_model x expand, d_conv),
        # ssm_state (batch, d_model x expand, d_state).
        return StateCache(
            "mamba", conv_channels=d_inner, conv_kernel=d_conv, recurrent_elements=d_inner * d_state, whole_kernel=True
        )
    # mamba2.py __init__: d_ssm = d_inner if d_ssm is None, nheads = d_ssm // headdim (asserted exact),
    # conv1d over d_ssm + 2 x ngroups x d_state channels; the gated MLP takes d_inner - d_ssm.
    if "d_ssm" in given:
        d_ssm = given["d_ssm"]
        if d_ssm > d_inner:
            raise ConfigError(f"config field 'ssm_cfg.d_ssm' ({d_ssm}) exceeds expand x d_model ({d_inner})")
        where = f"ssm_cfg.d_ssm ({d_ssm})"
    else:
        d_ssm, where = d_inner, f"expand x d_model ({d_inner})"
        r.notes.append(f"'ssm_cfg.d_ssm' not in config; used mamba_ssm's Mamba2 default expand x d_model ({d_inner})")
    if d_ssm % values["headdim"]:
        raise ConfigError(f"config field 'ssm_cfg.headdim' ({values['headdim']}) must divide {where}")
    # allocate_inference_cache: conv_state (batch, conv channels, d_conv), ssm_state
    # (batch, nheads, headdim, d_state) = d_ssm x d_state per sequence.
    return StateCache(
        "mamba",
        conv_channels=d_ssm + 2 * values["ngroups"] * d_state,
        conv_kernel=d_conv,
        recurrent_elements=d_ssm * d_state,
        whole_kernel=True,
    )


def _attention(r: Reader, hidden: int) -> tuple[AttentionCache, int, StateCache | None]:
    """The MHA layers' K/V, their query heads, and their qkv conv state when attn_cfg.d_conv > 0."""
    cfg = _object(r, "attn_cfg", _ATTN_SHAPING, _ATTN_NOT_SHAPING)
    if "num_heads" not in cfg:
        raise ConfigError("config field 'attn_cfg.num_heads' is missing: the attention layers need it")
    heads = _whole("attn_cfg.num_heads", cfg["num_heads"])
    kv = _whole("attn_cfg.num_heads_kv", cfg.get("num_heads_kv", heads))
    if "head_dim" in cfg:
        head_dim = _whole("attn_cfg.head_dim", cfg["head_dim"])
    elif hidden % heads:
        raise ConfigError(f"config field 'd_model' ({hidden}) is not divisible by attn_cfg.num_heads ({heads})")
    else:
        head_dim = hidden // heads
    if heads % kv:
        raise ConfigError(f"config field 'attn_cfg.num_heads_kv' ({kv}) must divide the {heads} heads")
    attention = AttentionCache(kv_heads=kv, k_head_dim=head_dim, v_head_dim=head_dim)
    if "d_conv" not in cfg:
        r.notes.append("'attn_cfg.d_conv' not in config; used mamba_ssm's MHA default 0 (no conv state)")
    d_conv = cfg.get("d_conv", 0)
    if isinstance(d_conv, bool) or not isinstance(d_conv, int) or d_conv < 0:
        raise ConfigError(f"config field 'attn_cfg.d_conv' must be a non-negative integer, got {d_conv!r}")
    if d_conv == 0:
        return attention, heads, None
    # mha.py: conv1d over qkv_dim = head_dim x (num_heads + 2 x num_heads_kv) channels, and
    # allocate_inference_cache's conv_state (batch, qkv_dim, d_conv) beside the KV cache.
    conv = StateCache(
        "short_conv",
        conv_channels=head_dim * (heads + 2 * kv),
        conv_kernel=d_conv,
        recurrent_elements=0,
        whole_kernel=True,
    )
    return attention, heads, conv
