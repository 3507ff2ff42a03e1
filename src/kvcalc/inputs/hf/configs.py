"""Read a Hugging Face ``config.json`` (as a dict) into a ``ModelSpec``.

The rules follow what transformers' config classes derive (``layer_types`` defaults per family,
``text_config`` nesting, key aliases such as ``n_layer``), re-implemented here so the estimator
runs with no transformers installed. Every default applied is recorded as a note; a missing or
absurd field stops with a ``ConfigError`` that names it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvcalc.dtypes import FP32, DType, lookup_dtype
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.guard import Unmodelled, unmodelled
from kvcalc.spec import (
    MAX_DIMENSION,
    MAX_LAYERS,
    AttentionCache,
    IndexerCache,
    LatentCache,
    LayerCache,
    ModelSpec,
    NoCache,
    SharedCache,
    StateCache,
)

# Anything larger is not a real model; it is a corrupted or mistyped config.
_MAX_DIMENSION = MAX_DIMENSION
_MAX_LAYERS = MAX_LAYERS

# Keys that hold the language model inside multimodal / wrapper configs, in lookup order.
_NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config", "text_model_config")

# transformers' attribute_map aliases: the first key present wins.
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim")
_KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_head_kv")

# Config-class defaults for fields that nested or trimmed configs often omit. Only families whose
# defaults matter in practice are listed; anything else missing a field is an error.
_FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    # LlamaConfig(): Llava's sparse text_config relies on these.
    "llama": {"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096},
    # MistralConfig(): sliding_window=4096 unless the file says otherwise (null disables it).
    "mistral": {
        "num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096,
        "num_key_value_heads": 8, "sliding_window": 4096,
    },
    # GPTBigCodeConfig(): multi_query=True.
    "gpt_bigcode": {"multi_query": True},
    # Gemma3TextConfig(): five local layers then one global.
    "gemma3_text": {"sliding_window_pattern": 6},
    "gemma3": {"sliding_window_pattern": 6},
    # Cohere2Config(): pattern 4.
    "cohere2": {"sliding_window_pattern": 4},
    # Qwen3NextConfig(): one full-attention layer in four.
    "qwen3_next": {"full_attention_interval": 4},
    # Llama4TextConfig(): full (NoPE) attention every fourth layer.
    "llama4_text": {"no_rope_layer_interval": 4},
    # NemotronHConfig() (transformers 5.24 models/nemotron_h/configuration_nemotron_h.py): head_dim is
    # a class default (128), not hidden_size / heads, and the Mamba-2 geometry has defaults too.
    "nemotron_h": {
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "ssm_state_size": 128,
        "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4,
    },
}  # fmt: skip

# Families whose layers alternate sliding/full with no key in the file (layer 0 sliding).
_ALTERNATING_FAMILIES = frozenset({"gemma2", "gpt_oss"})

_ENCODER_DECODER_TYPES = frozenset(
    {"t5", "mt5", "umt5", "longt5", "bart", "mbart", "whisper", "marian", "pegasus",
     "m2m_100", "nllb_moe", "blenderbot", "blenderbot-small", "plbart", "fsmt", "led",
     "prophetnet", "switch_transformers", "bigbird_pegasus"}
)  # fmt: skip

_MAMBA_TYPES = frozenset({"mamba", "falcon_mamba", "mamba2"})

# Nemotron-H's layer letters (NemotronHConfig._pattern_to_list, transformers 5.24): 'M' Mamba-2,
# '*' attention, '-' MLP, 'E' MoE; MLP and MoE blocks have no attention and no state.
_NEMOTRON_H_LETTERS = {"M": "mamba", "*": "full_attention", "-": "no_cache", "E": "no_cache"}
# Its layer-type names: transformers 5.24 calls Mamba-2 "linear_attention" (after remapping the
# legacy "mamba"), attention "full_attention" (legacy "attention"), and "mlp" / "moe" the blocks
# DynamicCache gives a dummy layer (cache_utils.get_layer_types_and_kwargs).
_NEMOTRON_H_TYPES = {
    "linear_attention": "mamba", "mamba": "mamba", "full_attention": "full_attention",
    "attention": "full_attention", "mlp": "no_cache", "moe": "no_cache",
}  # fmt: skip
_NEMOTRON_H_NO_CACHE = "an MLP or MoE block (Nemotron-H '-' / 'E')"
# NAS models with per-layer block_configs (Llama-3.3-Nemotron-Super-49B, Llama-3.1-Nemotron-Ultra-253B;
# architecture DeciLMForCausalLM, which vLLM maps to nemotron_nas.py). Another model type's
# block_configs is left to the guard.
_NAS_TYPES = frozenset({"nemotron-nas"})
_NAS_NO_CACHE = "a NAS block whose attention is a no-op or a linear layer (block_configs)"
# LFM2 (Liquid AI): gated short-convolution layers ("conv") between attention layers.
_SHORT_CONV_TYPES = frozenset({"lfm2", "lfm2_moe"})
# LFM2's short-convolution fields: they size nothing when no layer is a convolution.
_SHORT_CONV_KEYS = ("conv_L_cache", "conv_dim", "conv_dim_out", "conv_bias", "conv_use_xavier_init")
# Model types whose cache kvcalc has checked against the model's own code (the bundled presets,
# the real configs under tests/fixtures, every HF type the GGUF architecture table maps to, and the
# families and defaults above). Another model type is read by the generic rules, with a note
# saying so: they hold for most decoders, but nothing has checked them for that one.
_CHECKED_TYPES = frozenset({
    "arcee", "bart", "cohere", "cohere2", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4",
    "ernie4_5", "ernie4_5_moe", "exaone", "exaone4", "falcon", "falcon_h1", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "glm4", "glm4_moe", "glm_moe_dsa", "gpt2",
    "gpt_bigcode", "gpt_oss", "granite", "granitemoe", "granitemoehybrid", "internlm2", "jamba", "kimi_k2",
    "kimi_linear", "lfm2", "lfm2_moe", "llama", "llama4", "llama4_text", "llava", "mamba", "mamba2", "mimo_v2",
    "mimo_v2_flash", "minicpm", "minimax_m2", "minimax_m3_vl", "minimax_m3_vl_text", "ministral3", "mistral",
    "mixtral", "mllama", "mllama_text_model", "nemotron-nas", "nemotron_h", "olmo", "olmo2", "olmoe", "phi",
    "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5_text",
    "qwen3_moe", "qwen3_next", "seed_oss", "smollm3", "stablelm", "starcoder2", "t5", "whisper", "zamba2",
})  # fmt: skip
# State kinds: a fixed state per sequence, nothing per token.
_STATE_KINDS = ("mamba", "linear_attention", "short_conv")

# Fields whose only role is to derive the per-layer kinds when no layer_types list is given.
_PATTERN_KEYS = (
    "max_window_layers", "use_sliding_window", "sliding_window_pattern", "full_attention_interval",
    "attn_layer_period", "attn_layer_offset",
)  # fmt: skip

_LAYER_TYPE_ALIASES = {
    "full_attention": "full_attention",
    "attention": "full_attention",
    "global_attention": "full_attention",
    "sliding_attention": "sliding_attention",
    "local_attention": "sliding_attention",
    "chunked_attention": "chunked_attention",
    "linear_attention": "linear_attention",
    "mamba": "mamba",
}


class _Recorded(Mapping[str, Any]):
    """A config mapping that remembers every key the reader looked at, so that what it never
    looked at can be checked for fields that shape the cache (the guard in ``unread_fields``)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        self.seen: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.seen.add(key)
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.seen.add(key)
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.seen.add(key)
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@dataclass
class _Reader:
    """Typed access to one config mapping, remembering the defaults it applied and the keys it
    read."""

    raw: _Recorded
    where: str
    model_type: str
    notes: list[str] = field(default_factory=list)
    # Unmodelled fields found inside objects the reader consumed as a whole (NAS block_configs).
    unmodelled: list[Unmodelled] = field(default_factory=list)
    # The whole config when the language model is nested in it (None: it is the whole config), so
    # that a family can read a sibling such as Llama 3.2 Vision's vision_config.
    outer: Mapping[str, Any] | None = None
    # Tokens one image puts in each image cross-attention layer, set by a family that has them.
    image_tokens: int | None = None
    # The decoder layer of each cache entry, set by a family whose layers hold more than one.
    entry_layers: list[int] = field(default_factory=list)

    def considered(self, *keys: str) -> None:
        """Keys a rule looked at and deliberately set aside (a disabled window, say): read."""
        self.raw.seen.update(keys)

    def has(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def first_key(self, keys: Sequence[str]) -> str | None:
        """The first of ``keys`` present; its aliases that hold the same value count as read (an
        alias with another value is left for the guard, since it may be the one meant)."""
        found = next((k for k in keys if self.has(k)), None)
        if found is not None:
            value = self.raw[found]
            self.considered(*(k for k in keys if self.raw._data.get(k) in (None, value)))
        return found

    def _field(self, key: str) -> str:
        return f"{self.where}{key}"

    def positive_int(self, keys: Sequence[str] | str, *, default: int | None = None) -> int:
        """The first present key of ``keys`` as a positive integer, else the family default."""
        names = (keys,) if isinstance(keys, str) else tuple(keys)
        key = self.first_key(names)
        if key is None:
            family = _FAMILY_DEFAULTS.get(self.model_type, {})
            fallback = next((family[k] for k in names if k in family), default)
            if fallback is None:
                raise ConfigError(
                    f"config field '{self._field(names[0])}' is missing and model type "
                    f"{self.model_type!r} has no default for it"
                )
            self.notes.append(f"'{self._field(names[0])}' not in config; used the {self.model_type} default {fallback}")
            return int(fallback)
        return self.check_positive(key, self.raw[key])

    def optional_positive_int(self, key: str) -> int | None:
        if not self.has(key):
            return None
        return self.check_positive(key, self.raw[key])

    def check_positive(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config field '{self._field(key)}' must be an integer, got {value!r}")
        if value <= 0:
            raise ConfigError(f"config field '{self._field(key)}' must be positive, got {value}")
        if value > _MAX_DIMENSION:
            raise ConfigError(f"config field '{self._field(key)}' is implausibly large: {value}")
        return value

    def flag(self, key: str) -> bool:
        value = self.raw.get(key, _FAMILY_DEFAULTS.get(self.model_type, {}).get(key, False))
        if value is None:
            return False
        if not isinstance(value, bool):
            raise ConfigError(f"config field '{self._field(key)}' must be true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.raw.get(key)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ConfigError(f"config field '{self._field(key)}' must be a list of integers")
        return value


def read_config(raw: Any, *, name: str) -> ModelSpec:
    """Turn a parsed ``config.json`` into a model spec; ``name`` labels it in output and errors."""
    return _read(raw, name=name)[0]


def _read(raw: Any, *, name: str) -> tuple[ModelSpec, _Reader]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name}: a model config must be a JSON object, got {type(raw).__name__}")
    top_type = _model_type(raw)
    text, where = _text_config(raw)
    model_type = top_type if text is raw else _model_type(text) or _nested_default_type(top_type)
    if not model_type:
        raise ConfigError(f"{name}: config has no 'model_type'; cannot tell which rules apply")
    reader = _Reader(_Recorded(text), where, model_type, outer=raw if text is not raw else None)
    if text is not raw and not _model_type(text):
        reader.notes.append(f"'{where}model_type' missing; read the text model as {model_type!r}")
    dtype = _model_dtype(text, raw, reader.notes)

    encoder_tokens: int | None = None
    heads: int | None
    if model_type in _ENCODER_DECODER_TYPES or raw.get("is_encoder_decoder") is True:
        caches, layers, heads, encoder_tokens = _encoder_decoder(reader)
    else:
        caches, layers, heads = _decoder_only(reader)
        if reader.raw.get("per_layer_config") is not None:
            caches = _per_layer_overrides(reader, caches, layers, heads)

    reader.considered("model_type", "torch_dtype", "dtype")  # read above, outside the reader
    if not is_checked_type(model_type):
        reader.notes.append(
            f"model type {model_type!r} has no rules of its own in kvcalc: read by the generic rules (heads, KV "
            "heads, head_dim, layer_types, sliding_window), which no check has confirmed for it"
        )
    max_context, max_context_key = context_limit(reader.raw, model_type)
    spec = ModelSpec(
        name=name,
        caches=tuple(caches),
        layers=layers,
        query_heads=heads,
        model_type=model_type,
        dtype=dtype,
        notes=tuple(reader.notes),
        encoder_tokens=encoder_tokens,
        image_tokens=reader.image_tokens,
        entry_layers=tuple(reader.entry_layers),
        max_context=max_context,
        max_context_key=max_context_key,
        warnings=tuple(
            w.message() for w in [*reader.unmodelled, *unmodelled(reader.raw._data, reader.raw.seen, where)]
        ),
    )
    return spec, reader


# Keys a config may give its longest sequence in, as vLLM 0.32 reads them
# (transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key): the smallest wins,
# except that model_max_length (Command-R) overrides the rest.
_CONTEXT_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)  # fmt: skip
# RoPE types whose max_position_embeddings is already the scaled length (vLLM 0.32 config/model.py
# _get_and_verify_max_len); any other type with a factor ("linear", "dynamic") multiplies it.
_ROPE_ALREADY_SCALED = {"default", "su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}


def is_checked_type(model_type: str) -> bool:
    """Whether kvcalc's reading of this model type has been checked against the model's code."""
    from kvcalc.inputs.hf.families import has_family

    return (
        model_type in _CHECKED_TYPES or model_type in _FAMILY_DEFAULTS or model_type in _ENCODER_DECODER_TYPES
        or model_type in _MAMBA_TYPES or has_family(model_type)
    )  # fmt: skip


def context_limit(text: Mapping[str, Any], model_type: str) -> tuple[int | None, str | None]:
    """The longest sequence the model's config allows and how it was found, as vLLM derives its
    default max_model_len from the config: (None, None) when no key says."""
    found = [(text[k], k) for k in _CONTEXT_KEYS if _is_count(text.get(k))]
    if not found:
        return None, None
    limit, key = min(found)
    if _is_count(text.get("model_max_length")):
        limit, key = text["model_max_length"], "model_max_length"
    rope = text.get("rope_parameters") or text.get("rope_scaling")
    groups = [rope] if isinstance(rope, Mapping) and "factor" in rope else []
    if isinstance(rope, Mapping) and not groups:  # per layer type: {"full_attention": {...}, ...}
        groups = [g for g in rope.values() if isinstance(g, Mapping)]
    for params in groups:
        kind = params.get("rope_type", params.get("type", "default"))
        factor = params.get("factor")
        if not isinstance(kind, str) or kind in _ROPE_ALREADY_SCALED or "gemma3" in model_type:
            continue
        if (
            isinstance(factor, int | float) and not isinstance(factor, bool) and 1 < factor < 2**20
        ):  # all layer types share one factor in vLLM's reading; the first one applies
            return int(limit * factor), f"{key} {limit:,} x RoPE {kind} factor {factor:g}"
    return int(limit), f"{key} {limit:,}"


def _is_count(value: Any) -> bool:
    # Past 2^40 tokens a "limit" limits nothing: read as no limit.
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**40


def _model_type(config: Mapping[str, Any]) -> str:
    value = config.get("model_type")
    return value if isinstance(value, str) else ""


# Wrappers whose text model is not Llama: MllamaConfig.sub_configs_defaults (transformers 5.24,
# models/mllama/configuration_mllama.py) makes its text_config a MllamaTextConfig; MiniMaxM3VLConfig's
# (models/minimax_m3_vl/configuration_minimax_m3_vl.py) a MiniMaxM3VLTextConfig.
_NESTED_TEXT_TYPES = {"mllama": "mllama_text_model", "minimax_m3_vl": "minimax_m3_vl_text"}


def _nested_default_type(top_type: str) -> str:
    # LlavaConfig and most vision-language wrappers default their text model to Llama.
    return _NESTED_TEXT_TYPES.get(top_type, "llama") if top_type else ""


def text_config(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The mapping that describes the language model, like ``get_text_config(decoder=True)``, and
    the prefix that names its fields in messages."""
    return _text_config(raw)


def _text_config(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The mapping that describes the language model, like ``get_text_config(decoder=True)``."""
    for key in _NESTED_TEXT_KEYS:
        nested = raw.get(key)
        if isinstance(nested, Mapping):
            return nested, f"{key}."
        if nested is not None:
            raise ConfigError(f"config field '{key}' must be an object, got {type(nested).__name__}")
    thinker = raw.get("thinker_config")
    if isinstance(thinker, Mapping) and isinstance(thinker.get("text_config"), Mapping):
        return thinker["text_config"], "thinker_config.text_config."
    return raw, ""


# The dtypes a model computes in, and so the only ones its KV cache inherits. A config's dtype
# field may name a weight format instead (int8, fp8, a ggml type such as q4_0): weights quantized
# that way still compute, and cache, in a 16- or 32-bit float.
_COMPUTE_DTYPES = ("fp32", "fp16", "bf16")


def _model_dtype(text: Mapping[str, Any], raw: Mapping[str, Any], notes: list[str]) -> DType | None:
    for config, where in ((text, "text "), (raw, "")) if text is not raw else ((raw, ""),):
        for key in ("torch_dtype", "dtype"):
            value = config.get(key)
            if not isinstance(value, str):
                continue
            found = lookup_dtype(value)
            if found is not None and found.name in _COMPUTE_DTYPES:
                return found
            notes.append(
                f"{where}config {key} {value[:40]!r} is not a compute dtype (fp32, fp16, bf16), so it does not "
                "set the KV format; it is ignored"
            )
    return None


def _heads_and_head_dim(r: _Reader) -> tuple[int, int]:
    heads = r.positive_int(_HEAD_KEYS)
    if r.model_type == "nemotron_h":
        # NemotronHAttention (modeling_nemotron_h.py, transformers 5.24) takes config.head_dim, a
        # class default of 128; the Hub files spell it attention_head_dim (vLLM's NemotronHConfig
        # reads that spelling), so either counts and the default applies, noted, without them.
        return heads, r.positive_int(("head_dim", "attention_head_dim"))
    explicit = r.first_key(("head_dim", "d_kv", "kv_channels", "attention_head_size"))
    if explicit is not None:
        return heads, r.check_positive(explicit, r.raw[explicit])
    hidden_key = r.first_key(_HIDDEN_KEYS) or _HIDDEN_KEYS[0]
    hidden = r.positive_int(_HIDDEN_KEYS)
    if hidden % heads:
        raise ConfigError(
            f"config field '{r.where}{hidden_key}' ({hidden}) is not divisible by the "
            f"{heads} attention heads and no 'head_dim' is given"
        )
    return heads, hidden // heads


def _kv_heads(r: _Reader, heads: int) -> int:
    """KV heads, following MQA flags (Falcon, GPT-BigCode, ChatGLM) before GQA counts."""
    if r.flag("new_decoder_architecture"):  # Falcon-40B/180B: grouped heads in num_kv_heads
        r.considered("multi_query")  # FalconConfig ignores it once the new architecture is on
        kv = r.positive_int(("num_kv_heads",), default=heads)
    elif r.flag("multi_query_attention"):  # ChatGLM
        kv = r.positive_int(("multi_query_group_num",))
    elif r.flag("multi_query"):  # Falcon-7B, GPT-BigCode (SantaCoder, StarCoder)
        # Both cache one K/V head whatever a KV-head count says (modeling_falcon.py: num_kv_heads
        # only with new_decoder_architecture or without multi_query; modeling_gpt_bigcode.py:
        # kv_heads = 1 if multi_query), and transformers saves such a count.
        r.considered(*_KV_HEAD_KEYS)
        if "multi_query" not in r.raw:
            r.notes.append(f"'{r.where}multi_query' not in config; {r.model_type} defaults to MQA")
        kv = 1
    elif (key := r.first_key(_KV_HEAD_KEYS)) is not None:
        kv = r.check_positive(key, r.raw[key])
    elif "num_key_value_heads" in _FAMILY_DEFAULTS.get(r.model_type, {}):
        kv = r.positive_int(("num_key_value_heads",))
    else:
        r.notes.append(
            f"no '{r.where}num_key_value_heads' in config: multi-head attention assumed "
            f"({heads} KV heads, one per query head)"
        )
        kv = heads
    if kv > heads or heads % kv:
        raise ConfigError(f"config field '{r.where}num_key_value_heads' ({kv}) must divide the {heads} query heads")
    return kv


def _layer_kinds(r: _Reader, layers: int) -> list[str]:
    """One normalised kind per layer: explicit ``layer_types`` or the family's own derivation."""
    if r.model_type == "nemotron_h":
        return _nemotron_h_kinds(r)
    if r.model_type in _NAS_TYPES:
        return _nas_kinds(r, layers)
    if r.model_type == _GEMMA4:
        return _gemma4_kinds(r, layers)
    if r.model_type in _SHORT_CONV_TYPES:
        return _lfm2_kinds(r, layers)
    if r.raw.get("layer_types") is not None:
        aliases = _LAYER_TYPE_ALIASES
        if r.model_type == "deepseek_v32":
            # DeepseekV32Config.__post_init__ (transformers 5.24) names every layer
            # "indexed_attention": MLA with the indexer's key cache (DynamicIndexedLayer).
            aliases = {**aliases, "indexed_attention": "full_attention"}
        listed = _family_layer_types(r, layers, tuple(aliases), r.model_type)
        # These fields only derive layer_types when it is absent (Qwen2Config, Exaone4Config,
        # Qwen3NextConfig, JambaConfig __post_init__, transformers 5.24), which is why a config
        # saved by transformers holds both: with the list given they decide nothing.
        r.considered(*_PATTERN_KEYS)
        kinds = [aliases[t] for t in listed]
        # A window or chunk size applies only to the layers of that kind (cache_utils.py
        # get_layer_types_and_kwargs); with none listed it sizes nothing.
        if "sliding_attention" not in kinds:
            r.considered("sliding_window", "sliding_window_size", "attention_window_size")
        if "chunked_attention" not in kinds:
            r.considered("attention_chunk_size")
        return kinds

    mt = r.model_type
    if mt in _MAMBA_TYPES:
        return ["mamba"] * layers
    if r.has("attn_layer_period"):  # Jamba: attention every `period` layers, at `offset`
        period = r.positive_int("attn_layer_period")
        offset = _non_negative(r, "attn_layer_offset")
        return ["full_attention" if i % period == offset else "mamba" for i in range(layers)]
    if r.has("full_attention_interval") or mt == "qwen3_next":
        interval = r.positive_int("full_attention_interval")
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if mt == "llama4_text" or r.has("attention_chunk_size"):
        return _llama4_kinds(r, layers)
    if mt in _ALTERNATING_FAMILIES:
        r.notes.append(f"no '{r.where}layer_types': {mt} alternates sliding and full layers")
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    if r.has("sliding_window_pattern") or mt in ("gemma3_text", "gemma3", "cohere2"):
        pattern = r.positive_int("sliding_window_pattern")
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(layers)]
    if "use_sliding_window" in r.raw or "max_window_layers" in r.raw:
        # Qwen2/Qwen3 family: sliding only when enabled, and only from max_window_layers on.
        if not r.flag("use_sliding_window") or not r.has("sliding_window"):
            r.considered("sliding_window", "max_window_layers")  # windows off: both fields unused
            return ["full_attention"] * layers
        first = _non_negative(r, "max_window_layers")
        return ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    if r.has("sliding_window") or ("sliding_window" not in r.raw and "sliding_window" in _FAMILY_DEFAULTS.get(mt, {})):
        # Mistral, Phi-3, Starcoder2: a non-null sliding_window applies to every layer.
        return ["sliding_attention"] * layers
    return ["full_attention"] * layers


def _nemotron_h_kinds(r: _Reader) -> list[str]:
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
        unknown = sorted({t for t in listed if t not in _NEMOTRON_H_TYPES})
        if unknown:
            raise ConfigError(f"config field '{r.where}{list_key}' holds unknown layer type {unknown[0]!r}")
        return [_NEMOTRON_H_TYPES[t] for t in listed]
    pattern = r.raw.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(
            f"config field '{r.where}hybrid_override_pattern' is missing or empty: "
            "a nemotron_h config needs it (or 'layers_block_type') to say which layers are Mamba-2 and attention"
        )
    unknown = sorted({c for c in pattern if c not in _NEMOTRON_H_LETTERS})
    if unknown:
        raise ConfigError(
            f"config field '{r.where}hybrid_override_pattern' holds {unknown[0]!r}; "
            "nemotron_h layers are 'M' (Mamba-2), '*' (attention), '-' (MLP) and 'E' (MoE)"
        )
    return [_NEMOTRON_H_LETTERS[c] for c in pattern]


def _nas_kinds(r: _Reader, layers: int) -> list[str]:
    """NAS (DeciLM, Llama-Nemotron) ``block_configs``: one block per layer; its attention is a
    no-op, a linear layer, or grouped-query attention with ``n_heads_in_group`` query heads per KV
    head. vLLM's nemotron_nas.py (vllm-project/vllm @ 00bd1493) builds no attention for a no-op;
    DeciLM's modeling_decilm.py replaces it with a linear layer for replace_with_linear. Neither
    caches anything. The per-layer KV heads are read in ``_nas_attention``."""
    if not r.has("block_configs"):
        raise ConfigError(
            f"config field '{r.where}block_configs' is missing: a {r.model_type} config lists one block per layer"
        )
    blocks = r.raw["block_configs"]
    if not isinstance(blocks, list) or not all(isinstance(b, Mapping) for b in blocks):
        raise ConfigError(f"config field '{r.where}block_configs' must be a list of objects")
    if len(blocks) != layers:
        raise ConfigError(
            f"config field '{r.where}block_configs' lists {len(blocks)} layers but the model has {layers}"
        )
    kinds = []
    linear = False
    for i, block in enumerate(blocks):
        attention = _nas_block_attention(r, block, i)
        replaced = _nas_flag(r, attention, i, "replace_with_linear")
        linear = linear or replaced
        kinds.append("no_cache" if _nas_flag(r, attention, i, "no_op") or replaced else "full_attention")
    if linear:
        r.notes.append(
            "block_configs: attention replaced with a linear layer (DeciLM's modeling_decilm.py) caches nothing; "
            "vLLM's nemotron_nas.py implements only no_op attention"
        )
    return kinds


def _nas_block_attention(r: _Reader, block: Mapping[str, Any], i: int) -> Mapping[str, Any]:
    attention = block.get("attention")
    if not isinstance(attention, Mapping):
        raise ConfigError(f"config field '{r.where}block_configs[{i}].attention' must be an object")
    return attention


def _nas_flag(r: _Reader, attention: Mapping[str, Any], i: int, key: str) -> bool:
    value = attention.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(
            f"config field '{r.where}block_configs[{i}].attention.{key}' must be true or false, got {value!r}"
        )
    return value


# Keys of a NAS block's attention that kvcalc reads; the guard checks the others (a window_length or
# sink tokens that are set would change what the layer keeps).
_NAS_ATTENTION_READ = frozenset({"no_op", "replace_with_linear", "n_heads_in_group"})


def _nas_attention(r: _Reader, base: AttentionCache, heads: int) -> list[LayerCache]:
    """One entry per NAS layer: K/V heads = num_attention_heads // n_heads_in_group (vLLM
    nemotron_nas.py DeciLMDecoderLayer), nothing for a no-op or linear attention."""
    caches: list[LayerCache] = []
    for i, block in enumerate(r.raw["block_configs"]):
        attention = _nas_block_attention(r, block, i)
        where = f"{r.where}block_configs[{i}]."
        # The ffn sub-block sizes only the MLP; anything else in the block is checked by the guard.
        r.unmodelled += unmodelled({k: v for k, v in block.items() if k not in ("attention", "ffn")}, set(), where)
        if _nas_flag(r, attention, i, "no_op") or _nas_flag(r, attention, i, "replace_with_linear"):
            caches.append(NoCache(block=_NAS_NO_CACHE))
            continue
        r.unmodelled += unmodelled(attention, set(_NAS_ATTENTION_READ), f"{where}attention.")
        group = attention.get("n_heads_in_group")
        if isinstance(group, bool) or not isinstance(group, int) or group <= 0:
            raise ConfigError(
                f"config field '{where}attention.n_heads_in_group' must be a positive integer, got {group!r}"
            )
        if heads % group:
            raise ConfigError(
                f"config field '{where}attention.n_heads_in_group' ({group}) must divide the {heads} attention heads"
            )
        caches.append(replace(base, kv_heads=heads // group, expanded_heads=None))
    return caches


_GEMMA4 = "gemma4_text"


def _family_layer_types(r: _Reader, layers: int, allowed: tuple[str, ...], family: str) -> list[str]:
    """A family's own ``layer_types`` list: strings, one per layer, each one the family knows."""
    listed = r.raw["layer_types"]
    if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
        raise ConfigError(f"config field '{r.where}layer_types' must be a list of strings")
    if len(listed) != layers:
        raise ConfigError(f"config field '{r.where}layer_types' lists {len(listed)} layers but the model has {layers}")
    unknown = sorted({t for t in listed if t not in allowed})
    if unknown:
        known = ", ".join(repr(t) for t in allowed)
        raise ConfigError(
            f"config field '{r.where}layer_types' holds unknown layer type {unknown[0]!r}; {family} layers are {known}"
        )
    return list(listed)


def _gemma4_kinds(r: _Reader, layers: int) -> list[str]:
    """Gemma 4's layer kinds as Gemma4TextConfig.__post_init__ (transformers 5.24,
    models/gemma4/configuration_gemma4.py) derives them: ``layer_types``, else five sliding layers
    then one full (a fixed pattern of 6, whatever the file says), and the last layer forced full."""
    if r.raw.get("layer_types") is not None:
        kinds = _family_layer_types(r, layers, ("sliding_attention", "full_attention"), "gemma4")
    else:
        r.notes.append(f"no '{r.where}layer_types': gemma4 keeps five sliding layers, then one full")
        kinds = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
    if kinds[-1] != "full_attention":
        r.notes.append("gemma4's last layer is always full attention (Gemma4TextConfig forces it)")
        kinds[-1] = "full_attention"
    return kinds


def _gemma4_entries(r: _Reader, entry: AttentionCache | LatentCache, heads: int | None) -> dict[str, LayerCache]:
    """The cache entry of each Gemma 4 layer kind (transformers 5.24, models/gemma4/).

    Gemma4TextConfig.__post_init__ gives every full layer head_dim = ``global_head_dim`` (512 when
    absent) and, only when ``attention_k_eq_v`` is true, num_key_value_heads =
    ``num_global_key_value_heads``; sliding layers keep head_dim and num_key_value_heads.
    Gemma4TextAttention: with ``attention_k_eq_v`` a full layer has no v_proj and takes V from the
    K projection, but K then gets k_norm and RoPE and V gets v_norm, and ``cache.update(key_states,
    value_states, ...)`` stores both tensors: the cache holds K and V as usual (2 x heads x dim).
    A sliding layer keeps ``sliding_window`` tokens (halved plus one for
    use_bidirectional_attention "all"; "vision" changes no window)."""
    base = entry.as_attention()
    if base is None or heads is None:
        raise ConfigError("gemma4 configs with MLA (kv_lora_rank) are not supported")
    window = r.positive_int("sliding_window", default=512)
    if r.raw.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1
        r.notes.append(f"use_bidirectional_attention 'all': gemma4 sets the sliding window to {window} (half plus one)")
    k_eq_v = r.flag("attention_k_eq_v")
    if r.raw.get("per_layer_config") is not None:
        # Gemma4TextConfig.__post_init__ derives full-layer geometry from global_head_dim and
        # num_global_key_value_heads only without per_layer_config (a config saved by transformers
        # 5.24 writes the result there instead); the overrides are applied by _per_layer_overrides.
        ignored = [k for k in ("global_head_dim", "num_global_key_value_heads") if r.has(k)]
        if ignored:
            r.notes.append(
                f"'{r.where}per_layer_config' is given, so gemma4 ignores {' and '.join(ignored)} (Gemma4TextConfig)"
            )
        r.considered("global_head_dim", "num_global_key_value_heads")
        full = AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim)
        sliding = AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim, window=window)
        return {"sliding_attention": sliding, "full_attention": full}
    global_dim = r.positive_int("global_head_dim", default=512)
    global_kv = r.optional_positive_int("num_global_key_value_heads")
    if global_kv is not None and not k_eq_v:
        r.notes.append(
            f"'{r.where}num_global_key_value_heads' ({global_kv}) applies only with attention_k_eq_v "
            f"(Gemma4TextConfig); full layers keep {base.kv_heads} KV heads"
        )
    full_kv = global_kv if global_kv is not None and k_eq_v else base.kv_heads
    if full_kv > heads or heads % full_kv:
        raise ConfigError(
            f"config field '{r.where}num_global_key_value_heads' ({full_kv}) must divide the {heads} query heads"
        )
    return {
        "sliding_attention": AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim, window=window),
        "full_attention": AttentionCache(full_kv, global_dim, global_dim),
    }


# Per-layer attributes of transformers' heterogeneous configs that kvcalc applies to a layer's K/V.
_PER_LAYER_ATTENTION = ("num_key_value_heads", "head_dim", "sliding_window", "attention_chunk_size")


def _per_layer_overrides(r: _Reader, caches: list[LayerCache], layers: int, heads: int | None) -> list[LayerCache]:
    """Apply ``per_layer_config``: transformers 5.24's heterogeneous configs
    (integrations/heterogeneity/configuration_utils.py), a sparse mapping from layer index ("05" or
    5) to the attributes that differ on that layer. Saving a config writes per-layer geometry this
    way (Gemma 4's full layers: ``{"head_dim": 512, "num_key_value_heads": 4}``); the cache layer
    of each index takes its ``sliding_window`` or ``attention_chunk_size`` (cache_utils.py
    get_layer_types_and_kwargs), and its attention its ``head_dim`` and ``num_key_value_heads``.
    Other attributes are left to the guard, as any unread field is."""
    overrides = r.raw["per_layer_config"]
    where = f"{r.where}per_layer_config"
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"config field '{where}' must be an object mapping layer indices to overrides")
    result = list(caches)
    for key, layer_overrides in overrides.items():
        index = _layer_index(str(key), layers, where)
        field_where = f"{where}.{key}."
        if not isinstance(layer_overrides, Mapping):
            raise ConfigError(f"config field '{where}.{key}' must be an object of attribute overrides")
        applied = {k: layer_overrides[k] for k in _PER_LAYER_ATTENTION if k in layer_overrides}
        skipped = layer_overrides.get("skip")
        if skipped:  # a sub-layer transformers would skip: kvcalc does not model what that removes
            r.unmodelled.append(Unmodelled(f"{field_where}skip", skipped, "the per-layer layout"))
        rest = {k: v for k, v in layer_overrides.items() if k not in applied and k != "skip"}
        r.unmodelled += unmodelled(rest, set(), field_where)
        if applied:
            result[index] = _overridden(result[index], applied, heads, field_where)
    return result


