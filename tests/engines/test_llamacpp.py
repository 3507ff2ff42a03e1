"""kvcalc's llama.cpp rules, each number derived by hand next to it (no llama.cpp needed), and the
``kvcalc probe --engine llama.cpp`` command (skipped without llama_cpp).

Sources (llama.cpp 0c1e570, the copy llama-cpp-python 0.3.36 vendors): src/llama-context.cpp
(n_ctx = pad(n_ctx, 256); n_ctx_seq = pad(n_ctx / n_seq_max, 256) unless kv_unified; n_batch =
min(n_ctx, n_batch); n_ubatch = min(n_batch, n_ubatch); MLA refuses type_k != type_v),
src/llama-kv-cache-iswa.cpp (size_swa = pad(min(size_base, n_swa x (unified ? n_seq_max : 1) +
n_ubatch), 256); swa_full: size_base), src/models/phi3.cpp ("Phi SWA is currently disabled"),
src/models/llama4.cpp (n_swa = 8192 chunked), conversion/__init__.py + conversion/llama.py
(MistralForCausalLM -> LlamaModel, no sliding window written), common/common.h (swa_full false,
n_batch 2048, n_ubatch 512), tools/server/server.cpp (n_parallel auto -> 4 and kv_unified true).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvcalc import api
from kvcalc.errors import UsageError
from kvcalc.inputs.hf.configs import read_config
from tests.conftest import fixture_config
from tests.helpers.llama_cpp import needs_llama_cpp

GEMMA2_TINY: dict[str, Any] = {
    "model_type": "gemma2", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "sliding_window": 256, "torch_dtype": "bfloat16",
}  # fmt: skip
LLAMA4_TINY: dict[str, Any] = {
    "model_type": "llama4_text", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 64, "attention_chunk_size": 1024, "no_rope_layers": [],
    "torch_dtype": "bfloat16",
}  # fmt: skip


def _groups(est: Any) -> dict[str, tuple[int, int]]:
    """kind -> (layers, slots per layer for the whole batch)."""
    return {g.kind.value: (g.layers, g.slots) for g in est.groups}


def test_mistral_has_no_window_in_llama_cpp() -> None:
    # Mistral-7B: 32 layers, 8 KV heads x 128, f16: 2 x 8 x 128 x 2 B = 4,096 B per cell per layer.
    # -c 65,536 -np 4: 4 streams of pad(16,384, 256) = 16,384 cells, every layer (no window):
    # 65,536 cells x 32 x 4,096 = 8,589,934,592 B (with the config's 4,096 window it would be
    # 4 x pad(4,096 + 512, 256) = 18,432 cells: 2,415,919,104 B).
    est = api.estimate("mistral-7b-v0.1", tokens=16384, batch=4, engine="llama.cpp")
    assert est.total_bytes == 65536 * 32 * 4096 == 8_589_934_592
    assert any("'llama' architecture with no sliding window" in n for n in est.notes)


def test_phi3_swa_is_disabled() -> None:
    # Phi-3-mini: 32 layers, 32 KV heads x 96 (3072 / 32), f16: 2 x 32 x 96 x 2 B = 12,288 B.
    # 8,192 tokens: 8,192 cells in every layer (window 2,047 ignored): 8,192 x 32 x 12,288 = 3,221,225,472 B.
    est = api.estimate("phi-3-mini", tokens=8192, engine="llama.cpp")
    assert est.total_bytes == 8192 * 32 * 12288 == 3_221_225_472
    assert any("Phi SWA is currently disabled" in n for n in est.notes)


def test_qwen2_window_dropped() -> None:
    config = {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
              "num_key_value_heads": 1, "use_sliding_window": True, "sliding_window": 256,
              "max_window_layers": 2}  # fmt: skip
    # 4 layers x 1 KV head x 64 x 2 x 2 B = 256 B per cell per layer; 4,096 tokens: 4,096 cells
    # in every layer: 4,096 x 4 x 256 = 4,194,304 B.
    est = api.estimate(read_config(config, name="q"), tokens=4096, engine="llama.cpp")
    assert est.total_bytes == 4096 * 4 * 256 == 4_194_304


def test_llama4_chunk_is_8192_whatever_the_config_says() -> None:
    # 3 chunked layers + 1 full (every 4th), 2 KV heads x 64, f16: 2 x 2 x 64 x 2 B = 512 B.
    # -c 24,000 -np 2: n_ctx = pad(24,000, 256) = 24,064; 2 streams of pad(12,032, 256) = 12,032.
    # Full: 24,064 cells x 512 = 12,320,768 B. Chunked: pad(min(12,032, 8,192 + 512), 256) = 8,704
    # per stream, 17,408 cells x 3 x 512 = 26,738,688 B. Total 39,059,456 B. (The config's 1,024
    # chunk would give pad(1,024 + 512, 256) = 1,536 per stream.)
    est = api.estimate(read_config(LLAMA4_TINY, name="l4"), tokens=12000, batch=2, engine="llama.cpp")
    assert _groups(est) == {"full_attention": (1, 24064), "chunked_attention": (3, 17408)}
    assert est.total_bytes == 12_320_768 + 26_738_688 == 39_059_456
    assert any("chunk at 8,192" in n and "1,024" in n for n in est.notes)


def test_mla_refuses_different_k_and_v_types() -> None:
    spec = read_config(fixture_config("DeepSeek-V2-Lite.json"), name="dsv2")
    with pytest.raises(UsageError, match=r"different K \(q8_0\) and V \(fp16\) cache types"):
        api.estimate(spec, tokens=512, serving=api.Serving(engine="llama.cpp", k_dtype="q8_0", v_dtype="fp16"))
    api.estimate(spec, tokens=512, engine="llama.cpp", kv_dtype="q8_0")  # one type: accepted


def test_f16_default_for_a_float32_config() -> None:
    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
              "num_key_value_heads": 4, "torch_dtype": "float32"}  # fmt: skip
    # 2 layers x 256 cells x (2 x 4 x 64 x 2 B = 1,024 B) = 524,288 B (float32 would be 1,048,576).
    est = api.estimate(read_config(config, name="m"), tokens=256, engine="llama.cpp")
    assert est.total_bytes == 2 * 256 * 1024 == 524_288


def test_effective_ubatch_is_min_of_n_batch_and_n_ubatch() -> None:
    spec = read_config(GEMMA2_TINY, name="g2")
    # 2 streams of 4,096; sliding cells per stream pad(min(4,096, 256 + ubatch), 256):
    # n_batch 2,048, n_ubatch 512 -> 768 (1,536 both streams); n_batch 64 -> ubatch 64 -> pad(320) = 512 (1,024).
    default = api.estimate(spec, tokens=4096, batch=2, engine="llama.cpp")
    small = api.estimate(spec, tokens=4096, batch=2, engine="llama.cpp", options={"n_batch": 64})
    assert _groups(default)["sliding_attention"] == (2, 1536)
    assert _groups(small)["sliding_attention"] == (2, 1024)
    # n_ctx itself bounds it: 1 x 100 tokens -> n_batch = min(100, 2,048), ubatch 100; a window of
    # 256 + 100 still covers the pad(100, 256) = 256 cells.
    assert _groups(api.estimate(spec, tokens=100, engine="llama.cpp"))["sliding_attention"] == (2, 256)


def test_swa_full_gives_sliding_layers_full_cells() -> None:
    spec = read_config(GEMMA2_TINY, name="g2")
    # --swa-full: sliding layers get n_ctx_seq cells per stream, 2 x 4,096 = 8,192.
    est = api.estimate(spec, tokens=4096, batch=2, engine="llama.cpp", options={"swa_full": True})
    assert _groups(est) == {"sliding_attention": (2, 8192), "full_attention": (2, 8192)}
    assert any("--swa-full" in n for n in est.notes)


def test_llama_server_mode_is_four_slots_in_one_unified_cache() -> None:
    spec = read_config(GEMMA2_TINY, name="g2")
    # llama-server -c 16,384 (no -np): 4 slots, one unified stream of 16,384 cells; sliding
    # pad(min(16,384, 256 x 4 + 512), 256) = 1,536 cells. (-np 4 without -kvu: 4 x pad(min(4,096, 768)) = 3,072.)
    server = api.estimate(spec, tokens=4096, batch=4, engine="llama-server")
    plain = api.estimate(spec, tokens=4096, batch=4, engine="llama.cpp")
    assert _groups(server) == {"sliding_attention": (2, 1536), "full_attention": (2, 16384)}
    assert _groups(plain)["sliding_attention"] == (2, 3072)


def test_cli_help_documents_the_flags(run_cli: Any) -> None:
    text = run_cli("estimate", "--help").stdout
    for flag in ("--swa-full", "--n-batch", "llama-server"):
        assert flag in text
    assert "--engine llama.cpp" in run_cli("probe", "--help").stdout


def test_probe_refuses_llama_flags_for_transformers(run_cli: Any) -> None:
    result = run_cli("probe", "llama-3.1-8b", "--swa-full")
    assert result.exit_code != 0
    assert "--swa-full applies to --engine llama.cpp" in result.stderr


def test_the_llama_cpp_probe_refuses_the_flags_it_never_read(run_cli: Any) -> None:
    # --device and mlx-lm's --kv-bits ran llama.cpp as if they were not given.
    result = run_cli("probe", "llama-3.1-8b", "--engine", "llama-server", "--device", "cpu", "--kv-bits", "4")
    assert result.exit_code == 2
    assert result.stderr == ("kvcalc: error: --device, --kv-bits do not apply to the real llama.cpp probe (it runs "
                             "here, exactly)\n")  # fmt: skip


def test_missing_llama_cpp_is_a_one_line_hint(run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcalc.engines.llamacpp import probe

    monkeypatch.setattr(probe, "llama_cpp_available", lambda: False)
    result = run_cli("probe", "llama-3.1-8b", "--engine", "llama.cpp")
    assert result.exit_code == 1  # an environment problem (README "Exit status"), not a bad flag (2)
    assert "pip install 'kvcalc[llamacpp]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_probe_refuses_an_architecture_it_cannot_build(run_cli: Any) -> None:
    result = run_cli("probe", "kimi-linear-48b-a3b", "--engine", "llama.cpp")
    assert result.exit_code != 0
    assert "the llama.cpp probe cannot build a kimi_linear model" in result.stderr


@needs_llama_cpp
def test_probe_gemma2_matches(run_cli: Any) -> None:
    # Gemma-2-9B: 42 layers alternating, 8 KV heads x 256, f16: 2 x 8 x 256 x 2 B = 8,192 B.
    # 2 x 4,096 tokens: full 21 x 8,192 cells x 8,192 = 1,409,286,144 B; sliding (window 4,096)
    # 2 x pad(min(4,096, 4,096 + 512)) = 8,192 cells, the same. Total 2,818,572,288 B.
    result = run_cli("probe", "gemma-2-9b", "--engine", "llama.cpp", "-t", "4096", "-b", "2", "--json")
    assert result.exit_code == 0, result.stderr
    data = result.json()
    assert data["match"] is True
    assert data["measured_bytes"] == 2 * 21 * 8192 * 8192 == 2_818_572_288
    assert {g["group"]: g["cells"]["measured"] for g in data["groups"]} == {"full": 8192, "swa": 8192}


@needs_llama_cpp
def test_probe_llama_server_quantized(run_cli: Any) -> None:
    # gpt-oss-20b: 24 layers alternating (sliding first), 8 KV heads x 64; q8_0 rows: 512 elements
    # = 16 blocks x 34 B = 544 B per K and per V, 1,088 B per cell. llama-server -c 32,768: one
    # unified stream; full 12 x 32,768 cells x 1,088 = 427,819,008 B; sliding pad(min(32,768,
    # 128 x 4 + 512), 256) = 1,024 cells: 12 x 1,024 x 1,088 = 13,369,344 B.
    result = run_cli("probe", "gpt-oss-20b", "--engine", "llama-server", "-t", "8192", "-b", "4", "--kv-dtype", "q8_0")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "427,819,008" in result.stdout and "13,369,344" in result.stdout
    assert "matches byte for byte" in result.stdout


@pytest.mark.parametrize(("preset", "model_type"), [("bart-large", "bart"), ("whisper-large-v3", "whisper")])
@pytest.mark.parametrize("engine", ["llama.cpp", "llama-server"])
def test_no_llama_cpp_architecture_for_bart_or_whisper(preset: str, model_type: str, engine: str) -> None:
    """LLM_ARCH_NAMES of llama.cpp 0c1e570 (src/llama-arch.cpp) has neither: estimate, and so fit,
    refuse them where they printed figures for a model llama.cpp cannot load."""
    with pytest.raises(UsageError, match=f"llama.cpp has no {model_type} architecture"):
        api.estimate(preset, tokens=1024, engine=engine)
    with pytest.raises(UsageError, match=f"llama.cpp has no {model_type} architecture"):
        api.fit(preset, gpu="h100-sxm", engine=engine)


@pytest.mark.parametrize("preset", ["mamba-2.8b", "falcon-mamba-7b"])
def test_fit_of_a_recurrent_only_model_names_the_unmodelled_buffer(preset: str) -> None:
    """A Mamba model has no attention heads: kvcalc's compute buffer is llama.cpp's attention graph,
    so fit asks for --overhead naming why, not for widths the config does give; with it, fit answers."""
    with pytest.raises(UsageError, match="compute buffer for a recurrent-only model is not modelled") as err:
        api.fit(preset, gpu="h100-sxm", engine="llama.cpp")
    assert err.value.params == ("overhead",)
    result = api.fit(preset, gpu="h100-sxm", engine="llama.cpp", capacity=api.Capacity(overhead=2**30)).result
    if preset == "mamba-2.8b":
        # 85,017,755,648 B (H100 SXM) - 5,536,691,200 (2,768,345,600 parameters in bf16) - 2^30 given
        # = 78,407,322,624 B; a sequence holds 64 layers x (3 x 5,120 + 16 x 5,120) x 4 B = 24,903,680
        # of f32 state: 78,407,322,624 // 24,903,680 = 3,148 sequences.
        assert result.max_concurrency == 3148
    assert result.max_concurrency is not None and result.max_concurrency > 0


def test_a_model_type_with_no_architecture_record_says_its_rules_are_assumed() -> None:
    # hunyuan has no record in architectures.py: the generic rules are a guess, and said to be one.
    from kvcalc import api

    line = "kvcalc has no llama.cpp architecture record for hunyuan"
    assert any(line in n for n in api.estimate("hunyuan-a13b", tokens=1000, engine="llama.cpp").notes)
    assert not any("architecture record" in n for n in api.estimate("llama-3.1-8b", engine="llama.cpp").notes)
