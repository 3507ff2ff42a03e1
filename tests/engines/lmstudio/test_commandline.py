"""LM Studio's command line (src/kvcalc/engines/lmstudio/commandline.py): real ``lms load`` lines from
LM Studio's docs and public issues give the same --json as the kvcalc flags they stand for; fit's
written line reads back to its answer."""

from __future__ import annotations

import shlex

import pytest

from kvcalc.engines.commandline import read_command, writer
from kvcalc.engines.lmstudio import LMStudioOptions
from kvcalc.engines.lmstudio.commandline import READERS, gpu_ratio, js_number
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error

# (source, the line, the kvcalc flags it stands for, the warnings it gives). {model} is the LM
# Studio model key replaced by kvcalc's preset qwen3-8b (an LM Studio key is no kvcalc model).
# The context length is one unified cache shared by --parallel predictions (4 by default): P
# sequences of context / P tokens, e.g. 4,096 / 4 = 1,024; no -c is LM Studio's 4,096 (list.md).
LOAD_LINES = [
    # lmstudio-ai/docs @ c6854fb 3_cli/0_local-models/load.md "Set context length": 4,096 / 4
    ("load.md context", "lms load {model} --context-length 4096", ["--batch", "4", "--tokens", "1024"], ()),
    # load.md "Set GPU offload": max is every layer on the GPU, as kvcalc counts them
    ("load.md --gpu max", "lms load {model} --gpu max", ["--batch", "4", "--tokens", "1024"], ()),
    ("load.md --gpu 0.5", "lms load {model} --gpu 0.5", ["--batch", "4", "--tokens", "1024"], ("--gpu 0.5",)),
    ("load.md --gpu off", "lms load {model} --gpu off", ["--batch", "4", "--tokens", "1024"], ("--gpu off",)),
    # load.md "Set TTL"
    ("load.md --ttl", "lms load {model} --ttl 3600", ["--batch", "4", "--tokens", "1024"], ()),
    # lmstudio-ai/docs 1_developer/0_core/headless_llmster.mdx (ExecStartPre): openai/gpt-oss-20b is
    # kvcalc's preset gpt-oss-20b's repo; its sliding layers keep a window for each of the 4 predictions
    ("headless_llmster.mdx", "lms load openai/gpt-oss-20b --yes", ["--batch", "4", "--tokens", "1024"], ()),
    # lmstudio-ai/docs 3_cli/index.mdx
    ("cli index.mdx", 'lms load openai/gpt-oss-20b --identifier="my-model-name"', ["--batch", "4", "--tokens", "1024"],
     ()),
    # https://github.com/lmstudio-ai/lmstudio-bug-tracker/issues/2318: one prediction of 8,192
    ("bug-tracker 2318 estimate", "lms load {model} -c 8192 --parallel 1 --estimate-only -y",
     ["--batch", "1", "--tokens", "8192", "--parallel", "1"], ()),
    ("bug-tracker 2318", "lms load {model} -c 4096 --parallel 1",
     ["--batch", "1", "--tokens", "4096", "--parallel", "1"], ()),
    # https://github.com/neomjs/neo/issues/12117: 262,144 / 4 = 65,536 tokens each
    # (its key gemma-4-31b-it read as kvcalc's preset gemma-4-31b, whose sliding layers keep a window a prediction)
    ("neo 12117", "lms load gemma-4-31b --context-length 262144", ["--batch", "4", "--tokens", "65536"], ()),
]  # fmt: skip


def _model(line: str) -> str:
    return next((m for m in ("gpt-oss-20b", "gemma-4-31b") if m in line), "qwen3-8b")


def _answer(result) -> dict:
    assert result.exit_code == 0, result.stderr
    found = result.json()
    found.pop("warnings", None)
    return found


@pytest.mark.parametrize(("source", "line", "flags", "warned"), LOAD_LINES, ids=[c[0] for c in LOAD_LINES])
def test_real_lms_load_lines_give_the_same_json_as_kvcalcs_flags(run_cli, source, line, flags, warned) -> None:
    words = shlex.split(line.format(model="qwen3-8b"))
    read = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", *words)
    given = run_cli("fit", _model(line), "--gpu", "h100-sxm", "--json", "--engine", "lmstudio", *flags)
    assert _answer(read) == _answer(given), source
    for said in warned:
        assert said in read.stderr, read.stderr
    if not warned:
        assert read.stderr == ""


def test_estimate_reads_the_line_too(run_cli) -> None:
    # bug-tracker 2318's line; qwen3-8b has no sliding layer, so --parallel changes nothing for its
    # cache and estimate passes it over with a note (cli/engine_line.py _without_idle_knobs).
    read = run_cli("estimate", "--json", "--", "lms", "load", "qwen3-8b", "-c", "8192", "--parallel", "1")
    given = run_cli("estimate", "qwen3-8b", "--json", "--engine", "lmstudio", "--batch", "1", "--tokens", "8192")
    assert _answer(read) == _answer(given)


