"""Multi-head latent attention and the sparse-attention architectures: MLA (deepseek2), MLA with an
indexer key cache (deepseek32, glm-dsa), MLA beside Kimi Delta Attention (kimi-linear), DeepSeek-V4's
compressed layers (deepseek4) and MiniMax-M3's sparse GQA (minimax-m3)."""

from __future__ import annotations

from typing import Any

from kvcalc.engines.llamacpp.architectures import Indexer
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf.values import ArchKeys, count, short

# src/models/glm-dsa.cpp load_arch_hparams @ 0c1e570: n_ctx_train < 1048576 is GLM-5 or 5.1 (every
# layer full); its GLM_5_2_DEFAULT_INDEXER_TYPES table lists 78 layers.
_GLM_DSA_PRE_5_2_CTX = 1048576
_GLM_5_2_LAYERS = 78


def mla(config: dict[str, Any], keys: ArchKeys) -> None:
    """deepseek2: MLA. Converted files since llama.cpp's MLA rework write key_length =
    kv_lora_rank + rope dims (MQA over the latent) and the decompressed dims as *_mla; older ones
    write key_length = qk_nope + qk_rope and value_length = v_head_dim."""
    arch, label = keys.arch, keys.label
    rank = count(keys.need("attention.kv_lora_rank"), f"{arch}.attention.kv_lora_rank", label)
    rope = count(keys.need("rope.dimension_count"), f"{arch}.rope.dimension_count", label)
    k_mla, v_mla = keys.get("attention.key_length_mla"), keys.get("attention.value_length_mla")
    k_len = k_mla if k_mla is not None else keys.need("attention.key_length")
    v_len = v_mla if v_mla is not None else keys.need("attention.value_length")
    k_len = count(k_len, f"{arch}.attention.key_length{'_mla' if k_mla is not None else ''}", label)
    if k_len <= rope:
        raise SourceError(f"{label}: GGUF MLA key length {k_len} is not above the {rope} RoPE dims")
    config.update(
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        qk_nope_head_dim=k_len - rope,
        v_head_dim=count(v_len, f"{arch}.attention.value_length", label),
    )


def deepseek2(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """deepseek2: MLA (see ``mla``)."""
    mla(config, keys)


def latent_mla(config: dict[str, Any], keys: ArchKeys) -> None:
    """MLA written since llama.cpp's MLA rework (key_length_mla and value_length_mla present), whose
    cached latent (key_length) must be kv_lora_rank + rope dims, as kvcalc's latent cache is."""
    arch, label = keys.arch, keys.label
    for key in ("attention.key_length_mla", "attention.value_length_mla"):
        keys.need(key)
    mla(config, keys)
    k_len = count(keys.need("attention.key_length"), f"{arch}.attention.key_length", label)
    if k_len != config["kv_lora_rank"] + config["qk_rope_head_dim"]:
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.key_length ({k_len}) is not kv_lora_rank + rope dims "
            f"({config['kv_lora_rank']} + {config['qk_rope_head_dim']}), the latent llama.cpp caches; not supported"
        )


