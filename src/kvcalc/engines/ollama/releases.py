"""What each Ollama release runs, as data read from github.com/ollama/ollama's tags: the llama.cpp
build it bundles, its default context and which models get flash attention by default.

The llama.cpp build: ``Makefile.sync``'s ``FETCH_HEAD`` (the commit vendored under llama/llama.cpp,
also llama/build-info.cpp's LLAMA_COMMIT) up to v0.24.0, then the ``LLAMA_CPP_VERSION`` file (a
llama.cpp release tag, bNNNN) from v0.30.0, when Ollama began launching llama-server. Each row is
the first release that bundles that build (older releases than v0.5.8 are not listed).

Where llama.cpp's own rules by build will be wired (after helper A's ``llama.cpp@bNNNN`` lands):
``bundled_llama_cpp`` gives the build; ``rules.Ollama.configure`` is the one place that should
configure llama.cpp's rules at that build (marked ``LLAMA_CPP_RULES_AT_BUILD`` there).
"""

from __future__ import annotations

Release = tuple[int, int, int]

LLAMA_CPP_BUILDS: tuple[tuple[Release, str], ...] = (
    ((0, 5, 8), "46e3556e01b824e52395fb050b29804b6cff2a7c"),
    ((0, 5, 13), "d7cfe1ffe0f435d0048a6058d529daf76e072d9c"),
    ((0, 6, 6), "71e90e8813f90097701e62f7fce137d96ddf41e2"),
    ((0, 6, 7), "2016f07bd106c73699ecbaace80f55db5ed95dac"),
    ((0, 6, 8), "e1e8e0991ffd9e99a445c6812bb519d5bac9f4b5"),
    ((0, 7, 0), "de4c07f93783a1a96456a44dc16b9db538ee1618"),
    ((0, 11, 5), "e54d41befcc1575f4c898c5ff4ef43970cead75f"),
    ((0, 12, 4), "364a7a6d4a786e98947c8a90430ea581213c0ba9"),
    ((0, 12, 6), "7049736b2dd9011bf819e298b844ebbc4b5afdc9"),
    ((0, 12, 11), "3cfa9c3f125763305b4226bc032f1954f08990dc"),
    ((0, 13, 2), "7f8ef50cce40e3e7e4526a3696cb45658190e69a"),
    ((0, 13, 3), "17f7f4baad8b3a716ee139da7bb56ae984e8c0fa"),
    ((0, 13, 5), "ec98e2002"),
    ((0, 30, 0), "b9452"),
    ((0, 30, 1), "b9479"),
    ((0, 30, 4), "b9493"),
    ((0, 30, 5), "b9509"),
    ((0, 30, 9), "b9626"),
    ((0, 30, 10), "b9672"),
    ((0, 30, 11), "b9781"),
    ((0, 31, 0), "b9840"),
    ((0, 31, 2), "b9888"),
    ((0, 32, 2), "b10069"),
    ((0, 32, 3), "b10091"),
    ((0, 32, 6), "b10242"),
    ((0, 32, 8), "b10353"),
    ((0, 32, 10), "b10380"),
    ((0, 32, 14), "b10434"),
    ((0, 32, 15), "b10488"),
)

