"""llama.cpp's rules build by build (``--engine llama.cpp@bNNNN``): the MLA cache history (full
per-head K and V, then the latent as K beside a latent V, then the latent alone), cell padding (32
without flash attention, then 256), one unified stream, and the sliding-window cache. Each rule's
source is in src/kvcalc/engines/llamacpp/releases.py; every number is derived by hand beside it, or
read from a published log of that build (tests/fixtures/logs/llamacpp/, each citing its URL)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kvcalc
from kvcalc.engines import engine_version, make_engine
from kvcalc.engines.llamacpp import LlamaCpp, LlamaServer
from kvcalc.engines.llamacpp import releases as rel
from kvcalc.errors import UsageError

LOGS = Path(__file__).parents[2] / "fixtures" / "logs" / "llamacpp"
MIB = 1024 * 1024


def total(model: str, engine: str, tokens: int, batch: int = 1) -> int:
    return kvcalc.estimate(model, tokens=tokens, batch=batch, engine=engine).total_bytes


def log_mib(name: str) -> tuple[float, float, float]:
    """(total, K, V) MiB of a log's 'KV self size' line."""
    text = (LOGS / name).read_text()
    assert text.startswith("# source: https://github.com/")
    found = re.search(r"KV self size\s*=\s*([\d.]+) MiB, K \(f16\):\s*([\d.]+) MiB, V \(f16\):\s*([\d.]+) MiB", text)
    assert found is not None
    size, k, v = (float(x) for x in found.groups())
    return size, k, v


# --- the build a name asks for ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("llama.cpp", None),
        ("llama.cpp@b4905", (4905, 0, 0)),
        ("llamacpp@B5331", (5331, 0, 0)),
        ("llama-server@4905", (4905, 0, 0)),  # the tag's 'b' may be left off
        ("llama.cpp@b11312", (11312, 0, 0)),
        ("llama.cpp@b99999", (99999, 0, 0)),  # any later build: today's rules
    ],
)
def test_build_numbers_parse(name: str, version: tuple[int, int, int] | None) -> None:
    assert engine_version(name) == version


@pytest.mark.parametrize("name", ["llama.cpp@b4904", "llama.cpp@0.3", "llama.cpp@bxyz", "llama-server@b12.5"])
def test_builds_kvcalc_does_not_model_are_refused_naming_those_it_does(name: str) -> None:
    known = r"builds b4905 and later \(rules read at b4905, b5331, b11312; default b11312\)"
    with pytest.raises(UsageError, match=known):
        engine_version(name)


def test_vllm_versions_parse_as_before() -> None:
    assert engine_version("vllm@0.11") == (0, 11, 0)
    with pytest.raises(UsageError, match=r"supported: 0\.11"):
        engine_version("vllm@b4905")


def test_the_default_is_0c1e570s_build_and_changes_nothing() -> None:
    # A plain llama.cpp is b11312 (0c1e570, the llama.cpp of llama-cpp-python 0.3.36): the same engine.
    assert make_engine("llama.cpp")[0] == make_engine("llama.cpp@b11312")[0]
    assert LlamaCpp().build == LlamaServer().build == rel.CURRENT == 11312


def test_a_build_newer_than_the_rules_read_says_so() -> None:
    _, notes = make_engine("llama.cpp@b99999")
    assert notes == ["kvcalc's llama.cpp rules were read at b11312; b99999's later changes are not modelled"]


def test_at_build_gives_another_engine_a_builds_rules() -> None:
    # What Ollama or LM Studio call with the llama.cpp build they bundle.
    engine, notes = LlamaCpp.at_build(4905)
    assert isinstance(engine, LlamaCpp)
    assert (engine.build, engine.cell_padding, engine.unified) == (4905, 32, True)
    assert any("pads cells to 32" in n for n in notes)
    server, _ = LlamaServer.at_build(11312)
    assert server == LlamaServer()
    # The b5331 log's plain llama-server -c 16384 ran n_seq_max = 1: no 4 slots then.
    _, notes = LlamaServer.at_build(5331)
    assert "llama-server b5331 starts one slot without -np (not 4): --batch is its -np" in notes
    with pytest.raises(UsageError, match="older than kvcalc models"):
        LlamaCpp.at_build(4000)


