"""DeepSeek-V3.2's sparse-attention indexer: one extra key cache per MLA layer (kvcalc.spec.IndexerCache)."""

from __future__ import annotations

from kvcalc.api import load_model
from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import FP8
from kvcalc.engines import make_engine
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import IndexerCache, Kind, LatentCache
from tests.conftest import fixture_config
from tests.helpers.theoretical import estimate


def _estimate(engine_name: str, tokens: int = 1):
    spec = load_model("deepseek-v3.2")
    engine, _ = make_engine(engine_name, uses_mla=True)
    return estimate(spec, Workload(tokens=tokens), engine=engine)


def test_fixture_reads_one_indexer_entry_per_mla_layer() -> None:
    spec = read_config(fixture_config("DeepSeek-V3.2.json"), name="DeepSeek-V3.2")
    assert spec.layers == 61 and len(spec.caches) == 122  # 61 latents, then 61 indexer keys
    assert spec.caches[:61] == (LatentCache(512, 64, 192, 128),) * 61
    assert spec.caches[61:] == (IndexerCache(128),) * 61
    assert spec.warnings == ()  # index_head_dim read; index_n_heads / index_topk shape compute only


def test_preset_matches_fixture() -> None:
    fixture = read_config(fixture_config("DeepSeek-V3.2.json"), name="deepseek-v3.2")
    assert load_model("deepseek-v3.2").caches == fixture.caches


def test_theoretical_bytes_per_token() -> None:
    # 61 layers x (512 latent + 64 rope) x 2 B (bf16)   = 70,272 B (DeepSeek-V3's figure)
    # 61 layers x 128 indexer key x 2 B (bf16)          = 15,616 B
    #                                                     85,888 B per token
    est = _estimate("theoretical")
    assert est.per_token_bytes == 61 * (512 + 64) * 2 + 61 * 128 * 2 == 85_888
    by_kind = {g.kind: g for g in est.groups}
    assert by_kind[Kind.INDEXER].bytes_per_token == 256 and by_kind[Kind.INDEXER].layers == 61


def test_vllm_bytes_per_token() -> None:
    # vLLM: latent as the model dtype (bf16); indexer keys as fp8 + one fp32 scale per 128 values:
    # 61 x 576 x 2 = 70,272 B + 61 x (128 x 1 + 128 / 128 x 4) = 61 x 132 = 8,052 B -> 78,324 B
    est = _estimate("vllm")
    assert est.per_token_bytes == 61 * 576 * 2 + 61 * (128 + 4) == 78_324
    # Both caches live in blocks of 64 tokens (FlashMLA): 1,000 tokens hold 16 blocks = 1,024 slots.
    est = _estimate("vllm", tokens=1000)
    assert est.total_bytes == 1024 * 78_324
    assert {g.kind: g.metadata_bytes for g in est.groups}[Kind.INDEXER] == 61 * 1024 * 4


def test_indexer_format_ignores_the_kv_format() -> None:
    spec = load_model("deepseek-v3.2")
    engine, _ = make_engine("vllm", uses_mla=True)
    est = estimate(spec, Workload(tokens=64, kv_dtype=FP8), engine=engine)
    assert est.per_token_bytes == 61 * 576 + 61 * 132


def test_transformers_keeps_indexer_keys_in_the_model_dtype() -> None:
    # DynamicIndexedLayer.indexer_keys: [batch, seq, index_head_dim] in the dtype of the indexer's k.
    assert _estimate("transformers").per_token_bytes == 85_888


def test_sglang_stores_fp8_keys_with_scales() -> None:
    assert _estimate("sglang").per_token_bytes == 78_324


def test_llamacpp_caches_the_keys_in_a_second_cache() -> None:
    # llama.cpp 0c1e570 (src/llama-kv-cache-dsa.cpp): the indexer keys in a second llama_kv_cache of
    # -ctk's type (f16), one 128-wide key a layer and no V (MLA): 61 x (576 + 128) x 2 B; checked
    # against real llama.cpp runs in tests/inputs/gguf/test_mla.py
    assert _estimate("llama.cpp").per_token_bytes == 61 * (576 + 128) * 2 == 85_888


def test_pipeline_stages_keep_each_layer_with_its_indexer() -> None:
    # DeepSeek-V3.2 at --pp 2: vLLM's get_pp_indices splits 61 layers 31 / 30. The first stage holds
    # 31 latents (576 elements) and their 31 indexer keys (128): 31 x 704 x 2 B (bf16) x 1,000 tokens
    # = 43,648,000 B. (Cut by entry index instead, one stage would hold all 61 latents:
    # 61 x 1,152 x 1,000 = 70,272,000 B.)
    spec = read_config(load_presets()["deepseek-v3.2"].config, name="deepseek-v3.2")
    est = estimate(spec, Workload(tokens=1000, pp=2))
    assert est.per_gpu_bytes == 31 * 704 * 2 * 1000 == 43_648_000


def test_pipeline_stages_keep_each_decoder_layer_with_its_cross_attention() -> None:
    # t5-small: 6 decoder layers of 8 heads x d_kv 64; the preset names no dtype, so fp16 (noted). At
    # --pp 2 a stage holds 3 layers' self-attention (2 x 8 x 64 x 2 B = 2,048 B a token, 1,000
    # tokens) and their cross-attention over 500 encoder tokens: 3 x 2,048 x 1,000 + 3 x 2,048 x 500
    # = 9,216,000 B. (Cut by entry index, one stage would hold all 6 self-attention layers:
    # 6 x 2,048 x 1,000 = 12,288,000 B.)
    spec = read_config(load_presets()["t5-small"].config, name="t5-small")
    est = estimate(spec, Workload(tokens=1000, encoder_tokens=500, pp=2))
    assert est.per_gpu_bytes == 3 * 2_048 * 1_000 + 3 * 2_048 * 500 == 9_216_000
