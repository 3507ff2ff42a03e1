"""The estimate (kvcalc.calc.estimate)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kvcalc import api
from tests.conftest import fixture_config


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
    report = api.speed(str(path), prompt=100, output=2, gpu="h100", weights=10**12, sweep=[1, 2])
    assert report.result.prefill.kv_bytes == 100 * 268_435_456
