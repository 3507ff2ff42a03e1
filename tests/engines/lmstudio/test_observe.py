"""LM Studio's server reader (kvcalc.engines.lmstudio.observe): a fake LM Studio on 127.0.0.1 answering as
its documentation describes (lmstudio-ai/docs @ c6854fb; tests/fixtures/servers/lmstudio-0.4.12, README
citing each field). LM Studio is closed source and cannot run here."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.lmstudio import observe
from kvcalc.engines.observing import Observation, pool_rules, server_readers
from kvcalc.inputs.hf.configs import read_config
from tests.conftest import fixture_config
from tests.helpers.fake_server import fake_server
from tests.helpers.fake_server import http_getter as _getter

FIXTURES = Path(__file__).parents[2] / "fixtures"
SERVER = FIXTURES / "servers" / "lmstudio-0.4.12"
MIB = 2**20


def _json(name: str) -> Any:
    return json.loads((SERVER / name).read_text())


def _read(routes: dict[str, Any]) -> tuple[Observation, list[tuple[str, str]]]:
    with fake_server(routes) as server:
        get = _getter(server.url)
        assert observe.identify(get)
        obs = observe.read_server(get, server.url)
    return obs, server.seen


def _figure(obs: Observation, name: str) -> Any:
    return next(f.value for f in obs.figures if f.name == name)


def test_the_v1_api_gives_the_loaded_context() -> None:
    obs, seen = _read({"/api/v1/models": _json("api_v1_models.json")})
    assert {m for m, _ in seen} == {"GET"} and {p for _, p in seen} == {"/api/v1/models"}
    assert obs.engine == "lmstudio"
    # context_length 262,144 shared by parallel 4 (one unified cache): 4 sequences of 65,536 tokens,
    # whose pad(4 x 65,536, 256) = 262,144 cells are LM Studio's (lmstudio commandline's reading).
    assert obs.settings == {"batch": 4, "tokens": 65536, "parallel": 4, "n_batch": 512}
    pool = obs.pool()
    assert pool is not None and (pool.count, pool.unit) == (262144, "cell")
    assert pool.source == "GET /api/v1/models models[0].loaded_instances[0].config.context_length"
    assert _figure(obs, "max_context_length") == 262144 and _figure(obs, "flash_attention") is True
    assert any(m.startswith("Unified KV Cache: not revealed") for m in obs.missing)
    assert any("qwen/qwen3.6-27b" in m and "MODEL" in m for m in obs.missing)
    assert any("closed source" in n for n in obs.notes) and obs.usage is None


def test_an_mlx_model_is_the_mlx_runtime() -> None:
    body = _json("api_v1_models.json")
    body["models"][0]["format"] = "mlx"
    obs, _ = _read({"/api/v1/models": body})
    assert obs.engine == "lmstudio-mlx" and obs.pools == ()
    assert obs.settings == {"tokens": 262144, "max_kv_size": 262144, "batch": 4, "parallel": 4}


def test_no_parallel_is_lm_studios_default() -> None:
    body = copy.deepcopy(_json("api_v1_models.json"))
    del body["models"][0]["loaded_instances"][0]["config"]["parallel"]
    obs, _ = _read({"/api/v1/models": body})
    assert obs.settings["batch"] == 4 and any("default Max Concurrent Predictions 4" in n for n in obs.notes)


def test_nothing_loaded() -> None:
    body = _json("api_v1_models.json")
    body["models"][0]["loaded_instances"] = []
    obs, _ = _read({"/api/v1/models": body})
    assert obs.settings == {} and obs.missing[0].startswith("a loaded model")


def test_the_v0_api_before_0_4() -> None:
    # GET /api/v1/models is a 404 (LM Studio 0.3.x): the v0 list says which model is loaded, not its context.
    obs, seen = _read({"/api/v0/models": _json("api_v0_models.json")})
    assert {p for _, p in seen} == {"/api/v1/models", "/api/v0/models"}
    assert obs.engine == "lmstudio-mlx"  # compatibility_type "mlx"
    assert _figure(obs, "max_context_length") == 32768 and obs.settings == {}
    assert obs.missing[0].startswith("the context length it was loaded with")


@pytest.mark.parametrize("routes", [
    {},
    {"/api/v1/models": {"models": []}},  # says nothing LM Studio's own
    {"/api/tags": {"models": [{"name": "llama3.1:8b"}]}, "/api/v1/models": {"models": [{"name": "x"}]}},
    {"/api/v0/models": {"object": "list", "data": [{"id": "m", "object": "model"}]}},  # OpenAI-like, no state
])  # fmt: skip
def test_identify_refuses_other_servers(routes: dict[str, Any]) -> None:
    with fake_server(routes) as server:
        assert not observe.identify(_getter(server.url))


def test_identify_refuses_the_other_engines_fixtures() -> None:
    for folder in (FIXTURES / "servers").iterdir():
        if folder.name.startswith("lmstudio"):
            continue
        routes = {"/" + f.stem.replace("_", "/"): json.loads(f.read_text()) for f in folder.glob("*.json")}
        with fake_server(routes) as server:
            assert not observe.identify(_getter(server.url)), folder.name


def test_the_readers_are_found_and_no_log_reader() -> None:
    assert any(r.engine == "lmstudio" and r.identify is observe.identify for r in server_readers())
    assert observe.LOGS == ()
    assert pool_rules("lmstudio") is observe.POOL_RULES["lmstudio"]


def test_the_prediction_matches_a_real_log() -> None:
    """LM Studio 0.4.12 (lmstudio-bug-tracker#1862, tests/fixtures/logs/lmstudio): Qwen3.6-27B at a
    262,144 context, 4 predictions: "llama_kv_cache: size = 16384.00 MiB (262144 cells, 16 layers, 4/1
    seqs)" and "llama_memory_recurrent: size = 598.50 MiB (4 cells, 64 layers, 4 seqs)". The server
    fixture is that load. By hand: 16 full-attention layers x 262,144 cells x (2 x 4 KV heads x 256 x
    2 B = 4,096 B) = 16,384 MiB; 4 states (one per prediction) of 48 Gated DeltaNet layers x 3,268,608 B
    (conv 3 x 10,240 + recurrent 48 x 128 x 128 elements, f32) = 627,572,736 B = 598.5 MiB."""
    obs, _ = _read({"/api/v1/models": _json("api_v1_models.json")})
    config = copy.deepcopy(fixture_config("Qwen3.5-0.8B.json"))  # Qwen3.5's real config, the 27B's sizes
    config["text_config"].update(num_hidden_layers=64, hidden_size=5120, num_attention_heads=24,
                                 num_key_value_heads=4, linear_num_value_heads=48, intermediate_size=17408,
                                 layer_types=["full_attention" if i % 4 == 3 else "linear_attention"
                                              for i in range(64)])  # fmt: skip
    rules = pool_rules(obs.engine)
    assert rules is not None and rules.from_estimate is not None
    tokens, batch = obs.settings["tokens"], obs.settings["batch"]
    assert isinstance(tokens, int) and isinstance(batch, int)
    est = api.estimate(read_config(config, name="qwen3.6-27b"), tokens=tokens, batch=batch, engine="lmstudio")
    predicted = {p.kind: p for p in rules.from_estimate(est)}
    assert predicted["kv"].count == obs.pool().count == 262144  # type: ignore[union-attr]
    assert predicted["kv"].bytes == 16384 * MIB
    assert predicted["recurrent"].count == 4 and predicted["recurrent"].bytes * 2 == 1197 * MIB
    log = (FIXTURES / "logs" / "lmstudio" / "bug-tracker-1862-qwen3.6-27b.log").read_text()
    assert "16384.00 MiB (262144 cells" in log and "598.50 MiB (4 cells" in log
