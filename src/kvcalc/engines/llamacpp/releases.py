"""The llama.cpp builds whose cache rules differ: which rule changed in which build (``--engine
llama.cpp@bNNNN``). llama.cpp tags every master commit ``bNNNN``; a rule's change is a merged PR, and
the exact build of each merge could not be read here, so each rule knows the builds on either side
that are evidenced (a published log or release page of that build, or the PR's merge date against
dated release tags) and refuses a build in between, naming the PR, rather than guess.

Dated tags used to place merges: b5531 is 2025-05-29 and b5602 2025-06-07 (release pages of
github.com/ggml-org/llama.cpp, mirrored at github.com/sbwww/llama.cpp/releases); b8390 shipped by
2026-03-17 (node-llama-cpp 3.18.1, "Shipped with llama.cpp release b8390").
"""

from __future__ import annotations

# The build a plain ``--engine llama.cpp`` models: 0c1e570, the llama.cpp llama-cpp-python 0.3.36
# vendors, whose builds print "build: 11312 (0c1e57098)" (its Docker image and source builds of
# that commit, public logs of 2026-10).
CURRENT = 11312
# The oldest build whose rules were read (a published DeepSeek log of b4905: full per-head K and V).
OLDEST = 4905
# The builds the registry lists (``kvcalc engines``): the ones each rule set was read at.
# (the plugin, engines/llamacpp/__init__.py BUILDS, lists them without importing this module)

# DeepSeek's MLA cache (PR #12801, merged 2025-04-15, src/llama-kv-cache.cpp): before it, full
# per-head K (n_head x (qk_nope + qk_rope)) and V (n_head x v_head_dim) rows; from it, the latent
# (kv_lora_rank + qk_rope) as K and the latent again as V (n_embd_head_v = kv_lora_rank). Evidenced:
# b4905 full, b5331 latent + V (the logs); builds in between refused.
MLA_FULL_UNTIL = 4905
MLA_LATENT_FROM = 5331
# The V-less cache (PR #19067, merged 2026-01-24: "kv-cache : support V-less cache", K only for
# MLA): V rows until at least b5602 (2025-06-07), gone by b8390 (2026-03-17).
MLA_V_UNTIL = 5602
MLA_V_LESS_FROM = 8390

# Cell padding: llama_kv_cache_unified::get_padding returned ``flash_attn ? 256 : 32`` from PR #7257
# (2024-05-13) until PR #16812 (2025-10-28) removed the padding and PR #17046 (2025-11-06) made it
# 256 always. Flash attention was off unless -fa was given in those early builds (common/common.h
# flash_attn = false), so 32 is their default. 32 known through b5602 (2025-06-07), 256 by b8164: a
# published b8164 log (tests/fixtures/logs/llamacpp/b8164-gpt-oss-20b-swa-one-seq.log) keeps 768
# sliding cells for gpt-oss-20b, pad(128 + 512, 256); 32-cell padding would give 640.
PAD_32_UNTIL = 5602
PAD_256_FROM = 8164

# The sliding-window cache (PR #13194, "kv-cache : add SWA support", merged 2025-05, with
# --swa-full): before it sliding layers held n_ctx cells like full ones (b4905). Its first sizing,
# min(size_base, GGML_PAD(n_swa x n_seq_max + n_batch, n_pad)) (src/llama-kv-cache-unified.cpp of
# that time), later took n_ubatch, then (PR #17046) GGML_PAD(min(size_base, n_swa x (unified ?
# n_seq_max : 1) + n_ubatch), 256), today's rule, there by b8164 (the same log's 768 cells). Builds
# between are refused.
SWA_FULL_UNTIL = 4905
SWA_CACHE_FROM = 8164

# One KV stream per sequence (llama_kv_cache's n_stream, with -kvu / --kv-unified to share one):
# before it one unified cache of n_ctx cells for all sequences, as at b5602. The streams
# (seq_to_stream) arrived in b5913 (github.com/ggml-org/llama.cpp/issues/14847: "Regression in unified
# KV cache appears after llama.cpp release b5912 in b5913"); one stream per sequence is the default by
# b8164 (its log prints "kv_unified = false" and "1/1 seqs", sequences over streams).
UNIFIED_UNTIL = 5602
STREAMS_FROM = 8164


def unknown(build: int, last_before: int, first_after: int) -> bool:
    """Whether ``build`` lies strictly between the last build known before a change and the first
    known after it (kvcalc cannot tell which side it is on)."""
    return last_before < build < first_after
