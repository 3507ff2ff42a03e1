"""``vllm serve`` read as kvcalc's settings and written from fit's answer
(kvcalc.engines.vllm.commandline): real command lines from vLLM's docs and public issues give the
same ``--json`` as the kvcalc flags they stand for, written by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc.engines.commandline import read_command
from kvcalc.engines.vllm.commandline import ARGS, READERS, human_readable_int
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm"
SERVE = READERS[0]


def no_file(path: str) -> str:
    raise AssertionError(f"no file should be read, asked {path}")


def read(line: str, read_text=no_file):  # type: ignore[no-untyped-def]
    return read_command([line], read_text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # vllm/utils/argparse_utils.py human_readable_int's docstring (0.33.0): 1k -> 1,000,
        # 1K -> 1,024, 25.6k -> 25,600; digits alone are read as they are.
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


# Real lines (URL), the kvcalc flags they stand for (by hand), and the warnings they must carry.
# A local model path in the original is replaced by the Hub id of kvcalc's preset for that model
# ("<-" says from what); $port and the like by a number.
TABLE = [
    (  # https://github.com/EuroEval/EuroEval/issues/1120 (vLLM 0.10.1.1, api_server with --model)
        "python3 -m vllm.entrypoints.openai.api_server --model openai/gpt-oss-120b --host 0.0.0.0 --port 8000 "
        "--tensor-parallel-size 2 --gpu-memory-utilization 0.9",
        # no --max-model-len: vLLM serves the model's own context (max_position_embeddings 131,072)
        "gpt-oss-120b --tp 2 --utilization 0.9 --tokens 131072",
        [],
    ),
    (  # https://github.com/vllm-project/vllm/issues/33155 (max_model_len=$((85 * 1024)) = 87040;
        # --max_num_seqs with an underscore, -O3 with no space)
        "vllm serve openai/gpt-oss-120b --host 0.0.0.0 --port 8000 --gpu-memory-utilization 0.97 -O3 "
        "--enable-chunked-prefill --enable-prefix-caching --async-scheduling --max_num_seqs 100 "
        "--tool-call-parser openai --enable-auto-tool-choice --tensor-parallel-size 1 --max-model-len 87040",
        "gpt-oss-120b --utilization 0.97 --max-num-seqs 100 --tp 1 --tokens 87040 --max-model-len 87040",
        ["--optimization-level 3: CUDA graphs and compilation"],
    ),
    (  # https://github.com/vllm-project/vllm/issues/31480 (vLLM 0.13.0; <- /root/autodl-tmp/models/DeepSeek-V3.2):
        # expert parallelism over -tp alone splits the experts as kvcalc does: no warning
        "vllm serve deepseek-ai/DeepSeek-V3.2 --tensor-parallel-size 8 --gpu-memory-utilization 0.9 "
        "--max-model-len 512 --port 11434 --served-model-name DeepSeek-V3.2 --trust-remote-code "
        "--enable-expert-parallel",
        "deepseek-v3.2 --tp 8 --utilization 0.9 --tokens 512 --max-model-len 512",
        [],
    ),
    (  # https://github.com/vllm-project/vllm-ascend/issues/3278 (node0; <- /root/.cache/weights/dpsk-bf16,
        # a DeepSeek-V3 in bf16; $local_ip <- 172.22.0.218)
        "vllm serve deepseek-ai/DeepSeek-V3 --host 0.0.0.0 --port 8000 --data-parallel-size 2 "
        "--data-parallel-size-local 1 --data-parallel-address 172.22.0.218 --data-parallel-rpc-port 13389 "
        "--tensor-parallel-size 16 --seed 1024 --served-model-name deepseek_v3.2 --enable-expert-parallel "
        "--max-num-seqs 16 --max-model-len 4096 --max-num-batched-tokens 4096 --trust-remote-code "
        "--no-enable-prefix-caching --gpu-memory-utilization 0.9 "
        '--additional-config \'{"torchair_graph_config":{"enabled":true,"graph_batch_sizes":[16]}}\'',
        "deepseek-v3 --dp 2 --batch 2 --tp 16 --max-num-seqs 16 --tokens 4096 --max-model-len 4096 "
        "--max-batched-tokens 4096 --utilization 0.9",
        ["--enable-expert-parallel with -dp 2"],
    ),
    (  # https://docs.vllm.ai/en/latest/serving/data_parallel_deployment/ as the CLI guide writes it
        # (https://www.mintlify.com/vllm-project/vllm/serving/cli-usage; <- meta-llama/Llama-3.2-1B-Instruct)
        "vllm serve meta-llama/Llama-3.2-1B --data-parallel-size 4 --tensor-parallel-size 2",
        "llama-3.2-1b --dp 4 --batch 4 --tp 2 --tokens 131072",  # the model's own context
        [],
    ),
    (  # https://www.mintlify.com/vllm-project/vllm/serving/cli-usage "Model configuration"
        # (<- meta-llama/Llama-3.2-1B-Instruct): --dtype auto leaves the cache to the model's dtype
        "vllm serve meta-llama/Llama-3.2-1B --dtype auto --max-model-len 4096 --trust-remote-code",
        "llama-3.2-1b --tokens 4096 --max-model-len 4096",
        [],
    ),
    (  # https://github.com/vllm-project/vllm/issues/18244 (<- ~/models/Qwen3-14B-FP8, as Qwen3-8B; its
        # --device cuda is dropped: see test_a_removed_flag_is_vllms_own_error); --dtype bfloat16 sets the
        # auto KV cache's format
        "vllm serve Qwen/Qwen3-8B --served-model-name Qwen3-14B --api-key htxt-ai --disable-log-requests "
        "--gpu-memory-utilization 0.95 --host 0.0.0.0 --port 6006 --seed 3407 --max-model-len 32000 "
        "--dtype bfloat16 --trust-remote-code --max-num-seqs 256",
        "qwen3-8b --utilization 0.95 --tokens 32000 --max-model-len 32000 --kv-dtype bf16 --max-num-seqs 256",
        [],
    ),
    (  # https://github.com/QwenLM/Qwen3-VL/issues/1489 (<- Qwen/Qwen3-VL-235B-A22B-Instruct, as Qwen3-32B):
        # on-the-fly fp8 weights and the encoder's data-parallel mode are named
        "python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen3-32B "
        "--served-model-name Qwen/Qwen3-VL-235B-A22B-Instruct --tensor-parallel-size 8 --mm-encoder-tp-mode data "
        "--enable-expert-parallel --host 0.0.0.0 --port 22002 --dtype bfloat16 --gpu-memory-utilization 0.70 "
        "--quantization fp8 --distributed-executor-backend mp",
        "qwen3-32b --tp 8 --kv-dtype bf16 --utilization 0.7 --tokens 40960",  # the model's own context
        ["--mm-encoder-tp-mode data: encoder weights per GPU", "--quantization fp8: the weights are quantized"],
    ),
]


@pytest.mark.parametrize(("line", "flags", "warned"), TABLE, ids=[f"line{i}" for i in range(len(TABLE))])
def test_real_lines_give_the_json_of_their_kvcalc_flags(run_cli, line: str, flags: str, warned: list[str]) -> None:
    got = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", line)
    assert got.exit_code == 0, got.stderr
    hand = run_cli("fit", *flags.split(), "--gpu", "h100-sxm", "--engine", "vllm", "--json")
    assert hand.exit_code == 0, hand.stderr
    answer, expected = got.json(), hand.json()
    warnings, own = answer.pop("warnings"), expected.pop("warnings")
    extra = [w for w in warnings if w not in own]
    assert answer == expected
    assert len(extra) == len(warned), extra
    for part, warning in zip(warned, extra, strict=True):
        assert part in warning


def test_a_deepseek_v4_line_is_read_and_its_memory_flags_named() -> None:
    # https://github.com/vllm-project/vllm/issues/40778 (<- /data/pretrained/DeepSeek-V4-Flash): a dotted JSON
    # key with an underscore, a JSON flag, expert parallelism over -dp. (kvcalc's vLLM rules refuse
    # DeepSeek-V4's cache, so this line is checked as read, not through fit.)
    command = read("VLLM_LOGGING_LEVEL=DEBUG vllm serve deepseek-ai/DeepSeek-V4-Flash --served-model-name "
                   "DeepSeek-V4-Flash --trust-remote-code --kv-cache-dtype fp8 --block-size 256 "
                   "--enable-expert-parallel --data-parallel-size 8 --gpu-memory-utilization 0.85 --compilation-config "
                   "'{\"cudagraph_mode\":\"FULL_AND_PIECEWISE\", \"custom_ops\":[\"all\"]}' "
                   "--attention_config.use_fp4_indexer_cache=True --tokenizer-mode deepseek_v4 --tool-call-parser "
                   "deepseek_v4 --enable-auto-tool-choice --reasoning-parser deepseek_v4")  # fmt: skip
    assert command.settings == {"model": "deepseek-ai/DeepSeek-V4-Flash", "dp": 8, "utilization": 0.85,
                                "block_size": 256, "batch": 8, "kv_dtype": "fp8", "engine": "vllm",
                                "tokens_from_model": 1}  # fmt: skip
    named = ["--compilation-config", "--attention-config {\"use_fp4_indexer_cache\": \"True\"}",
             "--enable-expert-parallel with -dp 8"]  # fmt: skip
    assert [part in w for part, w in zip(named, command.warnings, strict=True)] == [True] * 3


def test_a_config_file_is_spliced_in_and_the_line_wins(run_cli) -> None:
    # serve_config.yaml: vLLM's documented example + max_model_len 16384 and utilization 0.85; the
    # line's --gpu-memory-utilization 0.9 comes after the file's and wins (command line > config file).
    config = str(FIXTURES / "serve_config.yaml")
    got = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", "vllm", "serve", "--config", config,
                  "--gpu-memory-utilization", "0.9")  # fmt: skip
    assert got.exit_code == 0, got.stderr
    hand = run_cli("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--tokens", "16384",
                   "--max-model-len", "16384", "--utilization", "0.9", "--json")  # fmt: skip
    assert got.json() == hand.json()


def test_a_config_file_read_through_the_callers_reader() -> None:
    files = {"c.yaml": "model: Qwen/Qwen3-8B\ntensor_parallel_size: 4\nenforce-eager: true\nkv-cache-dtype: fp8\n"}
    command = read("vllm serve --config c.yaml -tp 2", files.__getitem__)
    # The file's flags come first, so the line's -tp 2 wins.
    # (no --max-model-len: the model's own context, which the caller resolves)
    assert command.settings == {"model": "Qwen/Qwen3-8B", "tp": 2, "enforce_eager": True, "kv_dtype": "fp8",
                                "engine": "vllm", "tokens_from_model": 1}  # fmt: skip
    with pytest.raises(UsageError, match=r"Config file must be of a yaml/yml type\. json supplied"):
        read("vllm serve X --config c.json", files.__getitem__)
    # vLLM's docs: "vllm serve SOME_MODEL --config config.yaml, SOME_MODEL takes precedence over model
    # in config file".
    assert read("vllm serve Qwen/Qwen3-32B --config c.yaml", files.__getitem__).settings["model"] == "Qwen/Qwen3-32B"
    with pytest.raises(UsageError, match="No model specified"):
        read("vllm serve --config c.yaml", {"c.yaml": "port: 8000\n"}.__getitem__)


def test_the_vllm_cpu_build_is_told_by_its_environment(run_cli) -> None:
    # docs/getting_started/installation/cpu.md's example (VLLM_CPU_KVCACHE_SPACE=40: 40 GiB of KV
    # cache = 40 x 2^30 = 42,949,672,960 B; <- meta-llama/Llama-3.2-3B-Instruct).
    command = read("VLLM_CPU_KVCACHE_SPACE=40 VLLM_CPU_OMP_THREADS_BIND=0-29 vllm serve meta-llama/Llama-3.2-3B "
                   "--dtype=bfloat16")  # fmt: skip
    assert command.settings == {"model": "meta-llama/Llama-3.2-3B", "kv_dtype": "bf16", "engine": "vllm-cpu",
                                "kv_budget": 42_949_672_960, "tokens_from_model": 1}  # fmt: skip
    assert any("read as --engine vllm-cpu" in n for n in command.notes)
    got = run_cli("fit", "--json", "--", "VLLM_CPU_KVCACHE_SPACE=40", "vllm", "serve",
                  "meta-llama/Llama-3.2-3B", "--dtype=bfloat16")  # fmt: skip
    # no --max-model-len: the model's own context, 131,072 tokens (max_position_embeddings)
    hand = run_cli("fit", "llama-3.2-3b", "--engine", "vllm-cpu", "--kv-dtype", "bf16",
                   "--kv-budget", "42949672960B", "--tokens", "131072", "--json")  # fmt: skip
    assert got.exit_code == 0, got.stderr
    assert got.json() == hand.json()


def test_a_gpu_line_is_plain_vllm_and_an_empty_cpu_space_is_not_read() -> None:
    assert read("vllm serve Qwen/Qwen3-8B").settings["engine"] == "vllm"
    command = read("VLLM_CPU_KVCACHE_SPACE= vllm serve Qwen/Qwen3-8B")  # vllm/platforms/cpu.py skips ""
    assert command.settings["engine"] == "vllm-cpu"
    assert "kv_budget" not in command.settings


@pytest.mark.parametrize(
    ("line", "error"),
    [
        # https://github.com/vllm-project/vllm/issues/15469 (vLLM 0.7.2): --swap-space is not in 0.33.0's parser.
        (
            "vllm serve Qwen/Qwen3-8B --gpu-memory-utilization 0.9 --swap-space 16 --max-model-len 4096",
            "unrecognized arguments: --swap-space",
        ),
        # https://github.com/vllm-project/vllm/issues/18244's --device: argparse reads it as an abbreviation
        # of two 0.33.0 flags, and refuses it as ambiguous.
        (
            "vllm serve Qwen/Qwen3-8B --device cuda",
            "ambiguous option: --device could match --device-ids, --device-memory-utilization",
        ),
        # https://github.com/vllm-project/vllm/issues/12256 (vLLM 0.7): --enable-reasoning is not in 0.33.0's
        # parser.
        (
            "vllm serve Qwen/Qwen3-8B --enable-reasoning --reasoning-parser deepseek_r1",
            "unrecognized arguments: --enable-reasoning",
        ),
        # https://github.com/vllm-project/vllm/issues/49011: vLLM's nvfp4 cache has its own layout.
        ("vllm serve Qwen/Qwen3-8B --kv-cache-dtype nvfp4", "nvfp4 cache packs its own layout"),
        ("vllm serve Qwen/Qwen3-8B --max-model-len 1.5K", "binary suffix takes a whole number"),
    ],
)
def test_what_vllm_refuses_is_refused(line: str, error: str) -> None:
    with pytest.raises(UsageError, match=error):
        read(line)


def test_an_unknown_flag_on_the_cli_is_one_line(run_cli) -> None:
    result = run_cli("estimate", "--", "vllm", "serve", "Qwen/Qwen3-8B", "--swap-space", "16")
    assert_one_line_error(result, "vllm serve: error: unrecognized arguments: --swap-space")


def test_flexible_spellings_read_as_vllm_reads_them() -> None:
    command = read("vllm serve --model Qwen/Qwen3-8B --max_model_len=32k --tensor-parallel 2 "
                   "--kv_cache_memory_bytes 8G --served-model-name a b c --no-enforce-eager")  # fmt: skip
    # 32k = 32,000 (decimal suffix); 8G = 8 x 2^30 = 8,589,934,592; --tensor-parallel abbreviates
    # --tensor-parallel-size; --served-model-name takes three words (nargs="+").
    assert command.settings == {"model": "Qwen/Qwen3-8B", "tp": 2, "enforce_eager": False, "tokens": 32_000,
                                "max_model_len": 32_000, "kv_budget": 8_589_934_592, "engine": "vllm"}  # fmt: skip
    assert command.warnings == ()


def test_max_model_len_auto_leaves_the_context_to_fit() -> None:
    command = read("vllm serve Qwen/Qwen3-8B --max-model-len auto")
    assert "tokens" not in command.settings
    assert any("--max-model-len auto" in n for n in command.notes)


def test_quiet_flags_are_quiet_and_prefix_caching_changes_nothing() -> None:
    command = read("vllm serve Qwen/Qwen3-8B --enable-prefix-caching --disable-prefix-caching "
                   "--no-enable-prefix-caching --enable-chunked-prefill --disable-log-stats --uvicorn-log-level "
                   "debug --enable-custom-all-reduce --no-enable-lora --runner generate -q None -O2 "
                   "--cpu-offload-gb 0 --performance-mode balanced --kv-offloading-size None")  # fmt: skip
    assert command.warnings == ()
    assert command.settings == {"model": "Qwen/Qwen3-8B", "engine": "vllm", "tokens_from_model": 1}


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ("--cpu-offload-gb 10", "--cpu-offload-gb 10: weights offloaded to CPU memory"),
        ("--kv-offloading-size 64", "--kv-offloading-size 64: a CPU tier of KV cache"),
        ("--enable-lora --max-loras 4", "--enable-lora: LoRA slots' weights"),
        ("--lora-modules a=/x b=/y", "--lora-modules a=/x b=/y: LoRA slots' weights"),
        ("--limit-mm-per-prompt.image 0", '--limit-mm-per-prompt {"image": 0}: the encoder\'s profiled input'),
        ("--disable-sliding-window", "--disable-sliding-window: sliding-window layers cache every token"),
        ("--num-gpu-blocks-override 1000", "--num-gpu-blocks-override 1000: it sets the KV blocks outright"),
        (
            "--speculative-config.model org/draft --speculative-config.num_speculative_tokens 3",
            "speculative decoding (org/draft): the draft's weights and its KV-cache layers",
        ),
        ("--spec-method eagle3 --spec-model org/eagle", "speculative decoding (eagle3, org/eagle)"),
        ("--no-enable-chunked-prefill", "a prompt's whole length runs at once"),
        ("--dtype float32", "the weights are held in float32"),
    ],
)
def test_memory_flags_kvcalc_does_not_model_are_named(flags: str, named: str) -> None:
    warnings = read(f"vllm serve Qwen/Qwen3-8B {flags}").warnings
    assert any(named in w for w in warnings), warnings


def test_a_draftless_speculative_method_is_a_note() -> None:
    command = read("vllm serve Qwen/Qwen3-8B --speculative-config '{\"method\": \"ngram\", "
                   "\"num_speculative_tokens\": 5}'")  # fmt: skip
    assert command.warnings == ()
    assert command.notes == ("speculative decoding by ngram: no draft model, the KV pool is unchanged",)


def test_the_api_server_ignores_a_positional_model() -> None:
    # Only `vllm serve` copies model_tag to model (vllm/entrypoints/cli/serve.py 0.33.0).
    command = read("python -m vllm.entrypoints.openai.api_server Qwen/Qwen3-8B --model Qwen/Qwen3-32B")
    assert command.settings["model"] == "Qwen/Qwen3-32B"
    assert "a positional model is not used" in command.warnings[0]


def test_the_table_is_every_flag_of_vllm_0_33_once() -> None:
    # serve_flags_0.33.0.txt: the option strings vLLM 0.33.0's own parser registers, listed from it.
    lines = (FIXTURES / "serve_flags_0.33.0.txt").read_text().splitlines()
    vllms = {s for line in lines if not line.startswith("#") for s in line.split()}
    spellings = [s for arg in ARGS for s in arg.spellings]
    assert len(spellings) == len(set(spellings))
    assert set(spellings) == vllms


# fit's answer as settings (the lead's _command_line): the model as the engine finds it, tokens, the
# concurrency found, the layout, the share, the cache format, the knobs given.
ANSWER = {"model": "Qwen/Qwen3-32B", "tokens": 32768, "batch": 13, "tp": 2, "utilization": 0.92,
          "kv_dtype": "fp8", "max_num_seqs": 64}  # fmt: skip


def test_fits_answer_is_written_as_a_vllm_serve_line() -> None:
    written = SERVE.write(ANSWER)
    assert written.argv == ("vllm", "serve", "Qwen/Qwen3-32B", "--max-model-len", "32768", "-tp", "2",
                            "--gpu-memory-utilization", "0.92", "--kv-cache-dtype", "fp8",
                            "--max-num-seqs", "64")  # fmt: skip
    assert written.notes[0].startswith("vLLM fixes no concurrency: its KV pool holds 13 request(s) of 32,768 tokens")
    assert "--max-num-seqs caps it" in written.notes[0]


@pytest.mark.parametrize(
    "answer",
    [
        ANSWER,
        {
            "model": "openai/gpt-oss-120b",
            "tokens": 8192,
            "batch": 1,
            "kv_budget": 5_776_000_000,
            "kv_dtype": "bf16",
            "block_size": 32,
            "max_batched_tokens": 4096,
            "enforce_eager": True,
            "pp": 2,
            "dp": 2,
        },
    ],
)
def test_the_written_line_reads_back_to_the_same_settings(answer: dict[str, object]) -> None:
    written = SERVE.write(answer)  # type: ignore[arg-type]
    back = read_command(list(written.argv), no_file).settings
    expected = {k: v for k, v in answer.items() if k != "batch"}
    expected.update(max_model_len=answer["tokens"], engine="vllm")
    if int(answer.get("dp", 1)) > 1:  # type: ignore[call-overload]
        expected["batch"] = answer["dp"]  # a -dp line is read as one request per replica
    assert back == expected


def test_what_vllm_cannot_say_is_a_note() -> None:
    written = SERVE.write({"model": "m", "tokens": 4096, "batch": 2, "k_dtype": "fp8", "v_dtype": "bf16",
                           "max_model_len": 32768, "dp_attention": 2})  # fmt: skip
    assert written.argv == ("vllm", "serve", "m", "--max-model-len", "4096")
    assert any("one --kv-cache-dtype for K and V" in n for n in written.notes)
    assert any("to accept 32,768 tokens write --max-model-len 32768" in n for n in written.notes)
    assert any("no attention data-parallel groups" in n for n in written.notes)
    assert "vLLM has no q8_0 KV cache" in SERVE.write({"model": "m", "kv_dtype": "q8_0"}).notes[0]


# fit's answer: the line written for it must give the same when read back after "--" (max context
# aside: the written --max-model-len is the request length fit sized, which caps it, as in vLLM).
FIT = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


@pytest.mark.parametrize(
    "flags",
    [
        "qwen3-8b --gpu h100-sxm --tokens 16k --dp 2 --batch 2 --max-num-seqs 64 --enforce-eager --kv-dtype fp8",
        "gpt-oss-120b --tokens 128k --kv-budget 5.38GiB --block-size 32 --max-batched-tokens 4096",
        "llama-3.1-8b --gpu h100-sxm --tokens 8k --batch 4 --utilization 0.8 --tp 2 --kv-dtype bf16",
    ],
)
def test_fits_written_line_fed_back_gives_the_same_answer(run_cli, flags: str) -> None:
    asked = run_cli("fit", *flags.split(), "--engine", "vllm", "--json")
    assert asked.exit_code == 0, asked.stderr
    command = asked.json()["command"]
    assert command["argv"][:2] == ["vllm", "serve"]
    gpu = flags.split()[1:3] if "--gpu" in flags else []
    again = run_cli("fit", *gpu, "--json", "--", *command["argv"])
    assert again.exit_code == 0, again.stderr
    assert {k: again.json()[k] for k in FIT} == {k: asked.json()[k] for k in FIT}
    assert again.json()["command"]["argv"] == command["argv"]
