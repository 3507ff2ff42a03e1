"""An engine command line after ``--`` gives the answer of the kvcalc flags it stands for
(kvcalc.cli.engine_line)."""

from __future__ import annotations

from tests.conftest import assert_one_line_error


def test_a_vllm_serve_line_gives_fits_json_for_the_same_flags(run_cli) -> None:
    line = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", "vllm", "serve", "Qwen/Qwen3-32B", "--max-model-len",
                   "32768", "-tp", "2", "--gpu-memory-utilization", "0.95", "--kv-cache-dtype", "fp8")  # fmt: skip
    flags = run_cli("fit", "qwen3-32b", "--gpu", "h100-sxm", "--json", "--engine", "vllm", "--tokens", "32768",
                    "--max-model-len", "32768", "--tp", "2", "--utilization", "0.95", "--kv-dtype", "fp8")  # fmt: skip
    assert line.exit_code == 0, line.stderr
    assert line.json() == flags.json()
    assert line.stderr == ""  # under --json only warnings reach stderr, and this line has none


def test_the_reading_is_said_on_stderr(run_cli) -> None:
    result = run_cli("estimate", "--", "vllm", "serve", "Qwen/Qwen3-32B", "--max-model-len", "32K")
    assert result.exit_code == 0, result.stderr
    assert "read as kvcalc's preset qwen3-32b" in result.stderr
    assert "kvcalc estimate --tokens 32768 --engine vllm qwen3-32b" in result.stderr


def test_a_flag_given_twice_is_refused(run_cli) -> None:
    result = run_cli("estimate", "--tp", "4", "--", "vllm", "serve", "Qwen/Qwen3-32B", "-tp", "2")
    assert_one_line_error(result, "--tp is given both before '--' and by the vllm serve line")


def test_a_users_batch_wins_over_the_one_a_dp_line_is_read_as(run_cli) -> None:
    # vLLM's -dp 2 reads as --batch 2 (one request per replica: the reader's default, a soft
    # setting); the user's own --batch 16 takes its place instead of being refused as given twice.
    line = run_cli("fit", "--batch", "16", "--gpu", "h100-sxm", "--json", "--", "vllm", "serve", "Qwen/Qwen3-32B",
                   "--max-model-len", "8192", "-tp", "2", "-dp", "2")  # fmt: skip
    flags = run_cli("fit", "qwen3-32b", "--batch", "16", "--gpu", "h100-sxm", "--json", "--engine", "vllm", "--tokens",
                    "8192", "--max-model-len", "8192", "--tp", "2", "--dp", "2")  # fmt: skip
    assert line.exit_code == 0, line.stderr
    assert line.json() == flags.json()
    # A setting the line itself says (-tp) is still refused when given twice.
    twice = run_cli("fit", "--tp", "4", "--gpu", "h100-sxm", "--", "vllm", "serve", "Qwen/Qwen3-32B", "-tp", "2")
    assert_one_line_error(twice, "--tp is given both before '--' and by the vllm serve line")


def test_a_model_given_twice_must_agree(run_cli) -> None:
    result = run_cli("estimate", "qwen3-8b", "--", "vllm", "serve", "Qwen/Qwen3-32B")
    assert_one_line_error(result, "MODEL qwen3-8b and the vllm serve line's model differ")
    same = run_cli("estimate", "qwen3-32b", "--json", "--", "vllm", "serve", "Qwen/Qwen3-32B")
    assert same.exit_code == 0, same.stderr


def test_an_unknown_engine_flag_is_the_engines_error(run_cli) -> None:
    result = run_cli("estimate", "--", "vllm", "serve", "Qwen/Qwen3-32B", "--no-such-flag")
    assert_one_line_error(result, "vllm serve: error: unrecognized arguments: --no-such-flag")


def test_nothing_after_the_separator_is_an_error(run_cli) -> None:
    assert_one_line_error(run_cli("estimate", "qwen3-8b", "--"), "give the engine's command line after it")


# What fit's answer is: the line written for it must give the same when read back. (max context
# is not in it: the written --max-model-len is the request length asked, which caps it, as vLLM does.)
ANSWER = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


def test_fit_writes_the_vllm_line_that_gives_its_answer_back(run_cli) -> None:
    asked = run_cli("fit", "qwen3-32b", "--gpu", "h100-sxm", "--tokens", "32k", "--tp", "2", "--engine", "vllm",
                    "--kv-dtype", "fp8", "--json")  # fmt: skip
    assert asked.exit_code == 0, asked.stderr
    command = asked.json()["command"]
    # vLLM's own default share (0.92) is written out: the line says what the answer assumed.
    assert command["argv"][:3] == ["vllm", "serve", "Qwen/Qwen3-32B"]
    assert "--gpu-memory-utilization" in command["argv"]
    again = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", *command["argv"])
    assert again.exit_code == 0, again.stderr
    assert {k: again.json()[k] for k in ANSWER} == {k: asked.json()[k] for k in ANSWER}


