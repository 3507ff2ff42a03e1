"""LM Studio's runtimes (kvcalc.engines.lmstudio.rules), each number derived by hand next to it.

Sources: lmstudio-ai/docs @ c6854fb (1_developer/2_rest/list.md: a loaded instance's defaults
"context_length": 4096, "eval_batch_size": 512, "parallel": 4; 0_app/5_advanced/parallel-requests.md:
"By default, Max Concurrent Predictions is set to 4"), lmstudio-ai/lmstudio-js
packages/lms-shared-types/src/llm/LLMLoadModelConfig.ts (useUnifiedKvCache: "Disabling this ensures
each prediction can utilize the full context length"; the K/V cache types f32, f16, q8_0, q4_0, q4_1,
iq4_nl, q5_0, q5_1; MLX KV bits 8, 6, 4, 3, 2), lmstudio-ai/mlx-engine @ 08f0c07
(utils/kv_cache_quantization.py: kv_group_size 64 and quantized_kv_start 0 once kv_bits is set;
model_kit/model_kit.py: "max_kv_size is ignored when using KV cache quantization"), llama.cpp
src/llama-kv-cache-iswa.cpp (size_swa = pad(min(size_base, n_swa x (unified ? n_seq_max : 1) +
n_ubatch), 256)), and a real LM Studio log (tests/fixtures/logs/lmstudio/, with its URL).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines import engine_entry, make_engine
from kvcalc.errors import UsageError
from kvcalc.inputs.hf.configs import read_config
from tests.conftest import fixture_config

LOGS = Path(__file__).parents[2] / "fixtures" / "logs" / "lmstudio"
MIB = 2**20


def _slots(est: Any) -> dict[str, tuple[int, int]]:
    """kind -> (layers, slots per layer for the whole batch)."""
    return {g.kind.value: (g.layers, g.slots) for g in est.groups}


# --- the llama.cpp runtime (lmstudio) ---------------------------------------------------------


def test_a_full_attention_model_holds_the_context_once() -> None:
    # Llama-3.1-8B: 32 layers, 8 KV heads x 128, f16: 2 x 8 x 128 x 2 B = 4,096 B per cell per layer.
    # Unified (LM Studio's default): one stream of pad(4,096, 256) = 4,096 cells, whatever the 4
    # predictions: 4,096 x 32 x 4,096 = 536,870,912 B.
    est = api.estimate("llama-3.1-8b", tokens=4096, engine="lmstudio")
    assert est.total_bytes == 4096 * 32 * 4096 == 536_870_912
    assert any("Max Concurrent Predictions 4" in n and "Evaluation Batch Size 512" in n for n in est.notes)


def test_sliding_layers_keep_a_window_for_every_prediction() -> None:
    # Gemma-3-27B: 62 layers, every 6th full (10), 52 sliding of window 1,024; 16 KV heads x 128,
    # f16: 2 x 16 x 128 x 2 B = 8,192 B per cell per layer. 8,192 tokens, batch 1: n_ctx 8,192;
    # n_ubatch = min(8,192, n_batch 512, 512) = 512; n_seq_max 4 (the predictions), unified:
    # sliding cells pad(min(8,192, 1,024 x 4 + 512), 256) = 4,608 (llama-server's --batch 1 gives
    # 1,024 + 512 = 1,536). 10 x 8,192 x 8,192 + 52 x 4,608 x 8,192 = 671,088,640 + 1,962,934,272.
    est = api.estimate("gemma-3-27b", tokens=8192, engine="lmstudio")
    assert _slots(est)["sliding_attention"] == (52, 4608)
    assert _slots(est)["full_attention"] == (10, 8192)
    assert est.total_bytes == 671_088_640 + 1_962_934_272 == 2_634_022_912
    server = api.estimate("gemma-3-27b", tokens=8192, engine="llama-server")
    assert _slots(server)["sliding_attention"] == (52, 1536)


def test_a_batch_above_the_predictions_is_that_many() -> None:
    # Gemma-3-27B, 8 sequences of 2,048: n_ctx = 16,384, n_seq_max = max(4, 8) = 8, sliding cells
    # pad(min(16,384, 1,024 x 8 + 512), 256) = 8,704; full layers the one stream of 16,384.
    est = api.estimate("gemma-3-27b", tokens=2048, batch=8, engine="lmstudio")
    assert _slots(est)["sliding_attention"] == (52, 8704)
    assert _slots(est)["full_attention"] == (10, 16384)


def test_parallel_sets_the_sliding_cells() -> None:
    # --parallel 2: pad(min(8,192, 1,024 x 2 + 512), 256) = 2,560 cells in sliding layers.
    est = api.estimate("gemma-3-27b", tokens=8192, engine="lmstudio", options={"parallel": 2})
    assert _slots(est)["sliding_attention"] == (52, 2560)
    assert not any("Max Concurrent Predictions" in n for n in est.notes)


def test_unified_off_gives_every_prediction_the_whole_context() -> None:
    # useUnifiedKvCache false: 4 streams, each the full context: n_ctx = pad(4 x 4,096) = 16,384, each
    # stream pad(16,384 / 4, 256) = 4,096 cells: 16,384 x 32 x 4,096 B = 2,147,483,648 B for one sequence.
    est = api.estimate("llama-3.1-8b", tokens=4096, engine="lmstudio", options={"no_kv_unified": True})
    assert est.total_bytes == 16384 * 32 * 4096 == 2_147_483_648
    assert any("Unified KV Cache off" in n for n in est.notes)


def test_the_evaluation_batch_is_512() -> None:
    engine, _ = make_engine("lmstudio")
    assert engine.n_batch == 512 and engine.n_ubatch == 512  # type: ignore[attr-defined]
    engine, notes = make_engine("lmstudio", n_batch=1024)
    assert engine.n_batch == 1024  # type: ignore[attr-defined]
    assert not any("Evaluation Batch Size" in n for n in notes)


def test_lm_studio_has_no_bf16_cache() -> None:
    with pytest.raises(UsageError, match="LM Studio's K/V cache types are f32, f16, q8_0"):
        api.estimate("llama-3.1-8b", tokens=4096, engine="lmstudio", kv_dtype="bf16")
    # q8_0 it takes: 34 B per 32 elements, 2 x 8 x 128 / 32 x 34 = 2,176 B per cell per layer.
    est = api.estimate("llama-3.1-8b", tokens=4096, engine="lmstudio", kv_dtype="q8_0")
    assert est.total_bytes == 4096 * 32 * 2176


@pytest.mark.parametrize("knob", ["swa_full", "kv_unified", "max_num_seqs", "prompt_cache_bytes", "kv_bits"])
def test_settings_lm_studio_has_not_are_refused(knob: str) -> None:
    value: Any = True if knob in ("swa_full", "kv_unified") else 4
    with pytest.raises(UsageError, match="under the lmstudio engine"):
        make_engine("lmstudio", **{knob: value})


def test_parallel_changes_nothing_for_full_attention_in_one_cache() -> None:
    with pytest.raises(UsageError) as info:
        api.estimate("llama-3.1-8b", tokens=4096, engine="lmstudio", options={"parallel": 2})
    assert info.value.params == ("parallel",)


def test_recurrent_states_per_prediction_are_warned() -> None:
    est = api.estimate("qwen3.5-0.8b", tokens=4096, engine="lmstudio")
    assert any("recurrent state for each of its 4 predictions" in n for n in est.notes)


def _qwen36_27b() -> Any:
    """Qwen3.6-27B's text config in the shape the log shows: 64 layers, every 4th full attention (16),
    4 KV heads x 256, and 48 Gated DeltaNet layers of 16 key heads and 48 value heads of 128, conv
    kernel 4 (Qwen3.5-0.8B's real config, tests/fixtures, with the 27B's sizes)."""
    config = copy.deepcopy(fixture_config("Qwen3.5-0.8B.json"))
    text = config["text_config"]
    text.update(num_hidden_layers=64, hidden_size=5120, num_attention_heads=24, num_key_value_heads=4,
                linear_num_value_heads=48, intermediate_size=17408,
                layer_types=["full_attention" if i % 4 == 3 else "linear_attention" for i in range(64)])  # fmt: skip
    return read_config(config, name="qwen3.6-27b")


def test_a_real_lm_studio_log() -> None:
    """LM Studio 0.4.12 (lmstudio-bug-tracker#1862): "llama_kv_cache: size = 16384.00 MiB (262144
    cells, 16 layers, 4/1 seqs)" and "llama_memory_recurrent: size = 598.50 MiB (4 cells, 64 layers, 4
    seqs)": a context of 262,144 in one stream for 4 predictions, a state for each.

    K/V: 16 layers x 262,144 cells x (2 x 4 x 256 x 2 B = 4,096 B) = 17,179,869,184 B = 16,384 MiB.
    States (f32): conv (4 - 1) x (2 x 16 x 128 + 48 x 128 = 10,240) = 30,720 and recurrent 48 x 128 x
    128 = 786,432 elements: 817,152 x 4 B = 3,268,608 B a layer and sequence; 48 layers x 4 predictions:
    627,572,736 B = 598.5 MiB. kvcalc counts a state per sequence: the 4 predictions as --batch 4 of
    65,536 tokens (n_ctx = pad(4 x 65,536) = 262,144, the same one stream)."""
    log = (LOGS / "bug-tracker-1862-qwen3.6-27b.log").read_text()
    assert "16384.00 MiB (262144 cells, 16 layers, 4/1 seqs)" in log and "598.50 MiB (4 cells" in log
    est = api.estimate(_qwen36_27b(), tokens=65536, batch=4, engine="lmstudio")
    kv = sum(g.bytes for g in est.groups if not g.cache.is_state)
    states = sum(g.bytes for g in est.groups if g.cache.is_state)
    assert kv == 16384 * MIB == 17_179_869_184
    assert states * 2 == 1197 * MIB  # 598.5 MiB
    assert _slots(est)["full_attention"] == (16, 262144)


def test_the_default_context_is_recorded() -> None:
    from kvcalc.engines.lmstudio.rules import LMStudio

    assert LMStudio.default_context()[0] == 4096


def test_aliases() -> None:
    assert engine_entry("LM-Studio").name == "lmstudio"
    assert engine_entry("lm-studio-mlx").name == "lmstudio-mlx"


# --- the MLX runtime (lmstudio-mlx) -----------------------------------------------------------


def test_the_context_length_is_a_rotating_cache() -> None:
    # Qwen3-8B (mlx-lm's qwen3.py: no make_cache of its own): 36 layers, 8 KV heads x 128, bf16:
    # 2 x 8 x 128 x 2 B x 36 = 147,456 B a token. A context length of 4,000 (max_kv_size) holding
    # 4,000 tokens: a RotatingKVCache of exactly 4,000 slots (prompt chunks concatenated):
    # 589,824,000 B; with none, KVCache's 256-token steps: pad(4,000, 256) = 4,096: 603,979,776 B.
    ctx = api.estimate("qwen3-8b", tokens=4000, engine="lmstudio-mlx", options={"max_kv_size": 4000, "parallel": 1})
    assert ctx.total_bytes == 4000 * 147456 == 589_824_000
    free = api.estimate("qwen3-8b", tokens=4000, engine="lmstudio-mlx", options={"parallel": 1})
    assert free.total_bytes == 4096 * 147456 == 603_979_776
    assert any("LM Studio's context length not given" in n for n in free.notes)


def test_kv_quantization_starts_at_the_first_token() -> None:
    # mlx-engine quantizes from token 0 (mlx-lm from 5,000). 8 bits, group 64, bf16 scale and bias:
    # a 128-element row is 128 B + 2 groups x 4 B = 136 B; 2 x 8 x 136 x 36 = 78,336 B a token,
    # 4,096 slots (KVCache steps): 320,864,256 B. mlx-lm at 4,000 < 5,000 tokens keeps bf16: 603,979,776 B.
    est = api.estimate("qwen3-8b", tokens=4000, engine="lmstudio-mlx", options={"kv_bits": 8})
    assert est.total_bytes == 4096 * 78336 == 320_864_256
    assert any("from the first token" in n and "group 64, start 0" in n for n in est.notes)
    assert not any("continuous batching" in n for n in est.notes)
    mlx = api.estimate("qwen3-8b", tokens=4000, engine="mlx", options={"kv_bits": 8})
    assert mlx.total_bytes == 603_979_776


def test_concurrent_predictions_are_warned_not_modelled() -> None:
    est = api.estimate("qwen3-8b", tokens=4096, engine="lmstudio-mlx")
    assert any(n.startswith("warning:") and "continuous batching" in n for n in est.notes)
    one = api.estimate("qwen3-8b", tokens=4096, engine="lmstudio-mlx", options={"parallel": 1})
    assert not any("continuous batching" in n for n in one.notes)


@pytest.mark.parametrize(("options", "param", "match"), [
    ({"kv_bits": 5}, "kv_bits", "takes KV bits 2, 3, 4, 6, 8, not 5"),
    ({"kv_bits": 4, "max_kv_size": 4096}, "max_kv_size", "ignores the context length"),
    ({"kv_group_size": 32}, "kv_group_size", "changes nothing without --kv-bits"),
])  # fmt: skip
def test_mlx_settings_lm_studio_refuses(options: dict[str, int], param: str, match: str) -> None:
    with pytest.raises(UsageError, match=match) as info:
        make_engine("lmstudio-mlx", **options)
    assert info.value.params == (param,)


@pytest.mark.parametrize("knob", ["prompt_cache_bytes", "prefill_step_size", "max_tokens", "ubatch"])
def test_mlx_lm_settings_lm_studio_has_not_are_refused(knob: str) -> None:
    with pytest.raises(UsageError, match="under the lmstudio-mlx engine"):
        make_engine("lmstudio-mlx", **{knob: 1024})
