"""GGUF files as MODEL: the header only (metadata and tensor infos), never the tensor data.

- ``header``: the GGUF format, read with ``struct`` (``read_header``, ``parse_header``, split shards);
- ``config``: the metadata as the Hugging Face style config dict ``read_config`` reads (``gguf_config``,
  the inverse of ``llamacpp_probe.gguf_plan``), by the mapping the architecture's record names
  (kvcalc.engines.llamacpp.architectures), with ``recurrent``, ``attention`` and ``mla`` holding the
  mappings of the layouts that have their own and ``values`` the checks every value goes through;
- ``weights``: the tensors llama.cpp loads (NextN blocks skipped), their bytes and their split by layer.

Every function is pure except ``read_header``, ``split_shards`` and ``layer_weights``, which read files.
"""

from __future__ import annotations

from kvcalc.inputs.gguf.config import ARCH_TYPES, gguf_config
from kvcalc.inputs.gguf.header import (
    GGML_TYPES,
    MAGIC,
    SUPPORTED_VERSIONS,
    GgufHeader,
    TensorInfo,
    is_gguf,
    parse_header,
    read_header,
    shard_position,
    split_shards,
)
from kvcalc.inputs.gguf.weights import (
    check_tensor_data,
    headers_layer_weights,
    layer_weights,
    loaded_parameters,
    loaded_tensor_bytes,
    nextn_layers,
    stored_split,
)

__all__ = [
    "ARCH_TYPES",
    "GGML_TYPES",
    "MAGIC",
    "SUPPORTED_VERSIONS",
    "GgufHeader",
    "TensorInfo",
    "check_tensor_data",
    "gguf_config",
    "headers_layer_weights",
    "is_gguf",
    "layer_weights",
    "loaded_parameters",
    "loaded_tensor_bytes",
    "nextn_layers",
    "parse_header",
    "read_header",
    "shard_position",
    "split_shards",
    "stored_split",
]