def _layer_index(key: str, layers: int, where: str) -> int:
    if not key.isdigit() or int(key) >= layers:
        raise ConfigError(f"config field '{where}' has key {key!r}: not a layer index below {layers}")
    return int(key)


def _overridden(layer: LayerCache, applied: dict[str, Any], heads: int | None, where: str) -> LayerCache:
    """One layer's K/V entry with its per-layer overrides applied."""
    cache = layer.as_attention()
    if cache is None or cache.tokens != "decoder":
        raise ConfigError(
            f"config field '{where}{next(iter(applied))}' overrides attention geometry on a {layer.kind.short} layer; "
            "kvcalc cannot apply it there"
        )
    values: dict[str, int | None] = {}
    for key, value in applied.items():
        if value is None and key in ("sliding_window", "attention_chunk_size"):
            values[key] = None  # the override removes the window or chunk on this layer
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_DIMENSION:
            raise ConfigError(f"config field '{where}{key}' must be a positive integer, got {value!r}")
        values[key] = value
    kv = values.get("num_key_value_heads", cache.kv_heads)
    assert kv is not None
    if heads is not None and (kv > heads or heads % kv):
        raise ConfigError(f"config field '{where}num_key_value_heads' ({kv}) must divide the {heads} query heads")
    dim = values.get("head_dim")
    if dim is not None and cache.k_head_dim != cache.v_head_dim:
        raise ConfigError(
            f"config field '{where}head_dim' overrides a layer whose K and V head dims differ "
            f"({cache.k_head_dim}/{cache.v_head_dim}); kvcalc cannot tell which it sets"
        )
    window = values.get("sliding_window", cache.window)  # a None override removes the window
    chunk = values.get("attention_chunk_size", cache.chunk)
    if window is not None and chunk is not None:
        raise ConfigError(f"config field '{where}' gives layer both a sliding window and an attention chunk")
    return replace(
        cache,
        kv_heads=kv,
        k_head_dim=dim or cache.k_head_dim,
        v_head_dim=dim or cache.v_head_dim,
        window=window,
        chunk=chunk,
        expanded_heads=None,
    )