# --- DeepSeek's MLA cache -----------------------------------------------------------------------


def test_mla_full_per_head_k_and_v_before_the_mla_cache() -> None:
    # DeepSeek-V2-Lite: 27 layers, 16 heads, qk_nope 128 + qk_rope 64 = 192, v_head_dim 128, kv_lora_rank 512.
    # b4905: K 16 x 192 + V 16 x 128 = 5,120 f16 elements = 10,240 B a layer; x 27 = 276,480 B a token;
    # 4,096 tokens (a multiple of 32) = 1,132,462,080 B.
    assert total("deepseek-v2-lite", "llama.cpp@b4905", 4096) == 27 * 10_240 * 4096 == 1_132_462_080
    # b5331: K 512 + 64 = 576 and V 512 = 1,088 elements = 2,176 B a layer x 27 x 4,096 = 240,648,192 B.
    assert total("deepseek-v2-lite", "llama.cpp@b5331", 4096) == 27 * 2_176 * 4096 == 240_648_192
    # Today (default, b11312): K 576 only = 1,152 B a layer x 27 x 4,096 = 127,401,984 B.
    assert total("deepseek-v2-lite", "llama.cpp", 4096) == 27 * 1_152 * 4096 == 127_401_984


@pytest.mark.parametrize("build", [5000, 6000, 8000])
def test_mla_builds_between_the_known_ones_are_refused(build: int) -> None:
    # PR #12801 changed the cache between b4905 and b5331, PR #19067 between b5602 and b8390; padding
    # also changed in the second window, which b6000 and b8000 hit first.
    with pytest.raises(UsageError, match=f"b{build}"):
        total("deepseek-v2-lite", f"llama.cpp@b{build}", 4096)


def test_mla_k_and_v_types_may_differ_before_the_v_less_cache() -> None:
    # b5331: the latent K row (576) and V row (512) each take their own type: -ctk q8_0 -ctv f16 gives
    # K 576 / 32 x 34 = 612 B and V 512 x 2 = 1,024 B a layer; 27 layers x 4,096 cells x 1,636 B.
    serving = kvcalc.Serving("llama.cpp@b5331", k_dtype="q8_0", v_dtype="f16")
    est = kvcalc.estimate("deepseek-v2-lite", tokens=4096, serving=serving)
    assert est.total_bytes == 27 * 4096 * (612 + 1024) == 180_928_512
    # Today the V-less cache refuses K and V types that differ ('model does not support ...').
    with pytest.raises(UsageError, match="different K"):
        kvcalc.estimate("deepseek-v2-lite", tokens=4096, serving=kvcalc.Serving("llama.cpp", k_dtype="q8_0",
                                                                                v_dtype="f16"))  # fmt: skip


def test_b4905_log_deepseek_r1_full_per_head_cache() -> None:
    # tests/fixtures/logs/llamacpp/b4905-deepseek-r1-full-kv.log: llama-perplexity -c 512 runs 4
    # sequences (n_seq_max 4) in one unified cache of n_ctx 2,048 cells; 61 layers of 128 heads,
    # K 128 x 192 x 2 B = 49,152 B, V 128 x 128 x 2 B = 32,768 B per layer and cell:
    # K 49,152 x 61 x 2,048 = 5,856 MiB, V 32,768 x 61 x 2,048 = 3,904 MiB, 9,760 MiB in all.
    size, k, v = log_mib("b4905-deepseek-r1-full-kv.log")
    assert (size, k, v) == (9760.0, 5856.0, 3904.0)
    assert (k * MIB, v * MIB) == (49_152 * 61 * 2048, 32_768 * 61 * 2048)
    # DeepSeek-R1 has DeepSeek-V3's attention: the deepseek-v3 preset stands in for it.
    assert total("deepseek-v3", "llama.cpp@b4905", 512, batch=4) == size * MIB


