"""The llama.cpp probe's child process (``python -m kvcalc.engines.llamacpp.probe_child REQUEST.json``,
started by kvcalc.engines.llamacpp.probe.measure_file): it loads the GGUF with llama_cpp (imported only
here), creates each requested context, and reads what llama.cpp logs as it allocates each KV cache
(``llama_kv_cache: size = ...``, src/llama-kv-cache.cpp), the recurrent memory (``llama_memory_recurrent:
size = ...``, src/llama-memory-recurrent.cpp) and the indexer's key cache, rebuilding their bytes with
llama.cpp's own ``ggml_row_size``. It prints one JSON line: the results, the model's figures, the logs.
"""

from __future__ import annotations

import json
import re
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

from kvcalc.engines.llamacpp.architectures import Ssm, architecture

_SIZE_LINE = re.compile(
    r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+)/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB"
)
_SWA_LINE = re.compile(r"llama_kv_cache_iswa: creating +(non-SWA|SWA) KV cache, size = (\d+) cells")
# The sparse-attention indexer's key cache: llama_kv_cache_dsa (deepseek32, glm-dsa) and llama_kv_cache_msa
# (minimax-m3) log "creating indexer KV cache" and then build a second llama_kv_cache, which logs its
# own layers and size line (src/llama-kv-cache-dsa.cpp, src/llama-kv-cache-msa.cpp, llama.cpp 0c1e570).
_INDEXER_LINE = re.compile(r"llama_kv_cache_(dsa|msa): creating indexer KV cache")
_INFO_LINE = re.compile(
    r"print_info: (n_embd_k_gqa|n_embd_v_gqa|n_embd_head_v|n_embd|n_head|n_layer|n_swa|is_swa_any|ssm_d_conv"
    r"|ssm_d_inner|ssm_d_state|ssm_n_group) += (.+)"
)
# The recurrent memory of a recurrent or hybrid model (src/llama-memory-recurrent.cpp, llama.cpp 0c1e570,
# the constructor's LLAMA_LOG_INFO): "size = X MiB (C cells, L layers, N seqs Q rs_seq), R (t): MiB,
# S (t): MiB, P (t): MiB", L being every layer of the model; the layers it holds are the ones listed
# "llama_memory_recurrent, layer N: dev = ..." before it (the others: "layer N: skipped").
_RS_SIZE_LINE = re.compile(
    r"llama_memory_recurrent: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers, +(\d+) seqs +(\d+) rs_seq\), "
    r"R \((\w+)\): +([\d.]+) MiB, S \((\w+)\): +([\d.]+) MiB(?:, P \((\w+)\): +([\d.]+) MiB)?"
)
_RS_LAYER_LINE = re.compile(r"llama_memory_recurrent, layer +(\d+): dev = ")
# The recurrent rows (llama_hparams::n_embd_r / n_embd_s, src/llama-hparams.cpp, 0c1e570) are rebuilt for
# the architectures whose Architecture.ssm rule the probe knows: the Mamba case from the ssm_* figures
# print_info prints, lfm2's short convolution (shortconv.l_cache set) and Kimi's KDA (kda.head_dim set).
# Other recurrent rules (RWKV's token shift, MiniMax's linear attention) are not rebuilt: their rows are
# reported as not understood.
_CPARAM_LINE = re.compile(r"llama_context: (n_ctx|n_ctx_seq|n_batch|n_ubatch|n_seq_max) += (\d+)")
_ERROR_LINE = re.compile(r"llama_init_from_model: (.+)")
_KV_LAYER_LINE = re.compile(r"llama_kv_cache: layer +(\d+): dev = ")
# What llama.cpp says when a model's metadata is refused (a missing key: "key not found in model: K"),
# and the assertion an abort prints on stderr (a dimension of 0 when a key sizing a tensor is missing).
_LOAD_ERROR = re.compile(r"llama_model_load: error loading model: (.+)")
_ASSERT_LINE = re.compile(r"([\w-]+\.(?:c|cpp|h):\d+): (GGML_ASSERT\(.+\) failed|GGML_ABORT.*)")
# sched_reserve's "<buffer type> compute buffer size = X MiB": the graph's scratch per backend.
_COMPUTE_LINE = re.compile(r"\w+: +(\S+) compute buffer size = +([\d.]+) MiB")


