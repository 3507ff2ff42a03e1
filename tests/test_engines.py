"""Serving semantics: engines, KV formats with metadata, parallel layout, shared prefixes, request
mixes. Every figure is derived by hand next to it; engine rules cite the engine's own source."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kvcalc import load_model, model_from_geometry
from kvcalc.calc.estimate import Workload, pipeline_stages
from kvcalc.calc.requests import parse_lengths, summarize_requests
from kvcalc.dtypes import FP16, Q4_0, Q8_0, group_quantized, parse_dtype
from kvcalc.engines import VLLM, LlamaCpp, SGLang, Transformers, make_engine
from kvcalc.errors import SourceError, UsageError
from tests.helpers.theoretical import estimate

LLAMA_8B = load_model("llama-3.1-8b")  # 32 layers, 8 KV heads x 128, bf16: 131,072 B/token


# --- vLLM paging ------------------------------------------------------------------------------


def test_vllm_rounds_each_sequence_up_to_16_token_blocks() -> None:
    # Issue check: T = 1000 -> cdiv(1000, 16) = 63 blocks = 1,008 token slots x 131,072 B.
    est = estimate(LLAMA_8B, Workload(tokens=1000), engine=VLLM())
    assert est.groups[0].tokens_kept == 1008
    assert est.total_bytes == 1008 * 131_072 == 132_120_576


def test_vllm_sliding_layers_reserve_window_plus_batched_tokens_plus_one_block() -> None:
    # vllm/v1/kv_cache_interface.py SlidingWindowSpec: cdiv(min(W - 1 + max_num_batched_tokens, T), 16) + 1.
    # gpt-oss-20b (W = 128) at T = 32,768 with 8,192 batched tokens: cdiv(8,319, 16) + 1 = 521 blocks
    # = 8,336 slots in each of the 12 sliding layers; the 12 full layers hold 2,048 blocks = 32,768.
    # One batch in flight: vLLM up to 0.25 (tests/engines/vllm/test_releases.py has 0.26's two batches).
    spec = load_model("gpt-oss-20b")
    est = estimate(spec, Workload(tokens=32_768), engine=VLLM(version=(0, 25, 0)))
    kept = {g.kind: g.tokens_kept for g in est.groups}
    assert kept == {"sliding_attention": 8_336, "full_attention": 32_768}
    # Never more than the full sequence: at T = 1,000 a sliding layer holds cdiv(1000, 16) = 63 blocks.
    short = estimate(spec, Workload(tokens=1000), engine=VLLM())
    assert {g.tokens_kept for g in short.groups} == {1008}


def test_vllm_mla_models_get_64_token_blocks() -> None:
    # vllm/platforms/cuda.py: FlashMLA forces block_size 64. DeepSeek-V2-Lite, T = 1000:
    # cdiv(1000, 64) = 16 blocks = 1,024 slots x 27 layers x 576 x 2 B.
    spec = load_model("deepseek-v2-lite")
    engine, notes = make_engine("vllm", uses_mla=True)
    est = estimate(spec, Workload(tokens=1000), engine=engine)
    assert est.total_bytes == 1024 * 27 * 576 * 2
    assert any("64" in n for n in notes)


# --- tensor and pipeline parallel -----------------------------------------------------------------


def test_tp8_llama_70b_per_gpu_per_token() -> None:
    # Issue check: 8 KV heads over 8 ranks = 1 head per GPU: 2 x 80 x 1 x 128 x 2 = 40,960 B/token.
    est = estimate(load_model("llama-3.1-70b"), Workload(tokens=1000, tp=8), engine=VLLM())
    assert est.per_gpu_token_bytes == 40_960
    assert est.groups[0].kv_heads_per_gpu == 1
    # The whole cache is the same as on one GPU: 8 x 40,960 = 327,680 B/token.
    assert est.per_token_bytes == 327_680
    assert est.total_bytes == 8 * est.per_gpu_bytes


def test_tp8_mla_latent_is_replicated() -> None:
    # Issue check: DeepSeek-V3 at TP = 8 keeps the whole 61 x 576 x 2 = 70,272 B/token on every GPU.
    est = estimate(load_model("deepseek-v3"), Workload(tokens=1, tp=8))
    assert est.per_gpu_token_bytes == 70_272
    assert est.total_bytes == 8 * 70_272


def test_tp16_on_8_kv_heads_replicates_one_head_per_rank() -> None:
    # max(1, 8 // 16) = 1 head per rank, so 16 ranks hold 16 head copies: twice the TP-1 cache.
    est = estimate(load_model("llama-3.1-70b"), Workload(tokens=1000, tp=16))
    assert est.groups[0].kv_heads_per_gpu == 1
    assert est.per_gpu_token_bytes == 40_960
    assert est.total_bytes == 16 * 40_960 * 1000 == 2 * 327_680 * 1000


@pytest.mark.parametrize(
    ("tp", "message"),
    [(3, "does not divide the 32 query heads"), (64, "does not divide the 32 query heads")],
)
def test_tp_must_split_heads(tp: int, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        estimate(LLAMA_8B, Workload(tokens=10, tp=tp))


def test_pipeline_stages_follow_vllm_get_pp_indices() -> None:
    # vllm/distributed/utils.py get_pp_indices: extra layers go to the stages before the last;
    # vLLM's own test example: 45 layers over 4 stages -> [11, 11, 12, 11].
    assert [len(s) for s in pipeline_stages(45, 4)] == [11, 11, 12, 11]
    assert [len(s) for s in pipeline_stages(32, 3)] == [11, 11, 10]
    # Llama 3.1 8B over 3 stages: the most loaded GPU holds 11 layers x 4,096 B = 45,056 B/token.
    est = estimate(LLAMA_8B, Workload(tokens=100, pp=3))
    assert est.per_gpu_token_bytes == 11 * 4096
    assert est.per_gpu_bytes == 11 * 4096 * 100
    assert est.total_bytes == 32 * 4096 * 100


def test_data_parallel_splits_the_batch() -> None:
    # 9 sequences over 2 replicas: 5 + 4; the most loaded GPU holds 5 x 2,048 x 131,072 B.
    est = estimate(LLAMA_8B, Workload(tokens=2048, batch=9, dp=2))
    assert est.per_gpu_bytes == 5 * 2048 * 131_072
    assert est.total_bytes == 9 * 2048 * 131_072
    with pytest.raises(UsageError, match="at least 4 sequences"):
        Workload(tokens=1, batch=3, dp=4)


# --- llama.cpp ------------------------------------------------------------------------------------


def test_llama_cpp_q8_0_per_token_and_256_padding() -> None:
    # Issue check: q8_0 K and V rows of 1,024 elements = 1024 / 32 x 34 = 1,088 B each:
    # 32 x 2 x 1,088 = 69,632 B/token; 1,000 tokens pad to 1,024 cells.
    engine = LlamaCpp()
    est = estimate(LLAMA_8B, Workload(tokens=1000, kv_dtype=Q8_0), engine=engine)
    assert est.per_token_bytes == 69_632
    assert est.total_bytes == 1024 * 69_632 == 71_303_168
    # The fp16 scales: 32 blocks per row x 2 B x 2 rows x 32 layers x 1,024 cells.
    assert est.metadata_bytes == 32 * 2 * 2 * 32 * 1024 == 4_194_304


def test_llama_cpp_separate_k_and_v_types() -> None:
    # -ctk f16 -ctv q4_0: K 1,024 x 2 = 2,048 B, V 1024 / 32 x 18 = 576 B per layer per token.
    est = estimate(LLAMA_8B, Workload(tokens=256, kv_dtype=FP16, v_dtype=Q4_0), engine=LlamaCpp())
    assert est.per_token_bytes == 32 * (2048 + 576) == 83_968
    assert est.total_bytes == 256 * 83_968


def test_llama_cpp_sliding_layers_keep_window_plus_ubatch() -> None:
    # llama-kv-cache-iswa.cpp: SWA cells = pad(min(cells, W x (unified ? n_seq : 1) + n_ubatch), 256).
    # gpt-oss-20b (W = 128, 12 sliding + 12 full, 8 x (64 + 64) x 2 = 2,048 B per token per layer):
    spec = load_model("gpt-oss-20b")
    one = estimate(spec, Workload(tokens=1000), engine=LlamaCpp())
    # Full: pad(1000, 256) = 1,024 cells; sliding: pad(min(1024, 128 + 512), 256) = 768 cells.
    assert {g.kind: g.slots for g in one.groups} == {"sliding_attention": 768, "full_attention": 1024}
    assert one.total_bytes == 12 * 1024 * 2048 + 12 * 768 * 2048 == 44_040_192
    # 4 slots of 1,000: n_ctx = pad(4,000, 256) = 4,096. Separate streams (the -np default):
    # 4 x pad(4096 / 4, 256) = 4 x 1,024 full cells and 4 x 768 sliding cells.
    four = estimate(spec, Workload(tokens=1000, batch=4), engine=LlamaCpp())
    assert {g.kind: g.slots for g in four.groups} == {"sliding_attention": 4 * 768, "full_attention": 4096}
    # Unified (-kvu): one stream of 4,096 cells; sliding pad(min(4096, 128 x 4 + 512), 256) = 1,024.
    unified = estimate(spec, Workload(tokens=1000, batch=4), engine=LlamaCpp(unified=True))
    assert {g.kind: g.slots for g in unified.groups} == {"sliding_attention": 1024, "full_attention": 4096}


def test_ggml_rows_must_be_whole_blocks() -> None:
    odd = model_from_geometry(layers=1, heads=1, kv_heads=1, head_dim=48)
    with pytest.raises(UsageError, match="blocks of 32"):
        estimate(odd, Workload(tokens=1, kv_dtype=Q8_0), engine=LlamaCpp())


# --- other engines --------------------------------------------------------------------------------


def test_transformers_sliding_layers_keep_w_minus_1() -> None:
    # cache_utils.py DynamicSlidingWindowLayer keeps sliding_window - 1 = 4,095 tokens (Mistral).
    est = estimate(load_model("mistral-7b-v0.1"), Workload(tokens=32_768), engine=Transformers())
    assert est.groups[0].tokens_kept == 4095
    assert est.total_bytes == 4095 * 131_072


def test_sglang_pages() -> None:
    # One cell per token in every layer, allocated in pages: 1,000 tokens in 64-token pages = 1,024.
    assert estimate(LLAMA_8B, Workload(tokens=1000), engine=SGLang(page_size=64)).total_bytes == 1024 * 131_072
    assert estimate(LLAMA_8B, Workload(tokens=1000), engine=SGLang()).total_bytes == 1000 * 131_072


@pytest.mark.parametrize(
    ("engine", "dtype", "message"),
    [("vllm", "int4", "vLLM stores"), ("sglang", "q8_0", "SGLang stores"), ("llama.cpp", "fp8", "llama.cpp cache")],
)
def test_engines_refuse_formats_they_do_not_store(engine: str, dtype: str, message: str) -> None:
    chosen, _ = make_engine(engine)
    with pytest.raises(UsageError, match=message):
        estimate(LLAMA_8B, Workload(tokens=1, kv_dtype=parse_dtype(dtype)), engine=chosen)


def test_unknown_engine() -> None:
    with pytest.raises(UsageError, match="unknown engine 'tgi'"):
        make_engine("tgi")


@pytest.mark.parametrize(("name", "gpu", "platform"), [
    ("sglang", None, "cuda"), ("sglang", "rocm", "rocm"), ("sglang-rocm", None, "rocm"),
    ("sglang-rocm@0.5.8", "rocm", "rocm"), ("sglang", "metal", "cuda"),
])  # fmt: skip
def test_the_gpu_or_the_name_picks_the_platform(name: str, gpu: str | None, platform: str) -> None:
    # SGLang keeps "cuda" for every platform but ROCm (its rules differ on no other).
    engine, _ = make_engine(name, platform=gpu)
    assert isinstance(engine, SGLang) and engine.platform == platform


def test_a_name_for_rocm_on_another_gpu_is_refused() -> None:
    with pytest.raises(UsageError, match="runs on AMD GPUs") as caught:
        make_engine("sglang-rocm", platform="cuda")
    assert caught.value.params == ("engine",)


@pytest.mark.parametrize("name", ["vllm-cpu", "llama.cpp", "transformers", "theoretical"])
def test_rocm_changes_nothing_for_engines_without_rocm_rules(name: str) -> None:
    # vllm-cpu names its own platform, which wins over the GPU's (vLLM's ROCm rules:
    # tests/engines/vllm/test_rules.py).
    assert make_engine(name, platform="rocm") == make_engine(name)


# --- quantized KV with metadata -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bits", "group", "row_bytes"),
    [
        # A 1,024-element row (8 heads x 128): data bits / 8 + one fp16 scale + one fp16 zero per group.
        (8, 64, 1024 + 16 * 4),  # 1,088
        (4, 64, 512 + 16 * 4),  # 576
        (2, 64, 256 + 16 * 4),  # 320
        (4, 128, 512 + 8 * 4),  # 544
    ],
)
def test_group_quantized_rows(bits: int, group: int, row_bytes: int) -> None:
    dtype = group_quantized(bits, group)
    est = estimate(LLAMA_8B, Workload(tokens=1, kv_dtype=dtype))
    assert est.per_token_bytes == 32 * 2 * row_bytes
    groups = 1024 // group
    assert est.metadata_bytes == 32 * 2 * groups * 4


def test_quantized_residual_stays_in_model_dtype() -> None:
    # int4, 1,000 tokens, the newest 127 in bf16 (4,096 B per layer per token), the other 873 at
    # 2 x 576 = 1,152 B: 32 x (873 x 1,152 + 127 x 4,096) = 48,828,416.
    est = estimate(LLAMA_8B, Workload(tokens=1000, kv_dtype=group_quantized(4), residual_tokens=127))
    assert est.total_bytes == 32 * (873 * 1152 + 127 * 4096) == 48_828_416
    assert est.metadata_bytes == 32 * 873 * 2 * 16 * 4


def test_fp8_halves_fp16() -> None:
    fp16 = estimate(LLAMA_8B, Workload(tokens=777, kv_dtype=FP16)).total_bytes
    assert estimate(LLAMA_8B, Workload(tokens=777, kv_dtype=parse_dtype("fp8_e5m2"))).total_bytes * 2 == fp16


# --- shared prefixes --------------------------------------------------------------------------------


def test_shared_prefix_is_cached_once() -> None:
    # 4 sequences of 2,048 sharing 1,024: 4 x 2,048 - 3 x 1,024 = 5,120 slots per layer.
    est = estimate(LLAMA_8B, Workload(tokens=2048, batch=4, shared_prefix=1024))
    assert est.total_bytes == 5120 * 131_072
    # Paged (vLLM): only whole 16-token blocks are shared: 1000 -> 992 tokens (62 blocks);
    # 4 x 2,048 - 3 x 992 = 5,216 slots.
    paged = estimate(LLAMA_8B, Workload(tokens=2048, batch=4, shared_prefix=1000), engine=VLLM())
    assert paged.total_bytes == 5216 * 131_072


def test_shared_prefix_outside_the_window_is_already_gone() -> None:
    # Mistral (W = 4,096), 2 sequences of 8,192 sharing 6,000: a sliding layer keeps positions
    # 4,096..8,191, of which 4,096..5,999 (1,904) are shared: 2 x 4,096 - 1,904 = 6,288 slots.
    est = estimate(load_model("mistral-7b-v0.1"), Workload(tokens=8192, batch=2, shared_prefix=6000))
    assert est.groups[0].slots == 6288
    with pytest.raises(UsageError, match="longer than"):
        Workload(tokens=10, shared_prefix=11)


# --- request mixes -----------------------------------------------------------------------------------


def test_lengths_csv_total_and_percentiles(tmp_path: Path) -> None:
    # Three requests of 128, 1,024 and 3,072 tokens at 131,072 B/token.
    requests = parse_lengths("prompt,output\n100,28\n1000,24\n3000,72\n", name="mix.csv")
    summary = summarize_requests(LLAMA_8B, Workload(tokens=1), VLLM(), requests)
    # vLLM blocks: 128, 1,024 and 3,072 are whole blocks already.
    assert summary.lengths == ((128, 1, 128 * 131_072), (1024, 1, 1024 * 131_072), (3072, 1, 3072 * 131_072))
    assert summary.total_bytes == (128 + 1024 + 3072) * 131_072 == 553_648_128
    assert (summary.requests, summary.prompt_tokens, summary.output_tokens) == (3, 4100, 124)
    # Nearest rank: p50 is the 2nd of 3 (ceil(1.5)), p90 the 3rd (ceil(2.7)).
    assert summary.bytes_percentile(50) == 1024 * 131_072
    assert summary.bytes_percentile(90) == 3072 * 131_072
    assert summary.tokens_percentile(50) == 1024


def test_lengths_jsonl_and_cli(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "mix.jsonl"
    path.write_text('{"prompt": 1000, "output": 48}\n{"tokens": 2048}\n\n{"prompt": 10, "output": 0}\n')
    data = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--json").json()
    assert data["requests"] == 3
    assert data["total_bytes"] == (1048 + 2048 + 10) * 131_072
    assert data["tokens"]["max"] == 2048


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "is empty"), ("prompt,output\n", "lists no requests"), ("prompt\nabc\n", "whole numbers"),
     ("x,y\n1,2\n", "field 'x' is not one kvcalc reads"), ('{"prompt": 0}\n', "0 tokens"),
     ("{bad\n", "not JSON")],
)  # fmt: skip
def test_lengths_errors(text: str, message: str) -> None:
    # A request mix that cannot be read is a failure of its file (exit 1), as an unreadable MODEL is
    with pytest.raises(SourceError, match=message):
        parse_lengths(text, name="mix")


# --- the CLI ----------------------------------------------------------------------------------------


def test_estimate_engine_flags_and_vs_theoretical(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "-t", "1000", "--engine", "vllm", "--vs-theoretical", "--json")
    data = result.json()
    assert data["engine"] == "vllm"
    assert data["total_bytes"] == 132_120_576
    assert data["theoretical_total_bytes"] == 131_072_000
    assert data["difference_bytes"] == 1_048_576  # 8 extra slots x 131,072
    table = run_cli("estimate", "llama-3.1-8b", "-t", "1000", "--engine", "vllm", "--vs-theoretical").stdout
    assert "difference     +1,048,576 bytes (+0.80%)" in table


def test_estimate_llama_cpp_k_v_types_and_tp_json(run_cli) -> None:
    data = run_cli("estimate", "llama-3.1-8b", "-t", "1000", "--engine", "llama.cpp", "--k-dtype", "q8_0",
                   "--v-dtype", "q8_0", "--json").json()  # fmt: skip
    assert (data["total_bytes"], data["kv_dtype"], data["v_dtype"]) == (71_303_168, "q8_0", "q8_0")
    assert data["bytes_per_element"] is None and data["metadata_bytes"] == 4_194_304
    tp = run_cli("estimate", "llama-3.1-70b", "-t", "1", "--tp", "8", "--json").json()
    assert (tp["per_gpu_token_bytes"], tp["gpus"]) == (40_960, 8)


def test_transformers_default_residual_note(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "-t", "1000", "--engine", "transformers", "--kv-dtype", "int4",
                     "--json")  # fmt: skip
    data = result.json()
    assert data["total_bytes"] == 48_828_416  # as in test_quantized_residual_stays_in_model_dtype
    assert any("127" in n for n in data["notes"])


@pytest.mark.parametrize("kv_dtype", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "fp8_e5m2"])
def test_transformers_refuses_formats_it_has_no_cache_for(run_cli, kv_dtype: str) -> None:
    """QuantizedCache's backends (cache_utils.py, transformers 5.24) are quanto (nbits 2, 4), hqq
    (1, 2, 3, 4, 8) and fp8 (float8_e4m3fn): llama.cpp's block types and e5m2 got a figure (q4_0:
    48,828,416 B with the QuantizedCache note) for a cache transformers cannot build."""
    result = run_cli("estimate", "llama-3.1-8b", "-t", "1000", "--engine", "transformers", "--kv-dtype", kv_dtype)
    assert result.exit_code == 2
    assert result.stderr.startswith("kvcalc: error: transformers caches K/V in the model's dtype or QuantizedCache")
    assert result.stderr.endswith(f"not {kv_dtype}\n") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("kv_dtype", ["fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "int8", "int4", "int2"])
def test_transformers_takes_its_own_formats(run_cli, kv_dtype: str) -> None:
    assert (
        run_cli("estimate", "llama-3.1-8b", "-t", "1000", "--engine", "transformers", "--kv-dtype", kv_dtype).exit_code
        == 0
    )


def test_workload_replace_keeps_validation() -> None:
    with pytest.raises(UsageError):
        replace(Workload(tokens=1), tp=0)


def test_transformers_falcon_new_architecture_caches_every_query_head() -> None:
    # modeling_falcon.py broadcasts the 8 grouped K/V heads to all 128 query heads before caching
    # (measured by kvcalc probe): 2 x 60 x 128 x 64 x 2 B = 1,966,080 B/token, 16x vLLM's 122,880.
    spec = load_model("falcon-40b")
    assert estimate(spec, Workload(tokens=1), engine=Transformers()).per_token_bytes == 1_966_080
    assert estimate(spec, Workload(tokens=1), engine=VLLM()).per_token_bytes == 122_880
