"""The estimate view: the table and --explain's worked formula."""

from __future__ import annotations


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
