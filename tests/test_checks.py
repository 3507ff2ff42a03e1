"""kvcalc.checks: the one layer that checks values, for the API and (through units' parsers) the CLI."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import fields
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import kvcalc
from kvcalc import api, checks
from kvcalc.checks import MAX_COUNT
from kvcalc.errors import DependencyError, KvcalcError, UsageError
from kvcalc.units import parse_count
from tests.conftest import FIXTURES, assert_one_line_error


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
        api.speed("llama-3.1-8b", prompt=10, output=2, gpu="h100", compute=api.Compute(bandwidth_efficiency=value))  # type: ignore[arg-type]


# The API checks its parameters as the CLI checks its flags (kvcalc.checks): every bad value is one
# KvcalcError naming the parameter, never an AttributeError, TypeError, IndexError or a silent
# answer. First the cases issue 36 found, then every public function fed a battery of bad values.


LLAMA = "llama-3.1-8b"


def refused(call: Callable[[], Any], param: str, message: str) -> UsageError:
    with pytest.raises(UsageError) as caught:
        call()
    assert param in caught.value.params, (caught.value.params, str(caught.value))
    assert message in str(caught.value), str(caught.value)
    return caught.value


def test_a_path_like_model_is_opened() -> None:
    # gpt2 (no dtype in the config: 16-bit taken): 12 layers x 12 heads x 64 x 2 (K, V) x 2 B = 36,864 B a token.
    path = FIXTURES / "gpt2.json"
    assert kvcalc.estimate(path, tokens=10).total_bytes == 10 * 36_864
    assert kvcalc.open_model(path).name == kvcalc.open_model(str(path)).name


@pytest.mark.parametrize("model", [None, 123, 1.5, ["llama-3.1-8b"], b"llama-3.1-8b"])
def test_a_model_that_is_no_model(model: Any) -> None:
    # Each raised AttributeError ('NoneType' object has no attribute 'strip').
    refused(lambda: kvcalc.estimate(model), "model", "model must be a preset name, a path")


@pytest.mark.parametrize("model", ["", "  "])
def test_an_empty_model_names_the_api_parameter(model: str) -> None:
    # It said "MODEL is empty", the CLI's word, with params ("models",): no parameter of open_model.
    error = refused(lambda: kvcalc.open_model(model), "model", "model is empty: give a preset name")
    assert error.params == ("model",)


def test_formats_and_engines_that_are_not_names() -> None:
    refused(lambda: kvcalc.estimate(LLAMA, kv_dtype=8), "kv_dtype", "kv_dtype must be a format's name")  # type: ignore[arg-type]
    refused(lambda: kvcalc.estimate(LLAMA, engine=5), "engine", "engine must be an engine's name")  # type: ignore[arg-type]
    refused(lambda: kvcalc.compare([LLAMA], engine=5), "engine", "engine must be")  # type: ignore[arg-type]


def test_a_size_as_text_is_refused_with_the_reader_named() -> None:
    # fit(kv_budget='16GiB') raised TypeError ('<=' between str and int).
    refused(
        lambda: kvcalc.fit(LLAMA, capacity=kvcalc.Capacity(kv_budget="16GiB")),
        "kv_budget",
        "kvcalc.units.parse_size reads text",
    )  # type: ignore[arg-type]


def test_compare_needs_a_list_of_lengths() -> None:
    # compare([...], tokens=10) raised TypeError ('int' object is not iterable).
    refused(lambda: kvcalc.compare([LLAMA], tokens=10), "tokens", "tokens must be a list of whole numbers")  # type: ignore[arg-type]
    refused(lambda: kvcalc.compare(LLAMA), "models", "models must be a list of models")


def test_request_lengths() -> None:
    refused(lambda: kvcalc.Request(prompt=-1, output=5), "prompt", "prompt must be a non-negative integer, got -1")
    refused(lambda: kvcalc.Request(prompt=5, output=1.5), "output", "output must be a non-negative integer")  # type: ignore[arg-type]
    refused(lambda: kvcalc.Request(prompt=True, output=5), "prompt", "got True")
    refused(lambda: kvcalc.Request(prompt=0, output=0), "prompt", "a request of 0 tokens caches nothing")
    refused(lambda: kvcalc.Request(prompt=MAX_COUNT + 1, output=0), "prompt", "implausibly large")


def test_counts_past_the_cli_cap() -> None:
    # tokens=10**30 was sized; the CLI refuses past 2^50 (units.parse_count), and so does the API.
    refused(lambda: kvcalc.estimate(LLAMA, tokens=10**30), "tokens", "tokens is implausibly large")
    refused(lambda: kvcalc.estimate(LLAMA, tokens=10, batch=2**51), "batch", "implausibly large")
    refused(lambda: kvcalc.estimate(LLAMA, tokens=10, tp=2**17), "tp", "implausibly large")
    refused(
        lambda: kvcalc.fit(LLAMA, tokens=MAX_COUNT + 1, capacity=kvcalc.Capacity(kv_budget=2**30)),
        "tokens",
        "implausibly large",
    )


@pytest.mark.parametrize(("param", "value"), [("bandwidth", math.nan), ("flops", math.inf), ("bandwidth", 0.5),
                                              ("flops", -1), ("bandwidth", "3.35TB/s"), ("flops", 10**22)])  # fmt: skip
def test_peaks_must_be_whole_positive_rates(param: str, value: Any) -> None:
    # bandwidth=nan gave NaN times; flops=inf zero ones.
    peaks: dict[str, Any] = {"bandwidth": 3_350_000_000_000, "flops": 989_400_000_000_000, param: value}
    refused(lambda: kvcalc.speed(LLAMA, prompt=10, output=2, compute=kvcalc.Compute(**peaks)), param, f"{param} must")


def test_a_rate_written_as_a_whole_float_is_taken() -> None:
    # 3.35e12 and 989.4e12 are whole numbers, as the CLI's --bandwidth 3.35e12 is.
    report = kvcalc.speed(LLAMA, prompt=10, output=2, compute=kvcalc.Compute(bandwidth=3.35e12, flops=989.4e12))
    exact = kvcalc.speed(
        LLAMA, prompt=10, output=2, compute=kvcalc.Compute(bandwidth=3_350_000_000_000, flops=989_400_000_000_000)
    )
    assert report.result == exact.result


@pytest.mark.parametrize("value", [math.nan, math.inf, 1.5, 0, -(2**30), True, 2**61])
def test_fit_budget_must_be_whole_bytes(value: Any) -> None:
    # kv_budget=nan and 1.5 were taken (1.5 as 1 byte).
    refused(lambda: kvcalc.fit(LLAMA, capacity=kvcalc.Capacity(kv_budget=value)), "kv_budget", "kv_budget")


def test_a_budget_written_as_a_whole_float_is_taken() -> None:
    # 16e9 B / (8,192 tokens x 131,072 B a token = 1,073,741,824 B a request) = 14.9: 14 requests.
    assert kvcalc.fit(LLAMA, tokens=8192, capacity=kvcalc.Capacity(kv_budget=16e9)).result.max_concurrency == 14


def test_a_mix_of_no_requests_is_refused() -> None:
    # estimate_requests([]) answered 0 bytes.
    refused(lambda: kvcalc.estimate_requests(LLAMA, []), "requests", "requests is empty")
    refused(lambda: kvcalc.estimate_requests(LLAMA, [(1, 2)]), "requests", "kvcalc.Request")  # type: ignore[list-item]


def test_a_mix_from_a_path_like(tmp_path: Path) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n1000,24\n3000,72\n")
    # (1,024 + 3,096) tokens x 131,072 B a token.
    assert kvcalc.estimate_requests(LLAMA, path).total_bytes == (1024 + 3072) * 131_072
    assert kvcalc.read_requests(path) == [kvcalc.Request(1000, 24), kvcalc.Request(3000, 72)]
    refused(lambda: kvcalc.read_requests(7), "path", "path must be a file's path")  # type: ignore[arg-type]


@pytest.mark.parametrize("q", [101, -1, math.nan, "50", None, True])
def test_percentiles_outside_0_to_100(q: Any) -> None:
    # bytes_percentile(101) raised IndexError.
    mix = kvcalc.estimate_requests(LLAMA, [kvcalc.Request(1000, 24), kvcalc.Request(3000, 72)])
    refused(lambda: mix.bytes_percentile(q), "q", "a percentile must be a number from 0 to 100")


def test_a_share_is_checked_as_a_number() -> None:
    refused(
        lambda: kvcalc.fit(LLAMA, gpu="h100", capacity=kvcalc.Capacity(utilization="0.9")),
        "utilization",
        "utilization must be in (0, 1] (a number)",
    )  # type: ignore[arg-type]
    refused(
        lambda: kvcalc.fit(LLAMA, gpu="h100", capacity=kvcalc.Capacity(utilization=math.nan)), "utilization", "(0, 1]"
    )
    # Fractions and floats as written: 0.9 is 9/10 (the same budget as Fraction(9, 10)).
    assert (
        kvcalc.fit(LLAMA, gpu="h100", capacity=kvcalc.Capacity(utilization=0.9)).budget
        == kvcalc.fit(LLAMA, gpu="h100", capacity=kvcalc.Capacity(utilization=Fraction(9, 10))).budget
    )


def test_a_missing_probe_package_is_an_environment_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch the probe raised UsageError (exit 2); it is a DependencyError (exit 1)."""
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(DependencyError, match="the probe needs PyTorch") as caught:
        kvcalc.probe(LLAMA, tokens=16, device="cpu")
    assert caught.value.exit_code == 1


