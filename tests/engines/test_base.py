"""Engine options: each engine lists the knobs it has (``Engine.options_type``), and a knob the
chosen engine lacks is refused in one line naming the flag and the engine (exit 2), as are the
other flags that would change nothing."""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.calc.estimate import Estimate, Workload
from kvcalc.engines import ENGINE_NAMES, REGISTRY, engine_class, every_knob, make_engine
from kvcalc.engines.base import Engine, EngineOptions, Target
from kvcalc.engines.theoretical import THEORETICAL, Theoretical
from kvcalc.errors import ConfigError, UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.spec import StateCache
from tests.conftest import assert_one_line_error
from tests.helpers.state_families import GRIFFIN, MINIMAX
from tests.helpers.theoretical import estimate

# Each engine's knobs as its own command line spells them (not read from kvcalc's classes): vLLM
# --block-size, --max-num-batched-tokens, --max-num-seqs, --enforce-eager; SGLang --page-size;
# llama.cpp -ub, -b, -kvu, --swa-full (common/arg.cpp); a plain llama-server is unified already
# (server.cpp turns n_parallel auto into 4 unified slots), so -kvu changes nothing there. mlx-lm:
# mlx_lm.generate's --max-kv-size, --prefill-step-size, --kv-bits, --kv-group-size,
# --quantized-kv-start, -m/--max-tokens, and mlx_lm.server's --prompt-cache-bytes. The theoretical
# engine stands for TensorRT-LLM in simulate: trtllm-build's / trtllm-serve's --max_num_tokens.
ENGINE_FLAGS = {
    "theoretical": {"--max_num_tokens"},
    "transformers": set(),
    "vllm": {"--block-size", "--max-num-batched-tokens", "--max-num-seqs", "--enforce-eager"},
    "sglang": {"--page-size", "--enable-mixed-chunk", "--scheduler-recv-interval"},
    "llama.cpp": {"-ub, --ubatch-size", "-b, --batch-size", "-kvu, --kv-unified", "--swa-full"},
    "llama-server": {"-ub, --ubatch-size", "-b, --batch-size", "--swa-full"},
    "ollama": {"OLLAMA_FLASH_ATTENTION"},
    "mlx": {"--max-kv-size", "--prefill-step-size", "--kv-bits", "--kv-group-size", "--quantized-kv-start",
            "-m, --max-tokens", "--prompt-cache-bytes (mlx_lm.server)"},
    "lmstudio": {"Max Concurrent Predictions (lms load --parallel)", "Unified KV Cache off (useUnifiedKvCache: false)",
                 "Evaluation Batch Size (evalBatchSize)", "physicalBatchSize"},
    "lmstudio-mlx": {"Context Length (lms load --context-length)",
                     "KV Cache Quantization bits (mlxKvCacheQuantization)", "KV Cache Quantization group size",
                     "KV Cache Quantization start", "Max Concurrent Predictions (lms load --parallel)"},
}  # fmt: skip
# The knobs by API name, read from the engines (the test below holds them to ENGINE_FLAGS).
KNOBS = {name: set(REGISTRY[name].options.knob_names()) for name in ENGINE_NAMES}
ALL_KNOBS = set().union(*KNOBS.values())
SAMPLE = {"block_size": 32, "max_batched_tokens": 4096, "max_num_seqs": 8, "enforce_eager": True,
          "ubatch": 64, "n_batch": 1024, "kv_unified": True, "swa_full": True, "max_kv_size": 1024,
          "prefill_step_size": 512, "kv_bits": 4, "kv_group_size": 32, "quantized_kv_start": 0, "max_tokens": 2,
          "prompt_cache_bytes": 2**30, "flash_attention": 1, "parallel": 2, "no_kv_unified": True,
          "max_num_tokens": 4096, "mixed_chunk": True, "recv_interval": 10}  # fmt: skip
