"""SGLang's token pool (python/sglang/srt/mem_cache/memory_pool.py, model_runner.py; dtype rules
from sglang/srt/configs/model_config.py and configs/mamba_utils.py, SGLang 0.5.23)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.dtypes import BF16, FP16, FP32, DType
from kvcalc.engines.base import FLOAT_KV, Engine, EngineOptions, Target, pad, recurrent_dtype
from kvcalc.engines.vllm import INDEXER_FP8
from kvcalc.errors import UsageError
from kvcalc.spec import LayerCache

if TYPE_CHECKING:
    from fractions import Fraction

    from kvcalc.calc.estimate import Estimate
    from kvcalc.calc.runtime import Runtime, RuntimeRequest

# model_runner_kv_cache_mixin.py set_num_tokens_hybrid_swa: swa_full_tokens_ratio's default.
SWA_FULL_TOKENS_RATIO = 0.8


@dataclass(frozen=True)
class SGLangOptions(EngineOptions):
    """SGLang's knob: ``--page-size`` (kvcalc's ``--block-size``), default 1."""

    block_size: int | None = None


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
    options_type = SGLangOptions

    @classmethod
    def configure(cls, options: EngineOptions, target: Target) -> tuple[Engine, list[str]]:
        assert isinstance(options, SGLangOptions)
        return cls(page_size=options.block_size or 1), []

    @property
    def granularity(self) -> int:
        return self.page_size

    def check_dtype(self, dtype: DType) -> None:
        if dtype.name not in FLOAT_KV:
            raise UsageError(f"SGLang stores the KV cache as the model dtype or fp8, not {dtype.name}")

    def check_model_type(self, model_type: str) -> None:
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
        runtime = sglang_runtime(smi, request.tp, request.pp, request.share)
        return runtime, [*notes, *runtime.notes]

    def max_tokens(self, probe: Estimate, budget: int) -> int:
        """SGLang's pool: budget // cell, cell = per-token bytes of every cached layer; with sliding
        layers the hybrid SWA pool gives them swa_full_tokens_ratio of the full pool's tokens
        (model_runner_kv_cache_mixin.py set_num_tokens_hybrid_swa). Rounded down to whole pages."""
        groups = [g for g in probe.groups if g.grows_per_token]
        full = sum(g.layers * g.bytes_per_token for g in groups if g.cache.token_bound is None)
        swa = sum(g.layers * g.bytes_per_token for g in groups if g.cache.token_bound is not None)
        tokens = int(budget / (full + SWA_FULL_TOKENS_RATIO * swa)) if full and swa else budget // (full + swa)
        return tokens // self.page_size * self.page_size
