"""kvcalc probe, run for real on CPU: a shrunk transformers model's cache, measured tensor by
tensor, must equal the estimate under transformers' semantics, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")

import torch

from tests.conftest import FIXTURES
from tests.helpers.paths import SRC

PROBE_FILE = SRC / "engines" / "transformers" / "torch_probe.py"


@pytest.mark.parametrize(
    ("model", "tokens"),
    [
        ("llama-3.1-8b", "300"),  # GQA
        ("falcon-7b", "300"),  # MQA (multi_query)
        ("mistral-7b-v0.1", "300"),  # sliding on every layer
        ("gemma-2-9b", "300"),  # alternating, implicit in the config
        ("gpt-oss-20b", "300"),  # alternating from layer_types, T past the 128-token window
        ("llama-4-scout", "300"),  # chunked + NoPE full layers (nested text_config)
        ("deepseek-v2-lite", "300"),  # MLA latent
        ("qwen3-next-80b-a3b", "300"),  # linear attention state + full layers
        ("jamba-v0.1", "300"),  # Mamba state + attention
        (str(FIXTURES / "llava-1.5-7b-hf.json"), "300"),  # sparse nested text_config
    ],
)
def test_measured_equals_estimate(run_cli, model: str, tokens: str) -> None:
    result = run_cli("probe", model, "--tokens", tokens, "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    assert data["match"] is True
    assert data["measured_bytes"] == data["estimated_bytes"] > 0
    for kind in data["kinds"]:
        assert kind["measured_bytes"] == kind["estimated_bytes"], kind


def test_llama_figure_by_hand(run_cli) -> None:
    # bf16, 300 tokens (298 prompt + 2 decoded): 300 x 32 layers x 2 x 8 heads x 128 x 2 B = 39,321,600.
    data = run_cli("probe", "llama-3.1-8b", "--tokens", "300", "--device", "cpu", "--json").json()
    assert data["measured_bytes"] == 300 * 131_072 == 39_321_600
    assert data["dtype"] == "bfloat16"


def test_encoder_decoder_self_and_cross_attention_by_hand(run_cli) -> None:
    # t5-small (fp32, 6 decoder layers, 8 heads x d_kv 64): 40 decoder tokens self-attention,
    # 2 x 6 x 40 x 512 x 4 B = 983,040; cross-attention over 100 encoder tokens 2,457,600.
    data = run_cli("probe", "t5-small", "--tokens", "40", "--encoder-tokens", "100", "--device", "cpu",
                   "--json").json()  # fmt: skip
    kinds = {k["kind"]: k for k in data["kinds"]}
    assert kinds["full_attention"]["measured_bytes"] == 2 * 6 * 40 * 512 * 4 == 983_040
    assert kinds["cross_attention"]["measured_bytes"] == 2 * 6 * 100 * 512 * 4 == 2_457_600
    assert data["match"] is True
    # Whisper large-v3 (fp16, 32 decoder layers, 20 heads x 64): cross-attention over its 1,500
    # encoder frames (max_source_positions), 2 x 32 x 1500 x 1280 x 2 B = 245,760,000.
    data = run_cli("probe", "whisper-large-v3", "--tokens", "40", "--device", "cpu", "--json").json()
    kinds = {k["kind"]: k for k in data["kinds"]}
    assert kinds["cross_attention"]["measured_bytes"] == 2 * 32 * 1500 * 1280 * 2 == 245_760_000
    assert kinds["full_attention"]["measured_bytes"] == 2 * 32 * 40 * 1280 * 2 == 6_553_600


def test_sliding_layers_hold_w_minus_1_in_a_w_buffer(run_cli) -> None:
    # gpt-oss-20b, fp16 is not given so the probe runs fp32 (the file names no dtype): a sliding
    # layer's view is 127 tokens x 8 heads x (64 + 64) x 4 B = 520,192 bytes, its storage 128 tokens.
    data = run_cli("probe", "gpt-oss-20b", "--tokens", "300", "--device", "cpu", "--json").json()
    sliding = next(layer for layer in data["shrunk_layers"] if layer["kind"] == "sliding_attention")
    assert sliding["tensor_bytes"] == 127 * 8 * 128 * 4 == 520_192
    assert sliding["storage_bytes"] == 128 * 8 * 128 * 4


def test_linear_attention_state_is_kernel_wide_and_fp32(run_cli) -> None:
    # Qwen3-Next in bf16: conv state (2 x 16 x 128 + 32 x 128) channels x kernel 4 x 2 B = 65,536;
    # recurrent state 32 x 128 x 128 x 4 B (float32) = 2,097,152 -> 2,162,688 per layer and sequence.
    data = run_cli("probe", "qwen3-next-80b-a3b", "--tokens", "64", "--device", "cpu", "--json").json()
    linear = next(layer for layer in data["shrunk_layers"] if layer["kind"] == "linear_attention")
    assert linear["tensor_bytes"] == 8192 * 4 * 2 + 32 * 128 * 128 * 4 == 2_162_688


def test_table_output_and_batch(run_cli) -> None:
    result = run_cli("probe", "falcon-7b", "--tokens", "100", "--batch", "3", "--device", "cpu")
    assert result.exit_code == 0, result.stderr
    # MQA: 3 x 100 x 32 layers x 2 x 64 x 2 B = 2,457,600.
    assert "2,457,600" in result.stdout and "result         match" in result.stdout
    assert "shrunk model" in result.stdout  # timings are labelled as the shrunk model's


def test_raw_probe_on_cpu(run_cli) -> None:
    # vLLM pages: 1,000 tokens -> 63 blocks of 16 = 1,008 slots x 131,072 B = 132,120,576.
    data = run_cli(
        "probe", "llama-3.1-8b", "--raw", "--engine", "vllm", "--tokens", "1000", "--device", "cpu", "--json"
    ).json()
    assert data["measured_bytes"] == data["estimated_bytes"] == 132_120_576
    assert data["tensors"] == 32


def test_standalone_file_reads_json_and_prints_json(tmp_path: Path) -> None:
    # The probe is one file with no kvcalc imports: run it by path, outside the package.
    request = {"mode": "model", "config": json.loads((FIXTURES / "Llama-3.1-8B.json").read_text()),
               "prompt_tokens": 10, "decode_tokens": 1, "batch": 1, "device": "cpu", "dtype": "float32"}  # fmt: skip
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    proc = subprocess.run([sys.executable, str(PROBE_FILE), str(path)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    # 11 tokens x 8 heads x 128 x 2 (K, V) x 4 B = 90,112 bytes in the one shrunk layer.
    assert result["layers"][0]["tensor_bytes"] == 11 * 8 * 128 * 2 * 4 == 90_112
    imports = [line for line in PROBE_FILE.read_text().splitlines() if line.lstrip().startswith(("import ", "from "))]
    assert not [line for line in imports if "kvcalc" in line or line.lstrip().startswith("from .")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("llama-3.1-8b", "--encoder-tokens", "100"), "has no cross-attention"),
        (("gemma-3n-e4b",), "num_kv_shared_layers"),
        (("llama-3.1-8b", "--kv-dtype", "fp8"), "fp32, bf16 or fp16"),
        (("llama-3.1-8b", "--tokens", "512", "--decode", "600"), "leaves no prompt"),
        (("llama-3.1-8b", "--tolerance", "x"), "--tolerance"),
        (("llama-3.1-8b", "--engine", "theoretical"), "raw probe only"),  # vllm, sglang, llama.cpp run the real engine
        (("llama-3.1-8b", "--raw", "--tokens", "1m", "--batch", "1k"), "try smaller --tokens or --batch"),
    ],
)
def test_probe_errors_are_one_line(run_cli, args: tuple[str, ...], message: str) -> None:
    result = run_cli("probe", *args, "--device", "cpu")
    assert result.exit_code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_model_and_raw_probe(run_cli) -> None:
    data = run_cli("probe", "llama-3.1-8b", "--tokens", "300", "--device", "cuda", "--json").json()
    assert data["match"] and data["device"].startswith("cuda")
    raw = run_cli("probe", "llama-3.1-8b", "--raw", "--tokens", "300", "--device", "cuda", "--json").json()
    assert raw["requested_bytes"] == raw["estimated_bytes"]
    assert raw["allocated_bytes"] >= raw["requested_bytes"]


def test_request_and_result_round_trip(run_cli, tmp_path: Path) -> None:
    # The GPU-box workflow: print the request, run probe.py elsewhere, compare its result here.
    request = run_cli("probe", "falcon-7b", "--tokens", "50", "--device", "cpu", "--print-request")
    assert request.exit_code == 0, request.stderr
    (tmp_path / "request.json").write_text(request.stdout)
    proc = subprocess.run([sys.executable, str(PROBE_FILE), str(tmp_path / "request.json")], capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "result.json").write_text(proc.stdout)
    data = run_cli(
        "probe", "falcon-7b", "--tokens", "50", "--from-result", str(tmp_path / "result.json"), "--json"
    ).json()
    # MQA, bf16: 50 x 32 layers x 2 x 64 x 2 B = 409,600.
    assert data["match"] and data["measured_bytes"] == 409_600


@pytest.mark.parametrize("missing", ["torch", "transformers"])
def test_missing_extra_is_a_one_line_hint(missing: str, tmp_path: Path) -> None:
    # A None entry in sys.modules makes `import torch` fail as if it were not installed.
    code = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "from kvcalc.cli import main\n"
        "main(['probe', 'falcon-7b', '--tokens', '20', '--device', 'cpu'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 1  # an environment problem (README "Exit status"), not a bad flag (2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'.[probe]'" in lines[0] and "kvcalc[probe]" not in lines[0], proc.stderr
