"""``python -m sglang.launch_server`` / ``sglang serve`` read and written
(kvcalc.engines.sglang.commandline), against SGLang 0.5.23's own parser and real launch lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcalc.engines.commandline import Settings, read_command, writer
from kvcalc.engines.sglang.commandline import ARGS, READERS, human_readable_int
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error

FLAGS = Path(__file__).parents[2] / "fixtures" / "commandlines" / "sglang-0.5.23-server-args.txt"


def read(line: str) -> Any:
    return read_command([line], lambda path: "")


# --- the table is SGLang's parser -----------------------------------------------------------------


def test_the_table_holds_every_flag_of_sglangs_parser_and_no_other() -> None:
    # The fixture is SGLang 0.5.23's own parser, dumped (its header says how).
    lines = [line.split() for line in FLAGS.read_text().splitlines() if not line.startswith("#")]
    sglang = {s for line in lines for s in line}
    table: set[str] = set()
    for arg in ARGS:
        table.update(arg.spellings)
        if arg.negatable:  # argparse's BooleanOptionalAction spells its --no- form in option_strings
            table.update("--no-" + s[2:] for s in arg.spellings)
    assert table == sglang
    assert len(lines) == 531


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # srt/utils/common.py human_readable_int's docstring: 1k -> 1,000, 1M -> 1,000,000,
        # 25.6k -> 25,600, 1Ki -> 1,024, 1Mi -> 1,048,576; digits alone as int() reads them.
        ("1k", 1_000),
        ("1M", 1_000_000),
        ("25.6k", 25_600),
        ("1Ki", 1_024),
        ("32Ki", 32_768),
        ("1Mi", 1_048_576),
        ("131072", 131_072),
    ],
)
def test_human_readable_int_as_sglang_reads_it(text: str, value: int) -> None:
    assert human_readable_int(text) == value


def test_sglangs_suffixes_are_case_sensitive_and_iec_takes_no_fraction() -> None:
    with pytest.raises(ValueError):
        human_readable_int("32K")  # vLLM's binary K; SGLang: "Invalid integer value"
    with pytest.raises(UsageError):
        human_readable_int("1.5Ki")


# --- real launch lines give the answer of the kvcalc flags they stand for -------------------------

# (source URL, the line, kvcalc fit's flags for it, the flags the line warns about). The model of a
# line is replaced by a preset's Hub id (read offline as that preset) where kvcalc has no preset for
# it: the comment says which; every other word is as published.
LINES: list[tuple[str, str, list[str], list[str]]] = [
    (   # docs.sglang.io "Common launch commands" (Meta-Llama-3-8B-Instruct -> Llama-3.1-8B)
        "https://docs.sglang.io/advanced_features/server_arguments.html",
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp 2",
        ["llama-3.1-8b", "--tp", "2", "--tokens", "131072"], [],  # no --context-length: the model's own
    ),
    (   # SGLang's docs site for `sglang serve` (Llama-3.1-8B-Instruct -> Llama-3.1-8B)
        "https://mintlify.com/sgl-project/sglang/backend/launch-server",
        "sglang serve --model-path meta-llama/Llama-3.1-8B --host 0.0.0.0 --port 30000 --tp-size 2 "
        "--mem-fraction-static 0.8",
        ["llama-3.1-8b", "--tp", "2", "--utilization", "0.8", "--tokens", "131072"], [],
    ),
    (   # Agent-RL/ReCall#43 (Qwen2.5-1.5B-Instruct -> Qwen2.5-7B); --disable-overlap abbreviates
        # --disable-overlap-schedule, as SGLang's argparse allows
        "https://github.com/Agent-RL/ReCall/issues/43",
        "python3 -m sglang.launch_server --served-model-name ReSearch --model-path Qwen/Qwen2.5-7B --tp 4 "
        "--context-length 6000 --enable-metrics --dtype bfloat16 --host 127.0.0.1 --port 80 --trust-remote-code "
        "--disable-overlap --disable-radix-cache --disable-cuda-graph --mem-fraction-static 0.7",
        ["qwen2.5-7b", "--tp", "4", "--tokens", "6000", "--max-model-len", "6000", "--utilization", "0.7"],
        ["--disable-radix-cache"],
    ),
    (   # sgl-project/sglang#7227 (Qwen3-4B-FP8 -> Qwen3-8B)
        "https://github.com/sgl-project/sglang/issues/7227",
        "python -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 8000 --context-length 60000",
        ["qwen3-8b", "--tokens", "60000", "--max-model-len", "60000"], [],
    ),
    (   # deepseek-ai/DeepSeek-V3.2-Exp README, commit fd33dda (DeepSeek-V3.2-Exp -> DeepSeek-V3: kvcalc
        # does not weigh V3.2's indexer weights for attention-DP): --dp 8 --enable-dp-attention is 8
        # attention-DP groups of the 8 TP GPUs
        "https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp/commit/fd33dda13987c4ec2bd43d7d4318046a4f220ca9",
        "python -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --dp 8 --enable-dp-attention",
        ["deepseek-v3", "--tp", "8", "--dp-attention", "8", "--tokens", "163840"], ["--enable-dp-attention"],
    ),
    (   # sgl-project/sglang PR #21253 (/dockerx/raid/models/gpt-oss-120b/ -> openai/gpt-oss-120b):
        # --max-running-requests 128 is 128 requests resident at once
        "https://github.com/sgl-project/sglang/pull/21253",
        "SGLANG_USE_AITER=1 python3 -m sglang.launch_server --model-path openai/gpt-oss-120b --tp 8 "
        "--trust-remote-code --chunked-prefill-size 131072 --max-running-requests 128 --mem-fraction-static 0.85 "
        "--prefill-attention-backend aiter --decode-attention-backend aiter --page-size 64 --disable-radix-cache "
        "--kv-cache-dtype fp8_e4m3 --port 8000",
        ["gpt-oss-120b", "--tp", "8", "--batch", "128", "--utilization", "0.85", "--block-size", "64",
         "--kv-dtype", "fp8_e4m3", "--tokens", "131072"],
        ["SGLANG_USE_AITER", "--disable-radix-cache"],
    ),
    (   # sgl-project/sglang#11751 (unsloth/gpt-oss-120b -> openai/gpt-oss-120b)
        "https://github.com/sgl-project/sglang/issues/11751",
        "python3 -m sglang.launch_server --model-path openai/gpt-oss-120b --cpu-offload-gb 35 --host 0.0.0.0 "
        "--port 30000 --context-length 16384 --tp-size 2 --dtype auto --trust-remote-code --quantization mxfp4 "
        "--mem-fraction-static 0.9",
        ["gpt-oss-120b", "--tp", "2", "--tokens", "16384", "--max-model-len", "16384", "--utilization", "0.9"],
        ["--cpu-offload-gb 35", "--quantization mxfp4"],
    ),
    (   # sgl-project/sglang PR #36904 (ZhipuAI/GLM-5.3-Flash -> moonshotai/Kimi-K2-Instruct, an MLA
        # model kvcalc weighs for attention-DP); 256 requests, 32 in each of the 8 attention-DP groups
        "https://github.com/sgl-project/sglang/pull/36904",
        "sglang serve moonshotai/Kimi-K2-Instruct --tp-size 8 --data-parallel-size 8 --enable-dp-attention "
        "--expert-parallel-size 8 --quantization fp8 --disable-shared-experts-fusion --moe-runner-backend deep_gemm "
        "--dsa-prefill-backend tilelang --dsa-decode-backend tilelang --context-length 32768 "
        "--max-running-requests 256 --mem-fraction-static 0.80 --mm-enable-dp-encoder --kv-cache-dtype fp8_e4m3",
        ["kimi-k2", "--tp", "8", "--dp-attention", "8", "--tokens", "32768", "--max-model-len", "32768",
         "--batch", "256", "--utilization", "0.8", "--kv-dtype", "fp8_e4m3"],
        ["--quantization fp8", "--dsa-prefill-backend", "--dsa-decode-backend"],
    ),
]  # fmt: skip


def _answer(result: Any) -> dict[str, Any]:
    """fit's JSON but the warnings (the line's own are listed there too) and the command written."""
    assert result.exit_code == 0, result.stderr
    return {k: v for k, v in result.json().items() if k not in ("warnings", "command")}


@pytest.mark.parametrize(("url", "line", "flags", "warned"), LINES, ids=[u for u, *_ in LINES])
def test_a_real_launch_line_gives_fits_json_for_the_same_flags(
    run_cli, url: str, line: str, flags: list[str], warned: list[str]
) -> None:
    from_line = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", line)
    by_hand = run_cli("fit", *flags, "--engine", "sglang", "--gpu", "h100-sxm", "--json")
    assert _answer(from_line) == _answer(by_hand)
    warnings = [w for w in from_line.json()["warnings"] if w not in by_hand.json()["warnings"]]
    assert len(warnings) == len(warned), warnings
    for flag, warning in zip(warned, warnings, strict=True):
        assert flag in warning


# --- refusals, as SGLang refuses --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("sglang serve Qwen/Qwen3-8B --no-such-flag", "sglang serve: error: unrecognized arguments: --no-such-flag"),
        # 0.5.23 split --cuda-graph-max-bs (SemiAnalysisAI/InferenceX PR #865 still passes it): argparse
        # refuses the prefix of two flags.
        ("python -m sglang.launch_server --model-path Qwen/Qwen3-8B --cuda-graph-max-bs 64",
         "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
        # sgl-project/sglang#8833: `-dp 4`, one dash, is no flag of SGLang's.
        ("python3 -m sglang.launch_server --model openai/gpt-oss-120b --tp 2 -dp 4",
         "unrecognized arguments: -dp"),
        ("sglang serve Qwen/Qwen3-8B --context-length 32K", "argument --context-length: invalid value '32K'"),
        ("sglang serve Qwen/Qwen3-8B --kv-cache-dtype fp8", "argument --kv-cache-dtype: invalid value 'fp8'"),
        ("sglang serve Qwen/Qwen3-8B --kv-cache-dtype nvfp4", "kvcalc does not model SGLang's block-scaled"),
        ("sglang serve Qwen/Qwen3-8B --numa-node", "argument --numa-node: expected at least one argument"),
        ("sglang serve --model-type diffusion black-forest-labs/FLUX.1-dev", "serves a diffusion model"),
    ],
)  # fmt: skip
def test_a_line_sglang_refuses_is_refused(run_cli, line: str, error: str) -> None:
    assert_one_line_error(run_cli("estimate", "--", line), error)


# --- quiet, warned and interpreted flags -------------------------------------------------------------


def test_flags_that_do_not_touch_memory_pass_quietly() -> None:
    command = read("sglang serve Qwen/Qwen3-8B --host 0.0.0.0 --port 30000 --served-model-name q --log-level debug "
                   "--trust-remote-code --numa-node 0 1 --lora-target-modules --enable-tf32 "
                   "--no-enable-fused-qk-norm-rope --dist-init-addr=a:1 --model-checksum --model-type llm")  # fmt: skip
    assert command.warnings == ()
    # (no --context-length: the model's own, which the caller resolves)
    assert command.settings == {"model": "Qwen/Qwen3-8B", "engine": "sglang", "tokens_from_model": 1}


def test_flags_sglangs_default_share_is_derived_from_are_warned_only_without_mem_fraction_static() -> None:
    # memory_hook.py _handle_gpu_memory_settings: reserved = 1.5 x chunked_prefill_size + 2 x the
    # decode graphs' max_bs + ...; the share given on the line settles it.
    line = "sglang serve Qwen/Qwen3-8B --chunked-prefill-size 4096 --cuda-graph-max-bs-decode 32"
    (warning,) = read(line).warnings
    assert "--chunked-prefill-size, --cuda-graph-max-bs-decode" in warning
    assert "mem_fraction_static" in warning
    assert read(line + " --mem-fraction-static 0.8").warnings == ()
    # --max-prefill-tokens counts only with chunked prefill off (chunked_prefill_size <= 0).
    assert read("sglang serve Qwen/Qwen3-8B --max-prefill-tokens 8192").warnings == ()


def test_memory_env_vars_are_warned_and_other_sglang_vars_named() -> None:
    command = read("SGLANG_VLM_CACHE_SIZE_MB=200 SGLANG_FOO=1 sglang serve Qwen/Qwen3-8B")
    assert len(command.warnings) == 2
    assert "SGLANG_VLM_CACHE_SIZE_MB 200" in command.warnings[0]
    assert "SGLANG_FOO is no sglang serve variable" in command.warnings[1]


def test_float32_dtype_is_warned_and_16_bit_ones_are_not() -> None:
    assert "--dtype float32" in read("sglang serve Qwen/Qwen3-8B --dtype float32").warnings[0]
    assert read("sglang serve Qwen/Qwen3-8B --dtype half").warnings == ()


@pytest.mark.parametrize(
    ("flags", "page"),
    [
        # overrides.py _mla_backend_page_constraints: FlashMLA runs only 64-token pages; TRT-LLM MLA
        # 32 or 64 (another -> 64); TRT-LLM MHA 16, 32, 64 or 128 (SGLang's default 1 -> 64).
        ("--attention-backend flashmla", 64),
        ("--attention-backend flashmla --page-size 16", 64),
        ("--decode-attention-backend trtllm_mla --page-size 32", 32),
        ("--attention-backend trtllm_mla --page-size 16", 64),
        ("--prefill-attention-backend trtllm_mha", 64),
        ("--attention-backend trtllm_mha --page-size 128", 128),
        ("--attention-backend fa3 --page-size 16", 16),
    ],
)
def test_a_backend_moves_the_page_size_as_sglang_does(flags: str, page: int) -> None:
    assert read(f"sglang serve Qwen/Qwen3-8B {flags}").settings["block_size"] == page


def test_the_deprecated_dp_attention_spelling_is_attn_dp_size() -> None:
    # parallel_hook.py handle_deprecated_dp_attention: --dp-size N --enable-dp-attention ->
    # attn_dp_size N, dp_size 1; beside --attn-dp-size it adds nothing.
    old = read("sglang serve Qwen/Qwen3-8B --tp 4 --dp 4 --enable-dp-attention --mem-fraction-static 0.8").settings
    new = read("sglang serve Qwen/Qwen3-8B --tp 4 --attn-dp-size 4 --mem-fraction-static 0.8").settings
    assert old == new == {"model": "Qwen/Qwen3-8B", "tp": 4, "dp_attention": 4, "utilization": 0.8,
                          "engine": "sglang", "tokens_from_model": 1}  # fmt: skip


def test_max_running_requests_counts_each_replica_and_splits_between_attention_groups() -> None:
    # resolve_max_num_reqs: max(1, N // attn_dp_size) a group; each of --dp replicas runs N.
    # 2 replicas x 4 groups x (10 // 4 = 2) = 16 requests resident at once.
    line = "sglang serve Qwen/Qwen3-8B --tp 4 --attn-dp-size 4 --dp 2 --max-running-requests 10"
    assert read(line + " --mem-fraction-static 0.8").settings["batch"] == 2 * 4 * (10 // 4)


# --- written lines read back ------------------------------------------------------------------------

ANSWER = ("tokens", "max_model_len", "batch", "tp", "pp", "dp", "dp_attention", "utilization", "kv_dtype", "block_size")


@pytest.mark.parametrize(
    "settings",
    [
        {"model": "Qwen/Qwen3-8B", "tokens": 32768, "batch": 11, "utilization": 0.835},
        {"model": "Qwen/Qwen3-32B", "tokens": 8192, "batch": 52, "tp": 2, "utilization": 0.9, "kv_dtype": "fp8_e4m3",
         "block_size": 16},
        {"model": "deepseek-ai/DeepSeek-V3", "tokens": 65536, "batch": 96, "tp": 8, "dp_attention": 8,
         "utilization": 0.8, "kv_dtype": "bf16"},
        {"model": "Qwen/Qwen3-8B", "tokens": 4096, "batch": 40, "tp": 2, "dp": 2, "utilization": 0.85},
    ],
)  # fmt: skip
def test_the_written_line_reads_back_to_the_settings_it_was_written_for(settings: Settings) -> None:
    found = writer("sglang")
    assert found is READERS[0]
    written = found.write(settings)
    back = read_command(list(written.argv), lambda path: "").settings
    expected = {k: v for k, v in settings.items() if k in ANSWER}
    expected["max_model_len"] = settings["tokens"]  # --context-length: the request length
    assert {k: v for k, v in back.items() if k in ANSWER} == expected
    assert back["model"] == settings["model"]


def test_the_written_line_says_what_sglang_cannot() -> None:
    found = writer("sglang")
    assert found is not None
    fp8 = found.write({"model": "Qwen/Qwen3-8B", "tokens": 4096, "batch": 3, "utilization": 0.9, "kv_dtype": "fp8"})
    assert "--kv-cache-dtype fp8_e4m3" in fp8.text
    assert "fp8_e4m3" in fp8.notes[0]
    # Without the share on the line, --max-running-requests would lower SGLang's default CUDA-graph
    # batch and so raise its default mem_fraction_static: not written, and said.
    budget = found.write({"model": "Qwen/Qwen3-8B", "tokens": 4096, "batch": 3, "kv_budget": 2**30})
    assert "--max-running-requests" not in budget.text
    assert any("KV budget in bytes" in note for note in budget.notes)
    assert any("--max-running-requests would change" in note for note in budget.notes)


# What fit's answer is (as tests/cli/test_engine_line.py): the line written for it must give the
# same when read back; the max context is capped by the written --context-length.
FIT_ANSWER = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


@pytest.mark.parametrize(
    "flags",
    [
        ["qwen3-32b", "--tokens", "32k", "--tp", "2", "--kv-dtype", "fp8_e4m3", "--utilization", "0.9"],
        ["qwen3-8b", "--tokens", "8k", "--utilization", "0.85", "--block-size", "16"],
        # DeepSeek-V3's 671 GB of fp8 weights fit on 8 H200s (141 GB each), not on 8 H100s
        [
            "deepseek-v3",
            "--tokens",
            "16k",
            "--tp",
            "8",
            "--dp-attention",
            "8",
            "--utilization",
            "0.85",
            "--gpu",
            "h200",
        ],
    ],
)
def test_fit_writes_the_sglang_line_that_gives_its_answer_back(run_cli, flags: list[str]) -> None:
    gpu = [] if "--gpu" in flags else ["--gpu", "h100-sxm"]
    asked = run_cli("fit", *flags, *gpu, "--engine", "sglang", "--json")
    assert asked.exit_code == 0, asked.stderr
    argv = asked.json()["command"]["argv"]
    assert argv[:2] == ["sglang", "serve"]
    again = run_cli("fit", "--gpu", flags[flags.index("--gpu") + 1] if not gpu else "h100-sxm", "--json", "--", *argv)
    assert again.exit_code == 0, again.stderr
    assert {k: again.json()[k] for k in FIT_ANSWER} == {k: asked.json()[k] for k in FIT_ANSWER}


def test_fit_writes_sglangs_own_default_share(run_cli) -> None:
    # The share the budget used is the one SGLang's runtime derived for the GPU (0.835 on an H100),
    # not its plain default (0.88): written so, the line reads back to the same budget.
    asked = run_cli("fit", "qwen3-8b", "--tokens", "32k", "--engine", "sglang", "--gpu", "h100-sxm", "--json")
    again = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", *asked.json()["command"]["argv"])
    assert {k: again.json()[k] for k in FIT_ANSWER} == {k: asked.json()[k] for k in FIT_ANSWER}


# --- --config: a YAML file of flags ---------------------------------------------------------------

# docs.sglang.io "Common launch commands" (https://docs.sglang.io/advanced_features/server_arguments.html):
# its config.yaml, word for word but the model (Meta-Llama-3-8B-Instruct -> Llama-3.1-8B).
DOCS_CONFIG = """\
model-path: meta-llama/Llama-3.1-8B
host: 0.0.0.0
port: 30000
tensor-parallel-size: 2
enable-metrics: true
log-requests: true
"""


def test_the_docs_config_file_reads_as_its_flags() -> None:
    command = read_command(["python", "-m", "sglang.launch_server", "--config", "config.yaml"],
                           lambda path: DOCS_CONFIG)  # fmt: skip
    assert command.settings == {"model": "meta-llama/Llama-3.1-8B", "tp": 2, "engine": "sglang", "tokens_from_model": 1}
    assert command.warnings == ()


def test_the_lines_own_flags_win_over_the_config_files() -> None:
    # ConfigArgumentMerger puts the file's flags first: CLI > config > defaults.
    words = ["sglang", "serve", "--tp", "4", "--config", "c.yml", "--mem-fraction-static", "0.8"]
    settings = read_command(words, lambda path: DOCS_CONFIG + "mem-fraction-static: 0.9\n").settings
    assert (settings["tp"], settings["utilization"]) == (4, 0.8)


@pytest.mark.parametrize(
    ("path", "text", "error"),
    [
        ("c.json", "{}", "Config file must be YAML format"),
        ("c.yaml", "- a\n- b\n", "must contain a dictionary at root level"),
        ("c.yaml", "no-such-flag: 1\n", "unrecognized arguments: --no-such-flag"),
        ("c.yaml", "enable-tf32-matmul: true\n", "Unsupported config option 'enable_tf32_matmul'"),
    ],
)
def test_a_config_file_sglang_refuses_is_refused(path: str, text: str, error: str) -> None:
    with pytest.raises(UsageError, match=error):
        read_command(["sglang", "serve", "Qwen/Qwen3-8B", "--config", path], lambda p: text)


def test_a_config_file_is_read_from_disk_by_the_cli(run_cli, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(DOCS_CONFIG)
    from_line = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", "sglang", "serve", "--config", str(config))
    by_hand = run_cli("fit", "llama-3.1-8b", "--tp", "2", "--tokens", "131072", "--engine", "sglang", "--gpu",
                      "h100-sxm", "--json")  # fmt: skip
    assert _answer(from_line) == _answer(by_hand)


def test_enable_mixed_chunk_is_read_as_the_engine_option() -> None:
    # server_args enable_mixed_chunk (a store_true switch, default False): simulate's scheduler reads it.
    assert read("sglang serve Qwen/Qwen3-8B --enable-mixed-chunk").settings["mixed_chunk"] is True
    assert "mixed_chunk" not in read("sglang serve Qwen/Qwen3-8B").settings


def test_recv_interval_is_read_as_an_engine_option_and_continuous_decode_steps_passes_quietly() -> None:
    # server_args scheduler_recv_interval (an int, default 1): simulate reads it. num_continuous_decode_steps
    # is declared in 0.5.23 (arg_groups/fields/schedule.py) and read by no code: it passes quietly.
    reading = read("sglang serve Qwen/Qwen3-8B --scheduler-recv-interval 30 --num-continuous-decode-steps 4")
    assert reading.settings["recv_interval"] == 30 and "continuous_decode_steps" not in reading.settings
    assert not any("continuous" in w for w in reading.warnings)
