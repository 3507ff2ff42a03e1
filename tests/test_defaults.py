"""The default workload (kvcalc.defaults): every command that takes --tokens assumes the same
length when it is not given, and says so. estimate and compare assumed 2,048, fit 4,096 and probe
512 before issue 37."""

from __future__ import annotations

import json

import pytest

from kvcalc.defaults import DEFAULT_TOKENS

# Llama 3.1 8B: 2 (K, V) x 32 layers x 8 KV heads x 128 dims x 2 B (bf16) = 131,072 B a token.
PER_TOKEN = 2 * 32 * 8 * 128 * 2


def test_the_default_is_2048() -> None:
    assert DEFAULT_TOKENS == 2048


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "llama-3.1-8b"],
        ["compare", "llama-3.1-8b"],
        ["fit", "llama-3.1-8b", "--kv-budget", "10GB"],
        ["fit", "llama-3.1-8b", "--engine", "llama.cpp", "--gpu-layers", "0"],
    ],
    ids=["estimate", "compare", "fit", "fit-gpu-layers"],
)
def test_every_command_assumes_the_same_tokens_and_notes_it(run_cli, argv: list[str]) -> None:
    result = run_cli(*argv, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    notes = data["notes"]
    assert any(note.startswith("tokens not given") and "2,048 tokens" in note for note in notes), notes
    tokens = data["tokens"] if "tokens" in data else data["workload"]["tokens"]
    assert tokens in (2048, [2048])


def test_estimate_sizes_the_default() -> None:
    from kvcalc import api

    # 131,072 B a token x 2,048 tokens = 268,435,456 B (256 MiB).
    assert api.estimate("llama-3.1-8b").total_bytes == PER_TOKEN * 2048 == 268_435_456


def test_fit_verdict_is_for_the_default(run_cli) -> None:
    # fit assumed 4,096 tokens (536,870,912 B); now 2,048: 131,072 x 2,048 = 268,435,456 B.
    result = run_cli("fit", "llama-3.1-8b", "--kv-budget", "10GB", "--json")
    assert json.loads(result.stdout)["verdict"]["needed_bytes"] == 268_435_456


def test_probe_requests_the_default(run_cli) -> None:
    """probe built 512 tokens: the request now holds 2,048 (2 of them decoded, --decode's default)."""
    result = run_cli("probe", "llama-3.1-8b", "--print-request")
    assert result.exit_code == 0, result.stderr
    request = json.loads(result.stdout)
    assert (request["prompt_tokens"], request["decode_tokens"]) == (2046, 2)


def test_speed_times_a_prompt_and_its_generation(run_cli) -> None:
    """speed's workload is a prompt and an output (TTFT and TPOT apart), from the same module."""
    from kvcalc.defaults import DEFAULT_OUTPUT, DEFAULT_PROMPT

    result = run_cli("speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert (data["prompt_tokens"], data["output_tokens"]) == (DEFAULT_PROMPT, DEFAULT_OUTPUT) == (1024, 256)
