"""``kvcalc probe MODEL --engine llama.cpp``: what the real llama.cpp allocates for a model's KV cache.

The probe writes a GGUF holding the metadata convert_hf_to_gguf.py would write for the model's
llama.cpp architecture (layers, heads, KV heads, K and V head dims, sliding window or its absence,
MLA latent dims) with a tiny vocabulary and feed-forward, and no tensor data: llama.cpp's own
``llama_model_init_from_user`` creates the architecture's tensors from that metadata (left
unset: no token is ever decoded, a context is only created). For a GGUF file as MODEL it writes
the file's own metadata instead (``file_plan``: every key with its own value type, no tokenizer),
so that llama.cpp, not kvcalc's reading of the header, decides the geometry. It then creates real llama.cpp
contexts (``llama_init_from_model``) with the user's n_ctx, sequences, unified cache, n_batch,
n_ubatch, K/V types and swa_full, and reads what llama.cpp logs as it allocates each KV cache
(``llama_kv_cache: size = ... (N cells, L layers, S/T seqs), K (type): ..., V (type): ...``,
src/llama-kv-cache.cpp) and the per-layer K/V widths it loaded (``print_info: n_embd_k_gqa``).
Recurrent and hybrid models (Mamba, Mamba-2, Jamba, Granite-4.0-H, LFM2, Qwen3-Next, Nemotron-H,
Falcon-H1) also get a recurrent memory: ``llama_memory_recurrent: size = ... (N cells, L layers, S
seqs Q rs_seq), R (f32): ..., S (f32): ..., P (f32): ...`` (src/llama-memory-recurrent.cpp), whose
R (conv history) and S (SSM / delta-rule state) rows are rebuilt from the SSM sizes print_info
prints (or lfm2's shortconv.l_cache) and set beside kvcalc's state bytes, apart from the K/V.
Sparse-attention models (deepseek32, glm-dsa: llama_kv_cache_dsa; minimax-m3: llama_kv_cache_msa)
get a second llama_kv_cache for the indexer's keys, logged after "creating indexer KV cache": its
rows (one key of indexer.key_length; for a model that is not MLA also one V head) are rebuilt and
set beside kvcalc's indexer groups in a row of their own, with the layers each places them in.
The bytes are rebuilt from those figures with llama.cpp's own ``ggml_row_size`` and must print as
llama.cpp's MiB figures do, to the last digit.

llama.cpp runs in a child process (``python -m kvcalc.engines.llamacpp.probe REQUEST.json``), so an abort
inside it cannot take kvcalc down, and a time-out kills it. llama_cpp (``pip install
'kvcalc[llamacpp]'``) and gguf are imported only there and in ``write_gguf``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.engines.llamacpp.architectures import (
    Architecture,
    Indexer,
    Layout,
    Ssm,
    architecture,
    converted,
    probe_types,
)
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache, IndexerCache, Kind, LatentCache, ModelSpec, StateCache

if TYPE_CHECKING:
    from kvcalc.inputs.gguf import GgufHeader

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

# ggml type names as llama.cpp logs them, from kvcalc's names.
GGML_TYPES = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1",
              "q5_0": "q5_0", "q5_1": "q5_1", "iq4_nl": "iq4_nl"}  # fmt: skip

DEFAULT_TIMEOUT = 600
# Caches up to this size are allocated for real; larger ones are sized by llama.cpp with no_alloc.
ALLOCATE_LIMIT = 2**30


class LlamaCppProbeError(Exception):
    """The probe could not run llama.cpp (missing package, failed load, time-out)."""


# --- the GGUF ------------------------------------------------------------------------------------------


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


def file_plan(header: GgufHeader, label: str) -> GgufPlan:
    """The metadata of a GGUF file for llama.cpp, key by key with its own value type, but for the
    tokenizer: ``tokenizer.ggml.model`` "none" and no other ``tokenizer.ggml.*`` key (with no
    tokenizer, llama.cpp sizes token_embd and the output by ``<arch>.vocab_size``, written from the
    token list's length or token_embd's shape when the file has no such key), and no ``split.*``
    key (the probe's file is one file). llama.cpp then builds the file's own architecture from
    the file's own keys, with no tensor data: kvcalc's reading of the header is not involved."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise UsageError(f"{label}: the GGUF header has no general.architecture string")
    keys: list[tuple[str, str, Any]] = []
    notes: list[str] = []
    # NextN (MTP) blocks: llama.cpp creates their tensors TENSOR_SKIP, which a load with no tensor
    # data cannot place (GGML_ASSERT(buft != nullptr)), and a plain context caches none of them
    # (kvcalc.inputs.gguf.nextn_layers; tests/test_gguf_nextn.py loads such files with data). The probe's
    # copy is the trunk: block_count less the NextN blocks, per-layer arrays cut to it.
    from kvcalc.inputs.gguf import nextn_layers

    nextn = nextn_layers(meta, label)
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
        raise LlamaCppProbeError(INSTALL_HINT) from None
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


# --- running llama.cpp (in the child process) -------------------------------------------------------------

_SIZE_LINE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
_SWA_LINE = re.compile(r"llama_kv_cache_iswa: creating +(non-SWA|SWA) KV cache, size = (\d+) cells")
# The sparse-attention indexer's key cache: llama_kv_cache_dsa (deepseek32, glm-dsa) and llama_kv_cache_msa
# (minimax-m3) log "creating indexer KV cache" and then build a second llama_kv_cache, which logs its
# own layers and size line (src/llama-kv-cache-dsa.cpp, src/llama-kv-cache-msa.cpp, llama.cpp 0c1e570).
_INDEXER_LINE = re.compile(r"llama_kv_cache_(dsa|msa): creating indexer KV cache")
_INFO_LINE = re.compile(
    r"print_info: (n_embd_k_gqa|n_embd_v_gqa|n_embd_head_v|n_embd|n_head|n_layer|n_swa|is_swa_any|ssm_d_conv"
    r"|ssm_d_inner|ssm_d_state|ssm_n_group) += (.+)"
)
# The recurrent memory of a recurrent or hybrid model (src/llama-memory-recurrent.cpp, llama.cpp 0c1e570,
# the constructor's LLAMA_LOG_INFO): "size = X MiB (C cells, L layers, N seqs Q rs_seq), R (t): MiB,
# S (t): MiB, P (t): MiB", L being every layer of the model; the layers it holds are the ones listed
# "llama_memory_recurrent, layer N: dev = ..." before it (the others: "layer N: skipped").
_RS_SIZE_LINE = re.compile(
    r"llama_memory_recurrent: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs +(\d+) rs_seq\), "
    r"R \((\w+)\): +([\d.]+) MiB, S \((\w+)\): +([\d.]+) MiB(?:, P \((\w+)\): +([\d.]+) MiB)?"
)
_RS_LAYER_LINE = re.compile(r"llama_memory_recurrent, layer +(\d+): dev = ")
# The recurrent rows (llama_hparams::n_embd_r / n_embd_s, src/llama-hparams.cpp, 0c1e570) are rebuilt for
# the architectures whose Architecture.ssm rule the probe knows: the Mamba case from the ssm_* figures
# print_info prints, lfm2's short convolution (shortconv.l_cache set) and Kimi's KDA (kda.head_dim set).
# Other recurrent rules (RWKV's token shift, MiniMax's linear attention) are not rebuilt: their rows are
# reported as not understood.
_CPARAM_LINE = re.compile(r"llama_context: (n_ctx|n_ctx_seq|n_batch|n_ubatch|n_seq_max) += (\d+)")
_ERROR_LINE = re.compile(r"llama_init_from_model: (.+)")
_KV_LAYER_LINE = re.compile(r"llama_kv_cache: layer +(\d+): dev = ")
# What llama.cpp says when a model's metadata is refused (a missing key: "key not found in model: K"),
# and the assertion an abort prints on stderr (a dimension of 0 when a key sizing a tensor is missing).
_LOAD_ERROR = re.compile(r"llama_model_load: error loading model: (.+)")
_ASSERT_LINE = re.compile(r"([\w-]+\.(?:c|cpp|h):\d+): (GGML_ASSERT\(.+\) failed|GGML_ABORT.*)")
# sched_reserve's "<buffer type> compute buffer size = X MiB": the graph's scratch per backend.
_COMPUTE_LINE = re.compile(r"\w+: +(\S+) compute buffer size = +([\d.]+) MiB")


def _per_layer(text: str, layers: int) -> list[int]:
    """print_info's per-layer figure: one number for every layer, or ``[a, b, ...]``."""
    text = text.strip()
    if text.startswith("["):
        return [int(v) for v in text.strip("[]").split(",")]
    return [int(text)] * layers


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Load the GGUF once and create each context of ``request["contexts"]`` (in this process)."""
    import ctypes

    lc: Any = import_module("llama_cpp")
    log: list[str] = []

    def append(level: int, text: bytes | None, user_data: Any) -> None:
        log.append((text or b"").decode("utf-8", errors="replace"))

    capture = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(append)
    lc.llama_log_set(capture, None)
    lc.llama_backend_init()
    lib = lc.llama_cpp._lib

    class GgufInitParams(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]

    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, GgufInitParams]
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    lib.ggml_type_name.restype = ctypes.c_char_p
    # ggml.h enum ggml_type ids of the cache types, checked against ggml's own names.
    type_ids = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
    for name, number in type_ids.items():
        if lib.ggml_type_name(number) != name.encode():
            return {"error": f"this ggml numbers its types differently: {number} is not {name}"}

    metadata = lib.gguf_init_from_file(request["gguf"].encode(), GgufInitParams(True, None))
    if not metadata:
        return {"error": f"llama.cpp could not read {request['gguf']}"}
    unset = lc.llama_model_set_tensor_data_t(lambda tensor, user_data: None)
    model_params = lc.llama_model_default_params()
    model_params.n_gpu_layers = 0  # cache sizes do not depend on the device; keep the probe on the CPU
    model_params.no_alloc = bool(request.get("no_alloc", False))
    model = lc.llama_model_init_from_user(metadata, unset, None, model_params)
    if not model:
        lib.gguf_free(metadata)
        refused = _LOAD_ERROR.findall("".join(log))
        return {"error": "llama.cpp could not build the model: " + (refused[-1] if refused else _last_error(log))}
    info = _model_info(log)
    info["recurrent_rows"] = _recurrent_rows(info, lambda key: _meta(lc, model, key))
    info["indexer_rows"] = _indexer_rows(info, lambda key: _meta(lc, model, key))
    loaded = len(log)
    results = []
    for asked in request["contexts"]:
        start = len(log)
        params = lc.llama_context_default_params()
        params.n_ctx = asked["n_ctx"]
        params.n_seq_max = asked["n_seq_max"]
        params.n_batch = asked["n_batch"]
        params.n_ubatch = asked["n_ubatch"]
        params.kv_unified = asked["kv_unified"]
        params.swa_full = asked["swa_full"]
        params.type_k = type_ids[asked["type_k"]]
        params.type_v = type_ids[asked["type_v"]]
        if "flash_attn" in asked:  # llama_flash_attn_type: 0 disabled, 1 enabled (default -1: auto)
            params.flash_attn_type = 1 if asked["flash_attn"] else 0
        params.n_threads = params.n_threads_batch = 1
        ctx = lc.llama_init_from_model(model, params)
        text = "".join(log[start:])
        if not ctx:
            results.append({"error": _last_error(log[start:]), "log": text})
            continue
        lc.llama_free(ctx)
        results.append({**_context_result(text, info, type_ids, lib.ggml_row_size), "log": text})
    lc.llama_model_free(model)
    lib.gguf_free(metadata)
    # The raw logs too: recurrent state buffers (llama_memory_recurrent) are read from them by tests.
    return {"results": results, "model": info, "load": "".join(log[:loaded])}


_ONE_FIGURE = ("n_embd", "n_embd_head_v", "n_head", "ssm_d_conv", "ssm_d_inner", "ssm_d_state", "ssm_n_group")


def _model_info(log: list[str]) -> dict[str, Any]:
    found = dict(_INFO_LINE.findall("".join(log)))
    layers = int(found["n_layer"])
    return {
        "n_layer": layers,
        "n_swa": int(found.get("n_swa", "0")),
        "n_embd_k_gqa": _per_layer(found["n_embd_k_gqa"], layers),
        "n_embd_v_gqa": _per_layer(found["n_embd_v_gqa"], layers),
        # one figure each (the hidden size; the SSM sizes of recurrent architectures): n_embd_r / n_embd_s
        **{k: found[k].strip() for k in _ONE_FIGURE if k in found},
    }


def _meta(lc: Any, model: Any, key: str) -> str | None:
    """A metadata value of the loaded model as llama.cpp prints it (llama_model_meta_val_str)."""
    buf = bytes(256)
    n = lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf[:n].decode() if n >= 0 else None


def _recurrent_rows(info: dict[str, Any], meta: Any) -> list[int] | None:
    """llama_hparams::n_embd_r and n_embd_s (src/llama-hparams.cpp, 0c1e570) of the loaded model, the
    elements of one R (conv) row and one S (recurrent state) row, from what llama.cpp printed and the
    model's metadata; None for an architecture whose rule the probe does not rebuild (Architecture.ssm)."""
    arch = meta("general.architecture")
    record = architecture(arch)
    state = record.ssm if record is not None else None
    l_cache = meta(f"{arch}.shortconv.l_cache")
    if state is Ssm.SHORTCONV and l_cache is not None and "n_embd" in info:
        return [int(info["n_embd"]) * (int(l_cache) - 1), 0]
    kda, kernel = meta(f"{arch}.kda.head_dim"), meta(f"{arch}.ssm.conv_kernel")
    if state is Ssm.KDA and kda is not None and kernel is not None and "n_head" in info:
        # llama_hparams::n_head() is layer 0's count (print_info lists every layer's when they differ)
        heads = int(str(info["n_head"]).strip("[]").split(",")[0])
        d_conv = int(kernel) - 1 if int(kernel) > 0 else 3  # n_embd_r's fallback for a kernel of 0
        return [3 * d_conv * heads * int(kda), int(kda) * int(kda) * heads]
    ssm = [info[k] for k in ("ssm_d_conv", "ssm_d_inner", "ssm_d_state", "ssm_n_group") if k in info]
    if state is not None and state.mamba_rows and len(ssm) == 4:
        d_conv, d_inner, d_state, n_group = (int(v) for v in ssm)
        return [max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state), d_state * d_inner]
    return None


