"""SGLang's token pool (python/sglang/srt/mem_cache/memory_pool.py, model_runner.py; dtype rules
from sglang/srt/configs/model_config.py and configs/mamba_utils.py, SGLang 0.5.23)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache

from .base import FLOAT_KV, Engine, EngineOptions, pad, recurrent_dtype
from .vllm import INDEXER_FP8


@dataclass(frozen=True)
class SGLang(Engine):
    """One cell per token in every layer, allocated in pages of ``page_size`` tokens (default 1).
    Sliding layers only use the smaller SWA pool when the hybrid SWA allocator is on; the cell
    count per token is the same in both pools."""

    name: str = "sglang"
    page_size: int = 1

    @classmethod
    def configure(cls, options: EngineOptions) -> tuple[Engine, list[str]]:
        return cls(page_size=options.block_size or 1), []

    @property
    def granularity(self) -> int:
        return self.page_size

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in FLOAT_KV:
            raise UsageError(f"SGLang stores the KV cache as the model dtype or fp8, not {dtype.name}")

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        kept = super().tokens_held(cache, tokens)
        return pad(kept, self.page_size)

    def indexer_dtype(self, kv: DType, compute: DType) -> DType:
        """NSATokenToKVPool (mem_cache/memory_pool.py): ``index_k_with_scale_buffer`` of uint8 holds
        index_head_dim fp8 values + index_head_dim / quant_block_size (128) x 4 scale bytes a token,
        as model_runner.py's cell size counts it."""
        return INDEXER_FP8

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """``_get_and_verify_dtype``: a float32 (or dtype-less) config runs in bf16 for Gemma model
        types and fp16 for every other; the KV cache (``--kv-cache-dtype auto``) takes the model
        dtype (mem_cache/kv_cache_dtype.py)."""
        if config_dtype is None or config_dtype == FP32:
            chosen = BF16 if model_type.startswith("gemma") else FP16
            what = "names no dtype" if config_dtype is None else "is float32"
            return chosen, f"the checkpoint {what}: SGLang runs it, and caches K/V, in {chosen.name}"
        return config_dtype, None

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        """``mamba2_state_dtype``: the SSM state is float32 unless the config's ``mamba_ssm_dtype``
        (or SGLANG_MAMBA_SSM_DTYPE) says otherwise (sglang/srt/configs/mamba_utils.py); the conv
        state is bfloat16 (SGLANG_MAMBA_CONV_DTYPE), whatever the model dtype."""
        conv, recurrent = cache.state_elements(whole_kernel=False)
        return (conv, BF16), (recurrent, recurrent_dtype(cache) or cache.state_dtype or FP32)