def _llama4_kinds(r: _Reader, layers: int) -> list[str]:
    """Llama 4: chunked attention on RoPE layers, full attention on NoPE layers."""
    if not r.has("attention_chunk_size"):
        return ["full_attention"] * layers
    no_rope = r.raw.get("no_rope_layers")
    if no_rope:  # transformers treats an empty list like a missing one
        flags = r.int_list("no_rope_layers")
        if len(flags) != layers:
            raise ConfigError(
                f"config field '{r.where}no_rope_layers' lists {len(flags)} layers but the model has {layers}"
            )
    else:
        interval = r.positive_int("no_rope_layer_interval")
        flags = [int((i + 1) % interval != 0) for i in range(layers)]
    # A 1 marks a layer that uses RoPE, and RoPE layers are the chunked ones.
    return ["chunked_attention" if flag else "full_attention" for flag in flags]


def _non_negative(r: _Reader, key: str) -> int:
    value = r.raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"config field '{r.where}{key}' must be a non-negative integer, got {value!r}")
    return value


def _checked_layers(r: _Reader, layers: int) -> int:
    if layers > _MAX_LAYERS:
        raise ConfigError(f"config field '{r.where}num_hidden_layers' is implausibly large: {layers}")
    return layers


def _decoder_only(r: _Reader) -> tuple[list[LayerCache], int, int | None]:
    from kvcalc.inputs.hf.families import family_rule  # here: family modules import this one

    rule = family_rule(r.model_type)
    if rule is not None:
        return rule(r)
    if r.model_type == "nemotron_h":
        # NemotronHConfig.num_hidden_layers is the length of the layer list, whatever the file says.
        kinds = _layer_kinds(r, 0)
        layers = _checked_layers(r, len(kinds))
        stated = r.raw.get("num_hidden_layers")
        if stated is not None and stated != layers:
            r.notes.append(
                f"'{r.where}num_hidden_layers' ({stated!r}) differs from the {layers} layers of the layer pattern; "
                "transformers' NemotronHConfig uses the pattern"
            )
        _nemotron_h_state_notes(r)
    else:
        layers = _checked_layers(r, r.positive_int(_LAYER_KEYS))
        kinds = _layer_kinds(r, layers)
    needs_attention = any(k not in (*_STATE_KINDS, "no_cache") for k in kinds)
    heads: int | None = None
    attention: AttentionCache | LatentCache | None = None
    if r.model_type in _NAS_TYPES:
        # NAS: the top-level num_key_value_heads is null; every attention block says its own.
        r.considered(*_KV_HEAD_KEYS)
        heads, head_dim = _heads_and_head_dim(r)
        return _nas_attention(r, AttentionCache(heads, head_dim, head_dim), heads), layers, heads
    if needs_attention:
        if r.model_type not in _FAMILY_DEFAULTS and r.first_key(_HEAD_KEYS) is None and not r.has("kv_lora_rank"):
            raise ConfigError(
                f"config of model type {r.model_type!r} has no attention geometry kvcalc can "
                f"read (no '{r.where}num_attention_heads' or equivalent)"
            )
        attention, heads = _attention_entry(r)

    gemma4 = _gemma4_entries(r, attention, heads) if r.model_type == _GEMMA4 and attention is not None else None
    caches: list[LayerCache] = []
    if not any(kind in _STATE_KINDS for kind in kinds):
        # The recurrent-state dtype (read by _recurrent_dtype) sizes nothing without a state layer.
        r.considered("mamba_ssm_dtype", "mamba_ssm_cache_dtype")
    if "short_conv" not in kinds:
        r.considered(*_SHORT_CONV_KEYS)  # an LFM2 with attention in every layer
    for kind in kinds:
        if gemma4 is not None:  # Gemma 4: each layer kind has its own geometry
            caches.append(gemma4[kind])
            continue
        if kind in _STATE_KINDS:
            caches.append(_state_entry(r, kind))
            continue
        if kind == "no_cache":
            caches.append(NoCache(block=_NEMOTRON_H_NO_CACHE))
            continue
        assert attention is not None
        caches.append(_windowed(r, attention, kind))

    shared = r.raw.get("num_kv_shared_layers")
    if shared is not None and shared != 0:
        count = r.check_positive("num_kv_shared_layers", shared)
        if count >= layers:
            raise ConfigError(
                f"config field '{r.where}num_kv_shared_layers' ({count}) must be below the {layers} layers"
            )
        # The last `count` layers reuse the K and V of earlier layers of the same type.
        caches[layers - count :] = [SharedCache()] * count
    if r.model_type == "deepseek_v32" and attention is not None and attention.is_latent:
        # DeepSeek-V3.2's sparse attention (DSA): every MLA layer also caches one indexer key per
        # token (transformers' DynamicIndexedLayer.indexer_keys, [batch, seq, index_head_dim]), an
        # extra entry per layer as cross-attention is for encoder-decoder models. index_n_heads
        # sizes the indexer's queries and index_topk the tokens attention reads: compute, not cache.
        r.considered("index_n_heads", "index_topk")
        indexer = IndexerCache(head_dim=r.positive_int("index_head_dim"))
        latent_layers = [i for i, c in enumerate(caches) if c.is_latent]
        caches += [indexer] * len(latent_layers)
        r.entry_layers = [*range(layers), *latent_layers]
    return caches, layers, heads


