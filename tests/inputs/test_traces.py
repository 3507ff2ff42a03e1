"""kvcalc.inputs.traces: each trace form told by its header or keys, its arrivals in seconds from
the first request, and what the load cannot take named in a note. The fixtures are written from
each format's published description (tests/fixtures/traces/README.md)."""

from __future__ import annotations

import io

import pytest

from kvcalc import api
from kvcalc.errors import SourceError
from kvcalc.inputs.traces import Trace, read_trace
from tests.helpers.paths import FIXTURES

TRACES = FIXTURES / "traces"


def _read(text: str, limit: int | None = None) -> Trace | None:
    return read_trace(io.BytesIO(text.encode()), name="t", limit=limit)


@pytest.mark.parametrize("name", ["kvcalc.csv", "kvcalc.jsonl"])
def test_kvcalcs_own_form_is_seconds(name: str) -> None:
    trace = api.read_trace(TRACES / name)
    assert trace is not None
    assert trace.requests == ((0.0, 100, 3), (1.5, 100, 3), (10.0, 100, 3))
    assert "10.000 s from the first" in trace.notes[0]


def test_azure_2023_timestamps_are_datetimes_to_100_ns() -> None:
    trace = api.read_trace(TRACES / "azure-llm-2023.csv")
    assert trace is not None and trace.form.startswith("Azure")
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s; the third row (0 generated tokens) left out.
    assert trace.requests == ((0.0, 374, 44), (pytest.approx(4.314579, abs=1e-9), 396, 109))
    assert any(n.startswith("1 row(s) of 0 ContextTokens or 0 GeneratedTokens left out") for n in trace.notes)


def test_azure_2024_timestamps_with_an_offset() -> None:
    trace = api.read_trace(TRACES / "azure-llm-2024.csv")
    assert trace is not None
    # 00:00:01.509930 - 00:00:00.009930 = 1.5 s.
    assert trace.requests == ((0.0, 2048, 28), (pytest.approx(1.5, abs=1e-9), 4096, 12))
    # An offset counts: 01:00:00+01:00 is 00:00:00 UTC, 0.5 s before 00:00:00.5 UTC.
    shifted = _read("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.5+00:00,10,2\n"
                    "2024-05-10 01:00:00+01:00,10,2\n")  # fmt: skip
    assert shifted is not None and [t for t, _, _ in shifted.requests] == [0.5, 0.0]


def test_burstgpt_leaves_its_failures_out_said() -> None:
    trace = api.read_trace(TRACES / "burstgpt.csv")
    assert trace is not None and trace.form.startswith("BurstGPT")
    # Timestamps 5, 45, 118 s from the first at 5: 0, 40, 113; the failure at 130 (0 response tokens) out.
    assert trace.requests == ((0.0, 472, 18), (40.0, 1087, 230), (113.0, 417, 276))
    assert any(n.startswith("1 failed request(s) left out (Response tokens 0") for n in trace.notes)
    assert any("ChatGPT, GPT-4 all replayed on this one model" in n for n in trace.notes)


def test_mooncake_is_milliseconds_and_its_shared_blocks_are_named() -> None:
    trace = api.read_trace(TRACES / "mooncake.jsonl")
    assert trace is not None and trace.form.startswith("Mooncake")
    # 30535 - 27482 = 3053 ms.
    assert trace.requests == ((0.0, 6955, 52), (pytest.approx(3.053), 6472, 26))
    # 14 + 13 blocks; the second request's first 12 (46..57) repeat the first's.
    assert any(n.startswith("hash_ids: 12 of the trace's 27 prompt blocks (512 tokens each)") for n in trace.notes)


def test_the_first_n_requests_only() -> None:
    for name in ("kvcalc.csv", "kvcalc.jsonl", "burstgpt.csv"):
        trace = api.read_trace(TRACES / name, limit=2)
        assert trace is not None and len(trace.requests) == 2, name


@pytest.mark.parametrize("text", ["prompt,output\n10,2\n", '{"prompt": 10, "output": 2}\n', "", "tokens\n5\n"])
def test_a_mix_without_arrivals_is_none(text: str) -> None:
    assert _read(text) is None


@pytest.mark.parametrize(("text", "message"), [
    ("arrival,prompt,output\n-1,10,2\n", "line 2: time '-1' is not a number"),
    ("arrival,prompt,output\nnan,10,2\n", "line 2: time 'nan'"),
    ("arrival,prompt,output\n0,10,0\n", "line 2: output '0' is not a count of tokens (1 or more)"),
    ("arrival,prompt,output\n0,10\n", "line 2: 2 values under a header of 3 columns"),
    ('{"arrival": 0, "prompt": 1, "output": 1}\n[1]\n', "line 2: not a JSON object"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "line 2: TIMESTAMP 'yesterday' is not a date"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 00:00:00,1,1\n", "is not a date"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1, "input_length": 5}\n',
     "line 2: no 'output_length'"),
    ("arrival,prompt,output\n", "holds no request to run"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [[1]]}\n', "line 1: hash_ids holds"),
])  # fmt: skip
def test_a_bad_trace_is_one_line(text: str, message: str) -> None:
    with pytest.raises(SourceError, match=r"^t ") as caught:
        _read(text)
    assert message in str(caught.value) and "\n" not in str(caught.value)