def _indexer_rows(info: dict[str, Any], meta: Any) -> list[int] | None:
    """The elements of one K row and one V row of the indexer cache (llama_kv_cache_dsa / _msa,
    llama.cpp 0c1e570), or None where the model has no indexer key length. Both build it from the
    model's hparams with n_head_kv 1 and n_embd_head_k = indexer_head_size (the GGUF's
    attention.indexer.key_length), so a K row is one key of that width; llama_kv_cache gives it a V
    row (n_embd_v_gqa = one head of n_embd_head_v) unless the model is MLA (src/llama-kv-cache.cpp
    ``has_v = !is_mla``; llama_hparams::is_mla: key_length_mla and value_length_mla both set)."""
    arch = meta("general.architecture")
    key = meta(f"{arch}.attention.indexer.key_length")
    if key is None:
        return None
    mla = all(int(meta(f"{arch}.attention.{k}") or 0) for k in ("key_length_mla", "value_length_mla"))
    if mla:
        return [int(key), 0]
    return [int(key), int(info["n_embd_head_v"])] if "n_embd_head_v" in info else None


def recurrent_layers(log: str) -> list[int]:
    """The layers llama.cpp placed in its recurrent memory, in order (its ``layer N: dev`` lines)."""
    return [int(x) for x in _RS_LAYER_LINE.findall(log)]