def _per_layer(text: str, layers: int) -> list[int]:
    """print_info's per-layer figure: one number for every layer, or ``[a, b, ...]``."""
    text = text.strip()
    if text.startswith("["):
        return [int(v) for v in text.strip("[]").split(",")]
    return [int(text)] * layers


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Load the GGUF once and create each context of ``request["contexts"]`` (in this process)."""
    import ctypes

    lc: Any = import_module("llama_cpp")
    log: list[str] = []

    def append(level: int, text: bytes | None, user_data: Any) -> None:
        log.append((text or b"").decode("utf-8", errors="replace"))

    capture = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(append)
    lc.llama_log_set(capture, None)
    lc.llama_backend_init()
    lib = lc.llama_cpp._lib

    class GgufInitParams(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]

    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, GgufInitParams]
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    lib.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    lib.ggml_row_size.restype = ctypes.c_size_t
    lib.ggml_type_name.argtypes = [ctypes.c_int]
    lib.ggml_type_name.restype = ctypes.c_char_p
    # ggml.h enum ggml_type ids of the cache types, checked against ggml's own names.
    type_ids = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
    for name, number in type_ids.items():
        if lib.ggml_type_name(number) != name.encode():
            return {"error": f"this ggml numbers its types differently: {number} is not {name}"}

    metadata = lib.gguf_init_from_file(request["gguf"].encode(), GgufInitParams(True, None))
    if not metadata:
        return {"error": f"llama.cpp could not read {request['gguf']}"}
    unset = lc.llama_model_set_tensor_data_t(lambda tensor, user_data: None)
    model_params = lc.llama_model_default_params()
    model_params.n_gpu_layers = 0  # cache sizes do not depend on the device; keep the probe on the CPU
    model_params.no_alloc = bool(request.get("no_alloc", False))
    model = lc.llama_model_init_from_user(metadata, unset, None, model_params)
    if not model:
        lib.gguf_free(metadata)
        refused = _LOAD_ERROR.findall("".join(log))
        return {"error": "llama.cpp could not build the model: " + (refused[-1] if refused else _last_error(log))}
    info = _model_info(log)
    info["recurrent_rows"] = _recurrent_rows(info, lambda key: _meta(lc, model, key))
    info["indexer_rows"] = _indexer_rows(info, lambda key: _meta(lc, model, key))
    loaded = len(log)
    results = []
    for asked in request["contexts"]:
        start = len(log)
        params = lc.llama_context_default_params()
        params.n_ctx = asked["n_ctx"]
        params.n_seq_max = asked["n_seq_max"]
        params.n_batch = asked["n_batch"]
        params.n_ubatch = asked["n_ubatch"]
        params.kv_unified = asked["kv_unified"]
        params.swa_full = asked["swa_full"]
        params.type_k = type_ids[asked["type_k"]]
        params.type_v = type_ids[asked["type_v"]]
        if "flash_attn" in asked:  # llama_flash_attn_type: 0 disabled, 1 enabled (default -1: auto)
            params.flash_attn_type = 1 if asked["flash_attn"] else 0
        params.n_threads = params.n_threads_batch = 1
        ctx = lc.llama_init_from_model(model, params)
        text = "".join(log[start:])
        if not ctx:
            results.append({"error": _last_error(log[start:]), "log": text})
            continue
        lc.llama_free(ctx)
        results.append({**_context_result(text, info, type_ids, lib.ggml_row_size), "log": text})
    lc.llama_model_free(model)
    lib.gguf_free(metadata)
    # The raw logs too: recurrent state buffers (llama_memory_recurrent) are read from them by tests.
    return {"results": results, "model": info, "load": "".join(log[:loaded]),
            "llama_cpp_version": getattr(lc, "__version__", None)}  # fmt: skip


_ONE_FIGURE = ("n_embd", "n_embd_head_v", "n_head", "ssm_d_conv", "ssm_d_inner", "ssm_d_state", "ssm_n_group")


def _model_info(log: list[str]) -> dict[str, Any]:
    found = dict(_INFO_LINE.findall("".join(log)))
    layers = int(found["n_layer"])
    return {
        "n_layer": layers,
        "n_swa": int(found.get("n_swa", "0")),
        "n_embd_k_gqa": _per_layer(found["n_embd_k_gqa"], layers),
        "n_embd_v_gqa": _per_layer(found["n_embd_v_gqa"], layers),
        # one figure each (the hidden size; the SSM sizes of recurrent architectures): n_embd_r / n_embd_s
        **{k: found[k].strip() for k in _ONE_FIGURE if k in found},
    }


def _meta(lc: Any, model: Any, key: str) -> str | None:
    """A metadata value of the loaded model as llama.cpp prints it (llama_model_meta_val_str)."""
    buf = bytes(256)
    n = lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf[:n].decode() if n >= 0 else None


def _recurrent_rows(info: dict[str, Any], meta: Any) -> list[int] | None:
    """llama_hparams::n_embd_r and n_embd_s (src/llama-hparams.cpp, 0c1e570) of the loaded model, the
    elements of one R (conv) row and one S (recurrent state) row, from what llama.cpp printed and the
    model's metadata; None for an architecture whose rule the probe does not rebuild (Architecture.ssm)."""
    arch = meta("general.architecture")
    record = architecture(arch)
    state = record.ssm if record is not None else None
    l_cache = meta(f"{arch}.shortconv.l_cache")
    if state is Ssm.SHORTCONV and l_cache is not None and "n_embd" in info:
        return [int(info["n_embd"]) * (int(l_cache) - 1), 0]
    kda, kernel = meta(f"{arch}.kda.head_dim"), meta(f"{arch}.ssm.conv_kernel")
    if state is Ssm.KDA and kda is not None and kernel is not None and "n_head" in info:
        # llama_hparams::n_head() is layer 0's count (print_info lists every layer's when they differ)
        heads = int(str(info["n_head"]).strip("[]").split(",")[0])
        d_conv = int(kernel) - 1 if int(kernel) > 0 else 3  # n_embd_r's fallback for a kernel of 0
        return [3 * d_conv * heads * int(kda), int(kda) * int(kda) * heads]
    ssm = [info[k] for k in ("ssm_d_conv", "ssm_d_inner", "ssm_d_state", "ssm_n_group") if k in info]
    if state is not None and state.mamba_rows and len(ssm) == 4:
        d_conv, d_inner, d_state, n_group = (int(v) for v in ssm)
        return [max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state), d_state * d_inner]
    return None


