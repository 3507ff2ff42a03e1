"""Falcon-H1 (attention and a Mamba-2 mixer side by side in every layer) and Zamba2 (a Mamba-2 mixer in
every layer, plus K/V of a shared transformer block in its hybrid layers), each number derived by hand
next to it.

Sources:
- transformers 5.24 models/falcon_h1/configuration_falcon_h1.py (FalconH1Config: num_key_value_heads 8
  when absent, mamba_d_ssm 1024 when absent and mamba_expand x hidden_size when null, mamba_d_head
  "auto" = d_ssm // n_heads, validate_architecture: n_heads x d_head = d_ssm; layers_block_type is
  "hybrid" for every layer) and modeling_falcon_h1.py (FalconH1Attention: head_dim from the config else
  hidden // heads; FalconH1Mixer: conv_dim = d_ssm + 2 x n_groups x d_state, SSM state (n_heads, d_head,
  d_state)); models/zamba2/configuration_zamba2.py (Zamba2Config.__post_init__: attention_head_dim
  = 2 x hidden // heads, mamba_headdim = mamba_expand x hidden // n_mamba_heads, hybrid_layer_ids, the
  54-layer default, values in the file kept over the derived ones) and modeling_zamba2.py (the shared
  block's K/V are cached under each hybrid layer's own index); cache_utils.py ("hybrid" ->
  LinearAttentionAndFullAttentionLayer: K/V plus the conv state for the whole kernel and the SSM state).
- vLLM vllm/model_executor/models/falcon_h1.py @ 59e45989 (FalconH1ParallelHybrid: an Attention and a
  MambaMixer2 per layer; get_mamba_state_shape_from_config: mamba2_state_shape of d_ssm, n_heads,
  d_head, d_state, conv kernel - 1) and zamba2.py @ 0527cbc7 (one Attention per hybrid layer, "KV cache
  is unique for every attention layer", head_dim = attention_head_dim, K/V heads = num_attention_heads;
  a MambaMixer2 in every layer).
- SGLang python/sglang/srt/configs/falcon_h1.py @ 0464817a (attention and mamba on every layer; conv
  (conv_dim, d_conv - 1), temporal (d_state, d_head, n_heads)); no zamba2 model.
- llama.cpp 0c1e570 src/llama-model.cpp create_memory (LLM_ARCH_FALCON_H1: filter_attn and filter_recr
  true for every layer, recurrent states GGML_TYPE_F32), src/llama-hparams.cpp (n_embd_r = (d_conv - 1)
  x (d_inner + 2 x n_group x d_state), n_embd_s = d_state x d_inner); no zamba2 architecture.
Real configs: tests/fixtures/Falcon-H1-7B.json and zyphra-Zamba2/config.json (see fixtures/SOURCES.md).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import VLLM, make_engine
from kvcalc.engines.transformers.crosscheck import check_model
from kvcalc.engines.vllm.capacity import vllm_plan
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, Kind, ModelSpec, StateCache
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

FALCON = "Falcon-H1-7B.json"
ZAMBA_STANDALONE = "zyphra-Zamba2/config.json"
ZAMBA_HYBRID_LAYERS = [6, 12, 18, 24, 30, 36, 42, 47, 51]


def _falcon() -> ModelSpec:
    return read_config(fixture_config(FALCON), name="falcon-h1-7b")


def _zamba() -> ModelSpec:
    return read_config(copy.deepcopy(load_presets()["zamba2-2.7b"].config), name="zamba2-2.7b")


def _bytes(spec: ModelSpec, engine: str, tokens: int = 4096) -> tuple[int, int]:
    est = estimate(spec, Workload(tokens=tokens), engine=make_engine(engine)[0])
    return est.per_token_bytes, est.fixed_bytes_per_sequence


# --- Falcon-H1 ---------------------------------------------------------------------------------------


def test_falcon_h1_by_hand() -> None:
    # 44 layers, each with attention (12 heads, 2 KV heads x head_dim 128) and a Mamba-2 mixer:
    # 44 attention entries (one per layer, in order), then 44 state entries.
    spec = _falcon()
    assert spec.layers == 44 and len(spec.caches) == 88 and spec.query_heads == 12
    assert spec.entry_layers == (*range(44), *range(44))
    attention, state = spec.caches[0], spec.caches[44]
    assert isinstance(attention, AttentionCache) and isinstance(state, StateCache)
    assert all(c == attention for c in spec.caches[:44]) and all(c == state for c in spec.caches[44:])
    assert (attention.kv_heads, attention.k_head_dim, attention.v_head_dim) == (2, 128, 128)
    # Mamba-2: conv over d_ssm 3072 + 2 x n_groups 1 x d_state 256 = 3,584 channels, kernel 4;
    # SSM state n_heads 24 x d_head 128 x d_state 256 = 786,432 elements.
    assert (state.family, state.conv_channels, state.conv_kernel) == ("mamba", 3_584, 4)
    assert state.recurrent_elements == 24 * 128 * 256 == 786_432
    assert state.conv_elements == 3_584 * 3 == 10_752
    # The fixture names no dtype: 2-byte elements are assumed (noted).
    est = estimate(spec, Workload(tokens=4096))
    # Attention: 44 layers x 2 (K and V) x 2 KV heads x 128 x 2 B = 45,056 B per token.
    assert est.per_token_bytes == 44 * 2 * 2 * 128 * 2 == 45_056
    # State: (10,752 + 786,432) x 2 B = 1,594,368 B per layer; x 44 = 70,152,192 B per sequence.
    assert est.fixed_bytes_per_sequence == 44 * (10_752 + 786_432) * 2 == 70_152_192
    assert est.total_bytes == 4096 * 45_056 + 70_152_192 == 254_701_568
    assert any("assumed fp16" in n for n in est.notes)
    # Every field that could shape the cache is read or set aside (multipliers, chunk size, ...).
    assert spec.warnings == ()
    assert spec.notes == ("every one of the 44 falcon_h1 layers keeps K/V and a Mamba-2 state: it counts in both rows",)


def test_falcon_h1_engines_by_hand() -> None:
    spec = read_config(copy.deepcopy(load_presets()["falcon-h1-7b"].config), name="falcon-h1-7b")
    assert spec.dtype == BF16
    # Attention, every engine: 45,056 B per token (4,096 tokens fill 256 vLLM blocks of 16 and
    # llama.cpp's pad(4096, 256) cells exactly; llama.cpp caches K/V as f16, the same 2 bytes).
    # transformers: the conv state keeps the whole kernel in bf16, 3,584 x 4 x 2 = 28,672 B, and the
    #   SSM state float32, 786,432 x 4 = 3,145,728 B: 3,174,400 B per layer x 44 = 139,673,600.
    assert _bytes(spec, "transformers") == (45_056, 44 * (3_584 * 4 * 2 + 786_432 * 4)) == (45_056, 139_673_600)
    # vLLM: kernel - 1 conv columns, both states in the model dtype (mamba_cache_dtype and
    #   mamba_ssm_cache_dtype "auto"): (10,752 + 786,432) x 2 = 1,594,368 B a layer; its hybrid layout
    #   (_align_hybrid_block_size) grows the 1,024 B/token attention pages in steps of 16 tokens until
    #   one holds it: 16 x cdiv(1,594,368, 16,384) = 1,568 tokens, 1,605,632 B, a page each state
    #   takes: x 44 = 70,647,808 (44 attention and 44 mamba entries: groups of 44, none empty).
    assert _bytes(spec, "vllm") == (45_056, 44 * 1_568 * 1_024) == (45_056, 70_647_808)
    # SGLang: conv bf16 10,752 x 2 = 21,504, SSM float32 3,145,728: 3,167,232 x 44 = 139,358,208.
    assert _bytes(spec, "sglang") == (45_056, 44 * (10_752 * 2 + 786_432 * 4)) == (45_056, 139_358_208)
    # llama.cpp: recurrent memory in f32, (10,752 + 786,432) x 4 = 3,188,736 x 44 = 140,304,384.
    assert _bytes(spec, "llama.cpp") == (45_056, 44 * (10_752 + 786_432) * 4) == (45_056, 140_304_384)


def test_falcon_h1_defaults_and_derivations() -> None:
    base = fixture_config(FALCON)
    # mamba_d_head "auto" (the class default) is d_ssm // n_heads = 3072 / 24 = 128.
    auto = read_config({**base, "mamba_d_head": "auto"}, name="auto")
    assert auto.caches == _falcon().caches
    # An explicit null d_ssm is mamba_expand x hidden_size = 2 x 3072 = 6,144: conv 6,144 + 512 = 6,656
    # channels, SSM state 24 x 256 (auto head) x 256 = 1,572,864.
    doubled = read_config({**base, "mamba_d_ssm": None, "mamba_d_head": "auto"}, name="null-ssm")
    state = doubled.caches[-1]
    assert isinstance(state, StateCache)
    assert (state.conv_channels, state.recurrent_elements) == (6_656, 24 * 256 * 256)
    # No num_key_value_heads: FalconH1Config's default is 8 (noted), which must divide the query
    # heads (16 here; the fixture's 12 are refused); null: the query heads.
    without_kv = {k: v for k, v in base.items() if k != "num_key_value_heads"}
    no_kv = read_config({**without_kv, "num_attention_heads": 16}, name="no-kv")
    assert isinstance(no_kv.caches[0], AttentionCache) and no_kv.caches[0].kv_heads == 8
    assert any("num_key_value_heads" in n and "default 8" in n for n in no_kv.notes)
    with pytest.raises(ConfigError, match="num_key_value_heads"):
        read_config(without_kv, name="no-kv-12-heads")
    null_kv = read_config({**base, "num_key_value_heads": None}, name="null-kv")
    assert isinstance(null_kv.caches[0], AttentionCache) and null_kv.caches[0].kv_heads == 12
    # No head_dim: hidden_size / heads = 3072 / 12 = 256.
    no_head_dim = read_config({k: v for k, v in base.items() if k != "head_dim"}, name="no-head-dim")
    assert isinstance(no_head_dim.caches[0], AttentionCache) and no_head_dim.caches[0].k_head_dim == 256
    # A layer list or attn_layer_indices changes nothing (neither transformers nor vLLM reads them).
    listed = read_config({**base, "attn_layer_indices": [0, 1]}, name="listed")
    assert listed.caches == _falcon().caches and any("attn_layer_indices" in n for n in listed.notes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # 24 heads x 100 = 2,400, not d_ssm 3,072: FalconH1Config.validate_architecture refuses it.
        ({"mamba_d_head": 100}, "mamba_d_head"),
        ({"mamba_d_head": "auto", "mamba_n_heads": 25}, "mamba_n_heads"),
        ({"mamba_d_head": "wide"}, "mamba_d_head"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"mamba_d_state": 0}, "mamba_d_state"),
    ],
)
def test_falcon_h1_errors_name_the_field(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config({**fixture_config(FALCON), **change}, name="bad")


def test_falcon_h1_preset_agrees_with_real_config() -> None:
    preset = load_presets()["falcon-h1-7b"]
    from_preset = read_config(copy.deepcopy(preset.config), name="falcon-h1-7b")
    from_file = _falcon()
    assert from_preset.caches == from_file.caches
    assert from_preset.entry_layers == from_file.entry_layers
    assert (from_preset.layers, from_preset.query_heads) == (from_file.layers, from_file.query_heads) == (44, 12)
    # The trimmed fixture has no torch_dtype; the preset says bfloat16 (the checkpoints' own).
    assert (from_preset.dtype, from_file.dtype) == (BF16, None)
    assert from_preset.warnings == ()


# --- Zamba2 ------------------------------------------------------------------------------------------


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


# --- Both: pipeline parallel, vLLM's grouping, the probe's comparison ----------------------------------


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


def _hybrid_layer(kv: int, state: int) -> dict[str, Any]:
    """A probe report of one transformers "hybrid" layer: K/V of ``kv`` bytes, states of ``state``."""
    half = kv // 2
    return {
        "tensor_bytes": kv + state,
        "storage_bytes": kv + state,
        "tensors": [
            {"name": "keys", "shape": [half], "dtype": "uint8"},
            {"name": "values", "shape": [half], "dtype": "uint8"},
            {"name": "conv_states.0", "shape": [state // 2], "dtype": "uint8"},
            {"name": "recurrent_states.0", "shape": [state // 2], "dtype": "uint8"},
        ],
    }


def test_crosscheck_splits_a_hybrid_layer_into_its_two_entries() -> None:
    # Transformers keeps K/V and the states of a Falcon-H1 layer in one cache layer; the comparison
    # gives the state tensors to kvcalc's appended mamba entries. bf16 at 300 tokens, 1 sequence:
    # K/V 300 x 1,024 = 307,200 B a layer; state 28,672 + 3,145,728 = 3,174,400 B a layer.
    spec = read_config(copy.deepcopy(load_presets()["falcon-h1-7b"].config), name="falcon-h1-7b")
    est = estimate(spec, Workload(tokens=300), engine=make_engine("transformers")[0])
    layer = {"kind": "hybrid", **_hybrid_layer(307_200, 3_174_400)}
    check = check_model(spec, est, {"layers": [layer], "layer_kinds": ["hybrid"] * 44})
    by_kind = {k.kind: (k.layers, k.measured_bytes, k.estimated_bytes) for k in check.kinds}
    assert by_kind == {
        Kind.FULL: (44, 44 * 307_200, 44 * 307_200),
        Kind.MAMBA: (44, 44 * 3_174_400, 44 * 3_174_400),
    }
    assert check.notes == () and check.difference == 0


# --- The probe: a shrunk model built by transformers, measured byte for byte --------------------------


def _probe(run_cli: Any, model: str) -> dict[str, Any]:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", model, "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data: dict[str, Any] = result.json()
    return data


def test_probe_falcon_h1_matches_byte_for_byte(run_cli) -> None:
    # The fixture names no dtype, so transformers builds it in float32 (4-byte elements):
    # K/V 44 x 300 x 2 x 2 x 128 x 4 = 27,033,600; states 44 x (3,584 x 4 x 4 + 786,432 x 4)
    # = 44 x 3,203,072 = 140,935,168.
    data = _probe(run_cli, str(FIXTURES / FALCON))
    assert data["match"] is True
    assert data["measured_bytes"] == data["estimated_bytes"] == 27_033_600 + 140_935_168
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {
        "full_attention": (44, 27_033_600, 27_033_600),
        "mamba": (44, 140_935_168, 140_935_168),
    }


def test_probe_zamba2_matches_byte_for_byte(run_cli) -> None:
    # bf16: K/V 9 x 300 x 2 x 32 x 160 x 2 = 55,296,000; states 54 x 1,352,704 = 73,046,016 (the
    # transformers figures above). The shrunk model keeps layer 0 (mamba) and layer 6 (hybrid).
    data = _probe(run_cli, "zamba2-2.7b")
    assert data["match"] is True
    assert data["measured_bytes"] == data["estimated_bytes"] == 55_296_000 + 73_046_016
    by_kind = {k["kind"]: (k["layers"], k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {"mamba": (54, 73_046_016, 73_046_016), "full_attention": (9, 55_296_000, 55_296_000)}


# Every key of the Falcon-H1-0.5B config as NVIDIA Megatron-Bridge's unit test of its FalconH1 bridge
# quotes it (FALCON_H1_500M_CONFIG; the copy has no mamba_d_ssm).
FALCON_H1_05B_KEYS: dict[str, Any] = {
    "architectures": ["FalconH1ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375, "attn_layer_indices": None,
    "embedding_multiplier": 5.656854249492381, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 2048, "key_multiplier": 0.39062499999999994,
    "lm_head_multiplier": 0.0390625, "mamba_chunk_size": 128, "mamba_conv_bias": True, "mamba_d_conv": 4,
    "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1, "mamba_n_heads": 24,
    "mamba_norm_before_gate": False, "mamba_proj_bias": False, "mamba_rms_norm": False, "mamba_use_mlp": True,
    "max_position_embeddings": 16384, "mlp_bias": False, "mlp_multipliers": [0.8838834764831844, 0.5859375],
    "model_type": "falcon_h1", "num_attention_heads": 8, "num_hidden_layers": 36, "num_key_value_heads": 2,
    "projectors_bias": False, "rms_norm_eps": 1e-5, "rope_scaling": None, "rope_theta": 100000000000.0,
    "ssm_in_multiplier": 1.25,
    "ssm_multipliers": [0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738],
    "ssm_out_multiplier": 0.23570226039551587, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 32784,
}  # fmt: skip


def test_falcon_h1_full_key_set_reads_without_warnings() -> None:
    # Without mamba_d_ssm FalconH1Config uses its default 1024, and 24 heads x 64 = 1,536 is not that:
    # transformers' validate_architecture refuses the copy, and so does kvcalc, naming the field.
    with pytest.raises(ConfigError, match="mamba_d_head"):
        read_config(FALCON_H1_05B_KEYS, name="falcon-h1-0.5b")
    # With d_ssm = 24 x 64 = 1,536 every key is read or set aside, and nothing is left to the guard.
    spec = read_config({**FALCON_H1_05B_KEYS, "mamba_d_ssm": 1536}, name="falcon-h1-0.5b")
    assert spec.warnings == ()
    est = estimate(spec, Workload(tokens=4096))
    # Attention: 36 layers x 2 x 2 KV heads x 64 x 2 B = 18,432 B per token.
    # State: conv (1,536 + 2 x 1 x 128) x 3 = 5,376, SSM 24 x 64 x 128 = 196,608; x 2 B = 403,968 a layer.
    assert (est.per_token_bytes, est.fixed_bytes_per_sequence) == (18_432, 36 * 403_968) == (18_432, 14_542_848)


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
