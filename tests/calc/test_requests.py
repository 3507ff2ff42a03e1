"""Request mixes read in one pass and kept as counts: the bulk path (plain digits) and the csv
module agree, chunk boundaries change nothing, percentiles are exact nearest ranks, and the one
bound that remains (distinct lengths) refuses in one line."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import kvcalc
from kvcalc import api
from kvcalc.calc import requests
from kvcalc.calc.requests import Mix, Request, RequestSummary, parse_lengths
from kvcalc.errors import SourceError, UsageError
from tests.conftest import assert_one_line_error

# 2 x 32 layers x 8 KV heads x 128 dims x 2 B (bf16): llama-3.1-8b's bytes per token.
LLAMA_TOKEN_BYTES = 131_072

ROWS = [(100, 28), (1000, 24), (3000, 72), (100, 28), (5, 0), (0, 7), (123_456, 1)]
PLAIN = "prompt,output\n" + "".join(f"{p},{o}\n" for p, o in ROWS)
# tokens 128 x 2, 1,024, 3,072, 5, 7 and 123,457; prompts sum to 127,661, outputs to 160.
WANT = Mix({128: 2, 1024: 1, 3072: 1, 5: 1, 7: 1, 123_457: 1}, 7, 127_661, 160)


def _spy_bulk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows each bulk conversion returned (the fast path ran once per entry)."""
    seen: list[int] = []
    real = requests._bulk

    def spy(*args: object) -> object:
        batch = real(*args)  # type: ignore[arg-type]
        seen.append(len(batch[2]) if batch is not None else 0)
        return batch

    monkeypatch.setattr(requests, "_bulk", spy)
    return seen


def test_the_bulk_path_and_the_csv_module_give_the_same_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    bulk = _spy_bulk(monkeypatch)
    assert parse_lengths(PLAIN, name="mix") == WANT
    assert bulk == [7]  # every row in bulk
    bulk.clear()
    # The same rows as the csv module reads them: quoted, spaced, CRLF under a BOM, columns
    # swapped, a blank line; and as JSON lines.
    slow = [
        'prompt,output\n"100",28\n' + PLAIN.split("\n", 2)[2],
        "prompt , output\n" + "".join(f" {p} ,{o}\n" for p, o in ROWS),
        PLAIN + "\n",
        "\ufeffprompt,output\r\n" + "".join(f"{p},{o}\r\n" for p, o in ROWS),
        "output,prompt\n" + "".join(f"{o},{p}\n" for p, o in ROWS),
        "".join(json.dumps({"prompt": p, "output": o}) + "\n\n" for p, o in ROWS),
    ]
    for text in slow:
        assert parse_lengths(text, name="mix") == WANT, text
    # The quoted field hands the rest of its file to the csv module, the spaced header is not
    # plain, and a blank line sends its chunk to the csv module; CRLF rows and swapped columns
    # are read in bulk.
    assert bulk == [7, 7]
    # One column: tokens, or prompt alone (output 0).
    assert parse_lengths("tokens\n128\n7\n", name="mix") == Mix({128: 1, 7: 1}, 2, 135, 0)
    assert parse_lengths("Prompt\n128\n7", name="mix") == Mix({128: 1, 7: 1}, 2, 135, 0)
    # JSON lines as json.dumps writes them are read in bulk too; {"tokens": T} alike.
    bulk.clear()
    assert parse_lengths("".join(json.dumps({"prompt": p, "output": o}) + "\n" for p, o in ROWS), name="m") == WANT
    assert parse_lengths('{"tokens": 128}\r\n{"tokens":7}', name="mix") == Mix({128: 1, 7: 1}, 2, 135, 0)
    assert bulk == [7, 2]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13, 64, 2**18])
