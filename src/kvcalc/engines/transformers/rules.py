"""transformers' ``DynamicCache`` (src/transformers/cache_utils.py, transformers 5.24)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.dtypes import FP32, DType
from kvcalc.engines.base import ALL_STATE_FAMILIES, Engine, EngineOptions, Target
from kvcalc.engines.base import version_warning as package_warning
from kvcalc.errors import UsageError
from kvcalc.spec import KVWindowCache, LayerCache

if TYPE_CHECKING:
    from kvcalc.calc.step_cost import StepOverhead

# The transformers release these rules, the model-type tables (inputs/hf/reads.py) and the probe's
# expectations were read from; the test extra pins it (pyproject.toml).
RULES_VERSION = "5.24.0"


def version_warning(installed: str) -> str | None:
    """One line when the transformers a probe ran is not RULES_VERSION (5.25 caches Falcon-40B's KV
    heads unbroadcast: a mismatch may be transformers' own change, not kvcalc's)."""
    return package_warning("transformers", installed, RULES_VERSION)


@dataclass(frozen=True)
class Transformers(Engine):
    """``DynamicSlidingWindowLayer`` keeps a view of the last W-1 tokens between steps (the step's
    own token is appended while attending); Llama 4's chunked layers are the same layer with W =
    the chunk. DeepSeek-V4 (modeling_deepseek_v4.py): its CSA / HCA cache layers keep that window
    as one K = V tensor, its uncompressed layers go through the generic layer (K and V stored
    apart), and CSA's overlap gate logits are float32 (position_bias is kept in float32).
    Linear-attention and Mamba layers (``LinearAttentionLayer``) keep the conv state for the whole
    kernel in the model dtype and the recurrent state in float32 (measured with ``kvcalc probe``),
    whatever the config's ``mamba_ssm_dtype`` / ``mamba_ssm_cache_dtype`` say:
    transformers 5.24 reads neither (the chunked and recurrent gated-delta-rule kernels of qwen3_5
    compute, and return, the state in float32). Falcon's new_decoder_architecture caches K/V
    broadcast to every query head."""

    def check_dtype(self, dtype: DType) -> None:
        """transformers' caches hold the model's float dtype, or QuantizedCache's backends
        (cache_utils.py, transformers 5.24): quanto (nbits 2, 4) and hqq (1, 2, 3, 4, 8) group-wise
        integers, and fp8 as float8_e4m3fn with a per-tensor scale. llama.cpp's block types and
        fp8 e5m2 are none of them."""
        if dtype.strict_blocks or dtype.name == "fp8_e5m2":
            raise UsageError(
                f"transformers caches K/V in the model's dtype or QuantizedCache's formats (int2, int4, int8, "
                f"fp8 e4m3; cache_utils.py, transformers 5.24), not {dtype.name}"
            )

    @property
    def separate_kv_formats(self) -> bool:
        """QuantizedCache quantizes K and V alike (one nbits)."""
        return False

    name: str = "transformers"

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        """No knobs: the one engine, with nothing defaulted."""
        return cls(), []

    def step_overhead(self) -> StepOverhead:
        """transformers' generate() runs eager PyTorch: each layer's dozen kernels are launched
        from Python (tens of microseconds each), and the prompt is one pass. Assumed from the
        launch cost of eager PyTorch; no published measurement fits it here."""
        from kvcalc.calc.step_cost import StepOverhead

        return StepOverhead(self.name, step_s=1e-3, layer_graphs_s=150e-6, layer_eager_s=150e-6, request_s=0.0,
                            cuda_graphs=False, prefill_chunk=None,
                            source="eager PyTorch launch costs, assumed (not fitted)")  # fmt: skip

    @property
    def has_cuda_graphs(self) -> bool:
        return False

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        if cache.tokens == "decoder" and cache.token_bound is not None:
            return min(tokens, cache.token_bound - 1)
        return super().tokens_held(cache, tokens)

    @property
    def state_families(self) -> frozenset[str]:
        return ALL_STATE_FAMILIES

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        family = getattr(cache, "family", None)
        if family == "lightning_attention":
            # MiniMaxCache.linear_cache (modeling_minimax.py): K^T V per head in the dtype of the
            # values (the model's), no conv (an empty conv part: parts pair with state_part_names).
            return (0, cache.state_dtype), (cache.state_elements(whole_kernel=False)[1], cache.state_dtype)
        if family == "rg_lru":
            # RecurrentGemmaRecurrentBlock (modeling_recurrent_gemma.py) keeps conv1d_width - 1 past
            # inputs in the model dtype, and RecurrentGemmaRglru.recurrent_states in float32.
            conv, recurrent = cache.state_elements(whole_kernel=False)
            return (conv, cache.state_dtype), (recurrent, FP32)
        conv, recurrent = cache.state_elements(whole_kernel=True)
        return (conv, cache.state_dtype), (recurrent, FP32)

    def kv_heads(self, cache: LayerCache) -> int | None:
        return cache.expanded_kv_heads

    def rows(self, cache: LayerCache, tp: int) -> tuple[int, int, int | None]:
        k_row, v_row, heads = super().rows(cache, tp)
        if isinstance(cache, KVWindowCache) and cache.v_copy:
            # DeepSeek-V4's uncompressed layers: DynamicSlidingWindowLayer.update concatenates the
            # key and the value separately although attention passes one tensor as both.
            v_row = k_row
        return k_row, v_row, heads

    def default_residual_tokens(self, quantized: bool) -> tuple[int, str | None]:
        """QuantizedCache (cache_utils.py) keeps the newest tokens unquantized until residual_length
        (128) of them have gathered: up to 127 at any time."""
        if not quantized:
            return 0, None
        return 127, "QuantizedCache keeps up to 127 newest tokens in the model dtype (residual_length 128)"
