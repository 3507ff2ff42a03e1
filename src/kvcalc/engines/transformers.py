"""transformers' ``DynamicCache`` (src/transformers/cache_utils.py, transformers 5.24)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.dtypes import FP32, DType
from kvcalc.spec import LayerCache

from .base import Engine


@dataclass(frozen=True)
class Transformers(Engine):
    """``DynamicSlidingWindowLayer`` keeps a view of the last W-1 tokens between steps (the step's
    own token is appended while attending); Llama 4's chunked layers are the same layer with W =
    the chunk. Linear-attention and Mamba layers (``LinearAttentionLayer``) keep the conv state
    for the whole kernel in the model dtype and the recurrent state in float32 (measured with
    ``kvcalc probe``), whatever the config's ``mamba_ssm_dtype`` / ``mamba_ssm_cache_dtype`` say:
    transformers 5.24 reads neither (the chunked and recurrent gated-delta-rule kernels of qwen3_5
    compute, and return, the state in float32). Falcon's new_decoder_architecture caches K/V
    broadcast to every query head."""

    name: str = "transformers"

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        if cache.tokens == "decoder" and cache.token_bound is not None:
            return min(tokens, cache.token_bound - 1)
        return super().tokens_held(cache, tokens)

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        conv, recurrent = cache.state_elements(whole_kernel=True)
        return (conv, cache.state_dtype), (recurrent, FP32)

    def kv_heads(self, cache: LayerCache) -> int | None:
        return cache.expanded_kv_heads