def test_chunk_boundaries_change_nothing(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(requests, "CHUNK_BYTES", chunk)
    assert parse_lengths(PLAIN, name="mix") == WANT
    assert parse_lengths(PLAIN.removesuffix("\n"), name="mix") == WANT  # no line break at the end
    assert parse_lengths(PLAIN.replace("\n", "\r\n"), name="mix") == WANT  # \r\n may be cut in two
    # Bulk rows, a field quoted across a line break (its value trimmed to 100), more rows and a
    # blank line: read as one file.
    rows = [f"{p},{o}\n" for p, o in ROWS]
    quoted = "prompt,output\n" + "".join(rows[1:3]) + '"100\n",28\n' + "".join(rows[3:]) + "\n"
    assert parse_lengths(quoted, name="mix") == WANT
    # A byte-order mark and characters of two and three bytes may straddle chunks too (str.strip
    # trims the ideographic space off a field name and the no-break space off a value).
    assert parse_lengths("\ufeff" + PLAIN, name="mix") == WANT
    assert parse_lengths("\u3000prompt,output\n" + "".join(f"{p}\u00a0,{o}\n" for p, o in ROWS), name="mix") == WANT
    text = "\n \n" + "".join(json.dumps({"prompt": p, "output": o}) + "\n" for p, o in ROWS)
    assert parse_lengths(text, name="mix") == WANT  # white space first: JSON lines all the same
    # Errors keep their line numbers: the csv module's count (a blank line is a line; rows after
    # it are numbered by row, as DictReader numbers them) and splitlines' for JSON.
    with pytest.raises(SourceError, match=r"^mix line 9: a request of 0 tokens caches nothing$"):
        parse_lengths(PLAIN + "0,0\n", name="mix")
    with pytest.raises(SourceError, match=r"^mix line 10: lengths must be whole numbers such as 512, got 'x'$"):
        parse_lengths(PLAIN + "\n\n9,9\nx,1\n", name="mix")
    with pytest.raises(SourceError, match=r"^mix line 4: not JSON"):
        parse_lengths('\n{"prompt": 1}\r\n\u2028{bad\n', name="mix")
    with pytest.raises(SourceError, match=r"^mix is not UTF-8 text$"):
        parse_lengths(PLAIN.encode() + "é".encode()[:1], name="mix")


def test_a_file_that_is_not_utf8_is_refused_as_such_wherever_else_it_is_wrong(monkeypatch) -> None:
    # The whole file used to be decoded first: a bad row before a bad byte still reads as not UTF-8.
    monkeypatch.setattr(requests, "CHUNK_BYTES", 16)
    data = b"prompt,output\n1,x\n" + b"10,2\n" * 100 + b"\xff\n"
    with pytest.raises(SourceError, match=r"^mix is not UTF-8 text$"):
        parse_lengths(data, name="mix")
    with pytest.raises(SourceError, match=r"^mix line 2: lengths must be whole numbers such as 512, got 'x'$"):
        parse_lengths(data[:-2], name="mix")


def test_a_line_without_end_is_refused_before_it_fills_memory() -> None:
    line = "1" * (requests.MAX_LINE + 1)
    with pytest.raises(SourceError, match=r"^mix line 3: longer than 1,048,576 characters, not a request$"):
        parse_lengths("prompt,output\n10,2\n" + line, name="mix")
    with pytest.raises(SourceError, match=r"^mix line 2: longer than 1,048,576 characters, not a request$"):
        parse_lengths('{"prompt": 1}\n{"prompt": ' + line, name="mix")


def test_percentiles_are_nearest_ranks_over_repeated_lengths(run_cli, tmp_path: Path) -> None:
    # Ten requests: 100 tokens x 5, 200 x 3, 300 x 1, 1,000 x 1. Nearest rank r = ceil(q x 10 / 100):
    # p50 -> the 5th smallest = 100; p60 -> 6th = 200; p90 -> 9th = 300; p99 -> 10th = 1,000.
    rows = [(90, 10)] * 5 + [(150, 50)] * 3 + [(300, 0), (999, 1)]
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n" + "".join(f"{p},{o}\n" for p, o in rows))
    summary = kvcalc.estimate_requests("llama-3.1-8b", path)
    assert summary.lengths == tuple((t, n, t * LLAMA_TOKEN_BYTES) for t, n in ((100, 5), (200, 3), (300, 1), (1000, 1)))
    assert [summary.tokens_percentile(q) for q in (1, 50, 51, 60, 80, 81, 90, 91, 99, 100)] == [
        100, 100, 200, 200, 200, 300, 300, 1000, 1000, 1000,
    ]  # fmt: skip
    # 5 x 100 + 3 x 200 + 300 + 1,000 = 2,400 tokens resident; prompts 450 + 450 + 300 + 999 = 2,199.
    assert summary.total_bytes == 2400 * LLAMA_TOKEN_BYTES
    assert (summary.requests, summary.prompt_tokens, summary.output_tokens) == (10, 2199, 201)
    data = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--json").json()
    assert data["tokens"] == {"p50": 100, "p90": 300, "p99": 1000, "max": 1000}
    assert data["bytes_per_request"] == {"p50": 100 * LLAMA_TOKEN_BYTES, "p90": 300 * LLAMA_TOKEN_BYTES,
                                         "p99": 1000 * LLAMA_TOKEN_BYTES, "max": 1000 * LLAMA_TOKEN_BYTES}  # fmt: skip
    table = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path)).stdout
    assert "10 requests (theoretical)" in table
    assert "mean tokens    240.0 (prompt 219.9, output 20.1)" in table  # 2,400 / 10; 2,199 / 10; 201 / 10


