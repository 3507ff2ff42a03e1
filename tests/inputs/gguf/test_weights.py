"""A GGUF's weights (kvcalc.inputs.gguf.weights): tensor data that is missing or implausibly large."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf import layer_weights, loaded_tensor_bytes, read_header
from kvcalc.inputs.source import gguf_weights_bytes
from kvcalc.spec import AttentionCache, StateCache
from tests.conftest import assert_one_line_error, run_subprocess
from tests.helpers.commands import FIT
from tests.helpers.cwd import here_absolute  # noqa: F401  (the fixture "here")
from tests.helpers.fake_hub import REPO, serve_gguf
from tests.helpers.gguf_files import U32, attention, gguf_file, typed_gguf_file
from tests.helpers.gguf_models import ATTENTION_FILES, GLM4MOE_TENSORS, SMALL_NEXT, qwen3next_keys, with_nextn

gguf: Any = pytest.importorskip("gguf")


SPEED = ("--gpu", "h100", "--prompt", "10", "--output", "2")


def _truncated(tmp_path: Path) -> tuple[Path, int, int]:
    """A GGUF whose header lists two tensors and whose file ends where their data should begin."""
    tensors = (("token_embd.weight", (64, 10), "F32"), ("blk.0.attn_q.weight", (64, 4), "F32"))
    full = gguf_file(tmp_path / "full.gguf", "llama", attention(8, 2, 64, 2), tensors)
    header = read_header(full)
    assert header.data_offset is not None and header.data_end == full.stat().st_size  # the reader places them
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[: header.data_offset])
    return cut, header.data_end, header.data_offset


@pytest.mark.parametrize("command", [("fit", *FIT), ("speed", *SPEED), ("speed", *SPEED, "--weights", "1GB")])
def test_a_gguf_without_its_tensor_data_is_refused(run_cli, here: Path, command: tuple[str, ...]) -> None:
    """Once accepted by fit (the tensor infos sized weights that are not in the file)."""
    _, end, size = _truncated(here)
    assert size < 1024  # a few hundred bytes: the header alone
    result = run_cli(command[0], "cut.gguf", *command[1:])
    assert_one_line_error(
        result, f"cut.gguf is truncated: its tensor data ends at byte {end:,}, but the file has {size:,} bytes"
    )
    assert result.exit_code == 1


def test_a_gguf_without_its_tensor_data_still_estimates(run_cli, here: Path) -> None:
    """The cache is sized from the header alone, which is whole."""
    _truncated(here)
    assert run_cli("estimate", "cut.gguf", "--tokens", "100").exit_code == 0


def test_a_shard_without_its_tensor_data_is_named(run_cli, here: Path) -> None:
    tensors = (("blk.0.attn_q.weight", (64, 4), "F32"),)
    gguf_file(here / "m-00001-of-00002.gguf", "llama", attention(8, 2, 64, 2), tensors)
    second = gguf_file(here / "m-00002-of-00002.gguf", "llama", attention(8, 2, 64, 2), tensors)
    second.write_bytes(second.read_bytes()[:-16])
    assert_one_line_error(
        # the shard's path may be long enough for the error line to shorten it: the words after it
        run_cli("fit", "m-00001-of-00002.gguf", *FIT),
        "(shard 2 of 2) is truncated: its tensor data ends at byte",
    )


def _huge(tmp_path: Path) -> Path:
    """A GGUF whose one tensor is 2^62 x 2^62 F32 elements (tensor infos only: the gguf package's
    writer, told the shape without data)."""
    np: Any = pytest.importorskip("numpy")
    path = tmp_path / "huge.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in attention(8, 2, 64, 2).items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_uint32("llama.vocab_size", 100)
    writer.add_tensor_info("token_embd.weight", (2**62, 2**62), np.dtype(np.float32), 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("command", [("fit", *FIT), ("speed", *SPEED), ("speed", *SPEED, "--weights", "1GB")])
def test_an_implausible_tensor_is_refused_by_fit_and_speed_alike(run_cli, here: Path, command: tuple[str, ...]) -> None:
    """fit refused it; speed (weights from loaded_tensor_bytes, parameters from loaded_parameters)
    once went on with 2^124 parameters."""
    _huge(here)
    result = run_cli(command[0], "huge.gguf", *command[1:])
    assert_one_line_error(result, f"huge.gguf: tensor infos add up to {4 * 2**124:,} bytes, implausibly large")
    assert result.exit_code == 1


def test_a_hub_gguf_without_its_tensor_data_is_refused(ranged, tmp_path: Path) -> None:
    """The Hub's Content-Range gives the file's size: the same check, from the ranged header read."""
    cut, end, size = _truncated(tmp_path)
    serve_gguf(ranged, cut.read_bytes(), filename="cut.gguf")
    result = run_subprocess("fit", f"{REPO}:cut.gguf", *FIT)
    assert_one_line_error(
        result, f"{REPO}:cut.gguf is truncated: its tensor data ends at byte {end:,}", f"{size:,} bytes"
    )
    assert result.exit_code == 1


# GGUF files that keep their NextN (multi-token prediction) layers: ``<arch>.nextn_predict_layers``.
#
# llama.cpp 0c1e570 runs and caches only the first block_count - nextn_predict_layers blocks and
# skips the NextN blocks' tensors unless MTP drafting is on (src/llama-model.cpp create_memory's
# filter, src/models/glm4.cpp / glm4-moe.cpp TENSOR_SKIP; kvcalc.inputs.gguf.nextn_layers). Checked here by
# hand and against a real llama.cpp load of a file with tensor data (the probe's data-less load
# cannot create skipped tensors).
def test_glm4moe_caches_the_trunk_only(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4moe", 4, 1)
    path = typed_gguf_file(tmp_path / "glm.gguf", arch, keys)
    spec = api.load_model(str(path))
    assert spec.layers == 3 and not spec.warnings, spec.warnings
    assert any("nextn_predict_layers 1" in n and "3 layers counted" in n for n in spec.notes)
    # 2 (K, V) x 3 trunk layers x 2 KV heads x 128 x 2 B x 1000 tokens; llama.cpp: 1024 cells
    assert api.estimate(str(path), tokens=1000, kv_dtype="fp16").total_bytes == 2 * 3 * 2 * 128 * 2 * 1000
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 2 * 3 * 2 * 128 * 2 * 1024


def test_per_layer_arrays_lose_the_nextn_entries(tmp_path: Path) -> None:
    # head_count_kv listed for all 4 blocks (the NextN block's 8 is not a trunk layer's): the trunk's 2, 2, 1
    arch, keys = with_nextn("glm4", 4, 1)
    keys["attention.head_count_kv"] = ("array[int32]", [2, 2, 1, 8])
    path = typed_gguf_file(tmp_path / "glm4.gguf", arch, keys)
    caches = [c for c in api.load_model(str(path)).caches if isinstance(c, AttentionCache)]
    assert [c.kv_heads for c in caches] == [2, 2, 1]
    # 2 x (2 + 2 + 1) KV heads x 64 x 2 B x 1000
    assert api.estimate(str(path), tokens=1000, kv_dtype="fp16").total_bytes == 2 * 5 * 64 * 2 * 1000


def test_qwen3next_full_layers_are_counted_over_the_trunk(tmp_path: Path) -> None:
    # 9 blocks, the last a NextN block: llama.cpp (src/models/qwen3next.cpp) marks i < n_layer() with
    # (i + 1) % 4 != 0 recurrent: layers 0-2 and 4-6, full attention on 3 and 7; block 8 is filtered.
    keys = {**qwen3next_keys(SMALL_NEXT), "block_count": 9, "nextn_predict_layers": 1}
    path = gguf_file(tmp_path / "q3n.gguf", "qwen3next", keys)
    spec = api.load_model(str(path))
    assert [i for i, c in enumerate(spec.caches) if isinstance(c, AttentionCache)] == [3, 7]
    assert sum(isinstance(c, StateCache) for c in spec.caches) == 6
    # as the 8-layer file of tests/inputs/gguf/test_config.py: 1,048,576 B of K/V and 116,736 B of f32 state
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1_048_576 + 116_736


def test_unknown_architecture_with_nextn_is_refused(tmp_path: Path) -> None:
    arch, keys = ATTENTION_FILES["olmo2"]
    path = typed_gguf_file(tmp_path / "olmo.gguf", arch, {**keys, "nextn_predict_layers": (U32, 1)})
    with pytest.raises(SourceError, match=r"olmo2 with olmo2.nextn_predict_layers 1: whether llama.cpp loads"):
        api.load_model(str(path))


def test_drafter_file_is_refused(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4moe", 2, 2)
    with pytest.raises(SourceError, match=r"nextn_predict_layers is 2, not fewer than the 2 blocks"):
        api.load_model(str(typed_gguf_file(tmp_path / "draft.gguf", arch, keys)))


def test_zero_nextn_layers_change_nothing(tmp_path: Path) -> None:
    arch, keys = ATTENTION_FILES["glm4moe"]  # nextn_predict_layers 0, as a converter writes with MTP dropped
    spec = api.load_model(str(typed_gguf_file(tmp_path / "glm.gguf", arch, keys)))
    assert spec.layers == 3 and not any("NextN" in n for n in spec.notes)


# --- weights: NextN tensors are not loaded -----------------------------------------------------------------

# The tensors llama.cpp 0c1e570's glm4 loader (src/models/glm4.cpp) requires of a 256-wide, 4-head
# (2 KV heads of 64) model with a 512 MLP, 6 tokens and blocks 0-1 plus NextN block 2, found by loading
# until it asked for nothing more; blk.2's attention Q/K/V are optional there. (ne0, ne1) as llama.cpp
# prints them.
_BLOCK = {
    "attn_norm.weight": (256,), "attn_q.weight": (256, 256), "attn_k.weight": (256, 128),
    "attn_v.weight": (256, 128), "attn_output.weight": (256, 256), "post_attention_norm.weight": (256,),
    "ffn_norm.weight": (256,), "ffn_down.weight": (512, 256), "ffn_up.weight": (256, 1024),
    "post_ffw_norm.weight": (256,),
}  # fmt: skip
_NEXTN = {"nextn.eh_proj.weight": (512, 256), "nextn.enorm.weight": (256,), "nextn.hnorm.weight": (256,)}
GLM4_TENSORS: dict[str, tuple[int, ...]] = {
    "token_embd.weight": (256, 6), "output_norm.weight": (256,),
    **{f"blk.{i}.{name}": shape for i in (0, 1) for name, shape in _BLOCK.items()},
    **{f"blk.2.{name}": shape for name, shape in _BLOCK.items() if name[5] not in "qkv" or "output" in name},
    **{f"blk.2.{name}": shape for name, shape in _NEXTN.items()},
}  # fmt: skip


def _elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def test_nextn_weights_are_left_out(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4", 3, 1)
    path = typed_gguf_file(tmp_path / "glm4.gguf", arch, keys, GLM4_TENSORS)
    trunk_block = sum(_elements(s) for s in _BLOCK.values()) * 4  # f32
    # per block: 256 + 65,536 + 32,768 + 32,768 + 65,536 + 256 + 256 + 131,072 + 262,144 + 256 elements
    assert trunk_block == 590_848 * 4
    everything = sum(_elements(s) for s in GLM4_TENSORS.values()) * 4
    assert read_header(path).tensor_bytes == everything
    loaded = (256 * 6 + 256) * 4 + 2 * trunk_block
    assert loaded_tensor_bytes([read_header(path)], str(path)) == loaded == 4_733_952
    assert gguf_weights_bytes(path)[0] == loaded
    split = layer_weights(path)
    assert split.layers == (trunk_block, trunk_block, 0) and split.nextn == 1
    assert split.total == loaded + 256 * 6 * 4  # the output layer's copy of the tied embeddings


def test_offload_counts_the_nextn_slot(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4", 3, 1)
    path = typed_gguf_file(tmp_path / "glm4.gguf", arch, keys, GLM4_TENSORS)
    # -ngl 2 of 4 slots (blocks 0-2, output): i_gpu_start = 3 + 1 - 2 = 2, so the NextN block 2 (nothing
    # loaded, nothing cached) and the output layer go to the GPU; both trunk layers and their caches stay.
    report = api.fit_offload(str(path), gpu_layers=2, gpu_memory=24 * 2**30, tokens=1000)
    gpu, cpu = report.devices
    assert report.n_layer == 3
    # output_norm and the head, a copy of the tied 256 x 6 embeddings, f32
    assert gpu.kv_cache == 0 and gpu.weights == (256 + 256 * 6) * 4
    # llama.cpp: 1024 cells x 2 layers x 2 (K, V) x 2 KV heads x 64 x 2 B
    assert cpu.kv_cache == 1024 * 2 * 2 * 2 * 64 * 2


# --- the real llama.cpp -------------------------------------------------------------------------------------

_CHILD = """
import sys, llama_cpp
llama_cpp.Llama(model_path=sys.argv[1], n_ctx=int(sys.argv[2]), n_gpu_layers=0, n_threads=1, verbose=True)
"""


def _load(path: Path, n_ctx: int) -> str:
    """llama.cpp's log of loading ``path`` with its tensor data and creating a context of ``n_ctx``."""
    pytest.importorskip("llama_cpp")
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path), str(n_ctx)], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stderr + done.stdout


