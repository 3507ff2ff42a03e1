"""llama.cpp's KV cache (src/llama-context.cpp after PR #17046, src/llama-kv-cache.cpp,
src/llama-kv-cache-iswa.cpp, common/common.h; llama.cpp 0c1e570)."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.dtypes import FP16, FP32, DType
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache

from .base import Engine, EngineOptions, pad

_GGML_KV = ("fp32", "fp16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")

# Model types llama.cpp 0c1e570 cannot load at all, and where that shows.
_NO_ARCH = {
    # No "zamba" anywhere in src/ or conversion/ (ggml-org/llama.cpp PR #21412 adding it is unmerged).
    "zamba2": "src/llama-arch.cpp @ 0c1e570 lists none, and convert_hf_to_gguf converts none",
}


@dataclass(frozen=True)
class LlamaCpp(Engine):
    """The batch is ``--parallel B`` slots of T tokens: n_ctx = pad(B x T, 256). With separate
    streams (the default once -np is given) each sequence gets ``pad(n_ctx / B, 256)`` cells in
    every full layer, and sliding layers ``pad(min(cells, W + n_ubatch), 256)``; a unified cache
    (``--kv-unified``) is one stream of n_ctx cells with ``pad(min(n_ctx, W x B + n_ubatch), 256)``
    in sliding layers. K and V each have their own ggml type; a quantized V needs flash attention."""

    name: str = "llama.cpp"
    n_ubatch: int = 512
    unified: bool = False
    cell_padding: int = 256

    @classmethod
    def configure(cls, options: EngineOptions) -> tuple[Engine, list[str]]:
        return cls(n_ubatch=options.n_ubatch or 512, unified=options.kv_unified), []

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _GGML_KV:
            known = ", ".join(n.replace("fp", "f") for n in _GGML_KV)
            raise UsageError(f"llama.cpp cache types are {known}; not {dtype.name}")

    def check_layer(self, cache: LayerCache) -> None:
        if cache.is_compressed_attention:
            raise UsageError(
                "llama.cpp 0c1e570's rules here have no DeepSeek-V4 compressed cache (CSA/HCA entries, K=V window): "
                "not modelled; use --engine theoretical or transformers"
            )

    def check_model_type(self, model_type: str) -> None:
        if model_type in _NO_ARCH:
            raise UsageError(f"llama.cpp has no {model_type} architecture ({_NO_ARCH[model_type]}): not modelled")

    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int:
        n_ctx = pad(batch * tokens, self.cell_padding)
        streams, cells = (1, n_ctx) if self.unified else (batch, pad(n_ctx // batch, self.cell_padding))
        bound = cache.token_bound if cache.tokens == "decoder" else None
        if bound is not None:
            window = bound * (batch if self.unified else 1)
            cells = pad(min(cells, window + self.n_ubatch), self.cell_padding)
        return cells * streams

    def layer_tokens(self, cache: LayerCache, text: int, images: int) -> int:
        if cache.tokens == "image":
            # src/llama-arch.cpp (ggml-org/llama.cpp @ 3679b65d) has no mllama architecture; only
            # Ollama's patched copy of llama.cpp adds one.
            raise UsageError("llama.cpp has no Llama 3.2 Vision (mllama) cross-attention layers: not modelled")
        return super().layer_tokens(cache, text, images)

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return self.batch_slots(cache, tokens, 1, 0)

    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType:
        """Not modelled. llama.cpp (ggml-org/llama.cpp @ 00395eb2, src/llama-model.cpp) builds
        glm-dsa (GLM-5) as dense DeepSeek-2 MLA with no indexer and no indexer keys, keeps
        DeepSeek-V3.2's keys in its own llama_kv_cache_dsa, and has no MiniMax-M3 architecture."""
        if family == "msa":
            raise UsageError("llama.cpp has no MiniMax-M3 architecture (src/llama-arch.cpp): not modelled")
        raise UsageError(
            "llama.cpp's sparse-attention indexer cache (DeepSeek-V3.2 DSA; GLM-5's glm-dsa runs as dense MLA "
            "without one) is not modelled"
        )

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """common/common.h ``cache_type_k/v = GGML_TYPE_F16`` and ``llama_context_default_params()``:
        K and V are f16 whatever the weights are."""
        note = None if config_dtype == FP16 else "llama.cpp caches K and V as f16 unless -ctk/-ctv say otherwise"
        return FP16, note

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        """src/llama-model.cpp ``create_memory``: recurrent memory (r_l, s_l) is GGML_TYPE_F32."""
        conv, recurrent = cache.state_elements(whole_kernel=False)
        return (conv, FP32), (recurrent, FP32)
