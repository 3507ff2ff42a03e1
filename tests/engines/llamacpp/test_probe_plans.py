"""``kvcalc probe FILE.gguf --engine llama.cpp``: llama.cpp reads the user's own GGUF metadata.

For a GGUF file the probe does not rebuild a GGUF from kvcalc's reading of the header (that would
check kvcalc against itself): ``llamacpp_probe.file_plan`` copies every key of the file with its own
GGUF value type (kvcalc.inputs.gguf keeps them: ``GgufHeader.value_types``), drops the tokenizer
(``tokenizer.ggml.model`` "none", with ``<arch>.vocab_size`` from the token list when the file has
none) and the tensor data, and llama.cpp (llama-cpp-python 0.3.36, llama.cpp 0c1e570) builds the
file's architecture from those keys and creates a real context. Every KV cache it allocates must
equal ``kvcalc estimate FILE.gguf --engine llama.cpp`` byte for byte.

The files are written with the gguf package as convert_hf_to_gguf.py writes them (general.*, the
architecture's hyperparameters, rope and norm keys, expert keys, and a tokenizer of a few tokens),
with no tensors: seven geometries (GQA llama, qwen2, gemma2 and gemma3 SWA patterns, gpt-oss SWA,
deepseek2 MLA, llama4 chunked). The round trip of every GGUF value type needs only gguf; the
llama.cpp tests are skipped when llama_cpp is not installed (pip install 'kvcalc[llamacpp]').
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.llamacpp import probe as llamacpp_probe
from kvcalc.engines.llamacpp.probe import VALUE_TYPES, GgufPlan, file_plan, write_gguf
from kvcalc.errors import UsageError
from kvcalc.inputs import gguf as kvcalc_gguf
from kvcalc.inputs.gguf import read_header
from tests.helpers.gguf_files import F32, U32, Keys, typed_gguf_file
from tests.helpers.llama_cpp import needs_llama_cpp

gguf: Any = pytest.importorskip("gguf")


def _gpt2_tokenizer(pre: str) -> Keys:
    """A BPE tokenizer as convert_hf_to_gguf.py's _set_vocab_gpt2 writes it, of six tokens."""
    return {
        "tokenizer.ggml.model": ("string", "gpt2"),
        "tokenizer.ggml.pre": ("string", pre),
        "tokenizer.ggml.tokens": ("array[string]", ["<s>", "</s>", "a", "b", "ab", "c"]),
        "tokenizer.ggml.token_type": ("array[int32]", [3, 3, 1, 1, 1, 1]),
        "tokenizer.ggml.merges": ("array[string]", ["a b"]),
        "tokenizer.ggml.bos_token_id": ("uint32", 0),
        "tokenizer.ggml.eos_token_id": ("uint32", 1),
        "tokenizer.chat_template": ("string", "{% for m in messages %}{{ m['content'] }}{% endfor %}"),
    }


def _spm_tokenizer() -> Keys:
    """A SentencePiece tokenizer as _set_vocab_sentencepiece writes it (Gemma), of five tokens."""
    return {
        "tokenizer.ggml.model": ("string", "llama"),
        "tokenizer.ggml.pre": ("string", "default"),
        "tokenizer.ggml.tokens": ("array[string]", ["<pad>", "<eos>", "<bos>", "<unk>", "\u2581a"]),
        "tokenizer.ggml.scores": ("array[float32]", [0.0, 0.0, 0.0, 0.0, -1.0]),
        "tokenizer.ggml.token_type": ("array[int32]", [3, 3, 3, 2, 1]),
        "tokenizer.ggml.bos_token_id": ("uint32", 2),
        "tokenizer.ggml.eos_token_id": ("uint32", 1),
        "tokenizer.ggml.padding_token_id": ("uint32", 0),
        "tokenizer.ggml.add_bos_token": ("bool", True),
        "tokenizer.ggml.add_eos_token": ("bool", False),
    }


def _general(name: str, file_type: int = 1) -> Keys:
    return {
        "general.type": ("string", "model"),
        "general.name": ("string", name),
        "general.size_label": ("string", "tiny"),
        "general.license": ("string", "apache-2.0"),
        "general.tags": ("array[string]", ["text-generation"]),
        "general.languages": ("array[string]", ["en"]),
        "general.file_type": ("uint32", file_type),
        "general.quantization_version": ("uint32", 2),
    }


