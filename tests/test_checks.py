"""kvcalc.checks: the one layer that checks values, for the API and (through units' parsers) the CLI."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from kvcalc import api, checks
from kvcalc.errors import UsageError
from kvcalc.units import parse_count
from tests.conftest import assert_one_line_error


class Index:
    """An integer type that is not int (numpy's int64 is one): taken through __index__."""

    def __index__(self) -> int:
        return 7


def test_counts() -> None:
    assert checks.count(2048, "tokens") == 2048
    assert checks.count(Index(), "tokens") == 7
    assert checks.count(0, "prompt", minimum=0) == 0
    assert checks.count(2**50, "tokens") == checks.MAX_COUNT


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "tokens must be a positive integer, got 0"),
        (True, "tokens must be a positive integer, got True"),
        (2048.0, "tokens must be a positive integer, got 2048.0"),
        ("32k", "tokens must be a positive integer (an int; kvcalc.units.parse_count reads text"),
        (2**50 + 1, "tokens is implausibly large: 1,125,899,906,842,625 (at most 1,125,899,906,842,624)"),
        (10**400, "tokens is implausibly large: a number of 401 digits"),
    ],
)
def test_bad_counts_name_the_parameter(value: Any, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        checks.count(value, "tokens")
    assert message in str(caught.value)
    assert caught.value.params == ("tokens",)


def test_a_flag_name_is_no_parameter() -> None:
    """The CLI's parsers check with the flag as the name: its message says the flag, no param."""
    with pytest.raises(UsageError) as caught:
        parse_count("0", what="--tokens")
    assert str(caught.value) == "--tokens must be positive, got '0'"
    assert caught.value.params == ()


@pytest.mark.parametrize(
    ("value", "expected"), [(2**30, 2**30), (16e9, 16_000_000_000), (checks.MAX_BYTES, checks.MAX_BYTES)]
)
def test_sizes(value: Any, expected: int) -> None:
    got = checks.size(value, "kv_budget")
    assert got == expected and type(got) is int


@pytest.mark.parametrize("value", [1.5, math.nan, math.inf, 0, -1, True, "16GiB", checks.MAX_BYTES + 1, None])
def test_bad_sizes(value: Any) -> None:
    with pytest.raises(UsageError, match="kv_budget"):
        checks.size(value, "kv_budget")


def test_rates() -> None:
    assert checks.rate(3.35e12, "bandwidth") == 3_350_000_000_000
    for bad in (math.nan, math.inf, 0.5, 0, 10**22, "3.35TB/s", False):
        with pytest.raises(UsageError, match="bandwidth must"):
            checks.rate(bad, "bandwidth")


def test_shares_are_exact() -> None:
    assert checks.share(0.9, "utilization") == Fraction(9, 10)  # as written, not the binary float
    assert checks.share(Decimal("0.92"), "utilization") == Fraction(23, 25)
    assert checks.share(1, "utilization") == 1
    for bad in (0, 1.01, math.nan, Decimal("NaN"), "0.9", True, None):
        with pytest.raises(UsageError, match="utilization must"):
            checks.share(bad, "utilization")


def test_lists_of_counts() -> None:
    assert checks.counts(range(1, 4), "sweep") == [1, 2, 3]
    for bad in (4, "1,2", [1, 0], [], [True], list(range(1, checks.MAX_ITEMS + 2))):
        with pytest.raises(UsageError, match="sweep"):
            checks.counts(bad, "sweep")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("flag", ["--bandwidth-efficiency", "--flops-efficiency"])
def test_a_non_finite_efficiency_is_one_line_exit_2(run_cli, flag: str, value: str) -> None:
    result = run_cli("speed", "llama-3.1-8b", "--gpu", "h100", "--prompt", "10", "--output", "2", flag, value)
    assert result.exit_code == 2
    assert_one_line_error(result, f"{flag} must be in (0, 1]")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "0.5"])
def test_the_api_refuses_a_non_finite_efficiency_with_its_own_error(value: object) -> None:
    with pytest.raises(UsageError, match="bandwidth_efficiency must be in"):
        api.speed("llama-3.1-8b", prompt=10, output=2, gpu="h100", bandwidth_efficiency=value)  # type: ignore[arg-type]
