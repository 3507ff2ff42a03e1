"""Ollama's command lines (src/kvcalc/engines/ollama/commandline.py): real ``ollama serve``
environments, ``ollama run`` lines and Modelfiles from Ollama's docs and public issues give the
same --json as the kvcalc flags they stand for; fit's written line reads back to its answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvcalc.engines.commandline import Reading, read_command
from kvcalc.engines.ollama.commandline import READERS, flash_attention, read_modelfile
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error

FIXTURES = Path(__file__).parents[2] / "fixtures"

# (source, the line after '--', the kvcalc flags it stands for, the warnings it gives). The model
# is given before '--': ollama serve names none.
SERVE_LINES = [
    # docs/faq.mdx v0.32.15 "How can I specify the context window size?"
    ("docs/faq.mdx", "OLLAMA_CONTEXT_LENGTH=8192 ollama serve", ["--tokens", "8192"], ()),
    # https://github.com/ollama/ollama/issues/9246: num_ctx 4096 x OLLAMA_NUM_PARALLEL=4 = 16384 tokens of cache
    ("issue 9246", "OLLAMA_NUM_PARALLEL=4 OLLAMA_CONTEXT_LENGTH=4096 ollama serve",
     ["--batch", "4", "--tokens", "4096"], ()),
    # https://github.com/ollama/ollama/issues/17556 (Cloud Run env of an L4)
    ("issue 17556", "OLLAMA_NUM_PARALLEL=4 OLLAMA_KV_CACHE_TYPE=q8_0 OLLAMA_CONTEXT_LENGTH=8192 ollama serve",
     ["--batch", "4", "--kv-dtype", "q8_0", "--tokens", "8192"], ()),
    # https://github.com/ollama/ollama/issues/12927 (systemd Environment= lines)
    ("issue 12927", "OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_NUM_PARALLEL=4 OLLAMA_FLASH_ATTENTION=1 ollama serve",
     ["--tokens", "8192", "--batch", "4", "--flash-attention", "1"], ()),
    # https://github.com/ollama/ollama/issues/4569: a second model would share the GPU
    ("issue 4569", "OLLAMA_NUM_PARALLEL=4 OLLAMA_MAX_LOADED_MODELS=4 ollama serve", ["--batch", "4"],
     ("OLLAMA_MAX_LOADED_MODELS",)),
    # https://github.com/ionfury/homelab/pull/1355: OLLAMA_FLASH_ATTN is no Ollama variable (ignored)
    ("homelab PR 1355", "OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_FLASH_ATTN=1 OLLAMA_KV_CACHE_TYPE=q8_0 ollama serve",
     ["--tokens", "8192", "--kv-dtype", "q8_0"], ("OLLAMA_FLASH_ATTN is no",)),
]  # fmt: skip


def _answer(result) -> dict:
    assert result.exit_code == 0, result.stderr
    found = result.json()
    found.pop("warnings", None)
    return found


@pytest.mark.parametrize(("source", "line", "flags", "warned"), SERVE_LINES, ids=[c[0] for c in SERVE_LINES])
def test_real_serve_lines_give_the_same_json_as_kvcalcs_flags(run_cli, source, line, flags, warned) -> None:
    read = run_cli("fit", "qwen3-8b", "--gpu", "l4", "--json", "--", *line.split())
    given = run_cli("fit", "qwen3-8b", "--gpu", "l4", "--json", "--engine", "ollama", *flags)
    assert _answer(read) == _answer(given), source
    for name in warned:
        assert name in read.stderr, read.stderr
    if not warned:
        assert read.stderr == ""


def test_ollamas_boolean_spellings() -> None:
    # envconfig.BoolWithDefault: strconv.ParseBool's spellings, and any other value is true.
    assert [flash_attention(t) for t in ("1", "t", "TRUE", "True", "0", "f", "FALSE", "false", "yes")] == [
        1, 1, 1, 1, 0, 0, 0, 0, 1]  # fmt: skip


def _read(line: str, files: dict[str, str] | None = None):
    return read_command(line.split(), lambda path: (files or {})[path])


def test_values_are_read_as_envconfig_reads_them() -> None:
    # envconfig.Var strips spaces and quotes; an empty value is unset; OLLAMA_KV_CACHE_TYPE is lowercased.
    command = _read("OLLAMA_NUM_PARALLEL='2' OLLAMA_CONTEXT_LENGTH= OLLAMA_KV_CACHE_TYPE=Q4_0 ollama serve")
    assert command.settings == {"engine": "ollama", "batch": 2, "kv_dtype": "q4_0"}
    # Uint: not a number is logged and the default used; 0 parallel is one slot (sched.go max(n, 1)).
    command = _read("OLLAMA_NUM_PARALLEL=four ollama serve")
    assert "batch" not in command.settings and "OLLAMA_NUM_PARALLEL=four is no whole number" in command.warnings[0]
    assert _read("OLLAMA_NUM_PARALLEL=0 ollama serve").settings["batch"] == 1
    # OLLAMA_CONTEXT_LENGTH=0 is Ollama's own default (by VRAM tier): no --tokens.
    assert "tokens" not in _read("OLLAMA_CONTEXT_LENGTH=0 ollama serve").settings
    assert _read("OLLAMA_FLASH_ATTENTION=yes ollama start").settings["flash_attention"] == 1


def test_memory_variables_are_named_and_the_rest_quiet() -> None:
    command = _read("OLLAMA_GPU_OVERHEAD=1073741824 OLLAMA_SCHED_SPREAD=1 OLLAMA_HOST=0.0.0.0 OLLAMA_KEEP_ALIVE=-1 "
                    "OLLAMA_MODELS=/m CUDA_VISIBLE_DEVICES=0,1 ollama serve")  # fmt: skip
    assert len(command.warnings) == 2
    assert "OLLAMA_GPU_OVERHEAD" in command.warnings[0] and "OLLAMA_SCHED_SPREAD" in command.warnings[1]


def test_every_envconfig_variable_is_in_the_table() -> None:
    # envconfig/config.go v0.32.15 AsMap's names, and UseAuth's OLLAMA_AUTH.
    names = str.split("OLLAMA_DEBUG OLLAMA_DEBUG_LOG_REQUESTS OLLAMA_GO_TEMPLATE OLLAMA_FLASH_ATTENTION "
             "OLLAMA_KV_CACHE_TYPE "
             "OLLAMA_GPU_OVERHEAD OLLAMA_IGPU_ENABLE LLAMA_ARG_FIT LLAMA_ARG_FIT_TARGET OLLAMA_HOST OLLAMA_KEEP_ALIVE "
             "OLLAMA_LLM_LIBRARY OLLAMA_LOAD_TIMEOUT OLLAMA_MAX_LOADED_MODELS OLLAMA_MAX_TRANSFER_STREAMS "
             "OLLAMA_MAX_QUEUE OLLAMA_MODELS OLLAMA_NO_CLOUD OLLAMA_NOHISTORY OLLAMA_NOPRUNE OLLAMA_NUM_PARALLEL "
             "OLLAMA_ORIGINS OLLAMA_SCHED_SPREAD OLLAMA_CONTEXT_LENGTH OLLAMA_EDITOR OLLAMA_REMOTES OLLAMA_AUTH "
             "CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES GGML_VK_VISIBLE_DEVICES "
             "GPU_DEVICE_ORDINAL HSA_OVERRIDE_GFX_VERSION OLLAMA_VULKAN")  # fmt: skip
    serve = READERS[0]
    assert {s for a in serve.env for s in a.spellings} >= set(names)


def test_ollama_serve_takes_no_flags() -> None:
    with pytest.raises(UsageError, match="unrecognized arguments: --port"):
        _read("ollama serve --port 8080")


def test_ollama_run_reads_the_model_name_as_a_note(run_cli) -> None:
    # docs/faq.mdx and https://github.com/ollama/ollama/issues/4569: `ollama run` with a prompt and flags.
    command = _read("ollama run llama3.2 --verbose --truncate=false --think why is the sky blue")
    assert "model" not in command.settings
    assert "llama3.2 is an Ollama model name kvcalc cannot open" in command.notes[0]
    # The server's variables given to a client reach no server.
    command = _read("OLLAMA_NUM_PARALLEL=4 ollama run llama3.2")
    assert "batch" not in command.settings and "passes it to no server" in command.warnings[0]
    result = run_cli("estimate", "llama-3.2-1b", "--json", "--", "ollama", "run", "llama3.2", "--verbose")
    assert _answer(result) == _answer(run_cli("estimate", "llama-3.2-1b", "--json", "--engine", "ollama"))
    with pytest.raises(UsageError, match="unrecognized arguments: --num-ctx"):
        _read("ollama run llama3.2 --num-ctx 8192")


# docs/modelfile.mdx v0.32.15 "Basic Modelfile" (the mario example), FROM a local model folder.
MARIO = """FROM ./qwen3
# sets the temperature to 1 [higher is more creative, lower is more coherent]
PARAMETER temperature 1
# sets the context window size to 4096, this controls how many tokens the LLM can use as context
PARAMETER num_ctx 4096

