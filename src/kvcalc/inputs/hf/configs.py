"""Read a Hugging Face ``config.json`` (as a dict) into a ``ModelSpec``.

The rules follow what transformers' config classes derive (``layer_types`` defaults per family,
``text_config`` nesting, key aliases such as ``n_layer``), re-implemented here so the estimator
runs with no transformers installed. Every default applied is recorded as a note; a missing or
absurd field stops with a ``ConfigError`` that names it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kvcalc.dtypes import DType, lookup_dtype
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.context import CONTEXT_KEYS, context_limit, count_field
from kvcalc.inputs.hf.guard import Unmodelled, unmodelled
from kvcalc.spec import (
    MAX_DIMENSION,
    MAX_LAYERS,
    AttentionCache,
    LatentCache,
    LayerCache,
    ModelSpec,
    SharedCache,
    StateCache,
)

# Anything larger is not a real model; it is a corrupted or mistyped config.
_MAX_DIMENSION = MAX_DIMENSION
_MAX_LAYERS = MAX_LAYERS

# Keys that hold the language model inside multimodal / wrapper configs, in lookup order.
_NESTED_TEXT_KEYS = ("text_config", "llm_config", "language_config", "text_model_config")

# transformers' attribute_map aliases: the first key present wins.
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "layers")
# The last of each: Kosmos-2's layers, XGLM's attention_heads, XLM's emb_dim, Kosmos-2's embed_dim.
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model", "dim", "emb_dim", "embed_dim")
_KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_head_kv")

# Config-class defaults for fields that nested or trimmed configs often omit. Only families whose
# defaults matter in practice are listed (a family module may give its own: Reader.defaults);
# anything else missing a field is an error.
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
    # Gemma3TextConfig() (transformers 5.24 configuration_gemma3.py): five local layers then one
    # global; google/gemma-3-27b-it's config.json gives neither its length nor its vocabulary.
    "gemma3_text": {"sliding_window_pattern": 6, "max_position_embeddings": 131_072, "vocab_size": 262_208},
    "gemma3": {"sliding_window_pattern": 6, "max_position_embeddings": 131_072, "vocab_size": 262_208},
    # Cohere2Config(): pattern 4.
    "cohere2": {"sliding_window_pattern": 4},
    # Qwen3NextConfig(): one full-attention layer in four.
    "qwen3_next": {"full_attention_interval": 4},
    # Llama4TextConfig(): full (NoPE) attention every fourth layer.
    "llama4_text": {"no_rope_layer_interval": 4},
}  # fmt: skip

# Families whose layers alternate sliding/full with no key in the file (layer 0 sliding).
_ALTERNATING_FAMILIES = frozenset({"gemma2", "gpt_oss"})

# LFM2's short-convolution fields (families/lfm2.py): they size nothing when no layer is a convolution.
_SHORT_CONV_KEYS = ("conv_L_cache", "conv_dim", "conv_dim_out", "conv_bias", "conv_use_xavier_init")
# Model types whose cache kvcalc has checked against the model's own code (the bundled presets,
# the real configs under tests/fixtures, every HF type the GGUF architecture table maps to, the
# defaults above and the modules of kvcalc.inputs.hf.families). Another model type is read by the
# generic rules, with a note saying so: they hold for most decoders, but nothing has checked them
# for that one.
_CHECKED_TYPES = frozenset({
    "arcee", "bart", "cohere", "cohere2", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4",
    "ernie4_5", "ernie4_5_moe", "exaone", "exaone4", "falcon", "falcon_h1", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text", "glm4", "glm4_moe", "glm_moe_dsa", "gpt2",
    "gpt_bigcode", "gpt_oss", "granite", "granitemoe", "granitemoehybrid", "hunyuan", "internlm2", "jamba", "kimi_k2",
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
    # AfmoeConfig and Cohere2MoeConfig (transformers 5.24) derive layer_types from these.
    "global_attn_every_n_layers", "prefix_dense_sliding_window_pattern",
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


class _Reader:
    """Typed access to one config mapping, remembering the defaults it applied and the keys it
    read. (A plain class: one is made per config, and a dataclass costs its methods' compilation
    at every start-up.)"""

    def __init__(self, raw: _Recorded, where: str, model_type: str, *, outer: Mapping[str, Any] | None = None) -> None:
        self.raw = raw
        self.where = where
        self.model_type = model_type
        self.notes: list[str] = []
        # Unmodelled fields found inside objects the reader consumed as a whole (NAS block_configs).
        self.unmodelled: list[Unmodelled] = []
        # The whole config when the language model is nested in it (None: it is the whole config),
        # so that a family can read a sibling such as Llama 3.2 Vision's vision_config.
        self.outer = outer
        # Tokens one image puts in each image cross-attention layer, set by a family that has them.
        self.image_tokens: int | None = None
        # Tokens the encoder hands each cross-attention layer, set by the encoder-decoder family.
        self.encoder_tokens: int | None = None
        # The decoder layer of each cache entry, set by a family whose layers hold more than one.
        self.entry_layers: list[int] = []
        # The model type's config-class defaults: its _FAMILY_DEFAULTS row, or a family module's
        # own (set before the module reads anything).
        self.defaults: Mapping[str, Any] = _FAMILY_DEFAULTS.get(model_type, {})

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
        if key is None and (null := next((k for k in names if k in self.raw._data), None)) is not None:
            # transformers keeps a null as None and the model cannot be built: no default applies
            raise ConfigError(f"config field '{self._field(null)}' must be a positive integer, got null")
        if key is None:
            family = self.defaults
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
        value = self.raw.get(key, self.defaults.get(key, False))
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
    from kvcalc.inputs.hf.families import encoder_decoder_rule, is_encoder_decoder  # here: families import this

    if not isinstance(raw, Mapping):
        raise ConfigError(f"{name}: a model config must be a JSON object, got {type(raw).__name__}")
    top_type = _model_type(raw)
    native = _native_format(raw)
    if native:
        raw, top_type = {**raw, "model_type": native}, native
    text, where = _text_config(raw)
    if text is raw:
        _refuse_nested_decoder(raw, name)
    model_type = top_type if text is raw else _model_type(text, where) or _nested_default_type(top_type)
    if not model_type:
        raise ConfigError(f"{name}: config has no 'model_type'; cannot tell which rules apply")
    _refuse_looped(text, where)
    for key in _COUNT_KEYS:  # present with the wrong type or sign: a broken config, not a missing field
        count_field(text, key, where)
    reader = _Reader(_Recorded(text), where, model_type, outer=raw if text is not raw else None)
    if text is not raw and not _model_type(text):
        reader.notes.append(f"'{where}model_type' missing; read the text model as {model_type!r}")
    dtype = _model_dtype(text, raw, where, reader.notes)

    if is_encoder_decoder(model_type, raw):
        caches, layers, heads = encoder_decoder_rule()(reader)
    else:
        caches, layers, heads = _decoder_only(reader)
        if reader.raw.get("per_layer_config") is not None:
            caches = _per_layer_overrides(reader, caches, layers, heads)

    reader.considered("model_type", "torch_dtype", "dtype")  # read above, outside the reader
    if native:
        reader.notes.append(f"no 'model_type': read as {native}'s own config format")
    if not is_checked_type(model_type):
        reader.notes.append(
            f"model type {model_type!r} has no rules of its own in kvcalc: read by the generic rules (heads, KV "
            "heads, head_dim, layer_types, sliding_window), which no check has confirmed for it"
        )
    max_context, max_context_key = context_limit(reader.raw, model_type, where, reader.defaults, reader.notes)
    spec = ModelSpec(
        name=name,
        caches=tuple(caches),
        layers=layers,
        query_heads=heads,
        model_type=model_type,
        top_model_type=top_type if text is not raw and top_type else None,
        dtype=dtype,
        notes=tuple(reader.notes),
        encoder_tokens=reader.encoder_tokens,
        image_tokens=reader.image_tokens,
        entry_layers=tuple(reader.entry_layers),
        max_context=max_context,
        max_context_key=max_context_key,
        warnings=tuple(
            w.message()
            for w in [
                *reader.unmodelled,
                *unmodelled(reader.raw._data, reader.raw.seen, where, model_type=reader.model_type),
            ]
        ),
    )
    return spec, reader


# Counts that must be whole numbers above zero wherever a config gives them (count_field), whether
# or not the estimate reads them: fit and speed size activations from the vocabulary.
_COUNT_KEYS = (
    *CONTEXT_KEYS, "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size", "vocab_size",
)  # fmt: skip


def is_checked_type(model_type: str) -> bool:
    """Whether kvcalc's reading of this model type has been checked against the model's code."""
    from kvcalc.inputs.hf.families import has_family

    return model_type in _CHECKED_TYPES or model_type in _FAMILY_DEFAULTS or has_family(model_type)


def _native_format(config: Mapping[str, Any]) -> str:
    """The name of a checkpoint format of its own that a config without model_type is in ("" for none)."""
    from kvcalc.inputs.hf.families.mamba_ssm import MODEL_TYPE, is_mamba_ssm

    return MODEL_TYPE if is_mamba_ssm(config) else ""


def _model_type(config: Mapping[str, Any], where: str = "") -> str:
    value = config.get("model_type")
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"config field '{where}model_type' must be a string, got {value!r}")
    return value or ""


# Wrappers whose text model is not Llama: MllamaConfig.sub_configs_defaults (transformers 5.24,
# models/mllama/configuration_mllama.py) makes its text_config a MllamaTextConfig; MiniMaxM3VLConfig's
# (models/minimax_m3_vl/configuration_minimax_m3_vl.py) a MiniMaxM3VLTextConfig.
_NESTED_TEXT_TYPES = {"mllama": "mllama_text_model", "minimax_m3_vl": "minimax_m3_vl_text"}


def _nested_default_type(top_type: str) -> str:
    # LlavaConfig and most vision-language wrappers default their text model to Llama.
    return _NESTED_TEXT_TYPES.get(top_type, "llama") if top_type else ""


def family_default(model_type: str, key: str) -> Any:
    """The config-class default of ``key`` for ``model_type`` that kvcalc knows (None: none)."""
    return _FAMILY_DEFAULTS.get(model_type, {}).get(key)


def text_config(raw: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The mapping that describes the language model, like ``get_text_config(decoder=True)``, and
    the prefix that names its fields in messages."""
    return _text_config(raw)


