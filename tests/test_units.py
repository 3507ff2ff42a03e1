"""Units: GB is 10^9 bytes, GiB is 2^30, and token counts use binary k (32k = 32,768)."""

from __future__ import annotations

import pytest

from kvcalc.checks import MAX_BYTES
from kvcalc.errors import UsageError
from kvcalc.units import format_binary, format_bytes, format_decimal, parse_count, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2048", 2048),
        ("32k", 32_768),
        ("32K", 32_768),
        ("128k", 131_072),
        ("1m", 1_048_576),
        ("1.5k", 1_536),
        ("1,000", 1_000),
        ("100_000", 100_000),
        ("1,000,000", 1_000_000),
        ("1_048_576", 1_048_576),
        ("1,000.5k", 1_024_512),  # 1000.5 x 1024
    ],
)
def test_parse_count(text: str, expected: int) -> None:
    assert parse_count(text, what="--tokens") == expected


@pytest.mark.parametrize("text", ["0", "-5", "abc", "", "1.2345k", "3.5", "k"])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="--tokens"):
        parse_count(text, what="--tokens")


def test_seed_example_in_both_units() -> None:
    # 268,435,456 bytes = 256 MiB exactly = 268.44 MB (seed: "256 MiB"; KNOWLEDGE: "268.4 MB").
    assert format_binary(268_435_456) == "256 MiB"
    assert format_decimal(268_435_456) == "268.44 MB"
    assert format_bytes(268_435_456, "both") == "256 MiB (268.44 MB)"


def test_gb_and_gib_never_mixed() -> None:
    # 1.5625 GiB = 1,677,721,600 B = 1.68 GB (vLLM paper's OPT-13B 2,048-token sequence).
    n = 819_200 * 2048
    assert format_binary(n) == "1.56 GiB"
    assert format_decimal(n) == "1.68 GB"
    assert format_bytes(10**9, "decimal") == "1 GB"
    assert format_bytes(2**30, "binary") == "1 GiB"
    assert format_bytes(512, "both") == "512 B"


# A separator anywhere but between groups of three digits gives another number than the one meant
# when taken out (1,00 -> 100, 1__0 -> 10), so it is refused.
@pytest.mark.parametrize("text", ["1,00", "1__0", "10_00", "1,5k", "1_000,000", "1,000_000", "_100", "100_", ",100"])
def test_parse_count_refuses_misplaced_separators(text: str) -> None:
    with pytest.raises(UsageError, match="--tokens: thousands separators"):
        parse_count(text, what="--tokens")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80 * 10**9),
        ("1,000GB", 10**12),
        ("0", 0),  # zero needs no unit
        ("1048576", 2**20),  # a bare number of bytes, at least 1 MiB
        ("80B", 80),
        ("1.5kB", 1_500),
        ("2.0B", 2),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text, what="--gpu-memory") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("80", "has no unit, so it would be 80 bytes: give a unit, as in 80GB"),  # meant 80GB
        ("1048575", "has no unit"),  # one byte under 1 MiB
        ("1.5B", "must be a whole number of bytes"),  # was floored to 1
        ("1.5", "must be a whole number of bytes"),
        ("1,00GB", "thousands separators"),
        ("1__0GB", "thousands separators"),
        ("2000000TiB", "implausibly large"),  # 2,000,000 x 2^40 > 2^60
    ],
)
def test_parse_size_refuses(text: str, message: str) -> None:
    with pytest.raises(UsageError, match="--kv-budget") as info:
        parse_size(text, what="--kv-budget")
    assert message in str(info.value)


def test_parse_size_largest() -> None:
    assert parse_size("1048576TiB", what="x") == MAX_BYTES == 2**60  # 2^20 x 2^40


@pytest.mark.parametrize("value", [5, None, 2.5, b"32k"])
@pytest.mark.parametrize("parser", ["parse_count", "parse_size", "parse_rate"])
def test_the_text_parsers_refuse_what_is_not_text(parser: str, value: object) -> None:
    """The README names parse_count and parse_size as the API's readers of CLI text; given a
    number or None they raised TypeError ('argument of type 'int' is not iterable')."""
    import kvcalc.units

    with pytest.raises(UsageError, match=r"must be text such as .* \(a str\)") as raised:
        getattr(kvcalc.units, parser)(value, what="tokens")
    assert raised.value.params == ("tokens",)


def test_a_whole_number_in_e_notation_is_read_exactly() -> None:
    from kvcalc.units import parse_count

    assert parse_count("1e6", what="--tokens") == 1_000_000 and parse_count("2E+5", what="--tokens") == 200_000
