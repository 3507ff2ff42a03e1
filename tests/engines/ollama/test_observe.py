"""Ollama's server and log readers (kvcalc.engines.ollama.observe): a fake Ollama on 127.0.0.1 answering
as github.com/ollama/ollama v0.32.15 does (tests/fixtures/servers/ollama-0.32.x, README citing each
field), and real published logs (tests/fixtures/logs/ollama, each citing its issue)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.observing import Observation, clean_lines, log_readers, pool_rules, server_readers
from kvcalc.engines.ollama import observe
from tests.helpers.fake_server import Route, fake_server
from tests.helpers.fake_server import http_getter as _getter

FIXTURES = Path(__file__).parents[2] / "fixtures"
SERVER = FIXTURES / "servers" / "ollama-0.32.x"
LOGS = FIXTURES / "logs" / "ollama"
MIB = 2**20
GIB = 2**30


def _json(name: str) -> Any:
    return json.loads((SERVER / name).read_text())


def _ollama_routes(ps: str = "api_ps.json") -> dict[str, Any]:
    return {"/api/version": _json("api_version.json"), "/api/ps": _json(ps)}


def _log(name: str) -> Observation:
    lines = clean_lines((LOGS / name).read_text())
    assert observe.claims(lines)
    return observe.read_log(lines, name)


def _figure(obs: Observation, name: str) -> Any:
    return next(f.value for f in obs.figures if f.name == name)


# --- the server -------------------------------------------------------------------------------------


def test_the_server_is_read_with_gets_only() -> None:
    with fake_server(_ollama_routes()) as server:
        get = _getter(server.url)
        assert observe.identify(get)
        obs = observe.read_server(get, server.url)
    assert {method for method, _ in server.seen} == {"GET"}
    assert {path for _, path in server.seen} == {"/api/version", "/api/ps"}
    # /api/version "0.32.15": a release kvcalc models (0.5 .. 0.32), so its rules by name.
    assert obs.engine == "ollama@0.32.15" and obs.release == "0.32.15"
    # context_length 8192 is num_ctx per slot (llm/llama_server.go ContextLength): --tokens, not the pool.
    assert obs.settings == {"tokens": 8192}
    assert obs.pools == ()
    # size = size_vram = 4403.49 + 4096.00 + 560.01 MiB of buffer lines (README): 9,499,574,271 B.
    assert _figure(obs, "size") == _figure(obs, "size_vram") == 9_499_574_271
    assert _figure(obs, "quantization_level") == "Q4_K_M" and _figure(obs, "family") == "llama"
    assert any(m.startswith("OLLAMA_NUM_PARALLEL") and "--batch" in m for m in obs.missing)
    assert any("llama3.1:8b" in m and "MODEL" in m and "/api/show" in m for m in obs.missing)
    assert any("no running or waiting requests" in n for n in obs.notes)
    assert obs.usage is None


def test_a_server_with_nothing_loaded_says_so() -> None:
    with fake_server(_ollama_routes("api_ps_empty.json")) as server:
        obs = observe.read_server(_getter(server.url), server.url)
    assert any(m.startswith("a loaded model") for m in obs.missing)
    assert "tokens" not in obs.settings


def test_a_release_kvcalc_does_not_model_is_noted() -> None:
    routes = {"/api/version": {"version": "0.33.2"}, "/api/ps": _json("api_ps.json")}
    with fake_server(routes) as server:
        obs = observe.read_server(_getter(server.url), server.url)
    assert obs.engine == "ollama" and obs.release == "0.33.2"
    assert any("0.33.2 is not a release kvcalc models" in n for n in obs.notes)


@pytest.mark.parametrize("routes", [
    {},  # every path a 404
    {"/version": {"version": "0.32.0"}, "/v1/models": {"object": "list", "data": []}},  # vLLM's paths
    {"/api/version": {"version": "0.32.15"}},  # no /api/ps
    {"/api/version": Route({"version": "0.32.15"}, status=500), "/api/ps": {"models": []}},
])  # fmt: skip
def test_identify_refuses_other_servers(routes: dict[str, Any]) -> None:
    with fake_server(routes) as server:
        assert not observe.identify(_getter(server.url))


def test_identify_refuses_the_other_engines_fixtures() -> None:
    for folder in (FIXTURES / "servers").iterdir():
        if folder.name.startswith("ollama"):
            continue
        routes = {"/" + f.stem.replace("_", "/"): json.loads(f.read_text()) for f in folder.glob("*.json")}
        with fake_server(routes) as server:
            assert not observe.identify(_getter(server.url)), folder.name


def test_the_readers_are_found() -> None:
    assert any(r.engine == "ollama" and r.identify is observe.identify for r in server_readers())
    assert any(r.engine == "ollama" and r.claims is observe.claims for r in log_readers())
    assert pool_rules("ollama") is observe.POOL_RULES["ollama"]


# --- the logs ---------------------------------------------------------------------------------------


def test_v0_5_launch_line() -> None:
    # "--ctx-size 8192 ... --parallel 4" (llm/server.go v0.5.4: --ctx-size is NumCtx x numParallel).
    obs = _log("v0.5.4-llama3.1-8b-parallel4.log")
    assert obs.engine == "ollama@0.5.4" and obs.release == "0.5.4-0-g2ddc32d-dirty"
    assert obs.settings == {"batch": 4, "tokens": 2048}
    pool = obs.pool()
    # The bundled llama.cpp's own lines are the pool read: "KV self size = 1024.00 MiB" (line 16) over
    # n_ctx = 8192 (line 10); the launch line's --ctx-size 8192 (line 3) is what Ollama asked for.
    assert pool is not None and (pool.count, pool.unit, pool.source) == (8192, "cell", "log line 16")
    assert not obs.unread


def test_v0_33_llama_server_line_through_its_reader() -> None:
    # "-c 8192 -np 2 ... --flash-attn auto": llama-server's reader gives 2 slots of 4,096 tokens.
    obs = _log("v0.33.2-ministral3-3b-parallel2.log")
    assert obs.engine == "ollama" and obs.release == "0.33.2"  # 0.33 is newer than kvcalc's 0.32
    assert obs.settings == {"batch": 2, "tokens": 4096}
    assert obs.pool() is not None and obs.pool().count == 8192  # type: ignore[union-attr]
    assert _figure(obs, "-np") == "2"


def test_load_request_line() -> None:
    # "Parallel:1 ... FlashAttention:Enabled KvSize:32768 KvCacheType:q8_0" (runner.go, v0.11.5 .. v0.29).
    obs = _log("issue14510-v0.17-load-request.log")
    assert obs.settings == {"kv_dtype": "q8_0", "flash_attention": 1, "batch": 1, "tokens": 32768}
    pool = obs.pool()
    assert pool is not None and pool.count == 32768 and pool.source == "log line 4 load request KvSize"
    assert any(m.startswith("the Ollama release") for m in obs.missing)


def test_offload_to_cuda_estimate() -> None:
    # llm/memory.go (v0.5): memory.required.kv="9.5 GiB" weights.total="385.0 GiB" graph.full="654.0 MiB".
    obs = _log("issue8447-v0.5-offload-to-cuda.log")
    kv, weights, graph = obs.term("kv cache"), obs.term("weights"), obs.term("activation peak")
    assert kv is not None and kv.bytes == 10_200_547_328 and not kv.exact  # 9.5 x 2^30
    assert weights is not None and weights.bytes == 385 * GIB
    assert graph is not None and graph.bytes == 654 * MIB
    assert obs.pools == () and any(m.startswith("the runner's context and slots") for m in obs.missing)


def test_offload_library_spelling_and_journald_prefix() -> None:
    # llm/server.go (v0.11): msg=offload library=cuda ... memory.required.kv="992.0 MiB"; --ctx-size 8192 --parallel 1.
    obs = _log("pr12000-v0.11-offload-library.log")
    assert obs.term("kv cache") is not None and obs.term("kv cache").bytes == 992 * MIB  # type: ignore[union-attr]
    assert obs.settings == {"batch": 1, "tokens": 8192}
    assert obs.pool() is not None and obs.pool().count == 8192  # type: ignore[union-attr]


def test_the_llama_cpp_lines_alone_are_not_claimed() -> None:
    # Only llama.cpp's own lines (llama_kv_cache_init ...): llama.cpp's reader's, not Ollama's.
    assert not observe.claims(clean_lines((LOGS / "issue9362_qwen2_parallel4.log").read_text()))


def test_server_config_and_kv_cache_lines() -> None:
    # ml/backend.go: "kv cache" device=CUDA0 size="1.0 GiB"; server config env map (routes.go).
    stamp = "time=2025-10-01T10:00:00.000Z level=INFO"
    lines = [
        f'{stamp} source=routes.go:1475 msg="server config" env="map[CUDA_VISIBLE_DEVICES: OLLAMA_CONTEXT_LENGTH:4096 '
        "OLLAMA_FLASH_ATTENTION:false OLLAMA_KV_CACHE_TYPE: OLLAMA_NUM_PARALLEL:4 "
        'OLLAMA_ORIGINS:[http://localhost https://localhost]]"',
        f'{stamp} source=routes.go:1528 msg="Listening on 127.0.0.1:11434 (version 0.12.3)"',
        f'{stamp} source=backend.go:321 msg="kv cache" device=CUDA0 size="1.0 GiB"',
    ]
    obs = observe.read_log(lines, "-")
    assert obs.engine == "ollama@0.12.3"
    assert _figure(obs, "OLLAMA_NUM_PARALLEL") == "4"
    # No launch line or load request: the config's context, and the runner's context named as missing.
    assert obs.settings == {"tokens": 4096} and obs.pools == ()


def test_a_mangled_pool_line_is_unread() -> None:
    lines = (LOGS / "issue14510-v0.17-load-request.log").read_text().splitlines()
    lines[3] = lines[3].replace("KvSize:32768", "KvSize:lots")
    obs = observe.read_log(clean_lines("\n".join(lines)), "-")
    assert any(u.startswith("log line 4: a load request without a KvSize") for u in obs.unread)
    assert obs.pool() is not None and obs.pool().source == "log line 3 load request KvSize"  # type: ignore[union-attr]
    lines[2] = lines[2].replace("KvSize:32768", "KvSize:lots")
    obs = observe.read_log(clean_lines("\n".join(lines)), "-")
    assert obs.pools == () and len(obs.unread) == 2


# --- the prediction ---------------------------------------------------------------------------------


def test_the_prediction_matches_a_real_log() -> None:
    """Ollama 0.5.4, Llama 3.1 8B, OLLAMA_NUM_PARALLEL 4 x num_ctx 2048: the log's own figures are
    "--ctx-size 8192" and (llama.cpp's line in the same log) "KV self size = 1024.00 MiB". By hand:
    8,192 cells (a multiple of 32, no padding) x 32 layers x 2 (K, V) x 8 heads x 128 x 2 B =
    8,192 x 131,072 B = 1,073,741,824 B = 1024 MiB."""
    obs = _log("v0.5.4-llama3.1-8b-parallel4.log")
    rules = pool_rules(obs.engine.partition("@")[0])
    assert rules is not None and rules.sizing == "context" and rules.from_estimate is not None
    tokens, batch = obs.settings["tokens"], obs.settings["batch"]
    assert isinstance(tokens, int) and isinstance(batch, int)
    est = api.estimate("llama-3.1-8b", tokens=tokens, batch=batch, engine=obs.engine)
    (kv,) = rules.from_estimate(est)
    assert kv.kind == "kv" and kv.count == obs.pool().count == 8192  # type: ignore[union-attr]
    assert kv.bytes == 1024 * MIB and kv.unit_bytes == 131_072
    assert "KV self size  = 1024.00 MiB" in (LOGS / "v0.5.4-llama3.1-8b-parallel4.log").read_text()
