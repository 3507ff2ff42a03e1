"""Nemotron-H (NVIDIA, model type ``nemotron_h``): each layer a Mamba-2 mixer, attention, an MLP or a MoE.

Read from transformers 5.24 (models/nemotron_h/configuration_nemotron_h.py, modeling_nemotron_h.py):

- Layers. ``NemotronHConfig.__post_init__`` takes an explicit list (``layers_block_type``, alias
  ``layer_types``), else the letters of ``hybrid_override_pattern``; the model has as many layers
  as the list, whatever ``num_hidden_layers`` says. MLP and MoE blocks cache nothing.
- Attention (``NemotronHAttention``): ``config.head_dim``, a class default, not hidden_size / heads.
- Mamba-2 (``NemotronHMamba2Mixer``): the heads x head width channels, not ``expand`` x hidden_size.
- The SSM state's own format ``mamba_ssm_cache_dtype``, float32 when absent (NemotronHConfig and
  vLLM's NemotronHForCausalLMConfig, vllm/model_executor/models/config.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.dtypes import FP32
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import checked_layers, kinds_attention, layer_entries, recurrent_dtype
from kvcalc.spec import NoCache, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.hf.configs import Reader
    from kvcalc.inputs.hf.families import Layout
    from kvcalc.spec import LayerCache

# NemotronHConfig() (transformers 5.24 models/nemotron_h/configuration_nemotron_h.py): head_dim is
# a class default (128), not hidden_size / heads, and the Mamba-2 geometry has defaults too.
_DEFAULTS = {
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "ssm_state_size": 128,
    "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4,
}  # fmt: skip

# Nemotron-H's layer letters (NemotronHConfig._pattern_to_list, transformers 5.24): 'M' Mamba-2,
# '*' attention, '-' MLP, 'E' MoE; MLP and MoE blocks have no attention and no state.
_LETTERS = {"M": "mamba", "*": "full_attention", "-": "no_cache", "E": "no_cache"}
# Its layer-type names: transformers 5.24 calls Mamba-2 "linear_attention" (after remapping the
# legacy "mamba"), attention "full_attention" (legacy "attention"), and "mlp" / "moe" the blocks
# DynamicCache gives a dummy layer (cache_utils.get_layer_types_and_kwargs).
_TYPES = {
    "linear_attention": "mamba", "mamba": "mamba", "full_attention": "full_attention",
    "attention": "full_attention", "mlp": "no_cache", "moe": "no_cache",
}  # fmt: skip
_NO_CACHE = "an MLP or MoE block (Nemotron-H '-' / 'E')"


def read(r: Reader) -> Layout:
    """One entry per layer of the layer list or pattern: a Mamba-2 state, K/V, or nothing."""
    r.defaults = _DEFAULTS
    # NemotronHConfig.num_hidden_layers is the length of the layer list, whatever the file says.
    kinds = _kinds(r)
    layers = checked_layers(r, len(kinds))
    stated = r.raw.get("num_hidden_layers")
    if stated is not None and stated != layers:
        r.notes.append(
            f"'{r.where}num_hidden_layers' ({stated!r}) differs from the {layers} layers of the layer pattern; "
            "transformers' NemotronHConfig uses the pattern"
        )
    _state_notes(r)
    # NemotronHAttention (modeling_nemotron_h.py, transformers 5.24) takes config.head_dim, a
    # class default of 128; the Hub files spell it attention_head_dim (vLLM's NemotronHConfig
    # reads that spelling), so either counts and the default applies, noted, without them.
    attention, heads = kinds_attention(r, kinds, head_dim_keys=("head_dim", "attention_head_dim"))
    return layer_entries(r, layers, kinds, attention, own=lambda kind: _entry(r, kind)), layers, heads


def _entry(r: Reader, kind: str) -> LayerCache | None:
    """A Mamba-2 layer's state or an MLP / MoE block's nothing; None for attention (the generic entry)."""
    if kind == "mamba":
        return _mamba2_state(r)
    if kind == "no_cache":
        return NoCache(block=_NO_CACHE)
    return None


def _kinds(r: Reader) -> list[str]:
    """Nemotron-H's layers, as NemotronHConfig.__post_init__ (transformers 5.24) derives them: an
    explicit list (``layers_block_type``, alias ``layer_types``) wins, else the letters of
    ``hybrid_override_pattern``. The model has as many layers as the list; transformers ignores
    ``num_hidden_layers``."""
    list_key = r.first_key(("layers_block_type", "layer_types"))
    if list_key is not None:
        r.considered("hybrid_override_pattern")  # transformers uses the pattern only without a list
        listed = r.raw[list_key]
        if not isinstance(listed, list) or not listed or not all(isinstance(t, str) for t in listed):
            raise ConfigError(f"config field '{r.where}{list_key}' must be a non-empty list of strings")
        unknown = sorted({t for t in listed if t not in _TYPES})
        if unknown:
            raise ConfigError(f"config field '{r.where}{list_key}' holds unknown layer type {unknown[0]!r}")
        return [_TYPES[t] for t in listed]
    pattern = r.raw.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(
            f"config field '{r.where}hybrid_override_pattern' is missing or empty: "
            "a nemotron_h config needs it (or 'layers_block_type') to say which layers are Mamba-2 and attention"
        )
    unknown = sorted({c for c in pattern if c not in _LETTERS})
    if unknown:
        raise ConfigError(
            f"config field '{r.where}hybrid_override_pattern' holds {unknown[0]!r}; "
            "nemotron_h layers are 'M' (Mamba-2), '*' (attention), '-' (MLP) and 'E' (MoE)"
        )
    return [_LETTERS[c] for c in pattern]


def _mamba2_state(r: Reader) -> StateCache:
    """A Mamba-2 layer's conv and SSM state."""
    d_state = r.positive_int(("mamba_d_state", "ssm_state_size", "state_size"))
    d_conv = r.positive_int(("mamba_d_conv", "conv_kernel"))
    # NemotronHMamba2Mixer (modeling_nemotron_h.py, transformers 5.24): intermediate_size =
    # mamba_num_heads * mamba_head_dim, conv_dim = intermediate_size + 2 * n_groups *
    # ssm_state_size, SSM state (mamba_num_heads, mamba_head_dim, ssm_state_size). `expand`
    # sizes nothing there. n_groups has a class default (8), unlike the generic Mamba reading.
    r.considered("expand", "mamba_expand")
    groups = r.positive_int(("mamba_n_groups", "n_groups"))
    d_inner = r.positive_int("mamba_num_heads") * r.positive_int("mamba_head_dim")
    return StateCache(
        family="mamba",
        conv_channels=d_inner + 2 * groups * d_state,
        conv_kernel=d_conv,
        recurrent_elements=d_inner * d_state,
        # Nemotron-H's mamba_ssm_cache_dtype (NemotronHConfig's default, transformers 5.24, is
        # "float32", as is vLLM's NemotronHForCausalLMConfig when the field is absent).
        recurrent_dtype=recurrent_dtype(r, ("mamba_ssm_cache_dtype", "mamba_ssm_dtype"), absent=FP32),
    )


def _state_notes(r: Reader) -> None:
    """Nemotron-H fields about the Mamba-2 state that kvcalc reads but whose effect it can only note."""
    # chunk_size (alias mamba_chunk_size) tiles the Mamba-2 scan over the prompt, and
    # use_mamba_kernels picks its kernels, mamba_hidden_act its activation: compute, not what a
    # sequence keeps.
    r.considered("chunk_size", "mamba_chunk_size", "use_mamba_kernels", "mamba_hidden_act")
    # The layers after the model (mtp_*) are multi-token prediction, cached only with speculative
    # decoding, which kvcalc does not model (like num_nextn_predict_layers).
    r.considered("mtp_layers_block_type", "mtp_hybrid_override_pattern")
    # mamba_ssm_cache_dtype, the SSM state's own format, is read by _mamba2_state (vLLM's
    # NemotronHForCausalLMConfig, vllm/model_executor/models/config.py, vLLM 0.33.0, keeps the SSM
    # state in it, float32 when absent; the conv state stays in the model dtype). Without a Mamba
    # layer it sizes nothing.
    r.considered("mamba_ssm_cache_dtype")
