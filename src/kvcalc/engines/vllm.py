"""vLLM v1's paged cache (vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py @ 001cabc1;
dtype rules from vllm/config/model.py, vLLM 0.33.0)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.errors import UsageError
from kvcalc.spec import Kind, LayerCache

from .base import FLOAT_KV, Engine, EngineOptions, cdiv

# DeepseekV32IndexerCache (vllm/model_executor/models/deepseek_v2.py): the indexer's keys as fp8
# e4m3 plus one fp32 scale per 128 values, index_head_dim + index_head_dim / 128 x 4 bytes a token,
# in its own MLAAttentionSpec of uint8 (same block size as the latent), whatever --kv-cache-dtype.
INDEXER_FP8 = DType("fp8+scale", 8, "fp8 e4m3 + one fp32 scale per 128 values", block=128, meta_bytes=4)

# vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS (vLLM 0.33.0).
_NO_FP16 = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4"})


@dataclass(frozen=True)
class VLLM(Engine):
    """A sequence holds ``cdiv(T, block)`` blocks per layer. Sliding layers reserve
    ``cdiv(min(W - 1 + max_num_batched_tokens, T), block) + 1`` blocks (the window may not start
    on a block boundary); chunked layers ``cdiv(min(chunk + max_num_batched_tokens, T), block)``;
    neither more than the full ``cdiv(T, block)``. Prefix caching shares whole blocks. A state
    layer (Mamba, linear attention) holds one state per request.
    """

    name: str = "vllm"
    block_size: int = 16
    max_num_batched_tokens: int = 8192

    @classmethod
    def configure(cls, options: EngineOptions) -> tuple[Engine, list[str]]:
        notes = []
        block_size = options.block_size
        if block_size is None:
            # vllm/platforms/cuda.py: FlashMLA (the default MLA backend before Blackwell) forces 64.
            block_size = 64 if options.uses_mla else 16
            if options.uses_mla:
                notes.append("vLLM MLA backends force larger blocks: 64 tokens (FlashMLA; CUTLASS MLA uses 128)")
        mnbt = options.max_num_batched_tokens if options.max_num_batched_tokens is not None else 8192
        return cls(block_size=block_size, max_num_batched_tokens=mnbt), notes

    @property
    def granularity(self) -> int:
        return self.block_size

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in FLOAT_KV:
            raise UsageError(f"vLLM stores the KV cache as the model dtype or fp8, not {dtype.name}")

    def check_layer(self, cache: LayerCache) -> None:
        if cache.is_compressed_attention:
            # vllm/models/deepseek_v4/attention.py @ e6643eca: MLAAttentionSpec(compress_ratio=...,
            # model_version="deepseek_v4") pages of block_size // ratio entries, fp8_ds_mla rows of
            # 584 B, a DeepseekV4SWACache and compressor-state specs: a layout kvcalc does not size yet.
            raise UsageError(
                "vLLM's DeepSeek-V4 cache (compressed MLA pages, fp8_ds_mla rows, SWA and compressor-state "
                "caches; vllm/models/deepseek_v4 @ e6643eca) is not modelled: use --engine theoretical or transformers"
            )

    def blocks_held(
        self, cache: LayerCache, tokens: int, block_size: int | None = None, *, planning: bool = False
    ) -> int:
        """Blocks one request of ``tokens`` tokens holds in this layer. ``planning``: what vLLM's
        capacity report reserves instead (``max_memory_usage_bytes`` of the layer's KVCacheSpec),
        which for a window is not capped at the full ``cdiv(T, block)``. ``block_size`` when a
        hybrid layout enlarged this group's blocks."""
        bs = block_size or self.block_size
        if cache.is_state:
            return 1  # MambaSpec: one state per request
        full = cdiv(tokens, bs)
        if cache.kind is Kind.SLIDING and cache.token_bound is not None:
            # SlidingWindowSpec: the window may start mid-block, hence one block more.
            reserved = cdiv(min(cache.token_bound - 1 + self.max_num_batched_tokens, tokens), bs) + 1
            return reserved if planning else min(full, reserved)
        if cache.kind is Kind.CHUNKED and cache.token_bound is not None:
            # ChunkedLocalAttentionSpec.
            return min(full, cdiv(min(cache.token_bound + self.max_num_batched_tokens, tokens), bs))
        return full

    def spec_label(self, cache: LayerCache) -> str:
        """The vLLM KVCacheSpec a layer gets, as kvcalc labels it (window or chunk included, since
        layers group only with the same one)."""
        if cache.is_state:
            return "mamba"
        if cache.tokens == "encoder":
            return "cross"
        if cache.kind in (Kind.SLIDING, Kind.CHUNKED):
            return f"{cache.kind.short}:{cache.token_bound}"
        return "full"

    def layer_tokens(self, cache: LayerCache, text: int, images: int) -> int:
        if cache.tokens == "image":
            # PR #24907 removed V0's encoder-decoder runner, and with it MllamaForConditionalGeneration;
            # vllm/model_executor/models/registry.py lists it in _PREVIOUSLY_SUPPORTED_MODELS as "0.10.2".
            raise UsageError(
                "vLLM no longer runs Llama 3.2 Vision (mllama): it was removed with V0's encoder-decoder support "
                "after vLLM 0.10.2 (PR #24907); not modelled"
            )
        return super().layer_tokens(cache, text, images)

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return self.blocks_held(cache, tokens) * self.block_size

    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType:
        """DSA: INDEXER_FP8 above. MSA (MiniMax-M3): ``MiniMaxM3IndexerCache``
        (vllm/models/minimax_m3/common/indexer.py @ 0484480b) stores torch.bfloat16 for the default
        ``indexer_kv_dtype="bf16"`` (vllm/config/attention.py), whatever --kv-cache-dtype; its fp8
        option (e4m3, no scales) must be asked for."""
        return BF16 if family == "msa" else INDEXER_FP8

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """``_resolve_auto_dtype`` (since PR #18751): a float32 (or dtype-less) checkpoint runs in
        the platform's first supported dtype, bf16 on GPUs of compute capability 8.0 and newer
        (fp16 on older ones, fp32 for Gemma 2/3 and GLM-4 there); fp16 is never used for those
        model types. The KV cache (``cache_dtype="auto"``) and the Mamba state
        (``mamba_cache_dtype="auto"``) take that dtype (vllm/utils/torch_utils.py
        ``kv_cache_dtype_str_to_dtype``), and so does the recurrent (SSM) state
        (``mamba_ssm_cache_dtype="auto"``) except where vllm/model_executor/models/config.py sets it
        from the config: ``NemotronHForCausalLMConfig`` (``mamba_ssm_cache_dtype``, float32 when
        absent) and ``Qwen3_5ForConditionalGenerationConfig`` (``mamba_ssm_dtype``); the config
        reader carries those as the state's ``recurrent_dtype``, which ``state_parts`` honours."""
        no_fp16 = model_type in _NO_FP16
        if config_dtype is None or config_dtype == FP32:
            what = "names no dtype" if config_dtype is None else "is float32"
            return BF16, (
                f"the checkpoint {what}: vLLM runs it, and caches K/V, in bf16 on GPUs of compute capability "
                "8.0+ (fp16 before 8.0" + (", here fp32" if no_fp16 else "") + "; set --kv-dtype to override)"
            )
        if config_dtype == FP16 and no_fp16:
            return BF16, f"vLLM does not run {model_type} in fp16: it uses bf16 (compute capability 8.0+)"
        return config_dtype, None