def _attention_entry(r: _Reader) -> tuple[AttentionCache | LatentCache, int]:
    """The cache entry of a full-attention layer, and the number of query heads."""
    if r.has("kv_lora_rank"):  # MLA: DeepSeek-V2/V3, Kimi-K2, MiniCPM3 cache one latent
        r.considered(*_KV_HEAD_KEYS)  # the latent is shared by every head: KV heads size nothing
        # transformers' DeepseekV3Config / DeepseekV32Config save head_dim (= qk_rope_head_dim) and
        # qk_head_dim (= qk_nope + qk_rope): attention's query/key widths, not the latent's.
        r.considered("head_dim", "qk_head_dim")
        heads = r.positive_int(_HEAD_KEYS)
        rope = r.positive_int("qk_rope_head_dim")
        nope = r.optional_positive_int("qk_nope_head_dim")
        latent = LatentCache(
            latent_dim=r.positive_int("kv_lora_rank"),
            rope_dim=rope,
            k_head_dim=nope + rope if nope else None,
            v_head_dim=r.optional_positive_int("v_head_dim"),
        )
        return latent, heads
    heads, head_dim = _heads_and_head_dim(r)
    kv = _kv_heads(r, heads)
    v_dim = r.optional_positive_int("v_head_dim") or head_dim
    # transformers' Falcon (new_decoder_architecture) broadcasts the grouped K/V to every query
    # head before caching them (modeling_falcon.py); serving engines keep the grouped heads.
    expanded = heads if r.flag("new_decoder_architecture") and kv != heads else None
    return AttentionCache(kv_heads=kv, k_head_dim=head_dim, v_head_dim=v_dim, expanded_heads=expanded), heads