def kv_layers(log: str) -> list[int]:
    """The layers llama.cpp placed in its KV caches, in order (its ``layer N: dev`` lines)."""
    return [int(x) for x in _KV_LAYER_LINE.findall(log)]


def _recurrent_result(
    text: str, rows: list[int] | None, type_ids: dict[str, int], row_size: Any
) -> list[dict[str, Any]]:
    """Each recurrent memory llama.cpp created: its rows (cells x (1 + rs_seq)), the layers it holds,
    and its R and S bytes rebuilt from them, n_embd_r / n_embd_s and ggml_row_size, with whether they
    print as llama.cpp printed its MiB. P, the PLE conv history (cache_ple_r_l*,
    src/llama-memory-recurrent.cpp), has a row only in qwen4exp's PLE layer: it is taken as logged."""
    memories = []
    start = 0
    for m in _RS_SIZE_LINE.finditer(text):
        _, cells, _, seqs, rs_seq, r_type, r_mib, s_type, s_mib, p_type, p_mib = m.groups()
        held = [int(x) for x in _RS_LAYER_LINE.findall(text, start, m.start())]
        start = m.end()
        n_rows = int(cells) * (1 + int(rs_seq))  # llama_memory_recurrent: mem_size x (1 + n_rs_seq) rows
        known = rows is not None and r_type in type_ids and s_type in type_ids
        r_bytes = n_rows * len(held) * row_size(type_ids[r_type], rows[0]) if known and rows else 0
        s_bytes = n_rows * len(held) * row_size(type_ids[s_type], rows[1]) if known and rows else 0
        memories.append({
            "cells": int(cells), "rows": n_rows, "layers": len(held), "held": held, "seqs": int(seqs),
            "rs_seq": int(rs_seq), "r_type": r_type, "s_type": s_type, "r_bytes": r_bytes, "s_bytes": s_bytes,
            "r_mib": r_mib, "s_mib": s_mib, "p_type": p_type or r_type, "p_mib": p_mib or "0.00",
            "rows_known": known,
            "r_prints_as_logged": known and f"{r_bytes / 2**20:.2f}" == r_mib,
            "s_prints_as_logged": known and f"{s_bytes / 2**20:.2f}" == s_mib,
        })  # fmt: skip
    return memories


