"""LM Studio's runtimes as the engines they run, configured with LM Studio's defaults: its
llama.cpp runtime is llama.cpp's rules (engines/llamacpp) behind LM Studio's load settings, its
MLX runtime mlx-lm's rules (engines/mlx) behind mlx-engine's. Subclassed, never copied: only what
LM Studio sets differently lives here, each citing where it was read (see the package docstring
for the files and versions)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from kvcalc.dtypes import DType
from kvcalc.engines.base import Engine, Target, pad
from kvcalc.engines.knobs import EngineOptions
from kvcalc.engines.llamacpp.rules import LlamaServer
from kvcalc.engines.lmstudio import (
    DEFAULT_CONTEXT_LENGTH,
    DEFAULT_EVAL_BATCH,
    DEFAULT_PARALLEL,
    LMStudioMLXOptions,
    LMStudioOptions,
)
from kvcalc.engines.mlx import MLXOptions
from kvcalc.engines.mlx.releases import PLAIN_MODULES, module_for
from kvcalc.engines.mlx.rules import MLX
from kvcalc.errors import UsageError
from kvcalc.spec import CompressedCache, IndexerCache, KVWindowCache, LayerCache, ModelSpec

# lmstudio-js LLMLoadModelConfig.ts llmLlamaCacheQuantizationTypes: the K and V cache types LM Studio's
# load settings take ("f32", "f16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"): no bf16, which
# llama-server's -ctk takes.
_LMSTUDIO_KV = ("fp32", "fp16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
# llama.cpp's default physical batch (common/common.h n_ubatch 512); LM Studio's physicalBatchSize "is
# clamped by the evaluation batch size" (LLMLoadModelConfig.ts), 512 by default too.
_PHYSICAL_BATCH = 512


@dataclass(frozen=True)
class LMStudio(LlamaServer):
    """LM Studio's llama.cpp runtime: a llama-server whose slots are Max Concurrent Predictions
    (``parallel``, 4 by default: lmstudio-ai/docs parallel-requests.md, list.md ``"parallel": 4``)
    sharing one unified KV cache by default (``useUnifiedKvCache``; a real LM Studio 0.4.12 log reads
    "262144 cells, 16 layers, 4/1 seqs": four sequences, one stream, the cells the context length:
    lmstudio-bug-tracker#1862). So the context of a batch of B sequences of T tokens is
    pad(B x T, 256) cells, as llama-server's, but sliding layers keep a window for each of
    max(parallel, B) slots (src/llama-kv-cache-iswa.cpp: n_swa x n_seq_max + n_ubatch), and recurrent
    layers a state for each slot, whatever the batch.

    Unified KV Cache off (``no_kv_unified``): "each prediction can utilize the full context length, at
    the cost of using more memory" (LLMLoadModelConfig.ts useUnifiedKvCache), so every slot is a
    stream of the whole context: llama.cpp's separate streams with n_ctx = pad(slots x T, 256).

    Evaluation Batch Size (n_batch) is 512 by default (list.md ``"eval_batch_size": 512``), not
    llama.cpp's 2048; LM Studio has no --swa-full setting; its K/V cache types are those of
    lmstudio-js's ``llmLlamaCacheQuantizationTypes`` (no bf16)."""

    name: str = "lmstudio"
    parallel: int = DEFAULT_PARALLEL
    n_batch: int = DEFAULT_EVAL_BATCH
    # LlamaServer's and MLX's own options_type narrow Engine's ClassVar; each engine's is its own.
    options_type: ClassVar[type[EngineOptions]] = LMStudioOptions  # type: ignore[assignment]

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, LMStudioOptions)
        parallel = options.parallel or DEFAULT_PARALLEL
        unified = not options.no_kv_unified
        defaults = [f"Max Concurrent Predictions {parallel}"] if options.parallel is None else []
        defaults += [f"Evaluation Batch Size {DEFAULT_EVAL_BATCH}"] if options.n_batch is None else []
        notes = []
        if defaults:
            notes.append(f"LM Studio's defaults applied: {', '.join(defaults)} (lmstudio-ai/docs)")
        if unified:
            notes.append(f"LM Studio's {parallel} predictions share one unified KV cache of the context "
                         "length (batch x tokens); a larger batch is modelled with that many predictions")  # fmt: skip
        else:
            notes.append(f"Unified KV Cache off: each of LM Studio's {parallel} predictions holds the full "
                         "context length, whatever the batch (useUnifiedKvCache false)")  # fmt: skip
        engine = cls(
            n_ubatch=options.ubatch or _PHYSICAL_BATCH,
            n_batch=options.n_batch or DEFAULT_EVAL_BATCH,
            unified=unified,
            parallel=parallel,
            mla=target.uses_mla,
        )
        return engine, notes

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _LMSTUDIO_KV:
            known = ", ".join(n.replace("fp", "f") for n in _LMSTUDIO_KV)
            raise UsageError(f"LM Studio's K/V cache types are {known} (llama.cpp runtime); not {dtype.name}")

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        spec, notes = super().prepare(spec, k_dtype, v_dtype)
        if self.parallel > 1 and any(c.is_state for c in spec.caches):
            notes.append(
                f"warning: LM Studio's llama.cpp runtime keeps a recurrent state for each of its {self.parallel} "
                "predictions (llama_memory_recurrent: n_seq_max cells) whatever the batch; kvcalc counts one per "
                f"sequence of the batch (--batch {self.parallel} --tokens CONTEXT/{self.parallel} counts them all)"
            )
        return spec, notes

    def idle_knobs(self, spec: ModelSpec) -> tuple[str, ...]:
        """With one unified cache, the predictions size only sliding layers (n_swa x n_seq_max), as the
        batch sizes do; with separate ones they multiply every layer."""
        idle = super().idle_knobs(spec)
        return (*idle, "parallel") if self.unified and idle else idle

    def slots(self, batch: int) -> int:
        """llama.cpp's n_seq_max: LM Studio's Max Concurrent Predictions, or the batch if larger."""
        return max(self.parallel, batch)

    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int:
        seqs = self.slots(batch)
        if not self.unified:
            # -c = slots x context, one stream per slot (llama.cpp's separate streams).
            return super().batch_slots(cache, tokens, seqs, prefix)
        bound = cache.token_bound if cache.tokens == "decoder" else None
        special = isinstance(cache, (KVWindowCache, CompressedCache)) or (
            isinstance(cache, IndexerCache) and cache.ratio > 1
        )
        if bound is None or special:
            return super().batch_slots(cache, tokens, batch, prefix)
        # src/llama-kv-cache-iswa.cpp: size_swa = pad(min(size_base, n_swa x n_seq_max + n_ubatch), 256)
        # with one unified stream of size_base = n_ctx = pad(B x T, 256) cells.
        n_ctx = pad(batch * tokens, self.cell_padding)
        return pad(min(n_ctx, bound * seqs + self.ubatch(batch * tokens)), self.cell_padding)

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        """One sequence's cells: the unified stream, or one of the separate ones."""
        whole = self.batch_slots(cache, tokens, 1, 0)
        return whole if self.unified else whole // self.slots(1)

    @staticmethod
    def default_context() -> tuple[int, str]:
        """LM Studio's context length when none is set (lms load --context-length; list.md's
        loaded instance ``"context_length": 4096``), for a caller that sizes a load with no tokens."""
        return DEFAULT_CONTEXT_LENGTH, (f"LM Studio's default context length {DEFAULT_CONTEXT_LENGTH:,} tokens "
                                        "(lms load --context-length)")  # fmt: skip


