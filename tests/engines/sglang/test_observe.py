"""SGLang's server and start-up log as ``kvcalc check`` reads them (engines/sglang/observe.py).

The server's answers are tests/fixtures/servers/sglang-0.5.23/ (written from SGLang 0.5.23's source:
its README cites each field); the logs are real published ones under tests/fixtures/logs/sglang/.
SGLang prints GB meaning GiB (memory_pool.py ``GB = 1024 * 1024 * 1024``).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import kvcalc
from kvcalc.engines.observing import clean_lines, log_readers, pool_rules, server_readers
from kvcalc.engines.sglang import observe
from tests.helpers.fake_server import Route, fake_server
from tests.helpers.fake_server import http_getter as _get
from tests.helpers.paths import FIXTURES

SERVER = FIXTURES / "servers" / "sglang-0.5.23"
LOGS = FIXTURES / "logs" / "sglang"
GIB = 1 << 30


def _json(name: str) -> Any:
    return json.loads((SERVER / name).read_text())


def _routes() -> dict[str, Any]:
    return {
        "/server_info": _json("server_info.json"),
        "/v1/loads": _json("v1_loads.json"),
        "/metrics": Route((SERVER / "metrics.txt").read_text()),
    }


def _log(name: str) -> list[str]:
    lines = clean_lines((LOGS / name).read_text())
    assert lines[0].startswith("# source: https://github.com/")
    return lines[1:]  # the fixture's own header is no line of SGLang's


def _figure(observation: Any, name: str) -> Any:
    return next(f for f in observation.figures if f.name == name)


# --- the server ---------------------------------------------------------------------------------------


def test_the_server_is_read_from_server_info_and_v1_loads_with_get_requests_only() -> None:
    with fake_server(_routes()) as server:
        get = _get(server.url)
        assert observe.identify(get)
        seen = observe.read_server(get, server.url)
    assert {method for method, _ in server.seen} == {"GET"}
    assert seen.engine == "sglang" and seen.release == "0.5.23"
    # The server args (server_info.json): --context-length 8192 is the request length and the model's
    # limit; --max-running-requests 64 with no DP: 64 resident requests; fp8_e4m3 as kvcalc's fp8_e4m3.
    assert seen.settings == {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 8192, "tokens": 8192,
                             "utilization": 0.85, "kv_dtype": "fp8_e4m3", "block_size": 1, "batch": 64}  # fmt: skip
    pool = seen.pool()
    assert pool is not None and (pool.count, pool.unit, pool.tokens) == (1_000_000, "token", 1_000_000)
    # memory_usage.kvcache 61.035 GB = 61.035 x 2^30 = 65,535,832,227.84 -> 65,535,832,228 B, rounded
    # by SGLang to 3 places (the pool's true 1,000,001 x 65,536 = 65,536,065,536 B is within 0.0005 GiB).
    assert pool.bytes == 65_535_832_228 and not pool.bytes_exact
    assert abs(pool.bytes - 1_000_001 * 65_536) <= GIB // 2000
    assert seen.pool("swa") is None  # token_capacity_swa null: no sliding-window pool
    terms = {t.name: t.bytes for t in seen.memory}
    # weight 14.967 GB x 2^30 = 16,070,693,879.81; graph: decode 0.512 (the other phases 0.0) =
    # 549,755,813.888; startup_available 2.125 x 2^30 = 2,281,701,376 exactly.
    assert terms == {"kv cache": 65_535_832_228, "weights": 16_070_693_880, "cuda graphs": 549_755_814,
                     "free": 2_281_701_376}  # fmt: skip
    assert seen.gpu == "NVIDIA H100 80GB HBM3"
    assert seen.usage is not None
    assert (seen.usage.running, seen.usage.waiting, seen.usage.used_tokens) == (3, 1, 12_345)
    assert seen.usage.used_fraction == 0.0123 and seen.usage.derived == ()
    assert _figure(seen, "max_total_num_tokens").source == "GET /server_info max_total_num_tokens"
    assert seen.missing == () and seen.unread == ()


def test_an_older_server_answers_get_server_info_and_reveals_no_gpu_or_usage_without_metrics() -> None:
    # Before /server_info (http_server.py 853-860 keeps /get_server_info as its old name) and before
    # /v1/loads: one graph figure, and --dp-size 2 --enable-dp-attention (the older spelling of two
    # attention-DP groups, each with its own pool: parallel_hook.py handle_deprecated_dp_attention).
    info = _json("server_info.json")
    del info["attn_dp_size"]
    info.update(dp_size=2, enable_dp_attention=True, version="0.4.6")
    info["internal_states"][0]["memory_usage"]["graph"] = 0.75
    info["internal_states"].append(copy.deepcopy(info["internal_states"][0]))
    with fake_server({"/get_server_info": info}) as server:
        get = _get(server.url)
        assert observe.identify(get)
        seen = observe.read_server(get, server.url)
    assert seen.release == "0.4.6"
    # 64 running requests a replica split between 2 groups: max(1, 64 // 2) x 2 = 64.
    assert seen.settings["dp_attention"] == 2 and "dp" not in seen.settings and seen.settings["batch"] == 64
    assert {t.name: t.bytes for t in seen.memory}["cuda graphs"] == 805_306_368  # 0.75 x 2^30
    assert seen.usage is None and seen.gpu is None
    assert any("the GPU" in m for m in seen.missing)
    assert any("no live usage" in n for n in seen.notes) and any("2 DP ranks" in n for n in seen.notes)


def test_metrics_give_the_usage_where_v1_loads_is_absent() -> None:
    routes = _routes()
    del routes["/v1/loads"]
    with fake_server(routes) as server:
        seen = observe.read_server(_get(server.url), server.url)
    assert seen.usage is not None and seen.usage.source == "GET /metrics"
    # metrics.txt: 3 running, 1 queued, 12,345 used tokens, token_usage 0.01 (rounded to 2 places).
    assert (seen.usage.running, seen.usage.waiting, seen.usage.used_tokens) == (3, 1, 12_345)
    assert seen.usage.used_fraction == 0.01


def test_a_server_info_with_no_context_length_says_what_is_missing() -> None:
    info = _json("server_info.json")
    info["context_length"] = None
    with fake_server({"/server_info": info}) as server:
        seen = observe.read_server(_get(server.url), server.url)
    assert "tokens" not in seen.settings
    assert any("context" in m for m in seen.missing)


def test_identify_refuses_404s_and_other_engines_answers() -> None:
    with fake_server({}) as server:
        assert not observe.identify(_get(server.url))
    vllm_metrics = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
    others = {"/metrics": Route(vllm_metrics), "/v1/models": {"object": "list", "data": []}}
    for folder in sorted((FIXTURES / "servers").glob("*")):
        if folder.name.startswith("sglang") or not folder.is_dir():
            continue
        for file in folder.glob("*.json"):  # another engine's answers, served on every path kvcalc asks
            body = json.loads(file.read_text())
            others.update({path: body for path in observe.SERVERS[0].paths if path != "/metrics"})
    with fake_server(others) as server:
        assert not observe.identify(_get(server.url))


def test_the_readers_are_found_by_the_framework() -> None:
    assert any(r.engine == "sglang" and r.identify is observe.identify for r in server_readers())
    assert any(r.claims is observe.claims for r in log_readers())
    assert pool_rules("sglang") is observe.POOL_RULES["sglang"]


# --- the start-up logs --------------------------------------------------------------------------------


def test_the_kimi_log_on_rocm_its_mla_pool_and_memory() -> None:
    # rocm-0.5.8.post1-mi355x-kimi-k2.5-tp8.log: "Load weight end. ... mem usage=73.58 GB", "KV Cache is
    # allocated. #tokens: 2454391, KV size: 160.63 GB" (the MLA spelling), "Memory pool end. avail
    # mem=45.25 GB"; the image names ROCm.
    lines = _log("rocm-0.5.8.post1-mi355x-kimi-k2.5-tp8.log")
    assert observe.claims(lines)
    seen = observe.read_log(lines, "kimi.log")
    assert seen.engine == "sglang-rocm"
    pool = seen.pool()
    # 160.63 x 2^30 = 172,475,149,189.12; 73.58 x 2^30 = 79,005,923,409.92; 45.25 x 2^30 exactly.
    assert pool is not None and (pool.count, pool.bytes, pool.bytes_exact) == (2_454_391, 172_475_149_189, False)
    terms = {t.name: t.bytes for t in seen.memory}
    assert terms == {"weights": 79_005_923_410, "kv cache": 172_475_149_189, "free": 48_586_817_536}
    assert seen.unread == () and any("the model" in m for m in seen.missing)


def test_a_cuda_log_with_its_server_args_line_and_the_old_graph_spelling() -> None:
    # cuda-2025-11-b200-qwen2.5-vl-7b.log: server_args=ServerArgs(model_path='Qwen/Qwen2.5-VL-7B-Instruct',
    # ..., kv_cache_dtype='auto', mem_fraction_static=0.7629746875, max_running_requests=None, ...);
    # "#tokens: 2243474, K size: 59.91 GB, V size: 59.91 GB"; "Capture cuda graph end. Time elapsed:
    # 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB."
    seen = observe.read_log(_log("cuda-2025-11-b200-qwen2.5-vl-7b.log"), "qwen.log")
    assert seen.engine == "sglang"
    assert seen.settings == {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "utilization": 0.7629746875}
    pool = seen.pool()
    # K + V: 2 x 59.91 x 2^30 = 2 x 64,327,872,675.84 -> 2 x 64,327,872,676 = 128,655,745,352 B; by hand
    # the pool is (2,243,474 + 1) x 28 layers x 4 KV heads x 128 x 2 B = 64,324,915,200 B = 59.907 GiB each.
    assert pool is not None and (pool.count, pool.bytes) == (2_243_474, 128_655_745_352)
    terms = {t.name: t.bytes for t in seen.memory}
    # 1.44 x 2^30 = 1,546,188,226.56; the last avail mem, 38.05 x 2^30 = 40,855,876,403.2.
    assert terms["cuda graphs"] == 1_546_188_227 and terms["free"] == 40_855_876_403
    assert _figure(seen, "Using KV cache dtype").value == "torch.bfloat16"
    # context_length=None and no scheduler line: the context is named as missing.
    assert any("context" in m for m in seen.missing) and seen.unread == ()


def test_the_pre_0_5_weight_line_of_a_gemma_3_log() -> None:
    # cuda-2025-03-gemma-3-4b.log: "Load weight end. type=Gemma3ForConditionalGeneration,
    # dtype=torch.bfloat16, avail mem=131.08 GB, mem usage=8.13 GB." (no elapsed=), "#tokens: 834615,
    # K size: 54.12 GB, V size: 54.12 GB"; by hand (834,615 + 1) x 34 x 4 x 256 x 2 B = 58,115,... =
    # 54.1247 GiB each: gemma-3-4b's text model.
    seen = observe.read_log(_log("cuda-2025-03-gemma-3-4b.log"), "gemma.log")
    pool = seen.pool()
    assert pool is not None and pool.count == 834_615
    assert {t.name: t.bytes for t in seen.memory}["weights"] == 8_729_521_029  # 8.13 x 2^30 = 8,729,521,029.12


def test_the_dtype_spelling_with_interleaved_ranks_follows_the_first_rank() -> None:
    # npu-2026-07-grok2-tp16-dtype-spelling.log: "KV Cache is allocated. dtype: torch.bfloat16, #tokens:
    # 387968, K size: 5.92 GB, V size: 5.92 GB" from TP10, TP14, TP13, TP4, interleaved.
    seen = observe.read_log(_log("npu-2026-07-grok2-tp16-dtype-spelling.log"), "grok.log")
    pool = seen.pool()
    # 2 x 5.92 x 2^30 = 2 x 6,356,551,598.08 -> 12,713,103,196 B.
    assert pool is not None and (pool.count, pool.bytes, pool.source) == (387_968, 12_713_103_196, "log line 3")
    assert _figure(seen, "kv dtype").value == "torch.bfloat16"
    assert {t.name: t.source for t in seen.memory}["free"] == "log line 4"  # TP10's Memory pool end
    assert any("TP10" in n for n in seen.notes)


def test_the_0_5_23_spellings_written_from_its_source() -> None:
    # Lines as SGLang 0.5.23 prints them (no published 0.5.23 log was found): engine.py 311 dumps the
    # resolved args as a dict; memory_pool.py 2073-2099 labels the hybrid pools "Full" and "SWA";
    # cuda_graph_setup.py 788-792 logs each capture by name; scheduler.py 1268-1276 its summary.
    lines = [
        "[2026-12-01 10:00:00] server_args={'model_path': 'openai/gpt-oss-20b', 'context_length': 131072, "
        "'page_size': 1, 'kv_cache_dtype': 'auto', 'mem_fraction_static': 0.8, 'tp_size': 1, 'attn_dp_size': 1, "
        "'cuda_graph_config': {'decode': {'backend': 'full'}}}",
        "[2026-12-01 10:00:09 TP0] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000000, "
        "K size: 11.44 GB, V size: 11.44 GB",
        "[2026-12-01 10:00:09 TP0] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 800000, "
        "K size: 9.16 GB, V size: 9.16 GB",
        "[2026-12-01 10:00:12 TP0] Capture decode CUDA graph end. elapsed=3.10 s, mem usage=0.50 GB, "
        "avail mem=9.50 GB.",
        "[2026-12-01 10:00:13 TP0] Capture prefill CUDA graph end. elapsed=2.00 s, mem usage=0.25 GB, "
        "avail mem=9.25 GB.",
        "[2026-12-01 10:00:13 TP0] max_total_num_tokens=1000000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=128, context_len=131072, available_gpu_mem=9.20 GB",
    ]
    seen = observe.read_log(lines, "0.5.23.log")
    assert seen.settings == {"model": "openai/gpt-oss-20b", "max_model_len": 131072, "tokens": 131072,
                             "utilization": 0.8, "block_size": 1}  # fmt: skip
    full, swa = seen.pool("kv"), seen.pool("swa")
    assert full is not None and swa is not None and (full.count, swa.count) == (1_000_000, 800_000)
    terms = {t.name: t.bytes for t in seen.memory}
    # 0.50 + 0.25 GB of graphs = 0.75 x 2^30 = 805,306,368; the free memory of the scheduler's line:
    # 9.20 x 2^30 = 9,878,424,780.8.
    assert terms["cuda graphs"] == 805_306_368 and terms["free"] == 9_878_424_781
    # K + V of both pools: (11.44 + 11.44 + 9.16 + 9.16) x 2^30 = 41.2 x 2^30 = 44,238,163,148.8,
    # summed from the halves each rounded to a byte: 11.44 x 2^30 = 12,283,606,466.56 -> ...467, 9.16 x
    # 2^30 = 9,835,475,107.84 -> ...108: 2 x 12,283,606,467 + 2 x 9,835,475,108 = 44,238,163,150.
    assert terms["kv cache"] == 44_238_163_150


def test_a_mangled_pool_line_is_named_in_unread() -> None:
    lines = _log("rocm-0.5.8.post1-mi355x-kimi-k2.5-tp8.log")
    mangled = [line.replace("#tokens: 2454391", "#tokens: ???") for line in lines]
    seen = observe.read_log(mangled, "mangled.log")
    assert seen.pool() is None
    assert len(seen.unread) == 1 and seen.unread[0].startswith("log line 5: a KV pool line")
    assert any("the pool" in m for m in seen.missing)


def test_claims_only_sglang_logs() -> None:
    assert not observe.claims(["INFO 05-12 10:22:01 [gpu_worker.py:276] Available KV cache memory: 4.2 GiB"])
    assert not observe.claims(["llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  1/1 seqs)"])


# --- kvcalc's pool for the same budget ----------------------------------------------------------------


def test_pool_rules_predict_the_kimi_logs_token_count_from_its_kv_bytes() -> None:
    # The Kimi K2.5 log's pool: "#tokens: 2454391, KV size: 160.63 GB". Kimi K2.5's text model is Kimi
    # K2's (DeepSeek-V3 MLA, preset kimi-k2): 61 layers x (512 + 64) x 2 B = 70,272 B a token on every
    # rank. With the printed bytes as the budget, 172,475,149,189 // 70,272 = 2,454,393 tokens (page 1).
    # SGLang's buffers hold the count + 1 padded row, and the print is rounded to 0.005 GiB
    # (5,368,709 B = 76 tokens): the prediction must sit within 1 + 76 tokens of 2,454,391.
    seen = observe.read_log(_log("rocm-0.5.8.post1-mi355x-kimi-k2.5-tp8.log"), "kimi.log")
    pool = seen.pool()
    assert pool is not None and pool.bytes is not None
    rules = pool_rules(seen.engine)
    assert rules is not None and rules.sizing == "budget" and rules.from_fit is not None
    capacity = kvcalc.Capacity(kv_budget=pool.bytes, max_model_len=4096)
    report = kvcalc.fit("kimi-k2", tokens=4096, serving=kvcalc.Serving(engine="sglang-rocm@0.5.8"), capacity=capacity)
    (predicted,) = rules.from_fit(report.result)
    assert (predicted.kind, predicted.unit_bytes) == ("kv", 70_272)
    assert predicted.count == 2_454_393
    assert abs(predicted.count - (pool.count + 1)) <= 76


def test_pool_rules_predict_nothing_for_a_plan_sglang_refuses() -> None:
    capacity = kvcalc.Capacity(kv_budget=1, max_model_len=4096)
    report = kvcalc.fit("kimi-k2", tokens=4096, serving=kvcalc.Serving(engine="sglang"), capacity=capacity)
    assert observe.predicted_pools(report.result) == ()