def test_the_bytes_percentile_orders_by_bytes_not_tokens() -> None:
    # Bytes need not grow with tokens: by bytes the ten requests are 50 x 1, 100 x 3, 500 x 1,
    # 900 x 5 (cumulative 1, 4, 5, 10), so p10 -> 1st = 50, p40 -> 4th = 100, p50 -> 5th = 500,
    # p51 -> 6th = 900; by tokens p50 is 100 tokens (whose requests take 900 B each).
    summary = RequestSummary(((100, 5, 900), (200, 3, 100), (300, 1, 500), (1000, 1, 50)), 10, 0, 0, 0, "x")
    assert [summary.bytes_percentile(q) for q in (10, 11, 40, 41, 50, 51, 100)] == [50, 100, 100, 500, 500, 900, 900]
    assert summary.tokens_percentile(50) == 100
    with pytest.raises(UsageError, match="no requests"):  # was a ValueError: the API raises KvcalcError only
        RequestSummary((), 0, 0, 0, 0, "x").tokens_percentile(50)


@pytest.mark.parametrize("q", [101, -1, 100.5, float("nan"), float("inf"), True, "50", None])
def test_a_percentile_outside_0_to_100_is_refused(q: object) -> None:
    """bytes_percentile(101) raised IndexError (a rank past the last request)."""
    summary = RequestSummary(((100, 1, 900), (200, 1, 100)), 2, 0, 0, 0, "x")
    for method in (summary.bytes_percentile, summary.tokens_percentile):
        with pytest.raises(UsageError, match="a percentile must be a number from 0 to 100"):
            method(q)  # type: ignore[arg-type]


def test_percentiles_at_the_ends_and_between() -> None:
    # Nearest rank over 1,000 requests of lengths 1..1,000: p0 -> rank max(1, 0) = 1st -> 1;
    # p16.1 -> rank ceil(16.1 x 1000 / 100) = 161st -> 161 (taken as written: in binary floats
    # 16.1 x 1000 is 16100.000000000002, which would give 162); p100 -> 1,000th -> 1,000.
    summary = RequestSummary(tuple((t, 1, t) for t in range(1, 1001)), 1000, 0, 0, 0, "x")
    assert [summary.tokens_percentile(q) for q in (0, 16.1, 100)] == [1, 161, 1000]


def test_past_the_distinct_lengths_bound_is_one_line(run_cli, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(requests, "MAX_LENGTHS", 10)
    path = tmp_path / "mix.csv"
    path.write_text("tokens\n" + "".join(f"{n}\n" for n in range(1, 12)))
    line = assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path)))
    assert line == (
        f"kvcalc: error: --lengths file {path} holds more than 10 distinct request lengths (prompt + output), "
        "the most kvcalc sizes"
    )
    # Repeating lengths costs nothing: 10 distinct lengths in 1,000 requests are read.
    path.write_text("tokens\n" + "".join(f"{n % 10 + 1}\n" for n in range(1000)))
    assert run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--json").json()["requests"] == 1000


def test_more_than_a_million_requests_are_read(tmp_path: Path) -> None:
    # The old cap was 1,000,000 requests; 1,200,000 rows of 3 lengths are read in one pass.
    path = tmp_path / "mix.csv"
    with path.open("w") as handle:
        handle.write("prompt,output\n")
        handle.write("100,28\n900,124\n1,1\n" * 400_000)
    start = time.perf_counter()
    summary = kvcalc.estimate_requests("llama-3.1-8b", path)
    assert time.perf_counter() - start < 20  # ~0.5 s; a bound for a slow machine, not a benchmark
    assert summary.requests == 1_200_000
    assert summary.lengths == ((2, 400_000, 2 * LLAMA_TOKEN_BYTES), (128, 400_000, 128 * LLAMA_TOKEN_BYTES),
                               (1024, 400_000, 1024 * LLAMA_TOKEN_BYTES))  # fmt: skip
    assert summary.total_bytes == 400_000 * (2 + 128 + 1024) * LLAMA_TOKEN_BYTES
    assert (summary.prompt_tokens, summary.output_tokens) == (400_000 * 1001, 400_000 * 153)


def test_read_requests_keeps_every_request_in_order(tmp_path: Path) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(PLAIN)
    assert kvcalc.read_requests(path) == [Request(p, o) for p, o in ROWS]
    assert kvcalc.read_requests(str(path)) == kvcalc.read_requests(path)
    listed = kvcalc.estimate_requests("llama-3.1-8b", [Request(p, o) for p, o in ROWS])
    assert listed == kvcalc.estimate_requests("llama-3.1-8b", path)