def _windowed(r: _Reader, entry: AttentionCache | LatentCache, kind: str) -> LayerCache:
    if kind == "full_attention":
        return entry
    base = entry.as_attention()
    if base is None:
        raise ConfigError(f"{kind} layers with MLA (kv_lora_rank) are not supported")
    if kind == "sliding_attention":
        key = r.first_key(("sliding_window", "sliding_window_size", "attention_window_size"))
        if key is None:
            key = "sliding_window"
            window = r.positive_int(key)  # family default, noted, or an error naming the field
        else:
            window = r.check_positive(key, r.raw[key])
        return AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim, window=window)
    chunk = r.positive_int("attention_chunk_size")
    return AttentionCache(base.kv_heads, base.k_head_dim, base.v_head_dim, chunk=chunk)


def _state_entry(r: _Reader, kind: str) -> StateCache:
    if kind == "short_conv":
        return _short_conv_entry(r)
    if kind == "linear_attention":
        # Gated DeltaNet (Qwen3-Next): a causal conv over q, k and v, then one
        # key_dim x value_dim recurrent matrix per value head.
        k_heads = r.positive_int("linear_num_key_heads")
        v_heads = r.positive_int("linear_num_value_heads")
        k_dim = r.positive_int("linear_key_head_dim")
        v_dim = r.positive_int("linear_value_head_dim")
        kernel = r.positive_int("linear_conv_kernel_dim")
        conv_channels = 2 * k_heads * k_dim + v_heads * v_dim
        return StateCache(
            family="linear_attention",
            conv_channels=conv_channels,
            conv_kernel=kernel,
            recurrent_elements=v_heads * k_dim * v_dim,
            recurrent_dtype=_recurrent_dtype(r),
        )
    # Mamba block. The causal conv runs over d_inner channels (Mamba-2 adds B and C: 2 x n_groups
    # x d_state more) and keeps d_conv - 1 past inputs; the SSM state is d_inner x d_state
    # (Mamba-2: n_heads x head_dim x d_state, the same product).
    d_state = r.positive_int(("mamba_d_state", "ssm_state_size", "state_size"))
    d_conv = r.positive_int(("mamba_d_conv", "conv_kernel"))
    groups_key = r.first_key(("mamba_n_groups", "n_groups"))
    groups = r.check_positive(groups_key, r.raw[groups_key]) if groups_key else 0
    if r.model_type == "nemotron_h":
        # NemotronHMamba2Mixer (modeling_nemotron_h.py, transformers 5.24): intermediate_size =
        # mamba_num_heads * mamba_head_dim, conv_dim = intermediate_size + 2 * n_groups *
        # ssm_state_size, SSM state (mamba_num_heads, mamba_head_dim, ssm_state_size). `expand`
        # sizes nothing there. n_groups has a class default (8), unlike the families below.
        r.considered("expand", "mamba_expand")
        groups = r.positive_int(("mamba_n_groups", "n_groups"))
        d_inner = r.positive_int("mamba_num_heads") * r.positive_int("mamba_head_dim")
    elif r.has("mamba_n_heads") and r.has("mamba_d_head"):  # Granite-4 / Bamba spelling
        d_inner = r.positive_int("mamba_n_heads") * r.positive_int("mamba_d_head")
    elif r.model_type in _MAMBA_TYPES and r.has("intermediate_size"):
        d_inner = r.positive_int("intermediate_size")
    else:
        d_inner = r.positive_int(("mamba_expand", "expand")) * r.positive_int(_HIDDEN_KEYS)
    if r.model_type == "mamba2":
        _mamba2_heads(r, d_inner)
    return StateCache(
        family="mamba",
        conv_channels=d_inner + 2 * groups * d_state,
        conv_kernel=d_conv,
        recurrent_elements=d_inner * d_state,
        recurrent_dtype=_recurrent_dtype(r),
    )


