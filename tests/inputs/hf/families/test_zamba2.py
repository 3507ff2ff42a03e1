"""Zamba2 (kvcalc.inputs.hf.families.zamba2): a Mamba-2 mixer in every layer, plus K/V of a shared
transformer block in its hybrid layers, each number derived by hand next to it; and both hybrids
(Falcon-H1 beside it) split across pipeline stages and counted by vLLM.

Sources: the docstring of tests/helpers/hybrid_families.py (shared with the module's sibling)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.engines import VLLM, make_engine
from kvcalc.engines.vllm.capacity import vllm_plan
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, ModelSpec, StateCache
from tests.conftest import fixture_config
from tests.helpers.hybrid_families import _bytes, _probe
from tests.helpers.theoretical import estimate

ZAMBA_STANDALONE = "zyphra-Zamba2/config.json"


ZAMBA_HYBRID_LAYERS = [6, 12, 18, 24, 30, 36, 42, 47, 51]


def _zamba() -> ModelSpec:
    return read_config(copy.deepcopy(load_presets()["zamba2-2.7b"].config), name="zamba2-2.7b")


def test_zamba2_by_hand() -> None:
    # 54 layers, each with a Mamba-2 mixer; the 9 hybrid ones (6, 12, ..., 42, 47, 51) also run a shared
    # transformer block whose K/V are cached per hybrid layer: 54 state entries, then 9 attention ones.
    spec = _zamba()
    assert spec.layers == 54 and len(spec.caches) == 63 and spec.query_heads == 32
    assert spec.entry_layers == (*range(54), *ZAMBA_HYBRID_LAYERS)
    state, attention = spec.caches[0], spec.caches[54]
    assert isinstance(state, StateCache) and isinstance(attention, AttentionCache)
    # attention_hidden_size = 2 x 2560 = 5,120 over 32 heads: head_dim 160, 32 KV heads.
    assert (attention.kv_heads, attention.k_head_dim) == (32, 2 * 2560 // 32) == (32, 160)
    # Mamba-2: intermediate 2 x 2560 = 5,120; conv 5,120 + 2 x 1 x 64 = 5,248 channels, kernel 4;
    # SSM state 80 heads x (5,120 / 80 = 64) x 64 = 327,680 elements.
    assert (state.conv_channels, state.conv_kernel, state.recurrent_elements) == (5_248, 4, 80 * 64 * 64)
    est = estimate(spec, Workload(tokens=4096))
    # Attention: 9 layers x 2 x 32 x 160 x 2 B = 184,320 B per token.
    assert est.per_token_bytes == 9 * 2 * 32 * 160 * 2 == 184_320
    # State: (5,248 x 3 + 327,680) x 2 B = 686,848 B per layer; x 54 = 37,089,792 B per sequence.
    assert est.fixed_bytes_per_sequence == 54 * (5_248 * 3 + 327_680) * 2 == 37_089_792
    assert est.total_bytes == 4096 * 184_320 + 37_089_792 == 792_064_512
    assert spec.warnings == () and len(spec.notes) == 1 and "9 hybrid layers" in spec.notes[0]


def test_zamba2_engines_by_hand() -> None:
    spec = _zamba()
    # transformers: conv 5,248 x 4 x 2 B = 41,984, SSM float32 327,680 x 4 = 1,310,720: 1,352,704 x 54.
    assert _bytes(spec, "transformers") == (184_320, 54 * (5_248 * 4 * 2 + 327_680 * 4)) == (184_320, 73_046_016)
    # vLLM: kernel - 1 columns, both in bf16: 686,848 B a layer, x 54 = 37,089,792; its hybrid layout
    # grows the attention pages (2 x 32 x 160 x 2 B = 20,480 B a token) in steps of 16 tokens until
    # one holds a state: 16 x cdiv(686,848, 327,680) = 48 tokens, 983,040 B, a page each state takes
    # (54 mamba layers in 6 groups of 9, none empty): 54 x 983,040 = 53,084,160.
    spec_est = estimate(spec, Workload(tokens=4096), engine=make_engine("vllm")[0])
    own = sum(g.layers * sum(n * d.bytes_per_element for n, d in g.state_parts) for g in spec_est.groups)
    assert own == 37_089_792
    assert _bytes(spec, "vllm") == (184_320, 54 * 48 * 20_480) == (184_320, 53_084_160)
    # Neither SGLang nor llama.cpp runs Zamba2 at all.
    with pytest.raises(UsageError, match="SGLang has no zamba2"):
        _bytes(spec, "sglang")
    with pytest.raises(UsageError, match=r"llama\.cpp has no zamba2"):
        _bytes(spec, "llama.cpp")


def test_zamba2_preset_agrees_with_zyphras_own_config() -> None:
    # Zyphra's standalone config.json (tests/fixtures) uses its own field names; renamed to Zamba2Config's:
    # layer_mapping "g" (shared transformer) = "hybrid", num_mem_heads = the shared block's heads,
    # state_size = mamba_d_state, conv_dimension = mamba_d_conv, expansion_factor = mamba_expand, and
    # n_mamba_heads = 2 x 2560 / mamba_headdim 64 (Zyphra's mamba_config.py default) = 80.
    zyphra = fixture_config(ZAMBA_STANDALONE)
    preset = load_presets()["zamba2-2.7b"].config
    blocks = ["hybrid" if m == "g" else "mamba" for m in zyphra["layer_mapping"]]
    assert preset["layers_block_type"] == blocks
    assert [i for i, b in enumerate(blocks) if b == "hybrid"] == ZAMBA_HYBRID_LAYERS
    assert (preset["num_hidden_layers"], preset["hidden_size"]) == (zyphra["num_layers"], zyphra["hidden_size"])
    assert preset["num_attention_heads"] == zyphra["num_mem_heads"] == zyphra["num_attention_heads"] == 32
    assert (preset["mamba_d_state"], preset["mamba_d_conv"]) == (zyphra["state_size"], zyphra["conv_dimension"])
    assert preset["mamba_expand"] == zyphra["expansion_factor"] == 2
    assert preset["n_mamba_heads"] == zyphra["expansion_factor"] * zyphra["hidden_size"] // 64 == 80
    assert preset["num_mem_blocks"] == zyphra["num_mem_blocks"] == 2
    # The standalone file itself is not a Hugging Face config: it names no model_type.
    with pytest.raises(ConfigError, match="model_type"):
        read_config(zyphra, name="zyphra-standalone")


def test_zamba2_file_values_win_over_derived_ones() -> None:
    base = copy.deepcopy(load_presets()["zamba2-2.7b"].config)
    # Zamba2Config keeps attention_head_dim (alias head_dim) from the file: 128 instead of 160.
    narrow = read_config({**base, "attention_head_dim": 128}, name="narrow")
    assert isinstance(narrow.caches[-1], AttentionCache) and narrow.caches[-1].k_head_dim == 128
    # The derived values themselves may be in the file (the Hub files carry them): nothing changes.
    derived = {"attention_head_dim": 160, "attention_hidden_size": 5120, "mamba_headdim": 64,
               "hybrid_layer_ids": ZAMBA_HYBRID_LAYERS, "kv_channels": 80, "num_query_groups": 32}  # fmt: skip
    assert read_config({**base, **derived}, name="derived").caches == _zamba().caches
    # Without layers_block_type: Zamba2Config's default of 54 layers, the same 9 hybrid ones (noted).
    default = read_config({k: v for k, v in base.items() if k != "layers_block_type"}, name="default")
    assert default.caches == _zamba().caches and any("default of 54 layers" in n for n in default.notes)
    # Fewer KV heads than query heads: transformers caches them, vLLM all 32 (noted).
    grouped = read_config({**base, "num_key_value_heads": 8}, name="grouped")
    assert isinstance(grouped.caches[-1], AttentionCache) and grouped.caches[-1].kv_heads == 8
    assert any("vLLM" in n for n in grouped.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"layers_block_type": ["mamba", "attention"]}, "layers_block_type"),
        ({"layers_block_type": []}, "layers_block_type"),
        ({"hybrid_layer_ids": [6, 12]}, "hybrid_layer_ids"),
        ({"attention_hidden_size": 2560}, "attention_hidden_size"),
        ({"mamba_headdim": 32}, "mamba_headdim"),
        ({"n_mamba_heads": 3}, "n_mamba_heads"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
    ],
)
def test_zamba2_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config({**copy.deepcopy(load_presets()["zamba2-2.7b"].config), **change}, name="bad")


def test_pipeline_stages_keep_both_entries_of_a_layer() -> None:
    falcon = read_config(copy.deepcopy(load_presets()["falcon-h1-7b"].config), name="falcon-h1-7b")
    # Per layer at 4,096 tokens: 4,096 x 1,024 B (K/V) + 1,594,368 B (state) = 5,788,672 B.
    # --pp 2: 22 layers a stage -> 22 x 5,788,672 = 127,350,784 B per GPU, 22 x 1,024 B per token.
    two = estimate(falcon, Workload(tokens=4096, pp=2))
    assert (two.per_gpu_bytes, two.per_gpu_token_bytes) == (22 * 5_788_672, 22 * 1_024) == (127_350_784, 22_528)
    # --pp 3: vLLM's get_pp_indices gives 15, 15, 14 layers -> 15 x 5,788,672 = 86,830,080.
    assert estimate(falcon, Workload(tokens=4096, pp=3)).per_gpu_bytes == 15 * 5_788_672 == 86_830_080
    # Zamba2 --pp 2: layers 0-26 (hybrids 6, 12, 18, 24) and 27-53 (30, 36, 42, 47, 51); the second stage
    # holds 27 states x 686,848 + 5 x 4,096 x 20,480 B = 18,544,896 + 419,430,400 = 437,975,296.
    zamba = estimate(_zamba(), Workload(tokens=4096, pp=2))
    assert (zamba.per_gpu_bytes, zamba.per_gpu_token_bytes) == (437_975_296, 5 * 20_480)


def test_vllm_counts_an_attention_and_a_mamba_layer_for_each() -> None:
    # vLLM registers an Attention and a MambaMixer2 per Falcon-H1 layer (44 + 44), and for Zamba2 a
    # MambaMixer2 per layer and an Attention per hybrid layer (54 + 9).
    engine = VLLM()
    falcon = read_config(copy.deepcopy(load_presets()["falcon-h1-7b"].config), name="falcon-h1-7b")
    plan = vllm_plan(falcon, Workload(tokens=4096), engine, 40 * 2**30)
    assert {k.kind: k.layers for k in plan.kinds} == {"full": 44, "mamba": 44}
    plan = vllm_plan(_zamba(), Workload(tokens=4096), engine, 40 * 2**30)
    assert {k.kind: k.layers for k in plan.kinds} == {"mamba": 54, "full": 9}


def test_probe_zamba2_matches_byte_for_byte(run_cli) -> None:
    # bf16: K/V 9 x 300 x 2 x 32 x 160 x 2 = 55,296,000; states 54 x 1,352,704 = 73,046,016 (the
    # transformers figures above). The shrunk model keeps layer 0 (mamba) and layer 6 (hybrid).
    data = _probe(run_cli, "zamba2-2.7b")
    assert data["match"] is True
    assert data["measured_bytes"] == data["estimated_bytes"] == 55_296_000 + 73_046_016
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {"mamba": (54, 73_046_016, 73_046_016), "full_attention": (9, 55_296_000, 55_296_000)}


def test_zamba2_hub_style_key_set_reads_without_warnings() -> None:
    # The keys transformers' Zamba2Config writes (it saves the derived ones too), on the 2.7B geometry.
    hub_style = {
        **copy.deepcopy(load_presets()["zamba2-2.7b"].config),
        "architectures": ["Zamba2ForCausalLM"], "add_bias_linear": False, "adapter_rank": 128,
        "attention_dropout": 0.0, "attention_head_dim": 160, "attention_hidden_size": 5120, "chunk_size": 256,
        "hidden_act": "gelu", "hybrid_layer_ids": ZAMBA_HYBRID_LAYERS, "intermediate_size": 10240,
        "kv_channels": 80, "mamba_headdim": 64, "num_logits_to_keep": 1, "num_query_groups": 32,
        "rms_norm_eps": 1e-05, "rope_theta": 10000, "time_step_floor": 0.0001, "time_step_max": 0.1,
        "time_step_min": 0.001, "use_conv_bias": True, "use_long_context": False, "use_mamba_kernels": True,
        "use_mem_eff_path": False, "use_mem_rope": False, "use_shared_attention_adapter": False,
        "use_shared_mlp_adapter": True, "vocab_size": 32000,
    }  # fmt: skip
    spec = read_config(hub_style, name="zamba2-2.7b")
    assert spec.warnings == () and spec.caches == _zamba().caches
