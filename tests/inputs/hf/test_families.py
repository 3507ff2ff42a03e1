"""One test (at least) per architecture family, each number derived by hand in the docstring
or comment next to it. Real configs come from tests/fixtures (see fixtures/SOURCES.md)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvcalc import estimate, load_model, model_from_geometry
from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.dtypes import BF16, FP8, FP16, parse_dtype
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import load_presets
from kvcalc.spec import AttentionCache, LatentCache, ModelSpec, SharedCache, StateCache
from tests.conftest import fixture_config
from tests.helpers.kimi_granite_families import GRANITE, KIMI, NANO
from tests.helpers.theoretical import estimate as estimate_spec


def spec_of(name: str) -> ModelSpec:
    return read_config(fixture_config(name), name=name)


def run(spec: ModelSpec, tokens: int, batch: int = 1, kv_dtype: str | None = None) -> Estimate:
    dtype = parse_dtype(kv_dtype) if kv_dtype else None
    return estimate_spec(spec, Workload(tokens=tokens, batch=batch, kv_dtype=dtype))


def by_kind(est: Estimate) -> dict[str, int]:
    out: dict[str, int] = {}
    for g in est.groups:
        out[g.kind] = out.get(g.kind, 0) + g.bytes
    return out


def layers_by_kind(spec: ModelSpec) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in spec.caches:
        out[c.kind] = out.get(c.kind, 0) + 1
    return out


# --- the seed's worked example and plain GQA / MHA --------------------------------------------


def test_seed_worked_example_llama_3_1_8b() -> None:
    # seed/000: 2 x 32 layers x 1 x 2048 tokens x 8 KV heads x 128 x 2 bytes = 268,435,456 = 256 MiB
    est = run(spec_of("Llama-3.1-8B.json"), tokens=2048)
    assert est.kv_dtype is BF16  # torch_dtype bfloat16 in the file
    assert est.total_bytes == 268_435_456 == 256 * 2**20
    # Doubling T doubles it; four sequences make 1 GiB (seed, same section).
    assert run(spec_of("Llama-3.1-8B.json"), tokens=4096).total_bytes == 2 * 268_435_456
    assert run(spec_of("Llama-3.1-8B.json"), tokens=2048, batch=4).total_bytes == 2**30


def test_seed_example_through_the_api_and_by_hand() -> None:
    assert estimate("llama-3.1-8b", tokens=2048).total_bytes == 268_435_456
    hand = model_from_geometry(layers=32, heads=32, kv_heads=8, head_dim=128)
    assert estimate(hand, tokens=2048, kv_dtype="fp16").total_bytes == 268_435_456
    # Writing 32 KV heads where 8 are meant over-states the cache 4x (seed, question 2).
    mha = model_from_geometry(layers=32, heads=32, kv_heads=32, head_dim=128)
    assert estimate(mha, tokens=2048, kv_dtype="fp16").total_bytes == 4 * 268_435_456


def test_llama_2_7b_mha_is_2_gib_at_4096_tokens() -> None:
    # NVIDIA "Mastering LLM Techniques: Inference Optimization": Llama 2 7B, 4096 tokens, batch 1,
    # FP16 -> "~2 GB" = 2 x 32 x 4096 x 32 x 128 x 2 = 2,147,483,648 = exactly 2 GiB.
    spec = spec_of("Llama-2-7b-hf.json")
    assert spec.caches[0] == AttentionCache(kv_heads=32, k_head_dim=128, v_head_dim=128)
    assert run(spec, tokens=4096).total_bytes == 2 * 2**30


def test_opt_13b_per_token_matches_pagedattention_paper() -> None:
    # vLLM paper §3: OPT-13B "800 KB" per token = 2 x 40 layers x 5120 hidden x 2 bytes = 819,200 B.
    opt = {"model_type": "opt", "num_hidden_layers": 40, "num_attention_heads": 40, "hidden_size": 5120}
    est = run(read_config(opt, name="opt-13b"), tokens=1)
    assert est.per_token_bytes == 819_200
    assert any("multi-head attention assumed" in n for n in est.model.notes)


def test_published_per_token_figures_deepseek_v3_paper() -> None:
    # "Insights into DeepSeek-V3" (arXiv 2505.09343) Table 1, KV per token in BF16 (decimal KB):
    # DeepSeek-V3 70.272 KB = 61 x (512 + 64) x 2; Qwen-2.5-72B 327.680 KB = 2 x 80 x 8 x 128 x 2;
    # LLaMA-3.1-405B 516.096 KB = 2 x 126 x 8 x 128 x 2.
    assert estimate("deepseek-v3", tokens=1, kv_dtype="bf16").per_token_bytes == 70_272
    assert estimate("qwen2.5-72b", tokens=1, kv_dtype="bf16").per_token_bytes == 327_680
    assert estimate("llama-3.1-405b", tokens=1, kv_dtype="bf16").per_token_bytes == 516_096


def test_jamba_paper_256k_figures_are_gib() -> None:
    # Jamba-1.5 paper Table 1 at 256K tokens: LLaMA-3.1-8B "32GB" and 70B "80GB" are GiB:
    # 131,072 B/token x 262,144 = 32 GiB; 327,680 x 262,144 = 80 GiB.
    assert estimate("llama-3.1-8b", tokens=262_144).total_bytes == 32 * 2**30
    assert estimate("llama-3.1-70b", tokens=262_144).total_bytes == 80 * 2**30


# --- explicit head_dim and separate K / V dims -------------------------------------------------


def test_explicit_head_dim_wins_mistral_nemo() -> None:
    # head_dim 128 although 5120 / 32 = 160: 2 x 40 x 8 x 128 x 2 = 163,840 B/token (not 204,800).
    spec = spec_of("Mistral-Nemo-Instruct-2407.json")
    assert run(spec, tokens=1).per_token_bytes == 163_840
    assert layers_by_kind(spec) == {"full_attention": 40}  # sliding_window: null


def test_qwen3_head_dim_and_separate_v_dim() -> None:
    # Qwen3-8B: 2 x 36 x 8 x 128 x 2 = 147,456 B/token.
    assert run(spec_of("Qwen3-8B.json"), tokens=1).per_token_bytes == 147_456
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 64, "v_head_dim": 32, "torch_dtype": "float16"}  # fmt: skip
    # per layer per token: 2 heads x (64 + 32) = 192 elements x 2 B = 384; x 2 layers x 10 tokens.
    assert run(read_config(cfg, name="kv"), tokens=10).total_bytes == 2 * 10 * 192 * 2


# --- MQA: Falcon and GPT-BigCode -------------------------------------------------------------


def test_falcon_7b_multi_query_one_kv_head() -> None:
    # multi_query true, new_decoder_architecture false -> 1 KV head; d_h = 4544 / 71 = 64.
    # 2 x 32 x 1 x 64 x 2 = 8,192 B/token.
    spec = spec_of("falcon-7b-instruct.json")
    assert spec.caches[0] == AttentionCache(kv_heads=1, k_head_dim=64, v_head_dim=64)
    assert run(spec, tokens=1).per_token_bytes == 8_192


def test_falcon_40b_new_decoder_architecture_uses_num_kv_heads() -> None:
    # 60 layers, 8 KV heads, 8192 / 128 = 64 dims: 2 x 60 x 8 x 64 x 2 = 122,880 B/token.
    assert estimate("falcon-40b", tokens=1).per_token_bytes == 122_880


def test_gpt_bigcode_defaults_to_multi_query() -> None:
    # StarCoder geometry: 40 layers, 48 heads, 6144 hidden -> d_h 128; GPTBigCodeConfig defaults
    # multi_query=True: 2 x 40 x 1 x 128 x 2 = 20,480 B/token (fp16, the config names no dtype).
    cfg: dict[str, Any] = {"model_type": "gpt_bigcode", "n_layer": 40, "n_head": 48, "n_embd": 6144}
    spec = read_config(cfg, name="starcoder")
    assert run(spec, tokens=1).per_token_bytes == 20_480
    assert any("multi_query" in n for n in spec.notes)
    cfg["multi_query"] = False  # plain MHA: 48 heads -> 48x as large
    assert run(read_config(cfg, name="mha"), tokens=1).per_token_bytes == 48 * 20_480


def test_gpt2_key_aliases() -> None:
    # n_layer 12, n_head 12, n_embd 768 -> d_h 64: 2 x 12 x 12 x 64 x 2 (fp16) = 36,864 B/token.
    assert run(spec_of("gpt2.json"), tokens=1).per_token_bytes == 36_864


# --- sliding windows ------------------------------------------------------------------------


def test_mistral_all_layers_slide_and_stop_growing_at_the_window() -> None:
    # sliding_window 4096 on all 32 layers. At 32k tokens each layer keeps 4096 tokens:
    # 2 x 32 x 4096 x 8 x 128 x 2 = 536,870,912, vs 4,294,967,296 unwindowed: the Mistral 7B
    # paper's "reduces the cache memory usage by 8x" at a 32k sequence.
    spec = spec_of("Mistral-7B-Instruct-v0.1.json")
    assert layers_by_kind(spec) == {"sliding_attention": 32}
    est = run(spec, tokens=32_768)
    assert est.total_bytes == 536_870_912
    assert run(spec, tokens=4096).total_bytes == 536_870_912
    assert est.per_token_bytes * 32_768 == 8 * est.total_bytes


def test_phi3_mini_sliding_window_2047() -> None:
    # 32 layers x 32 KV heads x 96 dims (3072 / 32), window 2047:
    # 2 x 32 x 2047 x 32 x 96 x 2 = 804,913,152 at 4096 tokens.
    assert estimate("phi-3-mini", tokens=4096).total_bytes == 804_913_152


def test_qwen2_sliding_only_when_enabled() -> None:
    # Qwen2.5-7B: use_sliding_window false -> all 28 layers full: 2 x 28 x 4 x 128 x 2 = 57,344.
    cfg = fixture_config("Qwen2.5-7B.json")
    spec = read_config(cfg, name="qwen")
    assert layers_by_kind(spec) == {"full_attention": 28}
    assert run(spec, tokens=1).per_token_bytes == 57_344
    # Enabled with window 4096 from layer 20: layers 20..27 slide (8), 0..19 full (20).
    # Per layer per token 2 x 4 x 128 x 2 = 2,048 B; at 8192 tokens:
    # 20 x 8192 x 2048 + 8 x 4096 x 2048 = 335,544,320 + 67,108,864 = 402,653,184.
    cfg |= {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    spec = read_config(cfg, name="qwen-swa")
    assert layers_by_kind(spec) == {"full_attention": 20, "sliding_attention": 8}
    assert run(spec, tokens=8192).total_bytes == 402_653_184


def test_gemma2_alternates_without_layer_types() -> None:
    # 42 layers: even indices slide (W 4096), odd are full; 8 KV heads x 256, float32 (4 B) from
    # torch_dtype. Per layer per token 2 x 8 x 256 x 4 = 16,384 B. At 8192 tokens:
    # 21 x 8192 x 16384 + 21 x 4096 x 16384 = 2,818,572,288 + 1,409,286,144 = 4,227,858,432.
    spec = spec_of("gemma-2-9b.json")
    assert layers_by_kind(spec) == {"sliding_attention": 21, "full_attention": 21}
    assert spec.caches[0].kind == "sliding_attention" and spec.caches[1].kind == "full_attention"
    est = run(spec, tokens=8192)
    assert est.kv_dtype.name == "fp32"
    assert est.total_bytes == 4_227_858_432
    assert run(spec, tokens=8192, kv_dtype="bf16").total_bytes == 4_227_858_432 // 2


def test_gemma3_pattern_six_from_nested_text_config() -> None:
    # 62 layers; global where (i + 1) % 6 == 0 -> i = 5, 11, ..., 59: 10 full, 52 sliding (W 1024).
    # Per layer per token 2 x 16 x 128 x 2 = 8,192 B. At 32768 tokens:
    # 10 x 32768 x 8192 + 52 x 1024 x 8192 = 2,684,354,560 + 436,207,616 = 3,120,562,176.
    spec = load_model("gemma-3-27b")
    assert layers_by_kind(spec) == {"full_attention": 10, "sliding_attention": 52}
    assert run(spec, tokens=32_768).total_bytes == 3_120_562_176


def test_gpt_oss_layer_types() -> None:
    # 24 layers from layer_types: 12 sliding (W 128), 12 full; 8 KV heads x 64. No dtype in the
    # file -> fp16 with a note. Per layer per token 2 x 8 x 64 x 2 = 2,048 B. At 4096 tokens:
    # 12 x 4096 x 2048 + 12 x 128 x 2048 = 100,663,296 + 3,145,728 = 103,809,024.
    spec = spec_of("gpt-oss-20b.json")
    est = run(spec, tokens=4096)
    assert by_kind(est) == {"sliding_attention": 3_145_728, "full_attention": 100_663_296}
    assert est.total_bytes == 103_809_024
    assert any("fp16" in n for n in est.notes)


def test_sliding_window_layers_keep_w_not_w_minus_1() -> None:
    # The theoretical count keeps W tokens (documented in --help): 10 layers, window 16.
    cfg = {"model_type": "mistral", "num_hidden_layers": 10, "num_attention_heads": 4,
           "num_key_value_heads": 1, "head_dim": 8, "sliding_window": 16,
           "torch_dtype": "float16"}  # fmt: skip
    est = run(read_config(cfg, name="w"), tokens=100)
    assert est.groups[0].tokens_kept == 16
    assert est.total_bytes == 2 * 10 * 16 * 1 * 8 * 2


def test_mistral_defaults_apply_only_when_the_key_is_absent() -> None:
    # MistralConfig defaults sliding_window=4096; an explicit null disables it (Mixtral's file).
    base = {"model_type": "mistral", "num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 1024}
    assert layers_by_kind(read_config(base, name="m")) == {"sliding_attention": 2}
    assert layers_by_kind(read_config(base | {"sliding_window": None}, name="m")) == {"full_attention": 2}
    assert layers_by_kind(spec_of("Mixtral-8x7B-v0.1.json")) == {"full_attention": 32}


# --- chunked attention (Llama 4) -------------------------------------------------------------


def test_llama4_chunked_layers_from_nested_text_config() -> None:
    # text_config: 48 layers, no_rope_layers [] -> default every 4th layer full (NoPE): 12 full,
    # 36 chunked with attention_chunk_size 8192. Per layer per token 2 x 8 x 128 x 2 = 4,096 B.
    # At 32768 tokens: 12 x 32768 x 4096 + 36 x 8192 x 4096 = 1,610,612,736 + 1,207,959,552.
    spec = spec_of("Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json")
    assert layers_by_kind(spec) == {"chunked_attention": 36, "full_attention": 12}
    assert [c.kind for c in spec.caches[:4]] == ["chunked_attention"] * 3 + ["full_attention"]
    assert run(spec, tokens=32_768).total_bytes == 2_818_572_288


def test_llama4_explicit_no_rope_layers() -> None:
    # no_rope_layers lists 1 for RoPE (chunked) layers, 0 for NoPE (full) layers.
    cfg = {"model_type": "llama4_text", "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 16, "attention_chunk_size": 8,
           "no_rope_layers": [0, 1, 1, 0], "torch_dtype": "bfloat16"}  # fmt: skip
    spec = read_config(cfg, name="l4")
    assert [c.kind for c in spec.caches] == ["full_attention", "chunked_attention", "chunked_attention",
                                             "full_attention"]  # fmt: skip
    # 100 tokens: 2 full x 100 + 2 chunked x 8 tokens, each 2 x 2 x 16 x 2 = 128 B per token.
    assert run(spec, tokens=100).total_bytes == (2 * 100 + 2 * 8) * 128


# --- MLA --------------------------------------------------------------------------------------


def test_deepseek_v2_lite_mla_latent() -> None:
    # 27 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 31,104 B/token, no factor 2.
    spec = spec_of("DeepSeek-V2-Lite.json")
    # Decompressed per head: K = qk_nope 128 + qk_rope 64 = 192, V = 128 (for comparisons only).
    assert set(spec.caches) == {LatentCache(latent_dim=512, rope_dim=64, k_head_dim=192, v_head_dim=128)}
    est = run(spec, tokens=1000, batch=2)
    assert est.per_token_bytes == 31_104
    assert est.total_bytes == 31_104 * 1000 * 2


def test_kimi_k2_is_mla_like_deepseek_v3() -> None:
    # 61 layers x 576 x 2 = 70,272 B/token, the same latent as DeepSeek-V3.
    assert estimate("kimi-k2", tokens=1).per_token_bytes == 70_272


# --- linear attention and Mamba state ----------------------------------------------------------


def test_qwen3_next_hybrid_linear_attention() -> None:
    # full_attention_interval 4: layers 3, 7, ..., 47 full (12), the other 36 Gated DeltaNet.
    # Full: 2 x 2 KV heads x 256 x 2 B = 2,048 B per token per layer.
    # Linear state per layer: conv (2 x 16 x 128 + 32 x 128) channels x (kernel 4 - 1) = 24,576
    # plus recurrent 32 value heads x 128 x 128 = 524,288 -> 548,864 elements x 2 B = 1,097,728 B.
    # At 32768 tokens: 12 x 32768 x 2048 + 36 x 1,097,728 = 805,306,368 + 39,518,208 = 844,824,576.
    spec = spec_of("Qwen3-Next-80B-A3B.json")
    assert layers_by_kind(spec) == {"linear_attention": 36, "full_attention": 12}
    state = next(c for c in spec.caches if isinstance(c, StateCache))
    assert (state.conv_elements, state.recurrent_elements) == (24_576, 524_288)
    est = run(spec, tokens=32_768)
    assert est.total_bytes == 844_824_576
    # The state does not grow with tokens: 1 token more changes only the 12 full layers.
    assert run(spec, tokens=32_769).total_bytes - est.total_bytes == 12 * 2048


def test_jamba_attention_period_and_offset() -> None:
    # attn_layer_period 8, offset 4: attention at 4, 12, 20, 28 (4 layers), 28 Mamba layers.
    # Attention: 2 x 8 x 128 x 2 = 4,096 B per token per layer. Mamba: d_inner 2 x 4096 = 8192,
    # conv 8192 x (4 - 1) = 24,576 + SSM 8192 x 16 = 131,072 -> 155,648 x 2 B = 311,296 B.
    # At 4096 tokens: 4 x 4096 x 4096 + 28 x 311,296 = 67,108,864 + 8,716,288 = 75,825,152.
    spec = load_model("jamba-v0.1")
    assert [i for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)] == [4, 12, 20, 28]
    assert run(spec, tokens=4096).total_bytes == 75_825_152


def test_pure_mamba_has_no_per_token_cache() -> None:
    # mamba-2.8b: 64 layers, d_inner 5120, conv 5120 x 3 = 15,360 + SSM 5120 x 16 = 81,920 =
    # 97,280 elements per layer, float32 (torch_dtype) -> 389,120 B; x 64 = 24,903,680 per sequence.
    spec = load_model("mamba-2.8b")
    for tokens in (1, 100_000):
        est = run(spec, tokens=tokens, batch=3)
        assert est.per_token_bytes == 0
        assert est.total_bytes == 3 * 24_903_680


# --- KV sharing ------------------------------------------------------------------------------


def test_gemma3n_shared_kv_layers_store_nothing() -> None:
    # 35 layers, last 15 share KV. The first 20 follow layer_types: 16 sliding (W 512), 4 full;
    # 2 KV heads x 256 -> 2,048 B per token per layer. At 32768 tokens:
    # 4 x 32768 x 2048 + 16 x 512 x 2048 = 268,435,456 + 16,777,216 = 285,212,672.
    spec = load_model("gemma-3n-e4b")
    assert layers_by_kind(spec) == {"sliding_attention": 16, "full_attention": 4, "kv_shared": 15}
    assert all(isinstance(c, SharedCache) for c in spec.caches[20:])
    assert run(spec, tokens=32_768).total_bytes == 285_212_672


def test_kv_shared_layers_must_leave_one_layer() -> None:
    cfg = {"model_type": "gemma3n_text", "num_hidden_layers": 4, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 8, "num_kv_shared_layers": 4}  # fmt: skip
    with pytest.raises(ConfigError, match="num_kv_shared_layers"):
        read_config(cfg, name="x")


# --- encoder-decoder --------------------------------------------------------------------------


def test_t5_small_self_and_cross_attention() -> None:
    # 6 decoder layers (num_decoder_layers absent -> num_layers), 8 heads x d_kv 64, fp16 default.
    # 100 generated tokens: 2 x 6 x 100 x 8 x 64 x 2 = 1,228,800; cross-attention over 512 encoder
    # tokens: 2 x 6 x 512 x 8 x 64 x 2 = 6,291,456. Total 7,520,256. The encoder caches nothing.
    spec = spec_of("t5-small.json")
    assert layers_by_kind(spec) == {"full_attention": 6, "cross_attention": 6}
    est = estimate_spec(spec, Workload(tokens=100, encoder_tokens=512))
    assert by_kind(est) == {"full_attention": 1_228_800, "cross_attention": 6_291_456}
    assert est.total_bytes == 7_520_256
    # Cross-attention is fixed by the encoder: more decoder tokens grow only self-attention.
    grown = estimate_spec(spec, Workload(tokens=200, encoder_tokens=512))
    assert grown.total_bytes - est.total_bytes == 1_228_800


def test_whisper_cross_attention_defaults_to_1500_frames() -> None:
    # 32 decoder layers x 20 heads x 64 (1280 / 20), fp16; 448 tokens + 1500 encoder frames:
    # self 2 x 32 x 448 x 20 x 64 x 2 = 73,400,320; cross 2 x 32 x 1500 x 20 x 64 x 2 = 245,760,000.
    est = estimate("whisper-large-v3", tokens=448)
    assert by_kind(est) == {"full_attention": 73_400_320, "cross_attention": 245_760_000}


# --- nested text_config with config-class defaults -----------------------------------------------


def test_llava_sparse_text_config_uses_llama_defaults() -> None:
    # text_config has no layers/heads/hidden -> LlamaConfig defaults 32 / 32 / 4096, MHA, fp16:
    # 2 x 32 x 32 x 128 x 2 = 524,288 B/token; every default applied is noted.
    spec = spec_of("llava-1.5-7b-hf.json")
    assert spec.model_type == "llama"
    assert run(spec, tokens=1).per_token_bytes == 524_288
    notes = " ".join(spec.notes)
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "num_key_value_heads"):
        assert key in notes


# --- dtypes -----------------------------------------------------------------------------------


def test_dtype_default_and_override() -> None:
    spec = spec_of("Llama-3.1-8B.json")
    assert run(spec, tokens=2048, kv_dtype="fp8").total_bytes == 268_435_456 // 2
    assert run(spec, tokens=2048, kv_dtype="fp32").total_bytes == 268_435_456 * 2
    assert FP8.bytes_per_element == 1 and FP16.bytes_per_element == 2


def test_mamba2_conv_includes_the_b_and_c_groups() -> None:
    # Mamba-2 2.7B geometry (Mamba2Config fields): hidden 2560, expand 2 -> d_inner 5120,
    # state_size 128, n_groups 1, conv_kernel 4. Conv: (5120 + 2 x 1 x 128) x 3 = 16,128;
    # SSM: 5120 x 128 = 655,360 -> 671,488 elements x 2 B (bf16) = 1,342,976 B per layer.
    cfg = {"model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64, "expand": 2,
           "state_size": 128, "n_groups": 1, "conv_kernel": 4, "num_heads": 80, "head_dim": 64,
           "torch_dtype": "bfloat16"}  # fmt: skip
    spec = read_config(cfg, name="mamba2")
    state = spec.caches[0]
    assert isinstance(state, StateCache)
    assert (state.conv_elements, state.recurrent_elements) == (16_128, 655_360)
    assert run(spec, tokens=10_000, batch=2).total_bytes == 2 * 64 * 1_342_976


def test_hybrid_layer_types_with_mamba2_fields() -> None:
    # Granite-4-style hybrid: layer_types "mamba"/"attention", SSM width from mamba_n_heads x
    # mamba_d_head = 48 x 32 = 1536, d_state 128, 1 group, d_conv 4:
    # conv (1536 + 256) x 3 = 5,376; SSM 1536 x 128 = 196,608.
    cfg = {"model_type": "granitemoehybrid", "hidden_size": 768, "num_hidden_layers": 4,
           "num_attention_heads": 12, "num_key_value_heads": 4,
           "layer_types": ["mamba", "mamba", "mamba", "attention"],
           "mamba_n_heads": 48, "mamba_d_head": 32, "mamba_d_state": 128, "mamba_n_groups": 1,
           "mamba_d_conv": 4, "mamba_expand": 2, "torch_dtype": "bfloat16"}  # fmt: skip
    spec = read_config(cfg, name="hybrid")
    assert layers_by_kind(spec) == {"mamba": 3, "full_attention": 1}
    state = spec.caches[0]
    assert isinstance(state, StateCache)
    assert (state.conv_elements, state.recurrent_elements) == (5_376, 196_608)
    # One attention layer: 2 x 4 heads x 64 (768 / 12) x 2 B = 1,024 B per token.
    assert run(spec, tokens=100).total_bytes == 3 * (5_376 + 196_608) * 2 + 100 * 1_024


# Kimi-Linear, Granite-4.0-H and Nemotron-3-Nano (tests/helpers/kimi_granite_families.py): the
# presets and the configs transformers re-saves read as the real configs do.
@pytest.mark.parametrize(
    ("preset", "fixture"),
    [("kimi-linear-48b-a3b", KIMI), ("granite-4.0-h-micro", GRANITE), ("nemotron-3-nano-30b-a3b", NANO)],
)
def test_preset_agrees_with_real_config(preset: str, fixture: str) -> None:
    from_preset = read_config(copy.deepcopy(load_presets()[preset].config), name=preset)
    from_file = read_config(fixture_config(fixture), name=preset)
    assert from_preset.caches == from_file.caches
    assert (from_preset.layers, from_preset.query_heads) == (from_file.layers, from_file.query_heads)
    assert from_preset.warnings == () and from_preset.notes == ()
    # The trimmed Granite fixture names no dtype; the preset says bfloat16 (IBM's BF16 checkpoints).
    assert from_preset.dtype == BF16 and from_file.dtype in (BF16, None)


@pytest.mark.parametrize(("fixture", "model_type"), [(KIMI, "kimi_linear"), (GRANITE, "granitemoehybrid")])
def test_config_resaved_by_transformers_reads_the_same(fixture: str, model_type: str) -> None:
    # transformers 5.24 writes an explicit layer_types ("linear_attention" / "full_attention") and
    # its derived fields (linear_head_dim, qk_head_dim, mlp_layer_types, ...).
    pytest.importorskip("transformers", reason="transformers is not installed")
    import json

    from transformers import AutoConfig

    raw = fixture_config(fixture)
    fields = {k: v for k, v in raw.items() if k not in ("model_type", "auto_map", "architectures")}
    saved = json.loads(AutoConfig.for_model(model_type, **fields).to_json_string())
    assert any(t in ("linear_attention", "full_attention") for t in saved["layer_types"])
    from_saved, from_file = read_config(saved, name="saved"), read_config(raw, name="file")
    assert from_saved.caches == from_file.caches
    assert from_saved.warnings == ()
