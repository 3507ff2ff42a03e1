"""Small models of llama.cpp architectures, as convert_hf_to_gguf.py writes them.

Each ``*_keys`` function (and ``convert``) is a converter's set_gguf_parameters for an HF config dict
(ggml-org/llama.cpp conversion/*.py, at the commits the test modules name), with a vocabulary and
MLP too small to size any cache; the ``SMALL_*`` dicts are tiny HF geometries to feed them. Plain
values are for ``gguf_file``; ``ATTENTION_FILES`` and ``with_nextn`` give keys with their GGUF
types, for ``typed_gguf_file`` (tests.helpers.gguf_files).
"""

from __future__ import annotations

from typing import Any

from kvcalc.inputs.presets import get_preset
from tests.helpers.gguf_files import F32, U32, Keys, general, tokenizer

# --- attention-only architectures, and NextN blocks -----------------------------------------------


# Attention-only architectures, as each converter writes them (the keys and their GGUF types), small:
# name -> (llama.cpp architecture, keys). ``typed_gguf_file`` writes them.
ATTENTION_FILES: dict[str, tuple[str, Keys]] = {
    # FalconModel: context_length 2048 always, head_count_kv num_kv_heads (else n_head_kv, else 1),
    # no key_length: llama.cpp's head dim is n_embd / n_head = 256 / 4 = 64.
    "falcon": ("falcon", {
        **general("Falcon"), "context_length": (U32, 2048), "tensor_data_layout": ("string", "jploski"),
        "embedding_length": (U32, 256), "feed_forward_length": (U32, 1024), "block_count": (U32, 3),
        "attention.head_count": (U32, 4), "attention.head_count_kv": (U32, 1),
        "attention.layer_norm_epsilon": (F32, 1e-5), **tokenizer(),
    }),
    # FalconModel for a new_decoder_architecture config (Falcon-40B style): grouped KV heads, 2 of 8;
    # head dim 512 / 8 = 64.
    "falcon grouped": ("falcon", {
        **general("Falcon grouped"), "context_length": (U32, 2048), "tensor_data_layout": ("string", "jploski"),
        "embedding_length": (U32, 512), "feed_forward_length": (U32, 2048), "block_count": (U32, 2),
        "attention.head_count": (U32, 8), "attention.head_count_kv": (U32, 2),
        "attention.layer_norm_epsilon": (F32, 1e-5), **tokenizer(),
    }),
    # GemmaModel: key_length = value_length = head_dim (128 here, not 256 / 4).
    "gemma": ("gemma", {
        **general("Gemma"), "context_length": (U32, 8192), "embedding_length": (U32, 256), "block_count": (U32, 3),
        "feed_forward_length": (U32, 512), "attention.head_count": (U32, 4), "attention.head_count_kv": (U32, 1),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6), "attention.key_length": (U32, 128),
        "attention.value_length": (U32, 128), **tokenizer("llama"),
    }),
    # Phi2Model: head_count_kv = head_count, partial rotary dims; head dim 320 / 4 = 80.
    "phi2": ("phi2", {
        **general("Phi-2"), "context_length": (U32, 2048), "embedding_length": (U32, 320),
        "feed_forward_length": (U32, 1280), "block_count": (U32, 2), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 4), "attention.layer_norm_epsilon": (F32, 1e-5),
        "rope.dimension_count": (U32, 32), **tokenizer(),
    }),
    # GPT2Model: no head_count_kv (llama.cpp: n_head_kv = n_head); head dim 192 / 3 = 64.
    "gpt2": ("gpt2", {
        **general("GPT-2"), "block_count": (U32, 2), "context_length": (U32, 1024), "embedding_length": (U32, 192),
        "feed_forward_length": (U32, 768), "attention.head_count": (U32, 3),
        "attention.layer_norm_epsilon": (F32, 1e-5), **tokenizer(),
    }),
    # StarCoderModel: head_count_kv 1 always (GPT-BigCode's multi-query attention).
    "starcoder": ("starcoder", {
        **general("StarCoder"), "context_length": (U32, 8192), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 1024), "block_count": (U32, 2), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 1), "attention.layer_norm_epsilon": (F32, 1e-5), **tokenizer(),
    }),
    # CommandR2Model (Cohere v1): TextModel's keys, logit_scale, rope scaling "none".
    "command-r": ("command-r", {
        **general("Command R"), "context_length": (U32, 131072), "embedding_length": (U32, 256),
        "block_count": (U32, 2), "feed_forward_length": (U32, 512), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "rope.freq_base": (F32, 8e6),
        "attention.layer_norm_epsilon": (F32, 1e-5), "logit_scale": (F32, 0.0625),
        "rope.scaling.type": ("string", "none"), **tokenizer(),
    }),
    # Olmo2Model for an Olmo2ForCausalLM config: no sliding_window, TextModel's keys.
    "olmo2": ("olmo2", {
        **general("OLMo 2"), "context_length": (U32, 4096), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 512), "block_count": (U32, 3), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "rope.freq_base": (F32, 500000.0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6), **tokenizer(),
    }),
    # Olmo2Model for an Olmo3ForCausalLM config: sliding_window and the per-layer pattern (three
    # sliding layers, then a full one).
    "olmo3": ("olmo2", {
        **general("OLMo 3"), "context_length": (U32, 65536), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 512), "block_count": (U32, 4), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "rope.freq_base": (F32, 500000.0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6), "attention.sliding_window": (U32, 128),
        "attention.sliding_window_pattern": ("array[bool]", [True, True, True, False]), **tokenizer(),
    }),
    # ExaoneModel: TextModel's keys and the rope dims.
    "exaone": ("exaone", {
        **general("EXAONE 3"), "context_length": (U32, 4096), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 512), "block_count": (U32, 2), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "rope.freq_base": (F32, 500000.0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-5), "rope.dimension_count": (U32, 64), **tokenizer(),
    }),
    # Glm4Model: TextModel's keys, half the head dims rotated.
    "glm4": ("glm4", {
        **general("GLM-4"), "context_length": (U32, 32768), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 512), "block_count": (U32, 2), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "rope.freq_base": (F32, 10000.0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-5), "rope.dimension_count": (U32, 32), **tokenizer(),
    }),
    # Glm4MoeModel converted without its NextN layer (nextn_predict_layers 0): head_dim 128 written
    # as key/value_length, one leading dense layer, then MoE.
    "glm4moe": ("glm4moe", {
        **general("GLM-4.5"), "context_length": (U32, 131072), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 512), "block_count": (U32, 3), "attention.head_count": (U32, 4),
        "attention.head_count_kv": (U32, 2), "attention.key_length": (U32, 128),
        "attention.value_length": (U32, 128), "rope.freq_base": (F32, 1000000.0),
        "attention.layer_norm_rms_epsilon": (F32, 1e-5), "rope.dimension_count": (U32, 64),
        "expert_count": (U32, 4), "expert_used_count": (U32, 2), "expert_shared_count": (U32, 1),
        "leading_dense_block_count": (U32, 1), "expert_feed_forward_length": (U32, 128),
        "expert_weights_scale": (F32, 1.0), "expert_weights_norm": ("bool", True),
        "expert_gating_func": (U32, 2), "nextn_predict_layers": (U32, 0), **tokenizer(),
    }),
}  # fmt: skip


