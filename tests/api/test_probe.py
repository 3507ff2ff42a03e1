"""The probe's service (kvcalc.api._probe): parameters checked before anything runs."""

from __future__ import annotations

import pytest

from tests.conftest import assert_one_line_error


@pytest.mark.parametrize("tolerance", ["inf%", "1e400%", "nan%", "-1", "101%", "5 bytes", "1e3"])
def test_bad_tolerance_fails_before_the_probe_runs(run_cli, monkeypatch, tolerance: str) -> None:
    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the probe ran before --tolerance was checked")

    monkeypatch.setattr("kvcalc.engines.transformers.torch_probe.run", never)
    result = run_cli("probe", "llama-3.1-8b", "--tokens", "40", "--tolerance", tolerance)
    assert_one_line_error(result, "--tolerance")
    assert result.exit_code == 2