def _context_result(text: str, info: dict[str, Any], type_ids: dict[str, int], row_size: Any) -> dict[str, Any]:
    """Each KV cache llama.cpp created (its cells, layers, streams, types) with its bytes rebuilt
    from them and llama.cpp's ggml_row_size, and whether they print as llama.cpp printed its MiB."""
    labels = [kind for kind, _ in _SWA_LINE.findall(text)]
    caches = []
    start = 0
    for i, m in enumerate(_SIZE_LINE.finditer(text)):
        _, cells, layers, seqs, streams, k_type, k_mib, v_type, v_mib = m.groups()
        side = "swa" if labels and i < len(labels) and labels[i] == "SWA" else "full"
        indexer = _INDEXER_LINE.search(text, start, m.start())
        widths_k, widths_v = info["n_embd_k_gqa"], info["n_embd_v_gqa"]
        n = int(layers)
        # The layers this cache holds, as llama.cpp lists them before its size line ("layer N: dev
        # = ..."); each with its own K/V widths (a GGUF file's layers may differ).
        held = [int(x) for x in _KV_LAYER_LINE.findall(text, start, m.start())]
        start = m.end()
        listed = len(held) == n
        if not listed:
            held = [0] * n  # no list: one geometry per side (gguf_plan checks), any layer's widths serve
        rows_known = True
        if indexer is not None:
            # The indexer's cache: every layer it holds has one key row (and, not MLA, one V head row).
            side = "indexer"
            rows = info.get("indexer_rows")
            rows_known = rows is not None
            widths_k = widths_v = {layer: 0 for layer in held}
            if rows is not None:
                widths_k, widths_v = {layer: rows[0] for layer in held}, {layer: rows[1] for layer in held}
        k_rows = sum(row_size(type_ids[k_type], widths_k[layer]) for layer in held)
        if indexer is not None:  # the V row by llama.cpp's rule, not by the V figure it printed
            v_rows = sum(row_size(type_ids[v_type], widths_v[layer]) for layer in held)
        else:
            v_rows = sum(row_size(type_ids[v_type], widths_v[layer]) for layer in held) if float(v_mib) > 0 else 0
        k_bytes = int(cells) * int(streams) * k_rows
        v_bytes = int(cells) * int(streams) * v_rows
        # llama.cpp lists a layer with no K/V heads (deci's no-op and linear layers: n_head_kv 0)
        # among the cache's layers with 0-wide tensors; kvcalc counts only layers that hold K/V.
        holding = n if indexer is not None else sum(1 for layer in held if widths_k[layer] + widths_v[layer] > 0)
        caches.append({
            "side": side, "cells": int(cells), "layers": holding, "seqs": int(seqs), "streams": int(streams),
            "k_type": k_type, "v_type": v_type, "k_bytes": k_bytes, "v_bytes": v_bytes,
            "k_mib": k_mib, "v_mib": v_mib, "held": held if listed else None,
            "family": indexer[1] if indexer is not None else None, "rows_known": rows_known,
            "prints_as_logged": rows_known and f"{k_bytes / 2**20:.2f}" == k_mib and f"{v_bytes / 2**20:.2f}" == v_mib,
        })  # fmt: skip
    cparams = {k: int(v) for k, v in _CPARAM_LINE.findall(text)}
    compute = {buffer: mib for buffer, mib in _COMPUTE_LINE.findall(text)}
    recurrent = _recurrent_result(text, info.get("recurrent_rows"), type_ids, row_size)
    return {"caches": caches, "recurrent": recurrent, "cparams": cparams, "compute_mib": compute}


