"""llama.cpp's readers: llama-server's endpoints (answers written from llama.cpp 0c1e570's source,
tests/fixtures/servers/llama-server-0c1e570/written-gpt-oss-c32768-auto/README.md) and llama.cpp's
start-up logs (real published logs, tests/fixtures/logs/), and kvcalc's pool beside a log's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvcalc.api import estimate
from kvcalc.engines import observing
from kvcalc.engines.llamacpp import observe
from kvcalc.engines.observing import Answer, Observation, clean_lines
from tests.helpers.fake_server import Route, fake_server
from tests.helpers.fake_server import http_getter as _get

FIXTURES = Path(__file__).parents[2] / "fixtures"
SERVER = FIXTURES / "servers" / "llama-server-0c1e570" / "written-gpt-oss-c32768-auto"
LOGS = FIXTURES / "logs"
MIB = 2**20
READER = observe.SERVERS[0]


def _routes(**changes: Any) -> dict[str, Any]:
    routes: dict[str, Any] = {
        "/props": json.loads((SERVER / "props.json").read_text()),
        "/slots": json.loads((SERVER / "slots.json").read_text()),
        "/v1/models": json.loads((SERVER / "models.json").read_text()),
        "/metrics": Route((SERVER / "metrics.txt").read_text()),
    }
    routes.update(changes)
    return routes


def _serve(routes: dict[str, Any]) -> tuple[bool, Observation, list[tuple[str, str]]]:
    with fake_server(routes) as server:
        get = _get(server.url)
        found = READER.identify(get)
        return found, READER.read(get, server.url), server.seen


def _figure(obs: Observation, name: str) -> Any:
    return next(f for f in obs.figures if f.name == name)


def _log(name: str, claimed: bool = True) -> Observation:
    path = LOGS / name
    lines = clean_lines(path.read_text())
    assert lines[0].startswith("# source: https://github.com/")
    # A log with Ollama's own Go lines is its reader's; the llama.cpp lines in it still read.
    assert observe.LOGS[0].claims(lines) == claimed
    return observe.LOGS[0].read(lines, str(path))


# --- llama-server -------------------------------------------------------------------------------------


def test_plain_server_reads_slots_context_build_and_usage() -> None:
    found, obs, seen = _serve(_routes())
    assert found
    assert all(method == "GET" for method, _ in seen)
    assert {path for _, path in seen} <= set(READER.paths)
    # props.json: build_info "b11312-0c1e570" -> llama-server at build 11312; 4 slots (the auto default),
    # per-slot n_ctx 32,768 which is the whole unified cache (llama_n_ctx_seq = n_ctx when unified):
    # 32,768 / 4 = 8,192 tokens a slot, as commandline.py reads "llama-server -c 32768".
    assert obs.engine == "llama-server@b11312"
    assert obs.release == "b11312-0c1e570"
    assert obs.settings == {"model": "/models/gpt-oss-20b-mxfp4.gguf", "batch": 4, "tokens": 8192}
    assert _figure(obs, "n_ctx (per slot)").source == "GET /props default_generation_settings.n_ctx"
    assert _figure(obs, "n_ctx_train").value == 131_072
    assert obs.pools == ()
    assert observe.POOL_MISSING in obs.missing
    assert any("share one cache" in m for m in obs.missing)
    # slots.json: slot 0 processing; n_prompt_tokens 1,200 + 300 (slot 1 idle, its tokens still cached) = 1,500
    # of 4 x 8,192 = 32,768 cells. metrics.txt: requests_deferred 2.
    usage = obs.usage
    assert usage is not None
    assert (usage.running, usage.waiting, usage.used_tokens) == (1, 2, 1500)
    assert usage.used_fraction == pytest.approx(1500 / 32_768)
    assert set(usage.derived) == {"used_tokens", "used_fraction"}


def test_server_with_two_slots_is_taken_as_separate_streams() -> None:
    # -np 2 without -kvu: llama_n_ctx_seq = pad(n_ctx / 2, 256), each slot its own 16,384 cells, 32,768 in all.
    props = json.loads((SERVER / "props.json").read_text())
    props["total_slots"], props["default_generation_settings"]["n_ctx"] = 2, 16_384
    found, obs, _ = _serve(_routes(**{"/props": props, "/metrics": Route({"error": "no"}, status=501)}))
    assert found
    assert obs.engine == "llama.cpp@b11312"
    assert (obs.settings["batch"], obs.settings["tokens"]) == (2, 16_384)
    assert any("-kvu" in m for m in obs.missing)
    assert obs.usage is not None and obs.usage.waiting is None  # no --metrics


def test_router_and_no_slots_endpoint_give_a_partial_answer() -> None:
    # server-models.cpp get_router_props: a router's bare /props, n_ctx 0 and model_path "none".
    router = {"role": "router", "max_instances": 4, "models_autoload": True, "model_alias": "llama-server",
              "model_path": "none", "default_generation_settings": {"params": {}, "n_ctx": 0},
              "build_info": "b11312-0c1e570"}  # fmt: skip
    found, obs, _ = _serve({"/props": router, "/slots": Route({"error": "off"}, status=501)})
    assert found
    assert "tokens" not in obs.settings and "model" not in obs.settings
    assert any("router" in m for m in obs.missing)
    assert "the model: give MODEL" in obs.missing
    assert obs.usage is None


def test_identify_refuses_other_servers_and_404s() -> None:
    assert not _serve({})[0]  # every path a 404
    assert not READER.identify(lambda path: Answer(0, "connection refused"))
    # vLLM's /v1/models and SGLang's /server_info have no /props; Ollama answers /props with a 404.
    assert not _serve({"/v1/models": {"object": "list", "data": [{"id": "m", "max_model_len": 4096}]}})[0]
    for other in sorted((FIXTURES / "servers").glob("*/*.json")):
        if "llama-server" not in other.parent.name:
            assert not _serve({"/props": json.loads(other.read_text())})[0], other


# --- logs --------------------------------------------------------------------------------------------


def test_b8164_swa_log_pools_settings_and_build() -> None:
    obs = _log("llamacpp/b8164-gpt-oss-20b-swa-one-seq.log")
    assert obs.engine == "llama.cpp@b8164"
    # n_ubatch 512 and n_batch 2048 are llama.cpp's defaults: no setting, as commandline.py reads them.
    assert obs.settings == {"batch": 1, "tokens": 131_072, "k_dtype": "fp16", "v_dtype": "fp16"}
    kv, swa = obs.pool("kv"), obs.pool("swa")
    assert kv is not None and swa is not None
    # "size = 3072.00 MiB (131072 cells, 12 layers, 1/1 seqs)" and "size = 18.00 MiB (768 cells, ...)".
    assert (kv.count, kv.bytes, kv.bytes_exact, kv.source) == (131_072, 3072 * MIB, False, "log line 20")
    assert (swa.count, swa.bytes) == (768, 18 * MIB)
    assert obs.unread == ()


def test_b8193_server_log_is_the_unified_llama_server() -> None:
    obs = _log("llamacpp/b8193-gpt-oss-20b-server-auto-np4.log")
    # "n_parallel = 4 and kv_unified = true", n_ctx 32,768: 8,192 tokens each of 4 slots; one stream.
    assert obs.engine == "llama-server@b8193"
    assert (obs.settings["batch"], obs.settings["tokens"]) == (4, 8192)
    assert [(p.kind, p.count, p.bytes) for p in obs.pools] == [("kv", 32_768, 768 * MIB), ("swa", 1024, 24 * MIB)]


def test_old_spellings_kv_self_size_and_kv_size() -> None:
    # b4905: "init: kv_size = 2048, ..." and "KV self size = 9760.00 MiB"; n_ctx 2,048 over n_seq_max 4.
    obs = _log("llamacpp/b4905-deepseek-r1-full-kv.log")
    assert obs.engine == "llama.cpp@b4905"
    assert (obs.settings["batch"], obs.settings["tokens"]) == (4, 512)
    assert [(p.kind, p.count, p.bytes) for p in obs.pools] == [("kv", 2048, 9760 * MIB)]
    # b5331: llama_kv_cache_unified's kv_size 16,384 and KV self size 2,074 MiB over four CUDA buffers.
    obs = _log("llamacpp/b5331-deepseek-v3-latent-and-v.log")
    assert [(p.count, p.bytes) for p in obs.pools] == [(16_384, 2074 * MIB)]
    assert _figure(obs, "CUDA3 KV buffer MiB").value == 748.0


def test_ollama_log_without_n_seq_max_or_size_line() -> None:
    # Ollama 0.5.x: n_ctx 8,192, n_ctx_per_seq 2,048 (so 4 sequences), kv_size 8,192 and no size line.
    obs = _log("ollama/issue9362_qwen2_parallel4.log")
    assert (obs.settings["batch"], obs.settings["tokens"]) == (4, 2048)
    kv = obs.pool("kv")
    assert kv is not None and (kv.count, kv.bytes) == (8192, None)
    assert any("no size line" in n for n in obs.notes)
    assert any("build" in m for m in obs.missing)


def test_recurrent_and_streams_spellings() -> None:
    # LM Studio's runtime: "llama_kv_cache: size = 16384.00 MiB (262144 cells, 16 layers, 4/1 seqs)" (one
    # unified stream) and "llama_memory_recurrent: size = 598.50 MiB (4 cells, 64 layers, 4 seqs)".
    obs = _log("lmstudio/bug-tracker-1862-qwen3.6-27b.log")
    assert [(p.kind, p.count, p.bytes) for p in obs.pools] == [
        ("kv", 262_144, 16_384 * MIB), ("recurrent", 4, 598 * MIB + MIB // 2)]  # fmt: skip
    # Ollama 0.33.2 (llama.cpp with streams): "4096 cells ... 2/2 seqs" is 4,096 cells in each of 2 streams.
    obs = _log("ollama/v0.33.2-ministral3-3b-parallel2.log", claimed=False)
    kv = obs.pool("kv")
    assert kv is not None and kv.count == 2 * 4096


def test_timestamped_log_with_a_cut_size_line_names_it_unread() -> None:
    obs = _log("llamacpp/issue27680-dsv4-timestamped-iswa.log")
    kv, swa = obs.pool("kv"), obs.pool("swa")
    # non-SWA: 64,000 cells of 0 layers (DeepSeek V4 keeps its raw cache elsewhere), 0.00 MiB.
    assert kv is not None and (kv.count, kv.bytes) == (64_000, 0)
    # SWA: "creating SWA KV cache, size = 4352 cells", its size line cut off: cells, no bytes; the cut line unread.
    assert swa is not None and (swa.count, swa.bytes) == (4352, None)
    # And "creating DSV4 raw KV cache", a cache with no size kvcalc reads, named too.
    assert [u.split(":")[0] for u in obs.unread] == ["log line 9", "log line 16"]
    assert "creating DSV4 raw KV cache" in obs.unread[0]
    assert _figure(obs, "CUDA0 KV buffer MiB").value == 182.75


def test_memory_terms_from_model_and_compute_buffers() -> None:
    lines = ["build: 11312 (0c1e57098) with cc for x86_64-linux-gnu",
             "load_tensors:        CUDA0 model buffer size =  1000.50 MiB",
             "load_tensors:   CPU_Mapped model buffer size =   300.00 MiB",
             "llama_context:      CUDA0 compute buffer size =   398.38 MiB",
             "llama_context:  CUDA_Host compute buffer size =    20.01 MiB"]  # fmt: skip
    obs = observe.LOGS[0].read(lines, "-")
    weights, peak = obs.term("weights"), obs.term("activation peak")
    # Device buffers only: 1,000.50 MiB = 1,049,100,288 B; 398.38 MiB = 417,731,706.88 -> 417,731,707 B.
    assert weights is not None and weights.bytes == 1_049_100_288
    assert peak is not None and peak.bytes == 417_731_707
    assert obs.engine == "llama.cpp@b11312"


# --- kvcalc's pool beside the log's --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log", "engine"),
    [("b8164-gpt-oss-20b-swa-one-seq.log", "llama.cpp"), ("b8193-gpt-oss-20b-server-auto-np4.log", "llama-server")],
)
def test_pool_rules_predict_the_logs_cells_and_bytes(log: str, engine: str) -> None:
    obs = _log(f"llamacpp/{log}")
    rules = observing.pool_rules(engine)
    assert rules is not None and rules.sizing == "context" and rules.from_estimate is not None
    settings = obs.settings
    est = estimate(str(FIXTURES / "gpt-oss-20b.json"), tokens=settings["tokens"], batch=settings["batch"],
                   engine=obs.engine)  # fmt: skip
    predicted = {p.kind: p for p in rules.from_estimate(est)}
    # gpt-oss-20b: 12 full and 12 sliding (window 128) layers, 8 KV heads x 64, f16: 2,048 B a layer and cell,
    # 24,576 B a cell over 12 layers. b8164: full 131,072 cells (3,072 MiB), sliding pad(128 + 512, 256) = 768
    # (18 MiB); b8193 unified, 4 slots: full 32,768 (768 MiB), sliding pad(128 x 4 + 512, 256) = 1,024 (24 MiB).
    for pool in obs.pools:
        assert (predicted[pool.kind].count, predicted[pool.kind].bytes) == (pool.count, pool.bytes)
        assert predicted[pool.kind].unit_bytes == 12 * 2048


# falcon-mamba-7b (tests/fixtures/falcon-mamba-7b.json): 64 layers, d_inner 8,192, d_conv 4, d_state 16, states f32.
# Per layer and sequence: R (d_conv - 1) x d_inner = 24,576 x 4 B = 96 KiB, S d_state x d_inner = 131,072 x 4 B
# = 512 KiB; 64 layers: 6 MiB + 32 MiB = 38 MiB a cell. Two sequences: 2 cells, R 12.00, S 64.00, 76.00 MiB. The
# lines are written in each spelling's format (src/llama-memory-recurrent.cpp line 133 at 0c1e570; the older
# llama_kv_cache_recurrent's without rs_seq and P).
RECURRENT_LINES = {
    "0c1e570": "llama_memory_recurrent: size =   76.00 MiB (     2 cells,  64 layers,  2 seqs  0 rs_seq), "
    "R (f32):   12.00 MiB, S (f32):   64.00 MiB, P (f32):    0.00 MiB",
    "2025": "llama_kv_cache_recurrent: size =   76.00 MiB (     2 cells,  64 layers,  2 seqs), R (f32):   12.00 MiB, "
    "S (f32):   64.00 MiB",
}


@pytest.mark.parametrize("spelling", sorted(RECURRENT_LINES))
def test_recurrent_pool_beside_kvcalcs_prediction(spelling: str) -> None:
    lines = ["build: 11312 (0c1e57098) with cc for x86_64-linux-gnu", "llama_context: n_seq_max     = 2",
             "llama_context: n_ctx         = 4096", RECURRENT_LINES[spelling]]  # fmt: skip
    obs = observe.LOGS[0].read(lines, "-")
    pool = obs.pool("recurrent")
    assert pool is not None and (pool.count, pool.bytes) == (2, 76 * MIB)
    assert (obs.settings["batch"], obs.settings["tokens"]) == (2, 2048)
    rules = observing.pool_rules("llama.cpp")
    assert rules is not None and rules.from_estimate is not None
    est = estimate(str(FIXTURES / "falcon-mamba-7b.json"), tokens=2048, batch=2, engine=obs.engine)
    (predicted,) = rules.from_estimate(est)
    assert (predicted.kind, predicted.count, predicted.unit_bytes) == ("recurrent", 2, 38 * MIB)
    assert predicted.bytes == pool.bytes


def test_rollback_snapshots_are_noted() -> None:
    line = RECURRENT_LINES["0c1e570"].replace(" 0 rs_seq", " 3 rs_seq")
    buffer = "llama_memory_recurrent:      CUDA0 RS buffer size =    76.00 MiB"
    obs = observe.LOGS[0].read([buffer, line], "-")
    assert any(n.startswith("n_rs_seq 3:") for n in obs.notes)
    assert _figure(obs, "CUDA0 RS buffer MiB").value == 76.0
    assert obs.unread == ()


def test_server_lines_of_0c1e570_with_separate_streams() -> None:
    # server-context.cpp line 1231 at 0c1e570: "initializing, n_slots = %d, n_ctx_slot = %d, kv_unified = '%s'";
    # -np 2 without -kvu: two streams of pad(8,192 / 2, 256) = 4,096 cells, "4096 cells ... 2/2 seqs". A
    # Llama 3.1 8B shape (32 layers, 8 KV heads x 128): K q8_0 1,024 x 34/32 = 1,088 B, V f16 2,048 B a layer
    # and cell; x 32 layers x 8,192 cells: 272 + 512 = 784 MiB.
    lines = ["llama_context: n_seq_max     = 2", "llama_context: n_ctx         = 8192",
             "llama_context: kv_unified    = false",
             "llama_kv_cache: size =  784.00 MiB (  4096 cells,  32 layers,  2/2 seqs), K (q8_0):  272.00 MiB, "
             "V (f16):  512.00 MiB",
             "srv    load_model: initializing, n_slots = 2, n_ctx_slot = 4096, kv_unified = 'false'"]  # fmt: skip
    obs = observe.LOGS[0].read(lines, "-")
    assert obs.engine == "llama.cpp"  # no build line
    assert obs.settings == {"batch": 2, "tokens": 4096, "k_dtype": "q8_0", "v_dtype": "fp16"}
    kv = obs.pool("kv")
    assert kv is not None and (kv.count, kv.bytes) == (2 * 4096, 784 * MIB)
    assert _figure(obs, "n_ctx_slot").value == 4096


# --- a real llama-server 0c1e570, recorded (tests/fixtures/servers/llama-server-0c1e570/README.md) -------------

RECORDED = FIXTURES / "servers" / "llama-server-0c1e570"
PRINTED = 5243  # half of 0.01 MiB, llama.cpp's %.2f rounding: 0.005 x 1,048,576 = 5,242.88 B
# Each case's pools (kind, cells over all streams, bytes as printed), derived by hand from the models' shapes
# (the recordings' README): llama, 2 layers of 2 KV heads x 64: K or V row 128 x 2 B = 256 B, 1,024 B a cell.
RECORDED_POOLS = {
    # -c 4096 -np 2: two streams of 2,048 cells, "2048 cells ... 2/2 seqs": 4,096 x 1,024 B = 4 MiB.
    "llama-c4096-np2": ("llama.cpp@b11312", 2, 2048, [("kv", 4096, 4 * MIB)]),
    # -c 4096, auto: 4 slots sharing one stream of 4,096 cells, "4/1 seqs": 4 MiB; 1,024 tokens a slot.
    "llama-c4096-auto": ("llama-server@b11312", 4, 1024, [("kv", 4096, 4 * MIB)]),
    # q8_0 K and V: a row of 128 is 4 blocks x 34 B = 136 B: 4,096 x 2 x 2 x 136 = 2,228,224 B = 2.125 MiB,
    # printed "2.12": 2.12 x 1,048,576 = 2,222,981.12 -> 2,222,981 B.
    "llama-c4096-np2-q8_0-fa": ("llama.cpp@b11312", 2, 2048, [("kv", 4096, 2_222_981)]),
    # gemma2, 2 full and 2 sliding layers (window 256): full 4,096 cells x 2 layers x 512 B = 4 MiB; sliding
    # pad(min(2,048, 256 x 1 + 512), 256) = 768 cells a stream, 1,536 over 2: x 2 x 512 B = 1.5 MiB.
    "gemma2-swa-c4096-np2": ("llama.cpp@b11312", 2, 2048, [("kv", 4096, 4 * MIB), ("swa", 1536, 3 * MIB // 2)]),
    # granitehybrid MMAM: 1 attention layer of 2 KV heads x 32 (256 B a cell) x 4,096 = 1 MiB; 2 recurrent
    # cells: R 20,736 + S 98,304 = 119,040 B, printed "0.11" = 115,343.36 -> 115,343 B.
    "granitehybrid-c4096-np2": ("llama.cpp@b11312", 2, 2048, [("kv", 4096, MIB), ("recurrent", 2, 115_343)]),
    # mamba, 2 layers: R 12,288 + S 65,536 = 77,824 B, printed "0.07" = 73,400.32 -> 73,400 B.
    "mamba-c4096-np2": ("llama.cpp@b11312", 2, 2048, [("recurrent", 2, 73_400)]),
}


@pytest.mark.parametrize("case", sorted(RECORDED_POOLS))
def test_recorded_server_log_pools(case: str) -> None:
    engine, batch, tokens, pools = RECORDED_POOLS[case]
    path = RECORDED / case / "startup-lv4.log"
    lines = clean_lines(path.read_text())
    assert observe.LOGS[0].claims(lines)
    obs = observe.LOGS[0].read(lines, str(path))
    assert obs.engine == engine
    assert (obs.settings["batch"], obs.settings["tokens"]) == (batch, tokens)
    assert obs.settings["model"] == f"/tmp/lcs/rec/{case.partition('-')[0]}.gguf"
    assert [(p.kind, p.count, p.bytes) for p in obs.pools] == pools
    assert obs.unread == ()


@pytest.mark.parametrize("case", sorted(RECORDED_POOLS))
def test_recorded_default_log_says_the_cache_lines_need_lv4(case: str) -> None:
    # At the default verbosity 0c1e570 prints only "initializing, n_slots = N, n_ctx_slot = N, kv_unified = ..."
    engine, batch, tokens, _ = RECORDED_POOLS[case]
    obs = observe.LOGS[0].read(clean_lines((RECORDED / case / "startup-default.log").read_text()), "-")
    assert obs.engine == engine.split("@")[0]  # no build line either
    assert (obs.settings["batch"], obs.settings["tokens"]) == (batch, tokens)
    assert obs.pools == ()
    assert any("-lv 4" in m for m in obs.missing)


@pytest.mark.parametrize("case", sorted(RECORDED_POOLS))
def test_recorded_server_answers(case: str) -> None:
    engine, batch, tokens, _ = RECORDED_POOLS[case]
    folder = RECORDED / case
    routes = {"/props": json.loads((folder / "props.json").read_text()),
              "/slots": json.loads((folder / "slots.json").read_text()),
              "/v1/models": json.loads((folder / "v1_models.json").read_text()),
              "/metrics": Route((folder / "metrics-enabled.txt").read_text())}  # fmt: skip
    found, obs, seen = _serve(routes)
    assert found and all(method == "GET" for method, _ in seen)
    # /props n_ctx is 4,096 for the unified auto server (the whole cache) and 2,048 a slot with -np 2: the
    # context kvcalc takes from them is the log's cells, 4,096, either way.
    assert obs.engine == engine
    assert (obs.settings["batch"], obs.settings["tokens"]) == (batch, tokens)
    assert batch * tokens == 4096  # -c 4096 in every case
    assert obs.usage is not None and (obs.usage.running, obs.usage.waiting, obs.usage.used_tokens) == (0, 0, 0)
    # Without --metrics the server answers 501: no deferred requests known.
    routes["/metrics"] = Route((folder / "metrics.txt").read_text(), status=501)
    usage = _serve(routes)[1].usage
    assert usage is not None and usage.waiting is None


@pytest.mark.parametrize("case", sorted(RECORDED_POOLS))
def test_pool_rules_equal_the_recorded_pools(case: str, tmp_path: Path) -> None:
    from tests.helpers import llama_server

    makers = {"llama": llama_server.llama_gguf, "gemma2": llama_server.gemma2_gguf,
              "granitehybrid": llama_server.granite_hybrid_gguf, "mamba": llama_server.mamba_gguf}  # fmt: skip
    model = makers[case.partition("-")[0]](tmp_path / "model.gguf")  # the recorded run's GGUF, written again
    obs = observe.LOGS[0].read(clean_lines((RECORDED / case / "startup-lv4.log").read_text()), "-")
    settings = dict(obs.settings)
    rules = observing.pool_rules(obs.engine.split("@")[0])
    assert rules is not None and rules.from_estimate is not None
    est = estimate(str(model), tokens=settings["tokens"], batch=settings["batch"], engine=obs.engine,
                   kv_dtype=settings.get("k_dtype"))  # fmt: skip
    predicted = {p.kind: p for p in rules.from_estimate(est)}
    assert sorted(predicted) == sorted(p.kind for p in obs.pools)
    for pool in obs.pools:
        assert pool.bytes is not None
        assert predicted[pool.kind].count == pool.count
        assert abs(predicted[pool.kind].bytes - pool.bytes) <= PRINTED
