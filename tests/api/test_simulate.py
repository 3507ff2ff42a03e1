"""simulate's service (kvcalc.api._simulate)."""

from __future__ import annotations

from typing import Any

from kvcalc import api


def test_fp8_weights_given_grow_the_pool_and_shorten_decode() -> None:
    """Llama-3.1-70B's checkpoint is 141,107,412,992 B of bf16 (its safetensors index total_size); an
    FP8 one weighs a byte a parameter, 70,553,706,496 B. At TP 2 each GPU holds half the weights, so
    the pool grows by (141,107,412,992 - 70,553,706,496) / 2 = 35,276,853,248 B a GPU. vLLM's blocks
    for 70B at TP 2: 80 layers x 2 (K, V) x 4 KV heads a GPU (8 / 2) x 128 x 2 B x 16 tokens =
    2,621,440 B, so 35,276,853,248 / 2,621,440 = 13,457.3: 13,457 more blocks. Decode at batch 1
    reads the weights each step: half the bytes, well under 0.6 of the time. (simulate once took no
    weights, and ran every FP8 checkpoint of a bf16 preset at bf16: a pool a ninth the size.)"""
    common: dict[str, Any] = dict(load=api.Load(concurrency=1, count=1, prompt=10, output=2), gpu="h100-sxm",
                                  engine="vllm", tp=2, timeline=False)  # fmt: skip
    bf16 = api.simulate("llama-3.1-70b", **common)
    fp8 = api.simulate("llama-3.1-70b", compute=api.Compute(weights_format="fp8", weights=70_553_706_496), **common)
    assert fp8.pool_bytes - bf16.pool_bytes == 35_276_853_248
    assert fp8.run.pool_units - bf16.run.pool_units == 13_457
    assert fp8.tpot.mean < 0.6 * bf16.tpot.mean
