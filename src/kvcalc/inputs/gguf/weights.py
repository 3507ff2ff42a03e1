"""The tensors llama.cpp loads from a GGUF: every tensor but those of skipped NextN (MTP) blocks,
their bytes and parameters, and their bytes by llama.cpp layer (for the GPU/CPU split).

Converters that keep a model's multi-token-prediction layers (conversion/glm.py Glm4MoeModel, qwen.py's
MTP mixin, deepseek.py, mimo.py, ...) count them in block_count and write nextn_predict_layers. llama.cpp
0c1e570 runs the first n_layer() = block_count - nextn_predict_layers blocks (src/llama-hparams.cpp
n_layer()), and the architectures that skip the rest (Architecture.skips_nextn, in
kvcalc.engines.llamacpp.architectures) neither load nor cache them unless the model is loaded for MTP
drafting. An architecture that does not, or a file that holds only NextN blocks (a drafter), is refused.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.engines.llamacpp.architectures import architecture
from kvcalc.errors import SourceError
from kvcalc.inputs.gguf.header import GgufHeader, TensorInfo, read_header, split_shards
from kvcalc.inputs.gguf.values import count

if TYPE_CHECKING:
    from kvcalc.calc.offload import LayerWeights


def nextn_layers(meta: dict[str, Any], label: str) -> int:
    """How many of a GGUF's last blocks are NextN (MTP) layers that a plain llama.cpp context skips."""
    arch = meta.get("general.architecture")
    value = meta.get(f"{arch}.nextn_predict_layers")
    if value is None or value == 0:
        return 0
    key = f"{arch}.nextn_predict_layers"
    nextn = count(value, key, label)
    blocks = meta.get(f"{arch}.block_count")
    if not isinstance(blocks, int) or isinstance(blocks, bool) or nextn >= blocks:
        raise SourceError(f"{label}: GGUF key {key} is {nextn}, not fewer than the {blocks} blocks: a drafter "
                          "file holding only NextN layers is not supported")  # fmt: skip
    record = architecture(arch)
    if record is None or not record.skips_nextn:
        raise SourceError(f"{label}: GGUF {arch} with {key} {nextn}: whether llama.cpp loads and caches the NextN "
                          "layers of this architecture is not known to kvcalc; not supported")  # fmt: skip
    return nextn


def _loaded_blocks(meta: dict[str, Any], label: str) -> int | None:
    """The blocks whose tensors llama.cpp loads (all but the NextN ones), or None to load all."""
    nextn = nextn_layers(meta, label)
    if not nextn:
        return None
    return int(meta[f"{meta['general.architecture']}.block_count"]) - nextn


def loaded_tensor_bytes(headers: list[GgufHeader], label: str) -> int:
    """Bytes of the tensors llama.cpp loads from these shards (the first one first): every tensor
    but those of skipped NextN blocks."""
    return sum(t.nbytes for t in _loaded(headers, label))


def loaded_parameters(headers: list[GgufHeader], label: str) -> int:
    """Elements of the tensors llama.cpp loads (the parameters, whatever their quantization)."""
    return sum(math.prod(t.dims) for t in _loaded(headers, label))


def stored_split(headers: list[GgufHeader], label: str) -> tuple[int, int]:
    """(input embedding bytes, routed experts' bytes) of the loaded tensors: token_embd, and the
    stacked expert tensors (llama.cpp's ``blk.N.ffn_{gate,up,down,gate_up}_exps``)."""
    embedding = experts = 0
    for t in _loaded(headers, label):
        if t.name == "token_embd.weight":
            embedding += t.nbytes
        elif _EXPERTS.match(t.name):
            experts += t.nbytes
    return embedding, experts


_EXPERTS = re.compile(r"^blk\.\d+\.ffn_(gate|up|down|gate_up)_exps\.")


