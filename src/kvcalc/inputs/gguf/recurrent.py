"""Recurrent and hybrid architectures' metadata as the HF config fields their kvcalc families read.

What each converter writes is cited at its record (kvcalc.engines.llamacpp.architectures). llama.cpp
0c1e570 puts K/V exactly on the hybrids' layers of non-zero head_count_kv and recurrent state on the
others, f32 per sequence: n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state) conv values
(lfm2: (l_cache - 1) x n_embd) and n_embd_s = d_state x d_inner SSM values (src/llama-hparams.cpp).
"""

from __future__ import annotations

from typing import Any

from kvcalc.engines.llamacpp.architectures import Layout, Ssm
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf.values import ArchKeys, count, ratio


def recurrent(config: dict[str, Any], keys: ArchKeys, kv: Any) -> Any:
    """The SSM or short-conv geometry of the architecture (Layout.SSM or HYBRID) as the HF fields its
    kvcalc family reads; for a hybrid, ``layer_types`` from the per-layer head_count_kv (0: a
    recurrent layer) and the KV heads of the attention layers, returned for the attention mapping."""
    arch, label, record = keys.arch, keys.label, keys.record
    values = keys.state()
    hidden = config.get("hidden_size")
    if hidden is None:
        raise SourceError(f"{label}: GGUF has no {arch}.embedding_length, which sizes its layers")
    inner, state = values.get("ssm.inner_size", 0), values.get("ssm.state_size", 0)
    hybrid = record.layout is Layout.HYBRID  # else Layout.SSM: no attention at all
    if hybrid:
        layers = config["num_hidden_layers"]
        if not isinstance(kv, list) or len(kv) != layers:
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.head_count_kv must list the {layers} layers (0 on recurrent ones)"
            )
        counts = {count(v, f"{arch}.attention.head_count_kv", label) for v in kv if v != 0}
        if len(counts) > 1:
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.head_count_kv differs by attention layer; not supported"
            )
        assert record.layer_types is not None, arch
        recurrent_name, attention_name = record.layer_types
        config["layer_types"] = [recurrent_name if v == 0 else attention_name for v in kv]
        kv = counts.pop() if counts else 1  # no attention layer: the KV heads size nothing
    if record.ssm is Ssm.SHORTCONV:
        config["conv_L_cache"] = values["shortconv.l_cache"]
    elif record.ssm is Ssm.MAMBA1:  # Mamba (plain names) or Jamba (mamba_ names)
        prefix = "mamba_" if hybrid else ""
        config[f"{prefix}d_conv" if hybrid else "conv_kernel"] = values["ssm.conv_kernel"]
        config[f"{prefix}d_state" if hybrid else "state_size"] = state
        config[f"{prefix}dt_rank" if hybrid else "time_step_rank"] = values["ssm.time_step_rank"]
        if hybrid:
            config["mamba_expand"] = ratio(inner, hidden, f"{arch}.ssm.inner_size", "embedding_length", label)
    else:  # Mamba-2: time_step_rank is the number of SSM heads
        heads = values["ssm.time_step_rank"]
        head_dim = ratio(inner, heads, f"{arch}.ssm.inner_size", "ssm.time_step_rank (SSM heads)", label)
        if not hybrid:
            config.update(state_size=state, n_groups=values["ssm.group_count"], num_heads=heads, head_dim=head_dim,
                          conv_kernel=values["ssm.conv_kernel"])  # fmt: skip
        else:
            config.update(
                mamba_d_state=state, mamba_n_groups=values["ssm.group_count"], mamba_n_heads=heads,
                mamba_d_head=head_dim, mamba_d_conv=values["ssm.conv_kernel"],
                mamba_expand=ratio(inner, hidden, f"{arch}.ssm.inner_size", "embedding_length", label),
            )  # fmt: skip
    return kv


