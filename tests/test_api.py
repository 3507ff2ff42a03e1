"""The Python API is what the CLI calls: the README's Python example runs, and each command's
JSON equals the API's answer for the same parameters."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvcalc
from kvcalc.errors import UsageError
from tests.helpers.paths import ROOT

README = ROOT / "README.md"


def test_readme_python_examples_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README shows the Python API"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})  # the asserts inside are the test


def test_every_public_name_resolves() -> None:
    for name in kvcalc.__all__:
        assert getattr(kvcalc, name) is not None, name


def test_open_model_once_serves_every_call() -> None:
    model = kvcalc.open_model("gpt-oss-20b")
    assert kvcalc.open_model(model) is model  # an opened model passes straight through
    assert model.source is not None and model.source.kind == "preset"
    # 24 layers: 12 sliding (W = 128) and 12 full, 8 KV heads x 64 dims, fp16 (the file names no dtype):
    # at 1,000 tokens, 12 x 2 x 128 x 8 x 64 x 2 + 12 x 2 x 1,000 x 8 x 64 x 2 = 3,145,728 + 24,576,000.
    assert kvcalc.estimate(model, tokens=1000).total_bytes == 3_145_728 + 24_576_000


def test_serving_and_layout_objects_equal_the_short_forms() -> None:
    # Serving and Layout carry what the short forms do: the same figure, and not both at once.
    short = kvcalc.estimate("llama-3.1-8b", tokens=1000, engine="vllm", kv_dtype="fp8", tp=2,
                            options={"block_size": 32})  # fmt: skip
    whole = kvcalc.estimate("llama-3.1-8b", tokens=1000, serving=kvcalc.Serving("vllm", kv_dtype="fp8",
                            options={"block_size": 32}), layout=kvcalc.Layout(tp=2))  # fmt: skip
    # 1,000 tokens in blocks of 32: 32 blocks = 1,024 slots x 4 KV heads per GPU x 128 x 2 (K, V)
    # x 1 B (fp8) x 32 layers.
    assert short.per_gpu_bytes == whole.per_gpu_bytes == 1024 * 4 * 128 * 2 * 32
    with pytest.raises(UsageError) as info:
        kvcalc.estimate("llama-3.1-8b", serving=kvcalc.Serving("vllm"), kv_dtype="fp8")
    assert info.value.params == ("serving", "kv_dtype")
    with pytest.raises(UsageError):
        kvcalc.estimate("llama-3.1-8b", layout=kvcalc.Layout(tp=2), tp=2)
    with pytest.raises(UsageError) as info:
        kvcalc.estimate("llama-3.1-8b", engine="vllm", options={"ubatch": 64})
    assert info.value.params == ("ubatch",)
    with pytest.raises(UsageError) as info:
        kvcalc.estimate("llama-3.1-8b", engine="vllm", options={"page_size": 64})
    assert info.value.params == ("page_size",) and "no engine option" in str(info.value)


@pytest.mark.parametrize(
    ("argv", "kwargs"),
    [
        (["--tokens", "32k", "--batch", "8"], {"tokens": 32768, "batch": 8}),
        (["--tokens", "1000", "--engine", "vllm", "--tp", "2"], {"tokens": 1000, "engine": "vllm", "tp": 2}),
        (
            ["--prompt", "900", "--output", "100", "--kv-dtype", "fp8"],
            {"prompt": 900, "output": 100, "kv_dtype": "fp8"},
        ),
        (
            ["--tokens", "4k", "--engine", "llama.cpp", "--kv-dtype", "q8_0", "--batch", "3", "--kv-unified"],
            {"tokens": 4096, "engine": "llama.cpp", "kv_dtype": "q8_0", "batch": 3, "options": {"kv_unified": True}},
        ),
        (
            ["--tokens", "2k", "--batch", "4", "--shared-prefix", "1k", "--engine", "vllm"],
            {"sequences": kvcalc.Sequences(tokens=2048, batch=4, shared_prefix=1024), "engine": "vllm"},
        ),
    ],
)
def test_estimate_cli_equals_api(run_cli, argv: list[str], kwargs: dict) -> None:
    data = run_cli("estimate", "llama-3.1-8b", *argv, "--json").json()
    est = kvcalc.estimate("llama-3.1-8b", **kwargs)
    assert data["total_bytes"] == est.total_bytes
    assert data["per_gpu_bytes"] == est.per_gpu_bytes
    assert data["notes"] == list(est.notes)


def test_compare_cli_equals_api(run_cli) -> None:
    data = run_cli("compare", "llama-3.1-8b", "mistral-7b-v0.1", "--tokens", "4k,32k", "--json").json()
    table = kvcalc.compare(["llama-3.1-8b", "mistral-7b-v0.1"], tokens=[4096, 32768])
    assert [r["total_bytes"] for r in data["rows"]] == [r.total_bytes for r in table.rows]


def test_fit_cli_equals_api(run_cli) -> None:
    data = run_cli("fit", "llama-3.1-8b", "--gpu", "h100", "--engine", "vllm", "--json").json()
    report = kvcalc.fit("llama-3.1-8b", gpu="h100", engine="vllm")
    assert data["max_tokens"] == report.result.max_tokens
    assert data["max_concurrency"] == report.result.max_concurrency
    assert data["kv_budget_bytes"] == report.budget.kv_bytes


def test_requests_cli_equals_api(run_cli, tmp_path: Path) -> None:
    mix = tmp_path / "mix.jsonl"
    mix.write_text("\n".join(json.dumps({"prompt": p, "output": 10}) for p in (100, 1000, 5000)))
    data = run_cli("estimate", "llama-3.1-8b", "--lengths", str(mix), "--json").json()
    summary = kvcalc.estimate_requests("llama-3.1-8b", mix)
    # 110 + 1,010 + 5,010 tokens x 131,072 B per token.
    assert data["total_bytes"] == summary.total_bytes == (110 + 1010 + 5010) * 131_072


def test_api_errors_name_parameters_not_flags() -> None:
    with pytest.raises(UsageError) as info:
        kvcalc.estimate("llama-3.1-8b", tokens=10, prompt=5)
    assert "--" not in str(info.value) and "tokens" in str(info.value)
    assert info.value.params == ("tokens", "prompt", "output")
    with pytest.raises(UsageError) as info:
        kvcalc.estimate("llama-3.1-8b", kv_dtype="fp7")
    assert info.value.params == ("kv_dtype",)


def test_cli_shows_parameters_as_flags(run_cli) -> None:
    from tests.conftest import assert_one_line_error

    assert_one_line_error(
        run_cli("estimate", "llama-3.1-8b", "--tokens", "10", "--prompt", "5"), "--tokens", "--prompt"
    )


def test_every_public_api_name_resolves_to_its_service_module() -> None:
    # kvcalc.api loads each service on first use: every name it lists must load, and be the
    # service module's own object (not a copy that could drift).
    import importlib

    import kvcalc.api as public

    for name in public.__all__:
        value = getattr(public, name)
        module = importlib.import_module(f"kvcalc.api.{public._EXPORTS[name]}")
        assert value is getattr(module, name), name
    assert sorted(public._EXPORTS) == sorted(public.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        public.nothing  # noqa: B018


def test_a_request_mix_refuses_a_shared_prefix_rather_than_drop_it() -> None:
    # Each length of a mix is one request alone: a prefix shared with nothing saved nothing, and the
    # figures without it were printed as if it applied (hardening round 4).
    from kvcalc.api import estimate_requests
    from kvcalc.calc.requests import Request
    from kvcalc.errors import UsageError

    with pytest.raises(UsageError, match="shared_prefix is not modelled for a request mix") as caught:
        estimate_requests("llama-3.1-8b", [Request(prompt=1000, output=10)], shared_prefix=500)
    assert caught.value.params[0] == "shared_prefix"
