"""SGLang's token pools (python/sglang/srt/mem_cache/memory_pool.py, kv_cache_configurator.py,
model_executor/pool_configurator.py; dtype rules from sglang/srt/configs/model_config.py and
configs/mamba_utils.py), release by release (``--engine sglang@0.5.23``): releases.py names the
files, their hashes and every table; capacity.py sizes the pools as SGLang does for fit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.engines import uses_dsa
from kvcalc.engines.base import FLOAT_KV, Engine, Target, pad, recurrent_dtype
from kvcalc.engines.knobs import EngineOptions
from kvcalc.engines.sglang import SGLangOptions
from kvcalc.engines.sglang.releases import (
    CURRENT,
    DSA_PAGE_SIZE,
    MAMBA_FULL_MEMORY_RATIO,
    MAMBA_SLOTS_PER_REQUEST,
    MM_RESERVATION,
    OLDEST_READ,
    ROCM_DSA_PRESHUFFLE,
    SWA_FULL_TOKENS_RATIO,
    hybrid_swa,
    version_text,
)
from kvcalc.engines.vllm.rules import INDEXER_FP8
from kvcalc.errors import UsageError
from kvcalc.spec import AttentionCache, LatentCache, LayerCache, ModelSpec, SharedCache

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.calc.estimate import Workload
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.runtime import Runtime, RuntimeRequest
    from kvcalc.calc.simulate import Scheduler
    from kvcalc.calc.step_cost import StepOverhead


@dataclass(frozen=True)
class SGLang(Engine):
    """One cell per token in every layer, allocated in pages of ``page_size`` tokens (default 1).
    Sliding layers only use the smaller SWA pool when the hybrid SWA allocator is on; the cell
    count per token is the same in both pools."""

    @property
    def separate_kv_formats(self) -> bool:
        """SGLang has one --kv-cache-dtype for K and V."""
        return False

    name: str = "sglang"
    page_size: int = 1
    version: tuple[int, int, int] = CURRENT
    # "cuda", or "rocm" (an AMD GPU preset, sglang-rocm): DSA pages and fp8 latent rows differ.
    platform: str = "cuda"
    swa_ratio: float = SWA_FULL_TOKENS_RATIO
    mamba_ratio: float = MAMBA_FULL_MEMORY_RATIO
    mixed_chunk: bool = False  # --enable-mixed-chunk: simulate's scheduler only
    recv_interval: int = 1  # --scheduler-recv-interval: simulate's scheduler only
    options_type = SGLangOptions

    def step_overhead(self) -> StepOverhead:
        """SGLang: prompts in passes of chunked_prefill_size (8,192 on large GPUs,
        srt/server_args.py), decode under CUDA graphs. No published SGLang measurement is in the
        benchmark yet, so its times are vLLM's fitted ones (a Python scheduler and API server of the
        same kind), said in the note."""
        from kvcalc.calc.step_cost import StepOverhead

        return StepOverhead(self.name, step_s=0.62e-3, layer_graphs_s=4.2e-6, layer_eager_s=30e-6, request_s=3e-3,
                            cuda_graphs=True, prefill_chunk=8192,
                            source="vLLM's fitted costs, assumed for SGLang (none of its own fitted)")  # fmt: skip

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, SGLangOptions)
        notes = []
        version = target.version or CURRENT
        if version == (*CURRENT[:2], 0):  # sglang@0.5: the line's newest release read (no 0.5.0 was released)
            version = CURRENT
        if version != CURRENT:
            notes.append(_version_note(version))
        rocm = target.platform == "rocm"
        page = options.block_size or 1
        if target.uses_dsa and rocm:
            page, note = _rocm_dsa_page(version, options.block_size)
            notes.append(note)
        elif target.uses_dsa and page != DSA_PAGE_SIZE:
            # arg_groups/model_overrides/deepseek_v2.py: page_size = 64 x index_kpool on CUDA.
            notes.append(f"SGLang runs DSA models with {DSA_PAGE_SIZE}-token pages on CUDA"
                         f"{f', not --page-size {page}' if options.block_size else ''}")  # fmt: skip
            page = DSA_PAGE_SIZE
        if options.mixed_chunk:
            notes.append("SGLang --enable-mixed-chunk changes no pool: only simulate's scheduler reads it (a prefill "
                         "chunk and the running decodes in one step)")  # fmt: skip
        if options.recv_interval is not None:
            notes.append(f"SGLang --scheduler-recv-interval {options.recv_interval} changes no pool: only simulate's "
                         "scheduler reads it (new requests read every that many decode steps)")  # fmt: skip
        engine = cls(
            page_size=page,
            version=version,
            platform="rocm" if rocm else "cuda",
            mixed_chunk=options.mixed_chunk,
            recv_interval=options.recv_interval or 1,
        )
        return engine, notes

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        """The model as SGLang builds its pools: a sliding or chunked layer has its own pool only
        for the architectures in model_config.py is_hybrid_swa_model; every other model keeps
        every token of every layer in one token pool. Llama 4's chunked layers are its sliding
        layers, with the chunk as the window (load_model_utils.py resolve_sliding_window_size)."""
        spec, notes = _own_kv_for_shared_layers(spec)
        if k_dtype.bits == 8 and k_dtype.block == 1 and uses_dsa(spec.caches):
            if self.platform == "rocm":
                notes = [*notes, _DSA_FP8_ROCM_NOTE]
            else:
                spec, notes = _dsa_fp8_rows(spec), [*notes, _DSA_FP8_NOTE]
        windowed = [c for c in spec.caches if isinstance(c, AttentionCache) and c.tokens == "decoder"
                    and (c.window is not None or c.chunk is not None)]  # fmt: skip
        if not windowed:
            return spec, notes
        if hybrid_swa(spec.checkpoint_type):
            if not any(c.chunk is not None for c in windowed):
                return spec, notes
            caches = tuple(replace(c, window=c.chunk, chunk=None) if isinstance(c, AttentionCache)
                           and c.chunk is not None else c for c in spec.caches)  # fmt: skip
            note = ("SGLang keeps a sliding window of the attention chunk in chunked layers (its hybrid SWA pool, "
                    "window = attention_chunk_size)")  # fmt: skip
            return replace(spec, caches=caches), [*notes, note]
        caches = tuple(replace(c, window=None, chunk=None) if c in windowed else c for c in spec.caches)
        note = (f"SGLang keeps every token in {spec.model_type}'s sliding layers: only the architectures in "
                "model_config.py is_hybrid_swa_model get a sliding-window pool")  # fmt: skip
        return replace(spec, caches=caches), [*notes, note]

    @property
    def granularity(self) -> int:
        return self.page_size

    def check_attention_dp(self, groups: int) -> None:
        """--enable-dp-attention --dp N: N attention groups within the TP group."""

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in FLOAT_KV:
            raise UsageError(f"SGLang stores the KV cache as the model dtype or fp8, not {dtype.name}")

    def check_model_type(self, model_type: str) -> None:
        super().check_model_type(model_type)
        if model_type == "zamba2":
            # sgl-project/sglang has python/sglang/srt/models/falcon_h1.py but no zamba2.py.
            raise UsageError("SGLang has no zamba2 model (python/sglang/srt/models has none): not modelled")

    def check_layer(self, cache: LayerCache) -> None:
        if cache.is_compressed_attention:
            raise UsageError(
                "SGLang's DeepSeek-V4 cache (its dsv4 attention backend's compressed pools) is not modelled: "
                "use --engine theoretical or transformers"
            )

    def layer_tokens(self, cache: LayerCache, text: int, images: int) -> int:
        """One token pool whose cells span every layer (MHATokenToKVPool), and Llama 3.2 Vision's
        image tokens live in it: ``MllamaForConditionalGeneration.pad_input_ids``
        (srt/models/mllama.py @ 013902a8) puts images x tiles x patches pad tokens before the text,
        and ``ScheduleBatch.prepare_encoder_info_extend`` (managers/schedule_batch.py @ fd3907ee)
        splits one ``out_cache_loc`` allocation of them all into encoder and decoder locations. So
        every layer, self- and cross-attention alike, holds a cell for every image and text token."""
        return text + images

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        kept = super().tokens_held(cache, tokens)
        return pad(kept, self.page_size)

    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType:
        """DSA: NSATokenToKVPool (mem_cache/memory_pool.py): ``index_k_with_scale_buffer`` of uint8
        holds index_head_dim fp8 values + index_head_dim / quant_block_size (128) x 4 scale bytes a
        token, as model_runner.py's cell size counts it. MSA (MiniMax-M3): MiniMaxSparseKVPool's
        ``index_k_pool`` (an MHATokenToKOnlyPool of one head of idx_head_dim) takes ``index_dtype``,
        which defaults to the KV cache dtype."""
        return kv if family == "msa" else INDEXER_FP8

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """``_get_and_verify_dtype``: a float32 (or dtype-less) config runs in bf16 for Gemma model
        types and fp16 for every other; the KV cache (``--kv-cache-dtype auto``) takes the model
        dtype (mem_cache/kv_cache_dtype.py)."""
        if config_dtype is None or config_dtype == FP32:
            chosen = BF16 if model_type.startswith("gemma") else FP16
            what = "names no dtype" if config_dtype is None else "is float32"
            return chosen, f"the checkpoint {what}: SGLang runs it, and caches K/V, in {chosen.name}"
        return config_dtype, None

    def weights_dtype(self, config_dtype: DType | None, model_type: str) -> DType | None:
        """The run dtype: a float32 checkpoint's weights are loaded in it (16 bits)."""
        return self.model_dtype(config_dtype, model_type)[0] if config_dtype == FP32 else config_dtype

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        """``mamba2_state_dtype``: the SSM state is float32 unless the config's ``mamba_ssm_dtype``
        (or SGLANG_MAMBA_SSM_DTYPE) says otherwise (sglang/srt/configs/mamba_utils.py); the conv
        state is bfloat16 (SGLANG_MAMBA_CONV_DTYPE), whatever the model dtype."""
        conv, recurrent = cache.state_elements(whole_kernel=False)
        return (conv, BF16), (recurrent, recurrent_dtype(cache) or cache.state_dtype or FP32)

    @property
    def share_name(self) -> str:
        return "mem_fraction_static"

    @property
    def default_share(self) -> Fraction:
        """SGLang's mem_fraction_static when the GPU's memory is unknown."""
        from fractions import Fraction  # here: fractions costs start-up, and only fit asks

        return Fraction(88, 100)

    def runtime(self, request: RuntimeRequest) -> tuple[Runtime, list[str]]:
        from kvcalc.engines.sglang.runtime import sglang_runtime

        notes = []
        if request.gpu is None:
            notes.append("SGLang sizes its defaults from nvidia-smi's total: --gpu-memory taken as that total")
        smi = request.gpu.smi_mib if request.gpu is not None else request.gpu_bytes // 2**20
        runtime = sglang_runtime(smi, request.tp, request.pp, request.share, self.version)
        return runtime, [*notes, *runtime.notes]

    def capacity(self, spec: ModelSpec, workload: Workload, budget: int, context_limit: int | None) -> Fit:
        from kvcalc.engines.sglang.capacity import sglang_fit

        return sglang_fit(spec, workload, self, budget, context_limit)

    def scheduler(self, fit: Fit, max_model_len: int, gpu_bytes: int | None) -> tuple[Scheduler, list[str]]:
        """SGLang's scheduler (engines/sglang/scheduler.py) over the token pool of fit's plan, with
        ``sglang serve``'s defaults: chunked_prefill_size by the GPU's memory, max_prefill_tokens
        16,384, new_token_ratio 0.7 decaying to 0.098, fcfs, mixed chunk as --enable-mixed-chunk says
        (off by default)."""
        from kvcalc.engines.sglang.capacity import plan_of
        from kvcalc.engines.sglang.scheduler import (
            MAX_PREFILL_TOKENS,
            SWA_EVICTION_INTERVAL,
            SglangScheduler,
            default_chunked_prefill_size,
        )

        plan = plan_of(fit)
        if plan.refused_because is not None:
            raise UsageError(plan.refused_because, param="kv_budget")
        chunk, why = default_chunked_prefill_size(None if gpu_bytes is None else gpu_bytes // 2**20, self.version)
        notes = [f"SGLang's scheduler: {plan.max_total_tokens:,} tokens in pages of {plan.page_size}, "
                 f"max_running_requests {plan.max_running_requests:,}, chunked_prefill_size {chunk:,} ({why}; "
                 f"arg_groups/memory_hook.py), max_prefill_tokens {MAX_PREFILL_TOKENS:,}; "
                 + ("a prefill chunk and the running decodes in one step (--enable-mixed-chunk)"
                    if self.mixed_chunk else "prefill and decode in separate steps (no --enable-mixed-chunk)")
                 + (f"; new requests read every {self.recv_interval} decode steps and after each prefill "
                    "(--scheduler-recv-interval, scheduler_components/recv_skipper.py)"
                    if self.recv_interval > 1 else "")
                 + "; admission reserves new_token_ratio (0.7, decaying to 0.098) of the running requests' "
                 "remaining outputs; retraction when decode runs out; the overlap scheduler not modelled"]  # fmt: skip
        # scheduler.py: max_req_len = min(context_len - 1, pool - 1); a prompt of max_req_len - 5 or more
        # is aborted, and init_req_max_new_tokens cuts max_new_tokens to max_req_len - prompt - 1: every
        # request of max_model_len tokens (prompt up to max_model_len - 1) is served whole from a
        # context length of max_model_len + 6.
        context = max_model_len + 6
        notes.append(f"SGLang's --context-length taken as {context:,}, the least that serves every request of "
                     f"{max_model_len:,} tokens whole (scheduler.py: prompts under context length - 6, outputs cut "
                     "to context length - 2 - prompt)")  # fmt: skip
        if plan.mamba_slots is not None:
            # kv_cache_configurator.py _build_hybrid_req_pool: HybridReqToTokenPool has max_running_requests
            # request rows beside max_mamba_cache_size state slots; a request is admitted on a free row
            # (scheduler.py get_num_allocatable_reqs), so the state pool binds through that cap.
            notes.append(f"SGLang's state pool ({plan.mamba_slots:,} slots, {MAMBA_SLOTS_PER_REQUEST} a running "
                         f"request) bounds the running requests at max_running_requests {plan.max_running_requests:,}"
                         "; the slots the radix cache keeps for cached prefixes are not modelled")  # fmt: skip
        # Both pools of a hybrid SWA model (SWATokenToKVPoolAllocator); a model whose every layer slides has
        # one SWA pool, taken as the token pool.
        swa = plan.swa_tokens if plan.swa_tokens is not None and plan.full_cell else None
        if swa is not None:
            notes.append(f"SGLang's two pools: a request holds its tokens in the full-attention pool "
                         f"({plan.max_total_tokens:,}) and in the sliding-window pool ({swa:,}, window {plan.window}); "
                         "admission also needs its SWA estimate, the tokens past the window of its chunk plus "
                         "min(prompt + outputs, window) + a page, under the SWA pool's free tokens less this batch's "
                         "(mem_cache/prefill_budget.py SWAPrefillBudget.check_prefill, estimate_swa_kv_tokens); a "
                         f"decoding request frees its tokens out of the window once {SWA_EVICTION_INTERVAL} have "
                         "left it (SGLANG_SWA_EVICTION_INTERVAL), a chunked prompt before each next chunk "
                         "(schedule_batch.py maybe_evict_swa, mem_cache/common.py free_swa_out_of_window_slots); "
                         "decode needs a page in both pools; used tokens the larger of the two pools' "
                         "(pool_stats_observer.py)")  # fmt: skip
        elif plan.swa_tokens is not None:
            notes.append("SGLang's sliding-window pool (every layer sliding) taken as one token pool: its admission "
                         "estimate and its eviction of tokens that leave the window are not modelled")  # fmt: skip
        # The radix cache on the plain token pool (the hybrid pools' trees, MambaRadixCache and SWARadixCache,
        # are not modelled).
        radix = plan.mamba_slots is None and plan.swa_tokens is None
        if radix:
            notes.append("the radix cache on, SGLang's default (no --disable-radix-cache): shared prefixes and a "
                         "retracted request's prompt matched in whole pages of the tree, its unlocked nodes "
                         "evictable (LRU) and counted free; fcfs order (the default --schedule-policy); not "
                         "modelled: lpm's reordering by longest match, a group's prefix inserted part way by a "
                         "chunk ending inside it")  # fmt: skip
        else:
            notes.append("the radix cache of a hybrid pool (SWARadixCache, MambaRadixCache) not modelled: taken as "
                         "off (--disable-radix-cache), every prompt computed whole"
                         + ("; SGLang frees a request's out-of-window SWA tokens as it does with the radix cache off"
                            if swa is not None else ""))  # fmt: skip
        return SglangScheduler(plan.max_total_tokens, plan.page_size, max_running_requests=plan.max_running_requests,
                               context_len=context, chunked_prefill_size=chunk, mixed_chunk=self.mixed_chunk,
                               prefix_caching=radix, recv_interval=self.recv_interval, swa_tokens=swa,
                               window=plan.window if swa is not None else None), notes  # fmt: skip


def _version_note(version: tuple[int, int, int]) -> str:
    """What ``sglang@VERSION`` models: that release's cache rules where they changed (releases.py), the
    rest as 0.5.23's."""
    asked, current = version_text(version), version_text(CURRENT)
    if version > CURRENT:
        return f"kvcalc's SGLang rules are read in {current}; {asked} is modelled with them"
    older = (
        f"; {version_text(OLDEST_READ)} is the oldest read, {asked} is modelled as it" if version < OLDEST_READ else ""
    )
    reservation, pages = version_text(MM_RESERVATION), version_text(ROCM_DSA_PRESHUFFLE)
    return (f"SGLang {asked}: its own cache rules where they changed (the multimodal reservation from {reservation}, "
            f"ROCm's 64-token DSA pages from {pages}), the rest as {current}'s{older}")  # fmt: skip


def _rocm_dsa_page(version: tuple[int, int, int], given: int | None) -> tuple[int, str]:
    """The page a DSA model gets on ROCm (releases.py): 1 before 0.5.12; from 0.5.12, 64 where
    aiter's preshuffle paged-MQA kernel runs, else 1 (``--page-size 1`` here: the legacy path)."""
    instead = f", not --page-size {given}" if given is not None and given != 1 else ""
    if version < ROCM_DSA_PRESHUFFLE:
        return 1, (f"SGLang {version_text(version)} runs DSA models with 1-token pages on ROCm (server_args.py, "
                   f"before {version_text(ROCM_DSA_PRESHUFFLE)}){instead}")  # fmt: skip
    if given == 1:
        return 1, ("SGLang runs DSA models on ROCm with 1-token pages on its legacy path (aiter's preshuffle "
                   "paged-MQA kernel unavailable), as --page-size 1 asks")  # fmt: skip
    instead = f", not --page-size {given}" if given is not None and given != DSA_PAGE_SIZE else ""
    return DSA_PAGE_SIZE, (
        f"SGLang runs DSA models on ROCm with {DSA_PAGE_SIZE}-token pages where aiter's preshuffle paged-MQA "
        f"kernel runs (Triton >= 3.5, SGLANG_USE_AITER=1){instead}; 1-token pages without it: --block-size 1"
    )


def _own_kv_for_shared_layers(spec: ModelSpec) -> tuple[ModelSpec, list[str]]:
    """SGLang's token pool gives every attention layer its own K and V buffer
    (MHATokenToKVPool: one per layer_num), so a layer that reads an earlier layer's K and V
    (Gemma 3n's num_kv_shared_layers) costs what that layer costs: the nearest earlier layer
    that caches its own (seen in SGLang's own pools on the CPU)."""
    if not any(isinstance(c, SharedCache) for c in spec.caches):
        return spec, []
    caches: list[LayerCache] = []
    source: LayerCache | None = None
    for cache in spec.caches:
        if isinstance(cache, SharedCache) and source is not None:
            caches.append(source)
            continue
        if isinstance(cache, AttentionCache):
            source = cache
        caches.append(cache)
    note = "SGLang allocates K and V for KV-shared layers too (one buffer per attention layer)"
    return replace(spec, caches=tuple(caches)), [note]


# kv_cache_configurator.py calculate_mla_kv_cache_dim: with an fp8 KV cache a DSA model's latent
# row is kv_lora_rank fp8 values, one fp32 scale per 128 of them, and the rope part kept in bf16
# (DSATokenToKVPool.quant_block_size 128, rope_storage_dtype bfloat16), for every DSA backend but
# trtllm and CUDA TileLang. arg_groups/overrides.py picks flashmla_kv for fp8 on Hopper (this
# layout) and trtllm on Blackwell (the raw kv_lora_rank + rope row).
_DSA_QUANT_BLOCK = 128
_DSA_FP8_NOTE = ("SGLang stores a DSA model's fp8 latent as kv_lora_rank fp8 + a 4-byte scale per 128 + the rope "
                 "part in bf16 (its Hopper default, flashmla_kv; Blackwell's trtllm backend stores the plain fp8 row, "
                 "not modelled)")  # fmt: skip


_DSA_FP8_ROCM_NOTE = ("SGLang on ROCm stores a DSA model's fp8 latent as the plain fp8 row (kv_lora_rank + rope, "
                      "no scales: its HIP DSA backends, and CDNA 3's fp8 is e4m3fnuz)")  # fmt: skip


def _dsa_fp8_rows(spec: ModelSpec) -> ModelSpec:
    """The latent rows as bytes of SGLang's scaled fp8 layout (one byte an element)."""

    def scaled(cache: LayerCache) -> LayerCache:
        if not isinstance(cache, LatentCache):
            return cache
        scales = cache.latent_dim // _DSA_QUANT_BLOCK * 4
        return replace(cache, latent_dim=cache.latent_dim + scales, rope_dim=cache.rope_dim * 2)

    return replace(spec, caches=tuple(scaled(c) for c in spec.caches))