def _read(line: str):
    return read_command(shlex.split(line), lambda path: "")


def test_the_parallel_flag_is_lm_studios_knob() -> None:
    assert "parallel" in {k.name for k in LMStudioOptions.knobs()}
    assert _read("lms load m --parallel 2 -c 8192").settings == {"model": "m", "engine": "lmstudio", "parallel": 2,
                                                                 "batch": 2, "tokens": 4096}  # fmt: skip


def test_the_defaults_and_the_runtime_are_notes() -> None:
    command = _read("lms load m")
    said = " | ".join(command.notes)
    for note in ("Max Concurrent Predictions 4", "default context length 4,096", "read as lmstudio (llama.cpp",
                 "without --gpu LM Studio chooses", "m is LM Studio's model key"):  # fmt: skip
        assert note in said, said
    assert command.settings == {"model": "m", "engine": "lmstudio", "batch": 4, "tokens": 1024}


def test_a_context_that_does_not_divide_is_read_as_llama_cpp_pads_it() -> None:
    # pad(4097, 256) = 4,352 cells; 1,025 tokens x 4 = 4,100 pad to the same 4,352 (1,024 x 4 = 4,096 do not).
    command = _read("lms load m -c 4097")
    assert command.settings["tokens"] == 1025 and "pads it to 4,352 cells" in " ".join(command.notes)


def test_values_are_read_as_javascript_reads_them() -> None:
    # createRefinedNumberParser reads +str: trimmed, hex, exponents; 32k is NaN.
    assert [js_number(t) for t in (" 4096 ", "0x1000", "4e3", "", "1.5")] == [4096, 4096, 4000, 0, 1.5]
    assert _read("lms load m --context-length=0x2000 --parallel 2").settings["tokens"] == 4096
    assert [gpu_ratio(t) for t in ("OFF", "Max", "0.25")] == [0.0, 1.0, 0.25]
    for line, said in (("-c 32k", "Not a number"), ("-c 1.5", "Not an integer"), ("--parallel 0", "at least 1"),
                       ("--gpu 1.5", "between 0 and 1"), ("--ttl 0", "at least 1"),
                       ("--log-level loud", "Allowed choices")):  # fmt: skip
        with pytest.raises(UsageError, match=said):
            _read(f"lms load m {line}")


def test_unknown_flags_are_refused_as_lms_refuses_them() -> None:
    for flag in ("--kv-cache-type q8_0", "--flash-attention", "-ngl 20", "--ctx-size 4096"):
        with pytest.raises(UsageError, match="lms load: error: unrecognized arguments"):
            _read(f"lms load m {flag}")
    with pytest.raises(UsageError, match="lms server start: error: unrecognized arguments: --parallel"):
        _read("lms server start --parallel 4")


def test_memory_flags_are_named_and_the_rest_quiet() -> None:
    drafted = _read("lms load m --speculative-draft-simple --speculative-draft-model d "
                    "--speculative-draft-max-tokens 8")  # fmt: skip
    assert len(drafted.warnings) == 1 and "--speculative-draft-model d: a draft model's weights" in drafted.warnings[0]
    mtp = _read("lms load m --speculative-draft-mtp")
    assert len(mtp.warnings) == 1 and "Draft MTP" in mtp.warnings[0]
    quiet = _read("lms load m --no-speculative-draft-mtp --ttl 60 --identifier x --exact --local -y --host h "
                  "--port 1234 --quiet --gpu max")  # fmt: skip
    assert quiet.warnings == ()
    server = _read("lms server start --port 1234 --cors --bind 0.0.0.0")
    assert server.warnings == () and server.settings == {"engine": "lmstudio"}
    assert "loads no model" in server.notes[0]


def test_the_drafting_refusals_are_lms() -> None:
    # loadSpeculativeDecoding.ts resolveCliSpeculativeDecodingLoadConfig
    for flags, said in (("--speculative-draft-simple", "requires --speculative-draft-model"),
                        ("--speculative-draft-model d", "requires --speculative-draft-simple"),
                        ("--speculative-draft-mtp --speculative-draft-simple --speculative-draft-model d",
                         "cannot both be used"),
                        ("--speculative-draft-max-tokens 4", "tuning flags require"),
                        ("--speculative-draft-mtp --speculative-draft-max-tokens 2 --speculative-draft-min-tokens 3",
                         "less than or equal")):  # fmt: skip
        with pytest.raises(UsageError, match=said):
            _read(f"lms load m {flags}")


