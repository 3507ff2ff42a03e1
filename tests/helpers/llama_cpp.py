"""The real llama.cpp for the tests, and what it measured beside kvcalc's estimate.

llama-cpp-python 0.3.36 (llama.cpp 0c1e570) runs in the probe's own child process
(kvcalc.engines.llamacpp.probe.measure_file); the tests that need it are skipped without it
(``needs_llama_cpp``, or ``pytest.importorskip("llama_cpp")`` in the test).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvcalc import api
from kvcalc.engines.llamacpp import LlamaCpp
from kvcalc.engines.llamacpp import probe as llamacpp_probe
from kvcalc.engines.llamacpp.probe import llama_cpp_available
from kvcalc.spec import AttentionCache, LatentCache, NoCache, StateCache

needs_llama_cpp = pytest.mark.skipif(
    not llama_cpp_available(), reason="llama_cpp (and gguf) not installed: pip install 'kvcalc[llamacpp]'"
)

# (tokens per sequence, sequences) for api.probe_llamacpp: below a ubatch, and several sequences.
PROBE_WORKLOADS = ((1000, 1), (5000, 3))
# (tokens per sequence, sequences, one unified stream) for the contexts of ``run_llama_cpp``.
CONTEXT_WORKLOADS = [(1000, 1, False), (4096, 3, False), (3000, 2, True), (700, 5, False)]

# The probe's own patterns for llama.cpp's log: the layers it gave K/V (``llama_kv_cache: layer N``),
# those it gave recurrent state, and a per-layer print_info figure read as one value per layer.
KV_LAYER = llamacpp_probe._KV_LAYER_LINE
RS_LAYER = llamacpp_probe._RS_LAYER_LINE
per_layer = llamacpp_probe._per_layer
# Every print_info figure llama.cpp logs loading a model (name, value).
INFO = re.compile(r"print_info: (\w+) += (.+)")


def run_llama_cpp(path: Path, contexts: list[dict[str, Any]]) -> dict[str, Any]:
    """llama.cpp's log of loading the file (no_alloc: sized, not allocated) and of each context,
    through the probe's own child process (kvcalc.engines.llamacpp.probe.measure_file), with what the
    probe's parser read from each context's log (its KV caches and recurrent memory)."""
    from kvcalc.engines.llamacpp.probe import measure_file

    answer = measure_file(path, contexts, timeout=600, no_alloc=True)
    results = [{**r, "ok": "error" not in r} for r in answer["results"]]
    return {"load": answer["load"], "model": answer["model"], "results": results}


def measured_bytes(result: dict[str, Any]) -> dict[str, int]:
    """llama.cpp's K, V, R and S bytes as the probe's parser rebuilt them from what llama.cpp printed
    (cells, streams, the layers it placed, the per-layer K/V widths, n_embd_r / n_embd_s from the
    SSM sizes or lfm2's shortconv.l_cache), each printing as llama.cpp printed its MiB."""
    found = {"k": 0, "v": 0, "r": 0, "s": 0}
    for kv in result["caches"]:
        assert kv["prints_as_logged"], kv
        found["k"] += kv["k_bytes"]
        found["v"] += kv["v_bytes"]
    for rs in result["recurrent"]:
        assert rs["rs_seq"] == 0 and rs["r_prints_as_logged"] and rs["s_prints_as_logged"], rs
        assert rs["p_mib"] == "0.00"  # llama.cpp's P (PLE conv history): qwen4exp only
        found["r"] += rs["r_bytes"]
        found["s"] += rs["s_bytes"]
    return found


def estimated_bytes(path: Path, tokens: int, batch: int, unified: bool) -> dict[str, int]:
    """kvcalc's K, V, R (conv) and S (recurrent) bytes under --engine llama.cpp (an MLA layer's
    latent + rope row is its K; a MoE or MLP layer holds nothing)."""
    est = api.estimate(str(path), tokens=tokens, batch=batch, engine="llama.cpp", options={"kv_unified": unified})
    engine = LlamaCpp()
    found = {"k": 0, "v": 0, "r": 0, "s": 0}
    for g in est.groups:
        if isinstance(g.cache, StateCache):
            (conv, conv_type), (rec, rec_type) = engine.state_parts(g.cache)
            assert conv_type is not None and rec_type is not None
            found["r"] += g.layers * batch * conv * conv_type.bytes_per_element
            found["s"] += g.layers * batch * rec * rec_type.bytes_per_element
        elif not isinstance(g.cache, NoCache):
            assert isinstance(g.cache, AttentionCache | LatentCache)
            k_row, v_row, _ = engine.rows(g.cache, 1)
            found["k"] += g.layers * g.slots * k_row * 2  # f16
            found["v"] += g.layers * g.slots * v_row * 2
    assert sum(found.values()) == est.total_bytes
    return found