def _mamba2_heads(r: _Reader, d_inner: int) -> None:
    """Mamba2Mixer (transformers 5.24 models/mamba2/modeling_mamba2.py) keeps the SSM state as
    (num_heads, head_dim, state_size) and reshapes its expand x hidden_size channels into those heads,
    so the heads must cover them exactly; chunk_size only tiles the scan over the prompt."""
    r.considered("chunk_size")
    heads = r.optional_positive_int("num_heads")
    head_dim = r.optional_positive_int("head_dim")
    if heads is not None and head_dim is not None and heads * head_dim != d_inner:
        raise ConfigError(
            f"config field '{r.where}num_heads' ({heads}) x head_dim ({head_dim}) must equal expand x hidden_size "
            f"({d_inner}), the Mamba-2 channels the heads split"
        )


# The model types whose recurrent-state dtype field vLLM reads (vllm/model_executor/models/config.py):
# NemotronHForCausalLMConfig (mamba_ssm_cache_dtype, float32 when absent) and
# Qwen3_5ForConditionalGenerationConfig (mamba_ssm_dtype of the text config).
_VLLM_READS_SSM_DTYPE = ("nemotron_h", "qwen3_5")


def _recurrent_dtype(r: _Reader) -> DType | None:
    """The recurrent (SSM / delta-rule) state's own format, as the config names it: Qwen3.5's
    ``mamba_ssm_dtype`` ("float32"), Nemotron-H's ``mamba_ssm_cache_dtype`` (NemotronHConfig's
    default, transformers 5.24, is "float32", as is vLLM's NemotronHForCausalLMConfig when the field
    is absent). It must name a compute dtype; None when the config names none."""
    nemotron = r.model_type == "nemotron_h"
    keys = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype") if nemotron else ("mamba_ssm_dtype", "mamba_ssm_cache_dtype")
    key = r.first_key(keys)
    if key is None:
        return FP32 if nemotron else None
    value = r.raw[key]
    found = lookup_dtype(value) if isinstance(value, str) else None
    if found is None or found.name not in _COMPUTE_DTYPES:
        raise ConfigError(
            f"config field '{r.where}{key}' ({str(value)[:40]!r}) must name a compute dtype "
            "(float32, float16, bfloat16)"
        )
    if not r.model_type.startswith(_VLLM_READS_SSM_DTYPE):
        note = (
            f"config field '{r.where}{key}' keeps the recurrent state in {found.name}; vLLM reads it only for "
            "Nemotron-H and Qwen3.5 and otherwise keeps that state in the model dtype, so --engine vllm may differ"
        )
        if note not in r.notes:
            r.notes.append(note)
    return found


