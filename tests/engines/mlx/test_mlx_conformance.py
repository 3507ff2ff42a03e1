"""kvcalc's mlx figures against mlx-lm 0.32.2's own generate loop, run on MLX's CPU back end.

Needs mlx-lm's Python: $KVCALC_MLX_PYTHON or ./.venv-mlx/bin/python (README, "Macs and MLX";
.ci/run builds it); skipped otherwise. One run of mlx_probe.py builds every case: each config
shrunk (at most 8 layers, hidden size at most 256, every head and head dim kept), saved and loaded
back by mlx_lm.utils.load_model, then a prompt and generated tokens through generate_step. Every
layer's cache bytes (nbytes, spare slots included) must equal ``estimate --engine mlx`` of the
config that ran, layer by layer. The lengths sit around the 256-token steps and the windows.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import kvcalc
from kvcalc.api._probe import mlx_checks
from kvcalc.engines.mlx.probe import ENV_PYTHON, run_probe

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures"


def _python() -> str | None:
    local = ROOT / ".venv-mlx" / "bin" / "python"
    for candidate in (os.environ.get(ENV_PYTHON), str(local) if local.is_file() else None):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


PYTHON = _python()
needs_mlx = pytest.mark.skipif(PYTHON is None, reason=f"no mlx-lm Python ({ENV_PYTHON} or .venv-mlx)")

# (model, total tokens, of them generated, mlx-lm knobs, window the config's windows are set to)
CASES: list[tuple[str, int, int, dict[str, int], int | None]] = [
    # Dense GQA / MHA: one 256 step, its boundary, and a prefill step off 256.
    ("llama-3.1-8b", 256, 0, {}, None),
    ("llama-3.1-8b", 257, 2, {}, None),
    ("llama-3.1-8b", 700, 3, {"prefill_step_size": 300}, None),
    ("gpt2.json", 300, 2, {}, None),
    ("Llama-2-7b-hf.json", 100, 2, {}, None),
    ("Qwen2.5-7B.json", 513, 2, {}, None),
    # Configs that name a window mlx-lm does not keep.
    ("Mistral-7B-Instruct-v0.1.json", 300, 2, {}, 200),
    ("gemma-2-9b.json", 300, 2, {}, 200),
    # Sliding rings: below, at and past the window, prompt-only and with generation.
    ("gemma-3-27b", 150, 0, {}, 200),
    ("gemma-3-27b", 300, 2, {}, 200),
    ("gemma-3-27b", 400, 250, {}, 300),
    ("gemma-4-31B-it.json", 300, 2, {}, 200),
    ("gpt-oss-20b.json", 300, 3, {}, None),
    # max_kv_size: every layer a ring of N that keeps the first 4.
    ("Qwen3-8B.json", 300, 2, {"max_kv_size": 200}, None),
    ("Qwen3-8B.json", 700, 0, {"max_kv_size": 260, "prefill_step_size": 256}, None),
    # Quantized: past, below and at quantized_kv_start.
    ("Qwen3-8B.json", 600, 0, {"kv_bits": 4, "quantized_kv_start": 0}, None),
    ("Qwen3-8B.json", 305, 5, {"kv_bits": 8, "quantized_kv_start": 302}, None),
    ("Qwen3-8B.json", 305, 5, {"kv_bits": 8, "quantized_kv_start": 306}, None),
    ("llama-3.1-8b", 300, 2, {"kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0}, None),
    # Chunked (Llama 4): past the chunk, where every step cuts and regrows.
    ("Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json", 300, 20, {}, 256),
    # MLA: the latent (DeepSeek-V3), K and V per head (DeepSeek-V2), DSA indexers, MiniMax MSA.
    ("deepseek-v3", 300, 2, {}, None),
    ("DeepSeek-V2-Lite.json", 300, 2, {}, None),
    ("DeepSeek-V3.2.json", 300, 2, {}, None),
    ("GLM-5.3-w4a16.json", 100, 2, {}, None),
    ("MiniMax-M3.json", 100, 2, {}, None),
    # Linear attention and Mamba hybrids.
    ("Qwen3.5-0.8B.json", 100, 2, {}, None),
    ("Qwen3-Next-80B-A3B.json", 100, 2, {}, None),
    ("Kimi-Linear-48B-A3B-Instruct.json", 100, 2, {}, None),
    ("Nemotron-H-8B-Base-8K.json", 100, 2, {}, None),
    ("granite-4.0-h-micro.json", 100, 2, {}, None),
    ("Falcon-H1-7B.json", 100, 2, {}, None),
    ("LFM2.5-1.2B-Distilled-Claude-4.6.json", 100, 2, {}, None),
    ("jamba-v0.1", 100, 2, {}, None),
    ("mamba-2.8b", 40, 2, {}, None),
]


def _model(name: str) -> str:
    return str(FIXTURES / name) if name.endswith(".json") else name


def _request(name: str, tokens: int, decode: int, knobs: dict[str, int], window: int | None) -> dict[str, Any]:
    config = kvcalc.open_model(_model(name)).source.config  # type: ignore[union-attr]
    return {"config": config, "tokens": tokens - decode, "decode": decode, "batch": 1, "seed": 0, "window": window,
            "shrink": True, **knobs}  # fmt: skip


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    assert PYTHON is not None
    answer = run_probe(PYTHON, {"cases": [_request(*case) for case in CASES]}, timeout=1800)
    results: list[dict[str, Any]] = answer["results"]
    return results


@needs_mlx
@pytest.mark.parametrize(("index", "case"), list(enumerate(CASES)), ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_every_layer_matches_mlx_lm(results: list[dict[str, Any]], index: int, case: tuple[Any, ...]) -> None:
    name, tokens, decode, knobs, _ = case
    result = results[index]
    assert "error" not in result, result.get("error")
    assert result["mlx_lm_version"] == "0.32.2"
    est, checks, _ = mlx_checks(result, name, tokens, decode, knobs)
    differ = [(c.layer, c.mlx_class, c.measured, c.estimated) for c in checks if not c.match]
    assert not differ
    assert sum(c.measured for c in checks) == est.total_bytes


@needs_mlx
def test_the_grid_covers_every_cache_class(results: list[dict[str, Any]]) -> None:
    classes = {part for r in results if "layers" in r for layer in r["layers"] for part in layer["class"].split("+")}
    assert {"KVCache", "RotatingKVCache", "ChunkedKVCache", "QuantizedKVCache", "ArraysCache"} <= classes
