"""The estimate (kvcalc.calc.estimate): the compiled plan (one compile, any number of lengths, the
same answers as a fresh estimate), and costs that grow with the layer kinds and replicas, not their
count."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kvcalc import api
from kvcalc.api import open_model
from kvcalc.calc.estimate import Workload
from kvcalc.dtypes import parse_kv_dtype
from kvcalc.engines import THEORETICAL, make_engine
from kvcalc.engines.theoretical import Theoretical
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache
from tests.conftest import fixture_config
from tests.helpers.theoretical import compile_plan, estimate

# Lengths on both sides of the windows (128, 4,096), chunks (8,192), pages, blocks (16) and
# llama.cpp's 256-cell padding the presets below meet.
LENGTHS = (1, 15, 16, 17, 127, 128, 129, 255, 256, 257, 4095, 4096, 4097, 8191, 8192, 8193, 100_003, 1_000_000)
MODELS = ("llama-3.1-8b", "gpt-oss-120b", "gemma-3-27b", "llama-4-scout", "deepseek-v3", "qwen3-next-80b-a3b",
          "deepseek-v4-flash", "deepseek-v3.2", "gemma-3n-e4b", "t5-small", "whisper-large-v3",
          "llama-3.2-11b-vision")  # fmt: skip
ENGINES = ("theoretical", "transformers", "vllm", "sglang", "llama.cpp")
SHAPES = (
    {"batch": 1},
    {"batch": 5, "shared_prefix": 1},
    {"batch": 7, "dp": 3},
    {"batch": 2, "pp": 2},
    {"batch": 3, "kv_dtype": "fp8"},
)


def _sized(model: str, engine_name: str, shape: dict[str, object]) -> tuple[object, ...] | None:
    """(spec, engine, workload at length 1), or None where the engine refuses the model or format."""
    spec = open_model(model).spec
    engine, _ = make_engine(engine_name, uses_mla=any(c.is_latent for c, _ in spec.groups))
    fields = dict(shape)
    if "kv_dtype" in fields:
        fields["kv_dtype"] = parse_kv_dtype(str(fields["kv_dtype"]))
    workload = Workload(tokens=1, **fields)  # type: ignore[arg-type]
    try:
        compile_plan(spec, workload, engine)
    except UsageError:
        return None
    return spec, engine, workload


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("engine_name", ENGINES)
def test_one_plan_gives_every_length_as_a_fresh_estimate(model: str, engine_name: str) -> None:
    # A plan compiled at one length and evaluated at every other must hold nothing of the length
    # it was compiled at: each answer equals an estimate made from scratch at that length.
    for shape in SHAPES:
        sized = _sized(model, engine_name, shape)
        if sized is None:
            continue
        spec, engine, workload = sized
        plan = compile_plan(spec, replace(workload, tokens=1_000_000), engine)  # type: ignore[arg-type]
        for tokens in LENGTHS:
            w = replace(workload, tokens=tokens)  # type: ignore[type-var]
            try:
                fresh = estimate(spec, w, engine=engine)  # type: ignore[arg-type]
            except UsageError as exc:
                with pytest.raises(UsageError, match=str(exc)[:40].replace("(", r"\(")):
                    plan.at(tokens, w.batch, w.shared_prefix)
                continue
            got = plan.at(tokens, w.batch, w.shared_prefix)
            assert got == fresh, (model, engine_name, shape, tokens)
            assert plan.total_bytes(tokens, w.batch, w.shared_prefix) == fresh.total_bytes
            assert plan.per_token_bytes == fresh.per_token_bytes
            if w.dp == 1:
                assert plan.per_gpu_bytes(tokens, w.batch, w.shared_prefix) == fresh.per_gpu_bytes


class _AskedEngine(Theoretical):
    """The theoretical rules, asked of the engine every time: the plan's own closed form for
    engines that keep the base rules must agree with them."""

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return super().tokens_held(cache, tokens)


@pytest.mark.parametrize("model", MODELS)
def test_the_plans_closed_form_agrees_with_the_engines_rules(model: str) -> None:
    spec = open_model(model).spec
    for shape in SHAPES:
        fields = dict(shape)
        fields.pop("kv_dtype", None)
        workload = Workload(tokens=1, **fields)  # type: ignore[arg-type]
        closed = compile_plan(spec, workload, THEORETICAL)
        asked = compile_plan(spec, workload, _AskedEngine())
        assert any(g.plain for g in closed.groups) or not any(c.caches_tokens for c, _ in spec.groups)
        assert not any(g.plain for g in asked.groups)
        for tokens in LENGTHS:
            a = closed.at(tokens, workload.batch, workload.shared_prefix)
            b = asked.at(tokens, workload.batch, workload.shared_prefix)
            assert replace(a, engine="x") == replace(b, engine="x"), (model, shape, tokens)


def test_a_sliding_window_model_by_hand() -> None:
    # gpt-oss-120b (openai/gpt-oss-120b config.json): 36 layers alternating sliding (window 128)
    # and full attention, 8 KV heads of head_dim 64, 16-bit: 2 x 8 x 64 x 2 = 2,048 bytes a token
    # a layer. At 1,000 tokens: 18 full layers x 1,000 x 2,048 = 36,864,000 and 18 sliding ones
    # x 128 x 2,048 = 4,718,592.
    spec = open_model("gpt-oss-120b").spec
    plan = compile_plan(spec, Workload(tokens=1))
    assert plan.total_bytes(1000) == 36_864_000 + 4_718_592
    # 100 tokens fit the window: 36 x 100 x 2,048; batch 3 triples it.
    assert plan.total_bytes(100, 3) == 3 * 36 * 100 * 2048
    est = plan.at(1000)
    assert "sliding_attention layers keep at most 128 of the 1,000 tokens" in est.notes
    assert not any("keep at most" in n for n in plan.at(100).notes)
    assert plan.per_token_bytes == 36 * 2048


def test_the_plan_checks_what_changes_between_lengths() -> None:
    plan = compile_plan(open_model("llama-3.1-8b").spec, Workload(tokens=1, batch=2, dp=2))
    for call, message in (
        (lambda: plan.at(0), "tokens must be a positive integer, got 0"),
        (lambda: plan.at(True), "tokens must be a positive integer, got True"),  # type: ignore[arg-type]
        (lambda: plan.at(10, 0), "batch must be a positive integer, got 0"),
        (lambda: plan.at(10, 2, 11), r"shared prefix \(11\) is longer than the 10 tokens"),
        (lambda: plan.at(10, 1), "2 data-parallel replicas need at least 2 sequences"),
        (lambda: plan.at(10, 2, -1), "shared_prefix must be a non-negative integer, got -1"),
    ):
        with pytest.raises(UsageError, match=message):
            call()


def test_an_encoder_decoder_plan_notes_each_lengths_encoder_default() -> None:
    # t5-small has no encoder length of its own: each length is assumed to be the encoder's too,
    # and said so, whatever length the plan was compiled at.
    spec = open_model("t5-small").spec
    plan = compile_plan(spec, Workload(tokens=7))
    for tokens in (5, 600):
        est = plan.at(tokens)
        assumed = [n for n in est.notes if n.startswith("encoder length not given")]
        assert assumed == [
            f"encoder length not given: cross-attention assumed to cache {tokens:,} encoder tokens "
            "(set --encoder-tokens)"
        ]
        assert plan.fixed_notes(tokens) == tuple(n for n in est.notes if "keep at most" not in n)
        assert est == estimate(spec, Workload(tokens=tokens))
    given = plan.at(5, encoder_tokens=40)
    assert given.workload.encoder_tokens == 40
    assert given == estimate(spec, Workload(tokens=5, encoder_tokens=40))


def test_many_replicas_cost_two(run_cli) -> None:
    # 65,536 replicas (the cap) share 100,000 sequences: 34,464 replicas hold 2, 31,072 hold 1.
    # llama-3.1-8b at 10 tokens: 10 x 131,072 B = 1,310,720 B per sequence, so 100,000 of them.
    start = time.perf_counter()
    data = run_cli("estimate", "llama-3.1-8b", "--tokens", "10", "--batch", "100000", "--dp", "65536", "--json").json()
    assert data["total_bytes"] == 100_000 * 1_310_720
    assert time.perf_counter() - start < 30  # was one entry per replica; a bound, not a benchmark


def test_a_deep_model_costs_its_layer_kinds_not_its_layers(monkeypatch, tmp_path: Path) -> None:
    # 65,536 layers took speed 60 s and fit 9 s: every step summed every layer. Llama-3.1-8B's
    # geometry at 65,536 layers: 65,536 x 2 x 8 x 128 x 2 B = 268,435,456 B per token.
    config = fixture_config("Llama-3.1-8B.json") | {"num_hidden_layers": 65_536}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    from kvcalc.engines.base import Engine

    rows = 0
    real = Engine.rows

    def counted(self: Engine, cache: object, tp: int) -> tuple[int, int, int | None]:
        nonlocal rows
        rows += 1
        return real(self, cache, tp)  # type: ignore[arg-type]

    monkeypatch.setattr(Engine, "rows", counted)
    est = api.estimate(str(path), tokens=10)
    assert est.per_token_bytes == 268_435_456 and est.total_bytes == 10 * 268_435_456
    assert rows <= 2  # one layer kind, asked once per batch size
    report = api.speed(str(path), prompt=100, output=2, gpu="h100", compute=api.Compute(weights=10**12), sweep=[1, 2])
    assert report.result.prefill.kv_bytes == 100 * 268_435_456
