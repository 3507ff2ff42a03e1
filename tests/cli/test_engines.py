"""``kvcalc engines [NAME]``: the engines, and one engine's knobs beside the engine's own flags."""

from __future__ import annotations

from kvcalc.engines import REGISTRY
from tests.conftest import assert_one_line_error


def test_the_list_names_every_engine(run_cli) -> None:
    result = run_cli("engines")
    assert result.exit_code == 0, result.stderr
    assert all(name in result.stdout for name in REGISTRY)
    rows = run_cli("engines", "--json").json()
    assert [row["name"] for row in rows] == list(REGISTRY)
    vllm = rows[[row["name"] for row in rows].index("vllm")]
    assert vllm["aliases"] == ["vllm-cpu", "vllm-cpu-amx", "vllm-rocm"]
    assert vllm["versions"][0] == "0.11" and vllm["default_version"] == "0.33"


def test_one_engine_shows_kvcalcs_flag_beside_its_own(run_cli) -> None:
    # vLLM's own spelling is --max-num-batched-tokens (vllm/engine/arg_utils.py), kvcalc's
    # --max-batched-tokens; SGLang calls kvcalc's --block-size --page-size (server_args.py).
    text = run_cli("engines", "vllm").stdout
    assert "--max-batched-tokens" in text and "--max-num-batched-tokens" in text
    knobs = run_cli("engines", "SGLang", "--json").json()["knobs"]
    assert [(k["flag"], k["engine_flag"]) for k in knobs] == [
        ("--block-size", "--page-size"),
        ("--enable-mixed-chunk", "--enable-mixed-chunk"),
        ("--scheduler-recv-interval", "--scheduler-recv-interval"),
    ]
    # an alias names its engine; llama.cpp's -kvu is llama-server's already
    flags = [k["engine_flag"] for k in run_cli("engines", "llamacpp", "--json").json()["knobs"]]
    assert flags == ["-ub, --ubatch-size", "-b, --batch-size", "-kvu, --kv-unified", "--swa-full"]
    assert "-kvu" not in run_cli("engines", "llama-server").stdout


def test_an_engine_with_no_knobs_says_so(run_cli) -> None:
    result = run_cli("engines", "transformers")
    assert result.exit_code == 0
    assert "no knobs" in result.stdout
    assert run_cli("engines", "transformers", "--json").json()["knobs"] == []


def test_an_unknown_engine_is_one_line(run_cli) -> None:
    result = run_cli("engines", "tensorrt")
    assert result.exit_code == 2
    assert_one_line_error(result, "unknown engine 'tensorrt'", "vllm")


def test_an_engine_names_the_command_lines_kvcalc_reads_and_writes_for_it(run_cli) -> None:
    vllm = run_cli("engines", "vllm", "--json").json()["command_lines"]
    assert vllm == {"reads": ["vllm serve", "python -m vllm.entrypoints.openai.api_server"], "writes": "vllm serve"}
    # transformers is a library: no command line of its own
    assert run_cli("engines", "transformers", "--json").json()["command_lines"] == {"reads": [], "writes": None}
    shown = run_cli("engines", "ollama").stdout
    assert "reads after '--': ollama serve, ollama run, ollama create" in shown
