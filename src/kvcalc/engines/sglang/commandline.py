"""``python -m sglang.launch_server`` and ``sglang serve`` read and written: every flag of SGLang
0.5.23's ``python/sglang/srt/server_args.py`` (``ServerArgs.add_cli_args``, the fields declared in
``srt/arg_groups/fields/*.py``; the wheel's server_args.py sha256 fa41e6e4298eab15, the same wheel
releases.py reads), by what it does to memory, and ``sglang/cli/serve.py``'s own ``--model-type``
and positional model.

SGLang parses with a plain ``argparse.ArgumentParser(prog="sglang serve")``: a long flag may be
abbreviated to any prefix only it has (``--tp 2`` is ``--tp-size 2``, as SGLang's own docs write
it), and an ambiguous prefix is an error (0.5.23 split ``--cuda-graph-max-bs`` into ``-decode``
and ``-prefill``, so the old spelling is refused, as SGLang refuses it).

Where SGLang's terms are not kvcalc's (``interpret``): ``--context-length`` is the longest request,
read as kvcalc's ``--max-model-len`` and the request length; ``--max-running-requests`` caps the
running requests of each data-parallel replica (split between attention-DP groups), read as the
requests resident at once; ``--dp-size N --enable-dp-attention`` is 0.5.23's ``--attn-dp-size N``
(parallel_hook.py handle_deprecated_dp_attention); an attention backend that only runs some page
sizes moves ``--page-size`` as SGLang does (overrides.py _mla_backend_page_constraints). A
``--config`` YAML file is read as SGLang's ConfigArgumentMerger reads it, and the SGLANG_*
environment variables that size memory are named in warnings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal

from kvcalc.engines.commandline import (
    TOKENS_FROM_MODEL,
    Arg,
    CommandLine,
    EngineCommand,
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
from kvcalc.engines.sglang import SGLangOptions
from kvcalc.errors import UsageError

SOURCE = "SGLang 0.5.23 python/sglang/srt/server_args.py"

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def human_readable_int(text: str) -> int:
    """SGLang's ``human_readable_int`` (srt/utils/common.py): SI suffixes k, M, G, T (25.6k =
    25,600) and IEC ones Ki, Mi, Gi, Ti (32Ki = 32,768), case-sensitive; a fraction only with an
    SI suffix; otherwise ``int()``."""
    text = text.strip()
    found = _HUMAN.fullmatch(text)
    if found is None:
        return int(text)
    number, suffix = found.groups()
    if suffix in _IEC:
        if "." in number:
            raise UsageError(f"Decimals are not allowed with IEC suffixes like {suffix!r}")
        return int(number) * _IEC[suffix]
    return int(Decimal(number) * _SI[suffix])


def _choice(*names: str) -> Callable[[str], str]:
    """A value argparse checks against ``choices``: one of these names, as written."""

    def parse(text: str) -> str:
        if text not in names:
            raise UsageError(f"invalid choice: {text!r} (choose from {', '.join(names)})")
        return text

    return parse


# --kv-cache-dtype's choices (srt/arg_groups/fields/memory.py) as kvcalc's formats; the block-scaled
# ones kvcalc does not model are refused when the line is read (interpret).
_KV_DTYPES = {"auto": "auto", "fp8_e5m2": "fp8_e5m2", "fp8_e4m3": "fp8_e4m3", "bf16": "bf16", "bfloat16": "bf16"}
_KV_BLOCK_SCALED = ("mxfp8", "nvfp4", "fp4_mx_block16")
# kvcalc's formats as SGLang's --kv-cache-dtype (a written line).
_KV_WRITTEN = {"fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "fp8": "fp8_e4m3", "bf16": "bf16"}

# Keys of the values only interpret reads (never a setting).
_DP_ATTENTION_FLAG = "_enable_dp_attention"
_DP_ATTENTION_SPELT = "_dp_attention_spelt"  # the flag that set the attention-DP groups
_DTYPE = "_dtype"
_KV_CACHE_DTYPE = "_kv_cache_dtype"
_RUNNING = "_max_running_requests"
_BACKEND = "_backend:"  # + which: attention, decode, prefill, draft
_SHARE = "_share:"  # + the flag: SGLang's default mem_fraction_static is derived from it


def _share_input(*spellings: str, takes: Takes = "value", nargs: Nargs = "") -> Arg:
    """A flag SGLang's default mem_fraction_static is derived from (memory_hook.py
    _handle_gpu_memory_settings: activations by chunked_prefill_size, CUDA graphs by their batch
    sizes): warned about in interpret when the line leaves that default to SGLang."""
    return Arg(spellings, _SHARE + spellings[0], takes=takes, nargs=nargs)


_WEIGHTS = "changes the weights' size on the GPU from the checkpoint's, which kvcalc counts"
_DRAFT = "adds a draft model: its weights, and its own KV pool beside the target's, share the budget"
_LORA = "reserves GPU memory for LoRA adapters (max_loras_per_batch x their rank)"
_STATE = "changes how SGLang splits the budget between its Mamba/linear-state and token pools"
_SPLIT = "shards the KV cache across more GPUs than kvcalc's --tp / --dp-attention say"

# The flags that give kvcalc's settings, or that interpret reads.
_SETTINGS: tuple[Arg, ...] = (
    *knob_args(SGLangOptions),  # --page-size
    Arg(("--model-path", "--model"), "model"),
    Arg(("--revision",), "revision"),
    Arg(("--context-length",), "max_model_len", parse=human_readable_int),
    Arg(("--tp-size", "--tensor-parallel-size"), "tp", parse=plain_int),
    Arg(("--pp-size", "--pipeline-parallel-size"), "pp", parse=plain_int),
    Arg(("--dp-size", "--data-parallel-size"), "dp", parse=plain_int),
    Arg(("--attn-dp-size", "--attention-data-parallel-size"), "dp_attention", parse=plain_int),
    Arg(("--enable-dp-attention",), _DP_ATTENTION_FLAG, takes="flag"),
    Arg(("--mem-fraction-static",), "utilization", parse=plain_float),
    Arg(("--kv-cache-dtype",), _KV_CACHE_DTYPE, parse=_choice(*_KV_DTYPES, *_KV_BLOCK_SCALED)),
    Arg(("--max-running-requests",), _RUNNING, parse=plain_int),
    Arg(("--dtype",), _DTYPE, parse=_choice("auto", "half", "float16", "bfloat16", "float", "float32")),
    Arg(("--attention-backend",), _BACKEND + "attention"),
    Arg(("--decode-attention-backend",), _BACKEND + "decode"),
    Arg(("--prefill-attention-backend",), _BACKEND + "prefill"),
    Arg(("--speculative-draft-attention-backend",), _BACKEND + "draft"),
    Arg(("--config",), "config"),
    _share_input("--chunked-prefill-size"),
    _share_input("--max-prefill-tokens"),
    _share_input("--cuda-graph-config"),
    _share_input("--cuda-graph-backend-decode"),
    _share_input("--cuda-graph-max-bs-decode"),
    _share_input("--cuda-graph-bs-decode", nargs="+"),
    _share_input("--disable-decode-cuda-graph", takes="flag"),
    _share_input("--disable-cuda-graph", takes="flag"),
    _share_input("--cuda-graph-backend-prefill"),
    _share_input("--cuda-graph-max-bs-prefill"),
    _share_input("--cuda-graph-bs-prefill", nargs="+"),
    _share_input("--disable-prefill-cuda-graph", takes="flag"),
    _share_input("--moe-a2a-backend"),
    _share_input("--disaggregation-mode"),
    _share_input("--speculative-num-draft-tokens"),
)

# The flags that change memory kvcalc does not model: each named in a warning when given.
_MEMORY: tuple[Arg, ...] = (
    unmodelled("--quantization", why=_WEIGHTS),
    unmodelled("--modelopt-quant", why=_WEIGHTS),
    unmodelled("--quantize-and-serve", takes="flag", why=_WEIGHTS),
    unmodelled("--modelopt-checkpoint-restore-path", why=_WEIGHTS),
    unmodelled("--json-model-override-args", why="overrides fields of the model's config that kvcalc read"),
    unmodelled("--cpu-offload-gb", why="keeps that many GB of weights in CPU memory, off the GPU"),
    unmodelled("--offload-group-size", why="offloads layers' weights to the CPU"),
    unmodelled("--enable-paged-experts", takes="flag", why="keeps only some routed experts on the GPU"),
    unmodelled("--paged-experts-num-resident", why="keeps only that many routed experts a layer on the GPU"),
    unmodelled("--kt-weight-path", why="runs experts on the CPU (ktransformers)"),
    unmodelled("--kt-num-gpu-experts", why="keeps only that many experts on the GPU (ktransformers)"),
    unmodelled("--ep-num-redundant-experts", why="adds redundant copies of experts' weights"),
    unmodelled("--moe-dense-tp-size", why="shards dense MLP weights over fewer GPUs than --tp-size"),
    unmodelled("--enable-dp-lm-head", takes="flag", why="shards the LM head across the attention TP group"),
    unmodelled(
        "--enable-shared-experts-attn-tp", takes="flag", why="shards shared experts over the attention TP group"
    ),
    unmodelled("--shared-experts-tp-size", why="shards shared experts over that many GPUs"),
    unmodelled("--enable-dense-mlp-attn-tp", takes="flag", why="shards dense MLP weights over the attention TP group"),
    unmodelled(
        "--ple-offload-embedding",
        takes="flag",
        negatable=True,
        why="moves Qwen4's PLE n-gram embedding weights between GPU and CPU memory",
    ),
    unmodelled("--language-only", takes="flag", why="loads only the language model's weights"),
    unmodelled("--language-model-only", takes="flag", why="loads no multimodal encoder"),
    unmodelled("--encoder-only", takes="flag", why="loads only the multimodal encoder"),
    unmodelled("--speculative-algorithm", why=_DRAFT),
    unmodelled("--speculative-draft-model-path", "--speculative-draft-model", why=_DRAFT),
    unmodelled("--uno-lora-path", why="loads a draft LoRA for speculative decoding"),
    unmodelled("--enable-lora", takes="flag", why=_LORA),
    unmodelled("--lora-paths", why=_LORA, nargs="*"),
    unmodelled("--max-loras-per-batch", why=_LORA),
    unmodelled("--max-lora-rank", why=_LORA),
    unmodelled("--max-total-tokens", why="caps the token pool at that many tokens, below what the budget holds"),
    unmodelled("--swa-full-tokens-ratio", why="sets the sliding-window pool's size (kvcalc: SGLang's default 0.8)"),
    unmodelled(
        "--disable-hybrid-swa-memory",
        takes="flag",
        why="keeps sliding layers' tokens in the full pool instead of SGLang's SWA pool",
    ),
    unmodelled("--max-mamba-cache-size", why=_STATE),
    unmodelled("--mamba-full-memory-ratio", why=_STATE + " (kvcalc: SGLang's default 0.9)"),
    unmodelled("--mamba-ssm-dtype", why="sets the Mamba SSM state's dtype (kvcalc: the config's, else float32)"),
    unmodelled("--mamba-radix-cache-strategy", why="changes the Mamba state slots a running request holds"),
    unmodelled("--enable-int8-mamba-checkpoint", takes="flag", why="adds an int8 pool of Mamba state checkpoints"),
    unmodelled("--int8-mamba-ckpt-size", why="sizes the int8 pool of Mamba state checkpoints"),
    unmodelled("--enable-linear-replayssm", takes="flag", why="adds a ReplaySSM ring buffer to each state slot"),
    unmodelled("--enable-linear-replayssm-spec", takes="flag", why=_STATE),
    unmodelled(
        "--disable-radix-cache",
        takes="flag",
        why="for a model with a Mamba/linear-attention state pool, SGLang then gives each running request "
        "1 state slot, not 3 (kv_cache_configurator.py _calculate_mamba_ratio)",
    ),
    unmodelled("--enable-page-major-kv-layout", takes="flag", why="lays the pools out one entry per token slot"),
    unmodelled(
        "--enable-unified-memory", takes="flag", why="replaces the hybrid models' separate pools with one unified pool"
    ),
    unmodelled("--prefill-only-disable-kv-cache", takes="flag", why="allocates no KV cache for prefill-only work"),
    unmodelled(
        "--enable-hierarchical-cache",
        "--enable-hicache",
        takes="flag",
        why="adds a host-memory KV tier (--hicache-ratio / --hicache-size) beside the GPU pools",
    ),
    unmodelled("--enable-lmcache", takes="flag", why="offloads KV cache to LMCache's CPU/disk tiers"),
    unmodelled("--enable-flexkv", takes="flag", why="offloads KV cache to FlexKV's CPU/SSD tiers"),
    unmodelled("--enable-hisparse", takes="flag", why="keeps part of the sparse-attention KV cache in host memory"),
    unmodelled("--enable-kv-cache-sharding", takes="flag", why=_SPLIT),
    unmodelled("--enable-dsa-cache-layer-split", takes="flag", why=_SPLIT),
    unmodelled("--dcp-size", "--decode-context-parallel-size", why=_SPLIT),
    unmodelled("--attn-cp-size", "--attention-context-parallel-size", why=_SPLIT),
    unmodelled("--enable-symm-mem", takes="flag", why="preallocates NCCL symmetric memory (4 GB by default)"),
    unmodelled(
        "--enable-multimodal",
        takes="flag",
        why="turns SGLang's multimodal path on or off (its embedding-cache reservation), which kvcalc "
        "decides from the model type",
    ),
    unmodelled("--qsa-indexer-dtype", why="sets the QSA indexer cache's dtype"),
    unmodelled(
        "--dsa-decode-backend",
        why="picks the DSA kernels, and with them the fp8 latent row's layout (kvcalc: flashmla_kv's)",
    ),
    unmodelled(
        "--dsa-prefill-backend",
        why="picks the DSA kernels, and with them the fp8 latent row's layout (kvcalc: flashmla_kv's)",
    ),
    unmodelled("--mm-feature-transport", why="reserves a CUDA pool for multimodal features out of the KV budget"),
)


# Every other flag of SGLang 0.5.23's parser: none touches memory kvcalc models or does not model.
# Flags that take one value.
_QUIET_VALUES = """
--tokenizer-path --tokenizer-mode --tokenizer-backend --tokenizer-worker-num --detokenizer-worker-num --load-format
--model-loader-extra-config --model-impl --model-config-parser --quantization-param-path
--modelopt-checkpoint-save-path --modelopt-export-path --rl-quant-profile --max-queued-requests
--prefill-decode-interval --prefill-max-requests --schedule-policy --default-priority-value
--priority-scheduling-preemption-threshold --retraction-policy --schedule-conservativeness --c128-page-size
--radix-eviction-policy --radix-eviction-policy-config --num-continuous-decode-steps
--nccl-port --dist-timeout --dist-init-addr,--nccl-init-addr --gated-launch-port --nnodes --node-rank
--pp-max-micro-batch-size --pp-async-batch-depth --load-balance-method --moe-dp-size,--moe-data-parallel-size
--dwdp-size --dcp-comm-backend --cp-strategy --device --base-gpu-id --gpu-id-step --random-seed --watchdog-timeout
--soft-watchdog-timeout --host --port --fastapi-root-path --grpc-port --sidecar --sidecar-args --warmups
--http2-max-concurrent-streams --http2-initial-connection-window-size --ssl-keyfile --ssl-certfile --ssl-ca-certs
--ssl-keyfile-password --api-key --admin-api-key --served-model-name --weight-version --chat-template
--hf-chat-template-name --completion-template --file-storage-path --default-chat-template-kwargs --tool-server
--sampling-defaults --asr-max-buffer-seconds --asr-max-concurrent-sessions --preferred-sampling-params
--stream-interval --batch-notify-size --log-level --log-level-http --log-requests-level --log-requests-format
--crash-dump-folder --smg-http-sidecar-port,--grpc-http-sidecar-port --load-snapshot-publish-interval
--tokenizer-metrics-custom-labels-header --extra-metric-labels --gc-warning-threshold-secs --decode-log-interval
--kv-events-config --load-publish-endpoint --forward-pass-metrics-worker-id --forward-pass-metrics-ipc-name
--trace-modules --otlp-traces-endpoint --export-metrics-to-file-dir --constrained-json-whitespace-pattern
--constrained-json-max-whitespace-cnt --grammar-backend --radix-cache-backend --mm-attention-backend
--fp8-gemm-backend --fp4-gemm-backend --bf16-gemm-backend --dsv4-prefill-backend --dsa-paged-mqa-logits-backend
--dsa-topk-backend --mamba-backend --cuda-graph-prefill-max-context,--context-bucket
--triton-attention-num-kv-splits --triton-attention-split-tile-size --boundary-reduction
--flashinfer-allreduce-fusion-backend --torch-compile-max-bs --speculative-draft-model-revision
--speculative-draft-load-format --speculative-num-steps --speculative-eagle-topk --speculative-dflash-block-size
--speculative-dspark-block-size --speculative-dspark-sps-table-path --speculative-dspark-confidence-sts-path
--speculative-accept-threshold-single --speculative-accept-threshold-acc --speculative-token-map
--speculative-attention-mode --speculative-dsa-topk-backend
--speculative-draft-kv-cache-dtype --speculative-draft-window-size --speculative-moe-runner-backend
--speculative-moe-a2a-backend --speculative-draft-model-quantization --speculative-adaptive-config
--decoupled-spec-bind-endpoint --decoupled-spec-connect-endpoints --decoupled-spec-rank --decoupled-spec-role
--spec-trace-dir --speculative-ngram-min-bfs-breadth --speculative-ngram-max-bfs-breadth
--speculative-ngram-match-type --speculative-ngram-max-trie-depth --speculative-ngram-capacity
--speculative-ngram-external-corpus-path --speculative-ngram-external-sam-budget
--speculative-ngram-external-corpus-max-tokens --ep-size,--expert-parallel-size,--ep --deepep-v2-mode
--moe-runner-backend --flashinfer-mxfp4-moe-precision --deepep-mode --fuseep-mode --deepep-dispatcher-output-dtype
--ep-dispatch-algorithm --init-expert-location --eplb-algorithm --eplb-rebalance-num-iterations
--eplb-rebalance-layers-per-chunk --eplb-min-rebalancing-utilization-threshold --expert-distribution-recorder-mode
--expert-distribution-recorder-buffer-size --expert-balancedness-report-mode --deepep-config --elastic-ep-backend
--mooncake-ib-device --elastic-ep-join-mode --elastic-ep-join-rank-offset --elastic-ep-initial-size --max-ep-size
--elastic-ep-scale-timeout --mamba-max-states-per-path --mamba-cache-philox-rounds --mamba-track-interval
--linear-attn-backend --linear-attn-decode-backend --linear-attn-prefill-backend --linear-attn-verify-backend
--linear-replayssm-cache-len --hicache-host-memory-mode --hicache-ratio --hicache-size --hicache-write-policy
--hicache-io-backend --hicache-mem-layout --hicache-storage-backend --hicache-storage-prefetch-policy
--hicache-storage-backend-extra-config --hicache-storage-prefetch-retry-poll-interval
--hicache-storage-prefetch-retry-max-attempts --unified-cache-external-linker-backend
--hisparse-config,--hierarchical-sparse-attention-extra-config --mm-process-config --mm-processor-worker-num
--mm-io-worker-num --media-url-max-file-size-mb --mm-preprocess-cache-size-mb --limit-mm-data-per-request
--image-processor-backend --mm-global-cache-backend --max-loaded-loras --lora-eviction-policy --lora-backend
--max-lora-chunk-size --lora-drain-wait-threshold --tbo-token-distribution-threshold --offload-num-in-group
--offload-prefetch-step --offload-mode --lmcache-config-file --flexkv-config-file --kt-method --kt-cpuinfer
--kt-threadpool-count --kt-max-deferred-experts-per-token --dllm-algorithm --dllm-algorithm-config
--disaggregation-transfer-backend --disaggregation-bootstrap-port --disaggregation-ib-device
--disaggregation-decode-retraction-backup --num-reserved-decode-tokens --disaggregation-decode-extra-slots
--disaggregation-decode-polling-interval --optimistic-prefill-attempts --encoder-transfer-backend
--encoder-bootstrap-port --pdmux-config-path --sm-group-num --startup-weight-load-mode
--weight-loader-prefetch-num-threads --remote-instance-weight-loader-seed-instance-ip
--remote-instance-weight-loader-seed-instance-service-port --remote-instance-weight-loader-send-weights-group-ports
--remote-instance-weight-loader-backend --engine-info-bootstrap-port --modelexpress-config --download-dir
--decrypted-config-file --decrypted-draft-config-file --prefill-delayer-max-delay-passes
--prefill-delayer-token-usage-low-watermark --prefill-delayer-queue-min-ratio --prefill-delayer-max-delay-ms
--min-free-slots-delay --rl-on-policy-target --kv-canary --kv-canary-sweep-interval
--dynamic-batch-tokenizer-batch-size --dynamic-batch-tokenizer-batch-timeout --debug-tensor-dump-output-folder
--debug-tensor-dump-input-file --return-hidden-states-mode --sampling-mask-max-tokens --weight-cache-mode
--weight-cache-socket --weight-cache-timeout --forward-hooks --msprobe-dump-config --ple-offload-backend
--ple-offload-dir --speculative-domino-candidate-pool-size --flashinfer-a2a-dispatch-type
--cuda-graph-max-seq-len-prefill --prefill-kv-cache-dequant-dtype --dsv4-attn-backend --otlp-service-name
--hicache-host-memory-fraction --swa-prefix-tails --disaggregation-decode-host-receive-threshold
--disaggregation-decode-allocation-policy --speculative-draft-sink-size --dsa-triton-union --watermark-config
--grpc-response-timeout-secs --prefill-decode-interval-min-bs --unified-cache-external-linker-config
--sampling-backend --reasoning-parser --tool-call-parser --kv-canary-real-data --monokernel-backend
"""

_QUIET_SWITCHES = """
--skip-tokenizer-init --trust-remote-code --is-embedding --enable-fp32-lm-head --enable-dynamic-chunking
--enable-priority-scheduling --disable-priority-preemption --abort-on-priority-when-disabled
--schedule-low-priority-values-first --disable-chunked-prefix-cache --disable-overlap-schedule
--enable-prefill-cp --enable-cp-decode-attn-tp --enable-dp-attention-local-control-broadcast
--enable-attn-tp-input-scattered --enable-layernorm-sp --disable-attn-tp-gather --enable-p2p-check
--mlx-enable-sampling --sleep-on-idle --use-ray --smg-grpc-mode --grpc-mode --skip-server-warmup --enable-http2
--enable-ssl-refresh --trust-request-chat-template --enable-cache-report --return-input-ids --return-output-ids
--strip-thinking-cache --enable-strict-thinking --allow-auto-truncate --stream-response-default-include-usage
--incremental-streaming-output --enable-streaming-session --enable-session-radix-cache --log-requests
--show-time-cost --enable-metrics --enable-mfu-metrics --enable-metrics-for-all-schedulers
--enable-request-time-stats-logging --enable-forward-pass-metrics --enable-trace --export-metrics-to-file
--constrained-json-disable-any-whitespace --enable-lean-attention --disable-flashinfer-autotune
--disable-cuda-graph-padding --enable-profile-cuda-graph --enable-cudagraph-gc --debug-cuda-graph
--enable-layerwise-nvtx-marker --enable-nccl-nvls --triton-attention-reduce-in-fp32 --flashinfer-mla-disable-ragged
--enable-precise-embedding-interpolation --enable-fused-moe-sum-all-reduce --enable-deepseek-v4-fp4-indexer
--disable-custom-all-reduce --enable-mscclpp --enable-torch-symm-mem --enable-scattered-sconv --pre-warm-nccl
--enable-quant-communications --enforce-disable-flashinfer-allreduce-fusion --enable-aiter-allreduce-fusion
--enable-torch-compile --enable-torch-compile-debug-mode --speculative-dspark-align-verify-tokens-to-graph-tier
--speculative-use-rejection-sampling --enable-multi-layer-eagle --speculative-adaptive --enable-w4a4-mxfp4-megamoe
--enable-eplb --enable-elastic-expert-backup --enable-waterfill --disable-flashinfer-cutlass-moe-fp4-allgather
--disable-shared-experts-fusion --enforce-shared-experts-fusion --enable-mamba-cache-stochastic-rounding
--enable-unified-cache-external-linker --enable-broadcast-mm-inputs-process --enable-prefix-mm-cache
--trust-mm-content-hashes --enable-mm-global-cache --disable-fast-image-processor --enable-lora-overlap-loading
--lora-use-virtual-experts --enable-two-batch-overlap --enable-single-batch-overlap
--disaggregation-decode-enable-radix-cache --disaggregation-decode-enable-offload-kvcache
--enable-adaptive-dispatch-to-encoder --enable-pdmux --weight-loader-disable-mmap
--weight-loader-prefetch-checkpoints --weight-loader-drop-cache-after-load
--remote-instance-weight-loader-start-seed-via-transfer-engine --delete-ckpt-after-loading
--checkpoint-engine-wait-weights-before-ready --enable-prefill-delayer --enable-deterministic-inference
--enable-dynamic-batch-tokenizer --enable-tokenizer-batch-encode --disable-tokenizer-batch-decode
--enable-memory-saver --enable-weights-cpu-backup --enable-draft-weights-cpu-backup --enable-custom-logit-processor
--enable-return-hidden-states --enable-return-routed-experts --enable-return-indexer-topk
--disable-outlines-disk-cache --enable-mis --disaggregation-enable-kv-checksum --enable-pd-role-switch
--enable-linker-mla-dedup --enable-encoder-swa-bounded-replay --enable-response-store
--speculative-use-block-verification --disable-aiter-allreduce-fusion-in-prefill
--disable-aiter-allreduce-fusion-in-decode --enable-amd-monokernel --enable-watermark --enable-nvidia-megakernel
--enable-megamoe-for-layernorm-sp --enable-http-worker-reuseport --enable-return-aux-hidden-states
--enable-flashinfer-allreduce-fusion
"""

_QUIET_NEGATABLE = """
--enable-tf32-matmul --dcp-replicate-q-proj --enable-tp-lm-head-all-to-all --enable-fused-qk-norm-rope
--speculative-enable-w4a4-mxfp4-megamoe --mm-enable-dp-encoder --experts-shared-outer-loras --lora-strict-loading
--dllm-fdfo --enable-decoder-swa-bounded-replay --enable-dsa-fused-indexer
"""

_QUIET_LISTS = """
--numa-node --gc-threshold --log-requests-target --tokenizer-metrics-allowed-custom-labels
--bucket-time-to-first-token --bucket-inter-token-latency --bucket-e2e-request-latency --prompt-tokens-buckets
--generation-tokens-buckets --flashinfer-autotune-skip-ops --allowed-media-domains --encoder-urls
--encoder-register-urls --prefill-delayer-forward-passes-buckets --prefill-delayer-wait-seconds-buckets
--debug-tensor-dump-layers --return-aux-hidden-state-layer-ids
"""

_QUIET_OPTIONAL_LISTS = """
--uvicorn-access-log-exclude-prefixes --lora-target-modules --custom-weight-loader
"""

_QUIET_OPTIONAL = """
--model-checksum
"""


def _quiet(block: str, takes: Takes, *, negatable: bool = False, nargs: Nargs = "") -> tuple[Arg, ...]:
    """One quiet flag per word (``--a,--b``: one flag's spellings)."""
    return tuple(quiet(*word.split(","), takes=takes, negatable=negatable, nargs=nargs) for word in block.split())


ARGS: tuple[Arg, ...] = (
    *_SETTINGS,
    *_MEMORY,
    *_quiet(_QUIET_VALUES, "value"),
    *_quiet(_QUIET_SWITCHES, "flag"),
    *_quiet(_QUIET_NEGATABLE, "flag", negatable=True),
    *_quiet(_QUIET_LISTS, "value", nargs="+"),
    *_quiet(_QUIET_OPTIONAL_LISTS, "value", nargs="*"),
    *_quiet(_QUIET_OPTIONAL, "optional"),
)
# sglang/cli/serve.py _extract_model_type_override: `sglang serve`'s own backend selector.
# Taken out by its exact spelling only (argparse never abbreviates it).
_SERVE_ARGS = (*ARGS, Arg(("--model-type",), "_model_type", parse=_choice("auto", "llm", "diffusion"), exact=True))

# Environment variables SGLang reads that change memory (srt/environ.py); any other SGLANG_* is
# named as unread.
ENV: tuple[Arg, ...] = (
    unmodelled(
        "SGLANG_VLM_CACHE_SIZE_MB",
        why="sets the multimodal embedding cache's share of the KV budget (kvcalc: SGLang's default 100 MiB)",
    ),
    unmodelled("SGLANG_MAMBA_SSM_DTYPE", why="sets the Mamba SSM state's dtype"),
    unmodelled("SGLANG_MAMBA_CONV_DTYPE", why="sets the Mamba conv state's dtype (kvcalc: bfloat16)"),
    quiet("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"),
)

# overrides.py _mla_backend_page_constraints: the page sizes a backend runs, the one it moves any
# other to, and which of the attention / decode / prefill / draft backends it applies to.
_BACKEND_PAGES: tuple[tuple[str, tuple[int, ...], tuple[str, ...]], ...] = (
    ("flashmla", (64,), ("attention", "decode")),
    ("trtllm_mla", (32, 64), ("attention", "decode")),
    ("cutedsl_mla", (32, 64), ("attention", "decode", "prefill")),
    ("trtllm_mha", (16, 32, 64, 128), ("attention", "decode", "prefill", "draft")),
    ("hpc_ops", (64,), ("attention", "decode", "prefill")),
)
_MOVED_PAGE = 64

# server_args_config_parser.py ConfigArgumentMerger: the YAML file's keys as flags (a switch true
# -> ``--key``, false -> nothing; another flag's true/false its text) before every other word, so
# the line's own win; its messages.
CONFIG = YamlConfig(
    many="{program}: Multiple config files specified! Only one allowed.",
    missing="{program}: No config file specified after --config flag!",
    extension="{program}: Config file must be YAML format, got: {path}",
    not_yaml="{program} --config {path}: not YAML ({error})",
    no_mapping="{program} --config {path}: Config file must contain a dictionary at root level",
    negatable="{program} --config {path}: Unsupported config option '{key}' with action 'BooleanOptionalAction'",
    bool_text=True,
    empty_is_mapping=True,
    ignore_case=True,
)


class SGLangServer(CommandLine):
    """SGLang's server line: argparse's prefix abbreviations and multi-value flags, SGLang's terms
    in kvcalc's (module docstring), and fit's answer written back (``express``)."""

    def __init__(self, *, programs: tuple[tuple[str, ...], ...], args: tuple[Arg, ...], serve: bool) -> None:
        super().__init__(engine="sglang", programs=programs, args=args, source=SOURCE, env=ENV, env_prefix="SGLANG_",
                         parser="argparse", config=CONFIG)  # fmt: skip
        self.serve = serve

    def read(self, words: Sequence[str], env: Mapping[str, str], read_text: ReadText) -> EngineCommand:
        words = list(words)
        if self.serve:
            # serve.py: _extract_model_type_override takes --model-type out (its exact spelling
            # only), then _normalize_positional_model_path reads a first word as the model.
            rest: list[str] = []
            chosen: list[str] = []
            index = 0
            while index < len(words):
                word = words[index]
                index += 1
                if word == "--model-type" and index < len(words):
                    chosen = [f"--model-type={words[index]}"]
                    index += 1
                elif word.startswith("--model-type="):
                    chosen = [word]
                else:
                    rest.append(word)
            if rest and not rest[0].startswith("-"):
                rest = ["--model-path", rest[0], *rest[1:]]
            words = [*rest, *chosen]
        return super().read(words, env, read_text)

    def interpret(self, reading: Reading) -> Settings:
        values = dict(reading.values)
        if values.pop("_model_type", "auto") == "diffusion":
            raise UsageError(
                f"{self.program} --model-type diffusion serves a diffusion model: kvcalc reads LLM servers"
            )
        self._parallel(values, reading)
        self._share_inputs(values, reading)
        self._dtypes(values, reading)
        self._pages(values, reading)
        if "max_model_len" in values:
            values["tokens"] = values["max_model_len"]
        else:  # model_config.py: no --context-length serves the model's derived context
            values[TOKENS_FROM_MODEL] = 1
        running = values.pop(_RUNNING, None)
        if isinstance(running, int):
            dp, groups = int(values.get("dp", 1)), int(values.get("dp_attention", 1))
            # kv_cache_configurator.py resolve_max_num_reqs: max(1, N // attn_dp_size) a group;
            # every data-parallel replica runs its own scheduler with the same N.
            values["batch"] = max(1, running // groups) * groups * dp
            reading.notes.append(f"--max-running-requests {running} read as --batch {values['batch']}: the requests "
                                 "resident at once (SGLang's cap on them, which kvcalc does not apply)")  # fmt: skip
        reading.values = values
        return super().interpret(reading)

    def _parallel(self, values: dict[str, SettingValue], reading: Reading) -> None:
        """--dp-size N --enable-dp-attention is --attn-dp-size N, with one replica
        (parallel_hook.py handle_deprecated_dp_attention)."""
        if values.pop(_DP_ATTENTION_FLAG, False) and values.get("dp_attention", 1) == 1:
            values["dp_attention"] = values.pop("dp", 1)
            values[_DP_ATTENTION_SPELT] = "--enable-dp-attention"
            reading.notes.append(f"--enable-dp-attention: --dp-size {values['dp_attention']} counts attention-DP "
                                 "groups, as SGLang 0.5.23's --attn-dp-size")  # fmt: skip
        for key in ("dp", "dp_attention"):
            if values.get(key) == 1:
                del values[key]

    def _share_inputs(self, values: dict[str, SettingValue], reading: Reading) -> None:
        """Flags SGLang derives its default mem_fraction_static from: warned about when the line
        leaves that default to SGLang (kvcalc derives it from SGLang's defaults for them)."""
        given = {k[len(_SHARE) :]: v for k, v in values.items() if k.startswith(_SHARE)}
        for key in [k for k in values if k.startswith(_SHARE)]:
            del values[key]
        if _RUNNING in values:
            given["--max-running-requests"] = values[_RUNNING]
        if "dp_attention" in values:
            # reserve_for_graph_mb: attention DP pads its CUDA graphs (max_bs x groups x 3 MiB more).
            given[str(values.pop(_DP_ATTENTION_SPELT, "--attn-dp-size"))] = values["dp_attention"]
        chunked = given.get("--chunked-prefill-size")
        if not (isinstance(chunked, str) and chunked.lstrip("-").isdigit() and int(chunked) <= 0):
            given.pop("--max-prefill-tokens", None)  # read only when chunked prefill is off
        if given.get("--moe-a2a-backend") not in (None, "deepep"):
            given.pop("--moe-a2a-backend")
        if given.get("--disaggregation-mode") in ("null",):
            given.pop("--disaggregation-mode")
        if given.get("--disaggregation-mode") != "decode":
            given.pop("--speculative-num-draft-tokens", None)
        if "utilization" in values or not given:
            return
        shown = ", ".join(given)
        reading.warnings.append(f"{self.program} {shown}: SGLang derives its default mem_fraction_static from "
                                f"{'it' if len(given) == 1 else 'them'} (memory_hook.py _handle_gpu_memory_settings), "
                                "kvcalc from SGLang's defaults; give --mem-fraction-static; kvcalc does not model "
                                "it")  # fmt: skip

    def _dtypes(self, values: dict[str, SettingValue], reading: Reading) -> None:
        dtype = values.pop(_DTYPE, "auto")
        if dtype in ("float", "float32"):
            reading.warnings.append(f"{self.program} --dtype {dtype}: runs the weights and the KV cache (auto) in "
                                    "float32, where kvcalc takes the checkpoint's 16-bit dtype; kvcalc does not "
                                    "model it")  # fmt: skip
        cache = values.pop(_KV_CACHE_DTYPE, None)
        if cache in _KV_BLOCK_SCALED:
            raise UsageError(f"{self.program} --kv-cache-dtype {cache}: kvcalc does not model SGLang's block-scaled "
                             "KV cache formats (it models auto, bf16, fp8_e4m3, fp8_e5m2)")  # fmt: skip
        if isinstance(cache, str) and cache != "auto":
            values["kv_dtype"] = _KV_DTYPES[cache]

    def _pages(self, values: dict[str, SettingValue], reading: Reading) -> None:
        """overrides.py _mla_backend_page_constraints: a backend that runs only some page sizes
        moves any other --page-size (none given: SGLang's 1) to 64."""
        backends = {k[len(_BACKEND) :]: v for k, v in values.items() if k.startswith(_BACKEND)}
        for key in [k for k in values if k.startswith(_BACKEND)]:
            del values[key]
        given = values.get("block_size")
        page = given if isinstance(given, int) else None
        for name, pages, which in _BACKEND_PAGES:
            used = [w for w in which if backends.get(w) == name]
            if used and page not in pages:
                page = _MOVED_PAGE
                flag = "--attention-backend" if used[0] == "attention" else f"--{used[0]}-attention-backend"
                if used[0] == "draft":
                    flag = "--speculative-draft-attention-backend"
                reading.notes.append(f"{flag} {name}: SGLang runs it with {_MOVED_PAGE}-token pages"
                                     f"{f', not --page-size {given}' if given is not None else ''} "
                                     "(overrides.py _mla_backend_page_constraints)")  # fmt: skip
        if page is not None:
            values["block_size"] = page

    def express(self, settings: Mapping[str, SettingValue]) -> tuple[dict[str, SettingValue], list[str]]:
        """fit's answer as SGLang's flags: the model, --context-length the request length, the
        layout, --mem-fraction-static, --kv-cache-dtype, --page-size, and --max-running-requests the
        concurrency found -- only beside --mem-fraction-static: without it SGLang would lower its
        decode CUDA-graph batch to that cap and derive a larger default share (memory_hook.py)."""
        values: dict[str, SettingValue] = {}
        notes: list[str] = []
        for key in ("model", "tp", "pp", "dp", "dp_attention", "utilization", "block_size"):
            if key in settings:
                values[key] = settings[key]
        tokens = settings.get("tokens")
        if isinstance(tokens, int):
            values["max_model_len"] = tokens
            limit = settings.get("max_model_len")
            if limit is not None and limit != tokens:
                notes.append(f"--context-length is the request length, {tokens:,}, not --max-model-len {limit}: "
                             "SGLang's line has no flag for the requests' length besides it")  # fmt: skip
        if "kv_budget" in settings:
            notes.append("SGLang sizes its pools from --mem-fraction-static and has no flag for a KV budget in "
                         "bytes: this line leaves SGLang its default share")  # fmt: skip
        self._express_dtype(settings, values, notes)
        batch = settings.get("batch")
        if isinstance(batch, int) and batch >= 1:
            dp, groups = int(settings.get("dp", 1)), int(settings.get("dp_attention", 1))
            per_group = -(-batch // (dp * groups))
            if "utilization" in values:
                values[_RUNNING] = per_group * groups
                if per_group * groups * dp != batch:
                    notes.append(f"--max-running-requests {per_group * groups} a replica: {per_group * groups * dp} "
                                 f"requests in all, not {batch}: SGLang splits it evenly")  # fmt: skip
            else:
                notes.append(f"SGLang admits the {batch} request(s) found by itself: --max-running-requests would "
                             "change its default mem_fraction_static")  # fmt: skip
        return values, notes

    @staticmethod
    def _express_dtype(settings: Mapping[str, SettingValue], values: dict[str, SettingValue], notes: list[str]) -> None:
        kv = settings.get("kv_dtype")
        k, v = settings.get("k_dtype"), settings.get("v_dtype")
        if kv is None and k is not None and k == v:
            kv = k
        elif k is not None or v is not None:
            notes.append("SGLang has one --kv-cache-dtype for K and V: the line keeps its default (auto)")
            return
        if kv is None or kv == "auto":
            return
        written = _KV_WRITTEN.get(str(kv))
        if written is None:
            notes.append(f"SGLang has no --kv-cache-dtype {kv}: --kv-cache-dtype auto stores the model's dtype")
            return
        values[_KV_CACHE_DTYPE] = written
        if kv == "fp8":
            notes.append("kvcalc's fp8 written as SGLang's fp8_e4m3 (one byte an element either way)")


PROGRAMS = (("python", "-m", "sglang.launch_server"),)
READERS = (
    SGLangServer(programs=(("sglang", "serve"),), args=_SERVE_ARGS, serve=True),
    SGLangServer(programs=PROGRAMS, args=ARGS, serve=False),
)