def with_nextn(name: str, blocks: int, nextn: int) -> tuple[str, Keys]:
    """``ATTENTION_FILES[name]`` with ``blocks`` blocks, the last ``nextn`` of them NextN (multi-token
    prediction) blocks: ``<arch>.nextn_predict_layers``."""
    arch, keys = ATTENTION_FILES[name]
    return arch, {**keys, "block_count": (U32, blocks), "nextn_predict_layers": (U32, nextn)}


# The tensors llama.cpp 0c1e570's glm4-moe loader requires of ATTENTION_FILES["glm4moe"]'s shape
# (4 heads of 128, 2 KV heads, one leading dense layer, 4 experts of 128 and a shared one) with blocks
# 0-1 and NextN block 2 converted without its tensors ("trunk only": src/models/glm4-moe.cpp makes them
# optional when blk.2.nextn.eh_proj is absent), found by loading until it asked for nothing more.
_ATTN = {
    "attn_norm.weight": (256,), "attn_q.weight": (256, 512), "attn_k.weight": (256, 256),
    "attn_v.weight": (256, 256), "attn_output.weight": (512, 256), "post_attention_norm.weight": (256,),
}  # fmt: skip
GLM4MOE_TENSORS: dict[str, tuple[int, ...]] = {
    "token_embd.weight": (256, 6), "output_norm.weight": (256,),
    **{f"blk.0.{n}": s for n, s in _ATTN.items()},
    "blk.0.ffn_gate.weight": (256, 512), "blk.0.ffn_down.weight": (512, 256), "blk.0.ffn_up.weight": (256, 512),
    **{f"blk.1.{n}": s for n, s in _ATTN.items()},
    "blk.1.ffn_gate_inp.weight": (256, 4), "blk.1.exp_probs_b.bias": (4,),
    "blk.1.ffn_gate_exps.weight": (256, 128, 4), "blk.1.ffn_down_exps.weight": (128, 256, 4),
    "blk.1.ffn_up_exps.weight": (256, 128, 4), "blk.1.ffn_gate_shexp.weight": (256, 128),
    "blk.1.ffn_down_shexp.weight": (128, 256), "blk.1.ffn_up_shexp.weight": (256, 128),
}  # fmt: skip


