"""RecurrentGemma (Griffin's RG-LRU with local attention), MiniMax's lightning attention chosen per
layer, and LongCat-Flash's two MLA sublayers per decoder layer: each number derived by hand beside it.

Sources (transformers 5.24): models/recurrent_gemma/configuration_recurrent_gemma.py
(layers_block_type repeats block_types; head_dim = hidden_size // num_attention_heads; lru_width
defaults to hidden_size) and modeling_recurrent_gemma.py (conv1d_state keeps conv1d_width - 1 inputs
in the model dtype, rg_lru.recurrent_states one lru_width vector in float32);
models/minimax/configuration_minimax.py (layer_types default: full, linear, full, ...) and
modeling_minimax.py (MiniMaxCache.linear_cache: batch x heads x head_dim x head_dim in the values'
dtype); models/longcat_flash/modeling_longcat_flash.py (two LongcatFlashMLA per decoder layer,
cache layers 2i and 2i + 1). vLLM's ModelConfig.get_num_layers counts a MiniMax attn_type_list's 1s
as its attention layers."""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind, StateCache
from tests.conftest import fixture_config
from tests.helpers.theoretical import estimate

# RecurrentGemma-2B's geometry (google/recurrentgemma-2b): 26 layers, hidden 2560, 10 heads, 1 KV head.
GRIFFIN: dict[str, Any] = {
    "model_type": "recurrent_gemma", "torch_dtype": "bfloat16", "num_hidden_layers": 26, "hidden_size": 2560,
    "num_attention_heads": 10, "num_key_value_heads": 1, "lru_width": 2560, "attention_window_size": 2048,
    "conv1d_width": 4, "block_types": ["recurrent", "recurrent", "attention"],
}  # fmt: skip


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


# MiniMaxConfig's defaults (transformers 5.24): 32 layers, hidden 4096, 32 heads, 8 KV heads.
MINIMAX: dict[str, Any] = {
    "model_type": "minimax", "torch_dtype": "bfloat16", "num_hidden_layers": 32, "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "layer_types": ["full_attention" if i % 2 == 0 else "linear_attention" for i in range(32)],
    "block_size": 256, "full_attn_alpha_factor": 1, "linear_attn_beta_factor": 1,
}  # fmt: skip


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


@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "llama.cpp", "mlx"])
def test_engines_refuse_state_families_they_were_not_checked_for(engine_name: str) -> None:
    engine, _ = make_engine(engine_name)
    for config, short in ((MINIMAX, "lightning"), (GRIFFIN, "rg-lru")):
        with pytest.raises(UsageError, match=short):
            estimate(read_config(config, name="m"), Workload(tokens=100), engine=engine)


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


# Cross-layer attention (Hunyuan-Large's remote code, modeling_hunyuan.py: with use_cla, layer i
# computes K/V when i % cla_share_factor == 0 and the next layers reuse them).
HUNYUAN_CLA: dict[str, Any] = {
    "model_type": "hunyuan", "torch_dtype": "bfloat16", "num_hidden_layers": 64, "hidden_size": 6400,
    "num_attention_heads": 80, "num_key_value_heads": 8, "head_dim": 128, "use_cla": True, "cla_share_factor": 2,
}  # fmt: skip


def test_cross_layer_attention_caches_one_layer_in_each_group() -> None:
    spec = read_config(HUNYUAN_CLA, name="cla")
    # 32 of the 64 layers cache K and V: 32 x 2 x 8 x 128 x 2 B = 131,072 B per token.
    assert sum(c.kind is Kind.SHARED for c in spec.caches) == 32
    assert estimate(spec, Workload(tokens=1)).per_token_bytes == 131_072
    # Without use_cla every layer caches its own: twice that, and the factor decides nothing.
    plain = read_config({**HUNYUAN_CLA, "use_cla": False}, name="plain")
    assert estimate(plain, Workload(tokens=1)).per_token_bytes == 262_144 and plain.warnings == ()


def test_cla_fields_nobody_reads_are_named() -> None:
    # A family module that does not go through the generic entries: the guard names use_cla.
    from kvcalc.inputs.hf.guard import shaping_reason

    assert shaping_reason("use_cla") == "cross-layer KV sharing"
    assert shaping_reason("cla_share_factor") in ("cross-layer KV sharing", "KV sharing")


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