# Knobs that apply only beside another (mlx-lm's quantization group and start need --kv-bits).
NEEDS = {"kv_group_size": {"kv_bits": 4}, "quantized_kv_start": {"kv_bits": 4}}
# Each knob's flag and a value it takes (kvcalc's own spelling, from the knob).
_VALUE = {"max_num_seqs": "8", "prompt_cache_bytes": "1GiB"}
FLAG = {k.name: [k.flag] if k.is_flag else [k.flag, _VALUE.get(k.name, str(SAMPLE[k.name]))]
        for k in every_knob().values()}  # fmt: skip


def test_every_engine_is_in_the_table() -> None:
    assert set(ENGINE_FLAGS) == set(ENGINE_NAMES)
    assert set(SAMPLE) == ALL_KNOBS


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_options_list_exactly_the_engines_knobs(name: str) -> None:
    assert {k.engine_flag for k in REGISTRY[name].options.knobs()} == ENGINE_FLAGS[name]
    assert engine_class(name).options_type.knob_names() == KNOBS[name]


@pytest.mark.parametrize(("name", "knob"), [(n, k) for n in ENGINE_NAMES for k in sorted(ALL_KNOBS - KNOBS[n])])
def test_a_knob_the_engine_lacks_is_refused(name: str, knob: str) -> None:
    with pytest.raises(UsageError) as info:
        make_engine(name, **{knob: SAMPLE[knob]})
    assert info.value.params == (knob,)
    assert f"under the {name} engine" in str(info.value)
    owners = [n for n in ENGINE_NAMES if knob in KNOBS[n]]
    assert all(owner in str(info.value) for owner in owners)


@pytest.mark.parametrize(("name", "knob"), [(n, k) for n in ENGINE_NAMES for k in sorted(KNOBS[n])])
def test_a_knob_the_engine_has_is_taken(name: str, knob: str) -> None:
    engine, _ = make_engine(name, **{knob: SAMPLE[knob]}, **NEEDS.get(knob, {}))
    assert engine.name == name


@pytest.mark.parametrize("knob", sorted(NEEDS))
def test_a_knob_without_the_one_it_needs_is_refused(knob: str) -> None:
    with pytest.raises(UsageError, match="changes nothing without --kv-bits"):
        make_engine("mlx", **{knob: SAMPLE[knob]})


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_not_given_is_not_refused(name: str) -> None:
    # None and False are "not given": the API's defaults pass through every engine.
    make_engine(name, **dict.fromkeys(ALL_KNOBS - {"kv_unified", "enforce_eager"}), kv_unified=False,
                enforce_eager=False)  # fmt: skip


ESTIMATE_KNOBS = ALL_KNOBS - {"max_num_seqs", "enforce_eager", "prompt_cache_bytes", "max_num_tokens", "mixed_chunk",
                              "recv_interval"}  # fmt: skip


@pytest.mark.parametrize(("name", "knob"), [(n, k) for n in ENGINE_NAMES for k in sorted(ESTIMATE_KNOBS - KNOBS[n])])
def test_cli_estimate_refuses_the_knob(run_cli, name: str, knob: str) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--engine", name, *FLAG[knob])
    assert result.exit_code == 2
    assert_one_line_error(result, FLAG[knob][0], f"the {name} engine")


@pytest.mark.parametrize("name", [n for n in ENGINE_NAMES if "max_num_seqs" not in KNOBS[n]])
@pytest.mark.parametrize("knob", ["max_num_seqs", "enforce_eager"])
def test_cli_fit_refuses_vllm_runtime_knobs_elsewhere(run_cli, name: str, knob: str) -> None:
    result = run_cli("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", name, *FLAG[knob])
    assert result.exit_code == 2
    assert_one_line_error(result, FLAG[knob][0], f"the {name} engine")


def test_the_issues_examples_are_refused(run_cli) -> None:
    # The two commands the issue names: each exits 2 at its first knob that does not apply.
    result = run_cli("estimate", "llama-3.1-8b", "--engine", "vllm", "--ubatch", "64", "--swa-full")
    assert result.exit_code == 2
    assert_one_line_error(result, "--ubatch", "vllm")
    result = run_cli("fit", "llama-3.1-8b", "--engine", "sglang", "--kv-budget", "8GiB", "--ubatch", "64",
                     "--kv-unified")  # fmt: skip
    assert result.exit_code == 2
    assert_one_line_error(result, "--ubatch", "sglang")


