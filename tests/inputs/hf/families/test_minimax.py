"""MiniMax's lightning attention chosen per layer: each number derived by hand beside it.

Sources (transformers 5.24): models/minimax/configuration_minimax.py (layer_types default: full,
linear, full, ...) and modeling_minimax.py (MiniMaxCache.linear_cache: batch x heads x head_dim x
head_dim in the values' dtype). vLLM's ModelConfig.get_num_layers counts a MiniMax attn_type_list's
1s as its attention layers."""

from __future__ import annotations

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind
from tests.helpers.state_families import MINIMAX
from tests.helpers.theoretical import estimate


def test_minimax_lightning_by_hand() -> None:
    spec = read_config(MINIMAX, name="minimax")
    assert sum(c.kind is Kind.LIGHTNING for c in spec.caches) == 16
    # Softmax layers: 16 x 1,000 tokens x 2 x 8 x 128 x 2 B = 65,536,000.
    # Lightning layers: 32 heads x 128 x 128 x 2 B = 1,048,576 per layer; x 16 = 16,777,216.
    for engine_name in ("theoretical", "transformers"):
        engine, _ = make_engine(engine_name)
        est = estimate(spec, Workload(tokens=1000, kv_dtype=BF16), engine=engine)
        assert est.total_bytes == 65_536_000 + 16_777_216, engine_name
    assert spec.warnings == ()


def test_minimax_remote_code_attn_type_list() -> None:
    # MiniMax-Text-01's own config: 1 = softmax attention, 0 = lightning.
    flags = [0, 0, 0, 1, 0, 0, 0, 1]
    config = {**MINIMAX, "model_type": "minimax_text_01", "num_hidden_layers": 8, "attn_type_list": flags}
    del config["layer_types"]
    spec = read_config(config, name="text-01")
    assert [c.kind is Kind.FULL for c in spec.caches] == [f == 1 for f in flags]
    with pytest.raises(ConfigError, match="attn_type_list"):
        read_config({**config, "attn_type_list": [0, 1]}, name="short")