# What each converted file holds (conversion/*.py of ggml-org/llama.cpp write these keys), small.
GEOMETRIES: dict[str, tuple[str, Keys]] = {
    # LlamaModel: Llama 3 style GQA, rope scaling keys, no vocab_size key (the token list sizes it).
    "llama GQA": ("llama", {
        **_general("Llama GQA"),
        "block_count": (U32, 4), "context_length": (U32, 8192), "embedding_length": (U32, 512),
        "feed_forward_length": (U32, 1024), "attention.head_count": (U32, 8), "attention.head_count_kv": (U32, 2),
        "rope.freq_base": (F32, 500000.0), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "rope.dimension_count": (U32, 64), "rope.scaling.type": ("string", "linear"),
        "rope.scaling.factor": (F32, 1.0),
        **_gpt2_tokenizer("llama-bpe"),
    }),
    # Qwen2Model: MQA, no key_length (n_embd / n_head), a vocab_size key larger than the token list.
    "qwen2 MQA": ("qwen2", {
        **_general("Qwen2 MQA"),
        "block_count": (U32, 3), "context_length": (U32, 32768), "embedding_length": (U32, 512),
        "feed_forward_length": (U32, 1024), "attention.head_count": (U32, 8), "attention.head_count_kv": (U32, 1),
        "rope.freq_base": (F32, 1000000.0), "attention.layer_norm_rms_epsilon": (F32, 1e-6),
        "vocab_size": (U32, 64),
        **_gpt2_tokenizer("qwen2"),
    }),
    # Gemma2Model: sliding window 128 on every other layer (llama.cpp's set_swa_pattern(2)), softcaps.
    "gemma2 SWA": ("gemma2", {
        **_general("Gemma2 SWA"),
        "context_length": (U32, 8192), "embedding_length": (U32, 256), "block_count": (U32, 4),
        "feed_forward_length": (U32, 512), "attention.head_count": (U32, 4), "attention.head_count_kv": (U32, 2),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6), "attention.key_length": (U32, 64),
        "attention.value_length": (U32, 64), "attn_logit_softcapping": (F32, 50.0),
        "final_logit_softcapping": (F32, 30.0), "attention.sliding_window": (U32, 128),
        **_spm_tokenizer(),
    }),
    # Gemma3Model: five sliding layers in six (set_swa_pattern(6)), MQA, rope for both kinds.
    "gemma3 5:1": ("gemma3", {
        **_general("Gemma3 5:1"),
        "context_length": (U32, 131072), "embedding_length": (U32, 256), "block_count": (U32, 7),
        "feed_forward_length": (U32, 512), "attention.head_count": (U32, 4), "attention.head_count_kv": (U32, 1),
        "attention.layer_norm_rms_epsilon": (F32, 1e-6), "attention.key_length": (U32, 64),
        "attention.value_length": (U32, 64), "rope.freq_base": (F32, 1000000.0),
        "attention.sliding_window": (U32, 512), "rope.scaling.type": ("string", "linear"),
        "rope.scaling.factor": (F32, 8.0),
        **_spm_tokenizer(),
    }),
    # GptOssModel: window 128 on every other layer, 2 experts of 1 used, yarn rope.
    "gpt-oss SWA": ("gpt-oss", {
        **_general("gpt-oss SWA", file_type=38),
        "block_count": (U32, 4), "context_length": (U32, 131072), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 256), "attention.head_count": (U32, 8), "attention.head_count_kv": (U32, 2),
        "rope.freq_base": (F32, 150000.0), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "attention.key_length": (U32, 64), "attention.value_length": (U32, 64),
        "attention.sliding_window": (U32, 128), "expert_count": (U32, 2), "expert_used_count": (U32, 1),
        "expert_feed_forward_length": (U32, 256), "rope.scaling.type": ("string", "yarn"),
        "rope.scaling.factor": (F32, 32.0), "rope.scaling.original_context_length": (U32, 4096),
        **_gpt2_tokenizer("gpt-4o"),
    }),
    # DeepseekV2Model after the MLA rework: MQA over the latent (key_length = kv_lora_rank + rope
    # dims, value_length = kv_lora_rank), the decompressed dims as *_mla; one dense layer, then MoE.
    "deepseek2 MLA": ("deepseek2", {
        **_general("DeepSeek-V2 MLA", file_type=32),
        "block_count": (U32, 3), "context_length": (U32, 163840), "embedding_length": (U32, 256),
        "feed_forward_length": (U32, 512), "attention.head_count": (U32, 4), "attention.head_count_kv": (U32, 1),
        "rope.freq_base": (F32, 10000.0), "attention.layer_norm_rms_epsilon": (F32, 1e-6),
        "vocab_size": (U32, 6), "attention.q_lora_rank": (U32, 96), "attention.kv_lora_rank": (U32, 64),
        "attention.key_length": (U32, 96), "attention.value_length": (U32, 64),
        "attention.key_length_mla": (U32, 96), "attention.value_length_mla": (U32, 64),
        "rope.dimension_count": (U32, 32), "leading_dense_block_count": (U32, 1),
        "expert_feed_forward_length": (U32, 128), "expert_count": (U32, 4), "expert_shared_count": (U32, 1),
        "expert_weights_scale": (F32, 2.5), "expert_weights_norm": ("bool", True),
        "expert_gating_func": (U32, 2), "expert_used_count": (U32, 2),
        "rope.scaling.type": ("string", "yarn"), "rope.scaling.factor": (F32, 40.0),
        "rope.scaling.original_context_length": (U32, 4096), "rope.scaling.yarn_log_multiplier": (F32, 0.1),
        **_gpt2_tokenizer("deepseek-v3"),
    }),
    # Llama4Model: 8192-token chunks on three layers in four (src/models/llama4.cpp), MoE interleave.
    "llama4 chunked": ("llama4", {
        **_general("Llama 4 chunked"),
        "block_count": (U32, 4), "context_length": (U32, 262144), "embedding_length": (U32, 512),
        "feed_forward_length": (U32, 1024), "attention.head_count": (U32, 8), "attention.head_count_kv": (U32, 2),
        "rope.freq_base": (F32, 500000.0), "attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "attention.key_length": (U32, 64), "attention.value_length": (U32, 64), "rope.dimension_count": (U32, 64),
        "vocab_size": (U32, 6), "interleave_moe_layer_step": (U32, 1), "expert_feed_forward_length": (U32, 256),
        "expert_count": (U32, 2), "expert_used_count": (U32, 1),
        **_gpt2_tokenizer("llama4"),
    }),
}  # fmt: skip