def test_a_knob_that_applies_still_changes_the_figure(run_cli) -> None:
    # vLLM blocks of 32: 1,000 tokens hold cdiv(1000, 32) = 32 blocks = 1,024 slots; Llama 3.1 8B
    # stores 2 x 8 x 128 x 2 B = 4,096 B per slot and layer, x 32 layers = 134,217,728 B.
    data = run_cli("estimate", "llama-3.1-8b", "--engine", "vllm", "--block-size", "32", "--tokens", "1000",
                   "--json").json()  # fmt: skip
    assert data["total_bytes"] == 1024 * 4096 * 32


# --- the other flags that would change nothing ----------------------------------------------------------


def test_residual_tokens_need_a_quantized_cache(run_cli) -> None:
    result = run_cli("estimate", "llama-3.1-8b", "--residual-tokens", "10")
    assert result.exit_code == 2
    assert_one_line_error(result, "--residual-tokens", "quantized")
    # With int4 it is taken: 10 newest tokens at bf16 instead of int4 changes the figure.
    plain = run_cli("estimate", "llama-3.1-8b", "--engine", "transformers", "--kv-dtype", "int4", "--json")
    kept = run_cli("estimate", "llama-3.1-8b", "--engine", "transformers", "--kv-dtype", "int4",
                   "--residual-tokens", "10", "--json")  # fmt: skip
    assert plain.exit_code == kept.exit_code == 0
    assert plain.json()["total_bytes"] != kept.json()["total_bytes"]


def test_quant_group_needs_a_group_quantized_format(run_cli) -> None:
    for dtype in ("fp8", "fp16"):
        result = run_cli("estimate", "llama-3.1-8b", "--kv-dtype", dtype, "--quant-group", "32")
        assert result.exit_code == 2
        assert_one_line_error(result, "--quant-group")
    result = run_cli("estimate", "llama-3.1-8b", "--quant-group", "32")
    assert result.exit_code == 2
    # int4 in groups of 32: a K row of 8 x 128 = 1,024 elements is 512 B + 32 groups x 4 B = 640 B,
    # K and V 1,280 B per token and layer, x 32 layers x 1,000 tokens; groups of 64 (the default):
    # 512 + 16 x 4 = 576 B a row.
    g32 = run_cli("estimate", "llama-3.1-8b", "--kv-dtype", "int4", "--quant-group", "32", "--tokens", "1000",
                  "--json").json()  # fmt: skip
    g64 = run_cli("estimate", "llama-3.1-8b", "--kv-dtype", "int4", "--tokens", "1000", "--json").json()
    assert g32["total_bytes"] == 1280 * 32 * 1000 == 40_960_000
    assert g64["total_bytes"] == 1152 * 32 * 1000 == 36_864_000


def test_quant_group_in_the_api() -> None:
    with pytest.raises(UsageError) as info:
        api.estimate("llama-3.1-8b", serving=api.Serving(kv_dtype="fp8", quant_group=32))
    assert info.value.params == ("quant_group",)


def test_rope_dim_needs_latent_dim(run_cli) -> None:
    for model in ("llama-3.1-8b", "deepseek-v3"):  # without MLA, and with its own MLA (which it would override)
        result = run_cli("compare", model, "--rope-dim", "64")
        assert result.exit_code == 2
        assert_one_line_error(result, "--rope-dim", "--latent-dim")
    assert run_cli("compare", "llama-3.1-8b", "--latent-dim", "512", "--rope-dim", "64").exit_code == 0


def test_vs_theoretical_needs_another_engine(run_cli) -> None:
    for engine in ([], ["--engine", "theoretical"]):
        result = run_cli("estimate", "llama-3.1-8b", "--vs-theoretical", *engine)
        assert result.exit_code == 2
        assert_one_line_error(result, "--vs-theoretical", "--engine")
    assert run_cli("estimate", "llama-3.1-8b", "--vs-theoretical", "--engine", "vllm").exit_code == 0


