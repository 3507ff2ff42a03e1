"""The guard: config fields kvcalc did not read that could shape the cache.

kvcalc is exact on the layouts it models; on a new architecture the danger is a confident number
that ignores a field it never read. The config reader records every key it consumes; whatever
is left is checked here, so a field kvcalc does not model is named in a warning instead of being
silently ignored.

A field is named when (a) the model type's own code reads it and (b) the rule below says it can
shape the cache. (a) is decided from transformers' sources at the pinned version: the table
``kvcalc.inputs.hf.reads`` (written by scripts/transformers_tables.py) lists, per model type, the
fields its modeling, configuration and cache code reads, and per quant_method the fields its
quantizer reads; a field no code of the model type reads cannot change what it caches, whatever
its name (``enable_lm_head_fp32`` on Hy3). For a model type transformers does not ship (remote
code), (a) cannot be decided: the rule alone judges, and the warning says so. An object the code
reads (``attn_config``) has its fields judged by the rule alone; one it never reads is skipped.

The rule (b). A key the reader did not consume is **cache-shaping** when

1. its value says something: not null, false, 0, "" or an empty list/object; and
2. one of its name's words is one of ``SHAPING_WORDS`` (heads, KV, windows, chunks, layers,
   attention, latent ranks, compression, indexers, sparsity, state-space and convolution
   state, per-kind geometry, layer patterns, cross-attention, KV sharing, per-layer blocks); and
3. it is not one of ``NOT_SHAPING`` (exact names) nor has a word of ``NOT_SHAPING_PARTS`` (fields
   that hold such a word but only size weights, MLPs or experts, or tune numerics: norms,
   dropouts, biases, RoPE, routing), each listed with why.

Words, not substrings: a name is split into its words (``name_words``: at ``_``, ``-``, ``.``,
digits and lower-to-upper case changes, lower-cased), and a word matches a listed one in its
inflected forms (``heads``, ``chunked``, ``indexer``, ``compression``, ``indices``,
``convolution``) or glued to other known words (``headdim`` = head + dim, ``nheads``, ``qkv``,
``shortconv``, ``layernorm``), never as an arbitrary piece of a longer word: ``conv`` does not
match ``modules_to_not_convert``.

Aliases (``ALIASES``). Several names spell one quantity (``n_groups`` / ``mamba_n_groups`` /
``mamba_num_groups``). An unread alias of a quantity whose other spelling the reader did read is
judged by its value, not its name: equal to the value read, it says nothing new and is silent;
different, the config is ambiguous and the warning names both fields and both values.

Objects are followed: an unread object whose own name is cache-shaping is named whole; an
unread object that is not is searched for cache-shaping keys inside (``a.b``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

# Words in a field name that can change what a layer caches, with what they would change (a
# name with ``_`` is a phrase: its words in a row, as in ``num_key_value_heads``).
SHAPING_WORDS: dict[str, str] = {
    "head": "head geometry",
    "kv": "K/V geometry",
    "key_value": "K/V geometry",
    "window": "an attention window",
    "sliding": "an attention window",
    "swa": "an attention window",
    "chunk": "attention chunks",
    "layer": "the per-layer layout",
    "pattern": "the per-layer layout",
    "hybrid": "the per-layer layout",
    "block_config": "per-layer blocks",
    "attention": "attention",
    "attn": "attention",
    "lora": "a latent (MLA) cache",
    "rank": "a latent (MLA) cache",
    "latent": "a latent (MLA) cache",
    "compress": "a compressed cache",
    "index": "a sparse-attention index cache",
    "sparse": "sparse attention",
    "topk": "sparse attention",
    "ssm": "a recurrent state",
    "mamba": "a recurrent state",
    "conv": "a convolution state",
    "state": "a recurrent state",
    "linear": "linear attention",
    "global": "per-kind geometry",
    "local": "per-kind geometry",
    "cross": "cross-attention",
    "shared": "KV sharing",
    "cla": "cross-layer KV sharing",
    "nope": "per-kind geometry",
}

# Exact names that contain a shaping word but do not shape the cache, and why.
NOT_SHAPING: dict[str, str] = {
    # XLM's special token ids (configuration_xlm.py): "index" here is a vocabulary position.
    **dict.fromkeys(("bos_index", "eos_index", "pad_index", "unk_index", "mask_index"), "a special token id"),
    "attention_bias": "a bias on projections",
    "use_attention_gate": "a gate on the attention output (LFM3)",
    "attention_dropout": "training only",
    "attn_pdrop": "training only",
    "attn_logit_softcapping": "numerics of scores",
    "query_pre_attn_scalar": "numerics of scores",
    "parallel_attn": "block wiring (Falcon), not what is cached",
    "use_qk_norm": "numerics",
    "q_lora_rank": "the query projection; MLA caches only the KV latent",
    "mamba_dt_rank": "the dt projection of Mamba, not its state",
    "time_step_rank": "the dt projection of Mamba, not its state",
    "topk_group": "MoE routing",
    "topk_method": "MoE routing",
    "norm_topk_prob": "MoE routing",
    "decoder_sparse_step": "MoE placement (Qwen-MoE), not attention",
    "mlp_only_layers": "MoE placement",
    "interleave_moe_layer_step": "MoE placement",
    "moe_layer_freq": "MoE placement",
    "first_k_dense_replace": "MoE placement",
    "cache_implementation": "a generate() default of transformers, not the model's layout",
    "use_cache": "a runtime switch",
    "relative_attention_num_buckets": "T5's position bias",
    "relative_attention_max_distance": "T5's position bias",
    # DeepSeek's multi-token-prediction layer caches only under speculative decoding, which
    # kvcalc does not model; published per-token figures leave it out (61 layers for V3).
    "num_nextn_predict_layers": "multi-token prediction, cached only with speculative decoding",
    "apply_residual_connection_post_layernorm": "block wiring",
    "for_llm_compressor": "a flag of the llm-compressor tool (quantized checkpoints)",
    # quantization_config.ignored_layers (fp8 checkpoints: MiMo-V2.5): modules whose weights stay
    # unquantized; it names weights, not what attention caches.
    "ignored_layers": "weights a quantization recipe leaves unquantized",
    # quantization_config.linear_class (BitNet b1.58, quant_method bitnet): the module put in place
    # of nn.Linear, "bitlinear" or "autobitlinear" (transformers 5.24 quantizers/quantizer_bitnet.py,
    # integrations/bitnet.py replace_with_bitnet_linear): weights, not what attention caches.
    "linear_class": "the weight module a quantizer puts in place of nn.Linear",
    # DeepSeek-V3.2, MiniMax-M3, ... as transformers 5.24 saves them: "dense" or "sparse" (MoE) MLP per layer.
    "mlp_layer_types": "the MLP of each layer (dense or MoE): weights",
    # Gemma 3n / Gemma 4 E models: per-layer input embeddings added to the residual stream.
    "hidden_size_per_layer_input": "per-layer input embeddings: weights",
    # Scalings of queries or scores (Granite's muP attention_multiplier, GPT-2's scale_attn_weights,
    # GPT-BigCode's softmax precision, Llama 4's attention temperature): numerics, not what is kept.
    "attention_multiplier": "numerics of scores",
    "scale_attn_weights": "numerics of scores",
    "attention_softmax_in_fp32": "numerics of scores",
    "scale_attention_softmax_in_fp32": "numerics of scores",
    "attn_scale": "numerics of queries",
    "attn_temperature_tuning": "numerics of queries",
    # Mamba hybrids (Jamba, Zamba, ...): the kernels used, not the state they keep.
    "use_mamba_kernels": "which kernels run the scan",
    # Qwen3-VL / Qwen3.5 vision_config: the vision blocks whose features are added to the language
    # model's hidden states (DeepStack): it adds to activations, not to what any layer caches.
    "deepstack_visual_indexes": "vision features merged into hidden states, not cached",
    # Gemma 3 / PaliGemma / Gemma 4: image tokens attend both ways (Gemma3Attention.is_causal, the
    # mask): which cached tokens a query sees, not which are cached.
    "use_bidirectional_attention": "the attention mask, not what is cached",
    # Doge's dynamic mask attention (modeling_doge.py prepare_dynamic_mask) masks all but
    # keep_window_size keys per query; DogeAttention still caches every token (cache.update).
    "keep_window_size": "a dynamic attention mask over cached keys, not what is cached",
    # AFMoE (configuration_afmoe.py), Lfm2-MoE: the first layers' dense MLPs.
    "num_dense_layers": "MoE placement",
}

# Name parts that mark a field as sizing weights or numerics only.
NOT_SHAPING_PARTS: dict[str, str] = {
    "dropout": "training only",
    "pdrop": "training only",
    "norm": "normalisation numerics",
    "eps": "normalisation numerics",
    "rope": "position encoding",
    "rotary": "position encoding",
    "expert": "MoE weights",
    "moe": "MoE weights",
    "router": "MoE routing",
    "initializer": "initialisation",
    "encoder": "the encoder, which caches nothing (cross-attention uses the decoder's heads)",
    "vision": "the vision tower",
    "bias": "a bias",
    "intermediate": "MLP width",
    "mlp": "MLP weights",
    "vocab": "embeddings",
    "token_id": "special tokens",
    "token_index": "special tokens",
    "audio": "the audio encoder, which caches nothing",
    # A recurrent layer's time-step and decay parameterisation (OLMo-Hybrid's linear_dt_min,
    # linear_a_log_max, linear_allow_neg_eigval): numerics of the update, not the state's size.
    "dt": "the time-step parameterisation of a recurrent layer",
    "a_log": "the decay parameterisation of a recurrent layer",
    "eigval": "numerics of a recurrent update",
}


# Spellings of the listed words that are not the word plus a regular ending (``_ENDINGS``).
_IRREGULAR: dict[str, tuple[str, ...]] = {
    "conv": ("convolution", "convolutions", "convolutional"),
    "index": ("indices",),
    "sparse": ("sparsity",),
    "shared": ("share", "shares", "sharing"),
    "sliding": ("slide",),
    "eps": ("epsilon",),
}
_ENDINGS = ("", "s", "es", "ed", "er", "ers", "or", "ors", "ing", "ion", "ions")
# Pieces that glue onto a word without a separator in real names: before it (``nheads``,
# ``qkv``, ``wkv``, ``dstate``, ``shortconv``), after it (``headdim``). Any listed word glues too
# (``layernorm``, ``kvheads``). ``n`` only ever comes first, so ``swan`` is no ``swa``.
_GLUE_BEFORE = frozenset({"n", "num", "d", "q", "k", "v", "qk", "w", "short", "max", "min", "per", "multi", "sub"})
_GLUE_AFTER = frozenset({"dim", "dims", "size", "len", "count", "idx", "ids", "kernel"})


def _forms(word: str) -> frozenset[str]:
    return frozenset({word + ending for ending in _ENDINGS} | set(_IRREGULAR.get(word, ())))


def _last_words() -> dict[str, frozenset[str]]:
    """Every listed phrase's last word, with the forms it may take."""
    phrases = [*SHAPING_WORDS, *NOT_SHAPING_PARTS]
    return {w: _forms(w) for w in {p.split("_")[-1] for p in phrases}}