def _last_error(lines: list[str]) -> str:
    errors = _ERROR_LINE.findall("".join(lines))
    text = "".join(lines).strip().splitlines()
    return (errors[-1] if errors else (text[-1] if text else "no message")).strip()


# --- the comparison ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupCheck:
    """One of llama.cpp's memories beside kvcalc's groups of the same layers (layers, cells x
    streams per layer, bytes): ``full`` (its base KV cache), ``swa`` (the SWA cache of
    llama_kv_cache_iswa: sliding or chunked layers), ``indexer`` (the sparse-attention indexer's key
    cache of llama_kv_cache_dsa / _msa, beside kvcalc's IndexerCache groups; ``measured_at`` and
    ``estimated_at``, the layers each puts it in, must agree), or the two buffers of its recurrent memory
    (llama_memory_recurrent): ``conv (R)``, the conv history rows, and ``state (S)``, the SSM /
    delta-rule state rows, one row per sequence; ``ple (P)`` only when llama.cpp made a PLE buffer,
    which kvcalc does not model (so it fails)."""

    side: str
    estimated_layers: int
    estimated_cells: int
    estimated_bytes: int
    measured_layers: int
    measured_cells: int
    measured_bytes: int
    streams: int = 1
    prints_as_logged: bool = True
    note: str = ""
    measured_at: tuple[int, ...] | None = None
    estimated_at: tuple[int, ...] | None = None

    @property
    def match(self) -> bool:
        return (
            self.prints_as_logged
            and self.measured_at == self.estimated_at
            and self.estimated_layers == self.measured_layers
            and self.estimated_cells == self.measured_cells
            and self.estimated_bytes == self.measured_bytes
        )