def _lfm2_kinds(r: _Reader, layers: int) -> list[str]:
    """LFM2's layers as Lfm2Config.__post_init__ (transformers 5.24 models/lfm2/configuration_lfm2.py)
    derives them: an explicit ``layer_types`` wins ("conv" or "full_attention"; full_attn_idxs is
    then unused); else ``full_attn_idxs`` lists the attention layers and every other one is "conv";
    with neither, every layer is attention (the class default)."""
    if r.model_type == "lfm2_moe":
        # Lfm2MoeConfig: num_dense_layers picks a dense MLP over MoE in the first layers (weights).
        r.considered("num_dense_layers")
    if r.raw.get("layer_types") is not None:
        r.considered("full_attn_idxs")
        listed = _family_layer_types(r, layers, ("conv", "full_attention"), r.model_type)
        return ["short_conv" if t == "conv" else "full_attention" for t in listed]
    if r.model_type == "lfm2_moe":
        # Lfm2MoeConfig derives no list: its decoder layers index config.layer_types directly.
        raise ConfigError(f"config field '{r.where}layer_types' is missing: an lfm2_moe config lists each layer's type")
    if r.has("full_attn_idxs"):
        attention = set(r.int_list("full_attn_idxs"))
        outside = sorted(i for i in attention if not 0 <= i < layers)
        if outside:
            raise ConfigError(
                f"config field '{r.where}full_attn_idxs' holds layer {outside[0]}, outside the {layers} layers"
            )
    else:
        r.notes.append(f"no '{r.where}layer_types' or '{r.where}full_attn_idxs': every lfm2 layer is attention")
        attention = set(range(layers))
    return ["full_attention" if i in attention else "short_conv" for i in range(layers)]