def test_b5331_log_deepseek_v3_latent_beside_a_latent_v() -> None:
    # tests/fixtures/logs/llamacpp/b5331-deepseek-v3-latent-and-v.log: llama-server -c 16384 -fa:
    # K rows of 576 (n_embd_k_gqa) and V rows of 512 (n_embd_v_gqa), f16, 61 layers, 16,384 cells:
    # K 576 x 2 x 61 x 16,384 = 1,098 MiB, V 512 x 2 x 61 x 16,384 = 976 MiB, 2,074 MiB in all. The
    # log ran with -fa (padding 256); 16,384 is a multiple of 32 and 256, so kvcalc's no-FA default
    # pads it the same.
    size, k, v = log_mib("b5331-deepseek-v3-latent-and-v.log")
    assert (size, k, v) == (2074.0, 1098.0, 976.0)
    assert (k * MIB, v * MIB) == (576 * 2 * 61 * 16_384, 512 * 2 * 61 * 16_384)
    assert total("deepseek-v3", "llama.cpp@b5331", 16_384) == size * MIB


# --- cell padding and streams -------------------------------------------------------------------


def test_cells_padded_to_32_then_256() -> None:
    # Llama 3.1 8B: 32 layers x 8 heads x (128 + 128) x 2 B = 131,072 B a cell.
    # b4905 (no -fa): 1,100 tokens pad to 35 x 32 = 1,120 cells; b11312: to 5 x 256 = 1,280 cells.
    assert total("llama-3.1-8b", "llama.cpp@b4905", 1100) == 1120 * 131_072 == 146_800_640
    assert total("llama-3.1-8b", "llama.cpp", 1100) == 1280 * 131_072 == 167_772_160


def test_one_unified_stream_before_per_sequence_streams() -> None:
    # 3 sequences of 1,000 tokens. b4905: one cache of pad(3,000, 32) = 3,008 cells.
    # b11312 (-np 3, streams): n_ctx pad(3,000, 256) = 3,072, each stream pad(3,072 / 3, 256) = 1,024 cells.
    assert total("llama-3.1-8b", "llama.cpp@b4905", 1000, batch=3) == 3008 * 131_072
    assert total("llama-3.1-8b", "llama.cpp", 1000, batch=3) == 3 * 1024 * 131_072


def test_a_quantized_v_needs_flash_attention_at_old_builds() -> None:
    # b4905's llama_init_from_model: "V cache quantization requires flash_attn" (-fa off by default);
    # a quantized K alone is taken: 1,100 tokens pad to 1,120 cells; q8_0 K rows of 1,024 elements =
    # 32 blocks x 34 B = 1,088 B, f16 V rows 2,048 B: 32 x (1,088 + 2,048) x 1,120 = 112,394,240 B.
    with pytest.raises(UsageError, match="only with flash attention"):
        kvcalc.estimate("llama-3.1-8b", tokens=1100, kv_dtype="q8_0", engine="llama.cpp@b4905")
    serving = kvcalc.Serving("llama.cpp@b4905", k_dtype="q8_0", v_dtype="f16")
    est = kvcalc.estimate("llama-3.1-8b", tokens=1100, serving=serving)
    assert est.total_bytes == 32 * (1088 + 2048) * 1120 == 112_394_240


def test_flags_a_build_lacked_are_refused() -> None:
    with pytest.raises(UsageError, match="b4905 has no --kv-unified"):
        make_engine("llama.cpp@b4905", kv_unified=True)
    with pytest.raises(UsageError, match="b4905 has no --swa-full"):
        make_engine("llama.cpp@b4905", swa_full=True)


# --- the sliding-window cache -------------------------------------------------------------------


def test_sliding_layers_held_full_cells_before_the_swa_cache() -> None:
    # Gemma 2 9B: 42 layers alternating sliding (window 4,096) and full, 8 heads x (256 + 256) x 2 B =
    # 8,192 B a cell. 8,192 tokens. b4905: every layer 8,192 cells: 42 x 8,192 x 8,192 = 2,818,572,288.
    assert total("gemma-2-9b", "llama.cpp@b4905", 8192) == 42 * 8192 * 8192 == 2_818_572_288
    # b11312: sliding layers pad(min(8,192, 4,096 + 512), 256) = 4,608 cells:
    # 21 x 8,192 x (4,608 + 8,192) = 2,202,009,600.
    assert total("gemma-2-9b", "llama.cpp", 8192) == 21 * 8192 * (4608 + 8192) == 2_202_009_600