def context_request(engine: Any, tokens: int, batch: int, k_type: str, v_type: str) -> dict[str, Any]:
    """The llama_context_params of ``batch`` sequences of ``tokens`` under a LlamaCpp engine's
    settings: n_ctx = B x T (llama.cpp pads it), n_seq_max = B."""
    return {
        "n_ctx": tokens * batch, "n_seq_max": batch, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch,
        "kv_unified": engine.unified, "swa_full": engine.swa_full,
        "type_k": GGML_TYPES[k_type], "type_v": GGML_TYPES[v_type],
    }  # fmt: skip


# The recurrent memory's buffers as the probe's rows name them.
CONV, STATE, PLE = "conv (R)", "state (S)", "ple (P)"
# Why llama.cpp's P buffer is not in kvcalc's estimate (src/llama-memory-recurrent.cpp and
# src/models/qwen4exp.cpp, 0c1e570).
PLE_NOTE = (
    "llama.cpp's recurrent memory also logs P, the PLE conv history (cache_ple_r_l*), made only for the "
    "PLE layer of a qwen4exp file (ple.* keys); kvcalc does not model it"
)


def compare(estimate: Any, measured: dict[str, Any]) -> tuple[GroupCheck, ...]:
    """kvcalc's groups (an Estimate under llama.cpp's rules) side by side with llama.cpp's caches
    and recurrent memory."""
    estimated: dict[str, list[int]] = {}
    states = []
    for g in estimate.groups:
        if g.cache.is_state:
            states.append(g)
            continue
        if not g.cache.caches_tokens:
            continue  # KV-sharing layers (Gemma 3n) read another layer's cache: llama.cpp makes none
        side = "swa" if g.cache.token_bound is not None and g.cache.tokens == "decoder" else "full"
        if g.kind is Kind.INDEXER:  # llama.cpp keeps the indexer's keys in a cache of their own
            side = "indexer"
        layers, cells, total = estimated.get(side, [0, 0, 0])
        estimated[side] = [layers + g.layers, max(cells, g.slots), total + g.bytes]
    found = {c["side"]: c for c in measured["caches"]}
    if len(found) < len(measured["caches"]):
        sides = ", ".join(c["side"] for c in measured["caches"])
        raise UsageError(f"llama.cpp made more than one KV cache of a kind ({sides}); the probe compares one of each")
    checks = []
    for side in ("full", "swa", "indexer"):
        if side not in estimated and side not in found:
            continue
        e = estimated.get(side, [0, 0, 0])
        c = found.get(side)
        at: dict[str, Any] = {}
        note = ""
        if side == "indexer":
            at = {"measured_at": tuple(sorted(c["held"])) if c and c.get("held") is not None else None,
                  "estimated_at": _indexer_layers(estimate.model)}  # fmt: skip
            note = _indexer_note(c, at["measured_at"], at["estimated_at"])
        checks.append(
            GroupCheck(
                side,
                e[0],
                e[1],
                e[2],
                c["layers"] if c else 0,
                c["cells"] * c["streams"] if c else 0,
                c["k_bytes"] + c["v_bytes"] if c else 0,
                c["streams"] if c else 1,
                c["prints_as_logged"] if c else True,
                note,
                **at,
            )
        )
    return tuple(checks) + _recurrent_checks(states, measured.get("recurrent", []))


def _indexer_layers(spec: ModelSpec) -> tuple[int, ...] | None:
    """The layers kvcalc gives an indexer key cache (its IndexerCache entries' layers), None when
    its entries name no layers (more entries than layers and no entry_layers)."""
    where = spec.entry_layers or (tuple(range(spec.layers)) if len(spec.caches) == spec.layers else ())
    if len(where) != len(spec.caches):
        return None
    return tuple(sorted(where[i] for i, c in enumerate(spec.caches) if c.kind is Kind.INDEXER))


def _indexer_note(
    cache: dict[str, Any] | None, measured: tuple[int, ...] | None, estimated: tuple[int, ...] | None
) -> str:
    """Why an indexer row cannot match, when it is not only its bytes: rows the probe could not
    rebuild, or the layers llama.cpp placed the cache in against kvcalc's."""
    if cache is None:
        return "llama.cpp made no indexer key cache"
    if not cache.get("rows_known", True):
        return "no indexer.key_length in the model llama.cpp loaded: the probe cannot rebuild the indexer rows"
    if measured is None or estimated is None:
        return "the layers of the indexer cache are not known on both sides (llama.cpp's layer list or kvcalc's)"
    if measured != estimated:
        return f"llama.cpp put the indexer keys in layers {list(measured)}, kvcalc in {list(estimated)}"
    return ""


