"""``vllm serve`` read as kvcalc's settings (kvcalc.engines.vllm.commandline)."""

from __future__ import annotations

import pytest

from kvcalc.engines.vllm.commandline import human_readable_int
from kvcalc.errors import UsageError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # vllm/engine/arg_utils.py human_readable_int's docstring: 1k -> 1,000, 1K -> 1,024,
        # 25.6k -> 25,600; digits alone are read as they are.
        ("1k", 1_000),
        ("1K", 1_024),
        ("25.6k", 25_600),
        ("32K", 32_768),
        ("2m", 2_000_000),
        ("1G", 2**30),
        ("131072", 131_072),
    ],
)
def test_human_readable_int_as_vllm_reads_it(text: str, value: int) -> None:
    assert human_readable_int(text) == value


def test_a_binary_suffix_takes_no_fraction() -> None:
    with pytest.raises(UsageError):
        human_readable_int("1.5K")
    with pytest.raises(ValueError):
        human_readable_int("lots")