# sets a custom system message to specify the behavior of the chat assistant
SYSTEM You are Mario from super mario bros, acting as an assistant.
"""
# https://github.com/ollama/ollama/issues/12927 (sqlcoder), FROM an absolute path, with a multi-line
# TEMPLATE from docs/modelfile.mdx's `ollama show --modelfile` example.
SQLCODER = '''FROM {model}
TEMPLATE """{{{{ if .System }}}}<|start_header_id|>system<|end_header_id|>

{{{{ .System }}}}<|eot_id|>{{{{ end }}}}"""
PARAMETER stop "<|eot_id|>"
PARAMETER num_thread 8
PARAMETER num_ctx 4096
PARAMETER top_k 10
PARAMETER top_p 0.3
'''


def _model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "qwen3"
    folder.mkdir()
    shutil.copy(FIXTURES / "Qwen3-8B.json", folder / "config.json")
    return folder


@pytest.mark.parametrize("text", [MARIO, SQLCODER], ids=["modelfile.mdx mario", "issue 12927"])
def test_a_modelfile_gives_the_same_json_as_kvcalcs_flags(run_cli, tmp_path, text) -> None:
    folder = _model_folder(tmp_path)
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(text.format(model=folder))
    read = run_cli("estimate", "--json", "--", "ollama", "create", "sql2", "-f", str(modelfile))
    given = run_cli("estimate", str(folder), "--json", "--engine", "ollama", "--tokens", "4096")
    assert _answer(read) == _answer(given)


def test_a_modelfile_from_an_ollama_name_says_what_kvcalc_needs() -> None:
    command = _read("ollama create mario -f Modelfile", {"Modelfile": "FROM llama3.2\nPARAMETER num_ctx 8192\n"})
    assert command.settings == {"engine": "ollama", "tokens": 8192}
    assert "llama3.2 is an Ollama model name" in command.notes[0]
    # -f defaults to ./Modelfile (cmd/cmd.go getModelfileName); FROM relative to the Modelfile's folder.
    command = _read("ollama create mario", {"Modelfile": "FROM ./m.gguf\n"})
    assert command.settings["model"] == "m.gguf"
    command = _read("ollama create mario --file=/x/Modelfile", {"/x/Modelfile": "from ../m.gguf\n"})
    assert command.settings["model"] == "/m.gguf"


def test_modelfile_memory_parameters_are_named() -> None:
    text = "FROM ./m.gguf\nPARAMETER num_gpu 20\nPARAMETER num_batch 1024\nADAPTER ./lora.gguf\nPARAMETER seed 42\n"
    command = _read("ollama create m -q q4_K_M", {"Modelfile": text})
    said = " | ".join(command.warnings)
    for name in ("-q q4_K_M", "num_gpu 20", "num_batch 1024", "ADAPTER ./lora.gguf"):
        assert name in said, said
    assert "seed" not in said and len(command.warnings) == 4
    # docs/modelfile.mdx: draft_num_predict 0 turns speculative drafting off; more drafts with a cache of its own.
    drafting = _read("ollama create m", {"Modelfile": "FROM x\nPARAMETER draft_num_predict 4\n"}).warnings
    assert "draft_num_predict 4: speculative drafting" in drafting[0]
    assert _read("ollama create m", {"Modelfile": "FROM x\nPARAMETER draft_num_predict 0\n"}).warnings == ()


def test_modelfile_errors_are_ollamas() -> None:
    reading = Reading("ollama create")
    with pytest.raises(UsageError, match="unknown parameter 'num_parallel'"):
        read_modelfile("FROM x\nPARAMETER num_parallel 4\n", "Modelfile", reading)
    with pytest.raises(UsageError, match=r"\(line 2\): command must be one of"):
        read_modelfile("FROM x\nCONTEXT 4\n", "Modelfile", reading)
    with pytest.raises(UsageError, match="no FROM line"):
        read_modelfile("PARAMETER num_ctx 4\n", "Modelfile", reading)
    with pytest.raises(UsageError, match=r"invalid int value \[4k\]"):
        read_modelfile("FROM x\nPARAMETER num_ctx 4k\n", "Modelfile", reading)
    # parser.go deprecatedParameters: Ollama warns and ignores them.
    settings = read_modelfile("FROM x\nPARAMETER f16_kv true\n", "Modelfile", reading)
    assert "tokens" not in settings and "f16_kv is deprecated" in reading.notes[-1]


def test_an_unknown_ollama_variable_is_a_warning_not_an_error(run_cli) -> None:
    result = run_cli("estimate", "qwen3-8b", "--", "OLLAMA_NEW_ENGINE=1", "ollama", "serve")
    assert result.exit_code == 0, result.stderr
    assert "OLLAMA_NEW_ENGINE is no ollama serve variable" in result.stderr


def test_the_written_line_says_what_ollama_can() -> None:
    serve = READERS[0]
    written = serve.write({"model": "Qwen/Qwen3-8B", "tokens": 8192, "batch": 3, "utilization": 1.0,
                           "kv_dtype": "q8_0"})  # fmt: skip
    assert written.text == ("OLLAMA_NUM_PARALLEL=3 OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_KV_CACHE_TYPE=q8_0 "
                            "OLLAMA_FLASH_ATTENTION=1 ollama serve")  # fmt: skip
    assert any("PARAMETER num_ctx 8192" in n for n in written.notes)
    again = _read(written.text)
    assert again.settings == {"engine": "ollama", "batch": 3, "tokens": 8192, "kv_dtype": "q8_0", "flash_attention": 1}
    # What Ollama cannot say is a note: a share of memory, a budget, K and V apart, the layout.
    notes = " | ".join(serve.write({"tokens": 1, "batch": 1, "utilization": 0.9, "kv_budget": 5, "tp": 2,
                                    "k_dtype": "q8_0", "v_dtype": "fp16"}).notes)  # fmt: skip
    for said in ("no share of GPU memory", "no KV cache budget", "one cache type for K and V", "tp 2"):
        assert said in notes, notes


ANSWER = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


@pytest.mark.parametrize(
    "flags",
    [["--gpu", "rtx-4090", "--kv-dtype", "q8_0"], ["--gpu", "l4", "--tokens", "8192"],
     ["--gpu", "h100-sxm", "--tokens", "16k", "--batch", "2", "--flash-attention", "1"]],
)  # fmt: skip
def test_fit_writes_the_ollama_line_that_gives_its_answer_back(run_cli, flags) -> None:
    asked = run_cli("fit", "qwen3-8b", "--engine", "ollama", "--json", *flags)
    assert asked.exit_code == 0, asked.stderr
    argv = asked.json()["command"]["argv"]
    assert argv[-2:] == ["ollama", "serve"]
    again = run_cli("fit", "qwen3-8b", "--gpu", flags[1], "--json", "--", *argv)
    assert again.exit_code == 0, again.stderr
    assert {k: again.json()[k] for k in ANSWER} == {k: asked.json()[k] for k in ANSWER}


def test_a_client_line_is_refused_before_its_model() -> None:
    with pytest.raises(UsageError, match="requires at least 1 arg"):
        _read("ollama run")
    with pytest.raises(UsageError, match="accepts 1 arg"):
        _read("ollama create", {"Modelfile": "FROM x\n"})


def test_the_cli_error_is_one_line(run_cli) -> None:
    result = run_cli("estimate", "qwen3-8b", "--", "OLLAMA_KV_CACHE_TYPE=q3_k", "ollama", "serve")
    assert_one_line_error(result, "OLLAMA_KV_CACHE_TYPE=q3_k")
