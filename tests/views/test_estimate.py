"""The estimate view: the table and --explain's worked formula."""

from __future__ import annotations

import re

from kvcalc import api


def test_explain_says_the_engine_keeps_more_than_the_window_where_it_does() -> None:
    # vLLM reserves W - 1 + 2 x 8,192 in-flight tokens beyond a 1,024 window, capped by the 5,000 of the
    # request, in 16-token blocks: 313 blocks = 5,008 slots; "min(5,000, 1,024) = 5,008" was false.
    from kvcalc import api
    from kvcalc.views.estimate import explain_lines

    lines = explain_lines(api.estimate("gemma-3-27b", tokens=5000, batch=3, engine="vllm"), "both")
    assert not any("min(5,000, W 1,024) = 5,008" in line for line in lines)
    assert any("T = 5,008 slots the vllm engine keeps for 5,000 tokens (W 1,024" in line for line in lines)
    theory = explain_lines(api.estimate("gemma-3-27b", tokens=5000), "both")
    assert any("T = min(5,000, W 1,024) = 1,024" in line for line in theory)


_PRODUCT = re.compile(r"^\s*([\d,\s x+()]+?) = ([\d,]+) bytes")


def _products(lines: list[str]) -> list[tuple[str, int]]:
    found = []
    for line in lines:
        m = _PRODUCT.match(line)
        if m and ("x" in m.group(1) or "+" in m.group(1)):
            found.append((m.group(1), int(m.group(2).replace(",", ""))))
    return found


def _evaluate(expression: str) -> int:
    text = expression.replace(",", "").replace("x", "*")
    assert re.fullmatch(r"[\d\s*+()]+", text), expression
    return int(eval(text))  # digits, *, + and parentheses only, checked above


ENGINES = ("theoretical", "transformers", "vllm", "sglang", "llama.cpp")


def test_every_explain_product_equals_its_result() -> None:
    from kvcalc.inputs.presets import load_presets
    from kvcalc.views.estimate import explain_lines

    checked = 0
    for name in load_presets():
        for engine in ENGINES:
            try:
                est = api.estimate(name, tokens=3000, batch=2, engine=engine)
            except Exception:  # an engine that does not run this model says so elsewhere
                continue
            for expression, result in _products(explain_lines(est, "both")):
                assert _evaluate(expression) == result, (name, engine, expression, result)
                checked += 1
    assert checked > 300


def test_nemotron_h_state_says_each_part_and_its_format(run_cli) -> None:
    # Nemotron-H 8B: 24 Mamba layers; conv 8,192 + 2 x 8 x 128 = 10,240 channels x (4 - 1) = 30,720
    # elements in bf16 and a recurrent state of 128 heads x 64 x 128 = 1,048,576 elements in fp32
    # (mamba_ssm_cache_dtype absent: NemotronHForCausalLMConfig's float32).
    per_seq = 30_720 * 2 + 1_048_576 * 4
    result = run_cli("estimate", "nemotron-h-8b", "--tokens", "2048", "--explain")
    assert result.exit_code == 0, result.stderr
    assert "conv 30,720 elements in bf16 + recurrent 1,048,576 elements in fp32" in result.stdout
    assert f"24 x 1 x (30,720 x 2 + 1,048,576 x 4) = {24 * per_seq:,} bytes" in result.stdout
    data = run_cli("estimate", "nemotron-h-8b", "--tokens", "2048", "--json").json()
    mamba = next(g for g in data["groups"] if g["kind"] == "mamba")
    assert mamba["dtype"] == "mixed" and mamba["state_bytes"] == per_seq
    assert mamba["state_parts"] == [
        {"part": "conv", "elements": 30_720, "dtype": "bf16"},
        {"part": "recurrent", "elements": 1_048_576, "dtype": "fp32"},
    ]
