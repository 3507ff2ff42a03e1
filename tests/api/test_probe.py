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


def test_the_probe_takes_the_same_sequences_as_every_call() -> None:
    # One workload object across the API (issue 37): the probe reads tokens, batch, images and the
    # encoder length from it; a prompt/output split or a shared prefix would change nothing in a
    # probe that prefills and decodes whole sequences, so each is refused, naming its parameter.
    from kvcalc import api
    from kvcalc.errors import UsageError

    _, est, _, _, _ = api.probe_request("llama-3.2-1b", sequences=api.Sequences(tokens=64, batch=3),
                                        device="cpu")  # fmt: skip
    # Llama 3.2 1B: 16 layers x 2 x 8 KV heads x 64 x 2 B (bf16) = 32,768 B a token; 3 x 64 tokens.
    assert est.total_bytes == 3 * 64 * 32_768 == 6_291_456
    for field in ({"prompt": 60, "output": 4}, {"shared_prefix": 32}):
        with pytest.raises(UsageError, match=rf"^{next(iter(field))} changes nothing in the probe$"):
            api.probe_request("llama-3.2-1b", sequences=api.Sequences(tokens=64, **field), device="cpu")
    with pytest.raises(UsageError, match=r"^tokens is part of sequences: give sequences or tokens, not both$"):
        api.probe_request("llama-3.2-1b", tokens=64, sequences=api.Sequences(tokens=64), device="cpu")
