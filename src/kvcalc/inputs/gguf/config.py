"""A GGUF's metadata as the Hugging Face style config dict ``read_config`` reads.

``gguf_config`` is the inverse of ``llamacpp_probe.gguf_plan``, which writes what convert_hf_to_gguf.py
writes. The architecture's record (kvcalc.engines.llamacpp.architectures) says which HF rules read the
file and which mapping (``Architecture.layout``) reads its keys: the plain attention one here, or one of
kvcalc.inputs.gguf.recurrent, .attention and .mla. Every function here is pure.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kvcalc.engines.llamacpp.architectures import Layout, Window, architecture, readable
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf import attention, mla, recurrent
from kvcalc.inputs.gguf.header import GgufHeader, TensorInfo
from kvcalc.inputs.gguf.values import ArchKeys, count, given_or, uniform
from kvcalc.inputs.gguf.weights import nextn_layers

# llama.cpp architecture -> the HF model_type whose rules kvcalc applies to it (Architecture.reads_as).
ARCH_TYPES: dict[str, str] = readable()

# Keys under <arch>. that are read, and those known to size no cache (weights, numerics, MoE).
_READ = (
    "block_count", "context_length", "embedding_length", "attention.head_count", "attention.head_count_kv",
    "attention.key_length", "attention.value_length", "attention.sliding_window",
    "attention.sliding_window_pattern", "attention.kv_lora_rank", "attention.key_length_mla",
    "attention.value_length_mla", "rope.dimension_count",
)  # fmt: skip
_NOT_SHAPING = frozenset({
    "attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "attention.q_lora_rank",
    "attention.clamp_kqv", "attention.max_alibi_bias", "attention.causal", "attention.scale",
    "attention.temperature_length", "attention.temperature_scale",
})  # fmt: skip
_FILE_DTYPES = {0: "float32", 1: "float16", 30: "bfloat16"}

# A layout's mapping: writes the config fields of the architecture's keys (and notes what to say).
Handler = Callable[[dict[str, Any], ArchKeys, list[str]], None]
# A hybrid's hook in the attention mapping: the KV heads of its attention layers from head_count_kv.
KvHeads = Callable[[dict[str, Any], ArchKeys, Any], Any]


def gguf_config(header: GgufHeader, label: str) -> tuple[dict[str, Any], list[str]]:
    """(config dict for ``read_config``, notes) of a GGUF's metadata.

    Every ``<arch>.attention.*``, ``<arch>.ssm.*``, ``<arch>.wkv.*``, ``<arch>.shortconv.*`` or
    window key the mapping does not read is copied into the config under its own GGUF name: each
    such name holds a word of kvcalc.inputs.hf.guard's rule (attention, ssm, head, conv, sliding), so the
    guard names it in the spec's warnings (and --strict refuses it) like any unread config field.

    The config is read once here, so that a value kvcalc's config reader refuses (a KV-head count
    that divides no head count, an implausibly large dimension) is refused naming the GGUF key it
    came from (``llama.attention.head_count_kv``), not the config field it was mapped to."""
    config, notes = _mapped_config(header, label)
    from kvcalc.errors import ConfigError
    from kvcalc.inputs.hf.configs import read_config

    try:
        read_config(config, name=label)
    except ConfigError as exc:
        raise SourceError(_in_gguf_terms(str(exc), header.metadata, label)) from None
    return config, notes


def _mapped_config(header: GgufHeader, label: str) -> tuple[dict[str, Any], list[str]]:
    """gguf_config's mapping, before the config is read."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise SourceError(f"{label}: GGUF has no general.architecture (a later shard of a split GGUF?)")
    record = architecture(arch)
    if record is not None and record.refused is not None:
        raise SourceError(f"{label}: GGUF architecture {arch!r} is not supported: {record.refused}")
    if record is None or record.reads_as is None:
        known = ", ".join(sorted(ARCH_TYPES))
        raise SourceError(f"{label}: GGUF architecture {arch!r} is not supported (kvcalc reads {known})")
    model_type = record.reads_as

    if meta.get(f"{arch}.block_count") is None:
        raise SourceError(f"{label}: GGUF has no {arch}.block_count")
    block_count = count(meta.get(f"{arch}.block_count"), f"{arch}.block_count", label)
    nextn = nextn_layers(meta, label)
    layers = block_count - nextn  # the trunk: the layers a plain context runs and caches
    keys = ArchKeys(meta, record, label, block_count, layers)

    notes = [f"read from the GGUF header: llama.cpp architecture '{arch}', read as {model_type}"]
    if nextn:
        notes.append(
            f"{arch}.nextn_predict_layers {nextn}: the last {nextn} of the {block_count} blocks are NextN (MTP) "
            "layers, which llama.cpp neither loads nor caches unless MTP drafting is on (--spec-type draft-mtp); "
            f"{layers} layers counted"
        )
    config: dict[str, Any] = {"model_type": model_type, "num_hidden_layers": layers}
    layout = record.layout
    # No attention (conversion/mamba.py writes head_count 0, "unused"), or head counts that may differ by
    # layer: read by the layout's own mapping.
    if layout not in _OWN_HEADS:
        heads = uniform(keys.need("attention.head_count"), f"{arch}.attention.head_count", layers, label)
        config["num_attention_heads"] = heads
    ctx = keys.get("context_length")
    if ctx is not None:
        config["max_position_embeddings"] = count(ctx, f"{arch}.context_length", label)
    if keys.get("embedding_length") is not None:
        config["hidden_size"] = count(keys.get("embedding_length"), f"{arch}.embedding_length", label)

    _MAPPINGS.get(layout, _attention)(config, keys, notes)

    tensors = {t.name: t for t in header.tensors}
    _widths(config, meta, arch, tensors)
    if layout is Layout.SSM:
        # MambaConfig's intermediate_size is the SSM's inner width (expand x hidden), which kvcalc's
        # mamba rules read as d_inner; the file's feed_forward_length is a placeholder 0.
        config["intermediate_size"] = keys.need("ssm.inner_size")
    for name in ("token_embd.weight", "blk.0.attn_k.weight", "blk.0.attn_q.weight"):
        if name in tensors:
            kind = tensors[name].ggml_type
            if kind in _FILE_DTYPES:
                config["torch_dtype"] = _FILE_DTYPES[kind]
            else:
                notes.append(f"weights stored as {tensors[name].type_name} ({name}): no 16/32-bit model dtype")
            break
    read = {f"{arch}.{k}" for k in (*_READ, *_NOT_SHAPING, *record.reads)}
    if record.ssm is not None:
        read |= {f"{arch}.{k}" for k in record.ssm.keys} | {f"{arch}.ssm.dt_b_c_rms"}
    prefixes = tuple(f"{arch}.{part}." for part in ("attention", "ssm", "wkv", "shortconv"))
    for key, value in meta.items():
        if key not in read and (key.startswith(prefixes) or "sliding_window" in key):
            config[key] = value
    return config, notes