# --- recurrent and hybrid architectures (plain values) --------------------------------------------


# A vocabulary and MLP too small to matter: they shape no cache (the weights are never allocated).
TINY = {"vocab_size": 32, "tokenizer.ggml.model": "none", "attention.layer_norm_rms_epsilon": 1e-5}


def convert(arch: str, hf: dict[str, Any]) -> dict[str, Any]:
    """The cache-shaping keys convert_hf_to_gguf.py writes for ``hf`` (an HF config dict)."""
    layers, hidden = hf["num_hidden_layers"], hf["hidden_size"]
    keys: dict[str, Any] = {"block_count": layers, "embedding_length": hidden, "context_length": 4096, **TINY}
    if arch == "mamba":  # MambaModel.set_gguf_parameters
        keys.update({
            "feed_forward_length": 0, "attention.head_count": 0, "ssm.conv_kernel": hf["conv_kernel"],
            "ssm.inner_size": hf["intermediate_size"], "ssm.state_size": hf["state_size"],
            "ssm.time_step_rank": hf["time_step_rank"],
        })  # fmt: skip
    elif arch == "mamba2":  # Mamba2Model.set_gguf_parameters: time_step_rank = d_inner / head_dim
        inner = hf["expand"] * hidden
        keys.update({
            "feed_forward_length": 0, "attention.head_count": 0, "ssm.conv_kernel": hf["conv_kernel"],
            "ssm.inner_size": inner, "ssm.state_size": hf["state_size"],
            "ssm.time_step_rank": inner // hf["head_dim"], "ssm.group_count": hf["n_groups"],
        })  # fmt: skip
    elif arch == "granitehybrid":  # GraniteHybridModel.set_gguf_parameters (no head_dim: popped)
        attention = [i for i, t in enumerate(hf["layer_types"]) if t == "attention"]
        keys.update({
            "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": [hf["num_key_value_heads"] if i in attention else 0 for i in range(layers)],
            "ssm.conv_kernel": hf["mamba_d_conv"], "ssm.state_size": hf["mamba_d_state"],
            "ssm.group_count": hf["mamba_n_groups"], "ssm.inner_size": hf["mamba_expand"] * hidden,
            "ssm.time_step_rank": hf["mamba_n_heads"], "expert_count": 0, "expert_used_count": 0,
        })  # fmt: skip
    elif arch == "jamba":  # JambaModel.set_gguf_parameters
        offset, period = hf["attn_layer_offset"], hf["attn_layer_period"]
        kv = [0] * offset + [
            hf["num_key_value_heads"] if (i - offset) % period == 0 else 0 for i in range(offset, layers)
        ]
        keys.update({
            "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": kv, "ssm.conv_kernel": hf["mamba_d_conv"],
            "ssm.inner_size": hf["mamba_expand"] * hidden, "ssm.state_size": hf["mamba_d_state"],
            "ssm.time_step_rank": hf["mamba_dt_rank"], "expert_count": 0, "expert_used_count": 0,
        })  # fmt: skip
    elif arch == "lfm2":  # LFM2Model.set_gguf_parameters: KV heads only on attention layers
        types = hf.get("layer_types") or [
            "full_attention" if i in hf["full_attn_idxs"] else "conv" for i in range(layers)
        ]  # Lfm2Config.__post_init__ derives layer_types from full_attn_idxs
        keys.update({
            "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": [hf["num_key_value_heads"] if t != "conv" else 0 for t in types],
            "shortconv.l_cache": hf["conv_L_cache"],
        })  # fmt: skip
    return keys


