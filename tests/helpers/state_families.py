"""The state families every engine but transformers refuses, shared by their family tests
(tests/inputs/hf/families/test_recurrent_gemma.py, test_minimax.py) and the engines' refusal
(tests/engines/test_base.py)."""

from __future__ import annotations

from typing import Any

# RecurrentGemma-2B's geometry (google/recurrentgemma-2b): 26 layers, hidden 2560, 10 heads, 1 KV head.
GRIFFIN: dict[str, Any] = {
    "model_type": "recurrent_gemma", "torch_dtype": "bfloat16", "num_hidden_layers": 26, "hidden_size": 2560,
    "num_attention_heads": 10, "num_key_value_heads": 1, "lru_width": 2560, "attention_window_size": 2048,
    "conv1d_width": 4, "block_types": ["recurrent", "recurrent", "attention"],
}  # fmt: skip


# MiniMaxConfig's defaults (transformers 5.24): 32 layers, hidden 4096, 32 heads, 8 KV heads.
MINIMAX: dict[str, Any] = {
    "model_type": "minimax", "torch_dtype": "bfloat16", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "layer_types": ["full_attention" if i % 2 == 0 else "linear_attention" for i in range(32)],
    "block_size": 256, "full_attn_alpha_factor": 1, "linear_attn_beta_factor": 1,
}  # fmt: skip
