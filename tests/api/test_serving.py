"""The serving parameters every command resolves (kvcalc.api._serving): K and V formats given apart,
and a length past the model's context limit noted once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvcalc import api
from kvcalc.calc.requests import Request
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error
from tests.helpers.llama_cpp import needs_llama_cpp

# Llama-3.1-8B at 1,000 tokens in llama.cpp: 1,024 cells (n_ctx padded to 256), 32 layers, 8 KV
# heads x 128 dims = 1,024 elements per row. K q8_0: 32 blocks of 34 B = 1,088 B; V f16: 2,048 B.
LLAMA8B_Q8_K_F16_V = (1_088 + 2_048) * 32 * 1_024
assert LLAMA8B_Q8_K_F16_V == 102_760_448


def test_k_dtype_alone_leaves_v_at_the_engine_default_in_estimate() -> None:
    est = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving(engine="llama.cpp", k_dtype="q8_0"))
    assert est.kv_dtype.name == "q8_0" and est.v_dtype is not None and est.v_dtype.name == "fp16"
    assert est.total_bytes == LLAMA8B_Q8_K_F16_V
    assert any("V format not given: fp16" in n for n in est.notes)


def test_k_dtype_alone_in_the_theoretical_engine_keeps_v_in_the_model_dtype() -> None:
    # 32 layers x 8 heads x 128 dims: K int8 isn't plain, so use fp8 for K: 1,024 B, V bf16 2,048 B
    est = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving(k_dtype="fp8"))
    assert est.v_dtype is not None and est.v_dtype.name == "bf16"
    assert est.total_bytes == (1_024 + 2_048) * 32 * 1_000


def test_v_dtype_alone_leaves_k_at_the_engine_default() -> None:
    est = api.estimate("llama-3.1-8b", tokens=1000, serving=api.Serving(engine="llama.cpp", v_dtype="q8_0"))
    assert est.kv_dtype.name == "fp16" and est.total_bytes == LLAMA8B_Q8_K_F16_V


def test_kv_dtype_with_k_dtype_sets_v_from_kv_dtype() -> None:
    est = api.estimate(
        "llama-3.1-8b", tokens=1000, serving=api.Serving(engine="llama.cpp", kv_dtype="q4_0", k_dtype="q8_0")
    )
    assert est.v_dtype is not None and est.v_dtype.name == "q4_0"
    assert est.total_bytes == (1_088 + 32 * 18) * 32 * 1_024


def test_k_dtype_alone_in_fit_and_offload() -> None:
    report = api.fit(
        "llama-3.1-8b",
        tokens=1000,
        serving=api.Serving(engine="llama.cpp", k_dtype="q8_0"),
        capacity=api.Capacity(kv_budget=10**9),
    )
    assert report.workload.kv_dtype is not None and report.workload.kv_dtype.name == "q8_0"
    assert report.workload.v_dtype is not None and report.workload.v_dtype.name == "fp16"
    off = api.fit_offload("llama-3.1-8b", gpu_layers=33, gpu_memory=80 * 2**30, tokens=1000,
                          serving=api.Serving("llama.cpp", k_dtype="q8_0"))  # fmt: skip
    assert off.workload.v_dtype is not None and off.workload.v_dtype.name == "fp16"


def test_k_dtype_alone_on_the_command_line(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--tokens", "1000", "--engine", "llama.cpp", "--k-dtype", "q8_0",
                     "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.json()["total_bytes"] == LLAMA8B_Q8_K_F16_V


@needs_llama_cpp
def test_k_dtype_alone_matches_the_real_llama_cpp() -> None:
    # llama.cpp 0c1e570 with -ctk q8_0 and no -ctv: V stays f16 (common/arg.cpp sets them apart)
    report = api.probe_llamacpp("llama-3.1-8b", tokens=1000, k_dtype="q8_0")
    assert report.request["type_k"] != report.request["type_v"]
    assert report.match, report.checks
    assert report.estimate.total_bytes == LLAMA8B_Q8_K_F16_V


def test_a_group_with_k_and_v_apart_says_mixed(run_cli) -> None:
    data = run_cli("estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--k-dtype", "q8_0", "--json").json()
    (group,) = data["groups"]
    assert (group["dtype"], group["k_dtype"], group["v_dtype"]) == ("mixed", "q8_0", "fp16")


def test_every_command_notes_a_length_past_the_model_limit_once() -> None:
    # Gemma-2-9B's max_position_embeddings is 8,192; 131,072 tokens is past it (a note, not an error)
    said = "131,072 tokens is past the model's context limit (max_position_embeddings 8,192)"
    est = api.estimate("gemma-2-9b", tokens=131_072)
    assert sum(said in n for n in est.notes) == 1
    comp = api.compare(["gemma-2-9b"], tokens=[4096, 131_072])
    assert sum(said in n for n in comp.notes) == 1
    speed = api.speed("gemma-2-9b", prompt=131_000, output=72, gpu="h100", sweep=[])
    assert sum(said in n for n in speed.notes) == 1
    mix = api.estimate_requests("gemma-2-9b", [Request(prompt=100, output=28), Request(prompt=131_000, output=72)])
    assert sum("1 request(s), the longest " + said in n for n in mix.notes) == 1
    assert not any("past the model's context limit" in n for n in api.estimate("gemma-2-9b", tokens=8192).notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "transformers"])
def test_k_and_v_formats_apart_are_refused_where_the_engine_has_one_format(run_cli, engine: str) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--engine", engine, "--k-dtype", "fp8")
    assert result.exit_code == 2
    assert_one_line_error(result, f"{engine} stores K and V in one format: give --kv-dtype")


def test_kv_dtype_beside_both_k_and_v_dtype_is_refused(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--engine", "llama.cpp", "--kv-dtype", "f16", "--k-dtype", "q8_0",
                     "--v-dtype", "q4_0")  # fmt: skip
    assert result.exit_code == 2
    assert_one_line_error(result, "--kv-dtype changes nothing when --k-dtype and --v-dtype are both given")


def test_k_dtype_on_a_model_without_k_or_v_is_refused(run_cli) -> None:
    result = run_cli("estimate", "mamba-2.8b", "--k-dtype", "fp8")
    assert result.exit_code == 2
    assert_one_line_error(result, "mamba-2.8b caches no K or V rows")


CASES: list[tuple[str, Callable[[], Any], tuple[str, ...]]] = [
    ("pp past the layers", lambda: api.speed("deepseek-v3", prompt=16, output=2, gpu="h100-sxm",
        layout=api.Layout(pp=1000)), ("pp",)),
    ("dp_attention, theoretical", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="h100-sxm",
        layout=api.Layout(tp=2, dp_attention=2)), ("dp_attention",)),
    ("dp_attention, llama.cpp", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="h100-sxm",
        engine="llama.cpp", layout=api.Layout(tp=2, dp_attention=2)), ("dp_attention",)),
    ("dp_attention, mlx", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="m4-max-64gb", engine="mlx",
        layout=api.Layout(tp=2, dp_attention=2)), ("dp_attention",)),
    # fit as speed: the engine's hook (engines/base.py check_attention_dp), where fit once took it
    *[(f"dp_attention, fit, {engine}", (lambda engine=engine, gpu=gpu: api.fit("llama-3.1-8b", gpu=gpu, engine=engine,
        layout=api.Layout(tp=2, dp_attention=2))), ("dp_attention",))
      for engine, gpu in (("theoretical", "h100-sxm"), ("transformers", "h100-sxm"), ("llama.cpp", "h100-sxm"),
                          ("llama-server", "h100-sxm"), ("mlx", "m4-max-64gb"))],
    ("max_kv_size 4", lambda: api.estimate("llama-3.1-8b", tokens=10, engine="mlx", options={"max_kv_size": 4}),
     ("max_kv_size",)),
    ("block_size 7", lambda: api.estimate("llama-3.1-8b", tokens=10, engine="vllm", options={"block_size": 7}),
     ("block_size",)),
    ("vllm on a Mac, fit", lambda: api.fit("llama-3.1-8b", gpu="m4-max-64gb", engine="vllm"), ("gpu",)),
    ("vllm on a Mac, speed", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="m4-max-64gb",
                                               engine="vllm"), ("gpu",)),
    ("mlx on an MI300X, fit", lambda: api.fit("llama-3.1-8b", gpu="mi300x", engine="mlx"), ("gpu",)),
    ("mlx on an MI300X, speed", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="mi300x", engine="mlx"),
     ("gpu",)),
    ("shared_prefix, llama.cpp", lambda: api.estimate("llama-3.1-8b", engine="llama.cpp",
        sequences=api.Sequences(tokens=100, batch=2, shared_prefix=50)), ("shared_prefix",)),
    ("shared_prefix, mlx", lambda: api.estimate("llama-3.1-8b", engine="mlx",
        sequences=api.Sequences(tokens=100, batch=2, shared_prefix=50)),
     ("shared_prefix",)),
]  # fmt: skip


@pytest.mark.parametrize(("call", "params"), [(c, p) for _, c, p in CASES], ids=[name for name, _, _ in CASES])
def test_refused_naming_the_parameter(call: Callable[[], Any], params: tuple[str, ...]) -> None:
    with pytest.raises(UsageError) as info:
        call()
    assert info.value.params == params
    assert params[0] in str(info.value)  # the CLI writes it as the flag


def test_engines_that_run_these_are_not_refused() -> None:
    # SGLang runs attention data-parallel; vLLM takes 32-token blocks; mlx-lm runs on a Mac
    api.speed(
        "llama-3.1-8b",
        prompt=16,
        output=2,
        gpu="h100-sxm",
        engine="sglang",
        sweep=[],
        layout=api.Layout(tp=2, dp_attention=2),
    )
    api.estimate("llama-3.1-8b", tokens=10, engine="vllm", options={"block_size": 32})
    api.fit("llama-3.1-8b", gpu="m4-max-64gb", engine="mlx")


# Issue 37: the API's parameter objects. A value given both by name and in its object, or a field
# the call does not read, is refused naming it (as a flag that changes nothing is).
OBJECT_CASES: list[tuple[str, Callable[[], Any], tuple[str, ...]]] = [
    ("tokens and sequences", lambda: api.estimate("llama-3.1-8b", tokens=10, sequences=api.Sequences(tokens=20)),
     ("sequences", "tokens")),
    ("batch and sequences", lambda: api.fit("llama-3.1-8b", gpu="h100-sxm", batch=2,
                                            sequences=api.Sequences(tokens=20)), ("sequences", "batch")),
    ("shared_prefix in fit", lambda: api.fit("llama-3.1-8b", gpu="h100-sxm",
                                             sequences=api.Sequences(tokens=20, shared_prefix=10)), ("shared_prefix",)),
    ("prompt in fit", lambda: api.fit("llama-3.1-8b", gpu="h100-sxm", sequences=api.Sequences(prompt=20)),
     ("prompt",)),
    ("dp_attention in estimate", lambda: api.estimate("llama-3.1-8b", tokens=10,
                                                      layout=api.Layout(tp=2, dp_attention=2)), ("dp_attention",)),
    ("ep in estimate", lambda: api.estimate("llama-3.1-8b", tokens=10, layout=api.Layout(tp=2, ep=2)), ("ep",)),
    ("ep in fit", lambda: api.fit("llama-3.1-8b", gpu="h100-sxm", layout=api.Layout(tp=2, ep=2)), ("ep",)),
    ("dp in speed", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="h100-sxm",
                                      layout=api.Layout(dp=2)), ("dp",)),
    ("tp and layout in speed", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="h100-sxm", tp=2,
                                                 layout=api.Layout(pp=2)), ("layout", "tp")),
    ("capacity not a Capacity", lambda: api.fit("llama-3.1-8b", gpu="h100-sxm", capacity={"kv_budget": 1}),
     ("capacity",)),
    ("compute not a Compute", lambda: api.speed("llama-3.1-8b", prompt=16, output=2, gpu="h100-sxm",
                                                compute={"flops": 1}), ("compute",)),
    ("offload under vllm", lambda: api.fit_offload("llama-3.1-8b", gpu_layers=10, gpu_memory=2**34,
                                                   serving=api.Serving("vllm")), ("gpu_layers",)),
]  # fmt: skip


@pytest.mark.parametrize(("call", "params"), [(c, p) for _, c, p in OBJECT_CASES],
                         ids=[name for name, _, _ in OBJECT_CASES])  # fmt: skip
def test_parameter_objects_refuse_naming_the_parameter(call: Callable[[], Any], params: tuple[str, ...]) -> None:
    with pytest.raises(UsageError) as info:
        call()
    assert info.value.params == params


def test_offload_defaults_to_the_layer_splitting_engine() -> None:
    # No serving: llama.cpp (engines.layer_split_engines()[0]); kv_dtype alone is its cache format.
    # 32 layers x 8 KV heads x 128 x 2 (K, V) x 4,096 cells at q8_0 (34 bytes a block of 32)
    # = 32 x 2 x 8 x 4 x 34 x 4,096 = 285,212,672 B of KV.
    report = api.fit_offload("llama-3.1-8b", gpu_layers=33, gpu_memory=2**36, tokens=4096, kv_dtype="q8_0")
    assert report.workload.kv_dtype is not None and report.workload.kv_dtype.name == "q8_0"
    assert sum(d.kv_cache for d in report.devices) == 32 * 2 * 8 * 4 * 34 * 4096 == 285_212_672
