"""llama.cpp's architectures, one record each: everything kvcalc knows about them, in one place.

Three modules read this table: the GGUF reader (kvcalc.inputs.gguf: which Hugging Face rules read a file
of each architecture, and which of its own mappings turns the file's metadata into a config), the
llama.cpp engine (kvcalc.engines.llamacpp: which sliding windows llama.cpp keeps or drops, Llama 4's
chunk, T5's cross-attention) and the llama.cpp probe (kvcalc.engines.llamacpp.probe: the architecture
convert_hf_to_gguf.py writes for an HF model_type, and what it writes). Each architecture's name is
spelled here and in none of them (tests/engines/llamacpp/test_architectures.py checks it).

The facts are those of llama.cpp 0c1e570 (the copy llama-cpp-python 0.3.36 vendors) unless a
comment names another commit: its src/llama-arch.cpp names, src/models/<arch>.cpp load_arch_hparams,
src/llama-model.cpp create_memory, and the converters of convert_hf_to_gguf.py (conversion/*.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Literal


class Layout(Enum):
    """Which of the GGUF reader's mappings turns an architecture's metadata into a config
    (kvcalc.inputs.gguf.config: one handler per layout)."""

    ATTENTION = auto()  # TextModel's keys: head_count(_kv), key/value_length, the window keys
    SSM = auto()  # no attention (Mamba, Mamba-2): head_count 0, the ssm.* keys
    HYBRID = auto()  # per-layer head_count_kv, 0 on the recurrent layers (layer_types below)
    NEMOTRON_H = auto()  # per-layer head_count_kv and feed_forward_length: hybrid_override_pattern
    NEMOTRON_H_MOE = auto()  # the same with MoE layers ('E') where Nemotron-H has MLP layers ('-')
    GATED_DELTA_NET = auto()  # attention, then the gated delta net's ssm.* keys
    FALCON_H1 = auto()  # attention and a Mamba-2 mixer in every layer
    GEMMA3N = auto()  # attention, then attention.shared_kv_layers
    MINIMAX_M3 = auto()  # attention, then the sparse indexer past the dense lead
    MLA = auto()  # multi-head latent attention (kv_lora_rank, *_mla)
    SPARSE_MLA = auto()  # MLA plus a sparse-attention indexer key cache
    KIMI_LINEAR = auto()  # MLA layers and Kimi Delta Attention layers
    T5 = auto()  # encoder-decoder: the decoder's self-attention
    DEEPSEEK4 = auto()  # a K=V window in every layer, compressed CSA / HCA layers
    GEMMA4 = auto()  # per-layer heads and head dims (full and sliding layers differ)
    MIMO2 = auto()  # per-layer KV heads, full and sliding geometry apart
    DECI = auto()  # per-layer heads and KV heads (attention, linear and no-op blocks)


class Window(Enum):
    """What llama.cpp does with a model's sliding window."""

    KEPT = auto()  # load_arch_hparams sets swa_type STANDARD: the window applies
    DROPPED = auto()  # every layer keeps the whole context though the HF config has a window
    IGNORED = auto()  # no swa_type, and the converters write no window: a GGUF's window keys are ignored


class Ssm(Enum):
    """The recurrent state of an architecture: the ssm.* (shortconv.*, kda.*) keys its converter
    writes and the rule of llama_hparams::n_embd_r / n_embd_s (src/llama-hparams.cpp) sizing it."""

    MAMBA1 = auto()  # conversion/mamba.py MambaModel @ 32e9e044: no ssm.group_count (n_group 0)
    MAMBA2 = auto()  # conversion/mamba.py Mamba2Model @ 32e9e044: ssm.group_count; time_step_rank the heads
    GATED_DELTA_NET = auto()  # conversion/qwen.py Qwen3NextModel @ 03173d5e: Mamba-2's keys, the delta rule
    SHORTCONV = auto()  # conversion/lfm2.py LFM2Model @ 051139f5: shortconv.l_cache
    KDA = auto()  # conversion/kimi_linear.py KimiLinearModel: ssm.conv_kernel and kda.head_dim

    @property
    def keys(self) -> tuple[str, ...]:
        """The state keys (under <arch>.) the converter writes and the reader requires."""
        if self is Ssm.SHORTCONV:
            return ("shortconv.l_cache",)
        if self is Ssm.KDA:
            return ("ssm.conv_kernel", "kda.head_dim")
        return _SSM_KEYS if self is Ssm.MAMBA1 else (*_SSM_KEYS, "ssm.group_count")

    @property
    def mamba_rows(self) -> bool:
        """Whether n_embd_r / n_embd_s take their Mamba case: R (d_conv - 1) x (d_inner + 2 x
        n_group x d_state), S d_state x d_inner (lfm2's short conv keeps R n_embd x (l_cache - 1)
        and no S; Kimi's KDA R 3 x (d_conv - 1) x n_head x head_dim, S head_dim^2 x n_head)."""
        return self in (Ssm.MAMBA1, Ssm.MAMBA2, Ssm.GATED_DELTA_NET)


