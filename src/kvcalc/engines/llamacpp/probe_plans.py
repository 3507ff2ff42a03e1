"""The GGUF the llama.cpp probe hands llama.cpp (kvcalc.engines.llamacpp.probe): ``gguf_plan``, the
metadata convert_hf_to_gguf.py would write for a ModelSpec's llama.cpp architecture (layers, heads, KV
heads, K and V head dims, sliding window or its absence, MLA latent dims, SSM sizes, the indexer's key
length) with a tiny vocabulary and feed-forward; ``file_plan``, a GGUF file's own metadata (every key
with its own value type, no tokenizer); and ``write_gguf``, which writes a plan with no tensor data
(gguf, imported only there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, Protocol

from kvcalc.engines.llamacpp.architectures import Architecture, Indexer, Layout, Ssm, converted, probe_types
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache, IndexerCache, Kind, LatentCache, ModelSpec, StateCache


class GgufTensor(Protocol):
    """A tensor info of a GGUF header: its name and dims."""

    @property
    def name(self) -> str: ...

    @property
    def dims(self) -> tuple[int, ...]: ...


class GgufFile(Protocol):
    """What ``file_plan`` reads of a GGUF header (kvcalc.inputs.gguf.GgufHeader has it): its
    metadata, each key's value type id (and an array's item type id), its tensor infos."""

    @property
    def metadata(self) -> dict[str, Any]: ...

    @property
    def value_types(self) -> dict[str, tuple[int, int | None]]: ...

    @property
    def tensors(self) -> Sequence[GgufTensor]: ...


INSTALL_HINT = "the llama.cpp probe needs llama-cpp-python and gguf: pip install 'kvcalc[llamacpp]'"

# The tiny parts of the model: none of them shapes the KV cache.
TINY_EMBD = 64
TINY_FF = 64
TINY_VOCAB = 32
TINY_EXPERTS = 2

# Which llama.cpp architecture convert_hf_to_gguf.py writes for an HF model_type, and what it writes
# (whether sliding_window, the keys its loader requires): kvcalc.engines.llamacpp.architectures
# (Architecture.probe: the architectures built here; _recurrent_plan and _sparse_plan for those with
# a recurrent state or an indexer).


class LlamaCppProbeError(Exception):
    """The probe could not run llama.cpp (missing package, failed load, time-out)."""


class LlamaCppMissing(LlamaCppProbeError):
    """llama-cpp-python or gguf is not installed here (INSTALL_HINT)."""


@dataclass(frozen=True)
class GgufPlan:
    """What convert_hf_to_gguf.py would write for the model's attention, as GGUF metadata:
    (key, gguf value type name, value) in order."""

    arch: str
    keys: tuple[tuple[str, str, Any], ...]
    weights_bytes: int = 0  # at most, in float32: what the tiny model's tensors take
    notes: tuple[str, ...] = ()


def gguf_plan(spec: ModelSpec, n_ctx_train: int) -> GgufPlan:
    """The GGUF metadata of ``spec``'s attention geometry; a UsageError for a model the probe
    cannot build (one line saying why)."""
    mt = spec.model_type
    record = converted(mt)
    if record is None or not record.probe:
        known = ", ".join(probe_types())
        raise UsageError(f"the llama.cpp probe cannot build a {mt} model (it builds {known})")
    if record.ssm is not None:
        return _recurrent_plan(record, spec, n_ctx_train)
    if record.indexer is not None:
        return _sparse_plan(record, spec, n_ctx_train)
    arch = record.name
    caches = spec.caches
    if len(caches) != spec.layers:
        raise UsageError(f"the llama.cpp probe builds one cache entry per layer; {spec.name} has {len(caches)}")
    keys: list[tuple[str, str, Any]] = [
        ("general.architecture", "string", arch),
        ("general.name", "string", f"kvcalc probe of {spec.name}"),
        (f"{arch}.context_length", "uint32", n_ctx_train),
        (f"{arch}.embedding_length", "uint32", TINY_EMBD),
        (f"{arch}.feed_forward_length", "uint32", TINY_FF),
        (f"{arch}.block_count", "uint32", spec.layers),
        (f"{arch}.vocab_size", "uint32", TINY_VOCAB),
        (f"{arch}.attention.layer_norm_rms_epsilon", "float32", 1e-5),
        (f"{arch}.attention.layer_norm_epsilon", "float32", 1e-5),
        ("tokenizer.ggml.model", "string", "none"),
    ]
    heads = spec.query_heads
    width = TINY_EMBD
    first = caches[0]
    if record.full_width and isinstance(first, AttentionCache):
        width = (heads or first.kv_heads) * first.k_head_dim
        keys = [(k, kind, width if k.endswith(".embedding_length") else v) for k, kind, v in keys]
    if all(isinstance(c, LatentCache) for c in caches):
        keys += _mla_keys(arch, caches[0], heads)  # type: ignore[arg-type]  # all latent, checked above
    elif all(isinstance(c, AttentionCache) and c.tokens == "decoder" for c in caches):
        keys += _attention_keys(record, spec)
    else:
        kinds = ", ".join(sorted({c.kind.value for c in caches}))
        raise UsageError(f"the llama.cpp probe builds plain attention or MLA layers; {spec.name} has {kinds}")
    keys += [(f"{arch}.{key}", *_stand_in(key, spec)) for key in record.probe_keys]
    return GgufPlan(arch, tuple(keys), _weights_bytes(spec, width))


def _sparse_plan(record: Architecture, spec: ModelSpec, n_ctx_train: int) -> GgufPlan:
    """The keys convert_hf_to_gguf.py writes for DeepSeek-V3.2 (deepseek32), GLM-5 (glm-dsa) and
    MiniMax-M3 (minimax-m3), from kvcalc's layers: the MLA (or GQA) geometry, the indexer's key
    length and the layers that have one, with a tiny vocabulary, MLP and MoE (sigmoid gating, which
    both loaders require), which size no cache. The indexer's head count, top-k and blocks size no
    cache either (llama_kv_cache_dsa / _msa keep one key row per token): tiny values stand in."""
    arch = record.name
    layers = spec.layers
    where = spec.entry_layers or tuple(range(len(spec.caches)))
    main = {where[i]: c for i, c in enumerate(spec.caches) if c.kind is not Kind.INDEXER}
    indexed = {where[i]: c for i, c in enumerate(spec.caches) if isinstance(c, IndexerCache)}
    key_dims = {(c.head_dim, c.ratio) for c in indexed.values()}
    if (len(where) != len(spec.caches) or sorted(main) != list(range(layers)) or len(key_dims) != 1
            or len(main) + len(indexed) != len(spec.caches)):  # fmt: skip
        raise UsageError(f"the llama.cpp probe builds {arch} with one cache per layer and one indexer key width; "
                         f"{spec.name} has others")  # fmt: skip
    ((key_length, ratio),) = key_dims
    if ratio != 1:
        raise UsageError(f"the llama.cpp probe builds {arch} with an uncompressed indexer; {spec.name}'s differs")
    moe = [(f"{arch}.expert_count", "uint32", 4), (f"{arch}.expert_used_count", "uint32", 2),
           (f"{arch}.expert_feed_forward_length", "uint32", TINY_FF), (f"{arch}.expert_gating_func", "uint32", 2),
           (f"{arch}.expert_shared_count", "uint32", 1)]  # fmt: skip
    # src/models/minimax-m3.cpp asserts one indexer head per GQA group (HKV == Hd): its KV heads.
    gqa = {c.kv_heads for c in spec.caches if isinstance(c, AttentionCache)}
    indexer = [
        (f"{arch}.attention.indexer.head_count", "uint32", gqa.pop() if len(gqa) == 1 else 2),
        (f"{arch}.attention.indexer.key_length", "uint32", key_length),
        (f"{arch}.attention.indexer.top_k", "uint32", 16),
    ]
    keys: list[tuple[str, str, Any]] = [
        ("general.architecture", "string", arch),
        ("general.name", "string", f"kvcalc probe of {spec.name}"),
        (f"{arch}.context_length", "uint32", n_ctx_train),
        (f"{arch}.embedding_length", "uint32", 4 * TINY_EMBD),
        (f"{arch}.feed_forward_length", "uint32", TINY_FF),
        (f"{arch}.block_count", "uint32", layers),
        (f"{arch}.vocab_size", "uint32", TINY_VOCAB),
        (f"{arch}.attention.layer_norm_rms_epsilon", "float32", 1e-5),
        ("tokenizer.ggml.model", "string", "none"),
        *moe,
        *indexer,
    ]
    caches = list(main.values())
    if record.layout is Layout.SPARSE_MLA:
        if not all(isinstance(c, LatentCache) for c in caches) or len(set(caches)) != 1:
            raise UsageError(f"the llama.cpp probe builds {arch} with MLA layers of one geometry; {spec.name}'s differ")
        keys += _mla_keys(arch, caches[0], spec.query_heads)  # type: ignore[arg-type]  # latent, checked above
        keys.append((f"{arch}.leading_dense_block_count", "uint32", 1))
        if record.indexer is Indexer.TYPED:
            # src/models/glm-dsa.cpp: indexer.types marks the layers that own an indexer ("full").
            keys.append((f"{arch}.attention.indexer.types", "array[bool]", [i in indexed for i in range(layers)]))
        elif sorted(indexed) != list(range(layers)):
            raise UsageError(f"llama.cpp gives every deepseek32 layer an indexer; {spec.name} has {len(indexed)}")
    else:
        # src/llama-model.cpp create_memory: MiniMax-M3's indexer caches the layers past the dense lead.
        lead = min(indexed, default=layers)
        if sorted(indexed) != list(range(lead, layers)):
            raise UsageError(f"llama.cpp gives minimax-m3 an indexer on every layer past the dense lead; {spec.name} "
                             "has others")  # fmt: skip
        keys += _attention_keys(record, spec)
        keys += [
            (f"{arch}.leading_dense_block_count", "uint32", lead),
            (f"{arch}.expert_weights_scale", "float32", 2.0),
            (f"{arch}.expert_weights_norm", "bool", True),
            (f"{arch}.attention.indexer.block_size", "uint32", 16),
            (f"{arch}.attention.indexer.local_blocks", "uint32", 1),
        ]
    note = f"the probe wrote {arch} with a tiny MoE and stand-in indexer heads, top-k and blocks, which size no cache"
    return GgufPlan(arch, tuple(keys), 2**62, (note,))  # weights unbounded: sized with no_alloc


def _ssm_sizes(state: StateCache, name: str) -> tuple[int, int, int]:
    """(d_inner, d_state, n_group) of a Mamba-2 or gated-delta-net state: llama.cpp keeps
    (d_conv - 1) x (d_inner + 2 x n_group x d_state) conv values and d_state x d_inner state values
    (src/llama-hparams.cpp n_embd_r / n_embd_s, 0c1e570), all the bytes depend on. kvcalc's state
    holds the two products, not the factors: the probe takes the smallest d_state that gives both
    in whole numbers (the converters' own sizes for every preset kvcalc has)."""
    channels, recurrent = state.conv_channels, state.recurrent_elements
    for d_state in range(1, recurrent + 1):
        if recurrent % d_state:
            continue
        d_inner = recurrent // d_state
        rest = channels - d_inner
        if rest > 0 and rest % (2 * d_state) == 0 and d_inner % (rest // (2 * d_state)) == 0:
            return d_inner, d_state, rest // (2 * d_state)
    raise UsageError(f"the llama.cpp probe cannot size {name}'s SSM state as llama.cpp's d_inner, d_state, n_group")


def _recurrent_plan(record: Architecture, spec: ModelSpec, n_ctx_train: int) -> GgufPlan:
    """The keys convert_hf_to_gguf.py writes for a recurrent or hybrid architecture (the converters
    named at its record), from kvcalc's layers: the SSM sizes, the conv kernel, the attention
    layers' heads and head dims, and which layer is which; a tiny vocabulary, MLP and (where the
    architecture needs some) experts, which size no cache."""
    arch, layout = record.name, record.layout
    where = spec.entry_layers or tuple(range(len(spec.caches)))
    states = {where[i]: c for i, c in enumerate(spec.caches) if isinstance(c, StateCache)}
    attention = {where[i]: c for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)}
    others = sorted({c.kind.value for c in spec.caches if not isinstance(c, (StateCache, AttentionCache))})
    if others and not (layout is Layout.NEMOTRON_H and others == ["no_cache"]):  # Nemotron-H's MLP layers
        raise UsageError(f"the llama.cpp probe builds {arch} with state and attention layers; {spec.name} has {others}")
    if not states or len(set(states.values())) > 1:
        raise UsageError(f"the llama.cpp probe builds {arch} layers of one state geometry; {spec.name}'s differ")
    state = next(iter(states.values()))
    geometries = {(c.kv_heads, c.k_head_dim, c.v_head_dim, c.window, c.tokens) for c in attention.values()}
    if len(geometries) > 1 or any(g[3] is not None or g[4] != "decoder" for g in geometries):
        raise UsageError(f"the llama.cpp probe builds {arch} with one full-attention geometry; {spec.name} has others")
    layers = spec.layers
    keys: list[tuple[str, str, Any]] = [
        ("general.architecture", "string", arch),
        ("general.name", "string", f"kvcalc probe of {spec.name}"),
        (f"{arch}.context_length", "uint32", n_ctx_train),
        (f"{arch}.block_count", "uint32", layers),
        (f"{arch}.vocab_size", "uint32", TINY_VOCAB),
        (f"{arch}.attention.layer_norm_rms_epsilon", "float32", 1e-5),
        (f"{arch}.attention.layer_norm_epsilon", "float32", 1e-5),
        ("tokenizer.ggml.model", "string", "none"),
    ]
    width = TINY_EMBD
    if record.ssm is Ssm.SHORTCONV:
        # LFM2's conv runs over the hidden size: n_embd_r = n_embd x (l_cache - 1) (src/llama-hparams.cpp).
        if state.recurrent_elements:
            raise UsageError(f"the llama.cpp probe builds lfm2 short convolutions with no state; {spec.name} has one")
        width = state.conv_channels
        keys.append((f"{arch}.shortconv.l_cache", "uint32", state.conv_kernel))
    elif record.ssm is Ssm.MAMBA1:
        # Mamba-1 (n_group 0): conv over d_inner; src/models/mamba.cpp and jamba.cpp require d_inner = 2 x n_embd.
        d_inner = state.conv_channels
        if state.recurrent_elements % d_inner or d_inner % 2:
            raise UsageError(f"the llama.cpp probe cannot size {spec.name}'s Mamba state as d_inner x d_state")
        width = d_inner // 2
        keys += _ssm_keys(arch, state.conv_kernel, d_inner, state.recurrent_elements // d_inner, None, 16)
    else:
        d_inner, d_state, groups = _ssm_sizes(state, spec.name)
        if record.inner_twice_embd:  # src/models/granite-hybrid.cpp asserts d_inner = 2 x n_embd
            if d_inner % 2:
                raise UsageError(f"the llama.cpp probe cannot build {spec.name}: an odd d_inner {d_inner}")
            width = d_inner // 2
        # SSM heads (ssm.time_step_rank): Mamba-2 heads of 64 where they divide, each group a whole
        # number of heads; Qwen3-Next's value heads of d_state (its head_v_dim = head_k_dim).
        head = d_state if record.ssm is Ssm.GATED_DELTA_NET else 64
        heads = d_inner // head if d_inner % head == 0 and (d_inner // head) % groups == 0 else groups
        keys += _ssm_keys(arch, state.conv_kernel, d_inner, d_state, groups, heads)
    keys.append((f"{arch}.embedding_length", "uint32", width))
    ssm = {k.split(".")[-1]: v for k, _, v in keys if ".ssm." in k}
    written = (
        f"the probe wrote {arch} with ssm inner_size {ssm.get('inner_size')}, state_size {ssm.get('state_size')}, "
        f"group_count {ssm.get('group_count', 0)}: the factors of kvcalc's conv and state sizes, all llama.cpp's "
        "R and S rows depend on"
    )
    # The weights: unbounded (2**62), so llama.cpp sizes them with no_alloc.
    notes = (written if ssm else f"the probe wrote {arch} with shortconv.l_cache {state.conv_kernel}",)
    if layout is Layout.SSM:
        keys += [(f"{arch}.feed_forward_length", "uint32", 0), (f"{arch}.attention.head_count", "uint32", 0)]
        return GgufPlan(arch, tuple(keys), 2**62, notes)
    if not attention:
        raise UsageError(f"the llama.cpp probe builds {arch} with attention layers; {spec.name} has none")
    first = next(iter(attention.values()))
    kv = [first.kv_heads if i in attention else 0 for i in range(layers)]
    keys += [
        (f"{arch}.attention.head_count", "uint32", spec.query_heads or first.kv_heads),
        (f"{arch}.attention.key_length", "uint32", first.k_head_dim),
        (f"{arch}.attention.value_length", "uint32", first.v_head_dim),
        (f"{arch}.rope.dimension_count", "uint32", first.k_head_dim),
    ]
    if layout is Layout.FALCON_H1:  # attention and a Mamba-2 mixer in every layer: a scalar head_count_kv
        keys += [(f"{arch}.attention.head_count_kv", "uint32", first.kv_heads),
                 (f"{arch}.feed_forward_length", "uint32", TINY_FF)]  # fmt: skip
    elif layout is Layout.GATED_DELTA_NET:
        # src/models/qwen3next.cpp: layer i is full attention when (i + 1) % full_attention_interval == 0.
        interval = min(attention) + 1
        if sorted(attention) != [i for i in range(layers) if (i + 1) % interval == 0]:
            raise UsageError(f"the llama.cpp probe writes qwen3next's full_attention_interval; {spec.name}'s "
                             "attention layers are not every n-th")  # fmt: skip
        keys += [
            (f"{arch}.attention.head_count_kv", "uint32", first.kv_heads),
            (f"{arch}.full_attention_interval", "uint32", interval),
            (f"{arch}.feed_forward_length", "uint32", TINY_FF),
            (f"{arch}.expert_count", "uint32", TINY_EXPERTS),
            (f"{arch}.expert_used_count", "uint32", 1),
            (f"{arch}.expert_feed_forward_length", "uint32", TINY_FF),
            (f"{arch}.expert_shared_feed_forward_length", "uint32", TINY_FF),
        ]
    else:  # per-layer KV heads: 0 on recurrent layers (and, Nemotron-H, MLP layers: a feed-forward instead)
        keys.append((f"{arch}.attention.head_count_kv", "array[uint32]", kv))
        if layout is Layout.NEMOTRON_H:
            ff = [TINY_FF if i not in attention and i not in states else 0 for i in range(layers)]
            keys.append((f"{arch}.feed_forward_length", "array[uint32]", ff))
        else:
            keys.append((f"{arch}.feed_forward_length", "uint32", TINY_FF))
        keys += [(f"{arch}.{key}", "uint32", 0) for key in record.probe_keys]  # no experts
    return GgufPlan(arch, tuple(keys), 2**62, notes)


def _ssm_keys(
    arch: str, kernel: int, d_inner: int, d_state: int, groups: int | None, rank: int
) -> list[tuple[str, str, Any]]:
    """The ssm.* keys of the converters (conversion/mamba.py Mamba2Model; group_count from Mamba-2 on)."""
    keys = [
        (f"{arch}.ssm.conv_kernel", "uint32", kernel),
        (f"{arch}.ssm.inner_size", "uint32", d_inner),
        (f"{arch}.ssm.state_size", "uint32", d_state),
        (f"{arch}.ssm.time_step_rank", "uint32", rank),
    ]
    return keys + ([(f"{arch}.ssm.group_count", "uint32", groups)] if groups is not None else [])


def _weights_bytes(spec: ModelSpec, width: int) -> int:
    """An upper bound of the tiny model's tensors in float32: per layer the Q, K, V and output
    projections and three feed-forward matrices of ``width`` rows."""
    per_layer = 0
    heads = spec.query_heads or 1
    for cache in spec.caches:
        k_dim, v_dim = cache.head_dims
        projection = heads * ((k_dim or 0) + (v_dim or 0)) * 2
        per_layer = max(per_layer, width * (projection + 3 * TINY_FF * TINY_EXPERTS + 1024))
    return 4 * spec.layers * per_layer


def _attention_keys(record: Architecture, spec: ModelSpec) -> list[tuple[str, str, Any]]:
    arch = record.name
    caches = [c for c in spec.caches if isinstance(c, AttentionCache)]
    first = caches[0]
    if any((c.kv_heads, c.k_head_dim, c.v_head_dim) != (first.kv_heads, first.k_head_dim, first.v_head_dim)
           for c in caches):  # fmt: skip
        raise UsageError(f"the llama.cpp probe builds layers of one K/V geometry; {spec.name}'s differ by layer")
    heads = spec.query_heads or first.kv_heads
    keys: list[tuple[str, str, Any]] = [
        (f"{arch}.attention.head_count", "uint32", heads),
        (f"{arch}.attention.head_count_kv", "uint32", first.kv_heads),
        (f"{arch}.attention.key_length", "uint32", first.k_head_dim),
        (f"{arch}.attention.value_length", "uint32", first.v_head_dim),
        (f"{arch}.rope.dimension_count", "uint32", first.k_head_dim),
    ]
    windows = {c.window for c in caches if c.window is not None}
    if record.writes_window and windows:
        if len(windows) > 1:
            raise UsageError(f"the llama.cpp probe builds one sliding window; {spec.name} has {sorted(windows)}")
        keys.append((f"{arch}.attention.sliding_window", "uint32", windows.pop()))
    elif record.chunk is not None and not any(c.chunk is not None for c in caches):
        # conversion/llama.py Llama4Model: all layers full -> sliding_window 0 (no chunks).
        keys.append((f"{arch}.attention.sliding_window", "uint32", 0))
    return keys


def _mla_keys(arch: str, cache: LatentCache, heads: int | None) -> list[tuple[str, str, Any]]:
    """conversion/deepseek.py: MLA converts to MQA (head_count_kv 1) of key_length kv_lora_rank +
    rope dims and value_length kv_lora_rank; the decompressed dims as key/value_length_mla."""
    k_mla = cache.k_head_dim or cache.latent_dim
    v_mla = cache.v_head_dim or cache.latent_dim
    return [
        (f"{arch}.attention.head_count", "uint32", heads or 1),
        (f"{arch}.attention.head_count_kv", "uint32", 1),
        (f"{arch}.attention.kv_lora_rank", "uint32", cache.latent_dim),
        (f"{arch}.attention.q_lora_rank", "uint32", TINY_EMBD),
        (f"{arch}.attention.key_length", "uint32", cache.latent_dim + cache.rope_dim),
        (f"{arch}.attention.value_length", "uint32", cache.latent_dim),
        (f"{arch}.attention.key_length_mla", "uint32", k_mla),
        (f"{arch}.attention.value_length_mla", "uint32", v_mla),
        (f"{arch}.rope.dimension_count", "uint32", cache.rope_dim),
    ]


def _stand_in(key: str, spec: ModelSpec) -> tuple[str, Any]:
    """(value type, value) the probe writes for a key an architecture's load_arch_hparams requires
    that sizes no cache (Architecture.probe_keys): a tiny MoE, Llama 4's MoE interleave, DeepSeek-2's
    dense lead (every layer), Cohere 2's logit scale."""
    values: dict[str, tuple[str, Any]] = {
        "expert_count": ("uint32", TINY_EXPERTS),
        "expert_used_count": ("uint32", 1),
        "expert_feed_forward_length": ("uint32", TINY_FF),
        "interleave_moe_layer_step": ("uint32", 1),
        "leading_dense_block_count": ("uint32", spec.layers),
        "expert_shared_count": ("uint32", 0),
        "logit_scale": ("float32", 1.0),
    }
    return values[key]


# GGUF metadata value type ids (the GGUF spec, ggml-org/ggml docs/gguf.md; enum gguf_type) -> the
# names plans use; an array of them is "array[NAME]".
VALUE_TYPES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32", 6: "float32",
               7: "bool", 8: "string", 10: "uint64", 11: "int64", 12: "float64"}  # fmt: skip
_ARRAY_ID = 9


def file_plan(header: GgufFile, label: str, *, nextn: int) -> GgufPlan:
    """The metadata of a GGUF file for llama.cpp, key by key with its own value type, but for the
    tokenizer: ``tokenizer.ggml.model`` "none" and no other ``tokenizer.ggml.*`` key (with no
    tokenizer, llama.cpp sizes token_embd and the output by ``<arch>.vocab_size``, written from the
    token list's length or token_embd's shape when the file has no such key), and no ``split.*``
    key (the probe's file is one file). llama.cpp then builds the file's own architecture from
    the file's own keys, with no tensor data: kvcalc's reading of the header is not involved.
    ``nextn``: how many of its last blocks are NextN (MTP) layers (kvcalc.inputs.gguf.nextn_layers,
    which the caller reads: an engine imports no input)."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise UsageError(f"{label}: the GGUF header has no general.architecture string")
    keys: list[tuple[str, str, Any]] = []
    notes: list[str] = []
    # NextN (MTP) blocks: llama.cpp creates their tensors TENSOR_SKIP, which a load with no tensor
    # data cannot place (GGML_ASSERT(buft != nullptr)), and a plain context caches none of them
    # (``nextn``; tests/inputs/gguf/test_weights.py loads such files with data). The probe's
    # copy is the trunk: block_count less the NextN blocks, per-layer arrays cut to it.
    blocks = meta.get(f"{arch}.block_count")
    if nextn:
        notes.append(f"the probe's copy leaves out the {nextn} NextN block(s), which llama.cpp neither loads nor "
                     "caches in a plain context")  # fmt: skip
    trunk = blocks - nextn if nextn and isinstance(blocks, int) else None
    for key, given in meta.items():
        if key.startswith(("tokenizer.ggml.", "split.")):
            continue
        value = given
        if trunk is not None and key == f"{arch}.block_count":
            value = trunk
        elif trunk is not None and key == f"{arch}.nextn_predict_layers":
            value = 0
        elif trunk is not None and isinstance(given, list) and len(given) == blocks:
            value = given[:trunk]
        kind, item = header.value_types.get(key, (None, None))
        if kind == _ARRAY_ID and item in VALUE_TYPES:
            if not value:  # the gguf package writes no empty array
                notes.append(f"the empty array {key} is left out of llama.cpp's copy of the metadata")
                continue
            keys.append((key, f"array[{VALUE_TYPES[item]}]", list(value)))
        elif kind in VALUE_TYPES:
            keys.append((key, VALUE_TYPES[kind], value))
        else:
            raise UsageError(f"{label}: GGUF key {key} has a value type the probe cannot write back")
    keys.append(("tokenizer.ggml.model", "string", "none"))
    if f"{arch}.vocab_size" not in meta:
        tensors = {t.name: t for t in header.tensors}
        tokens = meta.get("tokenizer.ggml.tokens")  # its item count: the reader skips the strings
        if isinstance(tokens, int) and tokens > 0:
            keys.append((f"{arch}.vocab_size", "uint32", tokens))
        elif "token_embd.weight" in tensors and len(tensors["token_embd.weight"].dims) == 2:
            keys.append((f"{arch}.vocab_size", "uint32", tensors["token_embd.weight"].dims[1]))
        else:
            raise UsageError(f"{label}: no {arch}.vocab_size, token list or token_embd.weight sizes the vocabulary")
    # With no tensor data llama.cpp creates the architecture's tensors in f32 (its log: a model
    # buffer of 4 bytes an element whatever general.file_type says): the file's tensor infos at 4
    # bytes an element, plus an output as large as token_embd (which a tied file leaves out), bound
    # them. A file with no tensor infos has no bound and is sized with no_alloc.
    elements = 0
    for t in header.tensors:
        count = 1
        for n in t.dims:
            count *= n
        elements += count * (2 if t.name == "token_embd.weight" else 1)
    bounded = bool(header.tensors) and not (isinstance(meta.get("split.count"), int) and meta["split.count"] > 1)
    if not bounded:
        notes.append("no tensor infos of the whole model bound the weights llama.cpp creates: sized with no_alloc")
    weights = 4 * elements if bounded else 2**62
    copied = sum(1 for key, _, _ in keys if key in meta and not key.startswith("tokenizer.ggml."))
    notes.insert(0, f"llama.cpp read this file's own metadata ({copied} keys; no tokenizer, no tensor data)")
    return GgufPlan(arch, tuple(keys), weights, tuple(notes))


def write_gguf(plan: GgufPlan, path: Path) -> None:
    """The metadata-only GGUF of ``plan`` at ``path``, written with the gguf package (every GGUF
    value type, arrays included, as the plan names it)."""
    try:
        gguf: Any = import_module("gguf")
    except ImportError:
        raise LlamaCppMissing(INSTALL_HINT) from None
    writer = gguf.GGUFWriter(str(path), plan.arch)
    kinds = {name: gguf.GGUFValueType(number) for number, name in VALUE_TYPES.items()}
    for key, kind, value in plan.keys:
        if key == "general.architecture":
            continue  # GGUFWriter writes it from its arch
        if kind.startswith("array[") and kind.endswith("]"):
            writer.add_key_value(key, value, gguf.GGUFValueType.ARRAY, kinds[kind[6:-1]])
        else:
            writer.add_key_value(key, value, kinds[kind])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
