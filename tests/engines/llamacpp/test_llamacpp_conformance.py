"""The conformance grid: kvcalc's llama.cpp rules against the real llama.cpp, byte for byte.

For each geometry (a small config.json read by kvcalc as any model is) the probe writes one GGUF
of that geometry (kvcalc.engines.llamacpp.probe.gguf_plan: what convert_hf_to_gguf.py writes for the
architecture) and llama.cpp (llama-cpp-python 0.3.36, llama.cpp 0c1e570) creates one context per
configuration in a single child process: K/V types x sequences x tokens x unified or separate
streams x n_ubatch / n_batch x swa_full. Every KV cache llama.cpp allocates (its cells, layers,
streams, and bytes rebuilt with its ggml_row_size and printed as it prints them) must equal
``kvcalc estimate --engine llama.cpp`` under the same settings, group by group. Skipped when
llama_cpp is not installed (pip install 'kvcalc[llamacpp]'; .ci/run installs it).
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.llamacpp.probe import compare, context_request, gguf_plan, llama_cpp_available, measure
from kvcalc.errors import UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import ModelSpec

pytestmark = pytest.mark.skipif(
    not llama_cpp_available(), reason="llama_cpp (and gguf) not installed: pip install 'kvcalc[llamacpp]'"
)

# Head dims are multiples of 32: llama.cpp refuses a quantized K or V whose block (32) does not
# divide the head dim (src/llama-context.cpp llama_init_from_model).
GEOMETRIES: dict[str, dict[str, Any]] = {
    "llama GQA": {"model_type": "llama", "num_hidden_layers": 3, "hidden_size": 512, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "torch_dtype": "bfloat16"},
    # float32 weights: llama.cpp still caches f16 by default.
    "llama MHA fp32": {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                       "num_key_value_heads": 4, "torch_dtype": "float32"},
    # kvcalc reads windows on layers 2 and 3 (max_window_layers 2); llama.cpp's qwen2 has none.
    "qwen2 MQA, window in config": {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 512,
                                    "num_attention_heads": 8, "num_key_value_heads": 1, "use_sliding_window": True,
                                    "sliding_window": 256, "max_window_layers": 2, "torch_dtype": "bfloat16"},
    "mistral (no window in llama.cpp)": {"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 512,
                                         "num_attention_heads": 8, "num_key_value_heads": 2, "sliding_window": 256,
                                         "torch_dtype": "bfloat16"},
    "phi3 (SWA disabled in llama.cpp)": {"model_type": "phi3", "num_hidden_layers": 2, "hidden_size": 256,
                                         "num_attention_heads": 4, "num_key_value_heads": 4, "sliding_window": 256,
                                         "torch_dtype": "bfloat16"},
    "starcoder2 (no window in llama.cpp)": {"model_type": "starcoder2", "num_hidden_layers": 2, "hidden_size": 256,
                                            "num_attention_heads": 4, "num_key_value_heads": 2,
                                            "sliding_window": 256, "torch_dtype": "bfloat16"},
    "gemma2 SWA alternation": {"model_type": "gemma2", "num_hidden_layers": 4, "hidden_size": 256,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                               "sliding_window": 256, "torch_dtype": "bfloat16"},
    "gemma3 5:1 pattern": {"model_type": "gemma3_text", "num_hidden_layers": 7, "hidden_size": 256,
                           "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64, "sliding_window": 512,
                           "sliding_window_pattern": 6, "torch_dtype": "bfloat16"},
    "cohere2 3:1 pattern": {"model_type": "cohere2", "num_hidden_layers": 4, "hidden_size": 256,
                            "num_attention_heads": 4, "num_key_value_heads": 1, "sliding_window": 128,
                            "torch_dtype": "bfloat16"},
    "gpt-oss SWA": {"model_type": "gpt_oss", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
                    "num_key_value_heads": 2, "head_dim": 64, "sliding_window": 128,
                    "layer_types": ["sliding_attention", "full_attention"] * 2, "torch_dtype": "bfloat16"},
    # attention_chunk_size 1024 in the config; llama.cpp chunks at 8192 whatever it says.
    "llama4 chunked": {"model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 512,
                       "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
                       "attention_chunk_size": 1024, "no_rope_layers": [], "torch_dtype": "bfloat16"},
    "deepseek2 MLA": {"model_type": "deepseek_v2", "num_hidden_layers": 3, "hidden_size": 256,
                      "num_attention_heads": 4, "num_key_value_heads": 4, "kv_lora_rank": 64, "qk_rope_head_dim": 32,
                      "qk_nope_head_dim": 64, "v_head_dim": 64, "q_lora_rank": None, "torch_dtype": "bfloat16"},
}  # fmt: skip

SAME_TYPES = ("fp16", "fp32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
MIXED_TYPES = (("q8_0", "fp16"), ("fp16", "q4_0"), ("q4_0", "q8_0"))
# (tokens per sequence, sequences): n_ctx below one ubatch, a ragged n_ctx / B, and sequences
# long enough for windows (and Llama 4's 8192 chunk) to bound the sliding cells.
WORKLOADS = ((300, 1), (1000, 3), (4096, 2), (12000, 2))
# (n_ubatch, n_batch): the default, a small ubatch, and an n_batch below n_ubatch (effective 64).
BATCHING = ((512, 2048), (128, 2048), (512, 64))


def _types(mla: bool) -> list[tuple[str, str]]:
    same = [(t, t) for t in SAME_TYPES]
    return same if mla else same + list(MIXED_TYPES)


def _grid(spec: ModelSpec) -> list[dict[str, Any]]:
    """Every configuration of one geometry: each K/V pair x workload x stream layout x batching x
    swa_full (the full product: llama.cpp creates a context in a few milliseconds)."""
    mla = any(c.is_latent for c in spec.caches)
    settings = itertools.product(_types(mla), WORKLOADS, (False, True), BATCHING, (False, True))
    return [
        {"tokens": tokens, "batch": batch, "unified": unified, "ubatch": ubatch, "n_batch": n_batch,
         "swa_full": swa_full, "k": k, "v": v}
        for (k, v), (tokens, batch), unified, (ubatch, n_batch), swa_full in settings
    ]  # fmt: skip


def _estimate(spec: ModelSpec, c: dict[str, Any]) -> Any:
    # Knobs that size none of this model's layers are refused by estimate (they change nothing); the
    # real llama.cpp still gets them, so the grid shows its bytes do not move with them either.
    idle = api.resolve_serving(spec, api.Serving("llama.cpp")).engine.idle_knobs(spec)
    return api.estimate(
        spec,
        tokens=c["tokens"],
        batch=c["batch"],
        serving=api.Serving(
            engine="llama.cpp",
            k_dtype=c["k"],
            v_dtype=c["v"],
            options={knob: value for knob, value in _options(c).items() if knob not in idle},
        ),
    )


def _options(c: dict[str, Any]) -> dict[str, Any]:
    """The grid point's llama.cpp knobs (None or False: the engine's default)."""
    return {"ubatch": c["ubatch"], "n_batch": c["n_batch"], "kv_unified": c["unified"], "swa_full": c["swa_full"]}


@cache
def _run(name: str) -> tuple[int, list[str]]:
    """(configurations checked, mismatches described) for one geometry: one GGUF, one child
    process, one llama.cpp context per configuration."""
    spec = read_config(GEOMETRIES[name], name=name)
    grid = _grid(spec)
    requests = []
    for c in grid:
        engine = api.resolve_serving(spec, api.Serving("llama.cpp", options=_options(c))).engine
        requests.append(context_request(engine, c["tokens"], c["batch"], c["k"], c["v"]))
    answer = measure(gguf_plan(spec, 16384), requests, timeout=600)
    mismatches = []
    for c, result in zip(grid, answer["results"], strict=True):
        if "error" in result:
            mismatches.append(f"{c}: llama.cpp refused: {result['error']}")
            continue
        checks = compare(_estimate(spec, c), result)
        for check in checks:
            if not check.match:
                mismatches.append(f"{c}: {check}")
    return len(grid), mismatches


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_geometry_matches_llama_cpp(name: str) -> None:
    checked, mismatches = _run(name)
    assert checked >= 48
    assert not mismatches, f"{len(mismatches)} of {checked} differ; first: {mismatches[:3]}"


def test_grid_size() -> None:
    # 4 workloads x 2 stream layouts x 3 batchings x 2 swa_full = 48 settings, each with every K/V
    # pair: 12 (9 alike + 3 mixed) for 11 geometries, 9 alike for MLA: (11 x 12 + 9) x 48 = 6,768.
    total = sum(_run(name)[0] for name in GEOMETRIES)
    assert total == (11 * 12 + 9) * 48 == 6768
    assert sum(len(_run(name)[1]) for name in GEOMETRIES) == 0


def test_mla_refuses_different_k_and_v_types_as_llama_cpp_does() -> None:
    # src/llama-context.cpp: "model does not support different K (%s) and V (%s) cache types".
    spec = read_config(GEOMETRIES["deepseek2 MLA"], name="mla")
    request = context_request(api.resolve_serving(spec, api.Serving("llama.cpp")).engine, 512, 1, "q8_0", "fp16")
    answer = measure(gguf_plan(spec, 512), [request])
    assert "does not support different K" in answer["results"][0]["error"]
    with pytest.raises(UsageError, match=r"different K .* and V .* cache types"):
        api.estimate(spec, tokens=512, serving=api.Serving(engine="llama.cpp", k_dtype="q8_0", v_dtype="fp16"))


def test_quantized_type_whose_block_does_not_divide_the_head_dim_is_refused_by_both() -> None:
    # head_dim = 640 / 8 = 80, not a multiple of q8_0's 32-element blocks.
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 640, "num_attention_heads": 8,
              "num_key_value_heads": 2, "torch_dtype": "bfloat16"}  # fmt: skip
    spec = read_config(config, name="h80")
    request = context_request(api.resolve_serving(spec, api.Serving("llama.cpp")).engine, 512, 1, "q8_0", "fp16")
    answer = measure(gguf_plan(spec, 512), [request])
    assert "does not divide n_embd_head_k=80" in answer["results"][0]["error"]
    with pytest.raises(UsageError, match="blocks of 32 do not divide the K head dim 80"):
        api.estimate(spec, tokens=512, serving=api.Serving(engine="llama.cpp", k_dtype="q8_0", v_dtype="fp16"))
