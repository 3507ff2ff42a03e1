"""Attention layouts with a mapping of their own: K/V shared across layers (gemma3n), per-layer
heads and head dims (gemma4, mimo2, deci), and T5's decoder.

llama.cpp 0c1e570's common loader (src/llama-model.cpp llama_model_base::load_hparams) reads
head_count and head_count_kv as a scalar or one value per layer (n_head_kv defaults to n_head),
key_length / value_length (default n_embd / n_head of layer 0) and key_length_swa /
value_length_swa (default: the former) for every architecture; a layer's K/V row is
n_head_kv(il) x (is_swa(il) ? key_length_swa : key_length) (src/llama-hparams.cpp n_embd_k_gqa),
and the window applies only where the architecture's load_arch_hparams sets swa_type.
"""

from __future__ import annotations

from typing import Any

from kvcalc.errors import SourceError
from kvcalc.inputs.gguf.values import ArchKeys, count, given_or, per_layer, uniform

# src/llama-model.cpp (0c1e570) gives Gemma 3n K/V on its first 20 layers whatever
# attention.shared_kv_layers says (n_layer_kv_from_start = 20 is written into its loader; llama.cpp's
# own tests/test-llama-archs.cpp @ f840737d builds gemma3n with 22 layers, saying so); runs of 0c1e570 on
# files of 10, 30 and 35 layers cached min(layers, 20) (tests/inputs/gguf/test_config.py).
_GEMMA3N_KV_LAYERS = 20


