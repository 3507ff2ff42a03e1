"""The shared options (kvcalc.cli.options): value completion and the help's list of KV dtypes."""

from __future__ import annotations


def test_value_completion() -> None:
    from kvcalc.cli import _complete_dtype, _complete_engine, _complete_gpu

    assert _complete_engine("v") == ["vllm"]
    assert "llama.cpp" in _complete_engine("")
    assert "h100-sxm" in _complete_gpu("h1")
    assert _complete_dtype("q4") == ["q4_0", "q4_1"]
    assert _complete_dtype("fp16,fp8_e") == ["fp16,fp8_e4m3", "fp16,fp8_e5m2"]


def test_completion_lists_every_kv_dtype() -> None:
    # --help names the kinds (fp16, int4, q8_0, ...); completion lists every name.
    from kvcalc.cli.options import complete_dtype
    from kvcalc.dtypes import DTYPES, GROUP_QUANTIZED_BITS

    names = complete_dtype("")
    for name in [*DTYPES, *GROUP_QUANTIZED_BITS, "auto"]:
        assert name in names, name
