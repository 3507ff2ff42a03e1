"""``llama-server`` and ``llama-cli`` lines read as kvcalc's settings and written from fit's answer
(kvcalc.engines.llamacpp.commandline), against llama.cpp 0c1e570's common/arg.cpp."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvcalc.api import estimate
from kvcalc.engines.commandline import read_command, writer
from kvcalc.engines.llamacpp.commandline import FLAGS, READERS, stoi
from kvcalc.errors import UsageError
from tests.conftest import assert_one_line_error
from tests.helpers.gguf_files import attention, gguf_file

DOCS = "https://github.com/ggml-org/llama.cpp/blob/0c1e570"


def read(line: str, env: dict[str, str] | None = None):
    words = [*(f"{k}={v}" for k, v in (env or {}).items()), *line.split()]
    return read_command(words, lambda path: "")


# Real lines, each from the page cited; a model file the line names is replaced by the preset
# llama-3.1-8b (kvcalc reads it offline), the rest is as published. The kvcalc flags are what
# llama.cpp 0c1e570 does with the line, written by hand: -c is every slot's cells, so tokens = c / np;
# no -np is llama-server's 4 unified slots (tools/server/server.cpp), kvcalc's llama-server engine.
LINES = [
    # tools/server/README.md "Quick Start": 4 auto slots share -c 2048: 2048 / 4 = 512 tokens each.
    (f"{DOCS}/tools/server/README.md", "./llama-server -m MODEL -c 2048",
     "--engine llama-server --batch 4 --tokens 512"),
    # tools/server/README.md "Docker": -c 512 over 4 auto slots = 128 tokens; --n-gpu-layers 99.
    (f"{DOCS}/tools/server/README.md", "llama-server -m MODEL -c 512 --host 0.0.0.0 --port 8080 --n-gpu-layers 99",
     "--engine llama-server --batch 4 --tokens 128 --gpu-layers 99 --gpu h100-sxm"),
    # docs/build.md (Vulkan; its prompt cut to one word): llama-cli is one sequence; -ngl 99 is past the
    # 33 slots (32 layers + the output layer): every one on the GPU. No -c: the model's training
    # context, 131,072 (Llama 3.1's max_position_embeddings).
    (f"{DOCS}/docs/build.md", "llama-cli -m MODEL -p Hi -ngl 99",
     "--engine llama.cpp --batch 1 --tokens 131072 --gpu-layers 99 --gpu h100-sxm"),
    # ggml-org/llama.cpp PR 17767: "--ctx-size 16384 --parallel 4: each slot gets 4096 tokens".
    ("https://github.com/ggml-org/llama.cpp/pull/17767", "llama-server -m MODEL --ctx-size 16384 --parallel 4",
     "--engine llama.cpp --batch 4 --tokens 4096"),
    # ggml-org/llama.cpp issue 23652: "llama-server -m ... -c 1024 (-np omitted)": 4 slots, unified,
    # 1024 cells in all (the log's slots each see n_ctx = 1024, the unified stream): 256 tokens each.
    ("https://github.com/ggml-org/llama.cpp/issues/23652", "llama-server -m MODEL -c 1024",
     "--engine llama-server --batch 4 --tokens 256"),
    # ggml-org/llama.cpp issue 9016: --n-gpu-layers 99 -np 4 and no -c: the model's context, 131,072
    # cells over 4 slots = 32,768 tokens each.
    ("https://github.com/ggml-org/llama.cpp/issues/9016", "./llama-server --model MODEL --n-gpu-layers 99 -np 4",
     "--engine llama.cpp --batch 4 --tokens 32768 --gpu-layers 99 --gpu h100-sxm"),
    # ggml-org/llama.cpp issue 11681 (the model swapped for a non-MLA preset): --ctx-size 0 is the
    # model's context, --parallel 6 slots, K in q5_0, V in llama.cpp's default f16.
    ("https://github.com/ggml-org/llama.cpp/issues/11681",
     "./llama-server --model MODEL --alias full --host 0.0.0.0 --port 55055 --ctx-size 0 --cache-type-k q5_0 "
     "--slot-save-path saved_slots.kvc --threads 94 --threads-http 12 --parallel 6 --mirostat 2 "
     "--mirostat-ent 5.7 --mirostat-lr 0.14",
     # 131,072 // 6 = 21,845 tokens a slot: 6 x 21,845 = 131,070, padded to the same 131,072 cells
     "--engine llama.cpp --batch 6 --tokens 21845 --k-dtype q5_0"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "line", "flags"), LINES)
def test_a_published_line_gives_the_json_of_its_kvcalc_flags(run_cli, source: str, line: str, flags: str) -> None:
    # estimate has no --gpu-layers: a line with -ngl is asked of fit, on an H100.
    words = line.replace("MODEL", "llama-3.1-8b").split()
    command = ["fit", "--gpu", "h100-sxm"] if "--gpu-layers" in flags else ["estimate"]
    from_line = run_cli(*command, "--json", "--", *words)
    by_hand = run_cli(command[0], "llama-3.1-8b", "--json", *flags.split())
    assert from_line.exit_code == 0, from_line.stderr
    assert by_hand.exit_code == 0, by_hand.stderr
    assert from_line.json() == by_hand.json()


def test_the_docker_compose_environment_is_read(run_cli) -> None:
    # tools/server/README.md's docker compose example: LLAMA_ARG_CTX_SIZE 4096 over
    # LLAMA_ARG_N_PARALLEL 2 slots = 2048 tokens each; the metrics endpoint and port are quiet.
    env = {"LLAMA_ARG_MODEL": "llama-3.1-8b", "LLAMA_ARG_CTX_SIZE": "4096", "LLAMA_ARG_N_PARALLEL": "2",
           "LLAMA_ARG_ENDPOINT_METRICS": "1", "LLAMA_ARG_PORT": "8080"}  # fmt: skip
    line = run_cli("estimate", "--json", "--", *(f"{k}={v}" for k, v in env.items()), "llama-server")
    flags = run_cli("estimate", "llama-3.1-8b", "--json", "--engine", "llama.cpp", "--batch", "2", "--tokens", "2048")
    assert line.exit_code == 0, line.stderr
    assert line.json() == flags.json()


def test_fit_reads_a_quantized_cache_line_as_its_flags(run_cli) -> None:
    line = run_cli("fit", "--gpu", "h100-sxm", "--json", "--", "llama-server", "-m", "llama-3.1-8b", "-c", "32768",
                   "-np", "4", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on")  # fmt: skip
    flags = run_cli("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--json", "--engine", "llama.cpp", "--batch", "4",
                    "--tokens", "8192", "--kv-dtype", "q8_0")  # fmt: skip
    assert line.exit_code == 0, line.stderr
    assert line.json() == flags.json()


# Lines published in llama.cpp's own docs that its 0c1e570 parser refuses, with its words.
REFUSED = [
    # tools/server/README.md (router defaults): there is no -ctx (the context is -c, --ctx-size).
    (f"{DOCS}/tools/server/README.md", "llama-server -ctx 8192 -n 1024 -np 2", "error: invalid argument: -ctx"),
    # docs/function-calling.md: -fa takes on|off|auto since it became a value; "-hf" is read as it.
    (f"{DOCS}/docs/function-calling.md", "llama-server --jinja -fa -hf bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M",
     "error while handling argument \"-fa\": unknown value '-hf'"),
    # docs/build.md (Vulkan on Windows): llama-cli has no -cnv at 0c1e570.
    (f"{DOCS}/docs/build.md", "llama-cli -m MODEL -ngl 100 -c 16384 -t 10 -n -2 -cnv",
     "error: invalid argument: -cnv"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "line", "error"), REFUSED)
def test_a_line_llama_cpp_refuses_is_refused_as_it_says(run_cli, source: str, line: str, error: str) -> None:
    assert_one_line_error(run_cli("estimate", "--", *line.split()), error)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("llama-server -m m --mlock", "invalid argument: --mlock"),  # -lm/--load-mode replaced it
        ("llama-server -m m --no-mmap", "invalid argument: --no-mmap"),
        ("llama-server --ctx-size=4096", "invalid argument: --ctx-size=4096"),  # no --flag=value
        ("llama-server model.gguf", "invalid argument: model.gguf"),  # no positional words
        ("llama-server -c", 'argument "-c": expected value for argument'),
        ("llama-server -c lots", 'argument "-c": invalid value'),
        ("llama-server -np 0", "invalid value for n_parallel"),
        ("llama-server -ctk q3_k", "Unsupported cache type: q3_k"),
        ("llama-cli -kvu", "invalid argument: -kvu"),  # a server flag only
        ("llama-cli --port 8080", "invalid argument: --port"),
        # src/llama-context.cpp llama_init_from_model: 'quantized V cache requires flash_attn'.
        ("llama-server -ctv q4_0 -fa off", "quantized V cache requires flash_attn to be enabled"),
    ],
)
def test_what_llama_cpp_refuses_is_refused(line: str, error: str) -> None:
    with pytest.raises(UsageError, match=re.escape(error)):
        read(line)


def test_its_own_reading_of_words() -> None:
    # '_' in a '--' word reads as '-'; a value may start with '-'; a later word wins.
    got = read("llama-server --ctx_size 8192 -c 4096 -np 2 -ngl -1 --n_gpu_layers 12").settings
    assert (got["tokens"], got["batch"], got["gpu_layers"]) == (2048, 2, 12)
    # std::stoi: "32k" is 32, said in a note.
    command = read("llama-cli -c 32k")
    assert command.settings["tokens"] == 32
    assert any("reads -c 32k as 32" in note for note in command.notes)
    assert stoi(" -7x") == -7


def test_a_context_not_a_multiple_of_the_slots_pads_to_the_same_cells() -> None:
    # -c 1000 -np 3: llama.cpp pads n_ctx to 1024, then each of the 3 streams to pad(1024 / 3 = 341,
    # 256) = 512 cells (src/llama-context.cpp): 1536 cells. kvcalc reads 333 tokens a slot: 999
    # pads to the same 1024. Llama 3.1 8B: 32 layers x 8 KV heads x 128 x (K + V) x 2 B = 131,072 B
    # a cell, x 1536 = 201,326,592 B.
    command = read("llama-server -m llama-3.1-8b -c 1000 -np 3")
    assert command.settings["tokens"] == 333
    assert any("pads it to 1,024 cells" in note for note in command.notes)
    est = estimate("llama-3.1-8b", tokens=333, batch=3, engine="llama.cpp")
    assert est.total_bytes == 201_326_592


def test_llama_server_unified_slots_are_kvcalcs_llama_server_engine() -> None:
    auto = read("llama-server -m m -c 8192")
    assert (auto.settings["engine"], auto.settings["batch"], auto.settings["tokens"]) == ("llama-server", 4, 2048)
    unified = read("llama-server -m m -c 8192 -np 8 -kvu").settings
    assert (unified["engine"], unified["batch"], unified["tokens"]) == ("llama-server", 8, 1024)
    # -np -1 is auto, and auto is unified whatever -no-kvu says (tools/server/server.cpp).
    forced = read("llama-server -m m -c 8192 -np -1 -no-kvu")
    assert forced.settings["engine"] == "llama-server"
    assert any("whatever -no-kvu says" in note for note in forced.notes)
    # --kv-unified-per-slot without -c sizes the pool: 4 slots x 4096.
    assert read("llama-server -m m --kv-unified-per-slot 4096").settings["tokens"] == 4096


def test_the_models_context_is_not_guessed() -> None:
    command = read("llama-server -m m -np 2")
    assert "tokens" not in command.settings
    assert any("n_ctx_train" in note for note in command.notes)
    assert any("--fit (on by default)" in note for note in command.notes)


def test_the_environment_and_its_negations() -> None:
    # LLAMA_ARG_NO_X turns X off whatever its value (common_arg::get_value_from_env); a bool variable
    # is parse_bool_value; a flag's variable applies only when truthy; the words override them.
    assert read("llama-server -m m", {"LLAMA_ARG_NO_KV_OFFLOAD": "whatever"}).settings["no_kv_offload"] is True
    assert read("llama-server -m m", {"LLAMA_ARG_KV_OFFLOAD": "disabled"}).settings["no_kv_offload"] is True
    assert "no_kv_offload" not in read("llama-server -m m -kvo", {"LLAMA_ARG_KV_OFFLOAD": "0"}).settings
    assert "swa_full" not in read("llama-server -m m", {"LLAMA_ARG_SWA_FULL": "0"}).settings
    assert read("llama-server -m m", {"LLAMA_ARG_SWA_FULL": "on"}).settings["swa_full"] is True
    assert read("llama-server -m m -c 512", {"LLAMA_ARG_CTX_SIZE": "4096"}).settings["tokens"] == 128
    with pytest.raises(UsageError, match='environment variable "LLAMA_ARG_KV_OFFLOAD": invalid boolean value'):
        read("llama-server -m m", {"LLAMA_ARG_KV_OFFLOAD": "maybe"})
    assert any("LLAMA_ARG_NOPE is no" in w for w in read("llama-server -m m", {"LLAMA_ARG_NOPE": "1"}).warnings)


def test_cache_types_placement_and_knobs() -> None:
    got = read("llama-server -m m -c 4096 -np 1 -ctk q8_0 -ctv q4_0 -ts 3/1 -nkvo -ub 1024 -b 2048 --swa-full")
    assert got.settings == {"model": "m", "engine": "llama.cpp", "batch": 1, "tokens": 4096, "k_dtype": "q8_0",
                            "v_dtype": "q4_0", "tensor_split": "3,1", "no_kv_offload": True, "ubatch": 1024,
                            "swa_full": True}  # fmt: skip
    # -b 2048 is llama.cpp's default (common/common.h): no setting; -ngl all is kvcalc's default.
    assert "gpu_layers" not in read("llama-server -m m -ngl all").settings
    assert read("llama-server -m m -ngl auto").settings["gpu_layers"] == "auto"
    assert read("llama-cli -m m -ctk f32 -ctv f32").settings["kv_dtype"] == "fp32"


def test_a_hub_gguf_is_kvcalcs_repo_colon_file() -> None:
    # docs/function-calling.md: -hf REPO -hff FILE (the file overrides the quant tag).
    got = read("llama-server --jinja -fa on -hf bartowski/firefunction-v2-GGUF -hff firefunction-v2-IQ1_M.gguf")
    assert got.settings["model"] == "bartowski/firefunction-v2-GGUF:firefunction-v2-IQ1_M.gguf"
    tag = read("llama-server -hf ggml-org/gemma-3-4b-it-GGUF:Q4_K_M")
    assert tag.settings["model"] == "ggml-org/gemma-3-4b-it-GGUF"
    assert any("downloads the repo's Q4_K_M GGUF" in note for note in tag.notes)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        # docs/multimodal.md, docs/speculative.md, docs/multi-gpu.md lines.
        ("llama-server -m m --mmproj mmproj-gemma-3-4b-it-Q4_K_M.gguf", "--mmproj"),
        ("llama-server -m Qwen3-4B.gguf -md Qwen3-4B-eagle3.gguf --spec-type draft-eagle3", "-md"),
        ("llama-cli -m model.gguf -sm tensor -ctk f16 -ctv f16", "-sm tensor"),
        ("llama-server -m m -ctxcp 8", "-ctxcp 8"),
        ("llama-server -m m --cache-ram 16384", "--cache-ram 16384"),
        ("llama-server -m m -ncmoe 20", "-ncmoe 20"),
        ("llama-server -m m --lora a.gguf", "--lora"),
        ("llama-server -m m -fa off", "-fa off"),
        ("llama-server --gpt-oss-20b-default", "--gpt-oss-20b-default"),
    ],
)
def test_memory_kvcalc_does_not_model_is_named(line: str, named: str) -> None:
    warnings = read(line).warnings
    assert any(f" {named}" in w and "kvcalc does not model it" in w for w in warnings), warnings


def _sample(flag) -> str:
    """A value llama.cpp accepts for the flag."""
    by_key = {"k_dtype": "q8_0", "v_dtype": "f16", "flash_attn": "auto", "gpu_layers": "10", "tensor_split": "1",
              "split_mode": "layer", "fit": "on"}  # fmt: skip
    return by_key.get(flag.key, "1") if flag.kind in "iv2" else ""


@pytest.mark.parametrize("reader", [READERS[0], READERS[2]], ids=["llama-server", "llama-cli"])
def test_every_flag_of_the_table_is_read_and_quiet_ones_are_quiet(reader) -> None:
    # 254 of common/arg.cpp's options reach LLAMA_EXAMPLE_SERVER and 205 LLAMA_EXAMPLE_CLI at
    # 0c1e570 (add_opt keeps an option set for the program, or for COMMON and not excluded; -np is
    # declared twice, the server's under ex == LLAMA_EXAMPLE_SERVER, the other for the rest).
    letter = "S" if reader.program == "llama-server" else "C"
    flags = [f for f in FLAGS if letter in f.on]
    assert len(flags) == (254 if letter == "S" else 205)
    for flag in flags:
        for spelling in (*flag.spellings.split(), *flag.neg.split()):
            value = _sample(flag) if spelling in flag.spellings.split() else ""
            words = [spelling, *([value] * (2 if flag.kind == "2" else 1) if value else [])]
            command = reader.read(["-m", "m", "-c", "4096", *words], {}, lambda p: "")
            if flag.memory:
                assert command.warnings, spelling
            elif flag.key is None:
                assert command.warnings == (), spelling


def test_a_gguf_file_is_read_by_its_path(tmp_path: Path, run_cli) -> None:
    path = gguf_file(tmp_path / "tiny.gguf", "llama", attention(4, 2, 64, 2, context_length=4096))
    line = run_cli("estimate", "--json", "--", "llama-server", "-m", str(path), "-c", "1024", "-np", "2")
    flags = run_cli("estimate", str(path), "--json", "--engine", "llama.cpp", "--batch", "2", "--tokens", "512")
    assert line.exit_code == 0, line.stderr
    assert line.json() == flags.json()


# --- the line written for fit's answer -------------------------------------------------------------


def test_the_written_line_reads_back_to_the_same_settings() -> None:
    # kvcalc's llama-server at its 4 slots: no -np; -c = 8192 x 4.
    server = writer("llama-server")
    assert server is not None
    asked = {"model": "org/name:file.gguf", "tokens": 8192, "batch": 4, "kv_dtype": "q8_0", "ubatch": 1024}
    text = server.write(asked).text
    assert text == "llama-server -hf org/name -hff file.gguf -c 32768 -ctk q8_0 -ctv q8_0 -ub 1024"
    back = read(text).settings
    assert {k: back[k] for k in ("model", "tokens", "batch", "kv_dtype", "ubatch", "engine")} == {
        **asked, "engine": "llama-server"}  # fmt: skip
    # Another concurrency of kvcalc's llama-server: -np B -kvu, read back as the same engine.
    text = server.write({"model": "m.gguf", "tokens": 1000, "batch": 13}).text
    assert text == "llama-server -m m.gguf -c 13000 -np 13 -kvu"
    assert read(text).settings == {"model": "m.gguf", "engine": "llama-server", "batch": 13, "tokens": 1000}
    # llama.cpp's separate streams: -np B, the layer split and -nkvo.
    plain = writer("llama.cpp")
    assert plain is not None
    written = plain.write({"model": "m.gguf", "tokens": 4096, "batch": 3, "k_dtype": "q8_0", "gpu_layers": 20,
                           "tensor_split": (3.0, 1.0), "no_kv_offload": True, "tp": 2})  # fmt: skip
    assert written.text == "llama-server -m m.gguf -c 12288 -np 3 -ctk q8_0 -ngl 20 -ts 3,1 -nkvo"
    assert any("--tp 2" in note for note in written.notes)
    assert read(written.text).settings == {"model": "m.gguf", "engine": "llama.cpp", "batch": 3, "tokens": 4096,
                                           "k_dtype": "q8_0", "gpu_layers": 20, "tensor_split": "3,1",
                                           "no_kv_offload": True}  # fmt: skip


ANSWER = ("kv_budget_bytes", "tokens", "max_tokens", "max_concurrency", "fits", "engine", "tp", "pp", "dp")


@pytest.mark.parametrize("engine", ["llama-server", "llama.cpp"])
def test_fit_writes_the_llama_server_line_that_gives_its_answer_back(run_cli, engine: str) -> None:
    asked = run_cli("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--tokens", "16k", "--engine", engine,
                    "--kv-dtype", "q8_0", "--json")  # fmt: skip
    assert asked.exit_code == 0, asked.stderr
    command = asked.json()["command"]
    assert command["argv"][0] == "llama-server"
    again = run_cli("fit", "--gpu", "rtx-4090", "--json", "--", *command["argv"])
    assert again.exit_code == 0, again.stderr
    assert {k: again.json()[k] for k in ANSWER} == {k: asked.json()[k] for k in ANSWER}


def test_what_the_line_cannot_say_is_a_note() -> None:
    server = writer("llama-server")
    assert server is not None
    quiet = server.write({"model": "m.gguf", "tokens": 1024, "batch": 4, "utilization": 1.0})
    assert quiet.notes == ()
    share = server.write({"model": "m.gguf", "tokens": 1024, "batch": 4, "utilization": 0.9})
    assert any("no share of GPU memory" in note for note in share.notes)
    preset = server.write({"model": "meta-llama/Llama-3.1-8B", "tokens": 1024, "batch": 4})
    assert any("convert meta-llama/Llama-3.1-8B" in note for note in preset.notes)


def test_a_hub_repos_projector_is_said_unless_refused() -> None:
    # docs/multimodal.md: "llama-server -hf ggml-org/gemma-3-4b-it-GGUF" loads the repo's mmproj
    # too (--mmproj-auto, on by default); --no-mmproj turns it off.
    assert any("multimodal projector" in n for n in read("llama-server -hf ggml-org/gemma-3-4b-it-GGUF").notes)
    assert not any("projector" in n for n in read("llama-server -hf ggml-org/gemma-3-4b-it-GGUF --no-mmproj").notes)
