"""``kvcalc compare`` (kvcalc.cli.compare): the engines' knobs as flags."""

from __future__ import annotations

from tests.conftest import assert_one_line_error


def test_compare_takes_an_engines_knob(run_cli) -> None:
    # llama-3.1-8b: 131,072 B per token (32 layers x 8 KV heads x 128 x 2 x 2 B). vLLM with
    # 32-token blocks holds cdiv(1000, 32) = 32 blocks = 1,024 tokens -> 134,217,728 B.
    result = run_cli("compare", "llama-3.1-8b", "--engine", "vllm", "--block-size", "32", "--tokens", "1000",
                     "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = {row["label"]: row["total_bytes"] for row in result.json()["rows"]}
    assert rows["GQA-8"] == 134_217_728 == 1_024 * 131_072


def test_compare_refuses_a_knob_the_engine_lacks(run_cli) -> None:
    line = assert_one_line_error(run_cli("compare", "llama-3.1-8b", "--block-size", "32", "--tokens", "1000"))
    assert line == (
        "kvcalc: error: --block-size changes nothing under the theoretical engine (an option of vllm and sglang)"
    )
    assert run_cli("compare", "llama-3.1-8b", "--block-size", "32").exit_code == 2
