"""The recurrent (SSM / delta-rule) state's own dtype from the config: Qwen3.5's ``mamba_ssm_dtype``,
Nemotron-H's ``mamba_ssm_cache_dtype``, and how each engine honours it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.engines import make_engine
from kvcalc.errors import ConfigError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import StateCache
from tests.helpers.theoretical import estimate


def qwen35_27b(**text: Any) -> dict[str, Any]:
    """The cache geometry of Qwen/Qwen3.5-27B's config.json (text_config nested under a
    Qwen3_5ForConditionalGeneration wrapper), transcribed: no public copy of the file was found to
    vendor as a fixture."""
    body: dict[str, Any] = {
        "model_type": "qwen3_5_text", "dtype": "bfloat16", "hidden_size": 5120, "num_hidden_layers": 64,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 16, "full_attention_interval": 4,
        "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "attn_output_gate": True,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 48, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
    }  # fmt: skip
    body.update(text)
    body = {k: v for k, v in body.items() if v is not None}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": body}


# Qwen3.5-27B by hand (bf16):
#   full attention: 16 layers x 2 (K, V) x 4 KV heads x 256 x 2 B = 65,536 B per token.
#   Gated DeltaNet: conv over 2 x 16 x 128 + 48 x 128 = 10,240 channels, kernel - 1 = 3 kept:
#     30,720 elements x 2 B (model dtype) = 61,440 B; recurrent 48 x 128 x 128 = 786,432 elements
#     x 4 B (mamba_ssm_dtype float32) = 3,145,728 B; 3,207,168 B per layer, x 48 = 153,944,064 B.
PER_TOKEN = 65_536
FIXED = 48 * (30_720 * 2 + 786_432 * 4)


def _state_own_bytes(est: Estimate) -> int:
    """A sequence's state bytes as its parts are stored, before any engine page around them."""
    return sum(g.layers * sum(n * d.bytes_per_element for n, d in g.state_parts) for g in est.groups
               if g.state_parts and not g.padding)  # fmt: skip


@pytest.mark.parametrize("engine_name", ["theoretical", "vllm"])
def test_qwen35_27b_by_hand(engine_name: str) -> None:
    spec = read_config(qwen35_27b(), name="qwen3.5-27b")
    assert spec.warnings == () or all("mamba_ssm" not in w for w in spec.warnings)
    state = next(c for c in spec.caches if isinstance(c, StateCache))
    assert state.recurrent_dtype is not None and state.recurrent_dtype.name == "fp32"
    engine, _ = make_engine(engine_name)
    est = estimate(spec, Workload(tokens=300), engine=engine)
    assert est.per_token_bytes == PER_TOKEN
    assert _state_own_bytes(est) == FIXED == 153_944_064
    if engine_name == "vllm":
        # vLLM's hybrid layout (_align_hybrid_block_size): attention pages of 4 x 256 x 2 x 2 B = 4,096 B
        # a token grow in steps of 16 tokens until one holds a 3,207,168 B state: 16 x cdiv(3,207,168,
        # 65,536) = 784 tokens, a 3,211,264 B page; each state takes one (48 = 3 groups of 16, none empty).
        assert est.fixed_bytes_per_sequence == 48 * 784 * 4_096 == 154_140_672
    else:
        assert est.fixed_bytes_per_sequence == FIXED


def test_qwen35_without_the_field_keeps_the_model_dtype_in_vllm_and_fp32_in_sglang() -> None:
    spec = read_config(qwen35_27b(mamba_ssm_dtype=None), name="q")
    # vLLM: mamba_ssm_cache_dtype "auto" = the model dtype: (30,720 + 786,432) x 2 B x 48 layers,
    # each state (1,634,304 B) in a page of 16 x cdiv(1,634,304, 65,536) = 400 tokens x 4,096 B.
    vllm, _ = make_engine("vllm")
    est = estimate(spec, Workload(tokens=300), engine=vllm)
    assert _state_own_bytes(est) == 48 * 817_152 * 2
    assert est.fixed_bytes_per_sequence == 48 * 400 * 4_096
    # SGLang: mamba2_state_dtype falls back to float32 (conv bf16).
    sglang, _ = make_engine("sglang")
    assert estimate(spec, Workload(tokens=300), engine=sglang).fixed_bytes_per_sequence == FIXED


def test_sglang_and_transformers_and_llamacpp() -> None:
    spec = read_config(qwen35_27b(mamba_ssm_dtype="float16"), name="q")
    sglang, _ = make_engine("sglang")
    assert estimate(spec, Workload(tokens=1), engine=sglang).fixed_bytes_per_sequence == 48 * (30_720 + 786_432) * 2
    # transformers 5.24 reads neither field: the gated-delta-rule kernels return a float32 state;
    # the conv state spans the whole kernel (4) in the model dtype.
    hf, _ = make_engine("transformers")
    assert estimate(spec, Workload(tokens=1), engine=hf).fixed_bytes_per_sequence == 48 * (40_960 * 2 + 786_432 * 4)
    # llama.cpp: r_l and s_l are f32.
    cpp, _ = make_engine("llamacpp")
    assert estimate(spec, Workload(tokens=1), engine=cpp).fixed_bytes_per_sequence == 48 * (30_720 + 786_432) * 4


@pytest.mark.parametrize("value", ["int8", "q4_0", "nonsense", 3, True])
def test_a_non_compute_dtype_is_an_error_naming_the_field(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"'text_config\.mamba_ssm_dtype'"):
        read_config(qwen35_27b(mamba_ssm_dtype=value), name="q")


def test_nemotron_h_defaults_to_fp32_and_reads_the_cache_dtype() -> None:
    base = {"model_type": "nemotron_h", "torch_dtype": "bfloat16", "hidden_size": 1024, "layers_block_type": ["mamba"]}
    for extra, name in (({}, "fp32"), ({"mamba_ssm_cache_dtype": "bfloat16"}, "bf16")):
        spec = read_config({**base, **extra}, name="nh")
        state = spec.caches[0]
        assert isinstance(state, StateCache) and state.recurrent_dtype is not None
        assert state.recurrent_dtype.name == name
        assert spec.warnings == () and not any("understated" in n for n in spec.notes)
    with pytest.raises(ConfigError, match="'mamba_ssm_cache_dtype'"):
        read_config({**base, "mamba_ssm_cache_dtype": "fp8"}, name="nh")


def test_other_families_note_that_vllm_ignores_the_field() -> None:
    cfg = qwen35_27b()["text_config"] | {"model_type": "qwen3_next"}
    spec = read_config(cfg, name="qn")
    assert any("vLLM reads it only for Nemotron-H and Qwen3.5" in n for n in spec.notes)
    assert sum("mamba_ssm_dtype" in n for n in spec.notes) == 1


def test_probe_on_cpu_matches_byte_for_byte(run_cli, tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the probe extra (torch) is not installed")
    pytest.importorskip("transformers", reason="the probe extra (transformers) is not installed")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(qwen35_27b()))
    result = run_cli("probe", str(path), "--tokens", "300", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.stderr + result.stdout
    data = result.json()
    assert data["match"] is True
    # transformers: (10,240 x 4 x 2 + 786,432 x 4) x 48 + 300 x 65,536.
    assert data["measured_bytes"] == 48 * 3_227_648 + 300 * PER_TOKEN == 174_587_904
