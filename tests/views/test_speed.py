"""``kvcalc speed``'s text view (kvcalc.views.speed)."""

from __future__ import annotations


def test_prompt_zero_prints_the_decode_only_table(run_cli) -> None:
    """--prompt 0 is decode only (its --help says so): the prefill row has no tokens to rate, so its
    tokens/s cell is '-' where 0 tokens / 0 s raised ZeroDivisionError as a traceback (exit 1)."""
    for extra in ((), ("--explain", "--chart")):
        result = run_cli("speed", "llama-3.1-8b", "--gpu", "h100-sxm", "--prompt", "0", "--output", "8", *extra)
        assert result.exit_code == 0, result.stderr
        assert "Traceback" not in result.stderr and result.stderr == ""
        prefill = next(line for line in result.stdout.splitlines() if "prefill (TTFT)" in line)
        # 0 weights read, 0 KV, 0 FLOPs, 0 ms, and no rate.
        assert prefill.split("│")[-2].strip() == "-"
        assert "prompt 0: decode only" in result.stdout
