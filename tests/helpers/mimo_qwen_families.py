"""What the MiMo-V2-Flash, Qwen3.5 and Nemotron-H test modules share.

The sources, as the module these tests were split from gave them:

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

from pathlib import Path
from typing import Any

import pytest

from kvcalc.inputs.presets import load_presets


def _probe(run_cli: Any, path: Path) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(path), "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    return data


PRESETS = load_presets()
