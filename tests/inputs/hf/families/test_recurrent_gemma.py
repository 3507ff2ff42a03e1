"""RecurrentGemma (Griffin's RG-LRU with local attention): each number derived by hand beside it.

Sources (transformers 5.24): models/recurrent_gemma/configuration_recurrent_gemma.py
(layers_block_type repeats block_types; head_dim = hidden_size // num_attention_heads; lru_width
defaults to hidden_size) and modeling_recurrent_gemma.py (conv1d_state keeps conv1d_width - 1 inputs
in the model dtype, rg_lru.recurrent_states one lru_width vector in float32)."""

from __future__ import annotations

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind, StateCache
from tests.conftest import fixture_config
from tests.helpers.state_families import GRIFFIN
from tests.helpers.theoretical import estimate


def test_griffin_layers_by_hand() -> None:
    spec = read_config(GRIFFIN, name="griffin")
    # block_types repeated: layer i is attention when i % 3 == 2: 2, 5, ..., 23 (8 layers); 18 RG-LRU.
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.SLIDING] == list(range(2, 26, 3))
    assert sum(c.kind is Kind.RG_LRU for c in spec.caches) == 18
    state = spec.caches[0]
    assert isinstance(state, StateCache)
    assert (state.conv_channels, state.conv_kernel, state.recurrent_elements) == (2560, 4, 2560)
    assert spec.warnings == () and spec.notes == ()


def test_griffin_estimates_by_hand() -> None:
    spec = read_config(GRIFFIN, name="griffin")
    # Theoretical at 4,096 tokens: each local layer keeps the 2,048-token window, K and V of
    # 1 head x 256 (2560 / 10) in bf16: 2,048 x 2 x 256 x 2 B = 2,097,152 B; x 8 = 16,777,216.
    # Each RG-LRU layer: 3 x 2,560 conv inputs + 2,560 recurrent, in bf16: 20,480 B; x 18 = 368,640.
    est = estimate(spec, Workload(tokens=4096))
    assert est.total_bytes == 16_777_216 + 368_640 == 17_145_856
    # transformers: the window keeps W - 1 = 2,047 tokens between steps (8 x 2,047 x 1,024 B =
    # 16,769,024), and the recurrent state is float32: 3 x 2,560 x 2 + 2,560 x 4 = 25,600 B; x 18.
    engine, _ = make_engine("transformers")
    est = estimate(spec, Workload(tokens=4096), engine=engine)
    assert est.total_bytes == 16_769_024 + 460_800 == 17_229_824


def test_griffin_block_types_are_checked() -> None:
    with pytest.raises(ConfigError, match="block_types"):
        read_config({**GRIFFIN, "block_types": ["recurrent", "mlp"]}, name="bad")


def test_griffin_pattern_saved_as_underscored_block_types() -> None:
    # transformers 4.40-4.4x saved RecurrentGemmaConfig's pattern as "_block_types" (the published
    # google/recurrentgemma-2b config.json, tests/fixtures/recurrentgemma-2b.json): it is read, so a
    # pattern unlike the default changes the layers.
    config = {k: v for k, v in GRIFFIN.items() if k != "block_types"}
    spec = read_config({**config, "_block_types": ["attention", "recurrent"]}, name="saved")
    assert [i for i, c in enumerate(spec.caches) if c.kind is Kind.SLIDING] == list(range(0, 26, 2))
    assert not spec.notes or all("block_types" not in n for n in spec.notes)
    real = read_config(fixture_config("recurrentgemma-2b.json"), name="real")
    assert [i for i, c in enumerate(real.caches) if c.kind is Kind.SLIDING] == list(range(2, 26, 3))