_SSM_KEYS = ("ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank")


class Indexer(Enum):
    """Which layers a sparse-attention architecture's indexer key cache holds (create_memory:
    llama_kv_cache_dsa, src/llama-kv-cache-dsa.cpp; llama_kv_cache_msa, src/llama-kv-cache-msa.cpp)."""

    EVERY_LAYER = auto()  # every trunk layer
    TYPED = auto()  # the is_indexer_full layers: attention.indexer.types, else a default by context length
    PAST_DENSE_LEAD = auto()  # the layers il >= n_layer_dense_lead (leading_dense_block_count)


@dataclass(frozen=True)
class Architecture:
    """One llama.cpp architecture (LLM_ARCH_*, src/llama-arch.cpp) as kvcalc knows it."""

    # The architecture's name: a GGUF's general.architecture and the prefix of its keys.
    name: str
    # The HF model_type whose kvcalc rules read a GGUF of this architecture (None: refused, see refused).
    reads_as: str | None
    # HF model types convert_hf_to_gguf.py converts to this architecture, each in one record only:
    # what the engine and the probe look an HF model up by (the converse of reads_as).
    hf_types: tuple[str, ...] = ()
    layout: Layout = Layout.ATTENTION
    # What llama.cpp does with a sliding window (None: not checked against src/models/).
    window: Window | None = None
    # Window.DROPPED: (HF model type, why llama.cpp runs it with every token in every layer).
    dropped_windows: tuple[tuple[str, str], ...] = ()
    # Chunked attention: the chunk llama.cpp fixes whatever the config says.
    chunk: int | None = None
    # llama.cpp applies the window only to models of this many layers.
    swa_layers: int | None = None
    # kvcalc's rules for reads_as derive the sliding layers by pattern: a GGUF must give the window.
    window_required: bool = False
    # reads_as's config says its window with use_sliding_window (Qwen2 / Qwen3).
    use_sliding_window: bool = False
    # convert_hf_to_gguf.py writes attention.sliding_window for the architecture.
    writes_window: bool = False
    # How reads_as's config counts KV heads where TextModel's head_count_kv does not say it all:
    # "multi_query" (GPTBigCodeConfig's one K/V head), "num_kv_heads" (Falcon's new decoder).
    kv_heads_field: Literal["multi_query", "num_kv_heads"] | None = None
    ssm: Ssm | None = None
    # Layout.HYBRID: reads_as's layer_types names of (a recurrent layer, an attention layer).
    layer_types: tuple[str, str] | None = None
    indexer: Indexer | None = None
    # A plain context skips the NextN (MTP) blocks (nextn_predict_layers): neither loaded nor cached.
    # Converters that keep a model's multi-token-prediction layers (conversion/glm.py Glm4MoeModel, qwen.py's
    # MTP mixin, deepseek.py, mimo.py, ...) count them in block_count and write nextn_predict_layers.
    # llama.cpp 0c1e570 runs the first n_layer() = block_count - nextn_predict_layers blocks
    # (src/llama-hparams.cpp n_layer()); a plain context's memory filters the rest out (src/llama-model.cpp
    # create_memory: "filter = il < n_layer()" for attention-only models, the same bound in the hybrids'
    # filter_attn/filter_recr), and these architectures create every tensor of those blocks with
    # TENSOR_SKIP unless the model is loaded for MTP drafting (llama_model_params.load_mtp, set by
    # --spec-type draft-mtp): llama-model-loader.cpp create_tensor then logs "model has unused tensor ...
    # -- ignoring" and takes its bytes off the model buffer. Checked on a real llama.cpp 0c1e570 load
    # (tests/inputs/gguf/test_weights.py): "layer 2: filtered".
    skips_nextn: bool = False
    # Cross-attention K/V is recomputed from the encoder output at every decode: no cache.
    recomputes_cross_attention: bool = False
    # The graph projects Q (and the attention output) from n_embd to n_embd (src/models/phi3.cpp wo
    # {n_embd, n_embd}; qwen2, starcoder2, cohere2 likewise): n_embd must be n_head x head_dim.
    full_width: bool = False
    # The llama.cpp probe writes this architecture from kvcalc's layers (kvcalc.engines.llamacpp.probe.gguf_plan).
    probe: bool = False
    # Keys (under <arch>.) the probe writes beyond the cache geometry so that load_arch_hparams
    # accepts the model; none sizes a cache (stand-ins: a tiny MoE, or a hybrid's 0 experts).
    probe_keys: tuple[str, ...] = ()
    # The loader asserts ssm.inner_size = 2 x embedding_length.
    inner_twice_embd: bool = False
    # Keys (under <arch>.) the reader's mapping reads beyond every architecture's (the rest of
    # attention.*, ssm.* ... is handed to the guard as unread fields).
    reads: tuple[str, ...] = ()
    # (config field, the GGUF keys under <arch>. it is derived from) where this architecture's
    # mapping derives a field from other keys than the common ones (messages name those keys).
    field_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Why kvcalc refuses a GGUF of this architecture (one line), for one it knows of and cannot read.
    refused: str | None = None

    def dropped_why(self, model_type: str) -> str | None:
        """Why llama.cpp drops ``model_type``'s sliding window, or None where it does not."""
        return dict(self.dropped_windows).get(model_type)

    def keys_of(self, config_field: str) -> tuple[str, ...] | None:
        """The GGUF keys this architecture's mapping derives ``config_field`` from, where they are its own."""
        return dict(self.field_keys).get(config_field)


