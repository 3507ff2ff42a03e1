"""What an adversarial run found: exit statuses, interrupts, closed and narrow output streams,
unbounded inputs, tampered probe results and flags that were silently ignored."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_subprocess

# --- exit status -----------------------------------------------------------------------------------


def _interrupt(*_args: object, **_kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["estimate", "llama-3.1-8b"], 0),
        (["--help"], 0),
        ([], 0),  # no command: the help, as a question answered
        (["--version"], 0),
        (["estimate", "llama-3.1-8b", "--tokens", "lots"], 2),  # a bad value
        (["estimate", "llama-3.1-8b", "--no-such-flag"], 2),  # click's usage error
        (["no-such-command"], 2),
        (["estimate", "no-such-preset-xyz"], 1),  # nothing by that name
        (["estimate", "llama-3.1-8b", "--engine", "nope"], 2),
        (["fit", "llama-3.1-8b", "--kv-budget", "1GB", "--tokens", "8k", "--max-model-len", "4k"], 2),
        (["compare", "llama-3.1-8b", "--latent-dim", "-5"], 2),
    ],
)
def test_exit_status(run_cli, argv: list[str], code: int) -> None:
    assert run_cli(*argv).exit_code == code


@pytest.mark.parametrize(
    ("argv", "target"),
    [
        (["estimate", "llama-3.1-8b"], "kvcalc.api._estimate.compile_plan"),
        (["compare", "llama-3.1-8b"], "kvcalc.calc.compare.compare"),
        (["fit", "llama-3.1-8b", "--kv-budget", "10GB"], "kvcalc.calc.fit.fit"),
        (["presets"], "kvcalc.inputs.presets.load_presets"),
    ],
)
def test_ctrl_c_exits_130_saying_aborted(run_cli, monkeypatch, argv: list[str], target: str) -> None:
    # typer turns KeyboardInterrupt into Exit(130) and, outside standalone mode, *returns* 130;
    # kvcalc used to drop that return value and exit 0.
    monkeypatch.setattr(target, _interrupt)
    result = run_cli(*argv)
    assert result.exit_code == 130
    assert result.stderr.strip() == "kvcalc: aborted"
    assert result.stdout == ""


def test_real_sigint_exits_130(tmp_path: Path) -> None:
    # A real Ctrl-C at an arbitrary point of a run that takes a while: 130, one line, no traceback.
    lengths = tmp_path / "mix.csv"
    # Six million requests (48 MB) keep the streamed reader busy for seconds past start-up.
    with lengths.open("w") as mix:
        mix.write("prompt,output\n")
        for _ in range(6):
            mix.write("1000,24\n" * 1_000_000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvcalc", "estimate", "llama-3.1-8b", "--lengths", str(lengths), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # finished before the signal on a fast machine: nothing to judge
        pytest.skip("the run ended before the interrupt")
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "kvcalc: aborted"
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def llama_result() -> tuple[dict[str, Any], dict[str, Any]]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # The request as `kvcalc probe --print-request` writes it, built in-process.
    import contextlib
    import io

    from kvcalc.cli import main
    from kvcalc.engines.transformers.torch_probe import run

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), contextlib.suppress(SystemExit):
        main(["probe", "llama-3.2-1b", "--tokens", "40", "--device", "cpu", "--print-request"])
    request = json.loads(buffer.getvalue())
    return request, run(request)


def _from_result(run_cli, tmp_path: Path, result: Any, *extra: str) -> CliResult:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    return run_cli("probe", "llama-3.2-1b", "--tokens", "40", "--device", "cpu", "--from-result", str(path), *extra)


def test_probe_result_that_matches_exits_0(run_cli, tmp_path, llama_result) -> None:
    _request, result = llama_result
    assert _from_result(run_cli, tmp_path, result).exit_code == 0


def test_probe_mismatch_exits_1(run_cli, tmp_path, llama_result) -> None:
    # llama-3.2-1b in bf16: 16 layers x 2 x 8 KV heads x 64 dims x 2 B = 32,768 B per token, so 40
    # tokens are 1,310,720 B; one measured layer 4,096 B larger is 16 x 4,096 = 65,536 B more (+5%).
    _request, result = llama_result
    tampered = copy.deepcopy(result)
    tampered["layers"][0]["tensor_bytes"] += 4096
    found = _from_result(run_cli, tmp_path, tampered, "--json")
    assert found.exit_code == 1
    data = found.json()
    assert data["match"] is False
    assert data["estimated_bytes"] == 40 * 32_768 == 1_310_720
    assert data["measured_bytes"] - data["estimated_bytes"] == 16 * 4096
    # Within a tolerance that covers the difference, the same result passes.
    assert _from_result(run_cli, tmp_path, tampered, "--tolerance", "5%").exit_code == 0
    assert _from_result(run_cli, tmp_path, tampered, "--tolerance", "4.9%").exit_code == 1


# --- tampered or partial --from-result files ----------------------------------------------------------


def _drop(path: list[Any]):
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


def _set(path: list[Any], value: Any):
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


TAMPERED = {
    "no layers": (_drop(["layers"]), "layers"),
    "no layer_kinds": (_drop(["layer_kinds"]), "layer_kinds"),
    "no tensor_bytes": (_drop(["layers", 0, "tensor_bytes"]), "tensor_bytes"),
    "no storage_bytes": (_drop(["layers", 0, "storage_bytes"]), "storage_bytes"),
    "no peak": (_drop(["peak"]), "peak"),
    "no device": (_drop(["device"]), "device"),
    "no prefill_seconds": (_drop(["prefill_seconds"]), "prefill_seconds"),
    "layers not a list": (_set(["layers"], {"a": 1}), "layers"),
    "layer not an object": (_set(["layers", 0], 7), "layers[0]"),
    "tensor_bytes text": (_set(["layers", 0, "tensor_bytes"], "1000"), "tensor_bytes"),
    "tensor_bytes negative": (_set(["layers", 0, "tensor_bytes"], -5), "tensor_bytes"),
    "tensor_bytes 10**400": (_set(["layers", 0, "tensor_bytes"], 10**400), "tensor_bytes"),
    "tensor_bytes float": (_set(["layers", 0, "tensor_bytes"], 1.5), "tensor_bytes"),
    "tensor_bytes bool": (_set(["layers", 0, "tensor_bytes"], True), "tensor_bytes"),
    "unknown kind": (_set(["layer_kinds", 0], "warp_attention"), "warp_attention"),
    "kind not text": (_set(["layer_kinds", 0], 3), "layer_kinds[0]"),
    "peak a list": (_set(["peak"], [1, 2]), "peak"),
    "peak bytes text": (_set(["peak", "transient_bytes"], "x"), "transient_bytes"),
    "notes not text": (_set(["notes"], [1]), "notes"),
    "seconds negative": (_set(["prefill_seconds"], -1), "prefill_seconds"),
    "seconds infinite": (_set(["prefill_seconds"], float("inf")), "prefill_seconds"),
    "not an object": (None, "object"),
    # A result for another workload must not be compared with this one.
    "other batch": (_set(["batch"], 2), "batch"),
    "other prompt": (_set(["prompt_tokens"], 999), "prompt_tokens"),
    "other decode": (_set(["decode_tokens"], 5), "decode_tokens"),
    "other dtype": (_set(["dtype"], "float32"), "dtype"),
    "other model": (_set(["model_type"], "mistral"), "model_type"),
    "raw result for model": (_set(["mode"], "raw"), "raw"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_tampered_result_is_one_line(run_cli, tmp_path, llama_result, case: str) -> None:
    change, needle = TAMPERED[case]
    _request, result = llama_result
    if change is None:
        tampered: Any = [result]
    else:
        tampered = copy.deepcopy(result)
        change(tampered)
    path = tmp_path / "result.json"
    # allow_nan: Python writes Infinity, which its own reader accepts; a hostile file could too.
    path.write_text(json.dumps(tampered, allow_nan=True))
    found = run_cli("probe", "llama-3.2-1b", "--tokens", "40", "--device", "cpu", "--from-result", str(path))
    assert_one_line_error(found, needle)
    assert found.exit_code == 2


def test_escape_sequences_in_results_are_not_printed(run_cli, tmp_path, llama_result) -> None:
    _request, result = llama_result
    tampered = copy.deepcopy(result)
    tampered["notes"] = ["\x1b[2J\x1b[31mred\x07"]
    tampered["device"] = "cpu\x1b]0;title\x07"
    found = _from_result(run_cli, tmp_path, tampered)
    assert found.exit_code == 0
    assert "\x1b" not in found.stdout and "\x07" not in found.stdout
    assert "?[2J?[31mred?" in found.stdout


def test_raw_result_must_answer_the_request(run_cli, tmp_path) -> None:
    # llama-3.2-1b raw (theoretical): 16 layers of one [T, bytes/token] tensor each.
    path = tmp_path / "raw.json"
    path.write_text(json.dumps({"mode": "raw", "device": "cpu", "dtype": "uint8", "tensors": 3, "tensor_bytes": 1}))
    found = run_cli("probe", "llama-3.2-1b", "--raw", "--tokens", "40", "--from-result", str(path))
    assert_one_line_error(found, "tensors", "16")


# --- streams: encodings, closed and full outputs -----------------------------------------------------


@pytest.mark.parametrize("encoding", ["ascii", "cp1252", "cp437", "latin-1"])
@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "gpt-oss-20b", "--tokens", "32k", "--explain"],
        ["compare", "llama-3.1-8b", "--tokens", "4k,32k", "--chart"],
        ["presets"],
        ["fit", "llama-3.1-8b", "--gpu", "h100-sxm"],
    ],
)
def test_output_encodings_without_box_characters(encoding: str, argv: list[str]) -> None:
    result = run_subprocess(*argv, env={"PYTHONIOENCODING": encoding})
    assert result.exit_code == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.strip()
    if argv[0] == "estimate":
        # gpt-oss-20b's full layers at 32k: 12 x 2 x 32,768 x 8 x 64 x 2 B = 805,306,368 bytes.
        assert "805,306,368" in result.stdout
        assert "+====" in result.stdout or "┏" in result.stdout  # cp437 has heavy-less box chars only


def test_ascii_output_keeps_the_table_shape() -> None:
    result = run_subprocess("estimate", "llama-3.1-8b", "--tokens", "2048", env={"PYTHONIOENCODING": "ascii"})
    lines = result.stdout.splitlines()
    assert lines[1].startswith("+=") and lines[2].startswith("| layers")
    assert len({len(line) for line in lines[1:6]}) == 1  # every table line the same width
    assert "268,435,456" in result.stdout  # the seed's worked example


def _shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False, env={**os.environ}
    )


def test_closed_stdout_is_one_line() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc estimate llama-3.1-8b >&-")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "kvcalc: error: standard output is closed"


def test_full_stdout_is_one_line() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc estimate llama-3.1-8b --json >/dev/full")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines == ["kvcalc: error: cannot write to standard output: No space left on device"], proc.stderr


def test_closed_stderr_keeps_the_exit_status() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc estimate no-such-preset-xyz 2>&-")
    assert proc.returncode == 1
    assert proc.stdout == ""


def test_broken_pipe_is_quiet() -> None:
    proc = _shell(f"'{sys.executable}' -m kvcalc compare llama-3.1-8b --tokens 1k,2k,4k,8k,16k,32k | head -c 10")
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


# --- unbounded inputs and caps ---------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--lengths", "--from-result"])
def test_fifo_inputs_do_not_block(tmp_path: Path, flag: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    argv = ["estimate", "llama-3.1-8b", "--lengths", str(fifo)]
    if flag == "--from-result":
        argv = ["probe", "llama-3.1-8b", "--tokens", "40", "--from-result", str(fifo)]
    result = run_subprocess(*argv)  # run_subprocess stops a hang after 120 s with an error
    assert_one_line_error(result, "not a regular file")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_device_files_are_refused(run_cli, device: str) -> None:
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", device), "not a regular file")


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


def test_many_replicas_cost_two(run_cli) -> None:
    # 65,536 replicas (the cap) share 100,000 sequences: 34,464 replicas hold 2, 31,072 hold 1.
    # llama-3.1-8b at 10 tokens: 10 x 131,072 B = 1,310,720 B per sequence, so 100,000 of them.
    start = time.perf_counter()
    data = run_cli("estimate", "llama-3.1-8b", "--tokens", "10", "--batch", "100000", "--dp", "65536", "--json").json()
    assert data["total_bytes"] == 100_000 * 1_310_720
    assert time.perf_counter() - start < 30  # was one entry per replica; a bound, not a benchmark


# --- weight dtypes never become the KV dtype ----------------------------------------------------------


@pytest.mark.parametrize("weight_dtype", ["int8", "q4_0", "int4", "float8_e4m3fn", "auto"])
def test_weight_dtype_is_not_the_kv_dtype(run_cli, tmp_path: Path, weight_dtype: str) -> None:
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 2, "torch_dtype": weight_dtype}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = run_cli("estimate", str(path), "--tokens", "10", "--json").json()
    # 2 layers x 2 x 2 KV heads x 64 dims x 2 B (fp16 assumed) x 10 tokens = 10,240 B, no metadata.
    assert data["total_bytes"] == 10_240
    assert data["kv_dtype"] == "fp16"
    assert any(weight_dtype in note and "compute dtype" in note for note in data["notes"])


def test_weight_dtype_on_a_hybrid(run_cli, tmp_path: Path) -> None:
    # Jamba-like: a Mamba state used to be sized in the weight dtype and failed ("no whole bytes").
    from tests.conftest import FIXTURES

    config = json.loads((FIXTURES / "Qwen3-Next-80B-A3B.json").read_text())
    config["torch_dtype"] = "int8"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run_cli("estimate", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert result.json()["kv_dtype"] == "fp16"


# --- request mixes: odd digits, byte-order marks, long numbers -------------------------------------------


def test_bom_csv_is_read(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "excel.csv"
    path.write_bytes("\ufeffprompt,output\n100,28\n".encode())
    data = run_cli("estimate", "llama-3.1-8b", "--lengths", str(path), "--json").json()
    # One request of 128 tokens x 131,072 B/token = 16,777,216 B.
    assert data["total_bytes"] == 16_777_216


@pytest.mark.parametrize("value", ["²", "①", "٣", "9" * 5000, "1e5", "-3", "0x10"])
def test_lengths_odd_numbers_are_one_line(run_cli, tmp_path: Path, value: str) -> None:
    path = tmp_path / "mix.csv"
    path.write_text(f"prompt,output\n{value},2\n", encoding="utf-8")
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path)), "line 2")


def test_lengths_huge_json_number(run_cli, tmp_path: Path) -> None:
    path = tmp_path / "mix.jsonl"
    path.write_text('{"prompt": ' + "9" * 5000 + "}\n")
    assert_one_line_error(run_cli("estimate", "llama-3.1-8b", "--lengths", str(path)), "line 1")


# --- tolerance, long echoes ---------------------------------------------------------------------------


@pytest.mark.parametrize("tolerance", ["inf%", "1e400%", "nan%", "-1", "101%", "5 bytes", "1e3"])
def test_bad_tolerance_fails_before_the_probe_runs(run_cli, monkeypatch, tolerance: str) -> None:
    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the probe ran before --tolerance was checked")

    monkeypatch.setattr("kvcalc.engines.transformers.torch_probe.run", never)
    result = run_cli("probe", "llama-3.1-8b", "--tokens", "40", "--tolerance", tolerance)
    assert_one_line_error(result, "--tolerance")
    assert result.exit_code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["estimate", "llama-3.1-8b", "--tokens", "9" * 401],
        ["estimate", "llama-3.1-8b", "--kv-dtype", "x" * 1_000_000],
        ["estimate", "x" * 100_000],
    ],
)
def test_errors_do_not_echo_huge_input(run_cli, argv: list[str]) -> None:
    line = assert_one_line_error(run_cli(*argv))
    assert len(line) <= 420


# --- flags that used to be accepted and ignored ---------------------------------------------------------


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


# --- fit at the edges -----------------------------------------------------------------------------------


def test_fit_huge_budget_says_at_least(run_cli) -> None:
    args = ("fit", "llama-3.1-8b", "--kv-budget", "1000000TB", "--no-context-cap")
    data = run_cli(*args, "--json").json()
    # 10^18 bytes / 131,072 B per token = 7,629,394,531,250 tokens; the context search stops at 2^40.
    assert data["max_tokens"] == 10**18 // 131_072 == 7_629_394_531_250
    assert data["max_context"] == 2**40 and data["max_context_capped"] is True
    text = run_cli(*args).stdout
    assert "at least 1,099,511,627,776 tokens" in text
    assert "windowed" not in text


def test_fit_nothing_fits_says_so(run_cli) -> None:
    # 1,000,000 B / 131,072 B per token = 7 tokens: not one 4,096-token request.
    data = run_cli("fit", "llama-3.1-8b", "--kv-budget", "1MB", "--json").json()
    assert data["fits"] is False and data["max_concurrency"] == 0 and data["max_tokens"] == 7
    assert "nothing fits" in run_cli("fit", "llama-3.1-8b", "--kv-budget", "1MB").stdout


# --- completion and help ---------------------------------------------------------------------------------


def test_value_completion() -> None:
    from kvcalc.cli import _complete_dtype, _complete_engine, _complete_gpu

    assert _complete_engine("v") == ["vllm"]
    assert "llama.cpp" in _complete_engine("")
    assert "h100-sxm" in _complete_gpu("h1")
    assert _complete_dtype("q4") == ["q4_0", "q4_1"]
    assert _complete_dtype("fp16,fp8_e") == ["fp16,fp8_e4m3", "fp16,fp8_e5m2"]


def test_completion_lists_every_kv_dtype() -> None:
    # --help names the kinds (fp16, int4, q8_0, ...); completion lists every name.
    from kvcalc.cli.options import complete_dtype
    from kvcalc.dtypes import DTYPES, GROUP_QUANTIZED_BITS

    names = complete_dtype("")
    for name in [*DTYPES, *GROUP_QUANTIZED_BITS, "auto"]:
        assert name in names, name


# --- the KV dtype each engine picks when none is asked for (--kv-dtype auto) ---------------------------
# gemma-2-9b's config says float32: 42 layers (21 sliding W=4096, 21 full), 8 KV heads, head dim 256.
# At 4,096 tokens every layer keeps 4,096 slots under each engine below (vLLM: cdiv(4096, 16) = 256
# blocks, and a sliding layer's cdiv(min(4095 + 8192, 4096), 16) + 1 = 257 is capped at 256), so
# 16-bit K/V are 42 x 4,096 x 2 x 8 x 256 x 2 B = 1,409,286,144 B, and fp32 twice that.
GEMMA_16BIT = 42 * 4096 * 2 * 8 * 256 * 2


@pytest.mark.parametrize(
    ("engine", "dtype", "total"),
    [
        ("theoretical", "fp32", 2 * GEMMA_16BIT),  # what the checkpoint says
        # vllm/config/model.py _resolve_auto_dtype: float32 -> bf16 on compute capability 8.0+.
        ("vllm", "bf16", GEMMA_16BIT),
        # sglang/srt/configs/model_config.py _get_and_verify_dtype: gemma* float32 -> bf16.
        ("sglang", "bf16", GEMMA_16BIT),
        # llama.cpp common/common.h: cache_type_k/v = GGML_TYPE_F16 whatever the weights.
        ("llama.cpp", "fp16", GEMMA_16BIT),
    ],
)
def test_float32_checkpoint_kv_dtype_per_engine(run_cli, engine: str, dtype: str, total: int) -> None:
    extra = ["--kv-unified"] if engine == "llama.cpp" else []  # one stream: n_ctx = pad(4096, 256) = 4096
    data = run_cli("estimate", "gemma-2-9b", "--tokens", "4096", "--engine", engine, *extra, "--json").json()
    assert data["kv_dtype"] == dtype
    if engine != "llama.cpp":  # llama.cpp's sliding cells are pad(min(4096, 4096 + 512), 256) = 4096 too
        assert data["total_bytes"] == total
    auto = run_cli("estimate", "gemma-2-9b", "--tokens", "4096", "--engine", engine, *extra, "--kv-dtype", "auto",
                   "--json").json()  # fmt: skip
    assert auto["total_bytes"] == data["total_bytes"]


# mamba-2.8b (float32): 64 layers, d_inner 5,120, conv kernel 4, state size 16. Per layer and sequence
# the conv keeps 5,120 x 3 inputs and the SSM state 5,120 x 16 values.
MAMBA_CONV, MAMBA_SSM = 5120 * 3, 5120 * 16


@pytest.mark.parametrize(
    ("engine", "total"),
    [
        # vLLM: mamba_cache_dtype auto = the model's run dtype (bf16), SSM state the same.
        ("vllm", 64 * (MAMBA_CONV + MAMBA_SSM) * 2),
        # SGLang mamba2_state_dtype: conv bf16 (SGLANG_MAMBA_CONV_DTYPE), SSM float32.
        ("sglang", 64 * (MAMBA_CONV * 2 + MAMBA_SSM * 4)),
        # llama.cpp create_memory: recurrent r_l and s_l are GGML_TYPE_F32.
        ("llama.cpp", 64 * (MAMBA_CONV + MAMBA_SSM) * 4),
    ],
)
def test_mamba_state_dtype_per_engine(run_cli, engine: str, total: int) -> None:
    data = run_cli("estimate", "mamba-2.8b", "--tokens", "4096", "--engine", engine, "--json").json()
    assert data["total_bytes"] == total


def test_vllm_fit_uses_the_downcast_dtype(run_cli) -> None:
    # One vLLM page of gemma-2-9b in bf16: 16 tokens x 8 heads x (256 + 256) x 2 B = 131,072 B; 42
    # layers in two kinds of 21 share each block index, so a block is 21 x 131,072 B.
    data = run_cli("fit", "gemma-2-9b", "--engine", "vllm", "--kv-budget", "10GiB", "--json").json()
    assert data["vllm"]["page_bytes"] == 131_072
    assert data["vllm"]["num_blocks"] == 10 * 2**30 // 131_072 // 21


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["estimate", ""], "MODEL is empty"),
        (["estimate", "llama-3.1-8b", "--revision", "main"], "--revision applies to Hub repos"),
        (["fit", "llama-3.1-8b", "--gpu", "h100", "--utilization", "nan"], "--utilization"),
        (["fit", "llama-3.1-8b", "--gpu", "h100", "--utilization", "inf"], "--utilization"),
        (["probe", "llama-3.1-8b", "--tokens", "20", "--device", "tpu"], "--device must be auto, cpu or cuda"),
        (["estimate", "llama-3.1-8b", "--lengths", "/"], "--lengths"),
    ],
)
def test_more_adversarial_inputs(run_cli, argv: list[str], needle: str) -> None:
    assert_one_line_error(run_cli(*argv), needle)


def test_probe_progress_states_the_expected_time(capsys) -> None:
    # Passes of 2,048 tokens, each taking 5 s (a fake clock): after the second of 16 passes the
    # remaining 14 x 2,048 tokens take 14 x 5 = 70 s.
    from kvcalc.cli.probe import _ProbeProgress

    clock = iter(float(t) for t in range(0, 1000, 5))
    with _ProbeProgress(raw=False, device="cpu") as progress:
        progress._time = lambda: next(clock)
        for done in range(2048, 32768 + 1, 2048):
            progress("prefill", done, 32768)
        progress("decode", 1, 2)
    err = capsys.readouterr().err
    assert "kvcalc probe: building a shrunk model" in err
    assert "about 70 s more to prefill 32,768 tokens" in " ".join(err.split())
