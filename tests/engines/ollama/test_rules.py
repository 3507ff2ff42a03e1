"""Ollama's cache rules (src/kvcalc/engines/ollama/rules.py), against hand derivations from Ollama's
source by release and a real published Ollama log."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc import api
from kvcalc.engines import make_engine
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache

LOGS = Path(__file__).parents[2] / "fixtures" / "logs" / "ollama"


def test_a_preset_under_ollama_is_num_ctx_times_parallel_slots() -> None:
    # llama-3.1-8b: 32 layers, 8 KV heads x 128, f16. Ollama 0.32 launches llama-server -c 4096*4 -np 4:
    # n_ctx = pad(16384, 256) = 16384, 4 streams of pad(16384 / 4, 256) = 4096 cells.
    # 32 x 4 x 4096 x (2 x 8 x 128) x 2 bytes = 2,147,483,648.
    assert api.estimate("llama-3.1-8b", tokens=4096, batch=4, engine="ollama").total_bytes == 2_147_483_648


def test_old_releases_pad_cells_to_32_without_flash_attention() -> None:
    # Ollama 0.6 (flash attention off by default, vendored get_padding: flash_attn ? 256 : 32), one unified
    # cache: n_ctx = pad(4 x 1000, 32) = 4000 cells (pad 256 would be 4096).
    # llama-3.1-8b: 32 x 4000 x 4096 bytes a cell = 524,288,000.
    assert api.estimate("llama-3.1-8b", tokens=1000, batch=4, engine="ollama@0.6").total_bytes == 524_288_000
    # With OLLAMA_FLASH_ATTENTION=1: pad(4000, 256) = 4096 cells: 32 x 4096 x 4096 = 536,870,912.
    fa = api.estimate("llama-3.1-8b", tokens=1000, batch=4, engine="ollama@0.6", options={"flash_attention": 1})
    assert fa.total_bytes == 536_870_912


def test_the_issue_9362_log_cells() -> None:
    # OLLAMA_NUM_PARALLEL=4, num_ctx 2048, flash_attn 0 on Ollama 0.5: kv_size = 4 x 2048 = 8192 (the log's).
    log = (LOGS / "issue9362_qwen2_parallel4.log").read_text()
    assert "kv_size = 8192" in log and "n_ctx_per_seq = 2048" in log and "flash_attn    = 0" in log
    engine, _ = make_engine("ollama@0.5")
    layer = AttentionCache(kv_heads=2, k_head_dim=128, v_head_dim=128)
    assert engine.batch_slots(layer, 2048, 4, 0) == 8192
    # The log's bytes: 28 layers x 8192 cells x (256 + 256) x 2 bytes = 234,881,024 (224 MiB).
    assert 28 * engine.batch_slots(layer, 2048, 4, 0) * (256 + 256) * 2 == 224 * 2**20


def test_a_quantized_cache_type_needs_flash_attention() -> None:
    # llm/server.go (v0.5 .. v0.24): without flash attention Ollama drops OLLAMA_KV_CACHE_TYPE and caches f16.
    with pytest.raises(UsageError, match="ignores OLLAMA_KV_CACHE_TYPE=q8_0"):
        api.estimate("llama-3.1-8b", tokens=4096, engine="ollama@0.6", kv_dtype="q8_0")
    # With it: q8_0 blocks of 32 elements in 34 bytes: 32 layers x 4096 cells x 2 x 1024 / 32 x 34 = 285,212,672.
    q8 = api.estimate("llama-3.1-8b", tokens=4096, engine="ollama@0.6", kv_dtype="q8_0",
                      options={"flash_attention": 1})  # fmt: skip
    assert q8.total_bytes == 285_212_672
    # v0.30+: llama-server -fa auto takes it; with OLLAMA_FLASH_ATTENTION=0 llama.cpp refuses a quantized V.
    assert api.estimate("llama-3.1-8b", tokens=4096, engine="ollama", kv_dtype="q8_0").total_bytes == 285_212_672
    with pytest.raises(UsageError, match="refuses a q8_0 V cache"):
        api.estimate("llama-3.1-8b", tokens=4096, engine="ollama", kv_dtype="q8_0",
                     options={"flash_attention": 0})  # fmt: skip


def test_only_ollamas_cache_types_are_taken() -> None:
    with pytest.raises(UsageError, match="f16, q8_0 or q4_0"):
        api.estimate("llama-3.1-8b", tokens=4096, engine="ollama", kv_dtype="q5_1")


def test_v0_12_5_turns_flash_attention_on_by_model() -> None:
    # fs/ggml/ggml.go v0.12.5 FlashAttention(): qwen3 listed, llama not; before v0.13 that decides the padding.
    with pytest.raises(UsageError, match="turns flash attention on for qwen3"):
        api.estimate("qwen3-8b", tokens=1000, batch=4, engine="ollama@0.12.5")
    assert api.estimate("llama-3.1-8b", tokens=1000, batch=4, engine="ollama@0.12.5").total_bytes > 0


def test_the_default_num_ctx_is_capped_at_the_trained_context_from_0_9_3() -> None:
    # llm/server.go NewLlamaServer from v0.9.3 (ollama/ollama #11175): num_ctx > n_ctx_train becomes
    # n_ctx_train. gpt2's trained context: n_positions 1,024. The default before the cap: 4096 (0.9.0).
    spec = api.open_model("gpt2").spec
    assert make_engine("ollama@0.9")[0].default_tokens(spec, None) == (
        4096, "Ollama 0.9.0 defaults num_ctx to 4096 (envconfig/config.go OLLAMA_CONTEXT_LENGTH), per slot (--batch "
        "slots of it)")  # fmt: skip
    assert make_engine("ollama@0.10")[0].default_tokens(spec, None)[0] == 1024
    # 0.32 by VRAM tier: 80 GiB >= 47 GiB gives 262144, capped at 1024; no memory given: kvcalc's own.
    assert make_engine("ollama")[0].default_tokens(spec, 80 << 30)[0] == 1024
    assert make_engine("ollama")[0].default_tokens(spec, None) is None


def test_fit_without_tokens_sizes_ollamas_default_context(run_cli) -> None:
    # rtx-4090: 25,756,172,288 B = 23.99 GiB >= 23 GiB: num_ctx 32768 (server/routes.go v0.32.15), per slot.
    result = run_cli("fit", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "ollama", "--batch", "2", "--json")
    assert result.exit_code == 0, result.stderr
    assert (result.json()["tokens"], result.json()["batch"]) == (32768, 2)
    assert "OLLAMA_CONTEXT_LENGTH=32768" in result.json()["command"]["argv"]


def test_from_0_30_llama_cpps_rules_are_those_of_the_build_ollama_bundles() -> None:
    from kvcalc.engines import make_engine

    # ollama v0.30.0's LLAMA_CPP_VERSION file names llama.cpp b9452 (releases.LLAMA_CPP_BUILDS).
    engine, _ = make_engine("ollama@0.30.0")
    assert getattr(engine, "build") == 9452  # noqa: B009


def test_before_0_30_an_mla_model_is_refused_its_cache_layout_is_not_known() -> None:
    import pytest

    from kvcalc.api import estimate
    from kvcalc.errors import UsageError

    with pytest.raises(UsageError, match="which MLA cache it keeps"):
        estimate("deepseek-v2-lite", tokens=4096, engine="ollama@0.13")
    assert estimate("deepseek-v2-lite", tokens=4096, engine="ollama@0.30").total_bytes > 0


# --- real published Ollama logs (tests/fixtures/logs/ollama/, each citing its URL) ----------------------


def log_text(name: str) -> str:
    text = (LOGS / name).read_text()
    assert text.startswith("# source: https://github.com/")
    return text


def test_the_v0_5_4_log_llama_3_1_8b_with_four_parallel_slots() -> None:
    # v0.5.4-llama3.1-8b-parallel4.log: OLLAMA_NUM_PARALLEL=4, num_ctx 2048, flash_attn 0 (Ollama's runner
    # --ctx-size 8192 --parallel 4). One unified cache before v0.11 of n_ctx = pad(4 x 2,048, 32) = 8,192
    # cells; Llama 3.1 8B: 32 layers x 8 KV heads x 128, K and V f16: 32 x 8,192 x 2 x 1,024 x 2 B =
    # 1,073,741,824 B = 1,024 MiB, the log's "KV self size = 1024.00 MiB, K (f16): 512.00 MiB".
    log = log_text("v0.5.4-llama3.1-8b-parallel4.log")
    assert "(version 0.5.4-" in log and "--ctx-size 8192" in log and "--parallel 4" in log
    assert "KV self size  = 1024.00 MiB, K (f16):  512.00 MiB, V (f16):  512.00 MiB" in log
    est = api.estimate("llama-3.1-8b", tokens=2048, batch=4, engine="ollama@0.5.4")
    assert est.total_bytes == 32 * 8192 * 2 * 1024 * 2 == 1024 * 2**20


def test_the_v0_33_2_log_two_parallel_slots_on_llama_server_streams() -> None:
    # v0.33.2-ministral3-3b-parallel2.log: OLLAMA_NUM_PARALLEL=2, num_ctx 4096 (no VRAM: the 4,096 tier),
    # launched as llama-server -c 8192 -np 2 (llm/llama_server.go: -c NumCtx*numParallel). Not unified:
    # 2 streams of pad(8,192 / 2, 256) = 4,096 cells ("4096 cells, 26 layers, 2/2 seqs"); Ministral 3
    # 3B: 26 layers x 8 KV heads x 128, f16: 26 x 2 x 4,096 x 2 x 1,024 x 2 B = 872,415,232 B = 832 MiB.
    log = log_text("v0.33.2-ministral3-3b-parallel2.log")
    assert "(version 0.33.2)" in log and "-c 8192 -np 2" in log
    assert "size =  832.00 MiB (  4096 cells,  26 layers,  2/2 seqs)" in log
    layer = AttentionCache(kv_heads=8, k_head_dim=128, v_head_dim=128)
    engine, _ = make_engine("ollama@0.32")  # the last release kvcalc models: same launch line, same streams
    cells = engine.batch_slots(layer, 4096, 2, 0)
    assert cells == 2 * 4096
    assert 26 * cells * 2 * 1024 * 2 == 832 * 2**20


@pytest.mark.xfail(strict=True, raises=UsageError,
                   reason="kvcalc's Ollama releases stop at 0.32 (releases.LLAMA_CPP_BUILDS): 0.33.2, the "
                          "log's release, is refused rather than given 0.32's rules")  # fmt: skip
def test_the_v0_33_2_log_at_its_own_release() -> None:
    engine, _ = make_engine("ollama@0.33.2")
    layer = AttentionCache(kv_heads=8, k_head_dim=128, v_head_dim=128)
    assert 26 * engine.batch_slots(layer, 4096, 2, 0) * 2 * 1024 * 2 == 832 * 2**20


def test_a_one_slot_architecture_notes_that_its_batch_is_not_run() -> None:
    # server/sched.go v0.15.5 .. v0.32.15: lfm2 (kvcalc's lfm2 -> llama.cpp's 'lfm2') runs with numParallel = 1
    # whatever OLLAMA_NUM_PARALLEL says; at v0.15.4 it is not listed. llama-3.1-8b (llama) never is.
    warned = [n for n in api.estimate("lfm2-1.2b", tokens=4096, batch=4, engine="ollama").notes if "one slot" in n]
    assert len(warned) == 1 and warned[0].startswith("Ollama v0.32.0 runs lfm2 models")
    assert "OLLAMA_NUM_PARALLEL" in warned[0] and "a --batch above 1 is not what it runs" in warned[0]
    older = api.estimate("lfm2-1.2b", tokens=4096, batch=4, engine="ollama@0.15", options={"flash_attention": 1})
    assert not any("one slot" in n for n in older.notes)
    assert not any("one slot" in n for n in api.estimate("llama-3.1-8b", tokens=4096, engine="ollama").notes)