def test_a_request_mix_on_two_gpus_gives_the_bytes_per_gpu(run_cli, tmp_path: Path) -> None:
    # llama-3.1-8b: 131,072 B a token; requests of 1,024 and 3,096 tokens hold 4,120 x 131,072 =
    # 540,016,640 B in all; tp 2 splits the 8 KV heads 4 and 4: half on each GPU. tp 16 holds each
    # KV head on 2 GPUs: the whole doubles, and each GPU holds 1 / 16 of that.
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n1000,24\n3000,96\n", encoding="utf-8")
    one = api.estimate_requests("llama-3.1-8b", path)
    assert (one.total_bytes, one.per_gpu_bytes) == (540_016_640, None)
    two = api.estimate_requests("llama-3.1-8b", path, tp=2)
    assert (two.total_bytes, two.per_gpu_bytes, two.gpus) == (540_016_640, 270_008_320, 2)
    staged = api.estimate_requests("llama-3.1-8b", path, tp=2, pp=2)  # 16 layers a stage
    assert (staged.per_gpu_bytes, staged.gpus) == (135_004_160, 4)
    wide = api.estimate_requests("llama-3.1-8b", path, tp=16)
    assert (wide.total_bytes, wide.per_gpu_bytes) == (2 * 540_016_640, 2 * 540_016_640 // 16)
    data = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--tp", "2", "--json").json()
    assert (data["total_bytes"], data["per_gpu_bytes"], data["gpus"]) == (540_016_640, 270_008_320, 2)
    table = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--tp", "2").stdout
    assert "per GPU        270,008,320 bytes" in table


def test_bom_csv_is_read(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffprompt,output\n100,28\n".encode())
    data = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--json").json()
    # One request of 128 tokens x 131,072 B/token = 16,777,216 B.
    assert data["total_bytes"] == 16_777_216


@pytest.mark.parametrize("value", ["²", "①", "٣", "9" * 5000, "1e5", "-3", "0x10"])
def test_lengths_odd_numbers_are_one_line(run_cli, tmp_path: Path, value: str) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(f"prompt,output\n{value},2\n", encoding="utf-8")
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path)), "line 2")


def test_lengths_huge_json_number(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "mix.jsonl"
    path.write_text('{"prompt": ' + "9" * 5000 + "}\n")
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path)), "line 1")


def test_an_unreadable_lengths_file_exits_1_as_an_unreadable_model_does(run_cli, tmp_path: Path) -> None:
    missing = run_cli("estimate", "llama-3.1-8b", "--lengths", str(tmp_path / "none.csv"))
    assert missing.exit_code == 1
    assert_one_line_error(missing, "cannot read --lengths file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert run_cli("estimate", "llama-3.1-8b", "--lengths", str(fifo)).exit_code == 1
    assert run_cli("estimate", str(tmp_path / "none.json")).exit_code == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prompt,prompt\n1,2\n", "the field 'prompt' is given twice"),
        ("Prompt, prompt ,output\n1,2,3\n", "the field 'prompt' is given twice"),
        ("prompt,outptu\n10,20\n", "field 'outptu' is not one kvcalc reads (prompt, output, tokens)"),
        ("prompt,output\n1,2,3\n", "line 2: more values than the header has columns"),
        ('{"prompt": 5, "prompt": 7}\n', "line 1: the field 'prompt' is given twice"),
    ],
)
def test_a_lengths_file_that_reads_two_ways_is_refused(run_cli, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(text)
    result = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path))
    assert result.exit_code == 1
    assert_one_line_error(result, message)


def test_a_lengths_file_past_the_distinct_lengths_bound_stops_there(monkeypatch, tmp_path: Path) -> None:
    # Memory grows with the distinct lengths, not the requests: past MAX_LENGTHS the file is
    # refused in one line naming the bound (shrunk here to 1,000 so the test stays small).
    from kvcalc.calc import requests

    monkeypatch.setattr(requests, "MAX_LENGTHS", 1000)
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n" + "".join(f"{n},1\n" for n in range(1, 1001)) + "5,5\n" * 50)
    assert api.estimate_requests("llama-3.1-8b", path).requests == 1050  # 1,000 distinct: at the bound
    path.write_text("prompt,output\n" + "".join(f"{n},1\n" for n in range(1, 1002)))
    with pytest.raises(SourceError) as info:
        api.estimate_requests("llama-3.1-8b", path)
    assert str(info.value) == (
        f"lengths file {path} holds more than 1,000 distinct request lengths (prompt + output), the most kvcalc sizes"
    )
