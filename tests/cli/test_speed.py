"""``kvcalc speed`` (kvcalc.cli.speed): the engines' knobs as flags."""

from __future__ import annotations

from tests.conftest import assert_one_line_error


def test_speed_takes_an_engines_knob(run_cli) -> None:
    # The first decode step after a 1,000-token prompt reads the cache of 1,000 tokens. llama-3.1-8b:
    # 131,072 B per token; vLLM with 32-token blocks holds cdiv(1000, 32) = 32 blocks = 1,024 tokens
    # -> 134,217,728 B; with its default 16-token blocks 63 blocks = 1,008 tokens -> 132,120,576 B.
    argv = ["speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "-p", "1000", "-o", "2", "--json"]
    blocks_of_32 = run_cli(*argv, "--block-size", "32")
    assert blocks_of_32.exit_code == 0, blocks_of_32.stderr
    assert blocks_of_32.json()["decode"]["first"]["kv_bytes"] == 134_217_728
    default = run_cli(*argv)
    assert default.json()["decode"]["first"]["kv_bytes"] == 132_120_576


def test_speed_refuses_a_knob_the_engine_lacks(run_cli) -> None:
    result = run_cli("speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--block-size", "32")
    line = assert_one_line_error(result)
    assert line == (
        "kvcalc: error: --block-size changes nothing under the theoretical engine (an option of vllm and sglang)"
    )
    assert result.exit_code == 2
