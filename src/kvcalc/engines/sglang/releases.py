"""The SGLang releases whose rules kvcalc models, and the tables and constants each rule reads.

Every rule was read in the sglang 0.5.23 wheel from PyPI (its ``_version.py`` records no commit;
files are named by the first 16 hex digits of their sha256, which ``sglang_probe.py`` prints
beside every run) and confirmed by building SGLang's own pools on the CPU
(tests/engines/sglang/test_sglang_conformance.py):

- srt/configs/model_config.py (f5189e02ee79fd0d): ``is_hybrid_swa_model`` (an allowlist of
  architectures; every other sliding-window model keeps every token in one token pool) and
  ``is_multimodal_model``;
- srt/mem_cache/kv_cache_configurator.py (1e31685151ea6ed1): ``_profile_available_bytes``
  (multimodal reservation), ``_handle_max_mamba_cache`` (the state pool's share),
  ``resolve_max_num_reqs``, ``calculate_mla_kv_cache_dim``;
- srt/model_executor/pool_configurator.py (4e1ca3e4871c5107): ``DefaultPoolConfigurator``,
  ``HybridSWAPoolConfigurator`` and ``validate_swa_pool_size``;
- srt/arg_groups/model_overrides/deepseek_v2.py: the page size forced for DSA models.

Older releases (``sglang@0.5.8`` to ``sglang@0.5.22``) were read in their own PyPI wheels, and
differ from 0.5.23 in the cache where these say (every other rule is 0.5.23's, said in a note):

- the multimodal reservation (``mm_runtime_reservation_gb`` off the KV budget) first ships in
  0.5.18 (mem_cache/kv_cache_configurator.py; 0.5.17's mem_cache/kv_cache_builder.py and 0.5.8's
  managers/scheduler.py size the embedding cache after the pools, out of the runtime's share);
- DSA pages on ROCm: 0.5.8 to 0.5.11 force 1-token pages (server_args.py
  ``_handle_model_specific_adjustments``: ``if is_hip(): self.page_size = 1``, "Setting page size
  to 1 for DeepSeek DSA on ROCm"); from 0.5.12 (server_args.py, later arg_groups/overrides.py and
  model_overrides/deepseek_v2.py) 64 where aiter's preshuffle paged-MQA kernel runs
  (``aiter_can_use_preshuffle_paged_mqa``: SGLANG_USE_AITER=1 and Triton >= 3.5.0 or
  AITER_ENABLE_AOT_GLUON_PA_MQA_LOGITS=1), 1 on the legacy path otherwise. CUDA forces 64 in
  every one of them;
- a DSA model's fp8 latent on ROCm: the plain fp8 row in every release read
  (``calculate_mla_kv_cache_dim``: the scaled layout only for ``torch.float8_e4m3fn``, while HIP's
  fp8 on CDNA 3 (MI300X, MI325X) is float8_e4m3fnuz; from 0.5.10 the HIP DSA backends are also
  named as raw-layout ones).

ROCm otherwise sizes the cache as CUDA does (0.5.23): page_size 1 by default (the aiter attention
backend forces none), mem_fraction_static by the same arithmetic (arg_groups/memory_hook.py; the
memory from rocminfo's pool, gpus.yaml's smi_mib), fp8 formats of one byte (e4m3fnuz).
"""

from __future__ import annotations

# The release a plain ``--engine sglang`` models, and the ones ``sglang@X.Y[.Z]`` accepts.
CURRENT = (0, 5, 23)
VERSIONS = ("0.5",)
# The oldest release whose rules were read (older 0.5 releases are modelled as it, said in a note).
OLDEST_READ = (0, 5, 8)
# The first release reserving the multimodal embedding cache out of the KV budget.
MM_RESERVATION = (0, 5, 18)
# The first release paging DSA models by 64 on ROCm (where aiter's preshuffle kernel runs).
ROCM_DSA_PRESHUFFLE = (0, 5, 12)

# model_config.py is_hybrid_swa_model, as model types (scripts/sglang_tables.py prints this table
# from SGLang's own function for every model type transformers registers): only these get the
# separate sliding-window pool. A config may also opt in with ``is_hybrid_swa: true``.
HYBRID_SWA_MODEL_TYPES = frozenset({
    "deepseek_v4", "diffusion_gemma", "gemma4", "gemma4_text", "gemma4_unified", "gpt_oss", "granite_swa",
    "granitemoe_swa", "laguna", "llama4", "mellum", "mimo_v2", "mimo_v2_flash", "muse_glimmer", "step3p7",
})  # fmt: skip

# model_config.py is_multimodal_model, as model types (same script): these reserve
# SGLANG_VLM_CACHE_SIZE_MB of the KV budget for the multimodal embedding cache.
MULTIMODAL_MODEL_TYPES = frozenset({
    "cohere2_vision", "cosmos3_edge", "diffusion_gemma", "ernie4_5_vl_moe", "gemma3", "gemma3n", "gemma4",
    "gemma4_unified", "glm4v", "glm4v_moe", "glm5_next", "glm_ocr", "glmasr", "lfm2_vl", "llama4", "llava",
    "mimo_v2", "minimax_m3_vl", "mistral3", "mllama", "muse_glimmer", "nemotron_h_omni", "paddleocr_vl",
    "qwen2_5_vl", "qwen2_audio", "qwen2_vl", "qwen3_5", "qwen3_5_moe", "qwen3_asr", "qwen3_vl", "qwen3_vl_moe",
    "qwen4_exp", "shieldgemma2", "step3p7", "voxtral",
})  # fmt: skip

# model_config.py ModelConfig.__init__: multimodal is off by default for these checkpoints (Gemma 3,
# Llama 4, Step3-VL, Inkling; MiMo-V2 without both vision and audio configs, which kvcalc does not
# read: taken as text-only), and on for a listed type or a config whose text model is nested.
MULTIMODAL_OFF_MODEL_TYPES = frozenset({"gemma3", "llama4", "step3_vl", "inkling", "mimo_v2"})

# srt/environ.py SGLANG_VLM_CACHE_SIZE_MB (default 100): MiB of the KV budget a multimodal model
# leaves for its embedding cache (kv_cache_configurator.py mm_runtime_reservation_gb).
VLM_CACHE_MIB = 100
# arg_groups/fields/schedule.py: swa_full_tokens_ratio's and mamba_full_memory_ratio's fallbacks.
SWA_FULL_TOKENS_RATIO = 0.8
MAMBA_FULL_MEMORY_RATIO = 0.9
# kv_cache_configurator.py MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO: state slots a running
# request may hold (radix cache on, no extra buffer).
MAMBA_SLOTS_PER_REQUEST = 3
# arg_groups/model_overrides/deepseek_v2.py: DSA models run with 64-token pages on CUDA (times the
# indexer's key pooling, 1 unless the config pools them), whatever --page-size says.
DSA_PAGE_SIZE = 64
# resolve_max_num_reqs: int(tokens / context_len x 512), clamped to [2048, 4096], at most tokens // 2.
REQUESTS_PER_CONTEXT = 512
REQUESTS_LOW, REQUESTS_HIGH = 2048, 4096


def version_text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def hybrid_swa(model_type: str) -> bool:
    """Whether SGLang gives this model type's sliding layers their own pool."""
    return model_type in HYBRID_SWA_MODEL_TYPES


def multimodal(model_type: str, nested_text: bool) -> bool:
    """Whether SGLang runs the checkpoint as multimodal (and reserves its embedding cache)."""
    if model_type in MULTIMODAL_OFF_MODEL_TYPES:
        return False
    return model_type in MULTIMODAL_MODEL_TYPES or nested_text