def check_tensor_data(headers: list[GgufHeader], label: str) -> None:
    """Refuse tensor infos no real file holds, before any weights are sized from them: tensors
    adding up to more than sources.MAX_WEIGHTS_BYTES (a 2^62 x 2^62 tensor), or tensor data that
    runs past the end of its file (a truncated download; llama.cpp's loader refuses it: "tensor
    data is not within the file bounds"). Every path from tensor infos to weights (the total, the
    parameters, the embedding and expert split, the split by layer) goes through here."""
    from kvcalc.inputs.files import MAX_WEIGHTS_BYTES

    total = sum(t.nbytes for header in headers for t in header.tensors)
    if total > MAX_WEIGHTS_BYTES:
        raise SourceError(
            f"{label}: tensor infos add up to {total:,} bytes, implausibly large (over {MAX_WEIGHTS_BYTES:,})"
        )
    for i, header in enumerate(headers):
        end = header.data_end
        if end is not None and header.file_size is not None and end > header.file_size:
            shard = f" (shard {i + 1} of {len(headers)})" if len(headers) > 1 else ""
            raise SourceError(
                f"{label}{shard} is truncated: its tensor data ends at byte {end:,}, but the file has "
                f"{header.file_size:,} bytes (an incomplete download?)"
            )


def _loaded(headers: list[GgufHeader], label: str) -> list[TensorInfo]:
    check_tensor_data(headers, label)
    trunk = _loaded_blocks(headers[0].metadata, label)
    kept = []
    for header in headers:
        for t in header.tensors:
            m = _BLOCK.match(t.name)
            if trunk is None or m is None or int(m[1]) < trunk:
                kept.append(t)
    return kept


# --- weights by llama.cpp layer (for the GPU/CPU split) ------------------------------------------------------

_BLOCK = re.compile(r"^blk\.(\d+)\.")


def layer_weights(path: Path) -> LayerWeights:
    """A GGUF's tensor bytes by llama.cpp layer (kvcalc.calc.offload.LayerWeights), from the tensor infos of
    every shard: ``blk.N.*`` is layer N; ``output.*`` and ``output_norm.*`` the output layer, which
    holds a copy of ``token_embd.weight`` when the file has no ``output.weight`` (the architectures'
    load_tensors create the head as a TENSOR_DUPLICATED token embedding, and src/llama-model-loader.cpp
    create_tensor places such a tensor as LLM_TENSOR_OUTPUT, with the output layer); every
    other tensor (token embeddings, their norm) is the input layer, which stays on the CPU."""
    shards = split_shards(path)
    first = read_header(path)
    return headers_layer_weights([first if shard == path else read_header(shard) for shard in shards], str(path))


def headers_layer_weights(headers: list[GgufHeader], label: str) -> LayerWeights:
    """``layer_weights`` from the headers of every shard, the first one first (a local file's or
    a Hub file's, read in byte ranges)."""
    from kvcalc.calc.offload import LayerWeights

    check_tensor_data(headers, label)
    first = headers[0]
    path = label
    tensors = [t for header in headers for t in header.tensors]
    arch = first.metadata.get("general.architecture")
    layers = first.metadata.get(f"{arch}.block_count")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers <= 0:
        raise SourceError(f"{path}: GGUF has no {arch}.block_count")
    trunk = _loaded_blocks(first.metadata, path)
    per_layer = [0] * layers
    input_bytes = output_bytes = 0
    names = {t.name for t in tensors}
    for t in tensors:
        m = _BLOCK.match(t.name)
        if m is not None:
            index = int(m[1])
            if index >= layers:
                raise SourceError(f"{path}: GGUF tensor {t.name} is past the {layers} layers of {arch}.block_count")
            if trunk is None or index < trunk:  # a NextN block's tensors are not loaded (TENSOR_SKIP)
                per_layer[index] += t.nbytes
        elif t.name.startswith(("output.", "output_norm.")):
            output_bytes += t.nbytes
        else:
            input_bytes += t.nbytes
            if t.name == "token_embd.weight" and "output.weight" not in names:
                output_bytes += t.nbytes  # the tied head: a copy with the output layer
    return LayerWeights(input_bytes, tuple(per_layer), output_bytes, nextn=0 if trunk is None else layers - trunk)
