"""Configs as transformers 5.24 saves them: ``SomeConfig(**fields).to_json_string()`` writes every
derived attribute (``layer_types`` lists, DeepSeek's ``head_dim`` / ``qk_head_dim``, MLP layouts),
which is what a user's ``save_pretrained`` checkpoint holds. Each must read exactly, with no false
warning. Numbers are derived by hand next to them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import Kind
from tests.helpers.theoretical import estimate

transformers = pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")


def _saved(class_name: str, **fields: Any) -> dict[str, Any]:
    config = getattr(transformers, class_name)(**fields)
    saved: dict[str, Any] = json.loads(config.to_json_string())
    return saved


def test_deepseek_v32_indexed_attention_layers() -> None:
    saved = _saved("DeepseekV32Config")
    # DeepseekV32Config.__post_init__ writes layer_types = ["indexed_attention"] x 61, plus head_dim
    # (= qk_rope_head_dim 64) and qk_head_dim (128 + 64 = 192), which size queries, not the latent.
    assert set(saved["layer_types"]) == {"indexed_attention"} and saved["qk_head_dim"] == 192
    spec = read_config(saved, name="v32")
    # 61 MLA layers of 512 + 64 and 61 indexer keys of 128; no dtype in the file: fp16 (noted).
    # 61 x (576 + 128) x 2 B = 85,888 B per token.
    assert sum(c.kind is Kind.MLA for c in spec.caches) == 61
    assert sum(c.kind is Kind.INDEXER for c in spec.caches) == 61
    assert estimate(spec, Workload(tokens=1000)).per_token_bytes == 61 * 704 * 2 == 85_888
    assert spec.warnings == ()


def test_granite_hybrid_default_is_all_mamba2() -> None:
    spec = read_config(_saved("GraniteMoeHybridConfig"), name="granite")
    # 32 Mamba-2 layers, no attention: d_inner = mamba_expand 2 x hidden 4096 = 8,192; conv over
    # 8,192 + 2 x 1 group x 256 = 8,704 channels x (4 - 1) = 26,112; SSM 128 heads x (8,192 / 128 =
    # 64) x 256 = 2,097,152. (26,112 + 2,097,152) x 2 B = 4,246,528 B a layer; x 32 = 135,888,896.
    est = estimate(spec, Workload(tokens=1000))
    assert est.per_token_bytes == 0
    assert est.fixed_bytes_per_sequence == 32 * 4_246_528 == 135_888_896
    assert spec.warnings == ()  # the attention fields size nothing without attention layers


def test_lfm2_with_attention_everywhere_reads_no_conv_fields() -> None:
    spec = read_config(_saved("Lfm2Config"), name="lfm2")
    # Lfm2Config(): full_attn_idxs = every layer. 32 layers x 2 x 8 KV heads x (2,560 / 32 = 80)
    # x 2 B = 81,920 B per token; conv_L_cache sizes nothing.
    assert estimate(spec, Workload(tokens=1000)).per_token_bytes == 32 * 2 * 8 * 80 * 2 == 81_920
    assert spec.warnings == ()


def test_lfm2_moe_short_convolutions() -> None:
    kinds = ["conv", "conv", "full_attention", "conv", "conv", "full_attention"]
    spec = read_config(_saved("Lfm2MoeConfig", num_hidden_layers=6, layer_types=kinds), name="lfm2-moe")
    # Attention: 2 layers x 2 x 8 KV heads x (2,048 / 32 = 64) x 2 B = 4,096 B per token.
    # Short conv: 4 layers x 2,048 channels x (3 - 1) x 2 B = 32,768 B per sequence.
    est = estimate(spec, Workload(tokens=1000))
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (4_096, 32_768)
    assert spec.warnings == ()  # num_dense_layers sizes MLPs


def test_lfm2_moe_needs_its_layer_list() -> None:
    with pytest.raises(ConfigError, match="'layer_types' is missing: an lfm2_moe config"):
        read_config(_saved("Lfm2MoeConfig"), name="lfm2-moe")


@pytest.mark.parametrize(
    "class_name",
    ["FalconH1Config", "Zamba2Config", "KimiLinearConfig", "MllamaConfig", "DeepseekV4Config", "GlmMoeDsaConfig",
     "MiniMaxM3VLConfig", "MiMoV2FlashConfig", "Qwen3_5Config", "Qwen3_5MoeConfig", "NemotronHConfig", "Gemma4Config"],
)  # fmt: skip
def test_class_defaults_raise_no_false_alarm(class_name: str) -> None:
    assert read_config(_saved(class_name), name=class_name).warnings == ()


def test_qwen2_saved_with_layer_types_and_the_fields_that_derived_it() -> None:
    saved = _saved("Qwen2Config")
    # Saved with layer_types (32 x full_attention) and max_window_layers 28, which only derives the
    # list when it is absent. 32 layers x 2 x 32 KV heads x (4,096 / 32 = 128) x 2 B = 524,288 B.
    assert saved["layer_types"] == ["full_attention"] * 32 and saved["max_window_layers"] == 28
    spec = read_config(saved, name="qwen2")
    assert estimate(spec, Workload(tokens=1000)).per_token_bytes == 32 * 2 * 32 * 128 * 2 == 524_288
    assert spec.warnings == ()


@pytest.mark.parametrize(
    "class_name",
    ["Qwen3Config", "Qwen2MoeConfig", "Exaone4Config", "FalconConfig", "GPT2Config", "GPTBigCodeConfig",
     "GraniteConfig", "Llama4TextConfig", "JambaConfig"],
)  # fmt: skip
def test_numerics_and_derivation_fields_raise_no_false_alarm(class_name: str) -> None:
    # Query/score scalings (attention_multiplier, scale_attn_weights, attn_scale), kernel choices
    # (use_mamba_kernels), a KV-head count an MQA flag overrides, and pattern fields beside an
    # explicit layer_types list: none changes what is cached.
    assert read_config(_saved(class_name), name=class_name).warnings == ()


def _bamba() -> dict[str, Any]:
    # Bamba (IBM) names its attention layers by index: ibm-ai-platform/Bamba-9B has 32 layers with
    # attention at 9, 18 and 27 (as quoted in public test code); a shorter stack keeps the probe fast.
    saved = _saved("BambaConfig", num_hidden_layers=8, attn_layer_indices=[3, 7])
    saved.pop("time_step_limit")  # saved as [0.0, inf], which JSON cannot hold and transformers then refuses
    return saved


def test_bamba_attention_by_index_and_mamba2_elsewhere() -> None:
    spec = read_config(_bamba(), name="bamba")
    assert [c.kind for c in spec.caches] == [Kind.MAMBA] * 3 + [Kind.FULL] + [Kind.MAMBA] * 3 + [Kind.FULL]
    # No dtype in the file: fp16 (noted). Attention: 2 layers x 2 x 8 KV heads x (4,096 / 32 = 128)
    # x 2 B = 8,192 B per token. Mamba-2: d_inner 2 x 4,096 = 8,192; conv (8,192 + 2 x 1 x 256) x
    # (4 - 1) = 26,112; SSM 128 heads x 64 x 256 = 2,097,152; (26,112 + 2,097,152) x 2 B x 6 layers
    # = 25,479,168 B per sequence.
    est = estimate(spec, Workload(tokens=1000))
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (8_192, 6 * 4_246_528)
    assert spec.warnings == ()
    # Without the list every layer is Mamba-2 (BambaConfig.layers_block_type), noted.
    no_list = {k: v for k, v in _bamba().items() if k != "attn_layer_indices"}
    spec = read_config(no_list, name="bamba")
    assert {c.kind for c in spec.caches} == {Kind.MAMBA} and any("attn_layer_indices" in n for n in spec.notes)
    with pytest.raises(ConfigError, match="'attn_layer_indices' must list layer indices below 8"):
        read_config({**_bamba(), "attn_layer_indices": [8]}, name="bamba")


def test_probe_bamba_matches(run_cli, tmp_path) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_bamba()))
    result = run_cli("probe", str(path), "--tokens", "100", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # The probe runs the dtype-less model in fp32 and keeps transformers' semantics (the whole conv
    # kernel, 4 x 8,704): 6 x (34,816 + 2,097,152) x 4 B + 100 tokens x 2 x 2 x 8 x 128 x 4 B
    # = 51,167,232 + 1,638,400 = 52,805,632 B.
    assert report["measured_bytes"] == report["estimated_bytes"] == 52_805_632


def test_mamba2_heads_cover_its_channels() -> None:
    saved = _saved("Mamba2Config")
    spec = read_config(saved, name="mamba2")
    # 64 layers; d_inner = 2 x 4,096 = 8,192 = 128 heads x 64; conv (8,192 + 2 x 8 groups x 128)
    # x (4 - 1) = 30,720; SSM 128 x 64 x 128 = 1,048,576; (30,720 + 1,048,576) x 2 B (fp16, noted)
    # x 64 = 138,149,888 B per sequence.
    assert estimate(spec, Workload(tokens=10)).fixed_bytes_per_sequence == 64 * 1_079_296 * 2 == 138_149_888
    assert spec.warnings == ()
    with pytest.raises(ConfigError, match=r"'num_heads' \(100\) x head_dim \(64\) must equal expand x hidden_size"):
        read_config({**saved, "num_heads": 100}, name="mamba2")


def test_a_window_with_no_sliding_layer_sizes_nothing() -> None:
    # dots.llm1 as saved: layer_types all full_attention beside a sliding_window value; the window
    # applies only to sliding layers (cache_utils.get_layer_types_and_kwargs), so it is not flagged.
    saved = _saved("Dots1Config")
    assert set(saved["layer_types"]) == {"full_attention"} and saved["sliding_window"]
    assert read_config(saved, name="dots1").warnings == ()
    # The same value beside a sliding layer is read: the first layer keeps that many tokens.
    layers = len(saved["layer_types"])
    spec = read_config({**saved, "layer_types": ["sliding_attention"] + ["full_attention"] * (layers - 1)}, name="d")
    assert spec.caches[0].token_bound == saved["sliding_window"]