# --- the plan: the file's own keys and types -------------------------------------------------------------


def test_plan_keeps_every_key_and_type_but_the_tokenizer(tmp_path: Path) -> None:
    arch, keys = GEOMETRIES["deepseek2 MLA"]
    path = typed_gguf_file(tmp_path / "ds.gguf", arch, keys)
    plan = file_plan(read_header(path), str(path), nextn=0)
    got = {k: (kind, v) for k, kind, v in plan.keys}
    assert plan.arch == "deepseek2" and got["general.architecture"] == ("string", "deepseek2")
    for key, (kind, value) in keys.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        if full.startswith("tokenizer.ggml."):
            continue
        assert got[full][0] == kind, full
        assert got[full][1] == pytest.approx(value), full
    assert got["tokenizer.ggml.model"] == ("string", "none")
    assert not [k for k in got if k.startswith("tokenizer.ggml.") and k != "tokenizer.ggml.model"]
    assert got["tokenizer.chat_template"][0] == "string"  # not a tokenizer.ggml.* key: kept
    assert got["deepseek2.vocab_size"] == ("uint32", 6)  # the file's own
    # no tensor infos: nothing bounds the weights llama.cpp would create -> no_alloc
    assert plan.weights_bytes > 2**30 and any("no_alloc" in n for n in plan.notes)
    # every key of the file but its tokenizer.ggml.* ones (general.architecture included)
    copied = 1 + len([k for k in keys if not k.startswith("tokenizer.ggml.")])
    assert plan.notes[0] == f"llama.cpp read this file's own metadata ({copied} keys; no tokenizer, no tensor data)"


def test_vocab_size_from_the_token_list(tmp_path: Path) -> None:
    arch, keys = GEOMETRIES["llama GQA"]
    path = typed_gguf_file(tmp_path / "llama.gguf", arch, keys)
    plan = file_plan(read_header(path), str(path), nextn=0)
    # llama.cpp 0c1e570 with tokenizer "none" sizes token_embd by llama.vocab_size only (without it
    # create_tensor asserts ne >= 1): the six tokens of the list.
    assert ("llama.vocab_size", "uint32", 6) in plan.keys