_FORMS = _last_words()
_KNOWN = frozenset(form for forms in _FORMS.values() for form in forms)


def name_words(key: str) -> tuple[str, ...]:
    """The words of a field name, lower case: split at ``_``, ``-``, ``.`` and other separators,
    digits, and case changes (``conv_L_cache`` -> conv, l, cache; ``headDim`` -> head, dim)."""
    return tuple(w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", key))


@cache
def _glued(piece: str, allowed: frozenset[str]) -> bool:
    """Whether ``piece`` is a run of ``allowed`` pieces or listed words (empty: trivially)."""
    if not piece:
        return True
    return any(piece.startswith(p) and _glued(piece[len(p) :], allowed) for p in allowed | _KNOWN if p)


@cache
def _word_matches(token: str, word: str) -> bool:
    """Whether one word of a name is ``word`` (a listed single word), in a form of it, alone or
    glued to known pieces."""
    forms = _FORMS.get(word) or _forms(word)
    if token in forms:
        return True
    for form in forms:
        start = token.find(form)
        while start != -1:
            if _glued(token[:start], _GLUE_BEFORE) and _glued(token[start + len(form) :], _GLUE_AFTER):
                return True
            start = token.find(form, start + 1)
    return False


def has_word(key: str, phrase: str) -> bool:
    """Whether the field name ``key`` holds ``phrase`` (``kv``, ``key_value``) as words."""
    words, wanted = name_words(key), phrase.split("_")
    *lead, last = wanted
    for start in range(len(words) - len(wanted) + 1):
        run = words[start : start + len(wanted)]
        if list(run[:-1]) == lead and (run[-1] in _forms(last) if lead else _word_matches(run[-1], last)):
            return True
    return False


def _excluded(key: str) -> bool:
    return any(has_word(key, part) for part in NOT_SHAPING_PARTS)


# Names that spell one quantity, as the config reader (kvcalc.inputs.hf.configs and kvcalc.inputs.hf.families) reads
# them: the reader takes the first present name of a group (configs._LAYER_KEYS, _HEAD_KEYS,
# _KV_HEAD_KEYS, _HIDDEN_KEYS, the head_dim and window keys of _heads_and_head_dim / _windowed, the
# Mamba keys of _state_entry, falcon_h1, granitemoehybrid and zamba2), and a few more spellings
# published configs and other engines use for the same quantity (mamba_num_groups, mamba_state_dim,
# ...), so that a second spelling is judged by its value (the module's docstring).
ALIASES: dict[str, tuple[str, ...]] = {
    "the layer count": ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "layers"),
    "the attention head count": ("num_attention_heads", "n_head", "num_heads", "n_heads", "attention_heads"),
    "the KV head count": ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "n_head_kv"),
    "the hidden size": ("hidden_size", "n_embd", "d_model", "dim", "emb_dim", "embed_dim"),
    "the attention head width": ("head_dim", "attention_head_dim", "d_kv", "kv_channels", "attention_head_size"),
    "the attention window": ("sliding_window", "sliding_window_size", "attention_window_size"),
    "the per-layer kinds": ("layer_types", "layers_block_type"),
    "the SSM state size": ("mamba_d_state", "ssm_state_size", "state_size", "mamba_state_dim", "mamba_state_size",
                           "d_state"),
    "the SSM group count": ("mamba_n_groups", "n_groups", "mamba_num_groups", "mamba_ngroups", "ngroups"),
    "the Mamba conv kernel": ("mamba_d_conv", "conv_kernel", "mamba_conv_kernel", "d_conv"),
    "the Mamba head count": ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads", "mamba_nheads"),
    "the Mamba head width": ("mamba_head_dim", "mamba_d_head", "mamba_headdim"),
    "the Mamba expansion": ("mamba_expand", "expand"),
}  # fmt: skip