@pytest.mark.parametrize("build", [5331, 5602])
def test_swa_builds_between_the_known_ones_are_refused(build: int) -> None:
    # PR #13194 (the SWA cache) landed after b4905, first sized min(size, pad(n_swa x n_seq + n_batch, 32)),
    # resized to today's rule by PR #17046 (there by b8390): neither build can be placed for Gemma 2.
    with pytest.raises(UsageError, match="sliding-window cache"):
        total("gemma-2-9b", f"llama.cpp@b{build}", 8192)


# --- gpt-oss's sliding-window cache in published logs of b8164 and b8193 -------------------------------


def swa_log_mib(name: str) -> list[tuple[float, int, int]]:
    """(MiB, cells, layers) of each 'llama_kv_cache: size =' line of a log, non-SWA cache first."""
    text = (LOGS / name).read_text()
    assert text.startswith("# source: https://github.com/")
    found = re.findall(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells,\s*(\d+) layers", text)
    return [(float(m), int(c), int(n)) for m, c, n in found]


def test_b8164_log_gpt_oss_sliding_window_cache_of_one_sequence() -> None:
    # tests/fixtures/logs/llamacpp/b8164-gpt-oss-20b-swa-one-seq.log: llama-completion, n_ctx 131,072, one
    # sequence, n_ubatch 512. gpt-oss-20b: 24 layers alternating sliding (window 128) and full, 8 KV heads
    # x 64, f16: 8 x 64 x 2 (K, V) x 2 B = 2,048 B a layer and cell. Full layers: 12 x 131,072 x 2,048 =
    # 3,072 MiB; sliding: pad(min(131,072, 128 x 1 + 512), 256) = 768 cells, 12 x 768 x 2,048 = 18 MiB.
    assert swa_log_mib("b8164-gpt-oss-20b-swa-one-seq.log") == [(3072.0, 131_072, 12), (18.0, 768, 12)]
    assert (3072 + 18) * MIB == 12 * 2048 * (131_072 + 768) == 3_240_099_840
    # The build's rules as kvcalc has them from b8390 (the first build it places after the padding
    # change) give the log's bytes.
    assert total("gpt-oss-20b", "llama.cpp@b8390", 131_072) == 3_240_099_840


def test_b8193_log_gpt_oss_four_auto_slots_widen_the_sliding_window_cache() -> None:
    # tests/fixtures/logs/llamacpp/b8193-gpt-oss-20b-server-auto-np4.log: llama-server -c 32768 with no
    # -np: 4 slots sharing one unified cache ("n_parallel = 4 and kv_unified = true"). Full layers:
    # 12 x 32,768 x 2,048 B = 768 MiB; sliding: pad(min(32,768, 128 x 4 + 512), 256) = 1,024 cells,
    # 12 x 1,024 x 2,048 B = 24 MiB. kvcalc's llama-server with --batch 4 --tokens 8192 is that server.
    assert swa_log_mib("b8193-gpt-oss-20b-server-auto-np4.log") == [(768.0, 32_768, 12), (24.0, 1024, 12)]
    assert (768 + 24) * MIB == 12 * 2048 * (32_768 + 1024) == 830_472_192
    assert total("gpt-oss-20b", "llama-server@b8390", 8192, batch=4) == 830_472_192


# These two logs place the padding, sliding-window and streams changes at or before b8164
# (releases.py), so kvcalc models their own builds.
@pytest.mark.parametrize(
    ("engine", "tokens", "batch", "expected"),
    [("llama.cpp@b8164", 131_072, 1, 3_240_099_840), ("llama-server@b8193", 8192, 4, 830_472_192)],
)
def test_gpt_oss_logs_at_their_own_builds(engine: str, tokens: int, batch: int, expected: int) -> None:
    assert total("gpt-oss-20b", engine, tokens, batch=batch) == expected