# Keys under which a composite config nests the model that caches (transformers 5.24: T5Gemma's
# decoder, Dia's and Canary's decoder_config, MusicGen's decoder, EncoderDecoderConfig's decoder,
# PI0's vlm_config).
_NESTED_DECODER_KEYS = ("decoder", "decoder_config", "vlm_config")


def _refuse_nested_decoder(raw: Mapping[str, Any], name: str) -> None:
    """A config whose caching model is a nested config kvcalc does not read is refused naming it."""
    for key in _NESTED_DECODER_KEYS:
        nested = raw.get(key)
        if isinstance(nested, Mapping) and not any(k in raw for k in (*_LAYER_KEYS, "decoder_layers")):
            kind = nested.get("model_type") if isinstance(nested.get("model_type"), str) else "a model"
            raise ConfigError(
                f"{name}: config field '{key}' nests the model that caches ({kind}) inside a composite config: "
                "kvcalc does not model a decoder nested this way"
            )


# Fields that run some layers more than once per token (transformers 5.24: Dory's n_recurrent_loops,
# each pass writing K/V of its own under recurrent_kv_cache_mode "per_loop", modeling_dory.py
# DoryModel.forward; Inkling2-Loop's loop_num_passes over loop_layer_index_start..end).
_LOOP_KEYS = ("n_recurrent_loops", "loop_num_passes")