# Granite-4.0-H-Micro's config (the preset's): 36 Mamba-2 layers and 4 attention layers.
GRANITE_MICRO = get_preset("granite-4.0-h-micro").config


# A made-up Mamba-2 of 8 layers (kvcalc has no Mamba-2 preset or fixture): n_groups 8, state 128.
SMALL_MAMBA2 = {"num_hidden_layers": 8, "hidden_size": 1024, "expand": 2, "head_dim": 64, "state_size": 128,
                "n_groups": 8, "conv_kernel": 4}  # fmt: skip


def qwen3next_keys(hf: dict[str, Any]) -> dict[str, Any]:
    """Qwen3NextModel.set_gguf_parameters for an HF Qwen3-Next config (Qwen2MoeModel's keys, the
    gated delta net as ssm.*, full_attention_interval), with a tiny vocabulary and MLP (they size
    no cache), as plain values for ``gguf_file``."""
    heads, v_heads = hf["num_attention_heads"], hf["linear_num_value_heads"]
    return {
        "block_count": hf["num_hidden_layers"], "context_length": 4096, "embedding_length": hf["hidden_size"],
        "feed_forward_length": 64, "attention.head_count": heads, "attention.head_count_kv": hf["num_key_value_heads"],
        "attention.key_length": hf["head_dim"], "attention.value_length": hf["head_dim"],
        "rope.dimension_count": hf["head_dim"] // 4, "attention.layer_norm_rms_epsilon": 1e-6,
        "vocab_size": 32, "tokenizer.ggml.model": "none", "expert_count": 4, "expert_used_count": 2,
        "expert_feed_forward_length": 32, "expert_shared_feed_forward_length": 32,
        "ssm.conv_kernel": hf["linear_conv_kernel_dim"], "ssm.state_size": hf["linear_key_head_dim"],
        "ssm.group_count": hf["linear_num_key_heads"], "ssm.time_step_rank": v_heads,
        "ssm.inner_size": hf["linear_value_head_dim"] * v_heads,
        "full_attention_interval": hf.get("full_attention_interval", 4),
    }  # fmt: skip


# A small Qwen3-Next: 8 layers, 4 heads (2 KV) of 64, 2 key heads and 4 value heads of 32, conv 4.
SMALL_NEXT = {
    "num_hidden_layers": 8, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_value_head_dim": 32,
}  # fmt: skip


def nemotron_h_keys(hf: dict[str, Any]) -> dict[str, Any]:
    """NemotronHModel.set_gguf_parameters (GraniteHybridModel's Mamba-2 keys, head_count_kv and
    feed_forward_length per layer, key/value_length the attention head dim) for an HF Nemotron-H
    config; tiny vocabulary and MLP widths (they size no cache)."""
    pattern = hf["hybrid_override_pattern"]
    heads = hf["mamba_num_heads"]
    return {
        "block_count": len(pattern), "context_length": 4096, "embedding_length": hf["hidden_size"],
        "attention.head_count": hf["num_attention_heads"],
        "attention.head_count_kv": [hf["num_key_value_heads"] if c == "*" else 0 for c in pattern],
        "feed_forward_length": [64 if c == "-" else 0 for c in pattern],
        "attention.key_length": hf["attention_head_dim"], "attention.value_length": hf["attention_head_dim"],
        "attention.layer_norm_epsilon": 1e-5, **TINY,
        "ssm.conv_kernel": hf["conv_kernel"], "ssm.state_size": hf["ssm_state_size"],
        "ssm.group_count": hf["n_groups"], "ssm.time_step_rank": heads, "ssm.inner_size": heads * hf["mamba_head_dim"],
    }  # fmt: skip


