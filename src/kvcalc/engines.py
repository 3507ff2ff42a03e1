"""How each engine turns a layer and a workload into stored token slots.

The estimator asks an engine three things per layer: how many token slots one sequence holds
(windows, chunks, block rounding), how many of those are a shared prefix stored once, and, for
engines with one cache shared by all sequences (llama.cpp), how many slots the whole batch holds.
Element formats, quantization metadata and tensor/pipeline parallel are the same for every
engine and live in the estimator. Each rule names the engine source it follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dtypes import BF16, FP16, FP32, DType
from .errors import UsageError
from .spec import AttentionCache, LatentCache, LayerCache, StateCache


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pad(n: int, multiple: int) -> int:
    return cdiv(n, multiple) * multiple


@dataclass(frozen=True)
class Engine:
    """Theoretical: exactly what attention must keep.

    A sliding layer keeps W tokens (the query at t reads t-W+1..t, Mistral's rolling buffer of
    W); a chunked layer at most one chunk; every other attention layer every token.
    """

    name: str = "theoretical"

    @property
    def granularity(self) -> int:
        """Tokens per allocation unit; a shared prefix is shared in whole units."""
        return 1

    def check_dtype(self, dtype: DType) -> None:
        """Raise a UsageError for a KV format this engine cannot store."""

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        """Token slots one sequence of ``tokens`` tokens holds in this layer."""
        bound = cache.token_bound
        return tokens if bound is None else min(tokens, bound)

    def shared_tokens(self, cache: LayerCache, tokens: int, prefix: int) -> int:
        """Of the slots held, how many are a shared prefix (stored once for the whole batch).

        Held slots cover the newest tokens; the prefix covers the oldest, in whole units.
        """
        if prefix <= 0:
            return 0
        held = self.tokens_held(cache, tokens)
        shared = min(prefix, tokens) // self.granularity * self.granularity
        # Overlap of [0, shared) with the held range [tokens - held, tokens).
        return max(0, shared - max(0, tokens - held))

    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int:
        """Slots the whole batch holds in this layer."""
        held = self.tokens_held(cache, tokens)
        return batch * held - (batch - 1) * self.shared_tokens(cache, tokens, prefix)

    def state_parts(self, cache: StateCache) -> tuple[tuple[int, DType | None], ...]:
        """(elements, format or None for the workload's state format) of a state layer: the conv
        history (kernel - 1 past inputs) and the recurrent state."""
        return (cache.conv_elements, None), (cache.recurrent_elements, None)

    def kv_heads(self, cache: AttentionCache) -> int:
        """KV heads this engine stores for the whole layer (before tensor parallel splits them)."""
        return cache.kv_heads

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """The dtype the engine runs a model in when none is asked for, and a note when that is
        not simply the config's own (``--kv-dtype auto``)."""
        if config_dtype is None:
            return FP16, "the model names no dtype: KV cache assumed fp16 (set --kv-dtype)"
        return config_dtype, None

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """The KV format when none is asked for: the model's run dtype in every engine but llama.cpp."""
        return self.model_dtype(config_dtype, model_type)


THEORETICAL = Engine()


@dataclass(frozen=True)
class Transformers(Engine):
    """transformers ``DynamicCache`` (cache_utils.py, 5.24): ``DynamicSlidingWindowLayer`` keeps
    a view of the last W-1 tokens between steps (the step's own token is appended while
    attending); Llama 4's chunked layers are the same layer with W = the chunk. Linear-attention
    and Mamba layers (``LinearAttentionLayer``) keep the conv state for the whole kernel in the
    model dtype and the recurrent state in float32 (measured with ``kvcalc probe``)."""

    name: str = "transformers"

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        bound = cache.token_bound if cache.tokens == "decoder" else None
        if isinstance(cache, AttentionCache) and bound is not None:
            return min(tokens, bound - 1)
        return super().tokens_held(cache, tokens)

    def state_parts(self, cache: StateCache) -> tuple[tuple[int, DType | None], ...]:
        return (cache.conv_channels * cache.conv_kernel, None), (cache.recurrent_elements, FP32)

    def kv_heads(self, cache: AttentionCache) -> int:
        return cache.expanded_heads or cache.kv_heads


# vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS (vLLM 0.33.0).
_VLLM_NO_FP16 = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4"})

_FLOAT_KV = ("fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class VLLM(Engine):
    """vLLM v1 paged cache (vllm/v1/kv_cache_interface.py, kv_cache_utils.py @ 001cabc1).

    A sequence holds ``cdiv(T, block)`` blocks per layer. Sliding layers reserve
    ``cdiv(min(W - 1 + max_num_batched_tokens, T), block) + 1`` blocks (the window may not start
    on a block boundary); chunked layers ``cdiv(min(chunk + max_num_batched_tokens, T), block)``;
    neither more than the full ``cdiv(T, block)``. Prefix caching shares whole blocks.
    """

    name: str = "vllm"
    block_size: int = 16
    max_num_batched_tokens: int = 8192

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """vllm/config/model.py ``_resolve_auto_dtype`` (vLLM 0.33.0; since PR #18751): a float32
        (or dtype-less) checkpoint runs in the platform's first supported dtype, bf16 on GPUs of
        compute capability 8.0 and newer (fp16 on older ones, fp32 for Gemma 2/3 and GLM-4 there);
        fp16 is never used for those model types (``_FLOAT16_NOT_SUPPORTED_MODELS``). The KV
        cache (``cache_dtype="auto"``) and the Mamba state (``mamba_cache_dtype="auto"``) take
        that dtype (vllm/utils/torch_utils.py ``kv_cache_dtype_str_to_dtype``)."""
        no_fp16 = model_type in _VLLM_NO_FP16
        if config_dtype is None or config_dtype == FP32:
            what = "names no dtype" if config_dtype is None else "is float32"
            return BF16, (
                f"the checkpoint {what}: vLLM runs it, and caches K/V, in bf16 on GPUs of compute capability "
                "8.0+ (fp16 before 8.0" + (", here fp32" if no_fp16 else "") + "; set --kv-dtype to override)"
            )
        if config_dtype == FP16 and no_fp16:
            return BF16, f"vLLM does not run {model_type} in fp16: it uses bf16 (compute capability 8.0+)"
        return config_dtype, None

    @property
    def granularity(self) -> int:
        return self.block_size

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _FLOAT_KV:
            raise UsageError(f"vLLM stores the KV cache as the model dtype or fp8, not {dtype.name}")

    def blocks_held(self, cache: LayerCache, tokens: int) -> int:
        bs = self.block_size
        full = cdiv(tokens, bs)
        if isinstance(cache, AttentionCache) and cache.window is not None:
            reserved = min(cache.window - 1 + self.max_num_batched_tokens, tokens)
            return min(full, cdiv(reserved, bs) + 1)
        if isinstance(cache, AttentionCache) and cache.chunk is not None:
            return min(full, cdiv(min(cache.chunk + self.max_num_batched_tokens, tokens), bs))
        return full

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return self.blocks_held(cache, tokens) * self.block_size


@dataclass(frozen=True)
class SGLang(Engine):
    """SGLang token pool (python/sglang/srt/mem_cache/memory_pool.py, model_runner.py): one
    cell per token in every layer, allocated in pages of ``page_size`` tokens (default 1).
    Sliding layers only use the smaller SWA pool when the hybrid SWA allocator is on; the cell
    count per token is the same in both pools."""

    name: str = "sglang"
    page_size: int = 1

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """sglang/srt/configs/model_config.py ``_get_and_verify_dtype`` (SGLang 0.5.23): a float32
        (or dtype-less) config runs in bf16 for Gemma model types and fp16 for every other; the KV
        cache (``--kv-cache-dtype auto``) takes the model dtype (mem_cache/kv_cache_dtype.py)."""
        if config_dtype is None or config_dtype == FP32:
            chosen = BF16 if model_type.startswith("gemma") else FP16
            what = "names no dtype" if config_dtype is None else "is float32"
            return chosen, f"the checkpoint {what}: SGLang runs it, and caches K/V, in {chosen.name}"
        return config_dtype, None

    def state_parts(self, cache: StateCache) -> tuple[tuple[int, DType | None], ...]:
        """sglang/srt/configs/mamba_utils.py ``mamba2_state_dtype``: the SSM state is float32 unless
        the config's ``mamba_ssm_dtype`` (or SGLANG_MAMBA_SSM_DTYPE) says otherwise; the conv state
        is bfloat16 (SGLANG_MAMBA_CONV_DTYPE), whatever the model dtype."""
        return (cache.conv_elements, BF16), (cache.recurrent_elements, cache.dtype or FP32)

    @property
    def granularity(self) -> int:
        return self.page_size

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _FLOAT_KV:
            raise UsageError(f"SGLang stores the KV cache as the model dtype or fp8, not {dtype.name}")

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        kept = super().tokens_held(cache, tokens)
        return pad(kept, self.page_size)


_GGML_KV = ("fp32", "fp16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


@dataclass(frozen=True)
class LlamaCpp(Engine):
    """llama.cpp KV cache (src/llama-context.cpp after PR #17046, src/llama-kv-cache.cpp,
    src/llama-kv-cache-iswa.cpp). The batch is ``--parallel B`` slots of T tokens: n_ctx =
    pad(B x T, 256). With separate streams (the default once -np is given) each sequence gets
    ``pad(n_ctx / B, 256)`` cells in every full layer, and sliding layers
    ``pad(min(cells, W + n_ubatch), 256)``; a unified cache (``--kv-unified``) is one stream of
    n_ctx cells with ``pad(min(n_ctx, W x B + n_ubatch), 256)`` in sliding layers. K and V each
    have their own ggml type; a quantized V needs flash attention."""

    name: str = "llama.cpp"
    n_ubatch: int = 512
    unified: bool = False
    cell_padding: int = 256

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """common/common.h ``cache_type_k/v = GGML_TYPE_F16`` and ``llama_context_default_params()``
        (llama.cpp 0c1e570): K and V are f16 whatever the weights are."""
        note = None if config_dtype == FP16 else "llama.cpp caches K and V as f16 unless -ctk/-ctv say otherwise"
        return FP16, note

    def state_parts(self, cache: StateCache) -> tuple[tuple[int, DType | None], ...]:
        """src/llama-model.cpp ``create_memory``: recurrent memory (r_l, s_l) is GGML_TYPE_F32."""
        return (cache.conv_elements, FP32), (cache.recurrent_elements, FP32)

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _GGML_KV:
            known = ", ".join(n.replace("fp", "f") for n in _GGML_KV)
            raise UsageError(f"llama.cpp cache types are {known}; not {dtype.name}")

    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int:
        n_ctx = pad(batch * tokens, self.cell_padding)
        streams, cells = (1, n_ctx) if self.unified else (batch, pad(n_ctx // batch, self.cell_padding))
        bound = cache.token_bound if cache.tokens == "decoder" else None
        if isinstance(cache, AttentionCache) and bound is not None:
            window = bound * (batch if self.unified else 1)
            cells = pad(min(cells, window + self.n_ubatch), self.cell_padding)
        return cells * streams

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return self.batch_slots(cache, tokens, 1, 0)


ENGINE_NAMES = ("theoretical", "transformers", "vllm", "sglang", "llama.cpp")


def make_engine(
    name: str,
    *,
    block_size: int | None = None,
    max_num_batched_tokens: int | None = None,
    n_ubatch: int | None = None,
    kv_unified: bool = False,
    uses_mla: bool = False,
) -> tuple[Engine, list[str]]:
    """The engine a name stands for, with its defaults noted."""
    notes: list[str] = []
    key = name.strip().lower()
    if key == "theoretical":
        return THEORETICAL, notes
    if key == "transformers":
        return Transformers(), notes
    if key == "vllm":
        if block_size is None:
            # vllm/platforms/cuda.py: FlashMLA (the default MLA backend before Blackwell) forces 64.
            block_size = 64 if uses_mla else 16
            if uses_mla:
                notes.append("vLLM MLA backends force larger blocks: 64 tokens (FlashMLA; CUTLASS MLA uses 128)")
        mnbt = max_num_batched_tokens if max_num_batched_tokens is not None else 8192
        return VLLM(block_size=block_size, max_num_batched_tokens=mnbt), notes
    if key == "sglang":
        return SGLang(page_size=block_size or 1), notes
    if key in ("llama.cpp", "llamacpp", "llama-cpp"):
        return LlamaCpp(n_ubatch=n_ubatch or 512, unified=kv_unified), notes
    raise UsageError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}")


def uses_mla(caches: tuple[LayerCache, ...]) -> bool:
    return any(isinstance(c, LatentCache) for c in caches)