def _refuse_looped(text: Mapping[str, Any], where: str) -> None:
    for key in _LOOP_KEYS:
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            raise ConfigError(
                f"config field '{where}{key}' ({value}) runs layers more than once per token (looped depth; "
                "Dory caches K/V per pass): kvcalc does not model the cache of looped layers"
            )


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


def _model_dtype(text: Mapping[str, Any], raw: Mapping[str, Any], text_where: str, notes: list[str]) -> DType | None:
    """The model's compute dtype: the text model's own field first, then the whole config's."""
    for config, where in ((text, "text "), (raw, "")) if text is not raw else ((raw, ""),):
        # transformers 5.24 configuration_utils.py PreTrainedConfig.__post_init__ (lines 438-442):
        # "If both are provided, keep `dtype`"; torch_dtype is read only when dtype is absent or null.
        key = "dtype" if config.get("dtype") is not None else "torch_dtype"
        value = config.get(key)
        if value is not None:
            if not isinstance(value, str):
                field = f"{text_where if config is text else ''}{key}"
                raise ConfigError(f"config field '{field}' must name a dtype, got {value!r}")
            found = lookup_dtype(value)
            if found is not None and found.name in _COMPUTE_DTYPES:
                return found
            notes.append(
                f"{where}config {key} {value[:40]!r} is not a compute dtype (fp32, fp16, bf16), so it does not "
                "set the KV format; it is ignored"
            )
    return None