@dataclass(frozen=True)
class Unmodelled:
    """A config field kvcalc did not read that may shape the cache."""

    path: str
    value: Any
    why: str
    # How the field was judged when no code could be consulted ("": read by the model's code).
    basis: str = ""

    def message(self) -> str:
        return (
            f"config field '{self.path}' = {_shown(self.value)} is not modelled by kvcalc and may shape the cache "
            f"({self.why}{self.basis}): this estimate may be wrong"
        )


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown[:37] + "..." if len(shown) > 40 else shown


def _says_something(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def shaping_reason(key: str) -> str | None:
    """Why a field named ``key`` may shape the cache, or None when the rule says it cannot."""
    if key.startswith("_") or key.lower() in NOT_SHAPING or _excluded(key):
        return None
    return next((why for word, why in SHAPING_WORDS.items() if has_word(key, word)), None)


def _alias_verdict(data: Mapping[str, Any], seen: set[str], key: str, where: str) -> str | None:
    """For an unread ``key`` that spells a quantity the reader read under another name: "" when
    both say the same (nothing to warn about), else why they conflict. None: not such an alias."""
    for quantity, names in ALIASES.items():
        if key not in names:
            continue
        read = [n for n in names if n != key and n in seen and data.get(n) is not None]
        if not read:
            return None
        other = next((n for n in read if data[n] != data[key]), None)
        if other is None:
            return ""
        return f"it disagrees with '{where}{other}' = {_shown(data[other])}, which kvcalc reads as {quantity}"
    return None


# --- what the model's own code reads (kvcalc.inputs.hf.reads, from scripts/transformers_tables.py) ---


class _Code:
    """The fields a model type's code reads, looked up on first need (the table is loaded only when
    a config holds a candidate field, so start-up stays cheap). ``reads`` None: no code to consult
    (a model type transformers does not ship, remote code, a nested object), so fields are judged
    by name alone; ``basis`` then says why, where the message should."""

    def __init__(self, lookup: Callable[[], frozenset[str] | None], unknown: Callable[[], str]) -> None:
        self._lookup = lookup
        self._unknown = unknown
        self._resolved = False
        self._reads: frozenset[str] | None = None

    @property
    def reads(self) -> frozenset[str] | None:
        if not self._resolved:
            self._reads, self._resolved = self._lookup(), True
        return self._reads

    def judges_out(self, key: str) -> bool:
        """Whether the code says the field cannot matter: it is never read."""
        return self.reads is not None and key not in self.reads

    def basis(self) -> str:
        return "" if self.reads is not None else self._unknown()


_BY_NAME = _Code(lambda: None, lambda: "")  # a nested object's fields: judged by name


@cache
def model_reads(model_type: str) -> frozenset[str] | None:
    """The fields the guard could name that transformers' code for ``model_type`` reads (its
    modeling, configuration and cache code); None when transformers ships no such model."""
    from kvcalc.inputs.hf import reads

    module = reads.MODULES.get(model_type, model_type.replace("-", "_"))
    names = reads.MODEL_READS.get(module)
    return None if names is None else frozenset(f"{reads.COMMON_READS} {names}".split())


@cache
def quantization_reads(method: str) -> frozenset[str] | None:
    """The fields the guard could name that transformers' config class, quantizer and integrations
    for ``quant_method`` read; None when transformers has no such method."""
    from kvcalc.inputs.hf import reads

    names = reads.QUANTIZATION_READS.get(method)
    return None if names is None else frozenset(names.split())


def _version() -> str:
    from kvcalc.inputs.hf.reads import TRANSFORMERS_VERSION

    return TRANSFORMERS_VERSION


def _model_code(model_type: str) -> _Code:
    return _Code(
        lambda: model_reads(model_type),
        lambda: f"; judged by its name alone: transformers {_version()} has no code for model type {model_type!r}",
    )


def _quantizer_code(quantization: Mapping[str, Any]) -> _Code:
    method = quantization.get("quant_method")
    if not isinstance(method, str):
        return _Code(lambda: None, lambda: "; judged by its name alone: the quantization config names no quant_method")
    return _Code(
        lambda: quantization_reads(method),
        lambda: f"; judged by its name alone: transformers {_version()} has no quantizer for {method!r}",
    )


def unmodelled(
    data: Mapping[str, Any], seen: set[str], where: str = "", *, model_type: str | None = None
) -> list[Unmodelled]:
    """Every unread, cache-shaping field of ``data`` (``seen``: the keys the reader consumed).

    With ``model_type``, ``data`` is that model's config and a field is named only when the model
    type's own code reads it (transformers' code, ``kvcalc.inputs.hf.reads``): a field no code reads
    cannot shape the cache, whatever its name. A model type transformers does not ship is judged by
    name alone, and the warning says so. A ``quantization_config`` is judged by what its
    ``quant_method``'s quantizer reads. Without ``model_type`` (a nested object a family reads),
    fields are judged by name."""
    return _scan(data, seen, where, _model_code(model_type) if model_type else _BY_NAME)


def _scan(data: Mapping[str, Any], seen: set[str], where: str, code: _Code) -> list[Unmodelled]:
    found: list[Unmodelled] = []
    for key, value in data.items():
        if key in seen or not isinstance(key, str) or not _says_something(value):
            continue
        why = _alias_verdict(data, seen, key, where)
        if why is None:
            why = shaping_reason(key)
        elif not why:
            continue
        if why is not None:
            # A dotted key is a GGUF metadata name copied by kvcalc.inputs.gguf.config: llama.cpp's
            # code, not transformers', reads it, so its name alone decides.
            judge = _BY_NAME if "." in key else code
            if not judge.judges_out(key):
                found.append(Unmodelled(f"{where}{key}", value, why, judge.basis()))
        elif isinstance(value, Mapping) and not _excluded(key):
            if key == "quantization_config":
                found += _scan(value, set(), f"{where}{key}.", _quantizer_code(value))
            elif not code.judges_out(key):  # an object the code reads: its fields judged by name
                inner = code if code is _BY_NAME or code.reads is None else _BY_NAME
                found += _scan(value, set(), f"{where}{key}.", inner)
    return found
