"""llama.cpp's KV cache (src/llama-context.cpp after PR #17046, src/llama-kv-cache.cpp,
src/llama-kv-cache-iswa.cpp, src/models/*.cpp, common/common.h, tools/server/server.cpp;
llama.cpp 0c1e570, the copy llama-cpp-python 0.3.36 vendors)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.engines.base import Engine, Target, cdiv, pad, windowed
from kvcalc.engines.knobs import EngineOptions
from kvcalc.engines.llamacpp import LlamaCppOptions, LlamaServerOptions
from kvcalc.engines.llamacpp import releases as rel
from kvcalc.engines.llamacpp.architectures import NO_ARCHITECTURE, Window, converted
from kvcalc.errors import UsageError
from kvcalc.spec import (
    AttentionCache,
    CompressedCache,
    CompressorBufferCache,
    CompressorOverlapCache,
    IndexerCache,
    KVWindowCache,
    LatentCache,
    LayerCache,
    ModelSpec,
    NoCache,
)

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.calc.estimate import Estimate
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.runtime import Runtime, RuntimeRequest
    from kvcalc.calc.simulate import Scheduler
    from kvcalc.calc.step_cost import StepOverhead
    from kvcalc.dims import ModelDims

_GGML_KV = ("fp32", "fp16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
# What llama.cpp does with each architecture's windows, chunks and cross-attention, and which HF model
# types it converts to which architecture: one record each in .architectures.
_T5_CROSS = NoCache(block="T5 cross-attention: llama.cpp recomputes its K/V from the encoder output at every decode")


@dataclass(frozen=True)
class LlamaCpp(Engine):
    """The batch is ``--parallel B`` slots of T tokens: n_ctx = pad(B x T, 256). With separate
    streams (the default once -np is given) each sequence gets ``pad(n_ctx / B, 256)`` cells in
    every full layer, and sliding layers ``pad(min(cells, W + n_ubatch), 256)``; a unified cache
    (``--kv-unified``) is one stream of n_ctx cells with ``pad(min(n_ctx, W x B + n_ubatch), 256)``
    in sliding layers; ``swa_full`` gives sliding layers the full cells. n_ubatch is llama.cpp's
    effective one: ``min(n_ctx, n_batch, n_ubatch)`` (src/llama-context.cpp). K and V each have
    their own ggml type; a quantized V needs flash attention.

    The defaults are those of llama.cpp's command-line tools (common/common.h: n_batch 2048,
    n_ubatch 512, swa_full false, one stream per slot); ``llama_context_default_params()`` (the C
    API, llama-cpp-python) sets swa_full true."""

    name: str = "llama.cpp"
    n_ubatch: int = 512
    unified: bool = False
    cell_padding: int = 256
    n_batch: int = 2048
    swa_full: bool = False
    mla: bool = False
    # The llama.cpp build (its bNNNN tag) whose rules apply: llama.cpp@bNNNN, or another engine
    # bundling that build (Ollama, LM Studio) through ``at_build``.
    build: int = rel.CURRENT
    options_type: ClassVar[type[EngineOptions]] = LlamaCppOptions

    @classmethod
    def at_build(cls, build: int, options: EngineOptions | None = None, *, uses_mla: bool = False
                 ) -> tuple[Engine, list[str]]:  # fmt: skip
        """This engine with the rules of llama.cpp build ``build`` (the number of its bNNNN tag; any
        build from releases.OLDEST), configured by ``options`` (None: the defaults), with its notes:
        how an engine that bundles a llama.cpp build (Ollama, LM Studio) gets that build's rules.
        A build too old, or one between the last known before and the first known after a rule's
        change, is a one-line UsageError."""
        if build < rel.OLDEST:
            raise UsageError(f"llama.cpp build b{build} is older than kvcalc models (b{rel.OLDEST} and later)",
                             param="engine")  # fmt: skip
        return cls.configure(options or cls.options_type(), Target(version=(build, 0, 0), uses_mla=uses_mla))

    def matmul_dtype(self, weight_format: str, arch: str) -> tuple[str, str]:
        """llama.cpp loads GGUFs only: every quantized type (Q4_0 .. Q8_0, K-quants, MXFP4) is
        multiplied by its MMQ kernels against int8-quantized activations (ggml-cuda/mmq.cu), 16-bit
        weights by cuBLAS in 16 bits."""
        if weight_format in ("bf16", "fp16", "fp32"):
            return "bf16", "16-bit GGUF weights run cuBLAS 16-bit GEMMs"
        return "int8", "llama.cpp's MMQ kernels multiply quantized GGUF blocks on int8 tensor cores"

    def step_overhead(self) -> StepOverhead:
        """llama.cpp (CUDA): one ggml graph per ubatch, replayed as a CUDA graph for single-token
        decode (ggml-cuda.cu, GGML_CUDA_USE_GRAPHS); prompts in passes of n_ubatch tokens
        (llama-bench's pp512 is one 512-token pass). Fitted on published llama-bench tables."""
        from kvcalc.calc.step_cost import StepOverhead

        return StepOverhead(self.name, step_s=0.15e-3, layer_graphs_s=3e-6, layer_eager_s=19.5e-6, request_s=0.0,
                            cuda_graphs=True, prefill_chunk=self.n_ubatch,
                            source="llama.cpp's CUDA backend, fitted on llama-bench tables")  # fmt: skip

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, LlamaCppOptions | LlamaServerOptions)
        build = target.version[0] if target.version is not None else rel.CURRENT
        engine = cls(
            n_ubatch=options.ubatch or 512,
            unified=getattr(options, "kv_unified", False) or cls.unified,
            n_batch=options.n_batch or 2048,
            swa_full=bool(options.swa_full),
            mla=target.uses_mla,
            build=build,
        )
        if build == rel.CURRENT:
            return engine, []
        return engine._at_old_build(options)

    def _at_old_build(self, options: LlamaCppOptions | LlamaServerOptions) -> tuple[Engine, list[str]]:
        """The rules of an older build (releases.py: which changed where, each citing its PR)."""
        build, notes = self.build, []
        if build > rel.CURRENT:
            notes.append(f"kvcalc's llama.cpp rules were read at b{rel.CURRENT}; b{build}'s later changes are not "
                         "modelled")  # fmt: skip
        if rel.unknown(build, rel.PAD_32_UNTIL, rel.PAD_256_FROM):
            raise UsageError(
                f"kvcalc does not know llama.cpp b{build}'s cell padding (32 without flash attention through "
                f"b{rel.PAD_32_UNTIL}; PRs #16812 and #17046 made it 256 by b{rel.PAD_256_FROM}): not modelled",
                param="engine",
            )
        if rel.unknown(build, rel.UNIFIED_UNTIL, rel.STREAMS_FROM):
            raise UsageError(f"kvcalc does not know whether llama.cpp b{build} keeps one KV stream per sequence "
                             f"(one cache through b{rel.UNIFIED_UNTIL}, streams by b{rel.STREAMS_FROM}): not modelled",
                             param="engine")  # fmt: skip
        engine = self
        if build <= rel.PAD_32_UNTIL:
            # src/llama-kv-cache.cpp llama_kv_cache_get_padding (b4905) / llama_kv_cache_unified::get_padding
            # (b5602): flash_attn ? 256u : 32u; common/common.h flash_attn = false.
            engine = replace(engine, cell_padding=32)
            notes.append(f"llama.cpp b{build} pads cells to 32 without flash attention (its default; -fa pads "
                         "to 256, not modelled)")  # fmt: skip
        if build <= rel.UNIFIED_UNTIL:
            if getattr(options, "kv_unified", False):
                raise UsageError(f"llama.cpp b{build} has no --kv-unified: every sequence shares its one cache",
                                 param="kv_unified")  # fmt: skip
            engine = replace(engine, unified=True)
        if build <= rel.SWA_FULL_UNTIL:
            if options.swa_full:
                raise UsageError(f"llama.cpp b{build} has no --swa-full: sliding layers already keep n_ctx cells",
                                 param="swa_full")  # fmt: skip
            engine = replace(engine, swa_full=True)
        return engine, notes

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        """The model as llama.cpp builds it: windows only where its architecture has one, Llama 4's
        chunk fixed at 8192; and the K/V types it accepts for it."""
        spec, notes = self._old_build_layout(spec)
        if self.build <= rel.PAD_32_UNTIL and not v_dtype.is_plain:
            # src/llama-context.cpp llama_init_from_model (b4905..b5602): "V cache quantization requires
            # flash_attn", and -fa pads cells to 256, which kvcalc does not model at these builds.
            raise UsageError(
                f"llama.cpp b{self.build} quantizes V ({v_dtype.name}) only with flash attention (-fa), whose "
                "256-cell padding kvcalc does not model at this build: give an unquantized V type"
            )
        if self.mla and k_dtype != v_dtype and self.build >= rel.MLA_V_LESS_FROM:
            # src/llama-context.cpp llama_init_from_model: hparams.is_mla() && type_k != type_v (is_mla()
            # came with the V-less cache, PR #19067; before it the latent V row had its own type_v).
            raise UsageError(
                f"llama.cpp refuses different K ({k_dtype.name}) and V ({v_dtype.name}) cache types for an MLA model "
                "('model does not support different K and V cache types'): give one --kv-dtype"
            )
        _check_blocks(spec, k_dtype, v_dtype)
        mt = spec.model_type
        caches = _msa_indexers(spec.caches)
        if any(c.is_compressed_attention for c in caches):
            caches = _dsv4_layout(caches)
            notes += _DSV4_NOTES
        arch = converted(mt)  # the llama.cpp architecture the model converts to, if kvcalc knows it
        why = arch.dropped_why(mt) if arch is not None else None
        if arch is not None and why is not None and any(_windowed(c) for c in caches):
            caches = tuple(_without_window(c) for c in caches)
            notes.append(
                f"llama.cpp runs {mt} as its '{arch.name}' architecture with no sliding window ({why}): "
                "every layer keeps the whole context"
            )
        elif (arch is None or arch.window is not Window.KEPT) and any(_windowed(c) for c in caches):
            notes.append(f"kvcalc assumes llama.cpp keeps {mt}'s sliding window (not checked against its src/models/)")
        elif arch is None:
            # No record of how llama.cpp converts this model type: its generic rules are a guess.
            notes.append(f"kvcalc has no llama.cpp architecture record for {mt}: its generic cache rules are "
                         "assumed (the converter was not checked)")  # fmt: skip
        chunk = arch.chunk if arch is not None else None
        if chunk is not None and any(_chunk(c) not in (None, chunk) for c in caches):
            given = next(_chunk(c) for c in caches if _chunk(c) not in (None, chunk))
            caches = tuple(_with_chunk(c, chunk) for c in caches)
            notes.append(
                f"llama.cpp fixes Llama 4's attention chunk at {chunk:,} tokens (src/models/llama4.cpp), "
                f"not the config's {given:,}"
            )
        if arch is not None and arch.recomputes_cross_attention and any(c.tokens == "encoder" for c in caches):
            caches = tuple(_T5_CROSS if c.tokens == "encoder" else c for c in caches)
            notes.append(
                "llama.cpp caches no T5 cross-attention K/V: it recomputes them from the encoder output at every "
                "decode (src/models/t5.cpp), kept as an f32 host copy of n_embd x encoder tokens, not counted here"
            )
            if not self.unified:
                # Seen in a real run (tests/inputs/gguf/test_attention.py): src/llama-graph.cpp
                # build_pos_bias makes one [n_kv, n_tokens, n_head] bias, which does not broadcast over
                # scores split into streams.
                notes.append(
                    "llama.cpp 0c1e570 aborts a T5 context of more than one sequence without --kv-unified "
                    "(GGML_ASSERT(ggml_can_repeat(b, a)) in ggml.c): batch 1 or --kv-unified runs"
                )
        if self.build <= rel.SWA_FULL_UNTIL and any(c.token_bound is not None for c in caches):
            notes.append(f"llama.cpp b{self.build} has no sliding-window cache (PR #13194 came later): sliding "
                         "and chunked layers keep n_ctx cells")  # fmt: skip
        elif self.swa_full and any(c.token_bound is not None and c.tokens == "decoder" for c in caches):
            notes.append("--swa-full: llama.cpp gives sliding and chunked layers full-size caches (n_ctx cells)")
        return (replace(spec, caches=caches) if caches != spec.caches else spec), notes

    def _old_build_layout(self, spec: ModelSpec) -> tuple[ModelSpec, list[str]]:
        """An MLA model's layers as an older build caches them (releases.py), and the refusals of
        builds kvcalc cannot place (between the last known before a change and the first after)."""
        build = self.build
        if any(_windowed(c) or _chunk(c) is not None for c in spec.caches) and rel.unknown(
            build, rel.SWA_FULL_UNTIL, rel.SWA_CACHE_FROM
        ):
            raise UsageError(f"kvcalc does not know llama.cpp b{build}'s sliding-window cache (PR #13194, resized by "
                             f"#17046: none at b{rel.SWA_FULL_UNTIL}, today's by b{rel.SWA_CACHE_FROM}): not modelled",
                             param="engine")  # fmt: skip
        if build >= rel.MLA_V_LESS_FROM or not any(isinstance(c, LatentCache) for c in spec.caches):
            return spec, []
        for last, first, pr in ((rel.MLA_FULL_UNTIL, rel.MLA_LATENT_FROM, "#12801"),
                                (rel.MLA_V_UNTIL, rel.MLA_V_LESS_FROM, "#19067")):  # fmt: skip
            if rel.unknown(build, last, first):
                raise UsageError(f"kvcalc does not know llama.cpp b{build}'s MLA cache (PR {pr} changed it "
                                 f"between b{last} and b{first}): not modelled", param="engine")  # fmt: skip
        caches: tuple[LayerCache, ...]
        if build <= rel.MLA_FULL_UNTIL:
            heads = spec.query_heads
            if not heads or any(isinstance(c, LatentCache) and not (c.k_head_dim and c.v_head_dim)
                                for c in spec.caches):  # fmt: skip
                raise UsageError(f"llama.cpp b{build} caches MLA layers as per-head K and V: this model does not "
                                 "give its heads and per-head dims")  # fmt: skip
            caches = tuple(
                AttentionCache(kv_heads=heads, k_head_dim=c.k_head_dim or 0, v_head_dim=c.v_head_dim or 0)
                if isinstance(c, LatentCache) else c
                for c in spec.caches
            )  # fmt: skip
            note = (f"llama.cpp b{build} has no MLA cache (PR #12801 came later): it caches {heads} heads of "
                    "K and V per token")  # fmt: skip
        else:
            caches = tuple(_LatentWithV(latent_dim=c.latent_dim, rope_dim=c.rope_dim, k_head_dim=c.k_head_dim,
                                        v_head_dim=c.v_head_dim) if isinstance(c, LatentCache) else c
                           for c in spec.caches)  # fmt: skip
            note = (f"llama.cpp b{build} caches the MLA latent as K and again as V (V-less cache: PR #19067, "
                    "later)")  # fmt: skip
        return replace(spec, caches=caches), [note]

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in _GGML_KV:
            known = ", ".join(n.replace("fp", "f") for n in _GGML_KV)
            raise UsageError(f"llama.cpp cache types are {known}; not {dtype.name}")

    def check_layer(self, cache: LayerCache) -> None:
        if isinstance(cache, CompressorBufferCache) or type(cache) is CompressorOverlapCache:
            # transformers' compressor buffers: prepare() turns them into llama.cpp's states.
            raise UsageError(f"llama.cpp has no {cache.kind} cache of its own (transformers' layout): not modelled")

    def check_model_type(self, model_type: str) -> None:
        super().check_model_type(model_type)
        if model_type in NO_ARCHITECTURE:
            raise UsageError(
                f"llama.cpp has no {model_type} architecture ({NO_ARCHITECTURE[model_type]}): not modelled"
            )

    def idle_knobs(self, spec: ModelSpec) -> tuple[str, ...]:
        """n_ubatch and n_batch size only sliding (and DeepSeek-V4's compressed) layers' cells, and
        swa_full only sliding ones."""
        return () if windowed(spec) else ("ubatch", "n_batch", "swa_full")

    def ubatch(self, n_ctx: int) -> int:
        """src/llama-context.cpp: ``n_batch = min(n_ctx, n_batch)`` (causal attention), then
        ``n_ubatch = min(n_batch, n_ubatch)``, both before n_ctx is padded."""
        return min(n_ctx, self.n_batch, self.n_ubatch)

    def check_shared_prefix(self, prefix: int) -> None:
        """llama.cpp allocates its context's cells whole (n_ctx = batch x tokens, padded: batch_slots),
        however many of them the sequences would share."""
        if prefix > 0:
            raise UsageError(f"{self.name} allocates n_ctx cells for every sequence's tokens whatever they share: "
                             "shared_prefix changes nothing", param="shared_prefix")  # fmt: skip

    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int:
        n_ctx = pad(batch * tokens, self.cell_padding)
        if isinstance(cache, (KVWindowCache, CompressedCache)) or (isinstance(cache, IndexerCache) and cache.ratio > 1):
            return self._dsv4_cells(cache, n_ctx, tokens, batch) * batch
        streams, cells = (1, n_ctx) if self.unified else (batch, pad(n_ctx // batch, self.cell_padding))
        bound = cache.token_bound if cache.tokens == "decoder" else None
        if bound is not None and not self.swa_full:
            # src/llama-kv-cache-iswa.cpp: size_swa = pad(min(size_base, n_swa x (unified ? n_seq_max : 1)
            # + n_ubatch), 256); swa_full: size_swa = size_base.
            window = bound * (batch if self.unified else 1)
            cells = pad(min(cells, window + self.ubatch(batch * tokens)), self.cell_padding)
        return cells * streams

    def layer_tokens(self, cache: LayerCache, text: int, images: int) -> int:
        if cache.tokens == "image":
            # src/llama-arch.cpp (ggml-org/llama.cpp @ 3679b65d) has no mllama architecture; only
            # Ollama's patched copy of llama.cpp adds one.
            raise UsageError("llama.cpp has no Llama 3.2 Vision (mllama) cross-attention layers: not modelled")
        return super().layer_tokens(cache, text, images)

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        return self.batch_slots(cache, tokens, 1, 0)

    def _dsv4_cells(self, cache: LayerCache, n_ctx: int, tokens: int, batch: int) -> int:
        """Cells per sequence of a DeepSeek-V4 cache (src/llama-kv-cache-dsv4.cpp @ 0c1e570). kv_size
        is n_ctx_seq (src/llama-model.cpp create_memory): n_ctx with --kv-unified, else pad(n_ctx / B,
        256) (src/llama-context.cpp). The caches ignore --kv-unified (unified_raw = unified_compressed
        = false): one stream per sequence, so a unified context gives every sequence n_ctx cells."""
        seq = n_ctx if self.unified else pad(n_ctx // batch, self.cell_padding)
        if isinstance(cache, KVWindowCache):
            # kv_raw, a llama_kv_cache_iswa whose every layer is SWA (set_swa_pattern(0) in
            # src/models/deepseek4.cpp): pad(min(kv_size, n_swa x 1 + n_ubatch), 256), or kv_size with swa_full.
            if self.swa_full:
                return seq
            return pad(min(seq, cache.window + self.ubatch(batch * tokens)), self.cell_padding)
        # kv_csa / kv_hca / kv_lid: GGML_PAD(dsv4_comp_size(kv_size, ratio), 256), dsv4_comp_size being
        # max(1, ceil(kv_size / ratio)).
        ratio = cache.ratio if isinstance(cache, (CompressedCache, IndexerCache)) else 1
        return pad(max(1, cdiv(seq, ratio)), self.cell_padding)

    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType:
        """The K cache type (-ctk, f16 by default). llama.cpp 0c1e570 keeps the indexer keys in a
        second llama_kv_cache built with the main cache's type_k, type_v, kv_size, n_seq_max,
        unified and n_pad, its hparams copied with n_head_kv 1 and n_embd_head_k = indexer.key_length
        (src/llama-kv-cache-dsa.cpp for deepseek32 and glm-dsa, src/llama-kv-cache-msa.cpp for
        minimax-m3): the cells and streams of the layer's own cache, one key row per token in
        type_k (checked on real llama.cpp runs: tests/inputs/gguf/test_mla.py)."""
        return kv

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """common/common.h ``cache_type_k/v = GGML_TYPE_F16`` and ``llama_context_default_params()``:
        K and V are f16 whatever the weights are."""
        note = None if config_dtype == FP16 else "llama.cpp caches K and V as f16 unless -ctk/-ctv say otherwise"
        return FP16, note

    def weights_dtype(self, config_dtype: DType | None, model_type: str) -> DType | None:
        """A Hugging Face checkpoint reaches llama.cpp through convert_hf_to_gguf.py, whose
        ``--outtype auto`` writes a float32 checkpoint's tensors in bf16 (the 16-bit float of
        highest fidelity); a GGUF file's own tensors are read from its header instead."""
        return BF16 if config_dtype == FP32 else config_dtype

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        """src/llama-model.cpp ``create_memory``: recurrent memory (r_l, s_l) is GGML_TYPE_F32."""
        conv, recurrent = cache.state_elements(whole_kernel=False)
        return (conv, FP32), (recurrent, FP32)

    @property
    def default_share(self) -> Fraction:
        """llama.cpp takes whatever is free: all of it."""
        from fractions import Fraction  # here: fractions costs start-up, and only fit asks

        return Fraction(1)

    def runtime(self, request: RuntimeRequest) -> tuple[Runtime, list[str]]:
        from kvcalc.engines.llamacpp.runtime import llamacpp_runtime

        dims = request.dims
        if dims is not None and not dims.heads and request.recurrent:
            # src/models/mamba.cpp's graph (the conv and scan buffers, n_seq states) is not the
            # attention graph llamacpp_compute_bytes was measured on.
            raise UsageError(
                "llama.cpp's compute buffer for a recurrent-only model is not modelled: give overhead (bytes per GPU)",
                param="overhead",
            )
        if dims is None or not dims.heads:
            raise UsageError(
                "llama.cpp's compute buffer needs the model's hidden size, heads and vocabulary, and this model does "
                "not give them: give overhead (bytes per GPU)",
                param="overhead",
            )
        runtime = llamacpp_runtime(
            dims, n_ctx=request.n_ctx, n_ubatch=self.n_ubatch, n_batch=self.n_batch, n_seq=request.n_seq,
            unified=self.unified, quantized_kv=request.quantized_kv, share=request.share,
        )  # fmt: skip
        return runtime, list(runtime.notes)

    def max_tokens(self, probe: Estimate, budget: int) -> int:
        """Whole cells of 256."""
        return budget // probe.per_gpu_token_bytes // self.cell_padding * self.cell_padding

    @property
    def splits_layers(self) -> bool:
        return True

    def compute_buffer(
        self, dims: ModelDims | None, *, n_ctx: int, n_seq: int, quantized_kv: bool
    ) -> tuple[int, str] | None:
        from kvcalc.engines.llamacpp.runtime import llamacpp_compute_bytes

        if dims is None or not dims.heads:
            return None
        return llamacpp_compute_bytes(dims, n_ctx=n_ctx, n_ubatch=self.n_ubatch, n_batch=self.n_batch, n_seq=n_seq,
                                      unified=self.unified, quantized_kv=quantized_kv)  # fmt: skip

    @property
    def device_context_bytes(self) -> int:
        from kvcalc.engines.llamacpp.runtime import LLAMACPP_CONTEXT

        return LLAMACPP_CONTEXT.bytes

    # --- simulate ----------------------------------------------------------------------------------

    @property
    def has_slots(self) -> bool:
        """llama-server's -np slots: llama.cpp and llama-server themselves; Ollama and LM Studio,
        which bundle it, have schedulers of their own (not modelled)."""
        return type(self) in (LlamaCpp, LlamaServer)

    def scheduler(self, fit: Fit, max_model_len: int, gpu_bytes: int | None) -> tuple[Scheduler, list[str]]:
        """llama-server's slots (engines/llamacpp/scheduler.py): fit's workload is the server, -np
        ``fit.batch`` slots of ``fit.tokens`` tokens, n_ctx = pad(np x tokens, 256), each slot its own
        pad(n_ctx / np, 256) cells, or with a unified cache all n_ctx; batches of n_batch. Engines
        that only bundle llama.cpp (Ollama, LM Studio) have schedulers of their own, not modelled."""
        if type(self) not in (LlamaCpp, LlamaServer):
            return Engine.scheduler(self, fit, max_model_len, gpu_bytes)
        from kvcalc.engines.llamacpp.scheduler import LlamaServerScheduler

        slots, tokens = fit.batch, fit.tokens
        n_ctx = pad(slots * tokens, self.cell_padding)
        slot_context = n_ctx if self.unified else pad(n_ctx // slots, self.cell_padding)
        n_batch = min(slots * tokens, self.n_batch)  # src/llama-context.cpp: min(n_ctx, n_batch), causal
        cache = (f"one unified cache of {n_ctx:,} cells, each slot up to all of it" if self.unified
                 else f"each slot its own {slot_context:,} cells")  # fmt: skip
        notes = [f"llama-server's slots: -np {slots} -c {n_ctx:,} ({cache}), n_batch {n_batch:,} (n_ubatch "
                 f"{self.ubatch(slots * tokens):,} passes within a step); a request waits for a free slot, first come "
                 "first served; prompts and decodes share each step (continuous batching); never a preemption; the "
                 "prompt cache (cache_prompt, its default): a slot keeps its last request's tokens and a request "
                 "reads only what follows their common prefix, slots chosen by prompt similarity over 0.1, else "
                 "least recently used; the RAM prompt cache (--cache-ram) not modelled, so a real server may "
                 "reuse more"]  # fmt: skip
        if type(self) is LlamaServer and slots == 1:
            notes.append("one slot (-np 1 -kvu): a plain llama-server (-np auto) runs 4 slots on one unified cache of "
                         "-c cells (tools/server/server.cpp), which is --batch 4")  # fmt: skip
        if fit.max_concurrency < slots:
            notes.append(f"warning: the KV budget holds {fit.max_concurrency:,} request(s) of {tokens:,} tokens, fewer "
                         f"than the {slots} slots: llama.cpp would fail to allocate -c {n_ctx:,}; simulated as if "
                         "it had")  # fmt: skip
        unified = n_ctx if self.unified else None
        return LlamaServerScheduler(slots, slot_context, n_batch, unified_cells=unified), notes


@dataclass(frozen=True)
class LlamaServer(LlamaCpp):
    """``llama-server -c N`` with no ``-np``: tools/server/server.cpp turns n_parallel auto (-1,
    common/arg.cpp) into 4 slots sharing one unified cache (kv_unified = true); swa_full false
    (common/common.h). ``--batch 4 --tokens N/4`` is that server; another --batch models
    ``-np B -kvu``."""

    name: str = "llama-server"
    unified: bool = True
    options_type = LlamaServerOptions

    def _at_old_build(self, options: LlamaCppOptions | LlamaServerOptions) -> tuple[Engine, list[str]]:
        engine, notes = super()._at_old_build(options)
        if self.build <= rel.UNIFIED_UNTIL:
            # The b5331 log (tests/fixtures/logs/llamacpp): a plain llama-server -c 16384 has n_seq_max = 1.
            notes.append(f"llama-server b{self.build} starts one slot without -np (not 4): --batch is its -np")
        return engine, notes

    def step_overhead(self) -> StepOverhead:
        """llama.cpp's, plus the server's HTTP request handling before the first token (2 ms,
        assumed: no llama-server measurement is in the benchmark)."""
        base = super().step_overhead()
        return replace(base, request_s=2e-3, source=base.source + "; the server's request handling assumed")


@dataclass(frozen=True)
class _LatentWithV(LatentCache):
    """An MLA layer as llama.cpp caches it from PR #12801 until the V-less cache (PR #19067): K rows
    of kv_lora_rank + qk_rope (n_embd_head_k = 576 for DeepSeek-V3) and V rows of kv_lora_rank
    (n_embd_head_v = 512), one head each (src/llama-kv-cache.cpp: n_embd_v_gqa rows in type_v)."""

    @property
    def elements_per_token(self) -> int:
        return 2 * self.latent_dim + self.rope_dim

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.latent_dim + self.rope_dim, self.latent_dim, None

    def describe(self) -> tuple[str, str]:
        return "latent", f"{self.latent_dim}+{self.rope_dim} + V {self.latent_dim}"

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} x ({self.latent_dim} + {self.rope_dim} + {self.latent_dim}) x {s}"

    def explain(self) -> str:
        return "llama.cpp (before its V-less cache) keeps the MLA latent as K and the latent again as V"


@dataclass(frozen=True)
class _MsaIndexer(IndexerCache):
    """A MiniMax-M3 indexer layer as llama.cpp 0c1e570 caches it: llama_kv_cache_msa builds the
    indexer cache from the model's hparams with n_head_kv 1 and n_embd_head_k = indexer.key_length
    but n_embd_head_v left as the attention's (src/llama-kv-cache-msa.cpp), and minimax-m3 is no
    MLA model, so llama_kv_cache gives it a V row too, one head of that value dim per token in
    type_v (src/llama-kv-cache.cpp: has_v = !is_mla), which no graph reads. A real run shows it:
    "K (f16): 0.75 MiB, V (f16): 0.38 MiB" for 3 layers of 1024 cells, keys of 128, values of 64."""

    value_dim: int = 0

    @property
    def elements_per_token(self) -> int:
        return self.head_dim + self.value_dim

    def rows(self, tp: int, heads: int | None = None) -> tuple[int, int, int | None]:
        return self.head_dim, self.value_dim, None

    def describe(self) -> tuple[str, str]:
        return "indexer", f"{self.head_dim} + V {self.value_dim}"

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x {kept:,} x ({self.head_dim} + {self.value_dim}) x {s}"

    def explain(self) -> str:
        return (
            f"llama.cpp's MiniMax-M3 indexer cache holds one {self.head_dim}-element key and an unread "
            f"{self.value_dim}-element V row per token"
        )


def _msa_indexers(caches: tuple[LayerCache, ...]) -> tuple[LayerCache, ...]:
    """MiniMax-M3's indexer entries with the V row llama.cpp gives them: one head of the value dim
    of the model's attention layers (llama.cpp's hparams hold one n_embd_head_v for them all)."""
    if not any(isinstance(c, IndexerCache) and c.family == "msa" for c in caches):
        return caches
    dims = {c.v_head_dim for c in caches if isinstance(c, AttentionCache)}
    if len(dims) != 1:
        raise UsageError(
            "llama.cpp sizes MiniMax-M3's indexer V rows by the one value head dim of its attention; this model "
            f"has {sorted(dims)}: not modelled"
        )
    (v_dim,) = dims
    return tuple(
        _MsaIndexer(head_dim=c.head_dim, ratio=c.ratio, family="msa", value_dim=v_dim)
        if isinstance(c, IndexerCache) and c.family == "msa"
        else c
        for c in caches
    )


# src/llama-kv-cache-dsv4.cpp @ 0c1e570: DSV4_CSA_RATIO and DSV4_HCA_RATIO, the only compressed layers
# llama_kv_cache_dsv4 caches (its layer filters test compress_ratios[il] against them).
_DSV4_RATIOS = (4, 128)
_DSV4_NOTES = [
    "llama.cpp keeps DeepSeek-V4's caches per sequence whatever --kv-unified says (src/llama-kv-cache-dsv4.cpp): "
    "a K-only window row per token, CSA / HCA / indexer keys in pad(ceil(n_ctx_seq / ratio), 256) cells",
    "llama.cpp's DeepSeek-V4 compressor states are f32 kv and score planes for one sequence position each; "
    "MTP / speculative drafting (n_rs_seq > 0, common.cpp: the draft's n_max) adds n_rs_seq planes per "
    "sequence, not counted here",
]


@dataclass(frozen=True)
class _Dsv4State(CompressorOverlapCache):
    """One llama_dsv4_comp_state layer (src/llama-kv-cache-dsv4.cpp @ 0c1e570): two f32 tensors, kv
    and score, of ``width`` (n_embd_state) x ``rows`` (state_size) x n_seq x (1 + n_rs_seq). CSA's
    compressor: 2 x head_dim x (2 x 4); its lightning indexer's: 2 x indexer.key_length x 8; HCA's:
    head_dim x 128. They replace transformers' buffer and overlap entries one for one."""

    state_rows: int = 0
    part: str = ""

    def state_elements(self, *, whole_kernel: bool) -> tuple[int, int]:
        return self.state_rows * self.width, self.state_rows * self.width  # kv, score

    def describe(self) -> tuple[str, str]:
        return "state", f"2 x {self.state_rows}x{self.width} f32"

    def fields(self) -> dict[str, Any]:
        return {"compress_ratio": self.ratio, "state_rows": self.state_rows, "width": self.width, "part": self.part}

    def seed_product(self, layers: int, batch: int, kept: int, s: int) -> str | None:
        return f"{layers} x {batch:,} x 2 x {self.state_rows} x {self.width} x {s}"

    def explain(self) -> str:
        planes = f"{self.state_rows} x {self.width}"
        return f"llama.cpp's {self.part} compressor state: f32 kv and score planes of {planes} per sequence"


def _dsv4_layout(caches: tuple[LayerCache, ...]) -> tuple[LayerCache, ...]:
    """DeepSeek-V4 as llama_kv_cache_dsv4 holds it: the window one K row (no V copy), compressed
    entries and indexer keys as they are, transformers' compressor buffers and overlaps replaced by
    llama.cpp's compressor states (one entry for one, so entry_layers still hold)."""
    head = {c.head_dim for c in caches if isinstance(c, CompressedCache)}
    index = {c.head_dim for c in caches if isinstance(c, IndexerCache)}
    ratios = {c.compress_ratio for c in caches if c.is_compressed_attention or isinstance(c, IndexerCache)} - {1}
    if len(head) > 1 or len(index) > 1 or not ratios <= set(_DSV4_RATIOS):
        raise UsageError(
            f"llama.cpp 0c1e570 caches DeepSeek-V4 layers of ratios {_DSV4_RATIOS} and one head dim; this model has "
            f"ratios {sorted(ratios)}, head dims {sorted(head)}, indexer dims {sorted(index)}: not modelled"
        )
    hd = head.pop() if head else 0
    idx = index.pop() if index else 0
    out: list[LayerCache] = []
    for c in caches:
        if isinstance(c, KVWindowCache):
            out.append(replace(c, v_copy=False))
        elif isinstance(c, CompressorBufferCache) and c.ratio == _DSV4_RATIOS[0]:
            out.append(_Dsv4State(ratio=c.ratio, width=2 * hd, state_rows=2 * c.ratio, part="CSA"))
        elif isinstance(c, CompressorBufferCache):
            out.append(_Dsv4State(ratio=c.ratio, width=hd, state_rows=c.ratio, part="HCA"))
        elif isinstance(c, CompressorOverlapCache):
            # CSA's overlap (transformers) -> the indexer's state (llama.cpp): the same layer, one each.
            out.append(_Dsv4State(ratio=c.ratio, width=2 * idx, state_rows=2 * c.ratio, part="lightning-indexer"))
        else:
            out.append(c)
    return tuple(out)


def _windowed(cache: LayerCache) -> bool:
    return isinstance(cache, AttentionCache) and cache.window is not None and cache.tokens == "decoder"


def _chunk(cache: LayerCache) -> int | None:
    return cache.chunk if isinstance(cache, AttentionCache) and cache.tokens == "decoder" else None


def _without_window(cache: LayerCache) -> LayerCache:
    return replace(cache, window=None) if isinstance(cache, AttentionCache) and _windowed(cache) else cache


def _with_chunk(cache: LayerCache, chunk: int) -> LayerCache:
    return replace(cache, chunk=chunk) if isinstance(cache, AttentionCache) and _chunk(cache) is not None else cache


# ggml's quantized cache types store blocks of 32 elements (QK4_0 ... QK8_0, QK4_NL).
_BLOCK = 32


def _check_blocks(spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> None:
    """src/llama-context.cpp llama_init_from_model: a quantized K (V) type whose block does not
    divide a layer's K (V) head dim is refused ("K cache type ... does not divide n_embd_head_k")."""
    for part, dtype, index in (("K", k_dtype, 0), ("V", v_dtype, 1)):
        if dtype.is_plain:
            continue
        for cache in spec.caches:
            dims = cache.head_dims if not cache.is_latent else (sum(cache.latent_shape or (0, 0)), None)
            dim = dims[index]
            if dim and dim % _BLOCK:
                raise UsageError(
                    f"llama.cpp refuses {part} cache type {dtype.name} for {spec.name}: its blocks of {_BLOCK} do not "
                    f"divide the {part} head dim {dim}"
                )