def _heads_and_head_dim(r: _Reader, head_dim_keys: tuple[str, ...] | None = None) -> tuple[int, int]:
    """Query heads and head_dim; a family whose head_dim is a class default names its spellings in
    ``head_dim_keys`` (the first present, else that default, noted)."""
    heads = r.positive_int(_HEAD_KEYS)
    if head_dim_keys is not None:
        return heads, r.positive_int(head_dim_keys)
    # attention_head_dim: Hunyuan's remote modeling_hunyuan.py (head_dim = config.attention_head_dim)
    # and vLLM's hunyuan_v1.py (head_dim, else attention_head_dim, else hidden_size / heads).
    explicit = r.first_key(("head_dim", "attention_head_dim", "d_kv", "kv_channels", "attention_head_size"))
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
    elif "num_key_value_heads" in r.defaults:
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


def _layer_kinds(r: _Reader, layers: int, aliases: Mapping[str, str] = _LAYER_TYPE_ALIASES) -> list[str]:
    """One normalised kind per layer: explicit ``layer_types`` (names as ``aliases`` maps them) or
    the pattern the config's fields derive."""
    if r.raw.get("layer_types") is not None:
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
    if r.has("sliding_window") or ("sliding_window" not in r.raw and "sliding_window" in r.defaults):
        # Mistral, Phi-3, Starcoder2: a non-null sliding_window applies to every layer.
        return ["sliding_attention"] * layers
    return ["full_attention"] * layers


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
    layers = _checked_layers(r, r.positive_int(_LAYER_KEYS))
    kinds = _layer_kinds(r, layers)
    attention, heads = _kinds_attention(r, kinds)
    return _layer_entries(r, layers, kinds, attention), layers, heads


def _kinds_attention(
    r: _Reader, kinds: list[str], *, head_dim_keys: tuple[str, ...] | None = None
) -> tuple[AttentionCache | LatentCache | None, int | None]:
    """The attention entry of the layers of ``kinds`` and the query heads; (None, None) when every
    layer keeps a state or nothing. ``head_dim_keys``: as for ``_heads_and_head_dim``."""
    if not any(k not in (*_STATE_KINDS, "no_cache") for k in kinds):
        return None, None
    if not r.defaults and r.first_key(_HEAD_KEYS) is None and not r.has("kv_lora_rank"):
        raise ConfigError(
            f"config of model type {r.model_type!r} has no attention geometry kvcalc can "
            f"read (no '{r.where}num_attention_heads' or equivalent)"
        )
    return _attention_entry(r, head_dim_keys=head_dim_keys)


def _layer_entries(
    r: _Reader,
    layers: int,
    kinds: list[str],
    attention: AttentionCache | LatentCache | None,
    own: Callable[[str], LayerCache | None] | None = None,
) -> list[LayerCache]:
    """One cache entry per layer kind: ``own(kind)`` where a family gives one, else the generic state
    or (windowed) attention entry; then the layers that share K/V (``num_kv_shared_layers``)."""
    caches: list[LayerCache] = []
    if not any(kind in _STATE_KINDS for kind in kinds):
        # The recurrent-state dtype (read by _recurrent_dtype) sizes nothing without a state layer.
        r.considered("mamba_ssm_dtype", "mamba_ssm_cache_dtype")
    if "short_conv" not in kinds:
        r.considered(*_SHORT_CONV_KEYS)  # an LFM2 with attention in every layer
    for kind in kinds:
        entry = own(kind) if own is not None else None
        if entry is not None:
            caches.append(entry)
            continue
        if kind in _STATE_KINDS:
            caches.append(_state_entry(r, kind))
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
    return _cross_layer_shared(r, caches)