def _indexer_rows(info: dict[str, Any], meta: Any) -> list[int] | None:
    """The elements of one K row and one V row of the indexer cache (llama_kv_cache_dsa / _msa,
    llama.cpp 0c1e570), or None where the model has no indexer key length. Both build it from the
    model's hparams with n_head_kv 1 and n_embd_head_k = indexer_head_size (the GGUF's
    attention.indexer.key_length), so a K row is one key of that width; llama_kv_cache gives it a V
    row (n_embd_v_gqa = one head of n_embd_head_v) unless the model is MLA (src/llama-kv-cache.cpp
    ``has_v = !is_mla``; llama_hparams::is_mla: key_length_mla and value_length_mla both set)."""
    arch = meta("general.architecture")
    key = meta(f"{arch}.attention.indexer.key_length")
    if key is None:
        return None
    mla = all(int(meta(f"{arch}.attention.{k}") or 0) for k in ("key_length_mla", "value_length_mla"))
    if mla:
        return [int(key), 0]
    return [int(key), int(info["n_embd_head_v"])] if "n_embd_head_v" in info else None


def recurrent_layers(log: str) -> list[int]:
    """The layers llama.cpp placed in its recurrent memory, in order (its ``layer N: dev`` lines)."""
    return [int(x) for x in _RS_LAYER_LINE.findall(log)]


def kv_layers(log: str) -> list[int]:
    """The layers llama.cpp placed in its KV caches, in order (its ``layer N: dev`` lines)."""
    return [int(x) for x in _KV_LAYER_LINE.findall(log)]


def _recurrent_result(
    text: str, rows: list[int] | None, type_ids: dict[str, int], row_size: Any
) -> list[dict[str, Any]]:
    """Each recurrent memory llama.cpp created: its rows (cells x (1 + rs_seq)), the layers it holds,
    and its R and S bytes rebuilt from them, n_embd_r / n_embd_s and ggml_row_size, with whether they
    print as llama.cpp printed its MiB. P, the PLE conv history (cache_ple_r_l*,
    src/llama-memory-recurrent.cpp), has a row only in qwen4exp's PLE layer: it is taken as logged."""
    memories = []
    start = 0
    for m in _RS_SIZE_LINE.finditer(text):
        _, cells, _, seqs, rs_seq, r_type, r_mib, s_type, s_mib, p_type, p_mib = m.groups()
        held = [int(x) for x in _RS_LAYER_LINE.findall(text, start, m.start())]
        start = m.end()
        n_rows = int(cells) * (1 + int(rs_seq))  # llama_memory_recurrent: mem_size x (1 + n_rs_seq) rows
        known = rows is not None and r_type in type_ids and s_type in type_ids
        r_bytes = n_rows * len(held) * row_size(type_ids[r_type], rows[0]) if known and rows else 0
        s_bytes = n_rows * len(held) * row_size(type_ids[s_type], rows[1]) if known and rows else 0
        memories.append({
            "cells": int(cells), "rows": n_rows, "layers": len(held), "held": held, "seqs": int(seqs),
            "rs_seq": int(rs_seq), "r_type": r_type, "s_type": s_type, "r_bytes": r_bytes, "s_bytes": s_bytes,
            "r_mib": r_mib, "s_mib": s_mib, "p_type": p_type or r_type, "p_mib": p_mib or "0.00",
            "rows_known": known,
            "r_prints_as_logged": known and f"{r_bytes / 2**20:.2f}" == r_mib,
            "s_prints_as_logged": known and f"{s_bytes / 2**20:.2f}" == s_mib,
        })  # fmt: skip
    return memories