# Values that are wrong for most parameters (and right for a few): whatever each is, the call
# answers or raises a KvcalcError.
BAD: tuple[Any, ...] = (None, True, False, -1, 0, 1.5, math.nan, math.inf, -math.inf, 10**30, 2**64, "x", "", b"x",
                        [], [1], {}, {"x": 1}, (None,), object(), Path("/nonexistent"), Fraction(3, 2))  # fmt: skip


class _Stop(UsageError):
    """Raised in place of a real engine run: the checks before it passed."""


@pytest.fixture
def no_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probes stop where they would start a real engine (torch, llama.cpp, vLLM, SGLang, mlx-lm)."""

    def stop(*_: Any, **__: Any) -> Any:
        raise _Stop("stopped before running the engine")

    from kvcalc.engines.llamacpp import probe as llamacpp
    from kvcalc.engines.mlx import probe as mlx
    from kvcalc.engines.sglang import probe as sglang
    from kvcalc.engines.transformers import torch_probe
    from kvcalc.engines.vllm import probe as vllm

    monkeypatch.setattr(torch_probe, "run", stop)
    monkeypatch.setattr(llamacpp, "measure", stop)
    for module in (vllm, sglang, mlx):
        monkeypatch.setattr(module, "run_probe", stop)
        monkeypatch.setattr(module, f"{module.__name__.split('.')[-2]}_python", lambda *_: "/bin/true")


def _model() -> api.Model:
    return api.open_model(LLAMA)


# Each public function with arguments that make a valid call; each parameter is then given each
# bad value in turn (the parameters come from the signature, so a new one is tried too).
CALLS: dict[str, tuple[Callable[..., Any], Callable[[], dict[str, Any]]]] = {
    "estimate": (api.estimate, lambda: {"model": _model(), "tokens": 100}),
    "compare": (api.compare, lambda: {"models": [_model()], "tokens": [100]}),
    "estimate_requests": (api.estimate_requests, lambda: {"model": _model(), "requests": [kvcalc.Request(10, 5)]}),
    "read_requests": (api.read_requests, lambda: {"path": str(FIXTURES / "gpt2.json")}),
    "read_trace": (api.read_trace, lambda: {"path": str(FIXTURES / "traces" / "kvcalc.csv")}),
    "fit": (
        api.fit,
        lambda: {"model": _model(), "capacity": api.Capacity(kv_budget=2**30), "tokens": 100, "verdict": False},
    ),
    "fit_offload": (
        api.fit_offload,
        lambda: {"model": _model(), "gpu_layers": 10, "gpu_memory": 80 * 10**9, "tokens": 100},
    ),
    "speed": (api.speed, lambda: {"model": _model(), "prompt": 10, "output": 2, "gpu": "h100", "sweep": [1, 2]}),
    "open_model": (api.open_model, lambda: {"model": LLAMA}),
    "model_from_geometry": (api.model_from_geometry, lambda: {"layers": 2, "heads": 4, "kv_heads": 2, "head_dim": 8}),
    "show_preset": (api.show_preset, lambda: {"name": LLAMA}),
    "probe_request": (
        api.probe_request,
        lambda: {"model": _model(), "tokens": 16, "device": "cpu"},
    ),
    "probe": (api.probe, lambda: {"model": _model(), "tokens": 16, "device": "cpu"}),
    "probe_llamacpp": (api.probe_llamacpp, lambda: {"model": _model(), "tokens": 16}),
    "probe_vllm": (api.probe_vllm, lambda: {"model": _model()}),
    "probe_sglang": (api.probe_sglang, lambda: {"model": _model()}),
    "probe_mlx": (api.probe_mlx, lambda: {"model": _model(), "tokens": 16}),
    "Request": (kvcalc.Request, lambda: {"prompt": 10, "output": 5}),
}


def _try(function: Callable[..., Any], kwargs: dict[str, Any], where: str) -> None:
    try:
        function(**kwargs)
    except KvcalcError:
        pass
    except Exception as exc:  # the failure this test exists for
        pytest.fail(f"{where}: {type(exc).__name__}: {exc}")


@pytest.mark.usefixtures("no_engines")
@pytest.mark.parametrize("name", list(CALLS))
def test_every_parameter_refuses_bad_values_with_kvcalc_errors(name: str) -> None:
    function, valid = CALLS[name]
    base = valid()
    _try(function, base, f"{name}(valid)")
    for param in inspect.signature(function).parameters:
        for value in BAD:
            _try(function, {**base, param: value}, f"{name}({param}={value!r})")


# Each parameter object, the call that reads it, that call's other arguments, and the object's
# fields in a valid call (each field is then given each bad value in turn).
OBJECTS: dict[str, tuple[str, Callable[..., Any], Callable[[], dict[str, Any]], dict[str, Any]]] = {
    "Serving": ("serving", api.estimate, lambda: {"model": _model(), "tokens": 100}, {}),
    "Layout": ("layout", api.estimate, lambda: {"model": _model(), "tokens": 100}, {}),
    "Sequences": ("sequences", api.estimate, lambda: {"model": _model()}, {"tokens": 100}),
    "Capacity": ("capacity", api.fit, lambda: {"model": _model(), "tokens": 100, "verdict": False},
                 {"kv_budget": 2**30}),
    "Compute": ("compute", api.speed, lambda: {"model": _model(), "prompt": 10, "output": 2, "gpu": "h100",
                                               "sweep": [1, 2]}, {}),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_every_field_of_the_parameter_objects(kind: str) -> None:
    arg, function, base, valid = OBJECTS[kind]
    cls = getattr(api, kind)
    for field in fields(cls):
        for value in BAD:
            given = cls(**{**valid, field.name: value})
            _try(function, {**base(), arg: given}, f"{kind}({field.name}={value!r})")


@pytest.mark.parametrize("kind", list(OBJECTS))
def test_numeric_fields_of_the_parameter_objects_refuse_what_the_cli_refuses(kind: str) -> None:
    """As test_numeric_parameters_refuse_what_the_cli_refuses, for the counts, sizes, rates and
    shares the API takes in its parameter objects (Sequences, Capacity, Compute, Layout)."""
    arg, function, base, valid = OBJECTS[kind]
    cls = getattr(api, kind)
    for field in fields(cls):
        if not any(word in str(field.type) for word in ("int", "float", "Fraction")):
            continue
        for value in NEVER_A_NUMBER:
            with pytest.raises(KvcalcError):
                function(**{**base(), arg: cls(**{**valid, field.name: value})})


@pytest.mark.parametrize("method", ["bytes_percentile", "tokens_percentile"])
def test_every_percentile_method(method: str) -> None:
    mix = kvcalc.estimate_requests(LLAMA, [kvcalc.Request(10, 5), kvcalc.Request(20, 5)])
    for value in BAD:
        _try(getattr(mix, method), {"q": value}, f"{method}({value!r})")


# Values no count, size, rate or share takes: each must be refused wherever an int is asked for.
NEVER_A_NUMBER: tuple[Any, ...] = (True, math.nan, math.inf, -1, 10**30, "12")


@pytest.mark.usefixtures("no_engines")
@pytest.mark.parametrize("name", list(CALLS))
def test_numeric_parameters_refuse_what_the_cli_refuses(name: str) -> None:
    """A bool where an int is asked for, a negative count, NaN, an infinity or 10^30 was taken
    silently by several parameters (tokens=10**30, flops=inf); each is refused, naming itself."""
    function, valid = CALLS[name]
    base = valid()
    for param, spec in inspect.signature(function).parameters.items():
        annotation = str(spec.annotation)
        if not any(word in annotation for word in ("int", "float", "Fraction")):
            continue
        for value in NEVER_A_NUMBER:
            with pytest.raises(KvcalcError) as caught:
                function(**{**base, param: value})
            assert not isinstance(caught.value, _Stop), f"{name}({param}={value!r}) was taken"
