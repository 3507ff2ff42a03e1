"""GGUF files as MODEL: kvcalc's own header reader (kvcalc.inputs.gguf), the metadata -> config mapping,
and the weights from the tensor infos.

Every file here is a real GGUF written by the gguf package (the one llama.cpp's converter uses), with
metadata only or a few tiny tensors. The cache bytes are checked against a hand derivation (the
arithmetic is in the comments: 2 for K and V, layers x KV heads x head dim x 2 bytes of f16 x
tokens), and against the same geometry read from the matching preset: the llama.cpp probe's
``gguf_plan`` writes what convert_hf_to_gguf.py writes for the preset, and reading that file back
must give the same per-layer cache (a round trip).
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvcalc.api import estimate, load_model, open_model
from kvcalc.errors import KvcalcError, SourceError, StrictError
from kvcalc.inputs.gguf import GGML_TYPES, read_header
from kvcalc.inputs.source import resolve
from kvcalc.inputs.weights import weights_bytes
from kvcalc.spec import AttentionCache, LatentCache
from tests.helpers.gguf_files import attention, gguf_file, total

gguf: Any = pytest.importorskip("gguf")


def test_gqa_llama(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "llama.gguf", "llama", attention(8, 2, 64, 4))
    # 2 (K, V) x 4 layers x 2 KV heads x 64 dims x 2 B x 1000 tokens
    assert total(path, 1000) == 2 * 4 * 2 * 64 * 2 * 1000 == 2_048_000
    # llama.cpp: n_ctx padded to 256 -> 1024 cells in every layer
    assert total(path, 1000, engine="llama.cpp") == 2 * 4 * 2 * 64 * 2 * 1024
    spec = load_model(str(path))
    assert spec.model_type == "llama" and spec.query_heads == 8 and spec.max_context == 8192


def test_qwen2_head_dim_from_embedding(tmp_path: Path) -> None:
    # No key_length (as older conversions wrote): llama.cpp's n_embd_head_k = n_embd / n_head = 256 / 4.
    keys = {"block_count": 3, "embedding_length": 256, "attention.head_count": 4, "attention.head_count_kv": 2}
    path = gguf_file(tmp_path / "qwen2.gguf", "qwen2", keys)
    # 2 x 3 layers x 2 KV heads x 64 x 2 B x 100 tokens
    assert total(path, 100) == 2 * 3 * 2 * 64 * 2 * 100 == 153_600


def test_gemma2_alternating_window(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "gemma2.gguf", "gemma2", attention(8, 4, 32, 4, **{"attention.sliding_window": 64}))
    caches = load_model(str(path)).caches
    assert [c.window for c in caches if isinstance(c, AttentionCache)] == [64, None, 64, None]
    # full layers 1, 3: 2 x 2 x 4 x 32 x 2 B x 1000; sliding layers 0, 2 keep 64 tokens: 2 x 2 x 4 x 32 x 2 B x 64
    assert total(path, 1000) == 2 * 2 * 4 * 32 * 2 * 1000 + 2 * 2 * 4 * 32 * 2 * 64 == 1_089_536


def test_gpt_oss_window_and_sinks(tmp_path: Path) -> None:
    # Attention sinks are one F32 weight per head and layer: weights, nothing cached.
    sinks = tuple((f"blk.{i}.attn_sinks.weight", (8,), "F32") for i in range(4))
    path = gguf_file(
        tmp_path / "gpt-oss.gguf", "gpt-oss", attention(8, 2, 64, 4, **{"attention.sliding_window": 128}), sinks
    )
    spec = load_model(str(path))
    assert spec.model_type == "gpt_oss" and not spec.warnings
    # full layers 1, 3: 2 x 2 x 2 x 64 x 2 B x 1000; sliding 0, 2: 2 x 2 x 2 x 64 x 2 B x 128
    assert total(path, 1000) == 2 * 2 * 2 * 64 * 2 * 1000 + 2 * 2 * 2 * 64 * 2 * 128 == 1_155_072
    assert weights_bytes(str(path), spec_dtype=None) == (4 * 8 * 4, "GGUF tensor infos")


def test_deepseek2_mla(tmp_path: Path) -> None:
    keys = {
        "block_count": 2, "attention.head_count": 4, "attention.head_count_kv": 1,
        "attention.kv_lora_rank": 64, "rope.dimension_count": 16,
        "attention.key_length": 64 + 16, "attention.value_length": 64,
        "attention.key_length_mla": 48, "attention.value_length_mla": 32, "attention.q_lora_rank": 96,
    }  # fmt: skip
    path = gguf_file(tmp_path / "ds.gguf", "deepseek2", keys)
    spec = load_model(str(path))
    assert spec.caches == (LatentCache(latent_dim=64, rope_dim=16, k_head_dim=48, v_head_dim=32),) * 2
    assert not spec.warnings  # q_lora_rank sizes the query projection only
    # one latent of kv_lora_rank + rope dims per token and layer: 2 layers x (64 + 16) x 2 B x 1000
    assert total(path, 1000) == 2 * (64 + 16) * 2 * 1000 == 320_000


def test_deepseek2_mla_before_the_rework(tmp_path: Path) -> None:
    # Older conversions: key_length = qk_nope + qk_rope, value_length = v_head_dim, no *_mla keys.
    keys = {
        "block_count": 2, "attention.head_count": 4, "attention.kv_lora_rank": 64, "rope.dimension_count": 16,
        "attention.key_length": 48, "attention.value_length": 32,
    }  # fmt: skip
    spec = load_model(str(gguf_file(tmp_path / "ds-old.gguf", "deepseek2", keys)))
    assert spec.caches == (LatentCache(latent_dim=64, rope_dim=16, k_head_dim=48, v_head_dim=32),) * 2


def test_llama4_chunked(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "llama4.gguf", "llama4", attention(8, 2, 64, 4))
    caches = load_model(str(path)).caches
    assert [c.chunk for c in caches if isinstance(c, AttentionCache)] == [8192, 8192, 8192, None]
    # chunked layers 0-2 keep one 8192-token chunk; layer 3 all 10,000 tokens; 2 x 2 x 64 x 2 B per token
    assert total(path, 10_000) == 3 * 2 * 2 * 64 * 2 * 8192 + 2 * 2 * 64 * 2 * 10_000 == 17_702_912
    # sliding_window 0: no chunks (conversion/llama.py for a Llama 4 without chunked layers)
    flat = gguf_file(tmp_path / "llama4-flat.gguf", "llama4", attention(8, 2, 64, 4, **{"attention.sliding_window": 0}))
    assert total(flat, 10_000) == 4 * 2 * 2 * 64 * 2 * 10_000


def test_per_layer_kv_heads(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "var.gguf", "llama", attention(8, [2, 4, 2], 64, 3))
    assert [c.kv_heads for c in load_model(str(path)).caches if isinstance(c, AttentionCache)] == [2, 4, 2]
    # 2 x (2 + 4 + 2) KV heads x 64 x 2 B x 10 tokens
    assert total(path, 10) == 2 * 8 * 64 * 2 * 10
    hybrid = gguf_file(tmp_path / "hybrid.gguf", "llama", attention(8, [2, 0, 2], 64, 3))
    with pytest.raises(SourceError, match=r"head_count_kv gives some layers 0 KV heads"):
        load_model(str(hybrid))


# --- round trip: preset -> the probe's GGUF -> read back ---------------------------------------------------

ROUND_TRIP = [
    "llama-3.1-8b", "qwen2.5-7b", "qwen3-8b", "phi-3-mini", "gemma-2-9b", "gemma-3-27b", "gpt-oss-20b",
    "llama-4-scout", "deepseek-v3", "deepseek-v2-lite",
]  # fmt: skip


@pytest.mark.parametrize("preset", ROUND_TRIP)
def test_round_trip(preset: str, tmp_path: Path) -> None:
    from kvcalc.engines.llamacpp.probe import gguf_plan, write_gguf

    spec = load_model(preset)
    path = tmp_path / "model.gguf"
    write_gguf(gguf_plan(spec, 4096), path)
    back = load_model(str(path))
    assert back.caches == spec.caches and back.layers == spec.layers and back.query_heads == spec.query_heads
    assert not back.warnings
    for engine in ("theoretical", "llama.cpp"):
        want = estimate(preset, tokens=20_000, batch=2, kv_dtype="fp16", engine=engine).total_bytes
        assert total(path, 20_000, engine=engine, batch=2) == want


def test_mistral_carries_no_window(tmp_path: Path) -> None:
    # MistralForCausalLM converts as LlamaModel, which writes no window: llama.cpp keeps every token,
    # and so does the file; the same figure as the preset under llama.cpp's rules.
    from kvcalc.engines.llamacpp.probe import gguf_plan, write_gguf

    path = tmp_path / "mistral.gguf"
    write_gguf(gguf_plan(load_model("mistral-7b-v0.1"), 4096), path)
    assert all(isinstance(c, AttentionCache) and c.window is None for c in load_model(str(path)).caches)
    want = estimate("mistral-7b-v0.1", tokens=8192, kv_dtype="fp16", engine="llama.cpp").total_bytes
    assert total(path, 8192, engine="llama.cpp") == want


# --- weights from tensor infos -----------------------------------------------------------------------------


def test_weights_by_type(tmp_path: Path) -> None:
    tensors = (
        ("token_embd.weight", (64, 4), "F16"),  # 256 elements x 2 B = 512
        ("blk.0.attn_q.weight", (64, 4), "Q8_0"),  # 256 / 32 = 8 blocks x 34 B = 272
        ("blk.0.attn_k.weight", (256, 2), "Q4_K"),  # 512 / 256 = 2 blocks x 144 B = 288
        ("output_norm.weight", (64, 4), "F32"),  # 256 x 4 B = 1024
    )
    path = gguf_file(tmp_path / "w.gguf", "llama", attention(8, 2, 64, 1), tensors)
    assert [t.nbytes for t in read_header(path).tensors] == [512, 272, 288, 1024]
    assert [int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors] == [512, 272, 288, 1024]
    assert weights_bytes(str(path), spec_dtype=None) == (512 + 272 + 288 + 1024, "GGUF tensor infos")
    assert load_model(str(path)).dtype is not None and load_model(str(path)).dtype.name == "fp16"  # token_embd


def test_every_type_matches_the_gguf_package() -> None:
    sizes = {int(t): s for t, s in gguf.GGML_QUANT_SIZES.items()}
    # Every type the installed package knows, kvcalc knows with the same block; kvcalc may know newer
    # ones (from ggml.c) that an older package lacks. Q8_1 (9) excepted: ggml-common.h asserts
    # sizeof(block_q8_1) == 2 halves + 32 = 36, while gguf-py builds differ (36 or the old 40); it is
    # an intermediate type no file stores.
    assert GGML_TYPES[9][1:] == (32, 36)
    assert {i: (b, s) for i, (_, b, s) in GGML_TYPES.items() if i in sizes and i != 9} == {
        i: v for i, v in sizes.items() if i != 9
    }
    assert set(GGML_TYPES) >= set(sizes)


def test_fit_uses_the_tensor_bytes(tmp_path: Path) -> None:
    from kvcalc.api import Capacity, fit

    path = gguf_file(tmp_path / "f.gguf", "llama", attention(8, 2, 64, 1), (("token_embd.weight", (256, 4), "Q4_K"),))
    report = fit(str(path), capacity=Capacity(gpu_memory=2**34), engine="theoretical", tokens=1024)
    # 1024 elements of Q4_K: 4 blocks x 144 B
    assert [(line.bytes, line.detail) for line in report.budget.lines if line.label == "- weights"] == [
        (4 * 144, "GGUF tensor infos")
    ]


def test_split_gguf(tmp_path: Path) -> None:
    first = gguf_file(
        tmp_path / "m-00001-of-00002.gguf", "llama",
        {**attention(8, 2, 64, 1), "split.no": 0, "split.count": 2}, (("token_embd.weight", (64, 4), "F16"),),
    )  # fmt: skip
    second = tmp_path / "m-00002-of-00002.gguf"
    gguf_file(second, "llama", {"split.no": 1, "split.count": 2}, (("output.weight", (32, 4), "Q8_0"),))
    # 512 B of F16 in the first shard, 4 blocks x 34 B of Q8_0 in the second
    assert weights_bytes(str(first), spec_dtype=None) == (512 + 136, "GGUF tensor infos, 2 shards")
    with pytest.raises(SourceError, match=r"shard 2 of 2 of a split GGUF: give the first, m-00001-of-00002.gguf"):
        resolve(str(second))
    second.unlink()
    with pytest.raises(SourceError, match=r"shard m-00002-of-00002.gguf is not beside"):
        weights_bytes(str(first), spec_dtype=None)


# --- what is not modelled, and what is refused ---------------------------------------------------------------


def test_unmapped_attention_key_warns(tmp_path: Path) -> None:
    path = gguf_file(
        tmp_path / "swa.gguf",
        "gemma2",
        attention(8, 4, 32, 2, **{"attention.sliding_window": 64, "attention.key_length_swa": 16}),
    )
    spec = load_model(str(path))
    assert any("gemma2.attention.key_length_swa" in w for w in spec.warnings)
    with pytest.raises(StrictError, match="key_length_swa"):
        open_model(str(path), strict=True)


def test_magic_without_suffix(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "model.bin", "llama", attention(8, 2, 64, 2))
    assert resolve(str(path)).config["model_type"] == "llama"


def _header(version: int = 3, arch: bytes = b"llama", ggml_type: int = 0) -> bytes:
    def string(s: bytes) -> bytes:
        return struct.pack("<Q", len(s)) + s

    kv = string(b"general.architecture") + struct.pack("<I", 8) + string(arch)
    tensor = string(b"t") + struct.pack("<I", 1) + struct.pack("<Q", 32) + struct.pack("<IQ", ggml_type, 0)
    return b"GGUF" + struct.pack("<IQQ", version, 1, 1) + kv + tensor


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"GGML" + bytes(20), r"is not a GGUF file \(no 'GGUF' magic"),
        (_header()[:30], r"truncated GGUF header"),
        (_header(version=1), r"GGUF version 1 is not supported; kvcalc reads versions 2 and 3"),
        (_header(version=3 << 24), r"big-endian"),
        (_header(ggml_type=99), r"tensor t has unknown ggml type id 99"),
        (_header(arch=b"rwkv7"), r"GGUF architecture 'rwkv7' is not supported \(kvcalc reads arcee, cohere2"),
    ],
)
def test_refused(data: bytes, message: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(SourceError, match=message) as info:
        load_model(str(path))
    assert "\n" not in str(info.value)


def test_cli_estimate_stays_light(tmp_path: Path) -> None:
    # The reader is kvcalc's own: neither the gguf package nor numpy is imported to read a header.
    path = gguf_file(tmp_path / "cli.gguf", "llama", attention(8, 2, 64, 4))
    code = (
        "import sys, json, contextlib, io\n"
        "from kvcalc.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try: main(['estimate', sys.argv[1], '--tokens', '1000', '--kv-dtype', 'fp16', '--json'])\n"
        "    except SystemExit: pass\n"
        "mods = [m for m in ('gguf', 'numpy', 'torch') if m in sys.modules]\n"
        "print(json.dumps({'out': out.getvalue(), 'mods': mods}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["mods"] == []
    assert "2048000" in result["out"].replace(",", "").replace("_", "")


def test_truncated_real_file(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "full.gguf", "llama", attention(8, 2, 64, 4), (("token_embd.weight", (64, 4), "F32"),))
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 4])
    with pytest.raises(KvcalcError, match="truncated GGUF header"):
        load_model(str(cut))


def test_layer_weights(tmp_path: Path) -> None:
    from kvcalc.inputs.gguf import layer_weights

    tensors = (
        ("token_embd.weight", (64, 10), "F16"),  # 640 x 2 B = 1280, input layer
        ("blk.0.attn_q.weight", (64, 4), "Q8_0"),  # 8 blocks x 34 B = 272
        ("blk.1.attn_q.weight", (256, 1), "Q4_K"),  # 1 block x 144 B
        ("output_norm.weight", (64,), "F32"),  # 256 B, output layer
    )
    path = gguf_file(tmp_path / "lw.gguf", "llama", attention(8, 2, 64, 2), tensors)
    lw = layer_weights(path)
    # no output.weight: the tied head is a copy of token_embd with the output layer (1280 + 256)
    assert (lw.input, lw.layers, lw.output, lw.exact) == (1280, (272, 144), 1280 + 256, True)
    untied = gguf_file(
        tmp_path / "lw2.gguf", "llama", attention(8, 2, 64, 2), (*tensors, ("output.weight", (64, 10), "Q8_0"))
    )
    # output.weight: 640 / 32 = 20 blocks x 34 B = 680
    assert layer_weights(untied).output == 256 + 680