# --- the table ---------------------------------------------------------------------------------------------

# The indexer keys of the sparse-attention architectures: queries and top-k, compute only.
_INDEXER_KEYS = ("attention.indexer.head_count", "attention.indexer.key_length", "attention.indexer.top_k")
# The gated delta nets' attention layers: attention.recurrent_layers, else full_attention_interval.
_DELTA_NET_LAYERS = ("attention.recurrent_layers", "full_attention_interval")
_DELTA_NET_FIELDS = (("layer_types", ("attention.recurrent_layers",)),)
_HYBRID_FIELDS = (("layer_types", ("attention.head_count_kv",)),)
# The loaders of the MoE architectures the probe builds require the expert counts and width.
_EXPERTS = ("expert_count", "expert_used_count", "expert_feed_forward_length")


def _no_window(model_type: str, where: str) -> tuple[str, str]:
    return model_type, f"{where} reads no sliding window"


def _as_llama(model_type: str, hf_class: str) -> tuple[str, str]:
    return model_type, f"{hf_class} converts as LlamaModel (conversion/llama.py), which writes no sliding window"


ARCHITECTURES: tuple[Architecture, ...] = (
    # Windows llama.cpp drops: the architecture convert_hf_to_gguf.py (conversion/__init__.py) converts
    # the model type to, and why it keeps every token (Mistral and Mixtral convert to llama and read as Llama).
    Architecture(
        "llama", "llama", ("llama", "mistral", "mixtral"), window=Window.DROPPED, probe=True,
        dropped_windows=(_as_llama("mistral", "MistralForCausalLM"), _as_llama("mixtral", "MixtralForCausalLM")),
    ),
    Architecture(
        "qwen2", "qwen2", ("qwen2",), window=Window.DROPPED, use_sliding_window=True, full_width=True, probe=True,
        dropped_windows=(_no_window("qwen2", "src/models/qwen2.cpp"),),
    ),
    Architecture(
        "qwen2moe", "qwen2_moe", ("qwen2_moe",), window=Window.DROPPED, use_sliding_window=True,
        dropped_windows=(_no_window("qwen2_moe", "src/models/qwen2moe.cpp"),),
    ),
    Architecture(
        "qwen3", "qwen3", ("qwen3",), window=Window.DROPPED, use_sliding_window=True, full_width=True, probe=True,
        dropped_windows=(_no_window("qwen3", "src/models/qwen3.cpp"),),
    ),
    Architecture(
        "qwen3moe", "qwen3_moe", ("qwen3_moe",), window=Window.DROPPED, use_sliding_window=True,
        dropped_windows=(_no_window("qwen3_moe", "src/models/qwen3moe.cpp"),),
    ),
    Architecture(
        "starcoder2", "starcoder2", ("starcoder2",), window=Window.DROPPED, full_width=True, probe=True,
        dropped_windows=(_no_window("starcoder2", "src/models/starcoder2.cpp"),),
    ),
    # conversion/phi.py writes the window; src/models/phi3.cpp disables it.
    Architecture(
        "phi3", "phi3", ("phi3",), window=Window.DROPPED, writes_window=True, full_width=True, probe=True,
        dropped_windows=(("phi3", "src/models/phi3.cpp sets n_swa = 0: 'Phi SWA is currently disabled' (PR #13676)"),),
    ),
    # Windows llama.cpp keeps (src/models/<arch>.cpp sets swa_type STANDARD); kvcalc's rules for the
    # first four derive their sliding layers by pattern (configs._layer_kinds) and need the window.
    Architecture("gemma2", "gemma2", ("gemma2",), window=Window.KEPT, window_required=True, writes_window=True,
                 probe=True),
    Architecture("gemma3", "gemma3_text", ("gemma3_text", "gemma3"), window=Window.KEPT, window_required=True,
                 writes_window=True, probe=True),
    # Cohere 2's loader requires its logit scale.
    Architecture("cohere2", "cohere2", ("cohere2",), window=Window.KEPT, window_required=True, writes_window=True,
                 full_width=True, probe=True, probe_keys=("logit_scale",)),
    Architecture("gpt-oss", "gpt_oss", ("gpt_oss",), window=Window.KEPT, window_required=True, writes_window=True,
                 probe=True, probe_keys=_EXPERTS),
    # src/models/llama4.cpp load_arch_hparams: ``hparams.n_swa = 8192`` for the chunked layers, whatever
    # attention_chunk_size the config gives (convert_hf_to_gguf writes none), on three layers in four
    # (its set_swa_pattern(4)), none when sliding_window is 0; conversion/llama.py Llama4Model writes no
    # window, 0 when every layer is full. Its loader requires the MoE interleave.
    Architecture("llama4", "llama4_text", ("llama4_text", "llama4"), chunk=8192, probe=True,
                 probe_keys=(*_EXPERTS, "interleave_moe_layer_step")),
    # MLA (conversion/deepseek.py); the probe gives it a dense lead of every layer.
    Architecture(
        "deepseek2", "deepseek_v3", ("deepseek_v3", "deepseek_v2"), layout=Layout.MLA, skips_nextn=True, probe=True,
        probe_keys=(*_EXPERTS, "leading_dense_block_count", "expert_shared_count"),
    ),
    # Plain attention, no window, head dim n_embd / n_head unless key_length says otherwise (the
    # converters: conversion/falcon.py @ 5535795b, gemma.py @ 2bbcf7fc, phi.py Phi2Model @ 051139f5,
    # gpt2.py @ 5535795b, starcoder.py @ 5535795b, command_r.py CommandR2Model @ 00487aad, olmo.py
    # Olmo2Model @ 051139f5 (OLMo 3: the window and its per-layer pattern), exaone.py ExaoneModel @
    # 051139f5, glm.py Glm4Model and Glm4MoeModel @ 7bca1fd9); tests/inputs/gguf/test_config.py.
    # Grouped K/V heads exist only in Falcon's new_decoder_architecture (Falcon-40B/180B; conversion/falcon.py
    # writes its num_kv_heads); GPTBigCodeConfig defaults to multi_query=True (one K/V head).
    Architecture("falcon", "falcon", ("falcon",), kv_heads_field="num_kv_heads"),
    Architecture("gemma", "gemma", ("gemma",)),
    Architecture("phi2", "phi", ("phi",)),
    Architecture("gpt2", "gpt2", ("gpt2",)),
    Architecture("starcoder", "gpt_bigcode", ("gpt_bigcode",), kv_heads_field="multi_query"),
    Architecture("command-r", "cohere", ("cohere",)),
    Architecture("olmo2", "olmo2", ("olmo2",)),
    Architecture("exaone", "exaone", ("exaone",)),
    Architecture("glm4", "glm4", ("glm4",), skips_nextn=True),
    Architecture("glm4moe", "glm4_moe", ("glm4_moe",), skips_nextn=True),
    # Recurrent and hybrid architectures (ssm.* / shortconv.* keys). What convert_hf_to_gguf.py writes
    # (ggml-org/llama.cpp conversion/, read at the commits named):
    # - mamba (conversion/mamba.py MambaModel @ 32e9e044): embedding_length d_model, head_count 0,
    #   ssm.conv_kernel d_conv, ssm.inner_size d_inner (asserted 2 x d_model), ssm.state_size d_state,
    #   ssm.time_step_rank dt_rank.
    # - mamba2 (conversion/mamba.py Mamba2Model @ 32e9e044): the same plus ssm.group_count n_groups;
    #   ssm.time_step_rank is the number of SSM heads, d_inner / head_dim.
    # - granitehybrid (conversion/granite.py GraniteHybridModel @ 010f22d8, GraniteMoeHybrid and Bamba):
    #   ssm.conv_kernel mamba_d_conv, ssm.state_size mamba_d_state, ssm.group_count mamba_n_groups,
    #   ssm.inner_size mamba_expand x hidden_size, ssm.time_step_rank mamba_n_heads, and
    #   attention.head_count_kv per layer: the KV heads on attention layers, 0 on Mamba-2 layers.
    # - jamba (conversion/jamba.py @ 7bca1fd9): Mamba-1 layers; ssm.inner_size mamba_expand x
    #   hidden_size, ssm.conv_kernel, ssm.state_size, ssm.time_step_rank mamba_dt_rank, and the per-layer
    #   head_count_kv (0 off the attention period).
    # - lfm2 (conversion/lfm2.py LFM2Model @ 051139f5): shortconv.l_cache conv_L_cache and the
    #   per-layer head_count_kv (0 on "conv" layers).
    # - lfm2moe (conversion/lfm2.py LFM2MoeModel @ 0c1e570): lfm2's keys (head_count_kv 0 off the
    #   "full_attention" layers, shortconv.l_cache) plus expert widths; src/models/lfm2moe.cpp makes the
    #   layers of head_count_kv 0 recurrent, sized as lfm2's.
    # - qwen3next (conversion/qwen.py Qwen3NextModel @ 03173d5e), nemotron_h (conversion/nemotron.py
    #   NemotronHModel @ 7bca1fd9), falcon-h1 (conversion/falcon_h1.py FalconH1Model @ 7bca1fd9), and
    #   qwen35 / qwen35moe, kimi-linear, nemotron_h_moe: see their mappings in kvcalc.inputs.gguf.
    # llama.cpp 0c1e570 puts K/V exactly on the hybrids' layers of non-zero head_count_kv and recurrent
    # state on the others (its context logs which layers each memory holds: tests/inputs/gguf/test_recurrent.py),
    # f32 per sequence. src/models/mamba.cpp and jamba.cpp require d_inner = 2 x n_embd, as
    # src/models/granite-hybrid.cpp asserts; the probe gives Jamba and Granite 0 experts.
    Architecture("mamba", "mamba", ("mamba",), layout=Layout.SSM, ssm=Ssm.MAMBA1, inner_twice_embd=True, probe=True,
                 field_keys=(("intermediate_size", ("ssm.inner_size",)),)),
    Architecture(
        "mamba2", "mamba2", ("mamba2",), layout=Layout.SSM, ssm=Ssm.MAMBA2, probe=True,
        field_keys=(("intermediate_size", ("ssm.inner_size",)), ("head_dim", ("ssm.inner_size", "ssm.time_step_rank"))),
    ),
    Architecture("granitehybrid", "granitemoehybrid", ("granitemoehybrid",), layout=Layout.HYBRID, ssm=Ssm.MAMBA2,
                 layer_types=("mamba", "attention"), inner_twice_embd=True, probe=True,
                 probe_keys=("expert_count", "expert_used_count"), field_keys=_HYBRID_FIELDS),
    Architecture("jamba", "jamba", ("jamba",), layout=Layout.HYBRID, ssm=Ssm.MAMBA1,
                 layer_types=("mamba", "full_attention"), inner_twice_embd=True, probe=True,
                 probe_keys=("expert_count", "expert_used_count"), field_keys=_HYBRID_FIELDS),
    Architecture("lfm2", "lfm2", ("lfm2",), layout=Layout.HYBRID, ssm=Ssm.SHORTCONV,
                 layer_types=("conv", "full_attention"), probe=True, field_keys=_HYBRID_FIELDS),
    Architecture("qwen3next", "qwen3_next", ("qwen3_next",), layout=Layout.GATED_DELTA_NET, ssm=Ssm.GATED_DELTA_NET,
                 skips_nextn=True, probe=True, reads=_DELTA_NET_LAYERS, field_keys=_DELTA_NET_FIELDS),
    Architecture("nemotron_h", "nemotron_h", ("nemotron_h",), layout=Layout.NEMOTRON_H, ssm=Ssm.MAMBA2,
                 skips_nextn=True, probe=True),
    Architecture("falcon-h1", "falcon_h1", ("falcon_h1",), layout=Layout.FALCON_H1, ssm=Ssm.MAMBA2, probe=True),
    # src/models/gemma3n.cpp: sliding layers; the last layers reuse earlier layers' K/V.
    Architecture("gemma3n", "gemma3n_text", ("gemma3n_text", "gemma3n"), layout=Layout.GEMMA3N, window=Window.KEPT,
                 reads=("attention.shared_kv_layers",)),
    # More hybrids: gated delta net + attention, MLA + Kimi Delta Attention, short convs + MoE,
    # Nemotron-H with MoE layers (whose HF model_type is nemotron_h too: the probe writes nemotron_h).
    Architecture("qwen35", "qwen3_5_text", ("qwen3_5_text",), layout=Layout.GATED_DELTA_NET, ssm=Ssm.GATED_DELTA_NET,
                 skips_nextn=True, reads=_DELTA_NET_LAYERS, field_keys=_DELTA_NET_FIELDS),
    Architecture(
        "qwen35moe", "qwen3_5_moe_text", ("qwen3_5_moe_text",), layout=Layout.GATED_DELTA_NET,
        ssm=Ssm.GATED_DELTA_NET, skips_nextn=True, reads=_DELTA_NET_LAYERS, field_keys=_DELTA_NET_FIELDS,
    ),
    Architecture("kimi-linear", "kimi_linear", ("kimi_linear",), layout=Layout.KIMI_LINEAR, ssm=Ssm.KDA),
    Architecture("lfm2moe", "lfm2_moe", ("lfm2_moe",), layout=Layout.HYBRID, ssm=Ssm.SHORTCONV,
                 layer_types=("conv", "full_attention"), field_keys=_HYBRID_FIELDS),
    Architecture("nemotron_h_moe", "nemotron_h", (), layout=Layout.NEMOTRON_H_MOE, ssm=Ssm.MAMBA2, skips_nextn=True),
    # Attention with per-layer geometry, mapped by their own handlers. gemma4 and mimo2 read
    # key_length_swa / value_length_swa; mimo2's attention.value_scale scales V before it is cached: no
    # size (MiMoV2FlashConfig attention_value_scale).
    Architecture(
        "gemma4", "gemma4_text", ("gemma4_text", "gemma4"), layout=Layout.GEMMA4, window=Window.KEPT,
        reads=("attention.key_length_swa", "attention.value_length_swa", "attention.shared_kv_layers"),
        field_keys=(("head_dim", ("attention.key_length_swa",)),),
    ),
    Architecture(
        "mimo2", "mimo_v2_flash", ("mimo_v2_flash", "mimo_v2"), layout=Layout.MIMO2, window=Window.KEPT,
        skips_nextn=True,
        reads=("attention.key_length_swa", "attention.value_length_swa", "attention.value_scale"),
    ),
    Architecture("deci", "nemotron-nas", ("nemotron-nas",), layout=Layout.DECI,
                 field_keys=(("num_attention_heads", ("attention.head_count",)),)),
    # Plain attention in every layer, no window (their src/models/<arch>.cpp load_arch_hparams
    # @ 0c1e570 set no swa_type; create_memory gives them one llama_kv_cache with no layer filter),
    # written by TextModel's or LlamaModel's keys plus scales and expert widths: conversion/granite.py
    # GraniteModel / GraniteMoeModel, olmo.py OlmoModel / OlmoeModel / SeedOssModel, ernie.py
    # Ernie4_5Model / Ernie4_5MoeModel, llama.py SmolLM3Model, internlm.py
    # InternLM2Model, minicpm.py MiniCPMModel, stablelm.py StableLMModel, mistral3.py Mistral3Model
    # (Mistral-Small-3.1's "mistral" text config and "ministral3" alike; read as ministral3, which
    # has no config-class window default, as LlamaModel writes none); tests/inputs/gguf/test_attention.py.
    Architecture("arcee", "arcee", ("arcee",), window=Window.IGNORED),
    Architecture("granite", "granite", ("granite",), window=Window.IGNORED),
    Architecture("granitemoe", "granitemoe", ("granitemoe",), window=Window.IGNORED),
    Architecture("olmo", "olmo", ("olmo",), window=Window.IGNORED),
    Architecture("olmoe", "olmoe", ("olmoe",), window=Window.IGNORED),
    Architecture("seed_oss", "seed_oss", ("seed_oss",), window=Window.IGNORED),
    Architecture("ernie4_5", "ernie4_5", ("ernie4_5",), window=Window.IGNORED),
    Architecture("ernie4_5-moe", "ernie4_5_moe", ("ernie4_5_moe",), window=Window.IGNORED),
    Architecture("smollm3", "smollm3", ("smollm3",), window=Window.IGNORED),
    Architecture("internlm2", "internlm2", ("internlm2",), window=Window.IGNORED),
    Architecture("minicpm", "minicpm", ("minicpm",), window=Window.IGNORED),
    Architecture("stablelm", "stablelm", ("stablelm",), window=Window.IGNORED),
    Architecture("mistral3", "ministral3", ("ministral3",), window=Window.IGNORED),
    # EXAONE 4 (src/models/exaone4.cpp load_arch_hparams @ 0c1e570): only a 64-layer model
    # (EXAONE-4.0-32B) gets swa_type STANDARD (see kvcalc.inputs.gguf's _exaone4_windows).
    Architecture("exaone4", "exaone4", ("exaone4",), window=Window.KEPT, swa_layers=64, skips_nextn=True),
    # Sparse attention with an indexer key cache (conversion/deepseek.py DeepseekV32Model, conversion/glm.py
    # GlmMoeDsaModel, conversion/minimax.py MiniMaxM3Model), and MiniMax-M2's plain GQA
    # (conversion/minimax.py MiniMaxM2Model @ 0c1e570; src/models/minimax-m2.cpp reads no window).
    Architecture("deepseek32", "deepseek_v32", ("deepseek_v32",), layout=Layout.SPARSE_MLA,
                 indexer=Indexer.EVERY_LAYER, skips_nextn=True, probe=True, reads=_INDEXER_KEYS),
    Architecture("glm-dsa", "glm_moe_dsa", ("glm_moe_dsa",), layout=Layout.SPARSE_MLA, indexer=Indexer.TYPED,
                 skips_nextn=True, probe=True, reads=(*_INDEXER_KEYS, "attention.indexer.types")),
    Architecture(
        "minimax-m3", "minimax_m3_vl_text", ("minimax_m3_vl_text", "minimax_m3"), layout=Layout.MINIMAX_M3,
        window=Window.IGNORED, indexer=Indexer.PAST_DENSE_LEAD, probe=True,
        reads=(*_INDEXER_KEYS, "attention.indexer.block_size", "attention.indexer.local_blocks"),
        field_keys=(("layer_types", ("leading_dense_block_count",)),),
    ),
    Architecture("minimax-m2", "minimax_m2", ("minimax_m2",), window=Window.IGNORED),
    # Encoder-decoder (conversion/t5.py T5Model: T5ForConditionalGeneration, MT5..., UMT5...).
    # src/models/t5.cpp projects cross-attention K and V from the encoder output (llama_cross::v_embd,
    # a host f32 copy of n_embd x encoded tokens made by src/llama-context.cpp encode) at every decode:
    # only the decoder's self-attention has a KV cache. Its relative-position buckets size a bias
    # weight, no cache.
    Architecture("t5", "t5", ("t5", "mt5", "umt5"), layout=Layout.T5, recomputes_cross_attention=True,
                 reads=("attention.relative_buckets_count",)),
    # DeepSeek-V4: a K=V window in every layer, compressed CSA / HCA layers; the mapping reads the
    # ratios and the indexer's key length, the rest sizes weights or compute.
    Architecture(
        "deepseek4", "deepseek_v4", ("deepseek_v4",), layout=Layout.DEEPSEEK4,
        reads=(*_INDEXER_KEYS, "attention.compress_ratios", "attention.compress_rope_freq_base",
               "attention.output_group_count", "attention.output_lora_rank"),
    ),
    # src/llama-model.cpp create_memory @ 0c1e570 lists no t5encoder among the no-memory architectures
    # (BERT and the like): a real run allocates block_count layers x n_ctx cells
    # (tests/inputs/gguf/test_attention.py).
    Architecture(
        "t5encoder", None,
        refused="an encoder-only T5 caches nothing in transformers, yet llama.cpp 0c1e570 allocates a KV cache of "
        "block_count layers x n_ctx cells that its encoder graph never reads; kvcalc models neither",
    ),
)  # fmt: skip

