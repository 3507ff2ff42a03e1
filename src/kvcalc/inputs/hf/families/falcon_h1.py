"""Falcon-H1 (TII): attention and a Mamba-2 mixer side by side in every decoder layer.

transformers 5.24 (models/falcon_h1/configuration_falcon_h1.py, modeling_falcon_h1.py): every layer
is "hybrid" (FalconH1Config.layers_block_type), a ``FalconH1DecoderLayer`` with a
``FalconH1Attention`` and a ``FalconH1Mixer``; ``DynamicCache(config)`` gives each one a
``LinearAttentionAndFullAttentionLayer`` (cache_utils.py) holding K/V of every token and the
Mamba-2 conv and SSM states. vLLM builds the same two caches per layer (falcon_h1.py @ 59e45989:
``FalconH1ParallelHybrid`` = an ``Attention`` and a ``MambaMixer2``), so each layer is two kvcalc
entries: the attention entries first, one per layer in order (the probe pairs them with
transformers' layers), then one Mamba-2 state entry per layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import HEAD_KEYS, HIDDEN_KEYS, LAYER_KEYS, checked_layers, recurrent_dtype
from kvcalc.spec import AttentionCache, LayerCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader

# FalconH1Config's class defaults (transformers 5.24) for fields a trimmed config may omit.
_DEFAULTS = {
    "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "num_key_value_heads": 8,
    "mamba_d_ssm": 1024, "mamba_n_heads": 128, "mamba_n_groups": 1, "mamba_d_state": 256, "mamba_d_conv": 4,
    "mamba_expand": 2,
}  # fmt: skip

# Fields that size weights or tune numerics, not what a layer keeps: the muP multipliers, biases,
# the gated norm, the scan's chunking and time-step clamp, the MLP beside the mixer.
_NOT_CACHE = (
    "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "mamba_norm_before_gate", "mamba_rms_norm",
    "mamba_use_mlp", "projectors_bias", "time_step_limit", "ssm_multipliers", "ssm_in_multiplier",
    "ssm_out_multiplier", "attention_in_multiplier", "attention_out_multiplier", "key_multiplier",
    "mlp_multipliers", "lm_head_multiplier", "embedding_multiplier", "num_logits_to_keep",
)  # fmt: skip


def read(r: Reader) -> tuple[list[LayerCache], int, int | None]:
    """Attention entries for every layer, then a Mamba-2 state entry for every layer."""
    layers = checked_layers(r, _int(r, LAYER_KEYS))
    _layer_list_notes(r)
    r.considered(*_NOT_CACHE)
    attention, heads = _attention(r)
    state = _mamba2_state(r)
    r.entry_layers = [*range(layers), *range(layers)]
    r.notes.append(f"every one of the {layers} falcon_h1 layers keeps K/V and a Mamba-2 state: it counts in both rows")
    return [*([attention] * layers), *([state] * layers)], layers, heads


def _int(r: Reader, keys: tuple[str, ...] | str) -> int:
    names = (keys,) if isinstance(keys, str) else keys
    return r.positive_int(names, default=next((_DEFAULTS[k] for k in names if k in _DEFAULTS), None))


def _layer_list_notes(r: Reader) -> None:
    # FalconH1Config has no layer list of its own (layers_block_type is a property: "hybrid" for
    # every layer), and neither it nor vLLM's falcon_h1.py reads attn_layer_indices (null in the
    # published files): every layer has attention and a Mamba-2 mixer whatever these say.
    for key in ("attn_layer_indices", "layers_block_type", "layer_types"):
        if r.has(key):
            r.notes.append(
                f"'{r.where}{key}' is ignored: transformers' FalconH1Config and vLLM give every falcon_h1 layer "
                "both attention and a Mamba-2 mixer"
            )
    r.considered("attn_layer_indices", "layers_block_type", "layer_types")


def _attention(r: Reader) -> tuple[AttentionCache, int]:
    """FalconH1Attention: ``head_dim`` from the config, else hidden_size // heads; K/V of
    num_key_value_heads (FalconH1Config: 8 when absent, the query heads when null)."""
    heads = _int(r, HEAD_KEYS)
    if r.has("head_dim"):
        head_dim = r.check_positive("head_dim", r.raw["head_dim"])
    else:
        hidden = _int(r, HIDDEN_KEYS)
        if hidden % heads:
            raise ConfigError(
                f"config field '{r.where}hidden_size' ({hidden}) is not divisible by the {heads} attention heads "
                "and no 'head_dim' is given"
            )
        head_dim = hidden // heads
    if "num_key_value_heads" in r.raw and r.raw["num_key_value_heads"] is None:
        r.notes.append(f"'{r.where}num_key_value_heads' is null: FalconH1Config uses the {heads} query heads")
        kv = heads
    else:
        kv = _int(r, "num_key_value_heads")
    if kv > heads or heads % kv:
        raise ConfigError(f"config field '{r.where}num_key_value_heads' ({kv}) must divide the {heads} query heads")
    return AttentionCache(kv_heads=kv, k_head_dim=head_dim, v_head_dim=head_dim), heads


def _mamba2_state(r: Reader) -> StateCache:
    """FalconH1Mixer (modeling_falcon_h1.py): intermediate d_ssm = mamba_d_ssm (mamba_expand x
    hidden_size when null), conv over d_ssm + 2 x n_groups x d_state channels, SSM state
    (n_heads, d_head, d_state). vLLM sizes the same (FalconH1ForCausalLM.get_mamba_state_shape_from_config
    -> MambaStateShapeCalculator.mamba2_state_shape)."""
    d_ssm = _d_ssm(r)
    n_heads = _int(r, "mamba_n_heads")
    d_head = _d_head(r, d_ssm, n_heads)
    d_state = _int(r, "mamba_d_state")
    groups = _int(r, "mamba_n_groups")
    return StateCache(
        family="mamba",
        conv_channels=d_ssm + 2 * groups * d_state,
        conv_kernel=_int(r, "mamba_d_conv"),
        recurrent_elements=n_heads * d_head * d_state,
        recurrent_dtype=recurrent_dtype(r),
    )


def _d_ssm(r: Reader) -> int:
    if "mamba_d_ssm" in r.raw and r.raw["mamba_d_ssm"] is None:
        # FalconH1Config: an explicit null means mamba_expand x hidden_size.
        return _int(r, "mamba_expand") * _int(r, HIDDEN_KEYS)
    r.considered("mamba_expand")  # sizes nothing once mamba_d_ssm is given
    return _int(r, "mamba_d_ssm")


def _d_head(r: Reader, d_ssm: int, n_heads: int) -> int:
    """mamba_d_head, or "auto" (the class default): d_ssm // n_heads. FalconH1Config.validate_architecture
    refuses a head width whose n_heads x d_head is not d_ssm."""
    key = f"{r.where}mamba_d_head"
    value = r.raw.get("mamba_d_head", "auto")
    if value == "auto":
        if d_ssm % n_heads:
            raise ConfigError(f"config field '{r.where}mamba_n_heads' ({n_heads}) must divide mamba_d_ssm ({d_ssm})")
        return d_ssm // n_heads
    d_head = r.check_positive("mamba_d_head", value)
    if d_head * n_heads != d_ssm:
        raise ConfigError(
            f"config field '{key}' ({d_head}) x mamba_n_heads ({n_heads}) must equal mamba_d_ssm ({d_ssm}), "
            "as FalconH1Config requires"
        )
    return d_head
