"""mlx-lm's prompt cache (mlx_lm/models/cache.py, mlx_lm/generate.py generate_step; release by
release, ``--engine mlx@0.32``): releases.py names the files and every table, growth.py replays how
each cache class grows its buffer."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvcalc.dtypes import FP32, DType
from kvcalc.engines.base import Engine, Target, recurrent_dtype
from kvcalc.engines.knobs import EngineOptions
from kvcalc.engines.mlx import MLXOptions, growth
from kvcalc.engines.mlx.releases import (
    CACHE_LIST_MODULES,
    CHUNKED_MODULES,
    CURRENT,
    EXPANDED_MLA_MODULES,
    FP32_STATE_MODULES,
    INDEXER_EVERY_LAYER_MODULES,
    KV_BITS,
    KV_GROUP_SIZE,
    KV_GROUP_SIZES,
    MAX_KV_KEEP,
    PLAIN_MODULES,
    PREFILL_STEP,
    QUANTIZED_KV_START,
    WINDOWED_MODULES,
    module_for,
    version_text,
)
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache, IndexerCache, LatentCache, LayerCache, ModelSpec, StateCache

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.calc.estimate import Estimate
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.runtime import Runtime, RuntimeRequest
    from kvcalc.calc.simulate import Scheduler
    from kvcalc.calc.step_cost import StepOverhead
    from kvcalc.gpus import GPU

# Plain float formats mlx-lm caches in: the dtype the model's weights are stored (and run) in.
_FLOATS = ("fp32", "fp16", "bf16")


def mlx_quantized(bits: int, group: int, run: DType) -> DType:
    """QuantizedKVCache's layout (mx.quantize, affine): ``bits``-bit values packed in uint32 words,
    and a scale and a bias per group of ``group`` elements, both in the run dtype."""
    return DType(
        f"mlx-q{bits}",
        bits,
        f"mlx.quantize: {bits}-bit values in uint32 words + {run.name} scale and bias per group of {group}",
        block=group,
        meta_bytes=2 * run.bytes_per_element,
    )


@dataclass(frozen=True)
class MLX(Engine):
    """One buffer per layer that grows in steps of 256 tokens (KVCache), a ring of the window in
    sliding layers of the models whose own make_cache builds one (RotatingKVCache), every token
    elsewhere, a state per recurrent layer (ArraysCache); quantized whole once the cache holds
    quantized_kv_start tokens (QuantizedKVCache)."""

    name: str = "mlx"
    version: tuple[int, int, int] = CURRENT
    prefill_step: int = PREFILL_STEP
    max_kv_size: int | None = None
    kv_bits: int | None = None
    kv_group_size: int = KV_GROUP_SIZE
    quantized_kv_start: int = QUANTIZED_KV_START
    generated: int = 0
    prompt_cache_bytes: int | None = None
    options_type = MLXOptions

    def step_overhead(self) -> StepOverhead:
        """mlx-lm: one lazily built Metal graph per step, evaluated at the token's read-back;
        prompts in passes of prefill_step_size (2,048). Assumed from Metal's per-kernel dispatch
        cost (a few microseconds); no published measurement fits it here."""
        from kvcalc.calc.step_cost import StepOverhead

        return StepOverhead(self.name, step_s=0.5e-3, layer_graphs_s=20e-6, layer_eager_s=20e-6, request_s=0.0,
                            cuda_graphs=False, prefill_chunk=self.prefill_step,
                            source="Metal dispatch costs, assumed (not fitted)")  # fmt: skip

    @property
    def has_cuda_graphs(self) -> bool:
        return False

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, MLXOptions)
        notes = []
        version = target.version or CURRENT
        if version != CURRENT:
            notes.append(f"kvcalc's mlx-lm rules are read in {version_text(CURRENT)}; {version_text(version)} "
                         "is modelled with them")  # fmt: skip
        bits = options.kv_bits
        if bits is not None and bits not in KV_BITS:
            raise UsageError(f"mlx.quantize takes --kv-bits {', '.join(map(str, KV_BITS))}, not {bits}",
                             param="kv_bits")  # fmt: skip
        if bits is None:
            for knob, flag in (("kv_group_size", "--kv-group-size"), ("quantized_kv_start", "--quantized-kv-start")):
                if getattr(options, knob) is not None:
                    raise UsageError(f"{flag} applies to a quantized cache: it changes nothing without --kv-bits",
                                     param=knob)  # fmt: skip
        if options.max_kv_size is not None and options.max_kv_size <= MAX_KV_KEEP:
            # mlx_lm/models/cache.py (0.32.2) RotatingKVCache._update_in_place: a full buffer
            # rotates to _idx = keep and writes keys[..., keep : keep + 1]; with max_size <= keep
            # (4, make_prompt_cache's) that slot lies past the buffer's max_size slots, and the
            # first decode step fails.
            raise UsageError(f"max_kv_size {options.max_kv_size:,} leaves no room past the first {MAX_KV_KEEP} tokens "
                             f"mlx-lm's RotatingKVCache always keeps (keep={MAX_KV_KEEP}): give {MAX_KV_KEEP + 1} or "
                             "more", param="max_kv_size")  # fmt: skip
        group = options.kv_group_size or KV_GROUP_SIZE
        if group not in KV_GROUP_SIZES:
            raise UsageError(f"mlx.quantize takes --kv-group-size {', '.join(map(str, KV_GROUP_SIZES))}, not {group}",
                             param="kv_group_size")  # fmt: skip
        start = options.quantized_kv_start if options.quantized_kv_start is not None else QUANTIZED_KV_START
        if bits is not None:
            defaults = [f"kv_group_size {group}"] if options.kv_group_size is None else []
            defaults += [f"quantized_kv_start {start:,}"] if options.quantized_kv_start is None else []
            notes.append(f"mlx-lm quantizes the whole cache to {bits} bits once it holds {start:,} tokens (below "
                         f"that every token stays in the model dtype){_defaults(defaults)}")  # fmt: skip
        engine = cls(
            version=version,
            prefill_step=options.prefill_step_size or PREFILL_STEP,
            max_kv_size=options.max_kv_size,
            kv_bits=bits,
            kv_group_size=group,
            quantized_kv_start=start,
            generated=options.max_tokens or 0,
            prompt_cache_bytes=options.prompt_cache_bytes,
        )
        return engine, notes

    @property
    def separate_kv_formats(self) -> bool:
        """mlx-lm keeps K and V in one format (the model dtype, or --kv-bits for both)."""
        return False

    def check_serving(self, kv_dtype_given: bool, quant_group: int | None, residual_tokens: int | None) -> None:
        if residual_tokens is not None:
            raise UsageError("mlx-lm keeps no residual tokens: a quantized cache is quantized whole once it holds "
                             "--quantized-kv-start tokens", param="residual_tokens")  # fmt: skip
        if quant_group is not None:
            raise UsageError("mlx-lm's quantization group is --kv-group-size (--quant-group is for int8/int4/int2)",
                             param="quant_group")  # fmt: skip
        if kv_dtype_given and self.kv_bits is not None:
            raise UsageError("--kv-bits sets mlx-lm's KV format: drop --kv-dtype", param="kv_dtype")

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _FLOATS and not dtype.name.startswith("mlx-q"):
            raise UsageError(f"mlx-lm caches K/V in the model's dtype (fp32, fp16, bf16) or quantized with --kv-bits, "
                             f"not {dtype.name}")  # fmt: skip

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        """The model as mlx-lm builds its cache: the module mlx_lm.utils picks for the model type,
        and what that module's make_cache does with windows, chunks, MLA and shared layers."""
        model_type = spec.top_model_type or spec.model_type
        module = module_for(model_type) or module_for(spec.model_type)
        if module is None:
            raise UsageError(f"mlx-lm {version_text(self.version)} has no model for {model_type} (mlx_lm/models "
                             "has no module for it): not modelled")  # fmt: skip
        notes: list[str] = []
        caches = list(spec.caches)
        for cache in caches:
            if cache.tokens != "decoder":
                raise UsageError(f"mlx-lm's {module} caches no encoder or image tokens: not modelled")
        if any(isinstance(c, LatentCache) for c in caches) and module in EXPANDED_MLA_MODULES:
            caches = [_expanded(c, spec) for c in caches]
            notes.append(f"mlx-lm's {module}.py caches MLA as K and V per head (kv_b_proj applied before the cache), "
                         "not the latent")  # fmt: skip
        entry_layers = spec.entry_layers
        if module in INDEXER_EVERY_LAYER_MODULES:
            caches, entry_layers, indexer_note = _indexer_everywhere(caches, entry_layers, module)
            notes += indexer_note
        caches, state_note = _state_formats(caches, module, model_type)
        notes += state_note
        windowed = [i for i, c in enumerate(caches) if isinstance(c, AttentionCache) and c.window is not None]
        chunked = [i for i, c in enumerate(caches) if isinstance(c, AttentionCache) and c.chunk is not None]
        keeps_windows = module in WINDOWED_MODULES
        attention = [c for c in caches if isinstance(c, AttentionCache)]
        if keeps_windows and module in ("llama", "ministral3") and len(windowed) == len(attention):
            # llama.py: sliding layers only from the config's layer_types, which must name a
            # full_attention layer (fa_idx = layer_types.index("full_attention")).
            keeps_windows = False
        if windowed and not keeps_windows:
            for i in windowed:
                caches[i] = replace(caches[i], window=None)  # type: ignore[arg-type]
            why = (f"its {module}.py keeps a window only in layers the config's layer_types names "
                   "sliding_attention, beside a full_attention one" if module in WINDOWED_MODULES
                   else f"its {module}.py builds no RotatingKVCache for them")  # fmt: skip
            notes.append(f"mlx-lm keeps every token in {model_type}'s sliding layers: {why}")
        if chunked and module not in CHUNKED_MODULES:
            for i in chunked:
                caches[i] = replace(caches[i], chunk=None)  # type: ignore[arg-type]
            notes.append(f"mlx-lm keeps every token in {model_type}'s chunked layers ({module}.py)")
        if self.max_kv_size is not None:
            if module not in PLAIN_MODULES:
                raise UsageError(f"--max-kv-size changes nothing for {model_type}: mlx-lm's {module}.py builds its "
                                 "own cache (make_cache), which make_prompt_cache returns whatever max_kv_size says",
                                 param="max_kv_size")  # fmt: skip
            notes.append(f"--max-kv-size {self.max_kv_size:,}: every layer keeps the first {MAX_KV_KEEP} tokens and "
                         f"the newest (RotatingKVCache, keep={MAX_KV_KEEP})")  # fmt: skip
        if self.kv_bits is not None:
            self._check_quantizable(spec, module, caches, keeps_windows and bool(windowed))
        if self.generated:
            notes.append(f"the cache holds the prompt and {self.generated:,} generated tokens (--max-tokens)")
        return replace(spec, caches=tuple(caches), entry_layers=entry_layers), notes

    def _check_quantizable(self, spec: ModelSpec, module: str, caches: list[LayerCache], rotating: bool) -> None:
        """--kv-bits where maybe_quantize_kv_cache quantizes every cache of the model, else refused."""
        why = None
        if rotating or self.max_kv_size is not None:
            why = "mlx-lm cannot quantize a RotatingKVCache (NotImplementedError: RotatingKVCache Quantization NYI)"
        elif module in CACHE_LIST_MODULES:
            why = f"mlx-lm's {module}.py keeps each layer's caches in a CacheList, which it does not quantize"
        elif module in CHUNKED_MODULES:
            why = "mlx-lm does not quantize Llama 4's chunked layers (ChunkedKVCache has no to_quantized)"
        elif any(isinstance(c, LatentCache | IndexerCache) for c in caches):
            why = "mlx-lm's MLA attention reads its cache unquantized: --kv-bits fails in its generate loop"
        elif not any(isinstance(c, AttentionCache) for c in caches):
            why = f"{spec.name} caches no K or V: --kv-bits changes nothing"
        if why is None:
            for c in caches:
                if isinstance(c, AttentionCache) and (c.k_head_dim % self.kv_group_size or
                                                      c.v_head_dim % self.kv_group_size):  # fmt: skip
                    why = (f"mx.quantize needs head dims ({c.k_head_dim}, {c.v_head_dim}) divisible by "
                           f"--kv-group-size {self.kv_group_size}")  # fmt: skip
                    break
        if why is not None:
            raise UsageError(why, param="kv_bits")

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        run, note = self.model_dtype(config_dtype, model_type)
        if self.kv_bits is None:
            return run, note
        return mlx_quantized(self.kv_bits, self.kv_group_size, run), note

    def default_residual_tokens(self, quantized: bool) -> tuple[int, str | None]:
        """Below quantized_kv_start tokens the whole cache is in the model dtype (``full_precision_slots``)."""
        return (self.quantized_kv_start, None) if self.kv_bits is not None else (0, None)

    def kv_remedy(self) -> tuple[str, dict[str, int]] | None:
        return None if self.kv_bits is not None else ("4-bit KV cache (--kv-bits 4)", {"kv_bits": 4})

    def weights_remedy(self) -> tuple[str, Fraction] | None:
        """mlx_lm.convert -q's defaults (mlx_lm/convert.py, mlx-lm 0.32.2: q_bits 4, q_group_size
        64): 4-bit values plus a 16-bit scale and bias per 64, 4.5 bits a parameter, as
        mlx-community's 4-bit conversions store them."""
        from fractions import Fraction

        return "4-bit weights (mlx_lm.convert -q)", Fraction(9, 2)

    @property
    def tensor_parallel_in_one_machine(self) -> bool:
        """mlx-lm runs on one Mac's GPU; its tensor parallelism (mx.distributed) spans Macs."""
        return False

    def full_precision_slots(self, kept: int, tokens: int, residual: int) -> int:
        """maybe_quantize_kv_cache converts a layer's whole buffer once it holds ``residual``
        (quantized_kv_start) tokens; before that no slot is quantized."""
        return kept if tokens < residual else 0

    def full_precision_drops(self, residual: int) -> tuple[int, ...]:
        """At quantized_kv_start tokens the whole buffer turns quantized: a sequence of that
        length holds fewer bytes than one a token shorter."""
        return (residual,)

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        """The buffer slots after a prompt of ``tokens - generated`` tokens and ``generated`` more
        (growth.py): spare slots of the last 256-token step included, as nbytes counts them."""
        decode = self.generated
        if decode >= tokens:
            raise UsageError(f"--max-tokens {decode:,} leaves no prompt in {tokens:,} tokens (it counts the tokens "
                             "generated after the prompt)", param="max_tokens")  # fmt: skip
        prompt = tokens - decode
        if self.max_kv_size is not None:
            return growth.rotating_slots(prompt, decode, self.prefill_step, self.max_kv_size, MAX_KV_KEEP)
        if isinstance(cache, AttentionCache) and cache.window is not None:
            return growth.rotating_slots(prompt, decode, self.prefill_step, cache.window)
        if isinstance(cache, AttentionCache) and cache.chunk is not None:
            return growth.chunked_slots(prompt, decode, self.prefill_step, cache.chunk)
        return growth.kv_slots(prompt, decode, self.prefill_step)

    def shared_tokens(self, cache: LayerCache, tokens: int, prefix: int) -> int:
        """mlx-lm gives each sequence its own buffers: a common prefix is stored in every one."""
        return 0

    def check_shared_prefix(self, prefix: int) -> None:
        if prefix > 0:
            raise UsageError("mlx-lm gives each sequence its own buffers, a common prefix stored in every one: "
                             "shared_prefix changes nothing", param="shared_prefix")  # fmt: skip

    def check_gpu(self, gpu: GPU) -> None:
        """mlx-lm as kvcalc models it runs on Apple silicon: Metal, its wired limit on unified memory."""
        if gpu.unified_bytes is None:
            raise UsageError(f"gpu {gpu.name}: kvcalc models mlx-lm on Apple silicon only (Metal, its wired limit on "
                             "unified memory): give a Mac's GPU (m4-max-64gb, ...)", param="gpu")  # fmt: skip

    def rows(self, cache: LayerCache, tp: int) -> tuple[int, int, int | None]:
        k_row, v_row, heads = super().rows(cache, tp)
        if isinstance(cache, IndexerCache) and cache.family == "dsa":
            # deepseek_v32.py Indexer: cache.update_and_fetch(k, k), then cache.values = zeros_like(keys).
            # (MiniMax-M3's MSA index cache stores values of width 0.)
            v_row = k_row
        return k_row, v_row, heads

    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType:
        """The indexer's keys come out of its wk projection in the run dtype."""
        return compute

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        """ArraysCache: the conv history (kernel - 1 inputs) in the run dtype, and the recurrent
        state in the format ``prepare`` set (float32 from ssm.py and gated_delta.py), else in the
        run dtype (measured with mlx_probe.py)."""
        conv, recurrent = cache.state_elements(whole_kernel=False)
        return (conv, cache.state_dtype), (recurrent, recurrent_dtype(cache) or cache.state_dtype)

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """mlx-lm runs a model in the dtype its weights are stored in (utils.py load_model casts
        nothing), float32 included."""
        return super().model_dtype(config_dtype, model_type)

    def max_tokens(self, probe: Estimate, budget: int) -> int:
        """Tokens a budget holds when buffers grow 256 at a time: whole steps only."""
        return super().max_tokens(probe, budget) // growth.STEP * growth.STEP

    @property
    def share_name(self) -> str:
        return "wired limit"

    @property
    def default_share(self) -> Fraction:
        from fractions import Fraction  # here: fractions costs start-up, and only fit asks

        return Fraction(1)

    def runtime(self, request: RuntimeRequest) -> tuple[Runtime, list[str]]:
        from kvcalc.engines.mlx.runtime import mlx_runtime

        return mlx_runtime(self, request)

    # --- simulate ----------------------------------------------------------------------------------

    def scheduler(self, fit: Fit, max_model_len: int, gpu_bytes: int | None) -> tuple[Scheduler, list[str]]:
        """mlx_lm.server's (engines/mlx/scheduler.py): its BatchGenerator with the server's defaults,
        or one request at a time with --kv-bits; nothing bounds the caches. LM Studio's MLX engine
        has a scheduler of its own, not modelled."""
        if type(self) is not MLX:
            return Engine.scheduler(self, fit, max_model_len, gpu_bytes)
        from kvcalc.engines.mlx.scheduler import DECODE_CONCURRENCY, PROMPT_CONCURRENCY, MlxScheduler

        memory = fit.max_tokens if fit.max_tokens is not None else fit.kv_budget
        batched = self.kv_bits is None
        how = (f"batches (BatchGenerator): up to {DECODE_CONCURRENCY} decoding (--decode-concurrency), "
               f"{PROMPT_CONCURRENCY} prompts at a time (--prompt-concurrency), {self.prefill_step:,} prompt tokens "
               "a sequence a step; a model whose caches cannot merge (Llama 4's ChunkedKVCache) is served one at a "
               "time instead, not told apart here" if batched
               else "one request at a time: --kv-bits makes a request unbatchable (server.py "
               "_is_batchable)")  # fmt: skip
        notes = [f"mlx_lm.server {how}; prefill {self.prefill_step:,} tokens a pass; the prompt cache not modelled",
                 f"mlx_lm.server bounds no cache: each request's grows as it goes, nothing is refused or preempted; "
                 f"the memory holds {memory:,} tokens, and a run whose peak passes that would run the Mac out of "
                 "memory"]  # fmt: skip
        return MlxScheduler(memory, batched=batched, prefill_step_size=self.prefill_step), notes


