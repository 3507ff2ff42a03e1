"""Units: GB is 10^9 bytes, GiB is 2^30, and token counts use binary k (32k = 32,768)."""

from __future__ import annotations

import pytest

from kvcalc.errors import UsageError
from kvcalc.units import format_binary, format_bytes, format_decimal, parse_count


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
