"""TGI read, not modelled: /info and /metrics served from responses written from TGI's source
(tests/fixtures/servers/tgi-*/README.md), and real start-up logs of three spellings
(tests/fixtures/logs/tgi/, each citing where it was published)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.engines import observing
from kvcalc.engines.observing import Observation, clean_lines
from kvcalc.engines.tgi.observe import NOT_MODELLED, claims, identify, parse_args, read_log, read_server
from tests.helpers.fake_server import Route, fake_server
from tests.helpers.fake_server import http_getter as _get

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SERVERS = FIXTURES / "servers"
LOGS = FIXTURES / "logs" / "tgi"


def _info(release: str) -> object:
    return json.loads((SERVERS / f"tgi-{release}" / "info.json").read_text())


def _log(name: str) -> Observation:
    return read_log(clean_lines((LOGS / name).read_text()), name)


def _figure(observation: Observation, name: str) -> object:
    return next(f.value for f in observation.figures if f.name == name)


# --- the server ------------------------------------------------------------------------------------


def test_tgi_2_2_states_its_pool_and_dtype_in_info() -> None:
    with fake_server({"/info": _info("2.2.0")}) as server:
        get = _get(server.url)
        assert identify(get)
        seen = read_server(get, server.url)
    assert {method for method, _ in server.seen} == {"GET"}
    assert seen.engine == "tgi" and not seen.modelled and seen.release == "2.2.0"
    # info.json: max_batch_total_tokens 19056 (the pool, in tokens); max_total_tokens 4096 per request.
    pool = seen.pool()
    assert pool is not None and (pool.count, pool.unit, pool.tokens) == (19056, "token", 19056)
    assert pool.source == "GET /info max_batch_total_tokens"
    # model_dtype "torch.float16": the cache's dtype (fp16).
    assert seen.settings == {
        "model": "meta-llama/Meta-Llama-3.1-8B-Instruct",
        "max_model_len": 4096,
        "kv_dtype": "fp16",
    }
    assert NOT_MODELLED in seen.notes
    # No /metrics route (404): no usage, and the observation says so.
    assert seen.usage is None
    assert any(m.startswith("live usage") for m in seen.missing)
    assert any(m.startswith("the GPU") for m in seen.missing)


def test_tgi_3_3_takes_its_pool_and_usage_from_metrics() -> None:
    routes = {"/info": _info("3.3.7"), "/metrics": (SERVERS / "tgi-3.3.7" / "metrics.txt").read_text()}
    with fake_server(routes) as server:
        get = _get(server.url)
        assert identify(get)
        seen = read_server(get, server.url)
    assert {method for method, _ in server.seen} == {"GET"}
    # metrics.txt: tgi_batch_max_total_tokens 52125.
    pool = seen.pool()
    assert pool is not None and (pool.count, pool.unit) == (52125, "token")
    assert pool.source == "GET /metrics tgi_batch_max_total_tokens"
    assert seen.release == "3.3.6-dev0"
    usage = seen.usage
    assert usage is not None
    # tgi_batch_current_size 3, tgi_queue_size 2, tgi_batch_current_max_tokens 13031; the share is
    # kvcalc's: 13031 / 52125 = 0.24999...
    assert (usage.running, usage.waiting, usage.used_tokens) == (3, 2, 13031)
    assert usage.used_fraction == pytest.approx(13031 / 52125) and usage.derived == ("used_fraction",)
    # /info since v2.3.0 names neither the dtype nor the shards: both missing, said plainly.
    assert "kv_dtype" not in seen.settings and "tp" not in seen.settings
    assert any(m.startswith("the cache's dtype") for m in seen.missing)
    assert any(m.startswith("the shards") for m in seen.missing)
    assert seen.settings["max_model_len"] == 8000
    assert _figure(seen, "tgi_queue_size") == 2.0


def test_tgi_without_a_pool_anywhere_says_where_to_find_it() -> None:
    info = dict(_info("3.3.7"))  # type: ignore[call-overload]
    with fake_server({"/info": info, "/metrics": "# no samples yet\n"}) as server:
        seen = read_server(_get(server.url), server.url)
    assert seen.pools == ()
    assert any("Setting max batch total tokens" in m for m in seen.missing)


def test_identify_refuses_404s_a_dead_port_and_other_engines_bodies() -> None:
    with fake_server({}) as server:
        assert not identify(_get(server.url))
    assert not identify(_get("http://127.0.0.1:9"))  # discard port: refused, Answer status 0
    others = [p for p in SERVERS.glob("*/*.json") if not p.parent.name.startswith("tgi-")]
    for body in others:  # any other engine's JSON answer, even at /info, lacks TGI's router name
        with fake_server({"/info": Route(body.read_text(), content_type="application/json")}) as server:
            assert not identify(_get(server.url)), body
    # A /info of another shape: a router field of another crate.
    with fake_server({"/info": {"router": "other", "max_total_tokens": 1}}) as server:
        assert not identify(_get(server.url))


def test_the_tgi_reader_is_found_though_tgi_is_no_registered_engine() -> None:
    assert any(r.engine == "tgi" for r in observing.server_readers())
    assert any(r.engine == "tgi" for r in observing.log_readers())
    # No TGI rules: nothing predicts TGI's pool in its own units.
    assert observing.pool_rules("tgi") is None


# --- the log ---------------------------------------------------------------------------------------


def test_v2_0_log_router_main_rs_spelling() -> None:
    seen = _log("v2.0-ms-build-mi300-llama3-8b-2shards.log")
    # "Setting max batch total tokens to 801568" (router/src/main.rs:354 in v2.0.x).
    pool = seen.pool()
    assert pool is not None and (pool.count, pool.unit, pool.unit_tokens) == (801568, "token", 1)
    assert pool.source == "log line 23"  # the file's 23rd line, the source comment counted
    # "Sharding model on 2 processes"; "Default `max_total_tokens` to 4096".
    assert seen.settings == {"tp": 2, "max_model_len": 4096}
    assert _figure(seen, "model_max_total_tokens") == 8192
    assert _figure(seen, "max_batch_prefill_tokens") == 4145
    assert not seen.modelled and seen.unread == ()
    assert any(m.startswith("the model") for m in seen.missing)


def test_v3_3_log_with_a_multi_line_args_dump_and_two_shards() -> None:
    seen = _log("v3.3-gemma-3-27b-it-2shards.log")
    # "Setting max batch total tokens to 52125" (backends/v3/src/lib.rs:137).
    pool = seen.pool()
    assert pool is not None and (pool.count, pool.unit) == (52125, "token")
    # "KV-cache blocks: 52719, size: 1" is the first shard's: 52719 x 1 != 52125, the router took the
    # smaller shard's (sharded_client.rs warmup: the minimum).
    assert _figure(seen, "kv_cache_blocks") == 52719 and _figure(seen, "block_size") == 1
    assert any("smallest shard" in n for n in seen.notes)
    # Args: model_id "/models/gemma-3-27b-it", num_shard Some(2); "Maximum total tokens defaulted to 8000".
    assert seen.settings == {"model": "/models/gemma-3-27b-it", "tp": 2, "max_model_len": 8000}
    assert _figure(seen, "attention") == "flashinfer" and _figure(seen, "attention_block_size") == 1
    assert _figure(seen, "cuda_memory_fraction") == "1.0"
    assert seen.unread == ()


def test_compose_prefixed_log_cut_before_warm_up_names_the_missing_pool() -> None:
    lines = clean_lines((LOGS / "issue3181-v3-qwen2.5-3b-compose.log").read_text())
    assert claims(lines)
    seen = read_log(lines, "issue3181")
    assert seen.pools == ()
    assert any(m.startswith("the pool") for m in seen.missing)
    assert _figure(seen, "cuda_graphs") == "1,2,4,8,16,32"
    assert _figure(seen, "prefix_caching") == "True"
    # "Using Attention = flashinfer": models/globals.py pages flashinfer's cache by 1 token.
    assert _figure(seen, "attention_block_size") == 1


def test_one_line_args_dump_of_tgi_0_9() -> None:
    seen = _log("issue832-v0.9.4-args-one-line.log")
    # Args { model_id: "meta-llama/Llama-2-13b-chat-hf", num_shard: Some(4), max_total_tokens: 8192, ... }
    assert seen.settings == {"model": "meta-llama/Llama-2-13b-chat-hf", "tp": 4, "max_model_len": 8192}
    assert any("--max-batch-total-tokens 16,000" in n for n in seen.notes)
    assert seen.pools == ()


def test_parse_args_unwraps_some_over_lines() -> None:
    text = 'Args { model_id: "m", num_shard: Some(\n 2,\n), dtype: None, cors_allow_origin: [], port: 80 }'
    assert parse_args(text.replace("\n", " ")) == {
        "model_id": "m", "num_shard": "2", "dtype": "None", "cors_allow_origin": "[]", "port": "80",
    }  # fmt: skip


def test_a_mangled_pool_line_is_named_not_skipped() -> None:
    text = (LOGS / "v2.0-ms-build-mi300-llama3-8b-2shards.log").read_text()
    mangled = text.replace("Setting max batch total tokens to 801568", "Setting max batch total tokens to ???")
    seen = read_log(clean_lines(mangled), "mangled")
    assert seen.pools == ()
    assert len(seen.unread) == 1 and seen.unread[0].startswith("log line 23: ")
    assert "tokens to ???" in seen.unread[0]


def test_other_engines_logs_are_not_claimed() -> None:
    for path in (FIXTURES / "logs").glob("*/*.log"):
        if path.parent.name != "tgi":
            assert not claims(clean_lines(path.read_text())), path


def test_json_output_lines_and_a_model_that_does_not_size_its_pool() -> None:
    # --json-output (tracing-subscriber's JSON, launcher/src/main.rs) and the router's v1.4.x lines
    # for a model without automatic sizing (router/src/main.rs: warn "Model does not support automatic
    # max batch total tokens", then the flag's or the default 16000).
    lines = [
        '{"timestamp":"2024-03-04T16:38:11.273900Z","level":"WARN","message":"Model does not support automatic max '
        'batch total tokens","target":"text_generation_router","filename":"router/src/main.rs","line_number":224}',
        '{"timestamp":"2024-03-04T16:38:11.273926Z","level":"INFO","message":"Setting max batch total tokens to '
        '16000","target":"text_generation_router","filename":"router/src/main.rs","line_number":246}',
    ]
    assert claims(lines)
    seen = read_log(lines, "json")
    pool = seen.pool()
    assert pool is not None and (pool.count, pool.source) == (16000, "log line 2")
    assert any(n.startswith("log line 1: this model does not size its pool") for n in seen.notes)
    assert seen.unread == ()