def _cross_layer_shared(r: _Reader, caches: list[LayerCache]) -> list[LayerCache]:
    """Cross-layer attention (CLA; Hunyuan-Large's remote code, modeling_hunyuan.py): with
    ``use_cla``, a layer whose index is a multiple of ``cla_share_factor`` computes K and V, and the
    next factor - 1 layers attend with those (``prev_kv_states``), caching nothing of their own."""
    if not r.flag("use_cla"):
        r.considered("cla_share_factor")
        return caches
    factor = r.positive_int("cla_share_factor", default=1)
    return [c if i % factor == 0 or not c.caches_tokens else SharedCache() for i, c in enumerate(caches)]


def _attention_entry(
    r: _Reader, *, head_dim_keys: tuple[str, ...] | None = None
) -> tuple[AttentionCache | LatentCache, int]:
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
    heads, head_dim = _heads_and_head_dim(r, head_dim_keys)
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


def _state_entry(r: _Reader, kind: str, *, inner: Callable[[_Reader], int] | None = None) -> StateCache:
    """A Gated DeltaNet or Mamba layer's state; ``inner`` reads a family's own Mamba channels (else
    ``_mamba_inner``)."""
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
    d_inner = (inner or _mamba_inner)(r)
    return StateCache(
        family="mamba",
        conv_channels=d_inner + 2 * groups * d_state,
        conv_kernel=d_conv,
        recurrent_elements=d_inner * d_state,
        recurrent_dtype=_recurrent_dtype(r),
    )


def _mamba_inner(r: _Reader) -> int:
    """A Mamba block's d_inner channels: heads x head width, else expand x hidden_size."""
    if r.has("mamba_n_heads") and r.has("mamba_d_head"):  # Granite-4 / Bamba spelling
        return r.positive_int("mamba_n_heads") * r.positive_int("mamba_d_head")
    return r.positive_int(("mamba_expand", "expand")) * r.positive_int(_HIDDEN_KEYS)


# The model types whose recurrent-state dtype field vLLM reads (vllm/model_executor/models/config.py):
# NemotronHForCausalLMConfig (mamba_ssm_cache_dtype, float32 when absent) and
# Qwen3_5ForConditionalGenerationConfig (mamba_ssm_dtype of the text config).
_VLLM_READS_SSM_DTYPE = ("nemotron_h", "qwen3_5")


def _recurrent_dtype(
    r: _Reader, keys: tuple[str, ...] = ("mamba_ssm_dtype", "mamba_ssm_cache_dtype"), absent: DType | None = None
) -> DType | None:
    """The recurrent (SSM / delta-rule) state's own format, as the config names it in the first of
    ``keys``: Qwen3.5's ``mamba_ssm_dtype`` ("float32"), Nemotron-H's ``mamba_ssm_cache_dtype``
    (families/nemotron_h.py, which gives its ``absent`` default). It must name a compute dtype;
    ``absent`` when the config names none."""
    key = r.first_key(keys)
    if key is None:
        return absent
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


# What family modules (kvcalc.inputs.hf.families) build on: the reader and the generic entries, under public
# names so that a family's module reads like the generic rules it extends.
Reader = _Reader
LAYER_KEYS, HEAD_KEYS, HIDDEN_KEYS, KV_HEAD_KEYS = _LAYER_KEYS, _HEAD_KEYS, _HIDDEN_KEYS, _KV_HEAD_KEYS
STATE_KINDS = _STATE_KINDS
LAYER_TYPE_ALIASES = _LAYER_TYPE_ALIASES
layer_kinds = _layer_kinds
kinds_attention = _kinds_attention
layer_entries = _layer_entries
attention_entry = _attention_entry
heads_and_head_dim = _heads_and_head_dim
kv_heads = _kv_heads
windowed = _windowed
state_entry = _state_entry
mamba_inner = _mamba_inner
recurrent_dtype = _recurrent_dtype
family_layer_types = _family_layer_types
checked_layers = _checked_layers
non_negative = _non_negative
