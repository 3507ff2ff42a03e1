"""Nemotron-H (kvcalc.inputs.hf.families.nemotron_h): the 56B layout read from its real config.

From the module these tests were split from:

MiMo-V2-Flash / MiMo-V2.5 (sliding and full layers with their own KV heads, K 192 / V 128) and
Qwen3.5 (Gated DeltaNet + full attention) read from real configs; every number derived by hand next
to it.

Sources: transformers 5.24 models/mimo_v2_flash/configuration_mimo_v2_flash.py (MiMoV2FlashConfig:
layer_types, else full attention at layer 0 and every sixth layer; sliding_window =
sliding_window_size + 1) and modeling_mimo_v2_flash.py (MiMoV2FlashAttention: sliding layers have 2 x
num_key_value_heads, K head_dim and V v_head_dim; sinks join the softmax, nothing cached); vLLM
vllm/model_executor/models/mimo_v2_flash.py @ 01ed47b4 (MiMoV2FlashDecoderLayer: hybrid_layer_pattern
1 = sliding with swa_num_key_value_heads / swa_head_dim / swa_v_head_dim and window
sliding_window_size; attention_chunk_size unread); transformers 5.24 models/qwen3_5/ (Qwen3_5TextConfig:
layer_types, else full_attention_interval; Qwen3_5Attention: the output gate comes out of q_proj).
Real configs: tests/fixtures/MiMo-V2.5-Pro.json and Qwen3.5-0.8B.json (see fixtures/SOURCES.md);
MiMo-V2-Flash's own file was not found verbatim, so its preset is the config used here."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from kvcalc.calc.estimate import Workload, estimate
from kvcalc.engines import make_engine
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind
from tests.helpers.mimo_qwen_families import PRESETS, _probe

# Nemotron-H-56B by hand (bf16; the nemotron-h-56b preset): hybrid_override_pattern of 118 letters,
# 54 'M' (Mamba-2), 10 '*' (attention), 54 '-' (MLP).
#   attention: 10 layers x 2 x 8 KV heads x 128 x 2 B = 40,960 B per token.
#   Mamba-2: d_inner 256 heads x 64 = 16,384; conv over 16,384 + 2 x 8 groups x 256 = 20,480
#     channels, kernel - 1 = 3 kept: 61,440 x 2 B = 122,880 B; SSM 16,384 x 256 = 4,194,304
#     elements x 4 B (mamba_ssm_cache_dtype's float32 default) = 16,777,216 B; 16,900,096 B a
#     layer, x 54 = 912,605,184 B per sequence.
NEMOTRON_56B_FIXED = 54 * (61_440 * 2 + 4_194_304 * 4)


def test_nemotron_h_56b_by_hand() -> None:
    spec = read_config(copy.deepcopy(PRESETS["nemotron-h-56b"].config), name="nemotron-h-56b")
    kinds = [c.kind for c in spec.caches]
    assert spec.layers == 118
    assert (kinds.count(Kind.MAMBA), kinds.count(Kind.FULL), kinds.count(Kind.NONE)) == (54, 10, 54)
    assert spec.warnings == () and spec.notes == ()
    est = estimate(spec, Workload(tokens=8192))
    assert est.per_token_bytes == 40_960
    assert est.fixed_bytes_per_sequence == NEMOTRON_56B_FIXED == 912_605_184
    assert est.total_bytes == 8192 * 40_960 + 912_605_184 == 1_248_149_504
    # llama.cpp keeps both states in f32: 54 x (61,440 + 4,194,304) x 4 = 919,240,704.
    cpp, _ = make_engine("llamacpp")
    assert estimate(spec, Workload(tokens=8192), engine=cpp).fixed_bytes_per_sequence == 919_240_704


def test_probe_nemotron_h_56b_matches_byte_for_byte(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PRESETS["nemotron-h-56b"].config | {"architectures": ["NemotronHForCausalLM"]}))
    data = _probe(run_cli, path)
    assert data["match"] is True
    # transformers: the conv state spans the whole kernel (20,480 x 4 x 2 B = 163,840) and the SSM
    # state is float32: 54 x (163,840 + 16,777,216) = 914,817,024; attention 10 x 300 x 4,096.
    assert data["measured_bytes"] == data["estimated_bytes"] == 914_817_024 + 12_288_000 == 927_105_024