# A small Nemotron-H: 9 layers (Mamba-2 M, attention *, MLP -), 8 SSM heads of 64, state 32, 2 groups.
SMALL_NH = {
    "hybrid_override_pattern": "M-M*-M-M*", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
    "attention_head_dim": 64, "mamba_num_heads": 8, "mamba_head_dim": 64, "n_groups": 2, "ssm_state_size": 32,
    "conv_kernel": 4,
}  # fmt: skip


def falcon_h1_keys(hf: dict[str, Any]) -> dict[str, Any]:
    """FalconH1Model.set_gguf_parameters (Mamba2Model's keys: ssm.inner_size mamba_d_ssm,
    ssm.time_step_rank d_inner / head dim; a scalar head_count_kv, key/value_length head_dim) for
    an HF Falcon-H1 config; tiny vocabulary and MLP (they size no cache)."""
    inner = hf["mamba_d_ssm"]
    return {
        "block_count": hf["num_hidden_layers"], "context_length": 4096, "embedding_length": hf["hidden_size"],
        "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
        "attention.head_count_kv": hf["num_key_value_heads"], "attention.key_length": hf["head_dim"],
        "attention.value_length": hf["head_dim"], **TINY, "ssm.conv_kernel": hf["mamba_d_conv"],
        "ssm.state_size": hf["mamba_d_state"], "ssm.group_count": hf["mamba_n_groups"],
        "ssm.time_step_rank": inner // hf["mamba_d_head"], "ssm.inner_size": inner,
    }  # fmt: skip


# A small Falcon-H1: 3 layers, 4 heads (2 KV) of 64, SSM 512 wide in 8 heads of 64, state 32, 1 group.
SMALL_FH = {
    "num_hidden_layers": 3, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "mamba_d_ssm": 512, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 32, "mamba_d_conv": 4,
}  # fmt: skip


def kimi_keys(hf: dict[str, Any]) -> dict[str, Any]:
    """KimiLinearModel.set_gguf_parameters: head_count_kv 1 (MQA over the latent) on the 1-based
    full_attn_layers and 0 on the KDA layers, ssm.conv_kernel and kda.head_dim from
    linear_attn_config, MLA as deepseek2 (key_length kv_lora_rank + rope, *_mla the decompressed dims)."""
    sub = hf["linear_attn_config"]
    rank, rope = hf["kv_lora_rank"], hf["qk_rope_head_dim"]
    layers = hf["num_hidden_layers"]
    return {
        "block_count": layers, "context_length": 4096, "embedding_length": hf["hidden_size"],
        "feed_forward_length": 64, "attention.head_count": hf["num_attention_heads"],
        "attention.head_count_kv": [1 if i + 1 in sub["full_attn_layers"] else 0 for i in range(layers)],
        "ssm.conv_kernel": sub["short_conv_kernel_size"], "kda.head_dim": sub["head_dim"],
        "attention.kv_lora_rank": rank, "rope.dimension_count": rope, "attention.key_length": rank + rope,
        "attention.key_length_mla": hf["qk_nope_head_dim"] + rope, "attention.value_length_mla": hf["v_head_dim"],
        **TINY, "expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32,
        "expert_shared_count": 1, "leading_dense_block_count": 1, "expert_weights_scale": 2.5,
        "expert_gating_func": 2,
    }  # fmt: skip


SMALL_KIMI = {
    "num_hidden_layers": 6, "hidden_size": 256, "num_attention_heads": 4, "kv_lora_rank": 64,
    "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32,
    "linear_attn_config": {"full_attn_layers": [3, 6], "kda_layers": [1, 2, 4, 5], "head_dim": 32,
                           "short_conv_kernel_size": 4},
}  # fmt: skip


# --- sparse attention with an indexer key cache (plain values) ------------------------------------