def _attention(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """TextModel's keys: head_count_kv (a hybrid's per layer, through its hook), key_length and
    value_length, the window; then whatever the layout adds (a gated delta net, a Mamba-2 mixer ...)."""
    arch, label, layers, record = keys.arch, keys.label, keys.layers, keys.record
    heads: int = config["num_attention_heads"]
    kv = keys.get("attention.head_count_kv")
    if kv is None:
        kv = heads  # llama.cpp's default: n_head_kv = n_head
    hook = _KV_HEADS.get(record.layout)
    if hook is not None:
        kv = hook(config, keys, kv)
    _kv_heads(config, kv, f"{arch}.attention.head_count_kv", layers, label)
    k_len = keys.get("attention.key_length")
    v_len = keys.get("attention.value_length")
    # llama.cpp (src/llama-model.cpp load_hparams): n_embd_head_k = key_length and n_embd_head_v =
    # value_length, each n_embd / n_head when absent.
    embd: int | None = config.get("hidden_size")
    default = embd // heads if embd is not None and embd % heads == 0 else None
    if (k_len is None or v_len is None) and default is None:
        raise SourceError(
            f"{label}: GGUF has no {arch}.attention.key_length/value_length and its embedding_length "
            f"({embd}) is no multiple of the {heads} heads"
        )
    head_dim = count(k_len, f"{arch}.attention.key_length", label) if k_len is not None else default
    v_dim = count(v_len, f"{arch}.attention.value_length", label) if v_len is not None else default
    config["head_dim"] = head_dim
    if record.kv_heads_field == "multi_query":
        # GPTBigCodeConfig defaults to multi_query=True (one K/V head), which kvcalc's rule follows
        # whatever a KV-head count says; llama.cpp caches head_count_kv heads: say which applies.
        config["multi_query"] = config["num_key_value_heads"] == 1 and "per_layer_config" not in config
    if (
        record.kv_heads_field == "num_kv_heads"
        and 1 < config["num_key_value_heads"] < heads
        and "per_layer_config" not in config
    ):
        # Grouped K/V heads exist only in Falcon's new_decoder_architecture (Falcon-40B/180B;
        # conversion/falcon.py writes its num_kv_heads), read by kvcalc from num_kv_heads.
        config["new_decoder_architecture"] = True
        config["num_kv_heads"] = config.pop("num_key_value_heads")
    if v_dim != head_dim:
        config["v_head_dim"] = v_dim
    _windows(config, keys, notes)
    then = _AFTER_ATTENTION.get(record.layout)
    if then is not None:
        then(config, keys, notes)


def _windows(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """The window keys as llama.cpp applies them to the architecture (Architecture.window, chunk,
    swa_layers), in the fields of the HF config that reads them."""
    arch, label, layers, record = keys.arch, keys.label, keys.layers, keys.record
    window = keys.get("attention.sliding_window")
    pattern = keys.get("attention.sliding_window_pattern")
    if record.swa_layers is not None:
        _exaone4_windows(config, keys, window, pattern, notes)
        return
    if record.window is Window.IGNORED and (window or pattern is not None):
        # Their converters write no window; a file that has one is run without it by llama.cpp.
        notes.append(
            f"{arch}.attention.sliding_window ignored: llama.cpp's {arch} sets no sliding-window type "
            f"(src/models/*.cpp @ 0c1e570), so every layer keeps the whole context"
        )
        return
    chunk = record.chunk
    if chunk is not None:
        # src/models/llama4.cpp: sliding_window 0 -> no chunks; otherwise 8192-token chunks on three
        # layers in four (its set_swa_pattern(4), as Llama4TextConfig's no_rope_layer_interval 4).
        if window == 0:
            return
        config["attention_chunk_size"] = chunk
        if window is not None and window != chunk:
            notes.append(f"{arch}.attention.sliding_window {window} ignored: llama.cpp chunks Llama 4 by {chunk}")
        return
    if window is None or window == 0:
        if record.window_required:  # kvcalc's rules for these need the window's size
            raise SourceError(f"{label}: GGUF has no {arch}.attention.sliding_window, which {arch} layers need")
        return  # the file carries no window: every layer keeps the whole context
    config["sliding_window"] = count(window, f"{arch}.attention.sliding_window", label)
    if isinstance(pattern, list):  # per layer: true marks a sliding layer
        if len(pattern) != layers:
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.sliding_window_pattern does not list {layers} layers"
            )
        config["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    elif pattern is not None:
        config["sliding_window_pattern"] = count(pattern, f"{arch}.attention.sliding_window_pattern", label)
    elif record.use_sliding_window:
        config["use_sliding_window"] = True  # every layer, as the file says; llama.cpp drops it anyway


# exaone4 (src/models/exaone4.cpp load_arch_hparams @ 0c1e570): only a model of Architecture.swa_layers (64)
# layers (EXAONE-4.0-32B) gets swa_type STANDARD, n_swa 4096 unless sliding_window says otherwise, and
# load_swa_pattern(ml, 4): the per-layer sliding_window_pattern array, else a scalar period (default 4),
# sliding where il % period < period - 1 (llama_hparams::set_swa_pattern), as kvcalc's
# sliding_window_pattern rule.
_EXAONE4_WINDOW = 4096
_EXAONE4_PERIOD = 4


def _exaone4_windows(config: dict[str, Any], keys: ArchKeys, window: Any, pattern: Any, notes: list[str]) -> None:
    """exaone4: conversion/exaone.py Exaone4Model @ 0c1e570 writes sliding_window and the per-layer
    pattern (from layer_types, or a "LLLG" / integer sliding_window_pattern) when the config has a
    window; llama.cpp applies it on 64-layer models only (Architecture.swa_layers)."""
    arch, label, layers, swa_layers = keys.arch, keys.label, keys.layers, keys.record.swa_layers
    if layers != swa_layers:
        if window or pattern is not None:
            notes.append(
                f"{arch}.attention.sliding_window ignored: llama.cpp 0c1e570 gives exaone4 a window only with "
                f"{swa_layers} layers (src/models/exaone4.cpp), so every layer keeps the whole context"
            )
        return
    config["sliding_window"] = count(given_or(window, _EXAONE4_WINDOW), f"{arch}.attention.sliding_window", label)
    if isinstance(pattern, list):
        if len(pattern) != layers or any(p not in (0, 1) for p in pattern):
            raise SourceError(f"{label}: GGUF key {arch}.attention.sliding_window_pattern must flag {layers} layers")
        swa = [bool(p) for p in pattern]
        config["layer_types"] = ["sliding_attention" if s else "full_attention" for s in swa]
    else:
        period = count(given_or(pattern, _EXAONE4_PERIOD), f"{arch}.attention.sliding_window_pattern", label)
        swa = [i % period < period - 1 for i in range(layers)]
        config["sliding_window_pattern"] = period
    if not any(swa):  # create_memory: GGML_ASSERT(hparams.is_swa_any())
        raise SourceError(f"{label}: GGUF exaone4 whose sliding_window_pattern flags no sliding layer; not supported")


def _kv_heads(config: dict[str, Any], value: Any, key: str, layers: int, label: str) -> None:
    """head_count_kv: a scalar, or a per-layer array (positive counts map to per_layer_config)."""
    if not isinstance(value, list):
        config["num_key_value_heads"] = count(value, key, label)
        return
    if len(value) != layers:
        raise SourceError(f"{label}: GGUF key {key} lists {len(value)} layers but the model has {layers}")
    counts = [count(v, key, label) if v else 0 for v in value]
    if 0 in counts:  # a layer with no KV heads: recurrent or attention-free, which kvcalc cannot map here
        raise SourceError(f"{label}: GGUF key {key} gives some layers 0 KV heads (a hybrid model); not supported")
    config["num_key_value_heads"] = counts[0]
    differing = {f"{i:02d}": {"num_key_value_heads": n} for i, n in enumerate(counts) if n != counts[0]}
    if differing:
        config["per_layer_config"] = differing


# GGUF keys (gguf-py constants Keys.LLM) -> the config keys kvcalc.inputs.hf.dims reads for the runtime model
# (llama.cpp's compute buffer): widths of MLPs and experts, which size no cache.
_WIDTHS = {
    "feed_forward_length": "intermediate_size",
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_shared_feed_forward_length": "shared_expert_intermediate_size",
    "expert_shared_count": "n_shared_experts",
    "leading_dense_block_count": "first_k_dense_replace",
}


def _widths(config: dict[str, Any], meta: dict[str, Any], arch: str, tensors: dict[str, TensorInfo]) -> None:
    """The vocabulary (``<arch>.vocab_size``, else the tokenizer's token count, else the rows of
    token_embd.weight) and the MLP and expert widths, where the file gives them as one number."""
    vocab = meta.get(f"{arch}.vocab_size")
    if vocab is None:
        tokens = meta.get("tokenizer.ggml.tokens")  # skipped while reading: its item count
        vocab = tokens if isinstance(tokens, int) else len(tokens) if isinstance(tokens, list) else None
    embd = tensors.get("token_embd.weight")
    if vocab is None and embd is not None and len(embd.dims) == 2:
        vocab = embd.dims[1]
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
        config["vocab_size"] = vocab
    for key, name in _WIDTHS.items():
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, list) and value and len(set(value)) == 1:
            value = value[0]  # per layer, all alike
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            config[name] = value


# --- config fields back to the GGUF keys they were mapped from ----------------------------------------------

# Config field -> the GGUF keys (under <arch>.) the mapping above derives it from, for the fields of
# every architecture; Architecture.field_keys first, for fields an architecture derives otherwise.
_FIELD_KEYS: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("block_count",),
    "num_attention_heads": ("attention.head_count",),
    "num_key_value_heads": ("attention.head_count_kv",),
    "num_kv_heads": ("attention.head_count_kv",),
    "v_head_dim": ("attention.value_length",),
    "d_kv": ("attention.key_length",),
    "max_position_embeddings": ("context_length",),
    "hidden_size": ("embedding_length",),
    "sliding_window": ("attention.sliding_window",),
    "sliding_window_pattern": ("attention.sliding_window_pattern",),
    "layer_types": ("attention.sliding_window_pattern",),
    "kv_lora_rank": ("attention.kv_lora_rank",),
    "qk_rope_head_dim": ("rope.dimension_count",),
    "qk_nope_head_dim": ("attention.key_length", "rope.dimension_count"),
    "intermediate_size": ("feed_forward_length",),
    "vocab_size": ("vocab_size",),
    "num_experts": ("expert_count",),
    "num_experts_per_tok": ("expert_used_count",),
    "moe_intermediate_size": ("expert_feed_forward_length",),
    "shared_expert_intermediate_size": ("expert_shared_feed_forward_length",),
    "n_shared_experts": ("expert_shared_count",),
    "first_k_dense_replace": ("leading_dense_block_count",),
    "index_head_dim": ("attention.indexer.key_length",),
    "index_n_heads": ("attention.indexer.head_count",),
    "index_topk": ("attention.indexer.top_k",),
    "indexer_types": ("attention.indexer.types",),
    "index_topk_pattern": ("attention.indexer.types",),
    "compress_ratios": ("attention.compress_ratios",),
    "num_kv_shared_layers": ("attention.shared_kv_layers",),
    "full_attention_interval": ("full_attention_interval",),
    "num_decoder_layers": ("block_count",),
    "conv_kernel": ("ssm.conv_kernel",),
    "mamba_d_conv": ("ssm.conv_kernel",),
    "linear_conv_kernel_dim": ("ssm.conv_kernel",),
    "state_size": ("ssm.state_size",),
    "mamba_d_state": ("ssm.state_size",),
    "ssm_state_size": ("ssm.state_size",),
    "linear_key_head_dim": ("ssm.state_size",),
    "n_groups": ("ssm.group_count",),
    "mamba_n_groups": ("ssm.group_count",),
    "linear_num_key_heads": ("ssm.group_count",),
    "time_step_rank": ("ssm.time_step_rank",),
    "mamba_dt_rank": ("ssm.time_step_rank",),
    "num_heads": ("ssm.time_step_rank",),
    "mamba_n_heads": ("ssm.time_step_rank",),
    "mamba_num_heads": ("ssm.time_step_rank",),
    "linear_num_value_heads": ("ssm.time_step_rank",),
    "mamba_d_ssm": ("ssm.inner_size",),
    "mamba_expand": ("ssm.inner_size", "embedding_length"),
    "mamba_d_head": ("ssm.inner_size", "ssm.time_step_rank"),
    "mamba_head_dim": ("ssm.inner_size", "ssm.time_step_rank"),
    "linear_value_head_dim": ("ssm.inner_size", "ssm.time_step_rank"),
    "conv_L_cache": ("shortconv.l_cache",),
    "hybrid_override_pattern": ("attention.head_count_kv", "feed_forward_length"),
    "block_configs": ("attention.head_count", "attention.head_count_kv"),
    "swa_head_dim": ("attention.key_length_swa",),
    "swa_v_head_dim": ("attention.value_length_swa",),
    "swa_num_key_value_heads": ("attention.head_count_kv",),
    "swa_num_attention_heads": ("attention.head_count",),
    "hybrid_layer_pattern": ("attention.sliding_window_pattern",),
    "linear_attn_config": ("attention.head_count_kv", "kda.head_dim", "ssm.conv_kernel"),
}
_CONFIG_FIELD = re.compile(r"config field '([^']+)'")
_PER_LAYER_FIELD = re.compile(r"per_layer_config\.(\d+)\.?(\w*)")


