"""kvcalc.estimate on an opened model compiles each call's serving and layout once: a repeated
call answers from the compiled plan, and must answer exactly as a first call does.

estimate's and compare's service (kvcalc.api._estimate) also caps hand values and refuses flags that
would change nothing."""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import kvcalc
from kvcalc.api import Layout, Sequences, Serving, open_model
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error

CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama-3.1-8b", {"tokens": 4096}),
    ("llama-3.1-8b", {}),  # tokens not given: a note per call
    ("llama-3.1-8b", {"tokens": 200_000}),  # past the context limit: a note
    ("llama-3.1-8b", {"sequences": Sequences(prompt=1000, output=24, batch=3, shared_prefix=500)}),
    ("llama-3.1-8b", {"tokens": 8191, "engine": "vllm", "options": {"block_size": 32}, "kv_dtype": "fp8"}),
    ("llama-3.1-8b", {"tokens": 8191, "serving": Serving("llama.cpp", k_dtype="q8_0", v_dtype="q4_0")}),
    ("llama-3.1-8b", {"tokens": 8191, "engine": "transformers", "kv_dtype": "int4"}),
    ("gpt-oss-120b", {"tokens": 1000, "layout": Layout(tp=2, pp=2, dp=2), "batch": 5}),
    ("t5-small", {"prompt": 300, "output": 20}),
    ("t5-small", {"tokens": 20}),  # the encoder length assumed from the decoder's: noted
    ("whisper-large-v3", {"output": 20, "prompt": 5}),
    ("llama-3.2-11b-vision", {"sequences": Sequences(tokens=100, images=2)}),
    ("qwen3-next-80b-a3b", {"tokens": 9000, "engine": "sglang"}),
)


@pytest.mark.parametrize(("model", "kwargs"), CALLS)
def test_a_repeated_call_answers_as_a_first_call(model: str, kwargs: dict[str, Any]) -> None:
    opened = open_model(model)
    first = kvcalc.estimate(model, **kwargs)  # by name: opened afresh, never compiled for reuse
    for _ in range(3):
        assert kvcalc.estimate(opened, **kwargs) == first
    # Another length through the same compiled call, and the same length from scratch.
    changed = dict(kwargs)
    if "tokens" in changed:
        changed["tokens"] = changed["tokens"] + 17
    elif "output" in changed:
        changed["output"] = changed["output"] + 17
    elif "sequences" in changed:
        seq = changed["sequences"]
        longer = {"tokens": seq.tokens + 17} if seq.tokens is not None else {"output": seq.output + 17}
        changed["sequences"] = replace(seq, **longer)
    assert kvcalc.estimate(opened, **changed) == kvcalc.estimate(model, **changed)


def test_calls_that_differ_in_any_argument_are_compiled_apart() -> None:
    opened = open_model("llama-3.1-8b")
    # Same length: each argument changes the answer, so none may be served another's plan.
    # 8 KV heads x 128 x 2 (K, V) x 32 layers = 65,536 elements a token.
    assert kvcalc.estimate(opened, tokens=1000).total_bytes == 1000 * 65_536 * 2
    assert kvcalc.estimate(opened, tokens=1000, kv_dtype="fp8").total_bytes == 1000 * 65_536
    assert kvcalc.estimate(opened, tokens=1000, batch=2).total_bytes == 2 * 1000 * 65_536 * 2
    # vLLM keeps whole blocks: 1,000 tokens are 63 blocks of 16 (1,008 slots), or 32 of 32 (1,024).
    assert kvcalc.estimate(opened, tokens=1000, engine="vllm").total_bytes == 1008 * 65_536 * 2
    options = {"block_size": 32}
    assert kvcalc.estimate(opened, tokens=1000, engine="vllm", options=options).total_bytes == 1024 * 65_536 * 2
    options["block_size"] = 16  # the same dict, changed: its new contents decide
    assert kvcalc.estimate(opened, tokens=1000, engine="vllm", options=options).total_bytes == 1008 * 65_536 * 2
    # A spec built anew is another model, even with the same fields.
    other = open_model("llama-3.1-8b")
    assert kvcalc.estimate(other, tokens=1000) == kvcalc.estimate(opened, tokens=1000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": 0}, "tokens must be a positive integer, got 0"),
        ({"tokens": -3}, "tokens must be a positive integer, got -3"),
        ({"tokens": 10, "prompt": 5}, "give either tokens or prompt/output, not both"),
        ({"sequences": Sequences(tokens=10, shared_prefix=11)}, r"shared prefix \(11\) is longer than the 10 tokens"),
        ({"tokens": 10, "batch": [1]}, r"batch must be a positive integer, got \[1\]"),
        ({"tokens": 10, "options": {"block_size": 16}}, "block_size"),
    ],
)
def test_a_compiled_call_refuses_what_a_first_call_refuses(kwargs: dict[str, Any], message: str) -> None:
    opened = open_model("llama-3.1-8b")
    good = {k: v for k, v in kwargs.items() if k not in ("tokens", "prompt", "sequences")}
    with contextlib.suppress(UsageError):  # compile the call (when it is a valid one)
        kvcalc.estimate(opened, tokens=100, **good)
    for _ in range(2):
        with pytest.raises(UsageError, match=message):
            kvcalc.estimate(opened, **kwargs)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["estimate", "--layers", "99999999", "--head-dim", "128", "--kv-heads", "8"], "layers"),
        (["estimate", "--layers", "32", "--head-dim", "99999999", "--kv-heads", "8"], "--head-dim"),
        (["estimate", "--layers", "32", "--head-dim", "128", "--kv-heads", "99999999"], "--kv-heads"),
        (["estimate", "llama-3.1-8b", "--dp", "1000000", "--batch", "1000000"], "dp"),
        (["estimate", "llama-3.1-8b", "--tp", "1000000"], "tp"),
        (["compare", "llama-3.1-8b", "--latent-dim", "-5"], "latent dim"),
        (["compare", "llama-3.1-8b", "--latent-dim", "512", "--rope-dim", "-600"], "rope dim"),
        (["compare", "llama-3.1-8b", "--latent-dim", "0", "--baseline", "MLA"], "latent dim"),
        (["compare", "--layers", "32", "--heads", "32", "--head-dim", "99999999"], "--head-dim"),
    ],
)
def test_hand_values_are_capped(run_cli, argv: list[str], needle: str) -> None:
    assert_one_line_error(run_cli(*argv), needle)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["estimate", "llama-3.1-8b", "--encoder-tokens", "1500"], "--encoder-tokens"),
        (["estimate", "llama-3.1-8b", "--explain", "--json"], "--explain"),
        (["compare", "llama-3.1-8b", "--chart", "--json"], "--chart"),
        (["compare", "llama-3.1-8b", "mistral-7b-v0.1", "llama-3.1-8b"], "more than once"),
        (["compare", "llama-3.1-8b", "Llama-3.1-8B"], "more than once"),
        (["compare", "llama-3.1-8b", "llama-3.1-8b-instruct"], "more than once"),
    ],
)
def test_ignored_flags_are_refused(run_cli, argv: list[str], needle: str) -> None:
    assert_one_line_error(run_cli(*argv), needle)