def test_llama_cpp_skips_and_filters_the_nextn_block(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4", 3, 1)
    path = typed_gguf_file(tmp_path / "glm4.gguf", arch, keys, GLM4_TENSORS)
    log = _load(path, 1000)
    assert "llama_kv_cache: layer   2: filtered" in log
    kv = re.search(r"llama_kv_cache: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers", log)
    assert kv is not None and kv.groups() == ("1024", "2")
    unused = {m[0]: int(m[1]) for m in re.findall(r"model has unused tensor (\S+) \(size = (\d+) bytes\)", log)}
    assert set(unused) == {n for n in GLM4_TENSORS if n.startswith("blk.2.")}
    buffer = re.search(r"CPU_Mapped model buffer size = +([\d.]+) MiB", log)
    loaded = gguf_weights_bytes(path)[0]
    assert buffer is not None and buffer[1] == f"{loaded / 2**20:.2f}"
    assert read_header(path).tensor_bytes - sum(unused.values()) == loaded
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 1024 * 2 * 2 * 2 * 64 * 2


def test_llama_cpp_glm4moe_filters_the_nextn_block(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4moe", 3, 1)
    path = typed_gguf_file(tmp_path / "glm.gguf", arch, keys, GLM4MOE_TENSORS)
    log = _load(path, 1000)
    assert "llama_kv_cache: layer   2: filtered" in log
    k = re.search(r"\( *(\d+) cells, +(\d+) layers, +1/1 seqs\), K \(f16\): +([\d.]+) MiB", log)
    # 1024 cells x 2 trunk layers x 2 KV heads x 128 x 2 B = 1,048,576 B of K (and as much V)
    assert k is not None and k.groups() == ("1024", "2", "1.00")
    assert api.estimate(str(path), tokens=1000, engine="llama.cpp").total_bytes == 2 * 1024 * 2 * 2 * 128 * 2
    buffer = re.search(r"CPU_Mapped model buffer size = +([\d.]+) MiB", log)
    assert buffer is not None and buffer[1] == f"{gguf_weights_bytes(path)[0] / 2**20:.2f}"


def test_probe_of_a_file_with_nextn_blocks(tmp_path: Path) -> None:
    # The probe's data-less copy is the trunk (block_count 3, nextn 0): llama.cpp caches the same 3
    # layers as the real file: 1024 cells x 3 x 2 (K, V) x 2 KV heads x 128 x 2 B
    pytest.importorskip("llama_cpp")
    arch, keys = with_nextn("glm4moe", 4, 1)
    path = typed_gguf_file(tmp_path / "glm.gguf", arch, keys)
    report = api.probe_llamacpp(str(path), tokens=1000, batch=1)
    assert report.match and report.measured_bytes == 1024 * 3 * 2 * 2 * 128 * 2
    assert any("leaves out the 1 NextN block" in n for n in report.notes)