def _context_result(text: str, info: dict[str, Any], type_ids: dict[str, int], row_size: Any) -> dict[str, Any]:
    """Each KV cache llama.cpp created (its cells, layers, streams, types) with its bytes rebuilt
    from them and llama.cpp's ggml_row_size, and whether they print as llama.cpp printed its MiB."""
    labels = [kind for kind, _ in _SWA_LINE.findall(text)]
    caches = []
    start = 0
    for i, m in enumerate(_SIZE_LINE.finditer(text)):
        _, cells, layers, seqs, streams, k_type, k_mib, v_type, v_mib = m.groups()
        side = "swa" if labels and i < len(labels) and labels[i] == "SWA" else "full"
        indexer = _INDEXER_LINE.search(text, start, m.start())
        widths_k, widths_v = info["n_embd_k_gqa"], info["n_embd_v_gqa"]
        n = int(layers)
        # The layers this cache holds, as llama.cpp lists them before its size line ("layer N: dev
        # = ..."); each with its own K/V widths (a GGUF file's layers may differ).
        held = [int(x) for x in _KV_LAYER_LINE.findall(text, start, m.start())]
        start = m.end()
        listed = len(held) == n
        if not listed:
            held = [0] * n  # no list: one geometry per side (gguf_plan checks), any layer's widths serve
        rows_known = True
        if indexer is not None:
            # The indexer's cache: every layer it holds has one key row (and, not MLA, one V head row).
            side = "indexer"
            rows = info.get("indexer_rows")
            rows_known = rows is not None
            widths_k = widths_v = {layer: 0 for layer in held}
            if rows is not None:
                widths_k, widths_v = {layer: rows[0] for layer in held}, {layer: rows[1] for layer in held}
        k_rows = sum(row_size(type_ids[k_type], widths_k[layer]) for layer in held)
        if indexer is not None:  # the V row by llama.cpp's rule, not by the V figure it printed
            v_rows = sum(row_size(type_ids[v_type], widths_v[layer]) for layer in held)
        else:
            v_rows = sum(row_size(type_ids[v_type], widths_v[layer]) for layer in held) if float(v_mib) > 0 else 0
        k_bytes = int(cells) * int(streams) * k_rows
        v_bytes = int(cells) * int(streams) * v_rows
        # llama.cpp lists a layer with no K/V heads (deci's no-op and linear layers: n_head_kv 0)
        # among the cache's layers with 0-wide tensors; kvcalc counts only layers that hold K/V.
        holding = n if indexer is not None else sum(1 for layer in held if widths_k[layer] + widths_v[layer] > 0)
        caches.append({
            "side": side, "cells": int(cells), "layers": holding, "seqs": int(seqs), "streams": int(streams),
            "k_type": k_type, "v_type": v_type, "k_bytes": k_bytes, "v_bytes": v_bytes,
            "k_mib": k_mib, "v_mib": v_mib, "held": held if listed else None,
            "family": indexer[1] if indexer is not None else None, "rows_known": rows_known,
            "prints_as_logged": rows_known and f"{k_bytes / 2**20:.2f}" == k_mib and f"{v_bytes / 2**20:.2f}" == v_mib,
        })  # fmt: skip
    cparams = {k: int(v) for k, v in _CPARAM_LINE.findall(text)}
    compute = {buffer: mib for buffer, mib in _COMPUTE_LINE.findall(text)}
    recurrent = _recurrent_result(text, info.get("recurrent_rows"), type_ids, row_size)
    return {"caches": caches, "recurrent": recurrent, "cparams": cparams, "compute_mib": compute}


def _last_error(lines: list[str]) -> str:
    errors = _ERROR_LINE.findall("".join(lines))
    text = "".join(lines).strip().splitlines()
    return (errors[-1] if errors else (text[-1] if text else "no message")).strip()


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[1]).read_text())
    print(json.dumps(run_request(request)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