@pytest.mark.parametrize("flag", [["--tokens", "4k"], ["--prompt", "10"], ["--batch", "4"], ["--explain"]])
def test_lengths_refuses_flags_it_would_ignore(run_cli, tmp_path: Path, flag: list[str]) -> None:
    path = tmp_path / "mix.csv"
    path.write_text("prompt,output\n10,2\n")
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), *flag), flag[0])


# --- compare: serving (the engine with its options) ------------------------------------------------------


def test_compare_takes_the_engines_options_through_serving() -> None:
    # llama-3.1-8b: 32 layers x 8 KV heads x 128 dims x 2 (K, V) x 2 bytes (bf16) = 131,072 B per
    # token. vLLM with 32-token blocks holds cdiv(1000, 32) = 32 blocks = 1,024 tokens:
    # 1,024 x 131,072 = 134,217,728 B for the model's own GQA-8 row; MHA (32 KV heads) 4 x that,
    # MQA (1) an eighth. vLLM's default 16-token blocks: cdiv(1000, 16) = 63 blocks = 1,008 tokens.
    served = kvcalc.compare(["llama-3.1-8b"], tokens=[1000], serving=Serving("vllm", options={"block_size": 32}))
    rows = {row.candidate.label: row.total_bytes for row in served.rows}
    assert rows == {"MHA": 4 * 134_217_728, "GQA-8": 134_217_728, "MQA": 134_217_728 // 8}
    default = kvcalc.compare(["llama-3.1-8b"], tokens=[1000], serving=Serving("vllm"))
    assert {row.candidate.label: row.total_bytes for row in default.rows}["GQA-8"] == 1_008 * 131_072
    # One kv_dtype from serving: fp8 halves the bytes (1 byte an element).
    fp8 = kvcalc.compare(["llama-3.1-8b"], tokens=[1000], serving=Serving("vllm", kv_dtype="fp8",
                                                                          options={"block_size": 32}))  # fmt: skip
    assert {row.candidate.label: row.total_bytes for row in fp8.rows}["GQA-8"] == 134_217_728 // 2


@pytest.mark.parametrize(
    ("kwargs", "message", "params"),
    [
        ({"serving": Serving(options={"block_size": 32})},
         "block_size changes nothing under the theoretical engine (an option of vllm and sglang)", ("block_size",)),
        ({"serving": Serving("vllm"), "engine": "vllm"}, "give serving or engine, not both", ("serving", "engine")),
        ({"serving": Serving("vllm", kv_dtype="fp8"), "kv_dtypes": ["fp16"]}, "give serving or kv_dtypes, not both",
         ("serving", "kv_dtypes")),
        ({"serving": Serving("llama.cpp", k_dtype="q8_0")}, "serving's k_dtype changes nothing in compare",
         ("k_dtype",)),
        # llama-3.1-8b has no sliding or chunked layer: max_num_batched_tokens sizes none of its rows.
        ({"serving": Serving("vllm", options={"max_batched_tokens": 4096})},
         "max_batched_tokens changes nothing in llama-3.1-8b's cache under vllm", ("max_batched_tokens",)),
        ({"serving": "vllm"}, "serving must be a kvcalc.Serving", ("serving",)),
    ],
)  # fmt: skip
def test_compare_refuses_serving_it_would_ignore(kwargs: dict[str, Any], message: str, params: tuple[str]) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as caught:
        kvcalc.compare(["llama-3.1-8b"], tokens=[1000], **kwargs)
    assert caught.value.params == params


def test_compare_refuses_options_for_an_engine_built_already() -> None:
    from kvcalc.engines import make_engine

    built, _ = make_engine("vllm")
    with pytest.raises(UsageError, match="options configure an engine given by name"):
        kvcalc.compare(["llama-3.1-8b"], serving=Serving(built, options={"block_size": 32}))
