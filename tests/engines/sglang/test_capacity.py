"""SGLang's pool sizing in kvcalc (engines/sglang/capacity.py), on figures derived by hand from
SGLang 0.5.23's formulas (releases.py names the files); test_sglang_conformance.py checks the
same rules against SGLang's own code."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvcalc
from kvcalc.engines import make_engine
from kvcalc.errors import UsageError

MIB = 2**20


def _plan(model: str, budget: int = 256 * MIB, page: int | None = None, tokens: int = 4096) -> object:
    report = kvcalc.fit(
        model,
        tokens=tokens,
        serving=kvcalc.Serving(engine="sglang", options={"block_size": page} if page else {}),
        capacity=kvcalc.Capacity(kv_budget=budget, max_model_len=tokens),
    )
    return report


def test_dense_gqa_pool_and_running_requests() -> None:
    # Llama 3.1 8B: 32 layers x 8 KV heads x (128 + 128) x 2 bytes = 131,072 B a token.
    report = _plan("llama-3.1-8b")
    plan = report.result.plan
    assert plan is not None and plan.full_cell == 131_072
    assert plan.max_total_tokens == 256 * MIB // 131_072 == 2048
    # resolve_max_num_reqs: int(2048 / 4096 x 512) = 256, clamped up to 2048, at most 2048 // 2.
    assert plan.max_running_requests == 1024
    # One padded page: (2048 + 1) rows x 131,072 B.
    assert plan.pool_bytes == 2049 * 131_072
    assert report.result.max_concurrency == 0  # a 4,096-token request needs 4,096 of the 2,048 slots


def test_gemma2_sliding_layers_keep_every_token_in_sglang() -> None:
    # Gemma 2 is not in is_hybrid_swa_model: all 42 layers x 8 x (256 + 256) x 2 = 344,064 B a token.
    plan = _plan("gemma-2-9b").result.plan
    assert plan is not None and plan.full_cell == 344_064 and plan.swa_cell == 0
    assert plan.max_total_tokens == 268_435_456 // 344_064 == 780
    est = kvcalc.estimate("gemma-2-9b", tokens=8192, engine="sglang")
    assert est.total_bytes == 8192 * 344_064
    assert any("every token" in note for note in est.notes)


def test_hybrid_swa_split_and_refusal() -> None:
    # gpt-oss-20b: 12 full + 12 sliding layers, 8 x (64 + 64) x 2 = 2,048 B each: 24,576 B a side.
    plan = _plan("gpt-oss-20b").result.plan
    assert plan is not None and (plan.full_cell, plan.swa_cell) == (24_576, 24_576)
    assert plan.max_total_tokens == int(268_435_456 // (24_576 + 0.8 * 24_576)) == 6068
    assert plan.swa_tokens == int(6068 * 0.8) == 4854
    # gemma-4-31b's window of 1,024 (1,023 kept) does not fit a 256 MiB SWA pool: SGLang refuses.
    refused = _plan("gemma-4-31b").result
    assert refused.plan is not None and refused.plan.refusal is not None
    assert refused.max_tokens == 0 and not refused.fits
    report = _plan("gemma-4-31b")
    assert report.verdict is not None and not report.verdict.fits
    assert report.verdict.reason is not None and report.verdict.reason.startswith("SGLang refuses this")
    # The admission floor is SGLang's sliding_window_size, the config's 1,024 - 1.
    assert "window (1,023)" in report.verdict.reason


def test_multimodal_reservation() -> None:
    # Llama 3.2 Vision keeps 100 MiB for its embedding cache: (256 - 100) MiB // 163,840 B.
    plan = _plan("llama-3.2-11b-vision").result.plan
    assert plan is not None and plan.reserved == 100 * MIB
    assert plan.max_total_tokens == 156 * MIB // 163_840 == 998


@pytest.mark.parametrize(("engine", "reserved", "tokens"), [
    # mm_runtime_reservation_gb first ships in 0.5.18 (releases.py); 0.5.17 sizes the pool on the
    # whole budget: 256 MiB // 163,840 B = 1,638.
    ("sglang@0.5.17", 0, 256 * MIB // 163_840),
    ("sglang@0.5.8", 0, 1638),
    ("sglang@0.5.18", 100 * MIB, 998),
])  # fmt: skip
def test_multimodal_reservation_by_release(engine: str, reserved: int, tokens: int) -> None:
    report = kvcalc.fit("llama-3.2-11b-vision", tokens=4096, serving=kvcalc.Serving(engine=engine),
                        capacity=kvcalc.Capacity(kv_budget=256 * MIB, max_model_len=4096))  # fmt: skip
    plan = report.result.plan
    assert plan is not None and (plan.reserved, plan.max_total_tokens) == (reserved, tokens)


def test_state_pool_split() -> None:
    # Qwen3.5 0.8B at 256 MiB: the state pool gets 0.9 / 1.9 of it in slots of one request's state.
    plan = _plan("qwen3.5-0.8b").result.plan
    assert plan is not None and plan.mamba_slots is not None
    share = 268_435_456 / 2**30 * 0.9 / 1.9 * 2**30
    assert plan.mamba_slots == int((share - plan.state_bytes) // plan.state_bytes)
    rest = int((268_435_456 / 2**30 - (plan.mamba_slots + 1) * plan.state_bytes / 2**30) * 2**30)
    assert plan.max_total_tokens == rest // plan.full_cell
    assert plan.max_running_requests == min(plan.max_total_tokens // 2, plan.mamba_slots // 3)


def test_dsa_page_size_is_forced() -> None:
    report = _plan("deepseek-v3.2", page=16)
    assert report.result.plan is not None and report.result.plan.page_size == 64
    assert any("64-token pages" in note for note in report.notes)


def test_versions() -> None:
    engine, notes = make_engine("sglang@0.5.23")
    assert getattr(engine, "version", None) == (0, 5, 23) and notes == []
    _, notes = make_engine("sglang@0.5.30")
    assert any("read in 0.5.23" in note for note in notes)
    with pytest.raises(UsageError, match=r"supported: 0\.5"):
        make_engine("sglang@0.6")


def test_the_kimi_k2_5_log_on_rocm_its_mla_pool_with_one_padded_row() -> None:
    # tests/fixtures/logs/sglang/rocm-0.5.8.post1-mi355x-kimi-k2.5-tp8.log: SGLang 0.5.8.post1 on MI355X,
    # TP 8, page_size 1, KV dtype bf16: "#tokens: 2454391, KV size: 160.63 GB" (GB = 2^30 in SGLang).
    # Kimi K2.5's text model is Kimi K2's (DeepSeek-V3 MLA: 61 layers, kv_lora_rank 512 + rope 64), one
    # latent row per token, replicated on every rank: 61 x 576 x 2 B = 70,272 B a token. MLATokenToKVPool
    # holds size + page_size rows: 2,454,392 x 70,272 = 172,475,034,624 B = 160.63 GiB.
    text = (Path(__file__).parents[2] / "fixtures" / "logs" / "sglang" /
            "rocm-0.5.8.post1-mi355x-kimi-k2.5-tp8.log").read_text()  # fmt: skip
    assert text.startswith("# source: https://github.com/")
    assert "#tokens: 2454391, KV size: 160.63 GB" in text and "v0.5.8.post1-rocm720" in text
    cell = 61 * 576 * 2
    # A budget that holds 2,454,391 tokens and not one more (SGLang's int(rest_memory / cell_size)).
    budget = kvcalc.Capacity(kv_budget=2_454_391 * cell + cell // 2, max_model_len=4096)
    report = kvcalc.fit("kimi-k2", tokens=4096, serving=kvcalc.Serving(engine="sglang-rocm@0.5.8"), capacity=budget)
    plan = report.result.plan
    assert plan is not None and (plan.page_size, plan.full_cell, plan.max_total_tokens) == (1, cell, 2_454_391)
    assert plan.pool_bytes == 2_454_392 * 70_272 == 172_475_034_624
    assert round(plan.pool_bytes / 2**30, 2) == 160.63