def _recurrent_checks(states: list[Any], memories: list[dict[str, Any]]) -> tuple[GroupCheck, ...]:
    """kvcalc's state groups beside llama.cpp's recurrent memory, R and S apart. kvcalc's R is its
    llama.cpp engine rule (kvcalc.engines.llamacpp ``state_parts``: kernel - 1 conv columns, f32) over
    the group's layers and sequences; its S the rest of the group's bytes, so R + S is the estimate."""
    from kvcalc.engines.llamacpp import LlamaCpp

    if not states and not memories:
        return ()
    layers = sum(g.layers for g in states)
    seqs = conv = 0
    for g in states:
        per_sequence = g.layers * g.state_bytes
        seqs = max(seqs, g.bytes // per_sequence if per_sequence else 0)
        (elements, dtype), _ = LlamaCpp().state_parts(g.cache)
        size = dtype.bytes_per_element if dtype is not None else 0  # llama.cpp's rule names f32 for both
        conv += g.layers * (g.bytes // per_sequence if per_sequence else 0) * elements * size
    total = sum(g.bytes for g in states)
    m = memories[0] if len(memories) == 1 else None
    if len(memories) > 1:  # one recurrent memory a model (llama_memory_hybrid holds one)
        raise UsageError(f"llama.cpp made {len(memories)} recurrent memories; the probe compares one")
    unknown = ""
    if m is not None and not m["rows_known"]:
        unknown = "the probe does not rebuild this architecture's recurrent rows (llama_hparams::n_embd_r / n_embd_s)"
    checks = [
        GroupCheck(CONV, layers, seqs, conv, m["layers"] if m else 0, m["rows"] if m else 0,
                   m["r_bytes"] if m else 0, 1, m["r_prints_as_logged"] if m else True, unknown),
        GroupCheck(STATE, layers, seqs, total - conv, m["layers"] if m else 0, m["rows"] if m else 0,
                   m["s_bytes"] if m else 0, 1, m["s_prints_as_logged"] if m else True, unknown),
    ]  # fmt: skip
    if m is not None and m["p_mib"] != "0.00":
        # Not rebuilt (its row is not among print_info's figures): it fails, with its MiB in the note.
        why = f"llama.cpp's P ({m['p_type']}): {m['p_mib']} MiB, not in kvcalc's estimate"
        checks.append(GroupCheck(PLE, 0, 0, 0, 1, m["rows"], 0, 1, False, why))
    return tuple(checks)


@dataclass(frozen=True)
class LlamaCppProbe:
    """A probe's request, what llama.cpp allocated and the estimate beside it."""

    name: str
    estimate: Any
    request: dict[str, Any]
    checks: tuple[GroupCheck, ...]
    cparams: dict[str, int]
    notes: tuple[str, ...] = ()
    allocated: bool = True

    @property
    def measured_bytes(self) -> int:
        return sum(c.measured_bytes for c in self.checks)

    @property
    def match(self) -> bool:
        return all(c.match for c in self.checks) and self.measured_bytes == self.estimate.total_bytes

    @property
    def check_notes(self) -> tuple[str, ...]:
        """What the rows leave out or could not rebuild: each row's note, and, beside a recurrent
        memory with no P, what P is and why it is not in the estimate."""
        notes = [f"{c.side}: {c.note}" for c in self.checks if c.note]
        sides = {c.side for c in self.checks}
        if CONV in sides and PLE not in sides:
            notes.append(f"P 0 bytes: {PLE_NOTE}")
        return tuple(notes)


def probe_json(report: LlamaCppProbe) -> dict[str, Any]:
    return {
        "model": report.name,
        "engine": report.estimate.engine,
        "llama_cpp": "0c1e570 (llama-cpp-python 0.3.36)",
        "request": report.request,
        "llama_context": report.cparams,
        "groups": [
            {
                "group": c.side,
                "layers": {
                    "measured": c.measured_layers,
                    "estimated": c.estimated_layers,
                    **({"measured_at": list(c.measured_at)} if c.measured_at is not None else {}),
                    **({"estimated_at": list(c.estimated_at)} if c.estimated_at is not None else {}),
                },
                "cells": {"measured": c.measured_cells, "estimated": c.estimated_cells, "streams": c.streams},
                "bytes": {"measured": c.measured_bytes, "estimated": c.estimated_bytes},
                "prints_as_logged": c.prints_as_logged,
                "match": c.match,
                **({"note": c.note} if c.note else {}),
            }
            for c in report.checks
        ],
        "measured_bytes": report.measured_bytes,
        "estimated_bytes": report.estimate.total_bytes,
        "match": report.match,
        "allocated": report.allocated,
        "notes": [*report.check_notes, *report.notes],
    }


def probe_lines(report: LlamaCppProbe) -> list[Any]:
    """The probe's answer as view blocks (kvcalc.views.console): the headline and legend as lines,
    the layer groups as a table that fits the screen, the notes as notes."""
    from kvcalc.views.console import Note
    from kvcalc.views.table import Column, Grid

    r = report.request
    streams = "one unified stream" if r["kv_unified"] else f"{r['n_seq_max']} streams"
    head = (
        f"llama.cpp 0c1e570 allocated for {report.name}: n_ctx {r['n_ctx']:,} asked ({r['n_seq_max']} x "
        f"{r['n_ctx'] // r['n_seq_max']:,}), {streams}, K {r['type_k']}, V {r['type_v']}, n_batch {r['n_batch']}, "
        f"n_ubatch {r['n_ubatch']}, swa_full {'on' if r['swa_full'] else 'off'}"
    )
    columns = (Column("group", right=False), Column("layers"), Column("cells (all streams)"),
               Column("llama.cpp bytes"), Column("kvcalc bytes"), Column("match", right=False))  # fmt: skip
    rows = [
        (c.side, f"{c.measured_layers} / {c.estimated_layers}", f"{c.measured_cells:,} / {c.estimated_cells:,}",
         f"{c.measured_bytes:,}", f"{c.estimated_bytes:,}", "yes" if c.match else "NO")
        for c in report.checks
    ]  # fmt: skip
    rows.append(("total", "", "", f"{report.measured_bytes:,}", f"{report.estimate.total_bytes:,}", ""))
    verdict = "matches byte for byte" if report.match else "DIFFERS from llama.cpp"
    legend = "layers and cells: llama.cpp / kvcalc"
    if any(c.side in (CONV, STATE, PLE) for c in report.checks):
        legend += "; recurrent memory: R (conv history) and S (state), one row (cell) per sequence"
    for c in report.checks:
        if c.side == "indexer":  # which layers, beside the counts
            where, mine = _layer_list(c.measured_at), _layer_list(c.estimated_at)
            legend += f"; indexer: the sparse-attention indexer's key cache, in layers {where} / {mine}"
    context = ", ".join(f"{k} {v:,}" for k, v in report.cparams.items())
    blocks: list[Any] = [head, legend, Grid("", columns, tuple(rows)),
                         f"kvcalc estimate --engine {report.estimate.engine} {verdict}",
                         f"llama.cpp's context: {context}"]  # fmt: skip
    if not report.allocated:
        blocks.append(
            f"cache or weights over {ALLOCATE_LIMIT // 2**30} GiB (or unbounded): llama.cpp sized its tensors with "
            "no_alloc (as it would allocate them) without allocating them"
        )
    return blocks + [Note(n) for n in (*report.check_notes, *report.notes)]


def _layer_list(layers: tuple[int, ...] | None) -> str:
    """Layer numbers in runs: ``0-2, 6, 10``; ``?`` when not known."""
    if layers is None:
        return "?"
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][1] + 1:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"


# --- running the child --------------------------------------------------------------------------------------


def llama_cpp_available() -> bool:
    from importlib.util import find_spec

    return find_spec("llama_cpp") is not None and find_spec("gguf") is not None


def measure(
    plan: GgufPlan, contexts: list[dict[str, Any]], *, timeout: float = DEFAULT_TIMEOUT, no_alloc: bool = False
) -> dict[str, Any]:
    """Write ``plan``'s GGUF and create ``contexts`` with llama.cpp in a child process. ``no_alloc``
    (llama_model_params.no_alloc): llama.cpp sizes every tensor as it would allocate it but
    allocates none, for caches larger than this machine's memory."""
    if not llama_cpp_available():
        raise LlamaCppProbeError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="kvcalc-llamacpp-") as tmp:
        path = Path(tmp) / "model.gguf"
        write_gguf(plan, path)
        return measure_file(path, contexts, timeout=timeout, no_alloc=no_alloc)