def test_the_written_line_says_what_lm_studio_can() -> None:
    load = writer("lmstudio")
    assert load is READERS[0]
    # 3 predictions of 8,192 tokens: one unified cache of 24,576.
    written = load.write({"model": "Qwen/Qwen3-8B", "tokens": 8192, "batch": 3, "utilization": 1.0})
    assert written.text == "lms load Qwen/Qwen3-8B --context-length 24576 --parallel 3"
    assert {k: v for k, v in _read(written.text).settings.items() if k != "model"} == {
        "engine": "lmstudio", "parallel": 3, "batch": 3, "tokens": 8192}  # fmt: skip
    notes = " | ".join(load.write({"tokens": 1, "batch": 1, "utilization": 0.9, "kv_budget": 5, "tp": 2,
                                   "kv_dtype": "q8_0", "v_dtype": "fp16", "n_batch": 1024}).notes)  # fmt: skip
    for said in ("no share of GPU memory", "no KV cache budget", "tp 2", "set K q8_0, V f16",
                 "llamaKCacheQuantizationType", "Evaluation Batch Size (evalBatchSize) 1024"):  # fmt: skip
        assert said in notes, notes


ANSWER = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


@pytest.mark.parametrize(
    ("flags", "again"),
    [(["--gpu", "rtx-4090"], []), (["--gpu", "l4", "--tokens", "8192"], []),
     (["--gpu", "l4", "--kv-dtype", "q8_0"], ["--kv-dtype", "q8_0"])],
)  # fmt: skip
def test_fit_writes_the_lms_load_line_that_gives_its_answer_back(run_cli, flags, again) -> None:
    asked = run_cli("fit", "qwen3-8b", "--engine", "lmstudio", "--json", *flags)
    assert asked.exit_code == 0, asked.stderr
    argv = asked.json()["command"]["argv"]
    assert argv[:3] == ["lms", "load", "Qwen/Qwen3-8B"]
    # The cache type has no lms load flag (a note says so): given again before '--'.
    back = run_cli("fit", "--gpu", flags[1], "--json", *again, "--", *argv)
    assert back.exit_code == 0, back.stderr
    assert {k: back.json()[k] for k in ANSWER} == {k: asked.json()[k] for k in ANSWER}


def test_the_cli_error_is_one_line(run_cli) -> None:
    result = run_cli("estimate", "--", "lms", "load", "qwen3-8b", "--kv-cache-type", "q8_0")
    assert_one_line_error(result, "lms load: error: unrecognized arguments: --kv-cache-type")


def test_the_mlx_runtimes_line_is_written_and_read_back(run_cli) -> None:
    # LM Studio's MLX runtime: each prediction its own cache of the context length (mlx-engine's
    # max_kv_size), so --context-length is the tokens, not tokens x batch.
    mlx = writer("lmstudio-mlx")
    assert mlx is READERS[1]
    asked = run_cli("fit", "qwen3-8b", "--engine", "lmstudio-mlx", "--gpu-memory", "24GB", "--tokens", "8192", "--json")
    assert asked.exit_code == 0, asked.stderr
    command = asked.json()["command"]
    concurrency = asked.json()["max_concurrency"]
    assert command["argv"] == ["lms", "load", "Qwen/Qwen3-8B", "--context-length", "8192", "--parallel",
                               str(concurrency)]  # fmt: skip
    assert any("read" in n and "llama.cpp runtime" in n for n in command["notes"])
    settings = mlx.read(command["argv"][2:], {}, lambda path: "").settings
    assert settings == {"model": "Qwen/Qwen3-8B", "engine": "lmstudio-mlx", "parallel": concurrency,
                        "batch": concurrency, "tokens": 8192, "max_kv_size": 8192}  # fmt: skip
    again = run_cli("fit", "qwen3-8b", "--engine", "lmstudio-mlx", "--gpu-memory", "24GB", "--json", "--batch",
                    str(concurrency), "--parallel", str(concurrency), "--tokens", "8192", "--max-kv-size",
                    "8192")  # fmt: skip
    assert {k: again.json()[k] for k in ANSWER} == {k: asked.json()[k] for k in ANSWER}
    notes = " | ".join(mlx.write({"tokens": 1, "batch": 1, "kv_bits": 4}).notes)
    assert "KV Cache Quantization (kv_bits 4)" in notes and "mlxKvCacheQuantization" in notes


def test_engine_before_the_separator_names_the_mlx_runtime(run_cli) -> None:
    read = run_cli("estimate", "--engine", "lmstudio-mlx", "--json", "--", "lms", "load", "qwen3-8b", "-c", "8192",
                   "--parallel", "1")  # fmt: skip
    given = run_cli("estimate", "qwen3-8b", "--engine", "lmstudio-mlx", "--json", "--tokens", "8192",
                    "--max-kv-size", "8192", "--parallel", "1")  # fmt: skip
    assert _answer(read) == _answer(given)