def _gguf_keys(name: str, meta: dict[str, Any]) -> str | None:
    """'GGUF key llama.attention.head_count_kv' for a config field the mapping wrote, or None."""
    arch = meta.get("general.architecture")
    layer = ""
    m = _PER_LAYER_FIELD.fullmatch(name)
    if m is not None:  # a per-layer override: the per-layer array of the same key
        layer, name = f"[{int(m[1])}]", m[2] or "num_key_value_heads"  # the item of that layer
    record = architecture(str(arch))
    keys = (record.keys_of(name) if record is not None else None) or _FIELD_KEYS.get(name)
    if name == "head_dim" and keys is None:
        # key_length, or llama.cpp's default n_embd / n_head when the file has none
        keys = (
            ("attention.key_length",)
            if f"{arch}.attention.key_length" in meta
            else ("embedding_length", "attention.head_count")
        )
    if name == "num_hidden_layers" and meta.get(f"{arch}.nextn_predict_layers"):
        keys = ("block_count", "nextn_predict_layers")  # the trunk: block_count less the NextN layers
    if keys is None:
        return None
    full = [f"{arch}.{k}" for k in keys]
    return (f"GGUF key {full[0]}" if len(full) == 1 else f"GGUF keys {' and '.join(full)}") + layer


def _in_gguf_terms(message: str, meta: dict[str, Any], label: str) -> str:
    """A config reader's message about a GGUF's mapped config, naming the GGUF keys instead of the
    config fields ("config field 'num_key_value_heads' (3) must divide ..." -> "GGUF key
    llama.attention.head_count_kv (3) must divide ..."); a field with no GGUF key of its own stays
    named, said to be kvcalc's reading of the metadata."""
    unmapped = False

    def field(m: re.Match[str]) -> str:
        nonlocal unmapped
        keys = _gguf_keys(m[1], meta)
        if keys is None:
            unmapped = True
            return m[0]
        return keys

    def passing(m: re.Match[str]) -> str:
        if m[1] == "head_dim":  # "... and no 'head_dim' is given": the key that would give it
            return f"{meta.get('general.architecture')}.attention.key_length"
        return re.sub(r"^GGUF keys? ", "", _gguf_keys(m[1], meta) or m[0])

    text = _CONFIG_FIELD.sub(field, message)
    text = re.sub(r"'(\w+)'", passing, text)  # fields the message names in passing
    if unmapped or "config" in text:
        return f"{label}: the GGUF metadata, as kvcalc maps it to a config, is refused: {text}"
    return f"{label}: {text}"


