"""LongCat-Flash's two MLA sublayers per decoder layer: each number derived by hand beside it.

Source (transformers 5.24): models/longcat_flash/modeling_longcat_flash.py (two LongcatFlashMLA per
decoder layer, cache layers 2i and 2i + 1)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from tests.helpers.theoretical import estimate

LONGCAT: dict[str, Any] = {
    "model_type": "longcat_flash", "torch_dtype": "bfloat16", "num_layers": 28, "hidden_size": 6144,
    "num_attention_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128, "v_head_dim": 128,
}  # fmt: skip


def test_longcat_two_latents_per_layer() -> None:
    spec = read_config(LONGCAT, name="longcat")
    # 28 decoder layers x 2 MLA sublayers, each one latent of 512 + 64 per token:
    # 56 x 576 x 2 B = 64,512 B per token.
    assert spec.layers == 28 and len(spec.caches) == 56
    assert estimate(spec, Workload(tokens=1)).per_token_bytes == 64_512
    with pytest.raises(ConfigError, match="2 x num_layers"):
        read_config({**LONGCAT, "num_hidden_layers": 28}, name="bad")