def ssm_only(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """Mamba and Mamba-2: the state alone (conversion/mamba.py writes head_count 0, "unused")."""
    recurrent(config, keys, None)


def nemotron_h(config: dict[str, Any], keys: ArchKeys, kv: Any) -> int:
    """nemotron_h: NemotronHModel (conversion/nemotron.py @ 7bca1fd9, a GraniteHybridModel) writes the Mamba-2
    keys of granitehybrid, head_count_kv per layer (0 off the attention layers) and
    feed_forward_length per layer (0 off the MLP layers); llama.cpp keeps recurrent state on the
    layers with neither (tests/inputs/gguf/test_config.py: the layers of a real llama.cpp 0c1e570 run). Mapped
    back to NemotronHConfig's hybrid_override_pattern (M, *, -); the SSM head dim is ssm.inner_size /
    ssm.time_step_rank, the widths llama.cpp sizes its state from."""
    arch, label = keys.arch, keys.label
    values = keys.state()
    layers = config["num_hidden_layers"]
    ff = keys.need("feed_forward_length")
    if not isinstance(kv, list) or len(kv) != layers or not isinstance(ff, list) or len(ff) != layers:
        raise SourceError(
            f"{label}: GGUF keys {arch}.attention.head_count_kv and {arch}.feed_forward_length must list the "
            f"{layers} layers"
        )
    counts = {count(v, f"{arch}.attention.head_count_kv", label) for v in kv if v != 0}
    if len(counts) > 1:
        raise SourceError(f"{label}: GGUF key {arch}.attention.head_count_kv differs by attention layer; not supported")
    # nemotron_h_moe: the same converter class (is_moe) writes the MoE width on its 'E' layers where
    # nemotron_h has '-' MLP layers; llama.cpp 0c1e570 loads both with llama_model_nemotron_h's
    # load_arch_hparams (src/models/nemotron-h-moe.cpp) and caches neither (create_memory's filters).
    mlp = "E" if keys.record.layout is Layout.NEMOTRON_H_MOE else "-"
    config["hybrid_override_pattern"] = "".join("*" if k else mlp if f else "M" for k, f in zip(kv, ff, strict=True))
    heads = values["ssm.time_step_rank"]
    config.update(
        mamba_num_heads=heads,
        mamba_head_dim=ratio(values["ssm.inner_size"], heads, f"{arch}.ssm.inner_size", "ssm.time_step_rank", label),
        n_groups=values["ssm.group_count"],
        ssm_state_size=values["ssm.state_size"],
        conv_kernel=values["ssm.conv_kernel"],
    )
    return counts.pop() if counts else 1


def falcon_h1(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """falcon-h1: FalconH1Model (conversion/falcon_h1.py @ 7bca1fd9, a Mamba2Model) writes the
    Mamba-2 keys (ssm.inner_size mamba_d_ssm, ssm.time_step_rank d_inner / head dim, the SSM heads)
    beside a scalar head_count_kv and key/value_length: attention and a Mamba-2 mixer in every
    layer, which llama.cpp 0c1e570 gives both K/V and recurrent state (tests/inputs/gguf/test_config.py)."""
    arch, label = keys.arch, keys.label
    values = keys.state()
    inner, heads = values["ssm.inner_size"], values["ssm.time_step_rank"]
    config.update(
        mamba_d_ssm=inner,
        mamba_n_heads=heads,
        mamba_d_head=ratio(inner, heads, f"{arch}.ssm.inner_size", "ssm.time_step_rank (SSM heads)", label),
        mamba_n_groups=values["ssm.group_count"],
        mamba_d_state=values["ssm.state_size"],
        mamba_d_conv=values["ssm.conv_kernel"],
    )


def gated_delta_net(config: dict[str, Any], keys: ArchKeys, notes: list[str]) -> None:
    """qwen3next: conversion/qwen.py Qwen3NextModel @ 03173d5e writes the gated delta net as
    ssm.conv_kernel linear_conv_kernel_dim, ssm.state_size linear_key_head_dim, ssm.group_count
    linear_num_key_heads, ssm.time_step_rank linear_num_value_heads, ssm.inner_size
    linear_value_head_dim x linear_num_value_heads, and full_attention_interval; head_count_kv
    is a scalar (the full-attention layers'). Mapped back to Qwen3NextConfig's fields, whose
    kvcalc rule puts the full layers every interval-th layer (tests/inputs/gguf/test_config.py checks the
    layers llama.cpp 0c1e570 places against a real run).

    qwen35 / qwen35moe (Qwen3_5TextModel / Qwen3_5MoeTextModel, subclasses of Qwen3NextModel in
    conversion/qwen.py of llama.cpp 0c1e570) write the same keys; that converter also writes
    attention.recurrent_layers (true on each "linear_attention" layer) when the HF config lists
    layer_types. The loaders of all three (src/models/qwen3next.cpp, qwen35.cpp, qwen35moe.cpp @
    0c1e570) take recurrent_layers when present, else full_attention_interval, else 4, and
    llama.cpp's state for these layers is n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x
    d_state), n_embd_s = d_state x d_inner (src/llama-hparams.cpp): Qwen3.5's conv over Q, K
    (linear_num_key_heads x linear_key_head_dim each) and V, and its value-heads x key-dim x
    value-dim delta-rule state, as kvcalc's qwen3_5 and qwen3_next rules size them
    (tests/inputs/gguf/test_recurrent.py runs llama.cpp on qwen35 and qwen35moe files)."""
    arch, label = keys.arch, keys.label
    values = keys.state()
    v_heads = values["ssm.time_step_rank"]
    config.update(
        linear_conv_kernel_dim=values["ssm.conv_kernel"],
        linear_key_head_dim=values["ssm.state_size"],
        linear_num_key_heads=values["ssm.group_count"],
        linear_num_value_heads=v_heads,
        linear_value_head_dim=ratio(values["ssm.inner_size"], v_heads, f"{arch}.ssm.inner_size",
                                    "ssm.time_step_rank (value heads)", label),
    )  # fmt: skip
    layer_flags = keys.get("attention.recurrent_layers")
    if layer_flags is not None:
        layers = config["num_hidden_layers"]
        flags = layer_flags if isinstance(layer_flags, list) else []
        if len(flags) != layers or any(not isinstance(v, bool) for v in flags):
            raise SourceError(
                f"{label}: GGUF key {arch}.attention.recurrent_layers must list the {layers} layers as booleans"
            )
        config["layer_types"] = ["linear_attention" if v else "full_attention" for v in flags]
    elif keys.get("full_attention_interval") is not None:  # absent: 4 in llama.cpp, as in kvcalc's rules
        config["full_attention_interval"] = count(
            keys.get("full_attention_interval"), f"{arch}.full_attention_interval", label
        )