# --- the mapping of each layout (Architecture.layout) ---------------------------------------------------

# Layouts whose mapping reads head_count itself: none (Mamba), or one per layer.
_OWN_HEADS = frozenset({Layout.SSM, Layout.GEMMA4, Layout.MIMO2, Layout.DECI})
# Layouts with a mapping of their own; every other one is _attention's, with its hooks below.
_MAPPINGS: dict[Layout, Handler] = {
    Layout.SSM: recurrent.ssm_only,
    Layout.MLA: mla.deepseek2,
    Layout.SPARSE_MLA: mla.sparse_mla,
    Layout.KIMI_LINEAR: mla.kimi_linear,
    Layout.T5: attention.t5,
    Layout.DEEPSEEK4: mla.deepseek4,
    Layout.GEMMA4: attention.gemma4,
    Layout.MIMO2: attention.mimo2,
    Layout.DECI: attention.deci,
}
# The hybrids' per-layer head_count_kv (0 on recurrent layers), read before the attention's.
_KV_HEADS: dict[Layout, KvHeads] = {
    Layout.HYBRID: recurrent.recurrent,
    Layout.NEMOTRON_H: recurrent.nemotron_h,
    Layout.NEMOTRON_H_MOE: recurrent.nemotron_h,
}
# What a layout reads after the attention's keys.
_AFTER_ATTENTION: dict[Layout, Handler] = {
    Layout.GATED_DELTA_NET: recurrent.gated_delta_net,
    Layout.FALCON_H1: recurrent.falcon_h1,
    Layout.GEMMA3N: attention.gemma3n,
    Layout.MINIMAX_M3: mla.minimax_m3,
}
