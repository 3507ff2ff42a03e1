"""The standalone probe (kvcalc.engines.transformers.torch_probe) on requests and configs it cannot run
(one ``probe: error:`` line, never a traceback), and its no-op attention: the same cache bytes as
eager attention, in prefill passes linear in T."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")

import torch

from kvcalc.engines.transformers.torch_probe import ProbeError, probe_model, run
from tests.conftest import FIXTURES
from tests.helpers.paths import PRESETS, SRC

PROBE_FILE = SRC / "engines" / "transformers" / "torch_probe.py"
LLAMA = json.loads((FIXTURES / "Llama-3.1-8B.json").read_text())
# A small llama for fast runs: 8 query heads, 2 KV heads of 32 dims.
TINY = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 32, "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 256}  # fmt: skip


def model(config: Any, prompt: Any, decode: int = 1, **extra: Any) -> dict[str, Any]:
    return {"mode": "model", "config": config, "prompt_tokens": prompt, "decode_tokens": decode, "batch": 1,
            "device": "cpu", "dtype": "float32", **extra}  # fmt: skip


def raw(*tensors: Any, **extra: Any) -> dict[str, Any]:
    return {"mode": "raw", "tensors": list(tensors), "dtype": "uint8", "device": "cpu", **extra}


def run_file(tmp_path: Path, text: str | bytes, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "request.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    argv = [sys.executable, str(PROBE_FILE), *(args or (str(path),))]
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)


def assert_one_error_line(proc: subprocess.CompletedProcess[str], needle: str) -> str:
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("probe: error: "), proc.stderr
    assert needle in lines[0], lines[0]
    assert "\x1b" not in lines[0]
    return lines[0]


def dumps(request: Any) -> str:
    return json.dumps(request)


MALFORMED = [
    # (id, request text, what the one line must name)
    ("list", "[1, 2]", "JSON object, got a JSON list"),
    ("string", '"model"', "JSON object"),
    ("null", "null", "JSON object"),
    ("truncated", '{"mode": ', "not JSON"),
    ("empty", "", "not JSON"),
    ("digits", '{"prompt_tokens": ' + "9" * 5000 + "}", "not JSON"),
    ("nested", "[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("mode", dumps({"mode": "bogus"}), "'mode'"),
    ("mode-type", dumps({"mode": 3}), "'mode'"),
    ("no-config", dumps({"mode": "model", "prompt_tokens": 8}), "'config'"),
    ("config-list", dumps(model([1, 2], 8)), "'config'"),
    ("config-string", dumps(model("llama", 8)), "'config'"),
    ("no-prompt", dumps({"mode": "model", "config": TINY}), "'prompt_tokens'"),
    ("prompt-bool", dumps(model(TINY, True)), "'prompt_tokens'"),
    ("prompt-text", dumps(model(TINY, "10")), "'prompt_tokens'"),
    ("prompt-float", dumps(model(TINY, 10.5)), "'prompt_tokens'"),
    ("prompt-negative", dumps(model(TINY, -5)), "'prompt_tokens'"),
    ("prompt-zero", dumps(model(TINY, 0)), "'prompt_tokens'"),
    ("prompt-huge", dumps(model(TINY, 10**400)), "a number of about 401 digits"),
    ("prompt-inf", dumps(model(TINY, 8)).replace('"prompt_tokens": 8', '"prompt_tokens": 1e400'), "'prompt_tokens'"),
    ("prompt-over-cap", dumps(model(TINY, 2**24, 1)), "'prompt_tokens' + 'decode_tokens'"),
    ("decode-negative", dumps(model(TINY, 8, -1)), "'decode_tokens'"),
    ("batch-zero", dumps(model(TINY, 8, batch=0)), "'batch'"),
    ("batch-bool", dumps(model(TINY, 8, batch=False)), "'batch'"),
    ("batch-huge", dumps(model(TINY, 8, batch=2**20)), "'batch'"),
    ("device", dumps(model(TINY, 8, device="tpu")), "'device'"),
    ("device-type", dumps(model(TINY, 8, device=1)), "'device'"),
    ("dtype", dumps(model(TINY, 8, dtype="float64")), "'dtype'"),
    ("dtype-null", dumps(model(TINY, 8, dtype=None)), "'dtype'"),
    ("seed", dumps(model(TINY, 8, seed=-1)), "'seed'"),
    ("seed-text", dumps(model(TINY, 8, seed="x")), "'seed'"),
    ("max-bytes", dumps(model(TINY, 8, max_bytes=-1)), "'max_bytes'"),
    ("max-bytes-huge", dumps(model(TINY, 8, max_bytes=10**400)), "'max_bytes'"),
    ("expected-bytes", dumps(model(TINY, 8, expected_bytes=-1)), "'expected_bytes'"),
    ("attention", dumps(model(TINY, 8, attention="flash")), "'attention'"),
    ("chunk", dumps(model(TINY, 8, prefill_chunk=0)), "'prefill_chunk'"),
    ("no-tensors", dumps({"mode": "raw"}), "'tensors'"),
    ("tensors-object", dumps({"mode": "raw", "tensors": {}}), "'tensors'"),
    ("tensor-not-object", dumps(raw(1)), "'tensors[0]'"),
    ("shape-text", dumps(raw({"shape": "4"})), "'tensors[0].shape'"),
    ("shape-negative", dumps(raw({"shape": [4, -1]})), "'tensors[0].shape[1]'"),
    ("shape-float", dumps(raw({"shape": [2.5]})), "'tensors[0].shape[0]'"),
    ("shape-bool", dumps(raw({"shape": [True]})), "'tensors[0].shape[0]'"),
    ("shape-huge", dumps(raw({"shape": [10**400]})), "'tensors[0].shape[0]'"),
    ("shape-product", dumps(raw({"shape": [2**24, 2**25]})), "at most 2**48 per tensor"),
    ("shape-dims", dumps(raw({"shape": [1] * 9})), "'tensors[0].shape'"),
    ("count-negative", dumps(raw({"shape": [2**30], "count": -3})), "'tensors[0].count'"),
    ("count-text", dumps(raw({"shape": [4], "count": "3"})), "'tensors[0].count'"),
    ("count-huge", dumps(raw({"shape": [4], "count": 2**17})), "'tensors[0].count'"),
    ("count-total", dumps(raw(*[{"shape": [4], "count": 2**15}] * 3)), "tensors in all"),
    ("name", dumps(raw({"name": 5, "shape": [4]})), "'tensors[0].name'"),
    ("raw-dtype", dumps(raw({"shape": [4]}, dtype="int64")), "'dtype'"),
    ("raw-too-big", dumps(raw({"shape": [2**48], "count": 2**10})), "try smaller --tokens or --batch"),
]


@pytest.mark.parametrize(("text", "needle"), [case[1:] for case in MALFORMED], ids=[case[0] for case in MALFORMED])
def test_malformed_request_is_one_error_line(tmp_path: Path, text: str, needle: str) -> None:
    assert_one_error_line(run_file(tmp_path, text), needle)


def test_unreadable_request_is_one_error_line(tmp_path: Path) -> None:
    assert_one_error_line(run_file(tmp_path, "{}", str(tmp_path / "missing.json")), "cannot read the request")
    assert_one_error_line(run_file(tmp_path, b'{"mode": "\xff"}'), "cannot read the request")
    assert_one_error_line(run_file(tmp_path, "{}", "a.json", "b.json"), "usage")


def test_negative_count_is_refused_before_any_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the checks, -3 x 1 GiB made the guard's sum negative, and the loop then allocated anyway.
    def no_allocation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the probe allocated for a request it should refuse")

    monkeypatch.setattr(torch, "empty", no_allocation)
    with pytest.raises(ProbeError, match=r"'tensors\[1\]\.count' must be from 0 to 65,536, got -3"):
        run(raw({"shape": [16], "count": 1}, {"shape": [2**30], "count": -3}))


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"model_type": "vit"}, "no causal language model for model_type 'vit'"),
        ({"model_type": "clip"}, "no causal language model for model_type 'clip'"),
        # transformers registers BertLMHeadModel as a causal LM, but a BERT encoder keeps no cache.
        ({"model_type": "bert"}, "(model_type 'bert') returned no KV cache"),
        ({"model_type": "no-such-model"}, "knows no model_type 'no-such-model'"),
        ({"model_type": "\x1b[31mred"}, "knows no model_type '\\x1b[31mred'"),
        (
            {**TINY, "rope_scaling": {"rope_type": "bogus"}},
            "'bogus' (unknown value of config key rope_scaling.rope_type)",
        ),
        ({**TINY, "rope_scaling": {"type": "linear"}}, "cannot build a llama config"),
        ({**TINY, "hidden_act": "nope"}, "model: KeyError: 'nope' (unknown value of config key hidden_act)"),
        ({**TINY, "num_hidden_layers": "x"}, "field 'num_hidden_layers'"),
        ({**TINY, "num_hidden_layers": 10**9}, "num_hidden_layers must be from 1 to 65,536"),
        # One layer's q_proj alone: 256 wide x 8 heads x 2**24 x 4 B = 128 GiB, refused unallocated.
        ({**TINY, "head_dim": 2**24}, "the config's widths make even the one-layer model too large"),
    ],
    ids=[
        "vit",
        "clip",
        "bert",
        "unknown",
        "escape",
        "rope-type",
        "rope-factor",
        "hidden-act",
        "layers-text",
        "layers-huge",
        "widths-huge",
    ],
)
def test_config_transformers_cannot_run_is_one_line(config: dict[str, Any], needle: str) -> None:
    with pytest.raises(ProbeError) as caught:
        run(model(config, 8))
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and len(message) < 400, message
    assert needle in message, message


def test_config_error_in_the_standalone_file(tmp_path: Path) -> None:
    proc = run_file(tmp_path, dumps(model({**TINY, "hidden_act": "nope"}, 8)))
    assert_one_error_line(proc, "transformers failed building the model: KeyError: 'nope'")


def test_kvcalc_debug_keeps_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVCALC_DEBUG", "1")
    with pytest.raises(KeyError):
        run(model({**TINY, "hidden_act": "nope"}, 8))


def layers_of(result: dict[str, Any]) -> list[tuple[int, str, int, int, list[Any]]]:
    return [
        (la["index"], la["kind"], la["tensor_bytes"], la["storage_bytes"], la["tensors"]) for la in result["layers"]
    ]


MISTRAL_64 = {**json.loads((FIXTURES / "Mistral-7B-Instruct-v0.1.json").read_text()), "sliding_window": 64}


@pytest.mark.parametrize(
    ("config", "prompt", "chunk", "tensor_bytes"),
    [
        # GQA, fp32: 100 tokens x 8 KV heads x 128 x 2 (K, V) x 4 B = 819,200.
        (LLAMA, 99, None, 100 * 8 * 128 * 2 * 4),
        # Sliding window 64 crossed in passes of 50: transformers keeps W - 1 = 63 tokens,
        # 63 x 8 heads x 128 x 2 x 4 B = 516,096.
        (MISTRAL_64, 299, 50, 63 * 8 * 128 * 2 * 4),
        # MLA: the latent (512) and the rope key (64) per token, 100 x 576 x 4 B = 230,400.
        (json.loads((FIXTURES / "DeepSeek-V2-Lite.json").read_text()), 99, 40, 100 * (512 + 64) * 4),
    ],
    ids=["llama-gqa", "mistral-sliding", "deepseek-v2-mla"],
)
def test_noop_attention_caches_what_eager_caches(
    config: dict[str, Any], prompt: int, chunk: int | None, tensor_bytes: int
) -> None:
    noop = run(model(config, prompt, attention="noop", prefill_chunk=chunk))
    eager = run(model(config, prompt, attention="eager", prefill_chunk=chunk))
    assert noop["attention"] == "noop" and eager["attention"] == "eager"
    assert layers_of(noop) == layers_of(eager)
    assert [la["tensor_bytes"] for la in noop["layers"]] == [tensor_bytes]


def test_auto_attention_is_noop_where_transformers_allows_it() -> None:
    result = run(model(TINY, 8))
    assert result["attention"] == "noop" and result["prefill_chunk"] == 8


def test_falcon_runs_sdpa_and_caches_what_eager_caches() -> None:
    # FalconForCausalLM picks its attention class by name (no attention interface): its sdpa code
    # runs with torch's kernel returning zeros, and torch's own function is back afterwards.
    falcon = json.loads((FIXTURES / "falcon-7b-instruct.json").read_text())
    with pytest.raises(ProbeError, match="cannot run with noop attention"):
        run(model(falcon, 20, attention="noop"))
    real_sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa = run(model(falcon, 20, prefill_chunk=8))
    assert torch.nn.functional.scaled_dot_product_attention is real_sdpa
    eager = run(model(falcon, 20, attention="eager", prefill_chunk=8))
    assert sdpa["attention"] == "sdpa" and layers_of(sdpa) == layers_of(eager)
    # MQA, fp32: 21 tokens x 1 KV head x 64 x 2 x 4 B = 10,752.
    assert sdpa["layers"][0]["tensor_bytes"] == 21 * 64 * 2 * 4 == 10_752


def test_falcon_new_decoder_architecture_caches_every_query_head() -> None:
    # Falcon-40B: 8 KV heads, but transformers expands K/V to all 128 query heads before caching,
    # bf16: 21 tokens x 128 heads x 64 x 2 x 2 B = 688,128, with sdpa as with eager.
    falcon = yaml.safe_load((PRESETS / "falcon-40b.yaml").read_text())["config"]
    sdpa = run(model(falcon, 20, dtype="bfloat16", prefill_chunk=8))
    eager = run(model(falcon, 20, dtype="bfloat16", attention="eager", prefill_chunk=8))
    assert layers_of(sdpa) == layers_of(eager)
    assert sdpa["layers"][0]["tensor_bytes"] == 21 * 128 * 64 * 2 * 2 == 688_128


def test_prefill_passes_are_linear_in_tokens() -> None:
    # 8,192 prompt tokens in fixed passes of 2,048: 4 forward calls. Eager attention at this length
    # would take passes of 32 MiB / (8 heads x 8,193 x 4 B) = 128 tokens, 64 calls, each over all T.
    calls: list[tuple[str, int, int]] = []
    result = probe_model(model(TINY, 8192), progress=lambda *call: calls.append(call))
    prefill = [done for stage, done, _total in calls if stage == "prefill"]
    assert result["prefill_chunk"] == 2048
    assert len(prefill) == result["prefill_passes"] <= math.ceil(8192 / result["prefill_chunk"]) == 4
    # 8,193 tokens x 2 KV heads x 32 x 2 x 4 B = 4,194,816 bytes in each shrunk layer.
    assert [la["tensor_bytes"] for la in result["layers"]] == [8193 * 2 * 32 * 2 * 4] == [4_194_816]


def test_progress_reports_each_pass_and_step() -> None:
    calls: list[tuple[str, int, int]] = []
    run(model(TINY, 10, 2, prefill_chunk=4), progress=lambda *call: calls.append(call))
    assert calls == [("prefill", 4, 10), ("prefill", 8, 10), ("prefill", 10, 10), ("decode", 1, 2), ("decode", 2, 2)]


def test_notes_are_plain_text() -> None:
    result = run(model(TINY, 8, dtype="float16"))
    assert result["dtype"] == "bfloat16" and result["notes"]
    assert all(note.isprintable() for note in result["notes"])


def test_hint_for_a_missing_torch_works_from_a_checkout(tmp_path: Path) -> None:
    code = f"import sys; sys.modules['torch'] = None; sys.argv = ['probe.py', {str(tmp_path / 'r.json')!r}]\n"
    (tmp_path / "r.json").write_text(dumps(model(TINY, 8)))
    code += f"exec(compile(open({str(PROBE_FILE)!r}).read(), 'probe.py', 'exec'))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    line = assert_one_error_line(proc, "pip install torch transformers")
    assert "'.[probe]'" in line and "kvcalc[probe]" not in line


# kvcalc probe, run for real on CPU: a shrunk transformers model's cache, measured tensor by
# tensor, must equal the estimate under transformers' semantics, byte for byte.


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