def test_vocab_size_from_token_embd(tmp_path: Path) -> None:
    np: Any = pytest.importorskip("numpy")
    writer = gguf.GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((10, 4), dtype=np.float32))  # 10 tokens of 4
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    plan = file_plan(read_header(tmp_path / "t.gguf"), "t.gguf", nextn=0)
    assert ("llama.vocab_size", "uint32", 10) in plan.keys
    # f32 bound: token_embd 40 elements and as large an output: 4 B x 80
    assert plan.weights_bytes == 4 * 80 and not any("no_alloc" in n for n in plan.notes)


def test_every_value_type_round_trips(tmp_path: Path) -> None:
    keys: list[tuple[str, str, Any]] = [("general.architecture", "string", "llama"), ("llama.vocab_size", "uint32", 6)]
    samples = {"uint8": 200, "int8": -100, "uint16": 60000, "int16": -30000, "uint32": 4_000_000_000,
               "int32": -2_000_000_000, "float32": 0.5, "bool": True, "string": "x\u00e9",
               "uint64": 2**63 + 1, "int64": -(2**62), "float64": 1e-300}  # fmt: skip
    assert set(samples) == set(VALUE_TYPES.values())
    for name, value in samples.items():
        keys.append((f"test.{name}", name, value))
        keys.append((f"test.array_{name}", f"array[{name}]", [value, value]))
    path = tmp_path / "types.gguf"
    write_gguf(GgufPlan("llama", tuple(keys)), path)
    header = read_header(path)
    again = file_plan(header, str(path), nextn=0)
    got = {k: (kind, v) for k, kind, v in again.keys}
    for key, kind, value in keys:
        assert got[key] == (kind, value), key
    # the reader keeps the types: ids of the GGUF spec (uint8 0 ... float64 12; arrays 9 + item)
    assert header.value_types["test.uint8"] == (0, None)
    assert header.value_types["test.array_float64"] == (9, 12)


def test_no_vocabulary_size_is_refused(tmp_path: Path) -> None:
    path = typed_gguf_file(tmp_path / "bare.gguf", "llama", {"block_count": (U32, 2)})
    with pytest.raises(UsageError, match="sizes the vocabulary"):
        file_plan(read_header(path), str(path), nextn=0)


# --- llama.cpp reads the file's own keys -----------------------------------------------------------------

# (tokens per sequence, sequences): below a ubatch, ragged, and long enough for windows and Llama 4's chunk.
WORKLOADS = ((300, 1), (1000, 3), (4096, 2), (12000, 1))


def _no_spec_plan(spec: Any, n_ctx: int) -> Any:
    raise AssertionError("a GGUF file's probe must not rebuild a GGUF from kvcalc's reading of it")


@needs_llama_cpp
@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_llama_cpp_on_the_files_own_metadata(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llamacpp_probe, "gguf_plan", _no_spec_plan)
    arch, keys = GEOMETRIES[name]
    path = typed_gguf_file(tmp_path / f"{arch}.gguf", arch, keys)
    for tokens, batch in WORKLOADS:
        report = api.probe_llamacpp(str(path), tokens=tokens, batch=batch)
        assert report.checks and all(c.match for c in report.checks), (name, tokens, batch, report.checks)
        assert report.match
        assert not report.allocated  # a file with no tensor infos is sized with no_alloc