def test_fit_writes_no_line_for_the_theoretical_engine(run_cli) -> None:
    result = run_cli("fit", "qwen3-32b", "--gpu", "h100-sxm", "--json")
    assert result.json()["command"] is None


def test_engine_before_the_separator_may_name_the_lines_release(run_cli) -> None:
    release = run_cli("estimate", "--engine", "vllm@0.11", "--json", "--", "vllm", "serve", "Qwen/Qwen3-32B")
    # no --max-model-len: vLLM serves the model's own context, 40,960 (max_position_embeddings)
    flags = run_cli("estimate", "qwen3-32b", "--engine", "vllm@0.11", "--tokens", "40960", "--json")
    assert release.json() == flags.json()
    other = run_cli("estimate", "--engine", "sglang", "--", "vllm", "serve", "Qwen/Qwen3-32B")
    assert_one_line_error(other, "--engine is given both before '--' and by the vllm serve line")


def test_an_engine_knob_idle_for_the_model_is_dropped_with_a_note(run_cli) -> None:
    # llama-server -ub sizes only sliding layers' cells; Llama 3.1 has none, so estimate (which
    # refuses kvcalc's own --ubatch there) passes the line's over, saying so.
    line = run_cli("estimate", "llama-3.1-8b", "--json", "--", "llama-server", "-m", "m.gguf", "-ub", "1024",
                   "-c", "8192")  # fmt: skip
    assert line.exit_code != 0  # MODEL and the line's -m differ
    line = run_cli("estimate", "--", "llama-server", "-m", "llama-3.1-8b", "-ub", "1024", "-c", "8192")
    assert line.exit_code == 0, line.stderr
    assert "-ub, --ubatch-size 1024 changes nothing for llama-3.1-8b's cache under llama-server" in line.stderr
    # fit keeps it: llama.cpp's compute buffer grows with n_ubatch
    fit = run_cli("fit", "--gpu", "h100", "--json", "--", "llama-server", "-m", "llama-3.1-8b", "-ub", "1024")
    flags = run_cli("fit", "llama-3.1-8b", "--gpu", "h100", "--json", "--engine", "llama-server", "--batch", "4",
                    "--ubatch", "1024")  # fmt: skip
    assert fit.json()["kv_budget_bytes"] == flags.json()["kv_budget_bytes"]


def test_fit_writes_no_line_when_nothing_fits(run_cli) -> None:
    # 8 x 80 GB of H100 cannot hold DeepSeek-V3's 671 GB of fp8 weights: vLLM would not start.
    result = run_cli("fit", "deepseek-v3", "--gpu", "h100-sxm", "--tp", "8", "--engine", "vllm", "--json")
    assert result.json()["fits"] is False
    assert result.json()["command"] is None


def test_probe_runs_the_engine_the_line_names(run_cli) -> None:
    # llama.cpp itself measures lfm2-1.2b's cache for -c 9000 -np 3: 3 slots of 3,000 tokens, the
    # same run as kvcalc's own flags for it (the real probe, here, in seconds).
    import pytest

    from tests.helpers.llama_cpp import needs_llama_cpp

    if needs_llama_cpp.args[0]:
        pytest.skip(needs_llama_cpp.kwargs["reason"])
    line = run_cli("probe", "lfm2-1.2b", "--json", "--", "llama-server", "-c", "9000", "-np", "3")
    flags = run_cli("probe", "lfm2-1.2b", "--engine", "llama.cpp", "--tokens", "3000", "--batch", "3", "--json")
    assert line.exit_code == 0, line.stderr
    assert line.json() == flags.json()
    assert line.json()["match"]


def test_a_line_that_leaves_the_context_to_the_model_reads_the_models_own(run_cli) -> None:
    # llama-server -c 0: n_ctx_train, Llama 3.1's 131,072 cells, over 4 auto slots = 32,768 each;
    # a --tokens beside the line wins (the reading is the line's default, not the user's).
    line = run_cli("estimate", "llama-3.1-8b", "--json", "--", "llama-server", "-c", "0")
    flags = run_cli("estimate", "llama-3.1-8b", "--json", "--engine", "llama-server", "--batch", "4", "--tokens",
                    "32768")  # fmt: skip
    assert line.json() == flags.json()
    mine = run_cli("estimate", "llama-3.1-8b", "--tokens", "1000", "--json", "--", "llama-server", "-c", "0")
    assert mine.json()["tokens"] == 1000
