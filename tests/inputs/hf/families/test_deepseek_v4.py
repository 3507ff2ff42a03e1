"""DeepSeek-V4 compressed attention (CSA / HCA): each number derived by hand next to it.

Sources: transformers 5.24 models/deepseek_v4/configuration_deepseek_v4.py (DeepseekV4Config:
layer_types from the legacy per-layer compress_ratios 0 / 4 / 128, compress_rates default
{CSA: 4, HCA: 128}, sliding_window 128, head_dim 512, index_head_dim 128) and
modeling_deepseek_v4.py (DeepseekV4Attention: one kv_proj head of head_dim read as K and V;
DeepseekV4HCACache / DeepseekV4CSACache: the K=V window as one tensor of the last W - 1 tokens,
compressed_kv one head_dim entry per ratio tokens, buffer_kv / buffer_gate the T mod ratio tokens
not yet pooled (2 x head_dim wide in CSA, head_dim in HCA), CSA's overlap_kv / overlap_gate of
ratio x head_dim, the gate float32 because position_bias is kept in float32; the CSA indexer the
same at index_head_dim; uncompressed layers go through the generic DynamicSlidingWindowLayer,
which stores K and V as two tensors). vLLM: vllm/models/deepseek_v4/attention.py @ e6643eca
(MLAAttentionSpec with compress_ratio, fp8_ds_mla rows): not modelled, refused. Real config:
tests/fixtures/DeepSeek-V4-Flash.json (see fixtures/SOURCES.md).

DeepSeek-V4-Flash: 43 layers = 2 sliding-only + 21 CSA (ratio 4) + 20 HCA (ratio 128), bf16 (2 B).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import BF16
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import (
    CompressedCache,
    CompressorBufferCache,
    CompressorOverlapCache,
    IndexerCache,
    Kind,
    KVWindowCache,
)
from tests.conftest import FIXTURES, fixture_config
from tests.helpers.theoretical import estimate

FLASH = "DeepSeek-V4-Flash.json"


def _flash() -> Any:
    return read_config(fixture_config(FLASH), name="v4-flash")


def _by_kind(est: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in est.groups:
        out[g.kind] = out.get(g.kind, 0) + g.bytes
    return out


def test_flash_layout_from_compress_ratios() -> None:
    spec = _flash()
    # compress_ratios[:43]: 0, 0, then 4, 128, ... ending on 4 (the 44th entry, 0, is the MTP layer).
    assert spec.layers == 43 and spec.query_heads == 64
    assert spec.dtype == BF16 and spec.warnings == ()
    windows = spec.caches[:43]
    assert windows[:2] == (KVWindowCache(512, 128, v_copy=True),) * 2
    assert windows[2:] == (KVWindowCache(512, 128),) * 41
    extras = spec.caches[43:]
    # CSA: entries, indexer keys, pending buffer (2 x (512 + 128) = 1280 wide), overlap of 512 + 128.
    csa = [
        CompressedCache(512, 4),
        IndexerCache(128, ratio=4),
        CompressorBufferCache(4, 1280, 1280),
        CompressorOverlapCache(4, 640),
    ]
    hca = [CompressedCache(512, 128), CompressorBufferCache(128, 512, 512)]
    assert list(extras) == (csa + hca) * 20 + csa  # layers 2..42 alternate, starting and ending on CSA
    assert len(spec.caches) == 43 + 21 * 4 + 20 * 2  # 167
    assert "CSA pools 4 tokens per entry, HCA 128" in " ".join(spec.notes)


def test_theoretical_bytes_by_hand_at_4k_and_128k() -> None:
    spec = _flash()
    # Window: 43 layers x 128 tokens x 1 row of 512 (K = V) x 2 B = 5,636,096 (for T >= 128).
    window = 43 * 128 * 512 * 2
    assert window == 5_636_096
    # Overlap state (fixed): 21 CSA layers x 2 (projection, gate) x 4 x (512 + 128) x 2 B = 215,040.
    overlap = 21 * 2 * 4 * 640 * 2
    assert overlap == 215_040
    est = estimate(spec, Workload(tokens=4096))
    # T = 4,096: CSA 4,096 / 4 = 1,024 entries: 21 x 1,024 x 512 x 2 = 22,020,096; its indexer
    # 21 x 1,024 x 128 x 2 = 5,505,024; HCA 4,096 / 128 = 32 entries: 20 x 32 x 512 x 2 = 655,360;
    # 4,096 mod 4 = 4,096 mod 128 = 0 tokens pending.
    assert _by_kind(est) == {
        Kind.KV_WINDOW: window,
        Kind.COMPRESSED: 22_020_096 + 655_360,
        Kind.INDEXER: 5_505_024,
        Kind.COMPRESSOR_BUFFER: 0,
        Kind.COMPRESSOR_OVERLAP: overlap,
    }
    # 5,636,096 + 22,675,456 + 5,505,024 + 215,040 = 34,031,616 B (32.46 MiB).
    assert est.total_bytes == 34_031_616
    est = estimate(spec, Workload(tokens=131072))
    # T = 131,072: CSA 32,768 entries: 21 x 32,768 x 1,024 B = 704,643,072; indexer 21 x 32,768 x
    # 256 B = 176,160,768; HCA 1,024 entries: 20 x 1,024 x 1,024 B = 20,971,520.
    assert _by_kind(est)[Kind.COMPRESSED] == 704_643_072 + 20_971_520
    assert _by_kind(est)[Kind.INDEXER] == 176_160_768
    # 5,636,096 + 725,614,592 + 176,160,768 + 215,040 = 907,626,496 B (865.6 MiB).
    assert est.total_bytes == 907_626_496


def test_per_token_and_fixed_bytes_by_hand() -> None:
    est = estimate(_flash(), Workload(tokens=4096))
    # Per token, before any window: the window row 43 x 512 x 2 = 44,032; a CSA entry's share
    # 21 x 1,024 / 4 = 5,376; its indexer key's 21 x 256 / 4 = 1,344; an HCA entry's 20 x 1,024 /
    # 128 = 160; pending tokens add nothing for good. 44,032 + 5,376 + 1,344 + 160 = 50,912.
    assert est.per_token_bytes == 50_912
    # Beyond the window, the cache grows by 5,376 + 1,344 + 160 = 6,880 B per token.
    longer = estimate(_flash(), Workload(tokens=4096 + 128))
    assert longer.total_bytes - est.total_bytes == 128 * 6_880
    # Fixed per sequence: the CSA overlap state, 215,040 (above).
    assert est.fixed_bytes_per_sequence == 215_040


def test_transformers_bytes_by_hand_with_pending_tokens() -> None:
    engine, _ = make_engine("transformers")
    est = estimate(_flash(), Workload(tokens=1001), engine=engine)
    # Window (W - 1 = 127 tokens): the 2 sliding-only layers store K and V as two tensors,
    # 2 x 127 x 2 x 512 x 2 = 520,192; the 41 compressed layers one, 41 x 127 x 512 x 2 = 5,331,968.
    # CSA: floor(1,001 / 4) = 250 entries, 21 x 250 x 1,024 = 5,376,000; HCA: floor(1,001 / 128) = 7,
    # 20 x 7 x 1,024 = 143,360. Indexer 21 x 250 x 256 = 1,344,000.
    # Pending: 1,001 mod 4 = 1 token x (1,280 + 1,280) x 2 B x 21 = 107,520; 1,001 mod 128 = 105
    # tokens x (512 + 512) x 2 B x 20 = 4,300,800.
    # Overlap: projections in bf16, gate logits in float32: 21 x 4 x 640 x (2 + 4) = 322,560.
    assert _by_kind(est) == {
        Kind.KV_WINDOW: 520_192 + 5_331_968,
        Kind.COMPRESSED: 5_376_000 + 143_360,
        Kind.INDEXER: 1_344_000,
        Kind.COMPRESSOR_BUFFER: 107_520 + 4_300_800,
        Kind.COMPRESSOR_OVERLAP: 322_560,
    }
    assert est.total_bytes == 17_446_400


def test_tensor_parallel_replicates_every_part() -> None:
    # One K=V head, one compressor and one indexer per layer: every rank keeps a whole copy.
    one = estimate(_flash(), Workload(tokens=4096))
    two = estimate(_flash(), Workload(tokens=4096, tp=2))
    assert two.per_gpu_bytes == one.per_gpu_bytes == 34_031_616
    assert two.total_bytes == 2 * 34_031_616


@pytest.mark.parametrize(
    ("engine", "needle"),
    # llama.cpp's llama_kv_cache_dsv4 is modelled: tests/inputs/gguf/test_mla.py.
    [("vllm", "vLLM's DeepSeek-V4 cache"), ("sglang", "SGLang's DeepSeek-V4 cache")],
)
def test_engines_without_the_layout_refuse(engine: str, needle: str) -> None:
    made, _ = make_engine(engine)
    with pytest.raises(UsageError, match=needle) as err:
        estimate(_flash(), Workload(tokens=4096), engine=made)
    assert "\n" not in str(err.value) and "not modelled" in str(err.value)


def _toy(**change: Any) -> dict[str, Any]:
    cfg = {
        "model_type": "deepseek_v4",
        "torch_dtype": "bfloat16",
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "sliding_window": 16,
        "index_head_dim": 32,
        "compress_ratios": [0, 4, 128],
    }
    cfg.update(change)
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"compress_ratios": [0, 8, 128]}, r"'compress_ratios' holds \[8\]"),
        ({"compress_ratios": [0, 4]}, "'compress_ratios' has 2 entries for 3 layers"),
        ({"compress_ratios": "0,4,128"}, "'compress_ratios' must be a list of integers"),
        ({"layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}, "unknown layer type"),
        ({"compress_rates": [4, 128]}, "'compress_rates' must be an object"),
        ({"compress_rates": {"moe": 4}}, "'compress_rates' names unknown layer types"),
        ({"head_dim": 0}, "'head_dim' must be positive"),
        ({"sliding_window": "128"}, "'sliding_window' must be an integer"),
    ],
)
def test_bad_fields_are_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_config(_toy(**change), name="toy")


def test_defaults_and_overrides_follow_deepseek_v4_config() -> None:
    # No layer_types or compress_ratios: DeepseekV4Config's default, 2 HCA then CSA / HCA alternating.
    spec = read_config(_toy(compress_ratios=None, num_hidden_layers=4), name="toy")
    kinds = [c.kind for c in spec.caches]
    # Layers: HCA, HCA, HCA (i = 0 of the interleave is even), CSA (i = 1).
    assert kinds[:4] == [Kind.KV_WINDOW] * 4
    assert spec.caches[4:] == (
        *(CompressedCache(64, 128), CompressorBufferCache(128, 64, 64)) * 3,
        CompressedCache(64, 4),
        IndexerCache(32, ratio=4),
        CompressorBufferCache(4, 192, 192),
        CompressorOverlapCache(4, 96),
    )
    assert any("2 HCA layers, then CSA and HCA alternating" in n for n in spec.notes)
    # compress_rates and the legacy scalar overrides set the ratios.
    spec = read_config(_toy(compress_rates={"compressed_sparse_attention": 8}, compress_rate_hca=64), name="toy")
    assert CompressedCache(64, 8) in spec.caches and CompressedCache(64, 64) in spec.caches
    # layer_types wins over compress_ratios.
    spec = read_config(_toy(layer_types=["sliding_attention"] * 3), name="toy")
    assert spec.caches == (KVWindowCache(64, 16, v_copy=True),) * 3
    # num_key_value_heads other than 1 caches one head all the same, said in a note.
    spec = read_config(_toy(num_key_value_heads=8), name="toy")
    assert spec.caches[0] == KVWindowCache(64, 16, v_copy=True)
    assert any("one shared K=V head" in n for n in spec.notes)


def test_toy_bytes_by_hand_below_the_window() -> None:
    # T = 10 < W = 16: every token in the window. Sliding layer: 10 x 64 x 2 B = 1,280; the CSA
    # layer's window the same and floor(10 / 4) = 2 entries x 64 x 2 = 256, indexer 2 x 32 x 2 =
    # 128, 10 mod 4 = 2 pending x (192 + 192) x 2 = 1,536, overlap 2 x 4 x 96 x 2 = 1,536; the HCA
    # layer's window 1,280, no entry yet (10 < 128), 10 pending x (64 + 64) x 2 = 2,560.
    est = estimate(read_config(_toy(), name="toy"), Workload(tokens=10))
    assert est.total_bytes == 3 * 1_280 + 256 + 128 + 1_536 + 1_536 + 2_560


def test_preset_agrees_with_real_config() -> None:
    preset = load_presets()["deepseek-v4-flash"]
    from_preset = read_config(copy.deepcopy(preset.config), name="deepseek-v4-flash")
    from_file = _flash()
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads, from_preset.dtype) == (43, 64, BF16)
    assert from_preset.warnings == ()


def test_probe_deepseek_v4_matches_byte_for_byte(run_cli: Any) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    result = run_cli("probe", str(FIXTURES / FLASH), "--tokens", "1001", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    assert data["match"] is True
    # The numbers of test_transformers_bytes_by_hand_with_pending_tokens, measured on one layer
    # of each kind (sliding-only, CSA, HCA) and scaled to 2 / 21 / 20 layers.
    assert data["measured_bytes"] == data["estimated_bytes"] == 17_446_400
    by_kind = {k["kind"]: (k["measured_bytes"], k["estimated_bytes"]) for k in data["kinds"]}
    assert by_kind == {
        "sliding_kv_shared": (5_852_160, 5_852_160),
        "compressed_attention": (5_519_360, 5_519_360),
        "indexer": (1_344_000, 1_344_000),
        "compressor_buffer": (4_408_320, 4_408_320),
        "compressor_overlap": (322_560, 322_560),
    }


@pytest.mark.parametrize(
    "cache",
    [
        KVWindowCache(512, 128),
        KVWindowCache(512, 128, v_copy=True),
        CompressedCache(512, 4),
        IndexerCache(128, ratio=4),
        CompressorBufferCache(4, 1280, 1280),
        CompressorOverlapCache(4, 640),
    ],
    ids=repr,
)
def test_new_kinds_keep_the_layer_contract(cache: Any) -> None:
    # The contract of tests/test_structure.py::test_kind_contract, for the DeepSeek-V4 kinds.
    heads, dims = cache.describe()
    assert heads and dims and cache.kind.short
    k_row, v_row, _ = cache.rows(1)
    assert (k_row + v_row > 0) == cache.caches_tokens == (cache.elements_per_token > 0)
    assert cache.is_state == (sum(cache.state_elements(whole_kernel=False)) > 0)
    assert cache.is_compressed_attention
    # Replicated on every tensor-parallel rank: the same rows on 2 ranks as on 1.
    assert cache.rows(2) == cache.rows(1)


def test_entries_and_shares_by_hand() -> None:
    # 1,001 tokens: floor(1,001 / 4) = 250 CSA entries, floor(1,001 / 128) = 7 HCA entries;
    # 1,001 mod 4 = 1 and 1,001 mod 128 = 105 tokens pending.
    assert CompressedCache(512, 4).entries(1001) == 250
    assert CompressedCache(512, 128).entries(1001) == 7
    assert CompressorBufferCache(4, 1280, 1280).entries(1001) == 1
    assert CompressorBufferCache(128, 512, 512).entries(1001) == 105
    # A 1,024 B entry per 4 tokens is 256 B a token; per 128 tokens 8 B; a pending token 0 for good.
    assert CompressedCache(512, 4).token_share(1024) == 256
    assert CompressedCache(512, 128).token_share(1024) == 8
    assert CompressorBufferCache(4, 1280, 1280).token_share(5120) == 0
    # The V3.2 indexer (ratio 1) and plain layers keep a row per token.
    assert IndexerCache(128).entries(1001) == 1001 and not IndexerCache(128).is_compressed_attention


def test_shared_prefix_shares_whole_compressed_windows() -> None:
    # 2 sequences of 4,096 tokens sharing their first 2,050: a CSA layer shares floor(2,050 / 4) =
    # 512 entries, so holds 2 x 1,024 - 512 = 1,536; an HCA layer floor(2,050 / 128) = 16, so
    # 2 x 32 - 16 = 48. The windows (last 128 tokens) and pending tokens are each sequence's own.
    est = estimate(_flash(), Workload(tokens=4096, batch=2, shared_prefix=2050))
    slots = {(g.kind, g.cache.compress_ratio): g.slots for g in est.groups if g.cache.caches_tokens}
    assert slots[(Kind.COMPRESSED, 4)] == 1_536 and slots[(Kind.INDEXER, 4)] == 1_536
    assert slots[(Kind.COMPRESSED, 128)] == 48
    assert slots[(Kind.KV_WINDOW, 1)] == 2 * 128