@needs_llama_cpp
def test_a_misreading_by_kvcalc_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp reads the file, not kvcalc's reading of it: were kvcalc to read twice the KV heads,
    the probe says so."""
    real = kvcalc_gguf.gguf_config

    def misread(header: Any, label: str) -> tuple[dict[str, Any], list[str]]:
        config, notes = real(header, label)
        return {**config, "num_key_value_heads": 2 * config["num_key_value_heads"]}, notes

    monkeypatch.setattr(kvcalc_gguf, "gguf_config", misread)
    arch, keys = GEOMETRIES["llama GQA"]
    report = api.probe_llamacpp(str(typed_gguf_file(tmp_path / "llama.gguf", arch, keys)), tokens=1000)
    # llama.cpp: 4 layers x 1024 cells x 2 (K, V) x 2 KV heads x 64 x 2 B; kvcalc (misread) twice that
    assert report.measured_bytes == 4 * 1024 * 2 * 2 * 64 * 2 == 2_097_152
    assert report.estimate.total_bytes == 2 * report.measured_bytes and not report.match


@needs_llama_cpp
def test_hand_derived_figures(tmp_path: Path) -> None:
    arch, keys = GEOMETRIES["gemma2 SWA"]
    path = typed_gguf_file(tmp_path / "gemma2.gguf", arch, keys)
    report = api.probe_llamacpp(str(path), tokens=4096, batch=1)
    full, swa = (next(c for c in report.checks if c.side == s) for s in ("full", "swa"))
    # full layers 1, 3: 4096 cells x 2 (K, V) x 2 KV heads x 64 x 2 B (f16)
    assert full.measured_bytes == 2 * 4096 * 2 * 2 * 64 * 2 == 4_194_304
    # sliding layers 0, 2: window 128 + n_ubatch 512 = 640, padded to 256 -> 768 cells
    assert swa.measured_cells == 768 and swa.measured_bytes == 2 * 768 * 2 * 2 * 64 * 2
    arch, keys = GEOMETRIES["deepseek2 MLA"]
    path = typed_gguf_file(tmp_path / "ds.gguf", arch, keys)
    report = api.probe_llamacpp(str(path), tokens=1000, batch=1)
    # MLA: K of kv_lora_rank 64 + rope 32 per token, no V (flash attention off by default), 3 layers,
    # 1024 cells: 3 x 1024 x 96 x 2 B
    assert report.measured_bytes == 3 * 1024 * 96 * 2 == 589_824 and report.match


@needs_llama_cpp
def test_cli_probe_of_a_gguf(tmp_path: Path, run_cli: Any) -> None:
    arch, keys = GEOMETRIES["gpt-oss SWA"]
    path = typed_gguf_file(tmp_path / "gpt-oss.gguf", arch, keys)
    result = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "4096", "--batch", "2", "--json")
    assert result.exit_code == 0, result.stderr
    answer = result.json()
    assert answer["match"] is True and {g["group"] for g in answer["groups"]} == {"full", "swa"}
    text = run_cli("probe", str(path), "--engine", "llama.cpp", "--tokens", "1000")
    assert text.exit_code == 0 and "matches byte for byte" in text.stdout


@needs_llama_cpp
@pytest.mark.parametrize(
    ("dropped", "said"),
    [
        ("context_length", "key not found in model: llama.context_length"),
        # no feed_forward_length: a tensor dimension of 0, which llama.cpp asserts against (and aborts)
        ("feed_forward_length", r"GGML_ASSERT\(t_meta.ne\[dim\] >= 1\) failed"),
    ],
)
def test_a_file_llama_cpp_refuses_says_why(dropped: str, said: str, tmp_path: Path) -> None:
    arch, keys = GEOMETRIES["llama GQA"]
    path = typed_gguf_file(tmp_path / "llama.gguf", arch, {k: v for k, v in keys.items() if k != dropped})
    with pytest.raises(UsageError, match=said):
        api.probe_llamacpp(str(path), tokens=1000)


@needs_llama_cpp
def test_a_file_with_small_tensor_infos_is_allocated_for_real(tmp_path: Path) -> None:
    np: Any = pytest.importorskip("numpy")
    arch, keys = GEOMETRIES["llama GQA"]
    path = tmp_path / "llama.gguf"
    writer = gguf.GGUFWriter(str(path), arch)
    for key, (kind, value) in keys.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        sub = gguf.GGUFValueType[kind[6:-1].upper()] if kind.startswith("array[") else None
        writer.add_key_value(full, value, gguf.GGUFValueType["ARRAY" if sub else kind.upper()], sub)
    writer.add_tensor("token_embd.weight", np.zeros((6, 512), dtype=np.float16))  # 6 tokens x n_embd 512
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    report = api.probe_llamacpp(str(path), tokens=1000, batch=2)
    # the bound (f32 token_embd and as large an output: 4 B x 2 x 3,072) is far below 1 GiB: allocated
    assert report.allocated and report.match
    # 4 layers x 2 streams x 1024 cells x 2 (K, V) x 2 KV heads x 64 x 2 B
    assert report.measured_bytes == 4 * 2 * 1024 * 2 * 2 * 64 * 2 == 4_194_304
