"""mlx_lm.server read: its recorded answers (tests/fixtures/servers/mlx-lm-0.32.2/, how they were
recorded in its README), its recorded log, and the real server started here when mlx-lm's Python is
present ($KVCALC_MLX_PYTHON or ./.venv-mlx; skipped otherwise). It reveals its model at best, and
the observation must say what it does not reveal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.engines import observing
from kvcalc.engines.mlx.observe import claims, identify, read_log, read_server
from kvcalc.engines.observing import Observation, clean_lines
from tests.helpers.fake_server import Route, fake_server
from tests.helpers.fake_server import http_getter as _get
from tests.helpers.mlx_server import mlx_python, mlx_server

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED = FIXTURES / "servers" / "mlx-lm-0.32.2"
LOG = FIXTURES / "logs" / "mlx" / "mlx-lm-0.32.2-server-two-requests.log"
PYTHON = mlx_python()
needs_mlx = pytest.mark.skipif(PYTHON is None, reason="no mlx-lm Python ($KVCALC_MLX_PYTHON or .venv-mlx)")


def _routes(name: str) -> dict[str, Route]:
    answers = json.loads((RECORDED / name).read_text())
    return {path: Route(a["body"], status=a["status"], content_type=a["content_type"]) for path, a in answers.items()}


def _says_what_is_missing(seen: Observation) -> None:
    assert [m.split(":")[0] for m in seen.missing if not m.startswith("the model")] == [
        "the context", "the requests at once", "the cache's size and usage", "the machine",
    ]  # fmt: skip
    assert seen.pools == () and seen.usage is None and seen.memory == ()


def test_recorded_answers_are_mlx_lm_servers_and_name_the_local_model() -> None:
    with fake_server(_routes("answers.json")) as server:
        get = _get(server.url)
        assert identify(get)
        seen = read_server(get, server.url)
    assert {method for method, _ in server.seen} == {"GET"}
    # answers.json /v1/models: one entry, --model's folder resolved (the recording's temporary folder).
    assert seen.settings == {"model": "/tmp/wt39tm/tmpn87lensp/tiny-llama"}
    assert seen.engine == "mlx" and seen.release is None
    _says_what_is_missing(seen)
    assert not any(m.startswith("the model") for m in seen.missing)


def test_with_no_hub_cache_the_model_list_is_empty_and_the_model_missing() -> None:
    with fake_server(_routes("answers-no-hub-cache.json")) as server:
        get = _get(server.url)
        assert identify(get)
        seen = read_server(get, server.url)
    assert seen.settings == {}
    assert seen.missing[0] == "the model: give MODEL"
    assert any("empty body" in n for n in seen.notes)
    _says_what_is_missing(seen)


def test_a_repository_model_is_not_taken_for_the_served_one() -> None:
    # /v1/models with cached repositories only (--model a repository id): which one is served is not said.
    routes = _routes("answers.json")
    body = {"object": "list", "data": [{"id": "mlx-community/Qwen3-0.6B-4bit", "object": "model", "created": 1}]}
    routes["/v1/models"] = Route(json.dumps(body), content_type="application/json")
    with fake_server(routes) as server:
        seen = read_server(_get(server.url), server.url)
    assert "model" not in seen.settings
    assert any("mlx-community/Qwen3-0.6B-4bit" in n for n in seen.notes)


def test_identify_refuses_other_shapes_404s_and_a_dead_port() -> None:
    with fake_server({}) as server:  # FastAPI's 404 {"detail": "Not Found"} everywhere
        assert not identify(_get(server.url))
    assert not identify(_get("http://127.0.0.1:9"))
    # vLLM-like: /health 200 with an empty body, /v1/models entries with owned_by, /metrics served.
    vllm_like = {
        "/health": Route("", content_type="application/json"),
        "/v1/models": {"object": "list", "data": [{"id": "m", "object": "model", "created": 1, "owned_by": "vllm"}]},
        "/metrics": "vllm:num_requests_running 0\n",
    }
    with fake_server(vllm_like) as server:
        assert not identify(_get(server.url))
    # mlx_lm.server's /health and /v1/models but a JSON 404 for /metrics (FastAPI's): not it.
    routes = _routes("answers.json")
    del routes["/metrics"]
    with fake_server(routes) as server:
        assert not identify(_get(server.url))
    # Every other engine's recorded JSON answer served at /v1/models and /health.
    for body in (p for p in (FIXTURES / "servers").glob("*/*.json") if p.parent != RECORDED):
        answer = Route(body.read_text(), content_type="application/json")
        with fake_server({"/v1/models": answer, "/health": answer}) as server:
            assert not identify(_get(server.url)), body


def test_no_pool_rules_for_mlx() -> None:
    # mlx-lm allocates no pool: nothing of the server's to set a prediction beside.
    assert observing.pool_rules("mlx") is None
    assert any(r.engine == "mlx" for r in observing.server_readers())


# --- the log ---------------------------------------------------------------------------------------


def test_recorded_log_states_the_prompt_cache_not_a_pool() -> None:
    lines = clean_lines(LOG.read_text())
    assert claims(lines)
    seen = read_log(lines, "log")
    figures = {f.name: (f.value, f.source) for f in seen.figures}
    # "Starting httpd at 127.0.0.1 on port 35331..." is the file's 4th line (the source comment first).
    assert figures["port"] == (35331, "log line 4")
    # The last "Prompt Cache: 1 sequences, 0.00 GB" (line 13): one finished prompt kept, 0.00 GB printed.
    assert figures["prompt_cache_sequences"] == (1, "log line 13")
    assert figures["prompt_cache_bytes"] == (0, "log line 13")
    assert figures["prompt_cache_assistant_sequences"][0] == 1
    assert seen.pools == () and seen.unread == ()
    assert seen.missing[0] == "the model: give MODEL"


def test_a_mangled_prompt_cache_line_is_named() -> None:
    text = LOG.read_text().replace("Prompt Cache: 1 sequences, 0.00 GB", "Prompt Cache: one sequences, ? GB")
    seen = read_log(clean_lines(text), "log")
    assert seen.unread == ("log line 13: 2026-12-05 20:44:33,196 - INFO - Prompt Cache: one sequences, ? GB",)
    # The earlier, intact line (line 6: 0 sequences) is the last one read.
    assert next(f.value for f in seen.figures if f.name == "prompt_cache_sequences") == 0


def test_other_engines_logs_are_not_claimed() -> None:
    for path in (FIXTURES / "logs").glob("*/*.log"):
        if path.parent.name != "mlx":
            assert not claims(clean_lines(path.read_text())), path


# --- the real server -------------------------------------------------------------------------------


@needs_mlx
def test_the_real_mlx_lm_server_is_identified_and_says_what_it_does_not_reveal(tmp_path: Path) -> None:
    assert PYTHON is not None
    with mlx_server(PYTHON, tmp_path) as server:
        get = _get(server.url)
        assert identify(get)
        seen = read_server(get, server.url)
    # --model was the tiny model's folder: /v1/models lists it resolved (server.py handle_models_request).
    assert seen.settings == {"model": str(server.model.resolve())}
    _says_what_is_missing(seen)
