"""The runtime model of each engine (kvcalc.calc.runtime): what vLLM, SGLang and llama.cpp take from a GPU
besides weights and KV cache. Figures derived by hand from each engine's rules (cited in
kvcalc.calc.runtime), and llama.cpp's compute buffer checked against the real llama.cpp."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from kvcalc import api
from kvcalc.engines.llamacpp.probe import GgufPlan, llama_cpp_available, measure
from kvcalc.engines.llamacpp.runtime import llamacpp_compute_bytes
from kvcalc.engines.sglang.runtime import sglang_defaults, sglang_mem_fraction_static
from kvcalc.engines.vllm.runtime import vllm_activation_peak, vllm_batch_defaults, vllm_utilization
from kvcalc.gpus import find_gpu
from kvcalc.inputs.hf.dims import ModelDims, read_dims
from tests.conftest import FIXTURES

LLAMA_8B = read_dims(json.loads((FIXTURES / "Llama-3.1-8B.json").read_text()))


def test_dims_of_real_configs() -> None:
    assert ModelDims(hidden=4096, layers=32, vocab=128256, intermediate=14336, heads=32, kv_heads=8,
                                 head_dim=128) == LLAMA_8B  # fmt: skip
    mixtral = read_dims(json.loads((FIXTURES / "Mixtral-8x7B-v0.1.json").read_text()))
    # Mixtral's intermediate_size is its experts' width; every layer routes.
    assert mixtral is not None and (mixtral.experts, mixtral.top_k, mixtral.expert_intermediate) == (8, 2, 14336)
    assert mixtral.intermediate == 0
    deepseek = read_dims(json.loads((FIXTURES / "DeepSeek-V3.2.json").read_text()))
    # first_k_dense_replace 3: dense layers of 18,432 beside 256 experts of 2,048 (8 routed, 1 shared).
    assert deepseek is not None and (deepseek.intermediate, deepseek.expert_intermediate) == (18432, 2048)
    assert deepseek.shared_intermediate == 2048
    assert read_dims({"model_type": "x", "hidden_size": 8}) is None  # no layers, no vocabulary


@pytest.mark.parametrize(
    ("gpu", "tp", "share"),
    [
        # nvidia-smi MiB; reserved = 512 + 1.5 x chunked_prefill + 2 x cuda_graph_max_bs + tp / 8 x 1024.
        ("h100-sxm", 1, 0.835),  # 512 + 12,288 + 512 + 128 = 13,440; (81,559 - 13,440) / 81,559 = 0.8352
        ("h200", 1, 0.907),  # (143,771 - 13,440) / 143,771 = 0.9065
        # 20-35 GiB (0.5.23, sgl-project/sglang#37898): chunked_prefill_size 4,096, cuda_graph_max_bs 48:
        ("l4", 1, 0.701),  # 512 + 6,144 + 96 + 128 = 6,880; (23,034 - 6,880) / 23,034 = 0.7013
        ("b200", 8, 0.852),  # 512 + 24,576 + 1,024 + 1,024 = 27,136; (183,359 - 27,136) / 183,359 = 0.8520
    ],
)
def test_sglang_mem_fraction_static(gpu: str, tp: int, share: float) -> None:
    assert sglang_mem_fraction_static(find_gpu(gpu).smi_mib, tp)[0] == share


def test_sglang_mid_tier_defaults_by_release() -> None:
    # Before sgl-project/sglang#37898 (0.5.18 and older) the 20-35 GiB tier was chunked_prefill_size
    # 2,048 and cuda_graph_max_bs 24 (tp >= 4: 80): the L4's reserve 512 + 3,072 + 48 + 128 = 3,760;
    # (23,034 - 3,760) / 23,034 = 0.8368.
    l4 = find_gpu("l4").smi_mib
    assert sglang_defaults(l4, 1, (0, 5, 18)) == (2048, 24) and sglang_defaults(l4, 4, (0, 5, 18)) == (2048, 80)
    assert sglang_defaults(l4, 1) == (4096, 48) and sglang_defaults(l4, 4) == (4096, 160)
    assert sglang_mem_fraction_static(l4, 1, 1, (0, 5, 18))[0] == 0.837


def test_vllm_defaults_by_gpu_and_release() -> None:
    # get_batch_defaults (vllm serve): >= 160 GiB 16,384 / 1,024; >= 70 GiB and not an A100 8,192 /
    # 1,024; otherwise 2,048 / 256.
    assert vllm_batch_defaults(find_gpu("b200").runtime_bytes, "b200")[:2] == (16384, 1024)
    assert vllm_batch_defaults(find_gpu("h100").runtime_bytes, "h100-sxm")[:2] == (8192, 1024)
    assert vllm_batch_defaults(find_gpu("a100-80gb").runtime_bytes, "a100-80gb")[:2] == (2048, 256)
    assert vllm_batch_defaults(find_gpu("l40s").runtime_bytes, "l40s")[:2] == (2048, 256)
    assert vllm_utilization((0, 20, 0)) == Fraction(9, 10)
    assert vllm_utilization((0, 21, 0)) == Fraction(92, 100)


def test_vllm_sampler_peak_sort_based() -> None:
    # vLLM 0.11, Llama 3.1 8B, 8,192 batched tokens, 1,024 rows: hidden 8,192 x 4,096 x 2 = 67,108,864;
    # the rows' hidden 1,024 x 4,096 x 2 = 8,388,608; logits 1,024 x 128,256 = 131,334,144 x (2 B +
    # 1.25e9 / (256 x 131,072) B measured by vLLM PR #32558) = 262,668,288 + 4,892,578,125.
    peak, how = vllm_activation_peak(LLAMA_8B, tokens=8192, rows=1024, tp=1, b=2, version=(0, 11, 0))  # type: ignore[arg-type]
    assert peak == 67_108_864 + 8_388_608 + 262_668_288 + 4_892_578_125 == 5_230_743_885
    assert "sampler" in how and "PR #32558" in how


def test_vllm_sampler_peak_triton() -> None:
    # From 0.16 the Triton top-k/top-p masks in place: 2 + 4 + 4 + 4 = 14 B per logit.
    peak, _ = vllm_activation_peak(LLAMA_8B, tokens=8192, rows=1024, tp=1, b=2, version=(0, 32, 0))  # type: ignore[arg-type]
    assert peak == 67_108_864 + 8_388_608 + 131_334_144 * 14 == 1_914_175_488


def test_vllm_forward_peak_when_few_rows() -> None:
    # 256 rows of 128,256 x 14 B = 459,669,504 + hidden 8,192 x 4,096 x 2 + 256 x 4,096 x 2 =
    # 528,875,520; the MLP at 8,192 tokens: 8,192 x (2 x 4,096 + 3 x 14,336) x 2 = 838,860,800.
    peak, how = vllm_activation_peak(LLAMA_8B, tokens=8192, rows=256, tp=1, b=2, version=(0, 32, 0))  # type: ignore[arg-type]
    assert peak == 8192 * (2 * 4096 + 3 * 14336) * 2 == 838_860_800
    assert "MLP" in how


def test_fit_vllm_budget_lines() -> None:
    # H100 (85,017,755,648 B) x 0.9 = 76,515,980,083; weights 16,060,522,496 (preset, index total_size);
    # activation 5,230,743,885 (above); non-torch 140 MiB = 146,800,640; vLLM 0.11 counts no CUDA graphs.
    report = api.fit("llama-3.1-8b", gpu="h100", engine="vllm@0.11", tokens=4096)
    lines = {line.label: line.bytes for line in report.budget.lines}
    assert lines["x gpu_memory_utilization 0.9"] == 76_515_980_083
    assert lines["- activation peak (profiling run)"] == 5_230_743_885
    assert lines["- non-torch memory (assumed)"] == 146_800_640
    assert report.budget.kv_bytes == 76_515_980_083 - 16_060_522_496 - 5_230_743_885 - 146_800_640
    assert report.budget.kv_low is not None and report.budget.kv_high is not None
    assert report.budget.kv_low < report.budget.kv_bytes < report.budget.kv_high
    assert any("not derived" in line.detail for line in report.budget.lines)
    # 0.33 (plain vllm): 0.92, the Triton sampler, and CUDA graphs (512 MiB assumed) unless eager.
    current = api.fit("llama-3.1-8b", gpu="h100", engine="vllm", tokens=4096)
    assert "- CUDA graphs (vLLM's estimate, assumed)" in {line.label for line in current.budget.lines}
    eager = api.fit(
        "llama-3.1-8b", gpu="h100", tokens=4096, serving=api.Serving(engine="vllm", options={"enforce_eager": True})
    )
    assert eager.budget.kv_bytes - current.budget.kv_bytes == 2**29


def test_fit_overhead_replaces_the_model() -> None:
    report = api.fit(
        "llama-3.1-8b", gpu="h100", engine="vllm@0.11", tokens=4096, capacity=api.Capacity(overhead=3 * 2**30)
    )
    assert report.budget.kv_bytes == 76_515_980_083 - 16_060_522_496 - 3 * 2**30
    assert report.budget.kv_low is None


@pytest.mark.parametrize("engine", ["theoretical", "transformers"])
def test_default_overhead_says_it_is_a_default(engine: str) -> None:
    """An engine with no runtime model assumes 2 GiB = 2,147,483,648 B a GPU: the budget line says
    it is assumed, by default, for that engine, and never "as given" when --overhead was not."""
    line = next(x for x in api.fit("llama-3.1-8b", gpu="h100", engine=engine, tokens=4096).budget.lines
                if x.label.startswith("- activations and runtime"))  # fmt: skip
    assert (line.label, line.bytes) == ("- activations and runtime (assumed)", 2 * 2**30)
    assert line.detail.startswith("2,147,483,648 B assumed by default: ") and "as given" not in line.detail
    assert f"the {engine} engine has no runtime model" in line.detail and "--overhead" in line.detail
    given = next(x for x in api.fit("llama-3.1-8b", gpu="h100", engine=engine, tokens=4096,
                                    capacity=api.Capacity(overhead=2**30)).budget.lines
                 if x.label.startswith("- activations and runtime"))  # fmt: skip
    assert (given.label, given.detail) == ("- activations and runtime (--overhead)", "1,073,741,824 B as given")


def test_fit_sglang_claims_its_fraction() -> None:
    # (85,017,755,648 - 1 GiB assumed context) x 0.835 = 70,093,251,543 (floor); minus the weights.
    report = api.fit("llama-3.1-8b", gpu="h100", engine="sglang", tokens=4096)
    assert report.budget.kv_bytes == (85_017_755_648 - 2**30) * 835 // 1000 - 16_060_522_496


def test_vllm_loads_fp32_checkpoints_in_16_bits() -> None:
    # gemma-2-9b is stored in float32: 36,966,823,936 B; vLLM runs it in bf16, half that.
    report = api.fit("gemma-2-9b", gpu="h100", engine="vllm", tokens=4096)
    weights = next(line for line in report.budget.lines if line.label == "- weights")
    assert weights.bytes == 36_966_823_936 // 2
    assert any("holds this fp32 checkpoint in bf16: weights scaled to 16 bits" in n for n in report.notes)


@pytest.mark.parametrize(
    ("n_ctx", "ubatch", "flash", "expected"),
    [
        # Flash attention: the output head, 4 x 512 x (128,256 + 2 x 4,096) + 4 x 512 = 279,447,552.
        (32768, 512, True, 279_447_552),
        (4096, 2048, True, 4 * 2048 * (128256 + 8192) + 4 * 2048),
        # Without: inputs 20 x 512 + 8 x 512 x 1,024 + 32,768 x 512 x 4 = 71,313,408; attention adds
        # 4 x 512 x (3 x 4,096 + 2 x 4,096) = 41,943,040 and KQ 4 x 32,768 x 512 x 32 = 2,147,483,648.
        (32768, 512, False, 71_313_408 + 41_943_040 + 2_147_483_648),
    ],
)
def test_llamacpp_compute_buffer_by_hand(n_ctx: int, ubatch: int, flash: bool, expected: int) -> None:
    got, _ = llamacpp_compute_bytes(LLAMA_8B, n_ctx=n_ctx, n_ubatch=ubatch, n_batch=2048, flash_attn=flash)  # type: ignore[arg-type]
    assert got == expected


def _plan(dims: ModelDims, layers: int = 2) -> GgufPlan:
    """A GGUF of a llama-architecture model with these widths (no tensor data)."""
    a = "llama"
    keys: list[tuple[str, str, object]] = [
        ("general.architecture", "string", a), ("general.name", "string", "compute buffer check"),
        (f"{a}.context_length", "uint32", 131072), (f"{a}.embedding_length", "uint32", dims.hidden),
        (f"{a}.feed_forward_length", "uint32", dims.intermediate or dims.expert_intermediate),
        (f"{a}.block_count", "uint32", layers), (f"{a}.vocab_size", "uint32", dims.vocab),
        (f"{a}.attention.layer_norm_rms_epsilon", "float32", 1e-5), ("tokenizer.ggml.model", "string", "none"),
        (f"{a}.attention.head_count", "uint32", dims.heads), (f"{a}.attention.head_count_kv", "uint32", dims.kv_heads),
        (f"{a}.attention.key_length", "uint32", dims.head_dim),
        (f"{a}.attention.value_length", "uint32", dims.head_dim),
        (f"{a}.rope.dimension_count", "uint32", dims.head_dim),
    ]  # fmt: skip
    if dims.is_moe:
        keys += [(f"{a}.expert_count", "uint32", dims.experts), (f"{a}.expert_used_count", "uint32", dims.top_k)]
    return GgufPlan(a, tuple(keys))


@pytest.mark.skipif(not llama_cpp_available(), reason="needs the llamacpp extra (llama-cpp-python, gguf)")
def test_llamacpp_compute_buffer_matches_real_llamacpp() -> None:
    """llama.cpp's own "CPU compute buffer size = X MiB" for real widths (Llama 3.1 8B, Mixtral,
    Qwen2.5-0.5B) agrees with the formula to the printed 0.01 MiB, except where ggml's allocator
    fits a tensor into a gap (Qwen2.5-0.5B without flash attention: 300.25 MiB for 302.00
    measured, -0.6%), which stays inside the range fit shows (-8% / +8%)."""
    mixtral = read_dims(json.loads((FIXTURES / "Mixtral-8x7B-v0.1.json").read_text()))
    small = ModelDims(hidden=896, layers=24, vocab=151936, intermediate=4864, heads=14, kv_heads=2, head_dim=64)
    cases = [(LLAMA_8B, 4096, 512, True, True), (LLAMA_8B, 8192, 1024, False, True),
             (LLAMA_8B, 16384, 512, False, True), (mixtral, 2048, 512, True, True), (small, 8192, 512, False, False),
             (small, 4096, 256, True, True)]  # fmt: skip
    for dims, n_ctx, ubatch, flash, exact in cases:
        assert dims is not None
        context = {"n_ctx": n_ctx, "n_seq_max": 1, "n_batch": 2048, "n_ubatch": ubatch, "kv_unified": False,
                   "swa_full": False, "type_k": "f16", "type_v": "f16", "flash_attn": flash}  # fmt: skip
        answer = measure(_plan(dims), [context], no_alloc=True)
        logged = answer["results"][0]["compute_mib"]["CPU"]
        expected, _ = llamacpp_compute_bytes(dims, n_ctx=n_ctx, n_ubatch=ubatch, n_batch=2048, flash_attn=flash)
        if exact:
            assert f"{expected / 2**20:.2f}" == logged, (dims, n_ctx, ubatch, flash)
        else:
            assert abs(expected / 2**20 / float(logged) - 1) < 0.01, (dims, n_ctx, ubatch, flash, logged)