# MoE widths too small to matter; sigmoid gating (LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID = 2), which
# deepseek32's and minimax-m3's loaders require.
MOE = {"expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 32, "expert_gating_func": 2}


def dsa_keys(hf: dict[str, Any], arch: str) -> dict[str, Any]:
    """DeepseekV2Model.set_gguf_parameters (head_count_kv 1: MQA over the latent; key_length
    kv_lora_rank + rope, value_length kv_lora_rank, *_mla the decompressed dims), then
    DeepseekV32Model's / GlmMoeDsaModel's indexer keys; GlmMoeDsaModel writes indexer.types only
    when the config lists indexer_types. NextN layers left out (no nextn_predict_layers)."""
    rank, rope = hf["kv_lora_rank"], hf["qk_rope_head_dim"]
    keys = {
        "block_count": hf["num_hidden_layers"], "context_length": hf["max_position_embeddings"],
        "embedding_length": hf["hidden_size"], "feed_forward_length": 64,
        "attention.head_count": hf["num_attention_heads"], "attention.head_count_kv": 1,
        "attention.key_length": rank + rope, "attention.value_length": rank,
        "attention.key_length_mla": hf["qk_nope_head_dim"] + rope, "attention.value_length_mla": hf["v_head_dim"],
        "attention.q_lora_rank": hf["q_lora_rank"], "attention.kv_lora_rank": rank, "rope.dimension_count": rope,
        **TINY, **MOE, "expert_shared_count": 1, "leading_dense_block_count": 1,
        "attention.indexer.head_count": hf["index_n_heads"], "attention.indexer.key_length": hf["index_head_dim"],
        "attention.indexer.top_k": hf["index_topk"],
    }  # fmt: skip
    if arch == "glm-dsa" and "indexer_types" in hf:
        keys["attention.indexer.types"] = [t == "full" for t in hf["indexer_types"]]
    return keys


def minimax_keys(hf: dict[str, Any], arch: str) -> dict[str, Any]:
    """MiniMaxM2Model.set_gguf_parameters (TextModel's keys, key_length = value_length = head_dim,
    rope.dimension_count rotary_dim), and for minimax-m3 MiniMaxM3Model's: the indexer keys from
    sparse_attention_config and leading_dense_block_count, moe_layer_freq's leading zeros."""
    head_dim = hf["head_dim"]
    keys = {
        "block_count": hf["num_hidden_layers"], "context_length": hf["max_position_embeddings"],
        "embedding_length": hf["hidden_size"], "feed_forward_length": 64,
        "attention.head_count": hf["num_attention_heads"], "attention.head_count_kv": hf["num_key_value_heads"],
        "attention.key_length": head_dim, "attention.value_length": head_dim,
        "rope.dimension_count": hf.get("rotary_dim", head_dim // 2), **TINY, **MOE,
    }  # fmt: skip
    if arch == "minimax-m3":
        sac = hf["sparse_attention_config"]
        freq = hf["moe_layer_freq"]
        keys.update({
            "expert_shared_count": 1, "expert_weights_scale": 2.0, "expert_weights_norm": True,
            "leading_dense_block_count": next((i for i, v in enumerate(freq) if v), len(freq)),
            "attention.indexer.head_count": sac["sparse_num_index_heads"],
            "attention.indexer.key_length": sac["sparse_index_dim"],
            "attention.indexer.top_k": sac["sparse_topk_blocks"],
            "attention.indexer.block_size": sac["sparse_block_size"],
            "attention.indexer.local_blocks": sac["sparse_local_block"],
        })  # fmt: skip
    return keys


# Tiny geometries. llama.cpp's indexer cache rotates its keys by a Hadamard matrix of the largest
# power of two (at least 64) dividing the key width (src/llama-kv-cache.cpp build_input_k_rot), which
# the graph multiplies them by: an indexer key of 128, as the real models, keeps that square.
SMALL_DSA = {
    "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "kv_lora_rank": 128, "q_lora_rank": 64,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 32, "v_head_dim": 32, "index_head_dim": 128, "index_n_heads": 2,
    "index_topk": 16, "max_position_embeddings": 4096,
}  # fmt: skip
SMALL_M3 = {
    "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "max_position_embeddings": 4096, "moe_layer_freq": [0, 1, 1, 1],
    "sparse_attention_config": {"sparse_index_dim": 128, "sparse_num_index_heads": 2, "sparse_topk_blocks": 4,
                                "sparse_block_size": 16, "sparse_local_block": 1},
}  # fmt: skip
