"""The mlx-lm release whose rules kvcalc models, and the tables those rules read.

Every rule was read in mlx-lm 0.32.2 from PyPI (with mlx 0.32.4; files named by the first 16 hex
digits of their sha256, which ``mlx_probe.py`` prints beside every run) and confirmed by running
mlx-lm's own generate loop on the CPU (tests/engines/mlx/test_mlx_conformance.py):

- mlx_lm/models/cache.py (c96cb169fd5e0ec4): ``make_prompt_cache`` (a model's own ``make_cache``,
  else a KVCache per layer, or a RotatingKVCache(max_kv_size, keep=4) per layer under
  max_kv_size), the growth of every cache class (growth.py), ``QuantizedKVCache``'s layout;
- mlx_lm/generate.py (9d46803799f99d6f): ``generate_step`` (prefill_step_size 2048, kv_group_size 64,
  DEFAULT_QUANTIZED_KV_START 5000, ``maybe_quantize_kv_cache``);
- mlx_lm/models/ssm.py (485811a1dbc47555) and gated_delta.py (f69e837ea68641db): recurrent
  states kept in float32; deepseek_v32.py (c2140067fb3e35d5): the indexer's cache;
- mlx_lm/utils.py (2803ff8d2298b085): ``MODEL_REMAPPING`` and ``_get_classes`` (model_type -> module).

The tables below are what scripts/mlx_tables.py prints from that source.
"""

from __future__ import annotations

# The mlx-lm release the rules and tables were read from; the tests pin it (.ci/run).
RULES_VERSION = "0.32.2"

# The release a plain ``--engine mlx`` models, and the ones ``mlx@X.Y[.Z]`` accepts.
CURRENT = (0, 32, 2)
VERSIONS = ("0.32",)

# generate.py generate_step's defaults.
PREFILL_STEP = 2048
KV_GROUP_SIZE = 64
QUANTIZED_KV_START = 5000
# cache.py make_prompt_cache: RotatingKVCache(max_size=max_kv_size, keep=4).
MAX_KV_KEEP = 4
# mx.quantize: the bit widths and group sizes it takes.
KV_BITS = (2, 3, 4, 5, 6, 8)
KV_GROUP_SIZES = (32, 64, 128)

# utils.py MODEL_REMAPPING: model types mlx-lm builds with another type's module.
MODEL_REMAPPING = {
    "mistral": "llama", "llava": "mistral3", "phi-msft": "phixtral", "falcon_mamba": "mamba",
    "joyai_llm_flash": "deepseek_v3", "kimi_k2": "deepseek_v3", "qwen2_5_vl": "qwen2_vl", "minimax_m2": "minimax",
    "iquestcoder": "llama", "xverse": "llama", "gemma4_unified": "gemma4", "deepseek_v41_text": "deepseek_v41",
}  # fmt: skip

# Modules whose Model has no make_cache: make_prompt_cache gives every layer a KVCache (whatever
# windows the config names), or a RotatingKVCache of max_kv_size when one is asked for.
PLAIN_MODULES = frozenset({
    "Klear", "apertus", "bailing_moe", "bitnet", "cohere", "dbrx", "deepseek", "deepseek_v2", "deepseek_v3", "dots1",
    "ernie4_5", "ernie4_5_moe", "exaone", "gemma", "gemma2", "glm", "glm4", "glm4_moe", "glm4_moe_lite", "gpt2",
    "gpt_bigcode", "gpt_neox", "gptj", "granite", "granitemoe", "helium", "hunyuan", "hunyuan_v1_dense", "internlm2",
    "internlm3", "kimi_k25", "kimi_vl", "lille-130m", "llama4_text", "mimo", "minicpm", "minicpm3", "minimax",
    "mistral3", "mistral4", "mixtral", "nanochat", "nemotron", "olmo2", "olmoe", "openelm", "phi", "phi3",
    "phi3small", "phimoe", "phixtral", "pixtral", "plamo", "qwen", "qwen2", "qwen2_moe", "qwen2_vl", "qwen3",
    "qwen3_moe", "qwen3_vl", "qwen3_vl_moe", "seed_oss", "smollm3", "solar_open", "stablelm", "starcoder2", "talkie",
    "telechat3", "youtu_llm",
})  # fmt: skip