def _short_conv_entry(r: _Reader) -> StateCache:
    """LFM2's gated short convolution (Lfm2ShortConv, transformers 5.24 models/lfm2/modeling_lfm2.py):
    a depthwise causal conv of kernel ``conv_L_cache`` over hidden_size channels (B * x), no
    recurrent state. The model must keep L_cache - 1 past inputs per channel; vLLM keeps exactly
    that (short_conv_state_shape: (conv_dim / tp, conv_kernel - 1), vllm/model_executor/layers/
    mamba/mamba_utils.py @ 02d71083); transformers' LinearAttentionLayer keeps the whole kernel."""
    hidden = r.positive_int(_HIDDEN_KEYS)
    kernel = r.positive_int("conv_L_cache", default=3)  # Lfm2Config's default
    # vLLM sizes the conv by conv_dim (Lfm2ShortConvDecoderLayer), transformers by hidden_size;
    # real checkpoints set them (and conv_dim_out) equal.
    for key in ("conv_dim", "conv_dim_out"):
        value = r.optional_positive_int(key)
        if value is not None and value != hidden:
            raise ConfigError(
                f"config field '{r.where}{key}' ({value}) differs from hidden_size ({hidden}): transformers' "
                "Lfm2ShortConv runs over hidden_size channels, vLLM's over conv_dim; kvcalc cannot tell which is meant"
            )
    # conv_use_xavier_init only initialises the weights.
    r.considered("conv_use_xavier_init")
    return StateCache(family="short_conv", conv_channels=hidden, conv_kernel=kernel, recurrent_elements=0)


def _nemotron_h_state_notes(r: _Reader) -> None:
    """Nemotron-H fields about the Mamba-2 state that kvcalc reads but whose effect it can only note."""
    # chunk_size (alias mamba_chunk_size) tiles the Mamba-2 scan over the prompt, and
    # use_mamba_kernels picks its kernels, mamba_hidden_act its activation: compute, not what a
    # sequence keeps.
    r.considered("chunk_size", "mamba_chunk_size", "use_mamba_kernels", "mamba_hidden_act")
    # The layers after the model (mtp_*) are multi-token prediction, cached only with speculative
    # decoding, which kvcalc does not model (like num_nextn_predict_layers).
    r.considered("mtp_layers_block_type", "mtp_hybrid_override_pattern")
    # mamba_ssm_cache_dtype, the SSM state's own format, is read by _recurrent_dtype (vLLM's
    # NemotronHForCausalLMConfig, vllm/model_executor/models/config.py, vLLM 0.33.0, keeps the SSM
    # state in it, float32 when absent; the conv state stays in the model dtype). Without a Mamba
    # layer it sizes nothing.
    r.considered("mamba_ssm_cache_dtype")


def _encoder_decoder(r: _Reader) -> tuple[list[LayerCache], int, int, int | None]:
    """Decoder self-attention per generated token plus cross-attention over the encoder output."""
    # The encoder caches nothing: its layer count (num_hidden_layers in BART/Whisper) sizes nothing.
    r.considered("num_hidden_layers", "encoder_layers", "num_layers")
    layer_key = r.first_key(("decoder_layers", "num_decoder_layers"))
    if layer_key is not None:
        layers = r.check_positive(layer_key, r.raw[layer_key])
    else:
        layers = r.positive_int(_LAYER_KEYS)
        if r.has("num_layers"):
            r.notes.append(f"no '{r.where}num_decoder_layers': the decoder has as many layers as the encoder")
    layers = _checked_layers(r, layers)
    head_key = r.first_key(("decoder_attention_heads", *_HEAD_KEYS))
    if head_key is None:
        raise ConfigError(f"config field '{r.where}decoder_attention_heads' is missing")
    heads = r.check_positive(head_key, r.raw[head_key])
    if r.has("d_kv"):
        head_dim = r.check_positive("d_kv", r.raw["d_kv"])
    else:
        hidden = r.positive_int(_HIDDEN_KEYS)
        if hidden % heads:
            raise ConfigError(f"config field '{r.where}d_model' ({hidden}) is not divisible by {heads} heads")
        head_dim = hidden // heads
    kv_key = r.first_key(("decoder_key_value_heads", *_KV_HEAD_KEYS))
    kv = r.check_positive(kv_key, r.raw[kv_key]) if kv_key else heads
    if heads % kv:
        raise ConfigError(f"config field '{r.where}{kv_key}' ({kv}) must divide {heads} heads")
    self_attn = AttentionCache(kv, head_dim, head_dim)
    cross_attn = AttentionCache(kv, head_dim, head_dim, tokens="encoder")
    caches: list[LayerCache] = [*([self_attn] * layers), *([cross_attn] * layers)]
    r.entry_layers = [*range(layers), *range(layers)]  # decoder layer i holds entries i and layers + i
    encoder_tokens = r.optional_positive_int("max_source_positions")  # Whisper: 1500 frames
    return caches, layers, heads, encoder_tokens


# What family modules (kvcalc.inputs.hf.families) build on: the reader and the generic entries, under public
# names so that a family's module reads like the generic rules it extends.
Reader = _Reader
LAYER_KEYS, HEAD_KEYS, HIDDEN_KEYS, KV_HEAD_KEYS = _LAYER_KEYS, _HEAD_KEYS, _HIDDEN_KEYS, _KV_HEAD_KEYS
STATE_KINDS = _STATE_KINDS
attention_entry = _attention_entry
heads_and_head_dim = _heads_and_head_dim
kv_heads = _kv_heads
windowed = _windowed
state_entry = _state_entry
recurrent_dtype = _recurrent_dtype
family_layer_types = _family_layer_types
checked_layers = _checked_layers
non_negative = _non_negative
