"""The API refuses what the CLI refuses (issue 36): one UsageError naming the API parameter
(``param=``), which the CLI turns into its flag (tests/cli/test_bad_input.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvcalc import api
from kvcalc.errors import UsageError

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
    # No serving: llama.cpp (engines.LAYER_SPLIT_ENGINES[0]); kv_dtype alone is its cache format.
    # 32 layers x 8 KV heads x 128 x 2 (K, V) x 4,096 cells at q8_0 (34 bytes a block of 32)
    # = 32 x 2 x 8 x 4 x 34 x 4,096 = 285,212,672 B of KV.
    report = api.fit_offload("llama-3.1-8b", gpu_layers=33, gpu_memory=2**36, tokens=4096, kv_dtype="q8_0")
    assert report.workload.kv_dtype is not None and report.workload.kv_dtype.name == "q8_0"
    assert sum(d.kv_cache for d in report.devices) == 32 * 2 * 8 * 4 * 34 * 4096 == 285_212_672