def gemma3n(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """gemma3n: conversion/gemma.py Gemma3NModel @ 2bbcf7fc writes Gemma3Model's keys, the per-layer
    sliding_window_pattern and attention.shared_kv_layers (num_kv_shared_layers: the last layers
    reuse earlier layers' K/V). Read as Gemma3nTextConfig; a file whose own layers with K/V are not
    the 20 llama.cpp caches is refused rather than estimated two ways."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    shared = keys.need("attention.shared_kv_layers")
    if isinstance(shared, float) and shared.is_integer():  # a float32 before llama.cpp PR #14450
        shared = int(shared)
    shared = count(shared, f"{arch}.attention.shared_kv_layers", label)
    if layers - shared != min(layers, _GEMMA3N_KV_LAYERS):
        raise SourceError(
            f"{label}: GGUF gemma3n with {layers} layers and {arch}.attention.shared_kv_layers {shared}: llama.cpp "
            f"caches K/V on the first {_GEMMA3N_KV_LAYERS} layers whatever the file says; not supported"
        )
    config["num_kv_shared_layers"] = shared


def t5(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """t5 (conversion/t5.py T5Model @ 0c1e570: T5, MT5, UMT5): block_count num_layers (the encoder's),
    decoder_block_count num_decoder_layers when the config has it, head_count num_heads, key/value_length
    d_kv, no head_count_kv. Read as a T5Config. llama.cpp caches the decoder's self-attention K/V in one
    llama_kv_cache (src/llama-model.cpp create_memory, default branch) and recomputes cross-attention K/V
    from the encoder output at every decode (src/models/t5.cpp), which its llama.cpp rules follow."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    heads: int = config["num_attention_heads"]
    decoder = keys.get("decoder_block_count")
    if decoder is not None and count(decoder, f"{arch}.decoder_block_count", label) != layers:
        # src/llama-kv-cache.cpp makes one K/V per hparams.n_layer_all (block_count) while src/models/t5.cpp
        # runs dec_n_layer decoder layers: fewer leave cache layers unused, more fail to load (a vector range
        # check in a real run, tests/inputs/gguf/test_attention.py).
        raise SourceError(
            f"{label}: GGUF t5 with {arch}.decoder_block_count {decoder} and block_count {layers}: llama.cpp sizes "
            "the decoder's KV cache by the encoder's block count; only equal counts are supported"
        )
    kv = keys.get("attention.head_count_kv")
    kv = heads if kv is None else uniform(kv, f"{arch}.attention.head_count_kv", layers, label)
    embd: int | None = config.get("hidden_size")
    dims = []
    for part in ("key_length", "value_length"):
        value = keys.get(f"attention.{part}")
        if value is not None:
            dims.append(count(value, f"{arch}.attention.{part}", label))
        elif embd is not None and embd % heads == 0:
            dims.append(embd // heads)  # llama.cpp's default: n_embd / n_head
        else:
            raise SourceError(f"{label}: GGUF has no {arch}.attention.{part} and no embedding_length / heads")
    if dims[0] != dims[1]:
        # src/models/t5.cpp: GGML_ASSERT(n_embd_head == hparams.n_embd_head_k()).
        raise SourceError(f"{label}: GGUF t5 with K and V head dims {dims[0]} and {dims[1]}: llama.cpp asserts equal")
    config.update(d_kv=dims[0], num_key_value_heads=kv, num_decoder_layers=layers, is_encoder_decoder=True)


def head_dims(keys: ArchKeys, heads: int, config: dict[str, Any]) -> tuple[int, int]:
    """(key_length, value_length) as llama.cpp reads them: n_embd / n_head when absent."""
    arch, label = keys.arch, keys.label
    embd = config.get("hidden_size")
    dims = []
    for key in ("attention.key_length", "attention.value_length"):
        value = keys.get(key)
        if value is None:
            if embd is None or embd % heads:
                raise SourceError(f"{label}: GGUF has no {arch}.{key}, nor an embedding_length ({embd}) giving it")
            value = embd // heads
        dims.append(count(value, f"{arch}.{key}", label))
    return dims[0], dims[1]


def swa_layers(keys: ArchKeys) -> list[bool]:
    """attention.sliding_window_pattern, one flag per layer (llama.cpp's get_arr into is_swa_impl)."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    pattern = keys.need("attention.sliding_window_pattern")
    if not isinstance(pattern, list) or len(pattern) != layers or any(p not in (0, 1) for p in pattern):
        raise SourceError(
            f"{label}: GGUF key {arch}.attention.sliding_window_pattern must flag each of the {layers} layers"
        )
    swa = [bool(p) for p in pattern]
    if not any(swa):  # create_memory: GGML_ASSERT(hparams.is_swa_any()) for a swa_type architecture
        raise SourceError(f"{label}: GGUF {arch} flags no sliding layer in its sliding_window_pattern; not supported")
    return swa


def gemma4(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """gemma4: conversion/gemma.py Gemma4Model @ 0c1e570 (on Gemma3Model's keys) writes key_length =
    value_length = global_head_dim (the full layers'), key_length_swa = value_length_swa = head_dim,
    head_count_kv per layer (num_key_value_heads on sliding layers, num_global_key_value_heads on
    full ones) when the config has both, else num_key_value_heads, sliding_window_pattern from
    layer_types, sliding_window and shared_kv_layers. src/models/gemma4.cpp load_arch_hparams
    (0c1e570) sets swa_type STANDARD, n_swa = sliding_window (required), is_swa from the pattern and
    n_layer_kv_from_start = layers - shared_kv_layers: later layers get no K/V
    (llama_hparams::has_kv) and reuse layer n_layer_kv_from_start - 2 (sliding) or - 1 (full)
    (create_memory's reuse callback). Mapped to Gemma4TextConfig with the full layers' geometry in
    per_layer_config, as transformers 5.24 saves it; kvcalc's gemma4 rule then applies exactly
    these dims and heads (it reads no global_head_dim once per_layer_config is given)."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    heads = uniform(keys.need("attention.head_count"), f"{arch}.attention.head_count", layers, label)
    k_full, v_full = head_dims(keys, heads, config)
    k_swa = count(keys.need("attention.key_length_swa"), f"{arch}.attention.key_length_swa", label)
    v_swa = count(keys.need("attention.value_length_swa"), f"{arch}.attention.value_length_swa", label)
    if (k_full, k_swa) != (v_full, v_swa):  # load_arch_tensors throws "Gemma 4 requires n_embd_head_k == ..."
        raise SourceError(f"{label}: GGUF gemma4 with K and V head dims that differ; llama.cpp refuses it")
    kv_key = f"{arch}.attention.head_count_kv"
    kv = per_layer(given_or(keys.get("attention.head_count_kv"), heads), kv_key, layers, label)
    swa = swa_layers(keys)
    shared = given_or(keys.get("attention.shared_kv_layers"), 0)
    shared = count(shared, f"{arch}.attention.shared_kv_layers", label) if shared else 0
    own = layers - shared
    shared_kinds = set(swa[own:])
    if own < 2 or (False in shared_kinds and swa[own - 1]) or (True in shared_kinds and not swa[own - 2]):
        # The reuse callback asserts n_layer_kv_from_start >= 2 and that layer own - 1 is full
        # (own - 2 sliding) for the full (sliding) layers that reuse it.
        raise SourceError(
            f"{label}: GGUF gemma4 whose {shared} KV-sharing layers do not follow a sliding and a full layer of "
            "their own; llama.cpp cannot build its cache"
        )
    if own == layers and swa[-1]:
        # Gemma4TextConfig (and kvcalc's gemma4 rule) makes the last layer full; llama.cpp keeps the file's flag.
        raise SourceError(f"{label}: GGUF gemma4 whose last layer is sliding; kvcalc's gemma4 rule makes it full")
    base_kv = kv[swa.index(True)]
    overrides: dict[str, dict[str, int]] = {}
    for i in range(own):
        dim, layer_kv = (k_swa if swa[i] else k_full), kv[i]
        if (layer_kv, dim) != (base_kv, k_swa):
            overrides[f"{i:02d}"] = {"head_dim": dim, "num_key_value_heads": layer_kv}
    config.update(
        num_attention_heads=heads, num_key_value_heads=base_kv, head_dim=k_swa,
        sliding_window=count(keys.need("attention.sliding_window"), f"{arch}.attention.sliding_window", label),
        layer_types=["sliding_attention" if s else "full_attention" for s in swa], num_kv_shared_layers=shared,
    )  # fmt: skip
    if overrides:
        config["per_layer_config"] = overrides


def mimo2(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """mimo2 (MiMo-V2-Flash, V2.5): conversion/mimo.py MimoV2Model @ 0c1e570 writes TextModel's keys
    (head_count num_attention_heads, key_length = value_length = head_dim), then value_length
    v_head_dim, head_count_kv per layer (swa_num_key_value_heads where hybrid_layer_pattern is 1,
    num_key_value_heads elsewhere), sliding_window and sliding_window_pattern = hybrid_layer_pattern
    (it asserts the swa head dims and query heads equal the full ones; a file may still carry
    key_length_swa, which llama.cpp reads), and its three MTP layers as nextn_predict_layers (the
    trunk is what gguf_config passes here). src/models/mimo2.cpp load_arch_hparams (0c1e570): swa_type
    STANDARD, n_swa = sliding_window, is_swa from the pattern. Mapped to MiMoV2FlashConfig's fields
    (hybrid_layer_pattern, swa_*), with the window as llama.cpp applies it: sliding_window, never
    sliding_window_size (which kvcalc, as transformers, would read as a window one token wider)."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    heads = uniform(keys.need("attention.head_count"), f"{arch}.attention.head_count", layers, label)
    k_full, v_full = head_dims(keys, heads, config)
    k_swa = count(given_or(keys.get("attention.key_length_swa"), k_full), f"{arch}.attention.key_length_swa", label)
    v_swa = count(given_or(keys.get("attention.value_length_swa"), v_full), f"{arch}.attention.value_length_swa", label)
    kv_key = f"{arch}.attention.head_count_kv"
    kv = per_layer(given_or(keys.get("attention.head_count_kv"), heads), kv_key, layers, label)
    swa = swa_layers(keys)
    by_kind = [{n for n, s in zip(kv, swa, strict=True) if s == kind} for kind in (False, True)]
    if any(len(counts) > 1 for counts in by_kind):
        raise SourceError(f"{label}: GGUF key {kv_key} differs within full or sliding layers; not supported")
    full_kv, swa_kv = (min(c) if c else None for c in by_kind)
    config.update(
        num_attention_heads=heads, swa_num_attention_heads=heads, head_dim=k_full, v_head_dim=v_full,
        swa_head_dim=k_swa, swa_v_head_dim=v_swa, num_key_value_heads=full_kv or swa_kv,
        swa_num_key_value_heads=swa_kv, hybrid_layer_pattern=[int(s) for s in swa],
        sliding_window=count(keys.need("attention.sliding_window"), f"{arch}.attention.sliding_window", label),
    )  # fmt: skip


def deci(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """deci (DeciLM-7B, Llama-3.1/3.3 Nemotron 51B/49B/253B): conversion/deci.py DeciModel @ 0c1e570
    writes, for a config with block_configs, head_count and head_count_kv per layer (an attention
    block: num_attention_heads and num_attention_heads // n_heads_in_group; a linear-attention
    block: num_attention_heads and 0; a no-op block: 0 and 0) and key_length = value_length =
    hidden_size // num_attention_heads; for DeciLM-7B TextModel's keys and head_count_kv from
    num_key_value_heads_per_layer. llama.cpp 0c1e570 (src/models/deci.cpp) builds K/V only for
    head_count_kv > 0 and its cache gives a 0-KV-head layer K/V rows of 0 bytes
    (src/llama-kv-cache.cpp: n_embd_k_gqa = n_head_kv(il) x head dim). Mapped to the
    nemotron-nas block_configs kvcalc reads (no_op / replace_with_linear: no cache)."""
    arch, label, layers = keys.arch, keys.label, keys.layers
    head_key, kv_key = f"{arch}.attention.head_count", f"{arch}.attention.head_count_kv"
    head_arr = per_layer(keys.need("attention.head_count"), head_key, layers, label, zero=True)
    if head_arr[0] == 0:
        # load_hparams sizes every head by layer 0's head count (n_embd / n_head()), and sets all
        # head dims to 0 when it is 0.
        raise SourceError(f"{label}: GGUF deci whose first layer has no attention heads; not supported")
    kv = per_layer(given_or(keys.get("attention.head_count_kv"), head_arr), kv_key, layers, label, zero=True)
    heads = head_arr[0]
    if any(h not in (0, heads) for h in head_arr) or any(k and not h for k, h in zip(kv, head_arr, strict=True)):
        raise SourceError(f"{label}: GGUF key {head_key} differs between attention layers; not supported")
    k_dim, v_dim = head_dims(keys, heads, config)
    if k_dim != v_dim:
        raise SourceError(f"{label}: GGUF deci with K head dim {k_dim} and V head dim {v_dim}; not supported")
    blocks = []
    for i, (n, h) in enumerate(zip(kv, head_arr, strict=True)):
        if n and heads % n:
            raise SourceError(f"{label}: GGUF key {kv_key} gives layer {i} {n} KV heads, no divisor of {heads} heads")
        blocks.append(
            {"attention": {"n_heads_in_group": heads // n, "no_op": False, "replace_with_linear": False}}
            if n
            else {"attention": {"n_heads_in_group": None, "no_op": not h, "replace_with_linear": bool(h)}}
        )
    config.update(num_attention_heads=heads, head_dim=k_dim, block_configs=blocks)