# v0.30.0 replaced the cgo runner (runner/llamarunner, and Ollama's Go engine runner/ollamarunner)
# with llama-server (llm/llama_server.go: "-c", NumCtx*numParallel, "-np", numParallel).
LLAMA_SERVER = (0, 30, 0)
# The vendored llama.cpp has per-sequence KV streams (llama_context_params.kv_unified, default false
# in llama_context_default_params) from the build v0.11.5 bundles (e54d41bef); before, one cache.
STREAMS = (0, 11, 0)
# Cells padded to 256 whatever flash attention says from the build v0.13 bundles (ec98e2002:
# src/llama-context.cpp ``cparams.n_ctx = GGML_PAD(cparams.n_ctx, 256)``); before, the vendored
# src/llama-kv-cache*.cpp ``get_padding``: ``cparams.flash_attn ? 256u : 32u``.
PAD_256 = (0, 13, 0)
# llm/server.go v0.12.5: ``fa := envconfig.FlashAttention(f.FlashAttention())``: flash attention on
# by default for the architectures fs/ggml/ggml.go's FlashAttention() lists; before, off unless
# OLLAMA_FLASH_ATTENTION=1 (envconfig/config.go ``Bool("OLLAMA_FLASH_ATTENTION")``).
FA_BY_MODEL = (0, 12, 5)
# fs/ggml/ggml.go FlashAttention() at v0.12.5, and at v0.24.0 (used for v0.13 .. v0.29: the list
# only grew between them; releases in between may list fewer).
FA_MODELS_0_12 = frozenset({"gptoss", "gpt-oss", "qwen3", "qwen3moe"})
FA_MODELS_0_24 = frozenset({
    "bert", "gemma3", "gemma4", "glm4moelite", "glmocr", "gptoss", "gpt-oss", "lfm2", "lfm2moe", "mistral3",
    "nemotron_h", "nemotron_h_moe", "nemotron_h_omni", "olmo3", "qwen3", "qwen3moe", "qwen35", "qwen35moe",
    "qwen3next", "qwen3vl", "qwen3vlmoe",
})  # fmt: skip
# OLLAMA_CONTEXT_LENGTH's default (envconfig/config.go): 2048 to v0.6.6, 4096 from v0.6.7; from
# v0.15.5 it is 0 and server/routes.go picks num_ctx by the GPUs' total memory (less
# OLLAMA_GPU_OVERHEAD): 262144 from 47 GiB, 32768 from 23 GiB, else 4096.
CONTEXT_4096 = (0, 6, 7)
# llm/server.go NewLlamaServer caps num_ctx at the model's trained context from v0.9.3 ("avoid context
# overflow", ollama/ollama #11175): ``if opts.NumCtx > int(trainCtx) && trainCtx > 0``.
CAP_TRAINED = (0, 9, 3)
VRAM_TIERS = (0, 15, 5)
# server/sched.go forces one slot (``numParallel = 1``, "model architecture does not currently
# support parallel requests", ollama/ollama #4165) whatever OLLAMA_NUM_PARALLEL says, for the GGUF
# architectures (model.Config.ModelFamily) it lists: mllama in every release listed here, then
# (the first release whose list has each) qwen3vl and qwen3vlmoe from v0.12.7; qwen3next, lfm2
# and lfm2moe from v0.15.5; qwen35, qwen35moe, nemotron_h and nemotron_h_moe from v0.17.1;
# nemotron_h_omni from v0.22.0 (unchanged through v0.32.15).
ONE_SLOT: tuple[tuple[Release, frozenset[str]], ...] = (
    ((0, 0, 0), frozenset({"mllama"})),
    ((0, 12, 7), frozenset({"qwen3vl", "qwen3vlmoe"})),
    ((0, 15, 5), frozenset({"qwen3next", "lfm2", "lfm2moe"})),
    ((0, 17, 1), frozenset({"qwen35", "qwen35moe", "nemotron_h", "nemotron_h_moe"})),
    ((0, 22, 0), frozenset({"nemotron_h_omni"})),
)
GIB = 1 << 30
TIERS = ((47 * GIB, 262144), (23 * GIB, 32768), (0, 4096))


def bundled_llama_cpp(release: Release) -> str | None:
    """The llama.cpp build (commit, or bNNNN tag) an Ollama release bundles; None before v0.5.8."""
    found = None
    for first, build in LLAMA_CPP_BUILDS:
        if release >= first:
            found = build
    return found


def default_num_ctx(release: Release, gpu_memory: int | None) -> tuple[int | None, str]:
    """num_ctx when neither the request, the Modelfile nor OLLAMA_CONTEXT_LENGTH names one, and why;
    None where it depends on GPU memory that was not given (v0.15.5 on). Ollama then clamps it to
    the model's trained context (llm/server.go NewLlamaServer: ``opts.NumCtx = int(trainCtx)``)."""
    tag = ".".join(map(str, release))
    if release < CONTEXT_4096:
        return 2048, f"Ollama {tag} defaults num_ctx to 2048 (envconfig/config.go OLLAMA_CONTEXT_LENGTH)"
    if release < VRAM_TIERS:
        return 4096, f"Ollama {tag} defaults num_ctx to 4096 (envconfig/config.go OLLAMA_CONTEXT_LENGTH)"
    if gpu_memory is None:
        return None, f"Ollama {tag} defaults num_ctx by total GPU memory: 4096, 32768 from 23 GiB, 262144 from 47 GiB"
    tokens = next(n for floor, n in TIERS if gpu_memory >= floor)
    return (
        tokens,
        f"Ollama {tag} defaults num_ctx to {tokens} for {gpu_memory / GIB:.3g} GiB of GPU memory "
        "(server/routes.go VRAM tiers)",
    )


def one_slot(release: Release, architecture: str) -> bool:
    """Whether this release runs a model of this GGUF architecture with one slot (ONE_SLOT)."""
    return any(release >= first and architecture in names for first, names in ONE_SLOT)