def test_no_context_cap_needs_a_cap_to_lift(run_cli) -> None:
    result = run_cli("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-context-cap", "--max-model-len", "4096")
    assert result.exit_code == 2
    assert_one_line_error(result, "--no-context-cap", "--max-model-len")
    # falcon-7b's config names no max_position_embeddings: there is no limit to lift.
    result = run_cli("fit", "falcon-7b", "--kv-budget", "8GiB", "--no-context-cap")
    assert result.exit_code == 2
    assert_one_line_error(result, "--no-context-cap", "no context limit")
    assert run_cli("fit", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-context-cap").exit_code == 0


REPEATS = [("--tokens", "4k,4k", "4,096"), ("--tokens", "1000,2k,1000", "1,000"), ("--kv-dtype", "fp8,fp8", "fp8")]


@pytest.mark.parametrize(("flag", "value", "shown"), REPEATS)
def test_compare_refuses_a_repeated_column(run_cli, flag: str, value: str, shown: str) -> None:
    result = run_cli("compare", "llama-3.1-8b", flag, value)
    assert result.exit_code == 2
    assert_one_line_error(result, flag, shown, "more than once")


# What every engine shares (kvcalc.engines.base): the KV and state dtypes each engine picks when none
# is asked for.


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


# Mamba-2.8B's checkpoint is float32: 11,073,382,400 B (the preset's weights); Gemma-2-9B's config
# says float32 too. Each engine decides once how it holds such a checkpoint (Engine.weights_dtype
# and model_dtype) and every command reads that decision.
MAMBA_FP32_BYTES = 11_073_382_400


@pytest.mark.parametrize(
    ("engine", "kv", "weights"),
    [
        ("theoretical", "fp32", MAMBA_FP32_BYTES),  # the checkpoint as its config stores it
        ("transformers", "fp32", MAMBA_FP32_BYTES),  # from_pretrained keeps float32
        ("vllm", "bf16", MAMBA_FP32_BYTES // 2),  # _resolve_auto_dtype: 16 bits
        ("sglang", "fp16", MAMBA_FP32_BYTES // 2),  # _get_and_verify_dtype: fp16 outside Gemma
        ("llama.cpp", "fp16", MAMBA_FP32_BYTES // 2),  # converted to a bf16 GGUF, cache f16
    ],
)
def test_a_float32_checkpoint_is_one_decision_per_engine(engine: str, kv: str, weights: int) -> None:
    est = api.estimate("mamba-2.8b", tokens=100, engine=engine)
    fit = api.fit("mamba-2.8b", gpu="h100", tokens=100, engine=engine, capacity=api.Capacity(overhead=0))
    speed = api.speed("mamba-2.8b", prompt=98, output=2, gpu="h100", sweep=[], engine=engine)
    weight_line = next(line for line in fit.budget.lines if line.label == "- weights")
    assert weight_line.bytes == speed.result.weights.total_bytes == weights
    assert est.kv_dtype.name == speed.kv_dtype.name == kv


@pytest.mark.parametrize("engine", ["theoretical", "vllm", "transformers", "llama.cpp"])
def test_gemma2_float32_reads_the_same_kv_format_in_estimate_and_speed(engine: str) -> None:
    est = api.estimate("gemma-2-9b", tokens=100, engine=engine)
    speed = api.speed("gemma-2-9b", prompt=98, output=2, gpu="h100", sweep=[], engine=engine)
    assert est.kv_dtype.name == speed.kv_dtype.name


# Each engine package a probe runs names its release when it is not the one the rules were read from.


ROOT = Path(__file__).resolve().parents[2]


def test_every_probed_engine_package_names_its_release() -> None:
    # llama-cpp-python and mlx-lm probes say so too when another release runs them (.ci/run pins
    # 0.3.36 and 0.32.2, the releases the rules were read from).
    from kvcalc.engines.base import version_warning as package_warning
    from kvcalc.engines.llamacpp import RULES_VERSION as LLAMA_CPP
    from kvcalc.engines.mlx.releases import RULES_VERSION as MLX_LM

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f"llama-cpp-python=={LLAMA_CPP}" in ci and f"mlx-lm=={MLX_LM}" in ci
    assert package_warning("mlx-lm", MLX_LM, MLX_LM) is None
    assert package_warning("mlx-lm", None, MLX_LM) is None  # an older child that does not say
    line = package_warning("llama-cpp-python", "0.3.40", LLAMA_CPP)
    assert line is not None and "0.3.40" in line and "0.3.36" in line and "\n" not in line


# The engine interface (kvcalc.engines.base.Engine): which hooks an engine must answer, and that
# every other one says it is optional and what its default does.

REQUIRED = {"configure", "check_dtype", "step_overhead"}


def test_the_required_hooks_are_abstract() -> None:
    assert Engine.__abstractmethods__ == REQUIRED
    with pytest.raises(TypeError, match="abstract"):
        Engine(name="x")  # type: ignore[abstract]


def test_an_engine_without_a_required_hook_cannot_be_made() -> None:
    @dataclass(frozen=True)
    class Half(Engine):
        name: str = "half"

        @classmethod
        def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
            return cls(), []

        def check_dtype(self, dtype: object) -> None:
            return None

    with pytest.raises(TypeError, match="step_overhead"):
        Half()  # type: ignore[abstract]


def test_every_optional_hook_says_so_and_names_its_default() -> None:
    hooks = {n: v for n, v in vars(Engine).items() if not n.startswith("_") and n not in ("options_type", "name")}
    # base_slot_rules is computed from the class, never overridden: not a hook.
    optional = set(hooks) - REQUIRED - {"base_slot_rules"}
    silent = [n for n in sorted(optional) if "Optional: default" not in (inspect.getdoc(getattr(Engine, n)) or "")]
    assert silent == []


def test_every_registered_engine_answers_the_required_hooks() -> None:
    for name in ENGINE_NAMES:
        assert not getattr(engine_class(name), "__abstractmethods__", set()), name


def test_the_theoretical_rules_are_the_theoretical_engines() -> None:
    assert Theoretical() == THEORETICAL and THEORETICAL.name == "theoretical"
    assert "step_overhead" in vars(Theoretical) and "check_dtype" in vars(Theoretical)


# The recurrent (SSM / delta-rule) state's own dtype from the config: Qwen3.5's ``mamba_ssm_dtype``,
# Nemotron-H's ``mamba_ssm_cache_dtype``, and how each engine honours it.
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


# MiniMax's lightning attention and Griffin's RG-LRU (tests/helpers/state_families.py): only the
# engines checked against them take them (engines/base.py Engine.state_families).
@pytest.mark.parametrize("engine_name", ["vllm", "sglang", "llama.cpp", "mlx"])
def test_engines_refuse_state_families_they_were_not_checked_for(engine_name: str) -> None:
    engine, _ = make_engine(engine_name)
    for config, short in ((MINIMAX, "lightning"), (GRIFFIN, "rg-lru")):
        with pytest.raises(UsageError, match=short):
            estimate(read_config(config, name="m"), Workload(tokens=100), engine=engine)


def test_the_theoretical_engine_is_the_ideal_batcher() -> None:
    # Its own scheduler, said so (not the base's "no model of its scheduler"); a 1 GiB budget holds
    # 8,192 tokens of Llama 3.1 8B (32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B a token).
    import math

    from kvcalc.api import Load, StepTimes, simulate

    report = simulate("llama-3.1-8b", load=Load(rate=math.inf, count=1, prompt=4, output=2),
                      kv_budget=2**30, step_times=StepTimes(1.0, 0.0))  # fmt: skip
    assert report.run.pool_units == 8192
    assert any(n.startswith("the theoretical engine is the ideal continuous batcher over a pool of 8,192") for n in
               report.notes)  # fmt: skip


def test_theoretical_engines_with_other_token_budgets_are_other_engines() -> None:
    from kvcalc.engines.theoretical import Theoretical

    assert Theoretical() == Theoretical() and hash(Theoretical()) == hash(Theoretical())
    assert Theoretical() != Theoretical(max_num_tokens=8192)