# mlx_engine/utils/kv_cache_quantization.py (mlx-engine 08f0c07): VALID_KV_BITS, and the defaults it
# applies once kv_bits is set (kv_group_size 64, quantized_kv_start 0: quantized from the first token,
# not mlx-lm's 5000).
_MLX_ENGINE_BITS = (2, 3, 4, 6, 8)
_MLX_ENGINE_GROUP = 64
_MLX_ENGINE_START = 0


@dataclass(frozen=True)
class LMStudioMLX(MLX):
    """LM Studio's MLX runtime, lmstudio-ai/mlx-engine (08f0c07, which pins mlx-lm git 2c008fd, mlx
    0.32.0; modelled with kvcalc's mlx-lm 0.32.2 rules): its sequential path, ``ModelKit``, whose
    ``CacheWrapper`` makes ``make_prompt_cache(model, max_kv_size)`` with LM Studio's context length as
    max_kv_size (load_model's default 4096): a RotatingKVCache of it in every layer of a model with no
    make_cache of its own, which ignores it otherwise (``max_kv_size``). KV Cache Quantization
    (``kv_bits`` 2, 3, 4, 6 or 8) turns the context bound off ("max_kv_size is ignored when using KV
    cache quantization", model_kit.py) and quantizes from the first token unless told otherwise
    (kv_cache_quantization.py: quantized_kv_start 0, kv_group_size 64).

    Under Max Concurrent Predictions above 1 (``parallel``, 4 by default) with no KV quantization,
    load_model runs a model whose caches all merge through mlx-vlm's continuous batching
    (BatchedVisionModelKit, its context fitted to memory), whose cache kvcalc does not model: said
    in a warning."""

    name: str = "lmstudio-mlx"
    parallel: int = DEFAULT_PARALLEL
    options_type = LMStudioMLXOptions  # type: ignore[assignment]

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, LMStudioMLXOptions)
        bits = options.kv_bits
        if bits is not None and bits not in _MLX_ENGINE_BITS:
            raise UsageError(f"LM Studio's MLX runtime takes KV bits {', '.join(map(str, _MLX_ENGINE_BITS))}, not "
                             f"{bits} (mlx-engine VALID_KV_BITS)", param="kv_bits")  # fmt: skip
        if bits is not None and options.max_kv_size is not None:
            raise UsageError("mlx-engine ignores the context length (max_kv_size) once KV Cache Quantization is on "
                             "(model_kit.py): --max-kv-size changes nothing with --kv-bits",
                             param="max_kv_size")  # fmt: skip
        group = options.kv_group_size
        start = options.quantized_kv_start
        mlx_options = MLXOptions(
            max_kv_size=options.max_kv_size,
            kv_bits=bits,
            kv_group_size=group if group is not None or bits is None else _MLX_ENGINE_GROUP,
            quantized_kv_start=start if start is not None or bits is None else _MLX_ENGINE_START,
        )
        engine, mlx_notes = super().configure(mlx_options, target)
        assert isinstance(engine, LMStudioMLX)
        parallel = options.parallel or DEFAULT_PARALLEL
        notes = [n for n in mlx_notes if not n.startswith("mlx-lm quantizes")]
        if bits is not None:
            defaults = [f"group {_MLX_ENGINE_GROUP}"] if group is None else []
            defaults += [f"start {_MLX_ENGINE_START}"] if start is None else []
            start_at = engine.quantized_kv_start
            when = f"once it holds {start_at:,} tokens" if start_at else "from the first token"
            note = f"LM Studio's MLX runtime quantizes the cache to {bits} bits {when}"
            notes.append(note + (f" (mlx-engine's defaults: {', '.join(defaults)})" if defaults else ""))
        elif parallel > 1:
            notes.append(
                f"warning: LM Studio's MLX runtime runs Max Concurrent Predictions {parallel}"
                f"{' (default)' if options.parallel is None else ''} through mlx-vlm's continuous batching where "
                "the model's caches merge, which kvcalc does not model: these figures are its sequential path's "
                "(--parallel 1, or --kv-bits)"
            )
        return _with_parallel(engine, parallel), notes

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        spec, notes = super().prepare(spec, k_dtype, v_dtype)
        module = module_for(spec.top_model_type or spec.model_type) or module_for(spec.model_type)
        if self.max_kv_size is None and self.kv_bits is None and module in PLAIN_MODULES:
            notes.append("LM Studio's context length not given (mlx-engine's max_kv_size, a rotating cache of it "
                         "in every layer of this model): modelled as no less than the tokens; --max-kv-size "
                         "sets it")  # fmt: skip
        return spec, notes

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name.startswith("mlx-q") and dtype.bits not in _MLX_ENGINE_BITS:
            raise UsageError(f"LM Studio's MLX runtime takes KV bits {', '.join(map(str, _MLX_ENGINE_BITS))}, not "
                             f"{dtype.bits}")  # fmt: skip
        super().check_dtype(dtype)


def _with_parallel(engine: LMStudioMLX, parallel: int) -> LMStudioMLX:
    return replace(engine, parallel=parallel)
