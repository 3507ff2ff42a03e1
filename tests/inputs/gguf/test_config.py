"""GGUF files of more llama.cpp architectures (issue 13): ``falcon``, ``gemma`` (Gemma 1), ``phi2``,
``gpt2``, ``starcoder`` (GPT-BigCode), ``command-r`` (Cohere v1), ``olmo2`` (OLMo 2, and OLMo 3's
sliding layers), ``exaone`` (EXAONE 3), ``glm4``, ``glm4moe``, ``qwen3next`` (Qwen3-Next: full
attention every fourth layer, gated delta net on the others) and ``nemotron_h`` (Nemotron-H: Mamba-2,
attention and MLP-only layers), ``falcon-h1`` (attention and a Mamba-2 mixer in every layer) and
``gemma3n`` (sliding layers; the last layers reuse earlier K/V), read by ``kvcalc.inputs.gguf.gguf_config``.

Each file holds the keys convert_hf_to_gguf.py writes for the architecture (ggml-org/llama.cpp,
read at the commits named: conversion/falcon.py @ 5535795b FalconModel, conversion/gemma.py @
2bbcf7fc GemmaModel, conversion/phi.py @ 051139f5 Phi2Model, conversion/gpt2.py @ 5535795b
GPT2Model, conversion/starcoder.py @ 5535795b StarCoderModel, conversion/command_r.py @ 00487aad
CommandR2Model (TextModel's keys plus logit_scale and rope scaling "none"), conversion/olmo.py @
051139f5 Olmo2Model, conversion/exaone.py @ 051139f5 ExaoneModel, conversion/glm.py @ 7bca1fd9
Glm4Model and Glm4MoeModel, conversion/qwen.py @ 03173d5e Qwen3NextModel, conversion/nemotron.py @
7bca1fd9 NemotronHModel, conversion/falcon_h1.py @ 7bca1fd9 FalconH1Model, conversion/gemma.py
@ 2bbcf7fc Gemma3NModel). Three checks:

- kvcalc's bytes against a hand derivation (the arithmetic is in the comments: 2 for K and V,
  layers x KV heads x head dim x 2 B of f16 x tokens);
- the round trip where a preset exists (falcon-7b, falcon-40b, gpt2): the keys the converter would
  write for the preset's config read back to the preset's per-layer caches and the same estimates;
- the real llama.cpp (llama-cpp-python 0.3.36 = llama.cpp 0c1e570): ``api.probe_llamacpp`` hands it
  the file's own metadata and every KV cache it makes must equal kvcalc's ``--engine llama.cpp``
  estimate byte for byte (skipped when llama_cpp is not installed). qwen3next, nemotron_h and
  falcon-h1, recurrent hybrids, are run by the probe's child process (tests.helpers.llama_cpp):
  their K, V, R and S bytes are rebuilt from what llama.cpp printed (cells, layers placed, widths),
  must print as it printed them and sum to kvcalc's estimate, on the same layers.

The files and the converters' keys are in tests.helpers.gguf_models (``ATTENTION_FILES``,
``qwen3next_keys``, ``nemotron_h_keys``, ``falcon_h1_keys``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.api import estimate, load_model
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.errors import SourceError
from kvcalc.inputs.presets import get_preset
from kvcalc.spec import AttentionCache, StateCache
from tests.conftest import assert_one_line_error
from tests.helpers.commands import FIT
from tests.helpers.cwd import here_absolute  # noqa: F401  (the fixture "here")
from tests.helpers.gguf_files import F32, U32, Keys, attention, general, gguf_file, tokenizer, total, typed_gguf_file
from tests.helpers.gguf_models import (
    ATTENTION_FILES,
    SMALL_FH,
    SMALL_NEXT,
    SMALL_NH,
    falcon_h1_keys,
    nemotron_h_keys,
    qwen3next_keys,
)
from tests.helpers.llama_cpp import (
    CONTEXT_WORKLOADS,
    INFO,
    KV_LAYER,
    PROBE_WORKLOADS,
    RS_LAYER,
    needs_llama_cpp,
    per_layer,
    run_llama_cpp,
)

gguf: Any = pytest.importorskip("gguf")


def file_of(name: str, tmp_path: Path) -> Path:
    arch, keys = ATTENTION_FILES[name]
    return typed_gguf_file(tmp_path / f"{name}.gguf", arch, keys)


# --- by hand ---------------------------------------------------------------------------------------------

# name -> (HF model_type read, layers, KV heads, head dim, bytes of 1000 tokens)
HAND: dict[str, tuple[str, int, int, int, int]] = {
    # 2 (K, V) x 3 layers x 1 KV head x 64 x 2 B x 1000 tokens
    "falcon": ("falcon", 3, 1, 64, 2 * 3 * 1 * 64 * 2 * 1000),
    # 2 x 2 layers x 2 KV heads x 64 x 2 B x 1000
    "falcon grouped": ("falcon", 2, 2, 64, 2 * 2 * 2 * 64 * 2 * 1000),
    # 2 x 3 layers x 1 KV head x 128 (key_length) x 2 B x 1000
    "gemma": ("gemma", 3, 1, 128, 2 * 3 * 1 * 128 * 2 * 1000),
    # 2 x 2 layers x 4 KV heads x 80 x 2 B x 1000
    "phi2": ("phi", 2, 4, 80, 2 * 2 * 4 * 80 * 2 * 1000),
    # 2 x 2 layers x 3 KV heads (= heads) x 64 x 2 B x 1000
    "gpt2": ("gpt2", 2, 3, 64, 2 * 2 * 3 * 64 * 2 * 1000),
    # 2 x 2 layers x 1 KV head x 64 x 2 B x 1000
    "starcoder": ("gpt_bigcode", 2, 1, 64, 2 * 2 * 1 * 64 * 2 * 1000),
    # 2 x 2 layers x 2 KV heads x 64 x 2 B x 1000
    "command-r": ("cohere", 2, 2, 64, 2 * 2 * 2 * 64 * 2 * 1000),
    # 2 x 3 layers x 2 KV heads x 64 x 2 B x 1000
    "olmo2": ("olmo2", 3, 2, 64, 2 * 3 * 2 * 64 * 2 * 1000),
    # full layer 3: 2 x 2 x 64 x 2 B x 1000; sliding layers 0-2 keep 128 tokens: 3 x 2 x 2 x 64 x 2 B x 128
    "olmo3": ("olmo2", 4, 2, 64, 2 * 2 * 64 * 2 * 1000 + 3 * 2 * 2 * 64 * 2 * 128),
    # 2 x 2 layers x 2 KV heads x 64 x 2 B x 1000
    "exaone": ("exaone", 2, 2, 64, 2 * 2 * 2 * 64 * 2 * 1000),
    "glm4": ("glm4", 2, 2, 64, 2 * 2 * 2 * 64 * 2 * 1000),
    # 2 x 3 layers x 2 KV heads x 128 x 2 B x 1000
    "glm4moe": ("glm4_moe", 3, 2, 128, 2 * 3 * 2 * 128 * 2 * 1000),
}


@pytest.mark.parametrize("name", list(HAND))
def test_hand_derived(name: str, tmp_path: Path) -> None:
    model_type, layers, kv, dim, want = HAND[name]
    path = file_of(name, tmp_path)
    spec = load_model(str(path))
    assert spec.model_type == model_type and spec.layers == layers and not spec.warnings, spec.warnings
    caches = [c for c in spec.caches if isinstance(c, AttentionCache)]
    assert len(caches) == layers and {(c.kv_heads, c.k_head_dim, c.v_head_dim) for c in caches} == {(kv, dim, dim)}
    assert total(path, 1000) == want


def test_hand_figures() -> None:
    figures = [HAND[n][4] for n in ("falcon", "gemma", "phi2", "gpt2", "starcoder", "olmo3")]
    assert figures == [768_000, 1_536_000, 2_560_000, 1_536_000, 512_000, 708_608]


def test_falcon_grouped_heads_are_expanded_by_transformers(tmp_path: Path) -> None:
    # transformers' Falcon (new_decoder_architecture) caches K/V broadcast to all 8 query heads:
    # 2 x 2 layers x 8 heads x 64 x 2 B x 1000; llama.cpp keeps the 2 grouped heads (1024 cells).
    path = file_of("falcon grouped", tmp_path)
    assert total(path, 1000, engine="transformers") == 2 * 2 * 8 * 64 * 2 * 1000 == 4_096_000
    assert total(path, 1000, engine="llama.cpp") == 2 * 2 * 2 * 64 * 2 * 1024 == 1_048_576


def test_olmo3_pattern(tmp_path: Path) -> None:
    caches = load_model(str(file_of("olmo3", tmp_path))).caches
    assert [c.window for c in caches if isinstance(c, AttentionCache)] == [128, 128, 128, None]


def test_starcoder_with_more_kv_heads(tmp_path: Path) -> None:
    # StarCoderModel always writes 1; a file saying 2 is read as 2, as llama.cpp reads it (not as
    # GPTBigCodeConfig's multi_query default of one K/V head).
    arch, keys = ATTENTION_FILES["starcoder"]
    path = typed_gguf_file(tmp_path / "sc2.gguf", arch, {**keys, "attention.head_count_kv": (U32, 2)})
    assert {c.kv_heads for c in load_model(str(path)).caches if isinstance(c, AttentionCache)} == {2}
    # 2 x 2 layers x 2 KV heads x 64 x 2 B x 1000
    assert total(path, 1000) == 2 * 2 * 2 * 64 * 2 * 1000


# --- round trip: preset -> the converter's keys -> read back -------------------------------------------------


def _falcon_keys(hf: dict[str, Any]) -> Keys:
    """FalconModel.set_gguf_parameters for an HF Falcon config."""
    kv = hf.get("num_kv_heads", hf.get("n_head_kv", 1))
    return {
        "context_length": (U32, 2048), "embedding_length": (U32, hf["hidden_size"]),
        "feed_forward_length": (U32, 4 * hf["hidden_size"]), "block_count": (U32, hf["num_hidden_layers"]),
        "attention.head_count": (U32, hf["num_attention_heads"]), "attention.head_count_kv": (U32, kv),
        "attention.layer_norm_epsilon": (F32, 1e-5), "vocab_size": (U32, hf["vocab_size"]),
    }  # fmt: skip


def _gpt2_keys(hf: dict[str, Any]) -> Keys:
    """GPT2Model.set_gguf_parameters for an HF GPT-2 config."""
    return {
        "block_count": (U32, hf["n_layer"]), "context_length": (U32, hf["n_ctx"]),
        "embedding_length": (U32, hf["n_embd"]), "feed_forward_length": (U32, 4 * hf["n_embd"]),
        "attention.head_count": (U32, hf["n_head"]), "attention.layer_norm_epsilon": (F32, 1e-5),
        "vocab_size": (U32, hf["vocab_size"]),
    }  # fmt: skip


ROUND_TRIP = {
    "falcon-7b": ("falcon", _falcon_keys),
    "falcon-40b": ("falcon", _falcon_keys),
    "gpt2": ("gpt2", _gpt2_keys),
}


@pytest.mark.parametrize("preset", list(ROUND_TRIP))
def test_round_trip(preset: str, tmp_path: Path) -> None:
    arch, convert = ROUND_TRIP[preset]
    spec = load_model(preset)
    path = typed_gguf_file(tmp_path / "model.gguf", arch, convert(get_preset(preset).config))
    back = load_model(str(path))
    assert back.caches == spec.caches and back.layers == spec.layers and back.query_heads == spec.query_heads
    assert not back.warnings
    for engine in ("theoretical", "llama.cpp"):
        want = estimate(preset, tokens=20_000, batch=2, kv_dtype="fp16", engine=engine).total_bytes
        assert total(path, 20_000, engine=engine, batch=2) == want


def test_round_trip_figures(tmp_path: Path) -> None:
    # falcon-7b: 32 layers x 1 KV head x 4544 / 71 = 64 dims: 2 x 32 x 64 x 2 B = 8,192 B per token
    path = typed_gguf_file(tmp_path / "f7.gguf", "falcon", _falcon_keys(get_preset("falcon-7b").config))
    assert total(path, 1000) == 2 * 32 * 1 * 64 * 2 * 1000 == 8_192_000
    # falcon-40b: 60 layers x 8 KV heads x 8192 / 128 = 64 dims: 2 x 60 x 8 x 64 x 2 B = 122,880 B per token
    path = typed_gguf_file(tmp_path / "f40.gguf", "falcon", _falcon_keys(get_preset("falcon-40b").config))
    assert total(path, 1000) == 2 * 60 * 8 * 64 * 2 * 1000 == 122_880_000


# --- the real llama.cpp ------------------------------------------------------------------------------------


@needs_llama_cpp
@pytest.mark.parametrize("name", list(ATTENTION_FILES))
def test_llama_cpp_agrees(name: str, tmp_path: Path) -> None:
    path = file_of(name, tmp_path)
    for tokens, batch in PROBE_WORKLOADS:
        report = api.probe_llamacpp(str(path), tokens=tokens, batch=batch)
        assert report.checks and all(c.match for c in report.checks), (name, tokens, batch, report.checks)
        assert report.match


@needs_llama_cpp
def test_llama_cpp_hand_figures(tmp_path: Path) -> None:
    # falcon: 1000 tokens -> n_ctx padded to 256: 1024 cells x 3 layers x 2 (K, V) x 1 KV head x 64 x 2 B
    report = api.probe_llamacpp(str(file_of("falcon", tmp_path)), tokens=1000, batch=1)
    assert report.measured_bytes == 1024 * 3 * 2 * 1 * 64 * 2 == 786_432 and report.match
    # olmo3: full layer 3 keeps 1024 cells; sliding layers 0-2 keep window 128 + n_ubatch 512 = 640,
    # padded to 256 -> 768 cells: 2 x 2 KV heads x 64 x 2 B x (1024 + 3 x 768)
    report = api.probe_llamacpp(str(file_of("olmo3", tmp_path)), tokens=1000, batch=1)
    assert report.measured_bytes == 2 * 2 * 64 * 2 * (1024 + 3 * 768) == 1_703_936 and report.match


@needs_llama_cpp
def test_llama_cpp_starcoder_two_kv_heads(tmp_path: Path) -> None:
    arch, keys = ATTENTION_FILES["starcoder"]
    path = typed_gguf_file(tmp_path / "sc2.gguf", arch, {**keys, "attention.head_count_kv": (U32, 2)})
    report = api.probe_llamacpp(str(path), tokens=1000, batch=1)
    # 1024 cells x 2 layers x 2 (K, V) x 2 KV heads x 64 x 2 B
    assert report.measured_bytes == 1024 * 2 * 2 * 2 * 64 * 2 == 1_048_576 and report.match


# --- qwen3next: full attention + gated delta net --------------------------------------------------------------


def test_qwen3next_hand_derived(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "q3n.gguf", "qwen3next", qwen3next_keys(SMALL_NEXT))
    spec = load_model(str(path))
    assert spec.model_type == "qwen3_next" and not spec.warnings, spec.warnings
    assert [i for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)] == [3, 7]
    states = [c for c in spec.caches if isinstance(c, StateCache)]
    # conv: (4 - 1) x (2 key heads x 32 x 2 (Q, K) + 4 value heads x 32) = 3 x 256 = 768 elements;
    # state: 4 value heads x 32 x 32 = 4,096 elements.
    assert len(states) == 6 and states[0].state_elements(whole_kernel=False) == (768, 4_096)
    est = api.estimate(str(path), tokens=1000, engine="llama.cpp")
    # llama.cpp: 1024 cells x 2 layers x 2 (K, V) x 2 KV heads x 64 x 2 B = 1,048,576;
    # f32 states of one sequence: 6 x (768 + 4,096) x 4 B = 116,736.
    assert est.total_bytes == 1_048_576 + 116_736
    # interval 2: full attention on layers 1, 3, 5, 7 (llama.cpp reads the key: see the run below)
    path = gguf_file(tmp_path / "q3n2.gguf", "qwen3next", {**qwen3next_keys(SMALL_NEXT), "full_attention_interval": 2})
    assert [i for i, c in enumerate(load_model(str(path)).caches) if isinstance(c, AttentionCache)] == [1, 3, 5, 7]


def test_qwen3next_round_trip(tmp_path: Path) -> None:
    hf = get_preset("qwen3-next-80b-a3b").config
    path = gguf_file(tmp_path / "q3n.gguf", "qwen3next", qwen3next_keys(hf))
    back, preset = load_model(str(path)), load_model("qwen3-next-80b-a3b")
    assert back.caches == preset.caches and not back.warnings
    a = api.estimate(str(path), tokens=4096, engine="llama.cpp")
    assert a.total_bytes == api.estimate("qwen3-next-80b-a3b", tokens=4096, engine="llama.cpp").total_bytes
    # 12 full layers x 4096 cells x 2 x 2 KV heads x 256 x 2 B = 100,663,296; 36 delta-net layers x
    # ((4 - 1) x (16 x 128 x 2 + 32 x 128) + 32 x 128 x 128) x 4 B = 36 x (24,576 + 524,288) x 4 = 79,036,416
    assert a.total_bytes == 100_663_296 + 79_036_416


_KV_LINE = re.compile(
    r"llama_kv_cache: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers, +\d+/(\d+) seqs\), "
    r"K \(f16\): +([\d.]+) MiB, V \(f16\): +([\d.]+) MiB"
)
_RS_LINE = re.compile(
    r"llama_memory_recurrent: size = +[\d.]+ MiB \( *(\d+) cells, +\d+ layers, +\d+ seqs +0 rs_seq\), "
    r"R \(f32\): +([\d.]+) MiB, S \(f32\): +([\d.]+) MiB, P \(f32\): +([\d.]+) MiB"
)


def _llama_cpp_hybrid(path: Path) -> None:
    """Run ``path`` in the probe's llama.cpp child (tests.helpers.llama_cpp) over its workloads: K, V,
    R and S rebuilt from what llama.cpp printed (cells, streams, the layers it placed, the per-layer
    widths and SSM sizes of print_info) must print as it printed them and sum to kvcalc's --engine
    llama.cpp estimate, on the same layers."""
    pytest.importorskip("llama_cpp")
    engine = LlamaCpp()
    contexts = [
        {"n_ctx": t * b, "n_seq_max": b, "n_batch": engine.n_batch, "n_ubatch": engine.n_ubatch,
         "kv_unified": u, "swa_full": False, "type_k": "f16", "type_v": "f16"}
        for t, b, u in CONTEXT_WORKLOADS
    ]  # fmt: skip
    answer = run_llama_cpp(path, contexts)
    info = dict(INFO.findall(answer["load"]))
    spec = load_model(str(path))
    d_conv, d_inner, d_state, groups = (
        int(info[x]) for x in ("ssm_d_conv", "ssm_d_inner", "ssm_d_state", "ssm_n_group")
    )
    for (tokens, batch, unified), result in zip(CONTEXT_WORKLOADS, answer["results"], strict=True):
        log = result["log"]
        assert result["ok"], log[-1000:]
        kv, rs = _KV_LINE.search(log), _RS_LINE.search(log)
        assert kv is not None and rs is not None
        cells, layers, streams, k_mib, v_mib = kv.groups()
        attention = [int(i) for i in KV_LAYER.findall(log)]
        recurrent = [int(i) for i in RS_LAYER.findall(log)]
        widths = [w for w in per_layer(info["n_embd_k_gqa"], spec.layers)]
        assert len(attention) == int(layers) and all(widths[i] for i in attention)
        k = v = int(cells) * int(streams) * sum(widths[i] for i in attention) * 2  # f16 K and V
        # src/llama-hparams.cpp n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state) and
        # n_embd_s = d_state x d_inner, f32, one cell per sequence
        r = int(rs[1]) * len(recurrent) * (d_conv - 1) * (d_inner + 2 * groups * d_state) * 4
        s = int(rs[1]) * len(recurrent) * d_state * d_inner * 4
        assert [f"{x / 2**20:.2f}" for x in (k, v, r, s)] == [k_mib, v_mib, rs[2], rs[3]]
        assert rs[4] == "0.00"  # llama.cpp's P buffer: nothing at these sizes (see the report)
        est = api.estimate(str(path), tokens=tokens, batch=batch, engine="llama.cpp", options={"kv_unified": unified})
        assert k + v + r + s == est.total_bytes, (tokens, batch, unified)
        where = spec.entry_layers or tuple(range(len(spec.caches)))  # falcon_h1: two entries a layer
        assert attention == [where[i] for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)]
        assert recurrent == [where[i] for i, c in enumerate(spec.caches) if isinstance(c, StateCache)]


@pytest.mark.parametrize("interval", [4, 2])
def test_qwen3next_llama_cpp(interval: int, tmp_path: Path) -> None:
    keys = {**qwen3next_keys(SMALL_NEXT), "full_attention_interval": interval}
    _llama_cpp_hybrid(gguf_file(tmp_path / "q3n.gguf", "qwen3next", keys))


# --- nemotron_h: Mamba-2, attention and MLP-only layers ----------------------------------------------------------


def test_nemotron_h_hand_derived(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "nh.gguf", "nemotron_h", nemotron_h_keys(SMALL_NH))
    spec = load_model(str(path))
    assert spec.model_type == "nemotron_h" and not spec.warnings, spec.warnings
    assert [i for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)] == [3, 8]
    assert [i for i, c in enumerate(spec.caches) if isinstance(c, StateCache)] == [0, 2, 5, 7]
    # conv (4 - 1) x (512 + 2 x 2 x 32) = 1,920; SSM 32 x 512 = 16,384 elements
    assert spec.caches[0].state_elements(whole_kernel=False) == (1_920, 16_384)
    # llama.cpp, 1000 tokens: 1024 cells x 2 layers x 2 x 2 KV heads x 64 x 2 B = 1,048,576;
    # 4 Mamba-2 layers x (1,920 + 16,384) x 4 B = 292,864; MLP layers cache nothing
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1_048_576 + 292_864


def test_nemotron_h_round_trip(tmp_path: Path) -> None:
    hf = get_preset("nemotron-h-8b").config
    path = gguf_file(tmp_path / "nh.gguf", "nemotron_h", nemotron_h_keys(hf))
    back, preset = load_model(str(path)), load_model("nemotron-h-8b")
    assert back.caches == preset.caches and not back.warnings
    a = api.estimate(str(path), tokens=4096, batch=2, engine="llama.cpp").total_bytes
    assert a == api.estimate("nemotron-h-8b", tokens=4096, batch=2, engine="llama.cpp").total_bytes


def test_nemotron_h_llama_cpp(tmp_path: Path) -> None:
    _llama_cpp_hybrid(gguf_file(tmp_path / "nh.gguf", "nemotron_h", nemotron_h_keys(SMALL_NH)))


# --- falcon-h1: attention and a Mamba-2 mixer in every layer ------------------------------------------------


def test_falcon_h1_hand_derived(tmp_path: Path) -> None:
    path = gguf_file(tmp_path / "fh.gguf", "falcon-h1", falcon_h1_keys(SMALL_FH))
    spec = load_model(str(path))
    assert spec.model_type == "falcon_h1" and not spec.warnings, spec.warnings
    assert spec.entry_layers == (0, 1, 2, 0, 1, 2)  # every layer: K/V and a Mamba-2 state
    state = spec.caches[3]
    assert isinstance(state, StateCache)
    # conv (4 - 1) x (512 + 2 x 1 x 32) = 1,728; SSM 8 heads x 64 x 32 = 16,384 elements
    assert state.state_elements(whole_kernel=False) == (1_728, 16_384)
    # llama.cpp, 1000 tokens: 1024 cells x 3 layers x 2 x 2 KV heads x 64 x 2 B = 1,572,864;
    # 3 layers x (1,728 + 16,384) x 4 B = 217,344
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1_572_864 + 217_344


def test_falcon_h1_round_trip(tmp_path: Path) -> None:
    hf = get_preset("falcon-h1-7b").config
    path = gguf_file(tmp_path / "fh.gguf", "falcon-h1", falcon_h1_keys(hf))
    back, preset = load_model(str(path)), load_model("falcon-h1-7b")
    assert back.caches == preset.caches and back.entry_layers == preset.entry_layers and not back.warnings
    a = api.estimate(str(path), tokens=4096, batch=2, engine="llama.cpp").total_bytes
    assert a == api.estimate("falcon-h1-7b", tokens=4096, batch=2, engine="llama.cpp").total_bytes


def test_falcon_h1_llama_cpp(tmp_path: Path) -> None:
    _llama_cpp_hybrid(gguf_file(tmp_path / "fh.gguf", "falcon-h1", falcon_h1_keys(SMALL_FH)))


# --- gemma3n: sliding layers, and the last layers sharing earlier K/V -------------------------------------


def _gemma3n_keys(text: dict[str, Any]) -> Keys:
    """Gemma3NModel.set_gguf_parameters (Gemma3Model's keys, the per-layer pattern, the altup and
    per-layer-input widths, shared_kv_layers) for an HF Gemma3nTextConfig."""
    layers = text["num_hidden_layers"]
    return {
        **general("Gemma 3n"), "context_length": (U32, text["max_position_embeddings"]),
        "embedding_length": (U32, text["hidden_size"]), "block_count": (U32, layers),
        "feed_forward_length": ("array[int32]", [512] * layers),
        "attention.head_count": (U32, text["num_attention_heads"]),
        "attention.head_count_kv": (U32, text["num_key_value_heads"]), "attention.layer_norm_rms_epsilon": (F32, 1e-6),
        "attention.key_length": (U32, text["head_dim"]), "attention.value_length": (U32, text["head_dim"]),
        "rope.freq_base": (F32, 1e6), "attention.sliding_window": (U32, text["sliding_window"]),
        "altup.active_idx": (U32, 0), "altup.num_inputs": (U32, 4), "embedding_length_per_layer_input": (U32, 32),
        "attention.shared_kv_layers": (U32, text["num_kv_shared_layers"]),
        "activation_sparsity_scale": ("array[float32]", [1.6] * 2 + [0.0] * (layers - 2)),
        "attention.sliding_window_pattern": ("array[bool]", [t == "sliding_attention" for t in text["layer_types"]]),
        **tokenizer("llama"),
    }  # fmt: skip


def _small_gemma3n(layers: int, shared: int) -> dict[str, Any]:
    """A small Gemma 3n: 4 heads (2 KV) of 64, window 128, four sliding layers then a full one."""
    kinds = ["sliding_attention"] * 4 + ["full_attention"]
    return {
        "num_hidden_layers": layers, "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "sliding_window": 128, "num_kv_shared_layers": shared, "max_position_embeddings": 32768,
        "layer_types": [kinds[i % 5] for i in range(layers)],
    }  # fmt: skip


def test_gemma3n_hand_derived(tmp_path: Path) -> None:
    path = typed_gguf_file(tmp_path / "g3n.gguf", "gemma3n", _gemma3n_keys(_small_gemma3n(35, 15)))
    spec = load_model(str(path))
    assert spec.model_type == "gemma3n_text" and not spec.warnings, spec.warnings
    own = [c for c in spec.caches if isinstance(c, AttentionCache)]
    assert len(own) == 20 and [c.window for c in own].count(None) == 4  # layers 4, 9, 14, 19 full
    # 1000 tokens: 4 full layers x 2 x 2 KV heads x 64 x 2 B x 1000 + 16 sliding x the same x 128;
    # layers 20-34 reuse earlier K/V
    assert total(path, 1000) == 4 * 2 * 2 * 64 * 2 * 1000 + 16 * 2 * 2 * 64 * 2 * 128 == 3_096_576


def test_gemma3n_round_trip(tmp_path: Path) -> None:
    text = get_preset("gemma-3n-e4b").config["text_config"]
    path = typed_gguf_file(tmp_path / "g3n.gguf", "gemma3n", _gemma3n_keys(text))
    back, preset = load_model(str(path)), load_model("gemma-3n-e4b")
    assert back.caches == preset.caches and not back.warnings
    for engine in ("theoretical", "llama.cpp"):
        want = estimate("gemma-3n-e4b", tokens=20_000, batch=2, kv_dtype="fp16", engine=engine).total_bytes
        assert total(path, 20_000, engine=engine, batch=2) == want


def test_gemma3n_other_than_20_cached_layers_is_refused(tmp_path: Path) -> None:
    # 30 layers, 5 shared: the file says 25 layers keep K/V, llama.cpp 0c1e570 caches 20 (see the gguf package)
    path = typed_gguf_file(tmp_path / "g3n.gguf", "gemma3n", _gemma3n_keys(_small_gemma3n(30, 5)))
    with pytest.raises(SourceError, match=r"first 20 layers whatever the file says"):
        load_model(str(path))


@needs_llama_cpp
@pytest.mark.parametrize(("layers", "shared"), [(35, 15), (30, 10)])
def test_gemma3n_llama_cpp(layers: int, shared: int, tmp_path: Path) -> None:
    path = typed_gguf_file(tmp_path / "g3n.gguf", "gemma3n", _gemma3n_keys(_small_gemma3n(layers, shared)))
    for tokens, batch in PROBE_WORKLOADS:
        report = api.probe_llamacpp(str(path), tokens=tokens, batch=batch)
        # Layers that share another layer's K/V hold none in kvcalc and none in llama.cpp: 4 full and
        # 16 sliding layers of their own on both sides, every byte and cell equal.
        full, swa = (next(c for c in report.checks if c.side == s) for s in ("full", "swa"))
        assert (full.measured_layers, swa.measured_layers) == (4, 16)
        assert (full.estimated_layers, swa.estimated_layers) == (4, 16)
        for check in (full, swa):
            assert check.measured_bytes == check.estimated_bytes and check.measured_cells == check.estimated_cells
        assert report.measured_bytes == report.estimate.total_bytes
        assert report.match


# GGUF metadata read as a config (kvcalc.inputs.gguf.config): errors name the GGUF key, not the config
# field it maps to.


@pytest.mark.parametrize(
    ("keys", "named", "not_named"),
    [
        # 3 KV heads for 8 query heads: once "config field 'num_key_value_heads' (3) must divide the 8 query heads"
        (attention(8, 3, 64, 2), "GGUF key llama.attention.head_count_kv (3) must divide the 8 query heads",
         "num_key_value_heads"),
        (attention(8, 16, 64, 2), "GGUF key llama.attention.head_count_kv (16) must divide", "num_key_value_heads"),
        # once "config field 'num_hidden_layers' is implausibly large"
        (attention(8, 2, 64, 2**31), "GGUF key llama.block_count is implausibly large: 2147483648",
         "num_hidden_layers"),
        (attention(8, 2, 2**28, 2), "GGUF key llama.attention.key_length is implausibly large", "head_dim"),
        ({**attention(8, 2, 64, 2), "attention.head_count": 2**32 - 1}, "GGUF key llama.attention.head_count is",
         "num_attention_heads"),
        # a per-layer KV-head count: the layer it is wrong on
        ({**attention(8, 2, 64, 3), "attention.head_count_kv": [2, 3, 2]},
         "GGUF key llama.attention.head_count_kv[1] (3) must divide the 8 query heads", "num_key_value_heads"),
    ],
)  # fmt: skip
def test_gguf_errors_name_the_gguf_key(run_cli, here: Path, keys: dict[str, Any], named: str, not_named: str) -> None:
    gguf_file(here / "bad.gguf", "llama", keys)
    for command in (("estimate",), ("fit", *FIT)):
        result = run_cli(command[0], "bad.gguf", *command[1:])
        line = assert_one_line_error(result, f"bad.gguf: {named}")
        assert not_named not in line and "config field" not in line and result.exit_code == 1


def test_a_gguf_window_is_named_by_its_key(run_cli, here: Path) -> None:
    keys = attention(8, 4, 32, 2, **{"attention.sliding_window": 2**32 - 1})
    gguf_file(here / "gemma2.gguf", "gemma2", keys)
    line = assert_one_line_error(
        run_cli("estimate", "gemma2.gguf"), "GGUF key gemma2.attention.sliding_window is implausibly"
    )
    assert "'sliding_window'" not in line


def test_the_python_api_says_the_same(tmp_path: Path) -> None:
    from kvcalc.api import load_model
    from kvcalc.errors import KvcalcError

    path = gguf_file(tmp_path / "bad.gguf", "llama", attention(8, 3, 64, 2))
    with pytest.raises(KvcalcError, match=r"GGUF key llama\.attention\.head_count_kv \(3\)"):
        load_model(str(path))