def sparse_mla(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """deepseek32 (DeepSeek-V3.2) and glm-dsa (GLM-5): conversion/deepseek.py DeepseekV32Model and
    conversion/glm.py GlmMoeDsaModel (llama.cpp 0c1e570), both DeepseekV2Model's MLA keys (head_count_kv
    1, key_length kv_lora_rank + rope dims, the decompressed dims as *_mla) plus attention.indexer.
    head_count / key_length / top_k (index_n_heads, index_head_dim, index_topk) and, for glm-dsa,
    attention.indexer.types (true on the "full" layers) when the config lists indexer_types. Both
    loaders require MLA (src/models/deepseek32.cpp, glm-dsa.cpp). create_memory (src/llama-model.cpp)
    builds a llama_kv_cache_dsa: the latent cache, K only, on the trunk layers, and an indexer key
    cache (src/llama-kv-cache-dsa.cpp) on every trunk layer for deepseek32 and on the is_indexer_full
    ones for glm-dsa, whose loader without indexer.types makes every layer full when context_length
    is under 1048576 (GLM-5, 5.1) and takes GLM-5.2's table otherwise. kvcalc's deepseek_v32 and
    glm_moe_dsa rules cache the same; tests/inputs/gguf/test_mla.py runs llama.cpp on both."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    kv = keys.need("attention.head_count_kv")
    if kv != 1 or isinstance(kv, bool):
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.head_count_kv is {short(kv)}, not 1 (MQA over the latent): "
            "llama.cpp would cache that many latent copies; not supported"
        )
    latent_mla(config, keys)  # both converters postdate the MLA rework
    for key, name in (("key_length", "index_head_dim"), ("head_count", "index_n_heads"), ("top_k", "index_topk")):
        config[name] = count(keys.need(f"attention.indexer.{key}"), f"{arch}.attention.indexer.{key}", label)
    if keys.record.indexer is not Indexer.TYPED:
        return
    types = keys.get("attention.indexer.types")
    if types is None:
        ctx = count(keys.need("context_length"), f"{arch}.context_length", label)
        if ctx < _GLM_DSA_PRE_5_2_CTX:
            full = [True] * layers
        else:
            # GLM_5_2_DEFAULT_INDEXER_TYPES (src/models/glm-dsa.cpp): layers 0 and 1, then every 4th from
            # layer 2, full, for its 78 entries; the rest of the LLAMA_MAX_LAYERS array is 0 (shared).
            full = [i < _GLM_5_2_LAYERS and (i < 2 or (i - 2) % 4 == 0) for i in range(layers)]
            notes.append(
                f"no {arch}.attention.indexer.types and context_length {ctx:,} >= {_GLM_DSA_PRE_5_2_CTX:,}: "
                "llama.cpp takes GLM-5.2's indexer layout (src/models/glm-dsa.cpp)"
            )
    elif isinstance(types, list) and len(types) == layers and all(v in (0, 1) for v in types):
        full = [bool(v) for v in types]
    elif isinstance(types, bool):  # llama.cpp's get_key_or_arr gives a scalar to every layer
        full = [types] * layers
    else:
        raise SourceError(f"{label}: GGUF key {arch}.attention.indexer.types must list the {layers} layers as booleans")
    config["indexer_types"] = ["full" if f else "shared" for f in full]
    # The same layout as GlmMoeDsaConfig's index_topk_pattern letters, which vLLM reads instead of the
    # list (families/glm_moe_dsa.py): with both given, no engine derives another layout.
    config["index_topk_pattern"] = "".join("F" if f else "S" for f in full)


def kimi_linear(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """kimi-linear: conversion/kimi_linear.py KimiLinearModel (llama.cpp 0c1e570) writes MLA as
    deepseek2 since the MLA rework (kv_lora_rank, rope.dimension_count qk_rope_head_dim, key_length
    kv_lora_rank + rope dims, key_length_mla, value_length_mla), head_count_kv per layer (1, MQA over
    the latent, on linear_attn_config's 1-based full_attn_layers; 0 on the others, the KDA layers),
    ssm.conv_kernel short_conv_kernel_size and kda.head_dim head_dim, but no KDA head count.
    src/models/kimi-linear.cpp @ 0c1e570 makes the layers of head_count_kv 0 recurrent and sizes
    their state by attention.head_count (src/llama-hparams.cpp: n_embd_r = 3 x (d_conv - 1) x n_head x
    kda_head_dim, n_embd_s = kda_head_dim^2 x n_head, f32), so linear_attn_config's num_heads is read
    back as head_count: the heads llama.cpp gives the state. Its MLA layers cache K only (is_mla: no
    V, src/llama-kv-cache.cpp), key_length x head_count_kv per token: kvcalc's latent + rope only when
    head_count_kv is 1 and key_length is kv_lora_rank + rope dims, which is refused otherwise."""
    arch, label = keys.arch, keys.label
    layers = config["num_hidden_layers"]
    kv = keys.need("attention.head_count_kv")
    if not isinstance(kv, list) or len(kv) != layers:
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.head_count_kv must list the {layers} layers (0 on KDA layers)"
        )
    if any(isinstance(v, bool) or v not in (0, 1) for v in kv):
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.head_count_kv is not 1 on every MLA layer: llama.cpp would cache "
            "that many latent copies; not supported"
        )
    latent_mla(config, keys)  # kimi-linear.cpp requires the *_mla keys too
    values = keys.state()
    config["linear_attn_config"] = {
        "full_attn_layers": [i + 1 for i, v in enumerate(kv) if v],
        "kda_layers": [i + 1 for i, v in enumerate(kv) if not v],
        "num_heads": config["num_attention_heads"],
        "head_dim": values["kda.head_dim"],
        "short_conv_kernel_size": values["ssm.conv_kernel"],
    }
    # The file has no such key; llama.cpp's graph (src/models/kimi-linear.cpp @ 0c1e570) rotates no
    # MLA query or key (no ggml_rope call): Kimi's NoPE MLA, which the config says as mla_use_nope.
    config["mla_use_nope"] = True


def deepseek4(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """deepseek4 (DeepSeek-V4): conversion/deepseek.py DeepseekV4Model @ 0c1e570 writes TextModel's
    head_count, head_count_kv (num_key_value_heads, 1) and key_length = value_length = head_dim, plus
    sliding_window, indexer.key_length (index_head_dim) and compress_ratios (one per block: 0, 4 for
    CSA or 128 for HCA). src/llama-kv-cache-dsv4.cpp caches one key_length row per token per layer
    (K only, dsv4_make_k_only) and hard-codes the ratios 4 and 128, so the config's rates are those.
    kvcalc's deepseek_v4 rules read the rest; tests/inputs/gguf/test_mla.py runs llama.cpp on a file."""
    arch, label = keys.arch, keys.label
    kv = keys.need("attention.head_count_kv")
    if kv != 1 or isinstance(kv, bool):
        # The K row llama.cpp caches is n_head_kv x key_length; DeepSeek-V4 has one shared K=V head.
        raise SourceError(f"{label}: GGUF key {arch}.attention.head_count_kv is {short(kv)}, not 1: not supported")
    k_len = count(keys.need("attention.key_length"), f"{arch}.attention.key_length", label)
    if keys.get("attention.value_length") not in (None, k_len):
        raise SourceError(f"{label}: GGUF {arch} with value_length unlike key_length {k_len}: not supported")
    ratios = keys.need("attention.compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < config["num_hidden_layers"]:
        raise SourceError(f"{label}: GGUF key {arch}.attention.compress_ratios must list a ratio for every block")
    config.update(
        num_key_value_heads=1,
        head_dim=k_len,
        sliding_window=count(keys.need("attention.sliding_window"), f"{arch}.attention.sliding_window", label),
        compress_ratios=ratios,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
    )
    if 4 in ratios[: config["num_hidden_layers"]]:
        key = f"{arch}.attention.indexer.key_length"
        config["index_head_dim"] = count(keys.need("attention.indexer.key_length"), key, label)
    rope = keys.get("rope.dimension_count")
    if rope is not None:
        config["qk_rope_head_dim"] = rope


def minimax_m3(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """minimax-m3: conversion/minimax.py MiniMaxM3Model (llama.cpp 0c1e570), a MiniMaxM2Model: TextModel's
    GQA keys (head_count_kv, key_length = value_length = head_dim), attention.indexer.key_length
    sparse_index_dim (head_count, top_k, block_size and local_blocks choose blocks, no cache) and
    leading_dense_block_count, the leading zeros of moe_layer_freq. create_memory (src/llama-model.cpp)
    builds a llama_kv_cache_msa whose indexer cache holds the layers il >= n_layer_dense_lead: llama.cpp
    makes the MoE layers the sparse ones, so the config's sparse_attention_freq is read back as that
    split (the released checkpoint's two lists agree)."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    if "per_layer_config" in config or "v_head_dim" in config:
        raise SourceError(
            f"{label}: GGUF {arch} with KV heads or a value length that differ from the rest: kvcalc's "
            "minimax_m3 rules have one K/V geometry; not supported"
        )
    dense = keys.get("leading_dense_block_count")
    if dense is None:
        dense = 0  # llama.cpp's n_layer_dense_lead default: every layer sparse
    elif isinstance(dense, bool) or not isinstance(dense, int) or dense < 0:
        raise SourceError(f"{label}: GGUF key {arch}.leading_dense_block_count is {short(dense)}")
    key = f"{arch}.attention.indexer.key_length"
    config["index_head_dim"] = count(keys.need("attention.indexer.key_length"), key, label)
    config["layer_types"] = ["full_attention" if i < dense else "minimax_m3_sparse" for i in range(layers)]
