"""``mlx_lm.server`` and ``mlx_lm.generate`` read as kvcalc's settings, and fit's answer written as an
``mlx_lm.server`` line (kvcalc.engines.mlx.commandline).

The lines below are real ones from mlx-lm's model cards and public issues (each cites its URL); a
Hub repository kvcalc has no offline copy of (mlx-community's conversions) is replaced by a preset's
repository or a local config fixture of the same architecture, and the flags are the line's own."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from kvcalc.engines.commandline import read_command
from kvcalc.engines.mlx.commandline import READERS, parse_size
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error
from tests.engines.mlx.test_mlx_conformance import PYTHON, ROOT, needs_mlx

FIXTURES = str(ROOT / "tests" / "fixtures")


def _no_file(path: str) -> str:
    raise AssertionError(f"no mlx-lm line names a file kvcalc reads: {path}")


def read(*words: str) -> Any:
    return read_command(list(words), _no_file)


# (command before '--', the line, the equivalent kvcalc flags written by hand, memory flags the
# line's warnings must name)
# fmt: off
LINES = [
    # https://huggingface.co/mlx-community/Llama-2-7b-mlx ("Use with MLX LM"): mlx_lm.generate
    # --model "mlx-community/Llama-2-7b-mlx" --prompt "Once upon a time". -m not given: generate's
    # default 100 (generate.py DEFAULT_MAX_TOKENS).
    pytest.param(("estimate", "--tokens", "2048"),
                 ("mlx_lm.generate", "--model", "meta-llama/Llama-2-7b-hf", "--prompt", "Once upon a time"),
                 ("estimate", "llama-2-7b", "--engine", "mlx", "--tokens", "2048", "--max-tokens", "100"), (),
                 id="model-card"),
    # https://github.com/ml-explore/mlx-examples/issues/1029: mlx_lm.generate --model
    # mlx-community/Meta-Llama-3.1-8B-Instruct-4bit --max-kv-size 33000 --max-tokens 1000 --temp 0.0
    # --top-p 0.9 --seed 1000 --prompt -  (the prompt from stdin: 32,134 tokens in its log). In
    # mlx-lm 0.32.2 llama.py builds its own cache and --max-kv-size changes nothing for Llama (the
    # test below); qwen2.py takes it, so the line runs here with Qwen2.5-7B.
    pytest.param(("estimate", "--tokens", "33134"),
                 ("mlx_lm.generate", "--model", "Qwen/Qwen2.5-7B", "--max-kv-size", "33000", "--max-tokens",
                  "1000", "--temp", "0.0", "--top-p", "0.9", "--seed", "1000", "--prompt", "-"),
                 ("estimate", "qwen2.5-7b", "--engine", "mlx", "--tokens", "33134", "--max-kv-size", "33000",
                  "--max-tokens", "1000"), (),
                 id="issue-1029-max-kv-size"),
    # https://github.com/ml-explore/mlx-lm/issues/844: python -m mlx_lm generate --prompt "write a
    # todo list ..." --max-tokens 1500 --model mlx-community/Qwen3-Coder-Next-4bit --temp 1.0 --top-p
    # 0.95 --top-k 40 (Qwen3-Next architecture: the qwen3-next preset's repository).
    pytest.param(("estimate", "--tokens", "2000"),
                 ("python", "-m", "mlx_lm", "generate", "--prompt", "write a todo list as a single html page",
                  "--max-tokens", "1500", "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--temp", "1.0", "--top-p",
                  "0.95", "--top-k", "40"),
                 ("estimate", "qwen3-next-80b-a3b", "--engine", "mlx", "--tokens", "2000", "--max-tokens", "1500"), (),
                 id="issue-844-python-m-mlx_lm"),
    # https://github.com/ml-explore/mlx-examples/pull/643: python -m mlx_lm.generate --model
    # mlx-community/NeuralBeagle14-7B-4bit-mlx --prompt "Write a story about Albert Einstein" --temp 0.0
    # --max-tokens 256 (a Mistral-7B fine-tune; the deprecated python -m mlx_lm.generate spelling).
    pytest.param(("estimate", "--tokens", "1125"),
                 ("python3", "-m", "mlx_lm.generate", "--model", "mistralai/Mistral-7B-v0.1", "--prompt",
                  "Write a story about Albert Einstein", "--temp", "0.0", "--max-tokens", "256"),
                 ("estimate", "mistral-7b-v0.1", "--engine", "mlx", "--tokens", "1125", "--max-tokens", "256"), (),
                 id="pr-643-deprecated-spelling"),
    # https://github.com/kevinlights/fine-tuning-research get-started/4-pre-train-check.bash:
    # python -m mlx_lm generate --model ./mlx_qwen_small --adapter-path adapters --prompt "..."
    # --max-tokens 100 --ignore-chat-template (a local Qwen folder: a Qwen2.5 config fixture).
    pytest.param(("estimate", "--tokens", "512"),
                 ("python", "-m", "mlx_lm", "generate", "--model", f"{FIXTURES}/Qwen2.5-7B.json", "--adapter-path",
                  "adapters", "--prompt", "<|im_start|>user\\n你是谁？<|im_end|>", "--max-tokens", "100",
                  "--ignore-chat-template"),
                 ("estimate", f"{FIXTURES}/Qwen2.5-7B.json", "--engine", "mlx", "--tokens", "512", "--max-tokens",
                  "100"), ("--adapter-path",),
                 id="adapter-path-warned"),
    # https://github.com/arozanov/turboquant-mlx/issues/11 (comment by badelon): mlx_lm.server
    # --model ".../catalystsec/GLM-5.1-4bit" --trust-remote-code --host 127.0.0.1 --port 1234
    # --max-tokens 205536 --prompt-cache-bytes 70G --prompt-cache-size 20 --prompt-concurrency 2
    # --decode-concurrency 2 (the GLM-5.1 config fixture). 70G = 70 x 10^9 B (_parse_size), room fit
    # takes out of the budget; --decode-concurrency 2 = 2 sequences.
    pytest.param(("fit", "--gpu", "m3-ultra-512gb", "--weights", "400GB", "--tokens", "210000"),
                 ("mlx_lm.server", "--model", f"{FIXTURES}/GLM-5.1.json", "--trust-remote-code", "--host",
                  "127.0.0.1", "--port", "1234", "--max-tokens", "205536", "--prompt-cache-bytes", "70G",
                  "--prompt-cache-size", "20", "--prompt-concurrency", "2", "--decode-concurrency", "2"),
                 ("fit", f"{FIXTURES}/GLM-5.1.json", "--gpu", "m3-ultra-512gb", "--weights", "400GB", "--tokens",
                  "210000", "--engine", "mlx", "--max-tokens", "205536", "--prompt-cache-bytes", "70000000000B",
                  "--batch", "2"), ("--prompt-concurrency",),
                 id="turboquant-11-server"),
    # https://github.com/ml-explore/mlx-lm/issues/1802: mlx_lm.server --prompt-cache-bytes 8GB
    # --prompt-cache-size 16 (its model named apart: given before '--' here). 8GB = 8 x 10^9 B.
    pytest.param(("fit", "qwen3-8b", "--gpu", "m4-max-64gb", "--tokens", "10k"),
                 ("mlx_lm.server", "--prompt-cache-bytes", "8GB", "--prompt-cache-size", "16"),
                 ("fit", "qwen3-8b", "--gpu", "m4-max-64gb", "--tokens", "10k", "--engine", "mlx",
                  "--prompt-cache-bytes", "8000000000B"), (),
                 id="issue-1802-prompt-cache"),
    # https://github.com/ml-explore/mlx-lm/issues/1390: mlx_lm.server --model
    # mlx-community/Qwen3.5-4B-MLX-8bit (the Qwen3.5 config fixture); the default 10 finished
    # prompts' caches are fit's own note, not the line's warning.
    pytest.param(("fit", "--gpu", "m4-max-64gb", "--weights", "4.5GB", "--tokens", "32k"),
                 ("mlx_lm.server", "--model", f"{FIXTURES}/Qwen3.5-0.8B.json"),
                 ("fit", f"{FIXTURES}/Qwen3.5-0.8B.json", "--gpu", "m4-max-64gb", "--weights", "4.5GB", "--tokens",
                  "32k", "--engine", "mlx"), (),
                 id="issue-1390-plain-server"),
    # https://github.com/ml-explore/mlx-lm/pull/1854 (Usage): mlx_lm.server --model
    # mlx-community/Qwen2.5-7B-Instruct-4bit --kv-bits 8. --kv-bits makes the server serve one
    # request at a time (server.py _is_batchable): batch 1.
    pytest.param(("fit", "--gpu", "m4-max-64gb", "--weights", "4.3GB", "--tokens", "32k"),
                 ("mlx_lm.server", "--model", f"{FIXTURES}/Qwen2.5-7B.json", "--kv-bits", "8"),
                 ("fit", f"{FIXTURES}/Qwen2.5-7B.json", "--gpu", "m4-max-64gb", "--weights", "4.3GB", "--tokens",
                  "32k", "--engine", "mlx", "--kv-bits", "8", "--batch", "1"), (),
                 id="pr-1854-kv-bits"),
    # https://github.com/ml-explore/mlx-lm/pull/1362 (Usage): mlx_lm.server --model
    # mlx-community/Qwen3-30B-A3B-4bit --kv-bits 8 --kv-group-size 64 --quantized-kv-start 0
    # (a Qwen3 MoE: the qwen3-8b preset's repository has the same qwen3 cache layout per layer).
    pytest.param(("estimate", "--tokens", "8192"),
                 ("mlx_lm.server", "--model", "Qwen/Qwen3-8B", "--kv-bits", "8", "--kv-group-size", "64",
                  "--quantized-kv-start", "0"),
                 ("estimate", "qwen3-8b", "--tokens", "8192", "--engine", "mlx", "--kv-bits", "8", "--kv-group-size",
                  "64", "--quantized-kv-start", "0", "--batch", "1"), (),
                 id="pr-1362-kv-quantization"),
]
# fmt: on


@pytest.mark.parametrize(("before", "line", "flags", "warned"), LINES)
def test_a_real_line_gives_the_json_of_its_kvcalc_flags(run_cli, before, line, flags, warned) -> None:
    got = run_cli(*before, "--json", "--", *line)
    want = run_cli(*flags, "--json")
    assert got.exit_code == 0, got.stderr
    assert want.exit_code == 0, want.stderr
    got_json, want_json = got.json(), want.json()
    line_warnings = [w for w in got_json.pop("warnings") if w not in want_json.get("warnings", [])]
    want_json.pop("warnings")
    assert got_json == want_json
    # Each memory flag kvcalc does not model is named; no other flag warns.
    assert len(line_warnings) == len(warned), line_warnings
    for flag, warning in zip(warned, line_warnings, strict=True):
        assert f" {flag} " in warning and warning.endswith("kvcalc does not model it"), warning


def test_a_line_kvcalc_refuses_gives_the_refusal_of_its_flags(run_cli) -> None:
    # The issue-1029 line as written (a Llama): kvcalc's mlx rules refuse --max-kv-size for a model
    # whose mlx-lm module builds its own cache, from the line as from the flag.
    line = run_cli("estimate", "--tokens", "33134", "--json", "--", "mlx_lm.generate", "--model",
                   "meta-llama/Llama-3.1-8B", "--max-kv-size", "33000", "--max-tokens", "1000", "--prompt",
                   "-")  # fmt: skip
    flags = run_cli("estimate", "llama-3.1-8b", "--tokens", "33134", "--json", "--engine", "mlx", "--max-kv-size",
                    "33000", "--max-tokens", "1000")  # fmt: skip
    assert_one_line_error(line, "--max-kv-size changes nothing for llama")
    assert line.stderr == flags.stderr


def test_the_turboquant_line_names_prompt_concurrency_only(run_cli) -> None:
    # --prompt-cache-size 20 beside --prompt-cache-bytes 70G: the bytes bound it, no warning.
    words = READERS[0]
    command = read("mlx_lm.server", "--model", "X", "--prompt-cache-bytes", "70G", "--prompt-cache-size", "20",
                   "--prompt-concurrency", "2", "--decode-concurrency", "2")  # fmt: skip
    assert words.program == "mlx_lm.server"
    assert command.settings == {"model": "X", "prompt_cache_bytes": 70 * 10**9, "batch": 2, "engine": "mlx"}
    assert len(command.warnings) == 1 and "--prompt-concurrency 2" in command.warnings[0]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # mlx_lm/utils.py _parse_size (0.32.2): M/MB = 10^6, G/GB = 10^9, any case, digits alone bytes.
        ("70G", 70 * 10**9),
        ("8GB", 8 * 10**9),
        ("1.5gb", 1_500_000_000),
        ("512M", 512 * 10**6),
        ("123456", 123_456),
    ],
)
def test_prompt_cache_bytes_as_mlx_lm_reads_it(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_a_size_suffix_mlx_lm_lacks_is_refused() -> None:
    # _parse_size has no K or GiB (a KeyError and a traceback in mlx-lm).
    with pytest.raises(UsageError, match="invalid value '8GiB'"):
        read("mlx_lm.server", "--prompt-cache-bytes", "8GiB")


def test_generate_applies_its_own_max_tokens_default_in_a_note() -> None:
    command = read("mlx_lm.generate", "--model", "Qwen/Qwen3-8B", "--prompt", "hello")
    assert command.settings == {"model": "Qwen/Qwen3-8B", "max_tokens": 100, "engine": "mlx"}
    assert any("DEFAULT_MAX_TOKENS" in n and "--max-tokens 100 applied" in n for n in command.notes)
    assert any("does not count the tokens of its --prompt text" in n for n in command.notes)


def test_generate_short_spellings_and_abbreviations_as_argparse_reads_them() -> None:
    # -m is --max-tokens, -p is --prompt; argparse takes a unique prefix (--max-k = --max-kv-size).
    command = read("mlx_lm.generate", "--model", "M", "-m", "64", "-p", "hi", "--max-k", "512", "-qa")
    assert command.settings == {"model": "M", "max_tokens": 64, "max_kv_size": 512, "engine": "mlx"}


def test_an_ambiguous_prefix_is_argparses_error() -> None:
    with pytest.raises(UsageError, match="ambiguous option: --max could match --max-kv-size, --max-tokens"):
        read("mlx_lm.generate", "--max", "3")


@pytest.mark.parametrize(
    ("line", "flag"),
    [
        # https://github.com/ml-explore/mlx-lm/pull/1362 (closed) proposed --max-kv-size for the server:
        # mlx-lm 0.32.2's server has none.
        (("mlx_lm.server", "--model", "M", "--max-kv-size", "8192"), "--max-kv-size"),
        # -m is generate's alone.
        (("mlx_lm.server", "-m", "64"), "-m"),
        # --decode-concurrency is the server's alone.
        (("mlx_lm.generate", "--decode-concurrency", "4"), "--decode-concurrency"),
        (("mlx_lm.generate", "--prompt-cache-bytes", "1G"), "--prompt-cache-bytes"),
        (("mlx_lm", "server", "--no-such-flag"), "--no-such-flag"),
    ],
)
def test_a_flag_the_program_lacks_is_its_error(line: tuple[str, ...], flag: str) -> None:
    program = f"mlx_lm.{line[1]}" if line[0] == "mlx_lm" else line[0]
    with pytest.raises(UsageError, match=f"{program}: error: unrecognized arguments: {flag} "):
        read(*line)


def test_an_unknown_flag_is_refused_on_the_command_line(run_cli) -> None:
    result = run_cli("estimate", "--", "mlx_lm.server", "--model", "Qwen/Qwen3-8B", "--max-kv-size", "8192")
    assert_one_line_error(result, "mlx_lm.server: error: unrecognized arguments: --max-kv-size")


def test_nargs_plus_flags_take_every_word_up_to_the_next_flag() -> None:
    # generate.py: --image and --extra-eos-token are nargs="+".
    command = read("mlx_lm.generate", "--image", "a.png", "b.png", "--extra-eos-token", "x", "y", "--model", "M")
    assert command.settings["model"] == "M"
    assert command.warnings == (
        "mlx_lm.generate --image a.png b.png: each image's tokens join the prompt (as many as its processor makes) "
        "and the vision tower runs on it; kvcalc does not model it",
    )


@pytest.mark.parametrize(
    ("line", "flag"),
    [
        (("mlx_lm.generate", "--draft-model", "D"), "--draft-model D"),
        (("mlx_lm.generate", "--prompt-cache-file", "c.safetensors"), "--prompt-cache-file c.safetensors"),
        (("mlx_lm.generate", "--adapter-path", "a"), "--adapter-path a"),
        (("mlx_lm.server", "--adapter-path", "a"), "--adapter-path a"),
        (("mlx_lm.server", "--prompt-concurrency", "4"), "--prompt-concurrency 4"),
        # A count of finished prompts' caches with no byte bound.
        (("mlx_lm.server", "--prompt-cache-size", "16"), "--prompt-cache-size 16"),
    ],
)
def test_memory_flags_kvcalc_does_not_model_are_named(line: tuple[str, ...], flag: str) -> None:
    command = read(*line)
    assert any(w.startswith(f"{line[0]} {flag}:") and "kvcalc does not model" in w for w in command.warnings)


@pytest.mark.parametrize(
    "line",
    [
        ("mlx_lm.server", "--model", "M", "--host", "0.0.0.0", "--port", "8080", "--allowed-origins", "a,b",
         "--trust-remote-code", "--log-level", "DEBUG", "--chat-template", "t", "--use-default-chat-template",
         "--temp", "0.7", "--top-p", "0.9", "--top-k", "20", "--min-p", "0.05", "--chat-template-args",
         '{"enable_thinking":false}', "--num-draft-tokens", "4", "--pipeline"),
        ("mlx_lm.generate", "--model", "M", "--trust-remote-code", "--system-prompt", "s", "--prefill-response", "r",
         "--temp", "0.7", "--top-p", "0.9", "--min-p", "0.1", "--top-k", "5", "--xtc-probability", "0.5",
         "--xtc-threshold", "0.1", "--min-tokens-to-keep", "2", "--seed", "1", "--ignore-chat-template",
         "--use-default-chat-template", "--chat-template-config", "{}", "--verbose", "F", "--num-draft-tokens", "2",
         "--quantize-activations"),
    ],
)  # fmt: skip
def test_flags_that_do_not_touch_memory_pass_quietly(line: tuple[str, ...]) -> None:
    command = read(*line)
    assert command.warnings == ()
    assert command.settings["model"] == "M"
    assert set(command.settings) <= {"model", "engine", "max_tokens"}


def test_the_server_serves_one_request_at_a_time_with_a_draft_model() -> None:
    # server.py ModelProvider._load: is_batchable = draft_model is None.
    command = read("mlx_lm.server", "--model", "M", "--draft-model", "D", "--decode-concurrency", "8")
    assert command.settings["batch"] == 1
    assert any("--decode-concurrency 8 changes nothing" in n for n in command.notes)


def test_quantization_flags_without_kv_bits_are_dropped_in_a_note() -> None:
    # generate.py maybe_quantize_kv_cache returns at once when kv_bits is None.
    command = read("mlx_lm.generate", "--model", "M", "--kv-group-size", "32", "--quantized-kv-start", "0")
    assert "kv_group_size" not in command.settings and "quantized_kv_start" not in command.settings
    assert any("--kv-group-size 32 changes nothing without --kv-bits" in n for n in command.notes)


def test_every_program_spelling_mlx_lm_answers_to() -> None:
    # pyproject console scripts mlx_lm.server / mlx_lm.generate / mlx_lm (cli.py's subcommands), and
    # the deprecated python -m mlx_lm.server, which still runs main().
    for words in (("mlx_lm.server",), ("mlx_lm", "server"), ("python", "-m", "mlx_lm", "server"),
                  ("python3.12", "-m", "mlx_lm.server"), ("/opt/homebrew/bin/mlx_lm.server",)):  # fmt: skip
        assert read(*words, "--model", "M").program == "mlx_lm.server"
    for words in (("mlx_lm.generate",), ("mlx_lm", "generate"), ("python", "-m", "mlx_lm", "generate"),
                  ("python", "-m", "mlx_lm.generate")):  # fmt: skip
        assert read(*words, "--model", "M").program == "mlx_lm.generate"


# --- written: fit's answer as an mlx_lm.server line ---------------------------------------------


def test_the_server_line_says_the_concurrency_found_and_the_rest_in_notes() -> None:
    server = READERS[0]
    written = server.write({"model": "Qwen/Qwen3-8B", "tokens": 32768, "batch": 7, "utilization": 1.0,
                            "kv_bits": 4, "prefill_step_size": 512})  # fmt: skip
    # --kv-bits serves one request at a time: --decode-concurrency would change nothing.
    assert written.argv == ("mlx_lm.server", "--model", "Qwen/Qwen3-8B", "--kv-bits", "4", "--prefill-step-size", "512")
    assert any("serve one request at a time: 7 requests" in n for n in written.notes)
    assert any("no context flag" in n and "--tokens 32768" in n for n in written.notes)
    plain = server.write({"model": "Qwen/Qwen3-8B", "tokens": 32768, "batch": 7, "utilization": 0.9})
    assert plain.argv == ("mlx_lm.server", "--model", "Qwen/Qwen3-8B", "--decode-concurrency", "7")
    assert any("no flag of its own sets a share of 0.9" in n for n in plain.notes)


def test_the_written_line_reads_back_to_the_same_settings() -> None:
    server = READERS[0]
    answer = {"model": "Qwen/Qwen3-8B", "tokens": 8192, "batch": 21, "utilization": 1.0,
              "prompt_cache_bytes": 8 * 10**9, "max_tokens": 512}  # fmt: skip
    written = server.write(answer)
    back = read(*written.argv).settings
    # tokens is no flag of mlx_lm.server: the user gives it before '--' (the written note says so).
    assert {**back, "tokens": 8192} == {k: v for k, v in {**answer, "engine": "mlx"}.items() if k != "utilization"}


ANSWER = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


@pytest.mark.parametrize(
    "flags",
    [
        ("qwen3-8b", "--tokens", "32k"),
        ("qwen3-8b", "--tokens", "8k", "--prompt-cache-bytes", "8GB", "--kv-bits", "8"),
        ("llama-3.1-8b", "--tokens", "16k", "--prefill-step-size", "512"),
    ],
)
def test_fit_writes_the_server_line_that_gives_its_answer_back(run_cli, flags: tuple[str, ...]) -> None:
    asked = run_cli("fit", *flags, "--gpu", "m4-max-64gb", "--engine", "mlx", "--json")
    assert asked.exit_code == 0, asked.stderr
    command = asked.json()["command"]
    assert command["argv"][:2] == ["mlx_lm.server", "--model"]
    tokens = flags[flags.index("--tokens") + 1]
    again = run_cli("fit", "--gpu", "m4-max-64gb", "--tokens", tokens, "--json", "--", *command["argv"])
    assert again.exit_code == 0, again.stderr
    assert {k: again.json()[k] for k in ANSWER} == {k: asked.json()[k] for k in ANSWER}


# --- the tables against mlx-lm 0.32.2's own parsers ----------------------------------------------

_PARSERS = """
import argparse, json
from mlx_lm.generate import setup_arg_parser
from mlx_lm.utils import _parse_size
generate = sorted(s for a in setup_arg_parser()._actions for s in a.option_strings)
grabbed = {}
def grab(self, *args, **kwargs):
    grabbed["parser"] = self
    raise SystemExit
argparse.ArgumentParser.parse_args = grab
import mlx_lm.server
try:
    mlx_lm.server.main()
except SystemExit:
    pass
server = sorted(s for a in grabbed["parser"]._actions for s in a.option_strings)
sizes = {t: _parse_size(t) for t in ("70G", "8GB", "1.5gb", "512M", "123456")}
print(json.dumps({"generate": generate, "server": server, "sizes": sizes}))
"""


@needs_mlx
def test_the_tables_hold_every_flag_of_mlx_lms_own_parsers() -> None:
    import json

    assert PYTHON is not None
    out = subprocess.run([PYTHON, "-c", _PARSERS], capture_output=True, text=True, check=True, cwd=ROOT, timeout=120)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    server, generate = READERS
    for reader, name in ((server, "server"), (generate, "generate")):
        ours = {s for a in reader.args for s in a.spellings}
        assert ours == set(found[name]) - {"-h", "--help"}
    assert {t: parse_size(t) for t in found["sizes"]} == found["sizes"]