# Modules whose make_cache builds a RotatingKVCache(max_size=sliding_window) for sliding layers
# (gemma3n's language model too, through its wrapper).
WINDOWED_MODULES = frozenset({
    "afmoe", "baichuan_m1", "cohere2", "exaone4", "exaone_moe", "gear", "gemma3_text", "gemma3n", "gemma4_text",
    "gpt_oss", "iquestloopcoder", "laguna", "llama", "mellum", "mimo_v2_flash", "ministral3", "muse_glimmer",
    "muse_spark", "olmo3", "plamo3", "recurrent_gemma", "spark2_5", "step3p5",
})  # fmt: skip

# Modules whose make_cache keeps no window: KVCache, ArraysCache (states), CacheList, or
# Llama 4's ChunkedKVCache (CHUNKED_MODULES); qwen3_5, qwen3_5_moe and kimi_k3 through their
# language model.
OWN_CACHE_MODULES = frozenset({
    "afm7", "bailing_hybrid", "bailing_moe_linear", "bailing_moe_v3", "deepseek_v32", "falcon_h1", "glm_moe_dsa",
    "granitemoehybrid", "jamba", "kimi_k3", "kimi_linear", "lfm2", "lfm2_moe", "llama4", "longcat_flash",
    "longcat_flash_ngram", "mamba", "mamba2", "minimax_m3_vl", "nanbeige", "nemotron-nas", "nemotron_h",
    "olmo_hybrid", "plamo2", "qwen3_5", "qwen3_5_moe", "qwen3_next", "rwkv7",
})  # fmt: skip

# Multimodal wrappers whose make_cache is their language model's, in another module.
DELEGATING_MODULES = {"gemma3": "gemma3_text", "gemma4": "gemma4_text", "lfm2-vl": "lfm2"}

# Modules whose make_cache builds ChunkedKVCache(attention_chunk_size) for chunked layers.
CHUNKED_MODULES = frozenset({"llama4"})

# Modules that cache MLA as K and V expanded per query head (kv_b_proj applied before the cache);
# every other MLA module caches the latent (as keys) and the rope key (as values) of one head.
EXPANDED_MLA_MODULES = frozenset({"deepseek_v2", "minicpm3", "youtu_llm"})

# Modules whose make_cache puts a layer's caches in a CacheList, which has no to_quantized:
# maybe_quantize_kv_cache leaves them as they are.
CACHE_LIST_MODULES = frozenset({
    "baichuan_m1", "deepseek_v32", "falcon_h1", "glm_moe_dsa", "longcat_flash", "longcat_flash_ngram",
    "minimax_m3_vl",
})  # fmt: skip

# Modules with DeepSeek's sparse-attention indexer in every MLA layer (deepseek_v32.py's
# DeepseekV32Attention; glm_moe_dsa.py subclasses its model and reads no indexer_types).
INDEXER_EVERY_LAYER_MODULES = frozenset({"deepseek_v32", "glm_moe_dsa"})

# Modules whose recurrent state comes out of mlx-lm's ssm.py (Mamba-2) or gated_delta.py
# (gated delta rule) kernels, which keep it in float32 whatever the model dtype; every other
# state (Mamba-1's selective scan, short convs) is in the model dtype.
FP32_STATE_MODULES = frozenset({
    "bailing_moe_v3", "falcon_h1", "granitemoehybrid", "kimi_k3", "kimi_linear", "mamba2", "nemotron_h",
    "olmo_hybrid", "plamo2", "qwen3_5", "qwen3_5_moe", "qwen3_next",
})  # fmt: skip


def version_text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def module_for(model_type: str) -> str | None:
    """The mlx_lm.models module that builds ``model_type`` (utils.py _get_classes), its language
    model's for a multimodal wrapper; None when mlx-lm has none."""
    module = MODEL_REMAPPING.get(model_type, model_type)
    module = DELEGATING_MODULES.get(module, module)
    if module in PLAIN_MODULES or module in WINDOWED_MODULES or module in OWN_CACHE_MODULES:
        return module
    return None