def _indexer_everywhere(
    caches: list[LayerCache], entry_layers: tuple[int, ...], module: str
) -> tuple[list[LayerCache], tuple[int, ...], list[str]]:
    """Every MLA layer with its own indexer keys, as deepseek_v32.py builds them (a config's
    indexer_types, whose "shared" layers reuse another layer's indices, is not read)."""
    indexers = [c for c in caches if isinstance(c, IndexerCache)]
    if not indexers or not entry_layers:
        return caches, entry_layers, []
    owners = list(entry_layers)
    have = {owners[i] for i, c in enumerate(caches) if isinstance(c, IndexerCache)}
    missing = [owners[i] for i, c in enumerate(caches) if isinstance(c, LatentCache) and owners[i] not in have]
    if not missing:
        return caches, entry_layers, []
    out = [*caches, *(indexers[0] for _ in missing)]
    note = (f"mlx-lm's {module}.py caches indexer keys in every layer ({len(missing)} that the config's indexer_types "
            "shares get their own)")  # fmt: skip
    return out, (*owners, *missing), [note]


def _state_formats(caches: list[LayerCache], module: str, model_type: str) -> tuple[list[LayerCache], list[str]]:
    """The recurrent state's format as mlx-lm keeps it: float32 from its ssm.py and gated_delta.py
    kernels, the run dtype elsewhere; a config's mamba_ssm_dtype is read by none of them."""
    fp32 = FP32 if module in FP32_STATE_MODULES else None
    named = [c for c in caches if isinstance(c, StateCache) and c.recurrent_dtype not in (None, fp32)]
    out = [replace(c, recurrent_dtype=fp32) if isinstance(c, StateCache) else c for c in caches]
    notes = [f"mlx-lm keeps {model_type}'s recurrent state in {'float32' if fp32 else 'the model dtype'} "
             "(it reads no mamba_ssm_dtype)"] if named else []  # fmt: skip
    return out, notes


def _defaults(names: list[str]) -> str:
    return f" (defaults: {', '.join(names)})" if names else ""


def _expanded(cache: LayerCache, spec: ModelSpec) -> LayerCache:
    """An MLA layer as deepseek_v2.py caches it: K (qk_nope + qk_rope) and V (v_head_dim) for every
    query head."""
    if not isinstance(cache, LatentCache):
        return cache
    heads = spec.query_heads
    if heads is None or cache.k_head_dim is None or cache.v_head_dim is None:
        raise UsageError(f"{spec.name} does not say its MLA head dims: mlx-lm's expanded MLA cache not modelled")
    return AttentionCache(kv_heads=heads, k_head_dim=cache.k_head_dim, v_head_dim=cache.v_head_dim)