# Model types llama.cpp cannot load at all, and where that shows.
NO_ARCHITECTURE = {
    # No "zamba" anywhere in src/ or conversion/ (ggml-org/llama.cpp PR #21412 adding it is unmerged).
    "zamba2": "src/llama-arch.cpp @ 0c1e570 lists none, and convert_hf_to_gguf converts none",
    # LLM_ARCH_NAMES @ 0c1e570 has no bart or whisper (nor any string of them in llama-cpp-python
    # 0.3.36's libllama.so); its only Whisper is libmtmd's audio encoder (clip_graph_whisper_enc)
    # in front of another model's decoder. The encoder-decoder it runs is t5.
    "bart": "src/llama-arch.cpp @ 0c1e570 lists none; its only encoder-decoder is t5",
    "whisper": "src/llama-arch.cpp @ 0c1e570 lists none; libmtmd runs only Whisper's encoder, for audio input",
}

BY_NAME: dict[str, Architecture] = {a.name: a for a in ARCHITECTURES}
BY_HF_TYPE: dict[str, Architecture] = {t: a for a in ARCHITECTURES for t in a.hf_types}


def architecture(name: object) -> Architecture | None:
    """The record of the llama.cpp architecture ``name`` (a GGUF's general.architecture), or None."""
    return BY_NAME.get(name) if isinstance(name, str) else None


def converted(model_type: str) -> Architecture | None:
    """The architecture convert_hf_to_gguf.py converts an HF ``model_type`` to, or None where kvcalc
    does not know it."""
    return BY_HF_TYPE.get(model_type)


def readable() -> dict[str, str]:
    """llama.cpp architecture -> the HF model_type whose rules kvcalc applies to a GGUF of it."""
    return {a.name: a.reads_as for a in ARCHITECTURES if a.reads_as is not None}


def probe_types() -> list[str]:
    """The HF model types the llama.cpp probe builds, sorted."""
    return sorted(t for a in ARCHITECTURES if a.probe for t in a.hf_types)
