"""speed's service (kvcalc.api._speed)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.errors import SourceError, UsageError
from tests.helpers.gguf_files import typed_gguf_file
from tests.helpers.gguf_models import with_nextn


def test_speed_on_a_gguf_with_no_tensors_takes_the_weights_given(tmp_path: Path) -> None:
    arch, keys = with_nextn("glm4moe", 3, 0)
    path = typed_gguf_file(tmp_path / "empty.gguf", arch, keys)
    with pytest.raises(SourceError, match=r"holds no tensors: give --weights SIZE$"):
        api.speed(str(path), prompt=10, output=2, compute=api.Compute(bandwidth=10**12, flops=10**15))
    report = api.speed(
        str(path), prompt=10, output=2, compute=api.Compute(bandwidth=10**12, flops=10**15, weights=10**9)
    )
    assert report.result.weights.total_bytes == 10**9


def test_speed_takes_the_engines_options_through_serving() -> None:
    # The first decode step after a 1,000-token prompt reads 1,000 tokens' cache. llama-3.1-8b:
    # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B per token. vLLM, 32-token blocks:
    # cdiv(1000, 32) = 32 blocks = 1,024 tokens -> 134,217,728 B; fp8 (1 B an element) half that.
    # The theoretical engine reads the 1,000 tokens alone: 131,072,000 B.
    def first_read(**kwargs: Any) -> int:
        report = api.speed("llama-3.1-8b", prompt=1000, output=2, gpu="h100-sxm", sweep=[], **kwargs)
        return report.result.decode.first.kv_bytes

    assert first_read(serving=api.Serving("vllm", options={"block_size": 32})) == 134_217_728
    assert first_read(serving=api.Serving("vllm", kv_dtype="fp8", options={"block_size": 32})) == 134_217_728 // 2
    assert first_read() == 131_072_000


@pytest.mark.parametrize(
    ("kwargs", "message", "params"),
    [
        ({"serving": api.Serving(options={"block_size": 32})},
         "block_size changes nothing under the theoretical engine (an option of vllm and sglang)", ("block_size",)),
        ({"serving": api.Serving("vllm"), "engine": "vllm"}, "give serving or engine, not both", ("serving", "engine")),
        ({"serving": api.Serving("vllm"), "kv_dtype": "fp8"}, "give serving or kv_dtype, not both",
         ("serving", "kv_dtype")),
        # speed reads a quantized cache at its format for every token: residual tokens are not modelled.
        ({"serving": api.Serving("transformers", kv_dtype="int4", residual_tokens=0)},
         "speed does not model residual_tokens", ("residual_tokens",)),
        # llama-3.1-8b has no sliding or chunked layer: max_num_batched_tokens sizes none of its cache.
        ({"serving": api.Serving("vllm", options={"max_batched_tokens": 4096})},
         "max_batched_tokens changes nothing in llama-3.1-8b's cache under vllm", ("max_batched_tokens",)),
    ],
)  # fmt: skip
def test_speed_refuses_serving_it_would_ignore(kwargs: dict[str, Any], message: str, params: tuple[str]) -> None:
    with pytest.raises(UsageError, match=re.escape(message)) as caught:
        api.speed("llama-3.1-8b", prompt=1000, output=2, gpu="h100-sxm", sweep=[], **kwargs)
    assert caught.value.params == params