def measure_file(
    path: Path, contexts: list[dict[str, Any]], *, timeout: float = DEFAULT_TIMEOUT, no_alloc: bool = False
) -> dict[str, Any]:
    """Create ``contexts`` with llama.cpp from the GGUF at ``path`` in a child process (see ``measure``)."""
    if not llama_cpp_available():
        raise LlamaCppProbeError(INSTALL_HINT)
    with tempfile.TemporaryDirectory(prefix="kvcalc-llamacpp-") as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"gguf": str(path), "contexts": contexts, "no_alloc": no_alloc}))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "kvcalc.engines.llamacpp.probe", str(request)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        except subprocess.TimeoutExpired:  # subprocess.run kills the child before raising
            raise LlamaCppProbeError(f"llama.cpp did not finish within {timeout:g} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()
        asserted = _ASSERT_LINE.findall(done.stderr or "")
        why = f"{asserted[-1][1]} ({asserted[-1][0]})" if asserted else (tail[-1] if tail else "no output")
        raise LlamaCppProbeError(f"llama.cpp failed (exit {done.returncode}): {why}")
    answer: dict[str, Any] = json.loads(lines[-1])
    if "error" in answer:
        raise LlamaCppProbeError(str(answer["error"]))
    return answer


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    print(json.dumps(run_request(request)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
